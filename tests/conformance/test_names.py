"""One test per public name of tensordict 0.15.3: ours exists and is of the same kind, or it is excluded.

The names (and the signatures of the methods) of the reference's package, ``TensorDict``,
``TensorDictBase``, ``LazyStackedTensorDict``, ``TensorClass`` and ``MemoryMappedTensor`` are read from
the checked-in snapshot ``reference_names.json`` (``_names.py`` writes it; ``test_snapshot_is_the_reference``
checks it against the installed tensordict, when there is one). For each ``(group, name)``:

* ``test_name``: our counterpart has the name, of a compatible kind (a method may be a classmethod here,
  a context-manager class a function returning one), unless ``EXCLUDED`` lists it with the reason;
* ``test_signature``: every parameter of the reference's method is accepted by ours: the leading
  positional ones in the same order, the others by name (a name our method takes through ``**kwargs``
  counts only where ``tests/differential/test_signatures.py`` calls it), unless ``SIGNATURES`` lists it;
* ``test_no_stale_exclusion``: an entry of either table whose name or parameter now exists must go.

Group ``"*"`` in a table stands for every class group (not the package).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from differential.test_signatures import NOT_ACCEPTED, THROUGH_KWARGS

import tensorbatch

from . import _names

_QUANT = (
    "torch cannot cast a tensor to a quantized dtype (x.to(torch.qint8) raises: a quantized tensor needs a "
    "scale and a zero point); deprecated upstream, removed in 0.18: use td.apply(torch.quantize_per_tensor...)"
)

# (group, name) -> why our counterpart lacks the name (or has another kind)
EXCLUDED: dict[tuple[str, str], str] = {
    # out of scope
    ("*", "to_mds"): "MosaicML streaming (MDS) export is out of scope: it needs the mosaicml-streaming package",
    ("*", "asend"): "UCXX transport (asynchronous send over UCX) is out of scope: send/isend use torch.distributed",
    ("*", "arecv"): "UCXX transport (asynchronous receive over UCX) is out of scope: recv/irecv use torch.distributed",
    **{("*", name): _QUANT for name in ("qint8", "qint32", "quint8", "quint4x2")},
    # kinds
    ("MemoryMappedTensor", "index"): "ours is torch.Tensor.index (first-class dims); the reference shadows it "
    "with a deprecated property internal to its pickling",
}

_TC_TYPE = (
    "a private argument of the reference (the class named by import path): "
    "TensorClass.from_remote_init builds the class on the receiving side"
)

_KEYWORD_ONLY = (
    "keyword-only here, as in torch and in the reference's own sibling methods (add_, addcmul, "
    "clamp_max...); the reference alone takes it positionally here"
)
_THROUGH = "taken through **kwargs (called in test_through_kwargs)"

# (group, method) -> (the reference's parameters our method takes through **kwargs, a call passing them all)
THROUGH: dict[tuple[str, str], tuple[tuple[str, ...], Any]] = {
    ("LazyStackedTensorDict", "apply"): (
        ("device", "names", "default", "filter_empty", "propagate_lock", "call_on_nested", "is_leaf"),
        lambda tb: _stack(tb).apply(
            lambda x: x + 1,
            device="cpu",
            names=None,
            default=None,
            filter_empty=False,
            propagate_lock=False,
            call_on_nested=False,
            is_leaf=None,
        ),
    ),
    ("LazyStackedTensorDict", "empty"): (("device", "names"), lambda tb: _stack(tb).empty(device="cpu", names=None)),
    ("LazyStackedTensorDict", "lazy_stack"): (
        (
            "device",
            "out",
            "stack_dim_name",
            "strict_shape",
            "as_list",
            "as_padded_tensor",
            "as_nested_tensor",
            "padding_side",
            "layout",
            "padding_value",
        ),
        lambda tb: tb.LazyStackedTensorDict.lazy_stack(
            list(_stack(tb).tensordicts),
            0,
            device="cpu",
            out=None,
            stack_dim_name="s",
            strict_shape=False,
            as_list=False,
            as_padded_tensor=False,
            as_nested_tensor=False,
            padding_side="right",
            layout=None,
            padding_value=0.0,
        ),
    ),
    ("LazyStackedTensorDict", "update_at_"): (
        ("non_blocking", "keys_to_update"),
        lambda tb: _stack(tb).update_at_({"a": torch.ones(3)}, 0, non_blocking=False, keys_to_update=["a"]),
    ),
    ("TensorClass", "update"): (
        ("clone", "inplace"),
        lambda tb: _tc(tb).update({"a": torch.ones(3)}, clone=True, inplace=False),
    ),
    ("package", "memmap"): (
        ("num_threads", "return_early", "share_non_tensor", "existsok", "robust_key", "archive", "compression"),
        lambda tb, path: tb.memmap(
            _td(tb),
            path,
            num_threads=0,
            return_early=False,
            share_non_tensor=False,
            existsok=True,
            robust_key=None,
            archive=None,
            compression=None,
        ),
    ),
    ("package", "save"): (
        ("num_threads", "return_early", "share_non_tensor", "robust_key", "archive", "compression"),
        lambda tb, path: tb.save(
            _td(tb),
            path,
            num_threads=0,
            return_early=False,
            share_non_tensor=False,
            robust_key=None,
            archive=None,
            compression=None,
        ),
    ),
}

# (group, "method(parameter)") -> why our method does not take that parameter ("method(#i parameter)": at that
# position); the keyword tables of tests/differential/test_signatures.py (TensorDict methods) count as listed
SIGNATURES: dict[tuple[str, str], str] = {
    ("*", "addcdiv(#2 value)"): _KEYWORD_ONLY,
    ("*", "sub_(#1 alpha)"): _KEYWORD_ONLY,
    ("*", "clamp_min(#1 default)"): _KEYWORD_ONLY,
    ("package", "tensorclass(kw_only)"): "a tensorclass decorator option not supported here",
    **{(group, f"{fn}({p})"): _THROUGH for (group, fn), (params, _) in THROUGH.items() for p in params},
}


SNAPSHOT = _names.load_snapshot()
OURS = _names.read(tensorbatch)
CLASS_GROUPS = [g for g in _names.GROUPS if g != "package"]

_COMPATIBLE = {  # reference kind -> our kinds that a user can use the same way
    "method": {"method", "classmethod", "staticmethod"},
    "classmethod": {"classmethod", "staticmethod"},
    "staticmethod": {"classmethod", "staticmethod"},
    "property": {"property"},
    "attribute": {"attribute", "property"},
    "module": {"module"},
    "class": {"class"},
    "context": {"context", "class", "callable"},
    "callable": {"callable", "class", "context"},
    "value": {"value"},
}


def _excluded(table: dict[tuple[str, str], str], group: str, name: str) -> str | None:
    return table.get((group, name)) or (table.get(("*", name)) if group != "package" else None)


NAMES = [(g, n) for g, kinds in SNAPSHOT["names"].items() for n in sorted(kinds)]


@pytest.mark.parametrize(("group", "name"), NAMES, ids=[f"{g}.{n}" for g, n in NAMES])
def test_name(group, name):
    reason = _excluded(EXCLUDED, group, name)
    if reason is not None:
        pytest.skip(f"excluded: {reason}")
    ours = OURS["names"][group].get(name)
    assert ours is not None, f"{group}.{name} is missing (implement it or list it in EXCLUDED with the reason)"
    if ours == "optional":
        pytest.skip(f"{group}.{name} needs an optional dependency that is not installed")
    theirs = SNAPSHOT["names"][group][name]
    assert ours in _COMPATIBLE[theirs], f"{group}.{name} is a {ours} here, a {theirs} in the reference"


def _mismatches(theirs: list[list[str]], ours: list[list[str]], name: str) -> list[str]:
    """The reference's parameters ours does not accept, as ``name(parameter)`` (``name(#i parameter)``:
    a positional parameter that ours has under another name or not at that position)."""
    kinds = [k for _, k in ours]
    positional = [p for p, k in ours if k in ("positional", "either")]
    named = {p for p, k in ours if k in ("either", "keyword")}
    through = THROUGH_KWARGS.get(name, set()) if "**kwargs" in kinds else set()  # (called there)
    out = []
    for i, (param, kind) in enumerate(p for p in theirs if p[1] in ("positional", "either")):
        if i < len(positional):
            if kind == "either" and positional[i] != param and param in named:
                out.append(f"{name}(#{i} {param})")  # takes it by name, but elsewhere
        elif "*args" not in kinds:
            out.append(f"{name}(#{i} {param})")
    for param, kind in theirs:
        if kind in ("either", "keyword") and param not in named and param not in through:
            out.append(f"{name}({param})")
    return out


def _listed(group: str, mismatch: str) -> bool:
    """``mismatch`` (``method(parameter)`` or ``method(#i parameter)``) is in SIGNATURES, or in the NOT_ACCEPTED
    table of ``tests/differential/test_signatures.py`` (TensorDict's methods and the package's functions of the
    same name: memmap, save, load_memmap...)."""
    if _excluded(SIGNATURES, group, mismatch) is not None:
        return True
    name, _, param = mismatch.rstrip(")").partition("(")
    return param.split(" ")[-1] in NOT_ACCEPTED.get(name, {})


def _forwarder(group: str, name: str) -> bool:
    """A TensorClass method taking ``(*args, **kwargs)`` to the wrapped TensorDict's (checked under TensorDictBase)."""
    return [k for _, k in OURS["signatures"][group][name]] == ["*args", "**kwargs"]


SIGNED = [
    (g, n)
    for g, sigs in SNAPSHOT["signatures"].items()
    for n in sorted(sigs)
    if n in OURS["signatures"][g] and not _forwarder(g, n)
]


@pytest.mark.parametrize(("group", "name"), SIGNED, ids=[f"{g}.{n}" for g, n in SIGNED])
def test_signature(group, name):
    ours = OURS["signatures"][group][name]
    problems = [m for m in _mismatches(SNAPSHOT["signatures"][group][name], ours, name) if not _listed(group, m)]
    assert not problems, (
        f"{group}: the reference's parameters {problems} are not accepted here "
        f"(take them, or list them in SIGNATURES with the reason)"
    )


def test_no_stale_exclusion():
    stale = []
    for group, name in EXCLUDED:
        groups = CLASS_GROUPS if group == "*" else [group]
        ref = [g for g in groups if name in SNAPSHOT["names"][g]]
        assert ref, f"EXCLUDED lists {group}.{name}, which the reference does not have"
        if all(OURS["names"][g].get(name) in {"optional", *_COMPATIBLE[SNAPSHOT["names"][g][name]]} for g in ref):
            stale.append(f"{group}.{name}")
    for group, entry in SIGNATURES:
        name = entry.split("(")[0]
        groups = CLASS_GROUPS if group == "*" else [group]
        live = [g for g in groups if name in OURS["signatures"][g] and name in SNAPSHOT["signatures"][g]]
        assert live, f"SIGNATURES lists {group}.{entry}, a method neither side signs here"
        if all(
            entry not in _mismatches(SNAPSHOT["signatures"][g][name], OURS["signatures"][g][name], name) for g in live
        ):
            stale.append(f"{group}.{entry}")
    assert not stale, f"excluded names or parameters that are now implemented (remove them from the table): {stale}"


def test_every_exclusion_has_a_reason():
    for table in (EXCLUDED, SIGNATURES):
        assert all(isinstance(r, str) and len(r) > 10 for r in table.values())


def test_snapshot_is_the_reference():
    tensordict = pytest.importorskip("tensordict")
    if tensordict.__version__ != _names.REFERENCE_VERSION:
        pytest.skip(f"tensordict {tensordict.__version__} is installed, the snapshot is of {_names.REFERENCE_VERSION}")
    installed = json.loads(json.dumps(_names.read(tensordict)))  # tuples -> lists, as in the file
    assert installed == SNAPSHOT, "reference_names.json is stale: regenerate it (python tests/conformance/_names.py)"


def _td(tb: Any) -> Any:
    return tb.TensorDict(a=torch.zeros(3), batch_size=[3])


def _stack(tb: Any) -> Any:
    return tb.lazy_stack([_td(tb), _td(tb) + 1])


class _TC(tensorbatch.TensorClass):
    a: torch.Tensor


def _tc(tb: Any) -> Any:
    return _TC(a=torch.zeros(3), batch_size=[3])


def _saved(tb: Any, path: Any) -> Any:
    tb.save(_td(tb), path)
    return path


@pytest.mark.parametrize(("group", "name"), list(THROUGH), ids=[f"{g}.{n}" for g, n in THROUGH])
def test_through_kwargs(group, name, tmp_path):
    """Each reference parameter our method takes through ``**kwargs`` is accepted (no TypeError)."""
    call = THROUGH[(group, name)][1]
    if group == "package":
        call(tensorbatch, tmp_path / "td")
    else:
        call(tensorbatch)
