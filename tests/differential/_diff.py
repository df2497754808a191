"""Differential harness: run one function against tensordict and the subject, then compare.

The reference is ``tensordict`` (0.15.3). The subject is ``tensorbatch`` unless the environment variable
``TB_DIFF_SUBJECT`` names another module (``TB_DIFF_SUBJECT=tensordict`` runs the suite against the
reference itself, which is how the tests are checked).

Both libraries see identical inputs: every input is built from the same plain nested dict of tensors,
cloned once per library.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

SUBJECT_ENV = "TB_DIFF_SUBJECT"
TRACE_ENV = "TB_DIFF_TRACE"  # set to 1 (with pytest -s) to print what the reference returned or raised


# --------------------------------------------------------------------------------------------------
# Plain data: nested dicts of tensors, deterministic.
# --------------------------------------------------------------------------------------------------
def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def clone_tree(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: clone_tree(v) for k, v in x.items()}
    if isinstance(x, torch.Tensor):
        return x.clone()
    return x


def data_float(batch: tuple[int, ...]) -> dict:
    g = _gen(0)
    return {
        "a": torch.randn(*batch, 3, generator=g),
        "b": torch.randn(*batch, generator=g),
        "nested": {
            "c": torch.randn(*batch, 2, generator=g),
            "deep": {"d": torch.randn(*batch, generator=g)},
        },
    }


def data_pos(batch: tuple[int, ...]) -> dict:
    """Strictly positive floats in [0.1, 2.1): safe for log, sqrt, reciprocal, lgamma, pow."""
    g = _gen(1)
    return {
        "a": torch.rand(*batch, 3, generator=g) * 2 + 0.1,
        "b": torch.rand(*batch, generator=g) * 2 + 0.1,
        "nested": {"c": torch.rand(*batch, 2, generator=g) * 2 + 0.1},
    }


def data_unit(batch: tuple[int, ...]) -> dict:
    """Floats in (-0.9, 0.9): safe for log1p and the like."""
    g = _gen(2)
    return {
        "a": torch.rand(*batch, 3, generator=g) * 1.8 - 0.9,
        "nested": {"c": torch.rand(*batch, generator=g) * 1.8 - 0.9},
    }


def data_mixed(batch: tuple[int, ...]) -> dict:
    g = _gen(3)
    n = math.prod(batch)
    return {
        "x": torch.randn(*batch, 2, generator=g),
        "i": torch.arange(n, dtype=torch.int64).reshape(batch),
        "flag": (torch.arange(n) % 3 == 0).reshape(batch),
        "nested": {
            "y": torch.randn(*batch, generator=g),
            "deep": {"k": torch.ones(*batch, 2, dtype=torch.int32)},
        },
    }


def data_int(batch: tuple[int, ...]) -> dict:
    """Non-zero int64 leaves (safe for //, %)."""
    n = math.prod(batch)
    return {
        "i": (torch.arange(n, dtype=torch.int64) % 7 + 1).reshape(batch),
        "nested": {"j": (torch.arange(n * 2, dtype=torch.int64) % 5 + 2).reshape(*batch, 2)},
    }


def data_bool(batch: tuple[int, ...]) -> dict:
    n = math.prod(batch)
    return {
        "p": (torch.arange(n) % 2 == 0).reshape(batch),
        "nested": {"q": (torch.arange(n) % 3 == 0).reshape(batch)},
    }


def data_nan(batch: tuple[int, ...]) -> dict:
    d = data_float(batch)
    d["a"].view(-1)[::4] = float("nan")
    d["nested"]["c"].view(-1)[1::5] = float("nan")
    return d


DATA: dict[str, Callable[[tuple[int, ...]], dict]] = {
    "float": data_float,
    "pos": data_pos,
    "unit": data_unit,
    "mixed": data_mixed,
    "int": data_int,
    "bool": data_bool,
    "nan": data_nan,
}


def plain(data: str | Mapping = "float", batch_size: Any = (4, 5)) -> dict:
    """A fresh plain nested dict for ``data`` (a name from DATA, or a mapping that is cloned)."""
    if isinstance(data, str):
        return DATA[data](tuple(batch_size))
    return clone_tree(data)


def build(lib: Any, data: str | Mapping = "float", batch_size: Any = (4, 5), **kwargs: Any) -> Any:
    """Wrap a fresh plain nested dict in ``lib.TensorDict``."""
    return lib.TensorDict(plain(data, batch_size), batch_size=batch_size, **kwargs)


def _shifted(x: torch.Tensor, shift: float) -> torch.Tensor:
    if x.dtype == torch.bool:
        return ~x.flip(0)
    if x.is_floating_point():
        return x.flip(0) * 0.5 + shift
    return x.flip(0) + int(shift)


def _tree_map(fn: Callable[[torch.Tensor], torch.Tensor], x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def other_td(lib: Any, data: str = "float", shift: float = 1.0, batch_size: Any = (4, 5)) -> Any:
    """A TensorDict with the structure of ``data`` but other values (flipped, halved, shifted)."""
    return lib.TensorDict(_tree_map(lambda x: _shifted(x, shift), plain(data, batch_size)), batch_size=batch_size)


# --------------------------------------------------------------------------------------------------
# Comparison.
# --------------------------------------------------------------------------------------------------
def builtin_bases(exc_type: type) -> tuple[type, ...]:
    """The most specific builtin exception classes in ``exc_type``'s MRO.

    Usually one (``KeyError``...); tensordict has errors deriving from two (``ValueError`` and
    ``RuntimeError``), and then the subject's error must be an instance of both.
    """
    found = [k for k in exc_type.__mro__ if k.__module__ == "builtins" and issubclass(k, BaseException)]
    return tuple(k for k in found if not any(o is not k and issubclass(o, k) for o in found)) or (Exception,)


def _is_td(obj: Any, lib: Any) -> bool:
    return isinstance(obj, lib.TensorDictBase)


def assert_same(r: Any, s: Any, ref: Any, tb: Any, where: str = "result") -> None:
    """Assert the subject's ``s`` matches the reference's ``r``, type-agnostically for containers."""
    if type(r).__name__ in ("NonTensorData", "NonTensorStack"):
        assert type(s).__name__ == type(r).__name__, f"{where}: {type(s)!r} != reference {type(r).__name__}"
        assert s.batch_size == r.batch_size, f"{where}: batch_size {s.batch_size} != {r.batch_size}"
        assert_same(r.tolist(), s.tolist(), ref, tb, f"{where}.tolist()")
        return
    if _is_td(r, ref):
        assert _is_td(s, tb), f"{where}: reference gave {type(r).__name__}, subject gave {type(s)!r}"
        assert type(s).__name__ == type(r).__name__, (
            f"{where}: class {type(s).__name__} != reference {type(r).__name__}"
        )
        assert isinstance(s.batch_size, torch.Size), f"{where}: batch_size is {type(s.batch_size)!r}"
        assert s.batch_size == r.batch_size, f"{where}: batch_size {s.batch_size} != {r.batch_size}"
        assert s.device == r.device, f"{where}: device {s.device} != {r.device}"
        assert bool(s.is_locked) == bool(r.is_locked), f"{where}: is_locked {s.is_locked} != {r.is_locked}"
        r_names, s_names = list(r.names), list(s.names)
        assert s_names == r_names, f"{where}: names {s_names} != {r_names}"
        rk = set(r.keys(include_nested=True, leaves_only=True))
        sk = set(s.keys(include_nested=True, leaves_only=True))
        assert sk == rk, f"{where}: leaf keys differ: missing {rk - sk}, extra {sk - rk}"
        # all nested keys too: catches empty sub-TensorDicts kept by one library and dropped by the other
        rall, sall = set(r.keys(include_nested=True)), set(s.keys(include_nested=True))
        assert sall == rall, f"{where}: nested keys differ: missing {rall - sall}, extra {sall - rall}"
        for key in rk:
            assert_same(r.get(key), s.get(key), ref, tb, f"{where}[{key!r}]")
        for key in rall - rk:  # non-tensor leaves are not "leaves" in keys(leaves_only=True)
            if type(r.get(key)).__name__ in ("NonTensorData", "NonTensorStack"):
                assert_same(r.get(key), s.get(key), ref, tb, f"{where}[{key!r}]")
        return
    assert not _is_td(s, tb), f"{where}: reference gave {type(r)!r}, subject gave {type(s).__name__}"
    if isinstance(r, torch.Tensor):
        assert isinstance(s, torch.Tensor), f"{where}: reference gave a tensor, subject gave {type(s)!r}"
        assert s.shape == r.shape, f"{where}: shape {tuple(s.shape)} != {tuple(r.shape)}"
        assert s.dtype == r.dtype, f"{where}: dtype {s.dtype} != {r.dtype}"
        assert s.device == r.device, f"{where}: device {s.device} != {r.device}"
        assert s.requires_grad == r.requires_grad, f"{where}: requires_grad {s.requires_grad} != {r.requires_grad}"
        torch.testing.assert_close(s, r, equal_nan=True, msg=lambda m: f"{where}: {m}")
        return
    if isinstance(r, torch.Size):
        assert isinstance(s, torch.Size), f"{where}: expected torch.Size, got {type(s)!r}"
        assert s == r, f"{where}: {s} != {r}"
        return
    if isinstance(r, tuple) and hasattr(r, "_fields"):
        assert getattr(s, "_fields", None) == r._fields, f"{where}: namedtuple fields differ ({s!r})"
        for name in r._fields:
            assert_same(getattr(r, name), getattr(s, name), ref, tb, f"{where}.{name}")
        return
    if isinstance(r, (list, tuple)):
        assert type(s) is type(r), f"{where}: {type(s).__name__} != reference {type(r).__name__}"
        assert len(s) == len(r), f"{where}: length {len(s)} != {len(r)}"
        for i, (ri, si) in enumerate(zip(r, s, strict=True)):
            assert_same(ri, si, ref, tb, f"{where}[{i}]")
        return
    if isinstance(r, Mapping):
        assert isinstance(s, Mapping), f"{where}: expected a mapping, got {type(s)!r}"
        assert list(s.keys()) == list(r.keys()), f"{where}: keys {list(s)} != {list(r)}"
        for key in r:
            assert_same(r[key], s[key], ref, tb, f"{where}[{key!r}]")
        return
    if isinstance(r, (bool, int, str, type(None))):
        assert type(s) is type(r), f"{where}: {type(s).__name__} {s!r} != reference {type(r).__name__} {r!r}"
        assert s == r, f"{where}: {s!r} != {r!r}"
        return
    if isinstance(r, float):
        assert type(s) is float, f"{where}: {type(s).__name__} {s!r} != reference float {r!r}"
        assert (math.isnan(r) and math.isnan(s)) or math.isclose(s, r, rel_tol=1e-6, abs_tol=1e-9), (
            f"{where}: {s!r} != {r!r}"
        )
        return
    if isinstance(r, (torch.dtype, torch.device)):
        assert s == r, f"{where}: {s!r} != {r!r}"
        return
    if type(r).__name__.endswith("KeysView"):
        assert list(s) == list(r), f"{where}: keys view {list(s)} != {list(r)}"
        return
    assert type(s).__name__ == type(r).__name__, f"{where}: {type(s)!r} != reference {type(r)!r}"
    assert s == r, f"{where}: {s!r} != {r!r}"


# --------------------------------------------------------------------------------------------------
# Runner.
# --------------------------------------------------------------------------------------------------
def _call(fn: Callable, lib: Any, td: Any) -> tuple[Any, BaseException | None]:
    try:
        return fn(lib, td), None
    except Exception as e:
        return None, e


def _summary(obj: Any, ref: Any) -> str:
    if isinstance(obj, ref.TensorDictBase):
        leaves = ", ".join(
            f"{k}:{tuple(v.shape)}:{str(v.dtype).removeprefix('torch.')}" if isinstance(v, torch.Tensor) else str(k)
            for k, v in obj.items(include_nested=True, leaves_only=True)
        )
        return f"{type(obj).__name__}[{list(obj.batch_size)}]{{{leaves}}}"
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size):
        return f"{type(obj).__name__}(" + ", ".join(_summary(o, ref) for o in obj) + ")"
    if isinstance(obj, torch.Tensor):
        return f"Tensor{tuple(obj.shape)}:{obj.dtype}"
    return f"{type(obj).__name__} {obj!r}"[:160]


def _trace(out: Any, exc: BaseException | None, ref: Any) -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].split("::")[-1]
    msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}" if exc else _summary(out, ref)
    print(f"[ref] {test}: {msg}", file=sys.stderr)


def run_both(
    ref: Any,
    tb: Any,
    fn: Callable[[Any, Any], Any],
    *,
    data: str | Mapping | None = "float",
    batch_size: Any = (4, 5),
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    check_input: bool = True,
    **td_kwargs: Any,
) -> tuple[Any, Any]:
    """Run ``fn(lib, td)`` with each library on the same data and compare outcomes.

    Args:
        fn: called as ``fn(lib, td)``, where ``lib`` is the module and ``td`` its TensorDict built
            from ``data`` (``None`` when ``data`` is ``None``).
        data: a name from :data:`DATA` or a plain mapping of tensors.
        batch_size: passed to ``lib.TensorDict``.
        raises: the exception the reference is expected to raise (the test's premise: a case without it
            fails when the reference raises, and one with it fails when the reference raises anything
            else or returns); the subject must then raise the same builtin exception type.
        check_input: also compare the input TensorDicts after ``fn`` (catches in-place differences).
        **td_kwargs: extra constructor keyword arguments (``device``, ``names``...).

    Returns:
        The reference and subject results (``None`` for both when the reference raised).
    """
    tds = []
    outcomes = []
    for lib in (ref, tb):
        td = None if data is None else build(lib, data, batch_size, **td_kwargs)
        tds.append(td)
        outcomes.append(_call(fn, lib, td))
    (r_out, r_exc), (s_out, s_exc) = outcomes
    r_td, s_td = tds
    if os.environ.get(TRACE_ENV):
        _trace(r_out, r_exc, ref)

    if r_exc is not None:
        if raises is None:
            raise AssertionError(
                f"test premise: reference raised {type(r_exc).__name__} ({r_exc}) and the case does not expect it;"
                f" if raising is tensordict's right behaviour, say so with raises={type(r_exc).__name__}"
            ) from r_exc
        if not isinstance(r_exc, raises):
            raise AssertionError(f"test premise: reference raised {type(r_exc).__name__}, not {raises}") from r_exc
        bases = builtin_bases(type(r_exc))
        names = "+".join(b.__name__ for b in bases)
        if s_exc is None:
            pytest.fail(
                f"reference raised {type(r_exc).__name__} ({names}): {r_exc}\nsubject returned {s_out!r}",
                pytrace=False,
            )
        if not all(isinstance(s_exc, b) for b in bases):
            raise AssertionError(
                f"reference raised {type(r_exc).__name__} (builtin base {names}): {r_exc}\n"
                f"subject raised {type(s_exc).__name__}: {s_exc}"
            ) from s_exc
        return None, None

    if raises is not None:
        raise AssertionError(f"test premise: reference did not raise {raises}, returned {r_out!r}")
    if s_exc is not None:
        raise AssertionError(
            f"subject raised {type(s_exc).__name__}: {s_exc}\nreference returned {type(r_out).__name__}"
        ) from s_exc

    assert_same(r_out, s_out, ref, tb)
    if r_td is not None:
        assert (r_out is r_td) == (s_out is s_td), (
            f"identity: reference result {'is' if r_out is r_td else 'is not'} its input, subject differs"
        )
        if check_input:
            assert_same(r_td, s_td, ref, tb, where="input after fn")
    return r_out, s_out


def case(case_id: str, fn: Callable, **kwargs: Any) -> Any:
    """A ``pytest.param`` of (fn, run_both keyword arguments)."""
    return pytest.param(fn, kwargs, id=case_id)


def what(value: Any) -> Any:
    """What a read gives, comparable across the libraries: the class name, then a tensor's values, a tensor
    collection's batch size and leaves (sorted by key), or the value itself."""
    if isinstance(value, torch.Tensor):
        return ("Tensor", value.tolist())
    if hasattr(value, "batch_size"):
        leaves = {k: v.tolist() for k, v in value.items(include_nested=True, leaves_only=True)}
        return (type(value).__name__, list(value.batch_size), sorted(leaves.items(), key=str))
    return (type(value).__name__, value)


def outcome(fn: Callable[[], Any]) -> Any:
    """``fn()``, or ``("raises", error type name)``."""
    try:
        return fn()
    except Exception as err:
        return ("raises", type(err).__name__)


def named_classes(lib: Any, module: dict[str, Any], prefix: str, specs: Any) -> list[type]:
    """TensorClasses of ``lib`` with one module and qualname in both libraries: the class a folder names.

    ``specs``: ``(name, annotations, defaults)`` each; ``module`` is the calling test module's ``globals()``.
    tensordict imports the class a folder names, so its classes become attributes of that module (qualname
    ``prefix + name``); tensorbatch only looks the name up among the classes defined (the caller keeps them).
    """
    made = []
    for name, fields, defaults in specs:
        qualname = f"{prefix}{name}"
        namespace = {"__module__": module["__name__"], "__qualname__": qualname, "__annotations__": fields}
        cls = type(name, (lib.TensorClass,), {**namespace, **defaults})
        if lib.__name__ == "tensordict":
            module[qualname] = cls
        made.append(cls)
    return made
