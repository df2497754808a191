"""Differential tests: a TensorClass held as an entry keeps its class through lazy stacks, consolidation and
loading a TensorClass's folder, against tensordict 0.15.3.

A lazy stack of TensorDicts that hold a TensorClass at ``"a"`` reads ``"a"`` as an instance of that class
(over a lazy stack of the members' TensorDicts), through indexing, copies, ``contiguous``/``densify`` and a
memmap round trip; ``to_tensordict`` gives TensorDicts. ``consolidate`` keeps the class (in memory, pickled,
through a file). ``TensorDict.load_memmap`` of a folder tensordict wrote for a TensorClass gives that class.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV, outcome, what

pytestmark = pytest.mark.differential

_CLASSES: dict[str, tuple[type, type]] = {}


def _classes(lib: Any) -> tuple[type, type]:
    """``Inner`` (a tensor and a string field) and ``Outer`` (``a: Any``, ``y``): one module and qualname in both.

    A folder names its class by module and qualname: tensordict imports it (the module attribute is
    tensordict's class), tensorbatch looks it up among the classes defined (kept alive here).
    """
    if lib.__name__ not in _CLASSES:
        made = []
        for name, annotations, defaults in (
            ("Inner", {"x": torch.Tensor, "s": str}, {"s": "hi"}),
            ("Outer", {"a": Any, "y": torch.Tensor}, {"a": None, "y": None}),
        ):
            qualname = f"_held_{name}"
            namespace = {"__module__": __name__, "__qualname__": qualname, "__annotations__": annotations, **defaults}
            cls = type(name, (lib.TensorClass,), namespace)
            if lib.__name__ == "tensordict":
                globals()[qualname] = cls  # (pickling and tensordict's loader import it from here)
            made.append(cls)
        _CLASSES[lib.__name__] = (made[0], made[1])
    return _CLASSES[lib.__name__]


def _holding(lib: Any, i: int = 0) -> Any:
    inner, _ = _classes(lib)
    held = inner(x=torch.arange(3.0) + i, s=f"v{i}", batch_size=[3])
    return lib.TensorDict(a=held, b=torch.full((3,), float(i)), batch_size=[3])


def _lazy(lib: Any, dim: int = 0) -> Any:
    return lib.LazyStackedTensorDict.lazy_stack([_holding(lib, 0), _holding(lib, 1)], dim)


def _memmap_round_trip(lib: Any) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        _lazy(lib).memmap(folder)
        loaded = lib.TensorDict.load_memmap(folder)
        return type(loaded).__name__, what(loaded["a"]), what(loaded[1]["a"])


def _written_through(lib: Any) -> Any:
    members = [_holding(lib, 0), _holding(lib, 1)]
    lazy = lib.LazyStackedTensorDict.lazy_stack(members, 0)
    lazy["a"].x = torch.full((2, 3), 7.0)
    lazy["a"].x[0, 0] = 5.0
    return [m["a", "x"].tolist() for m in members]


def _set_instance(lib: Any) -> Any:
    lazy = _lazy(lib)
    lazy.set("a", _classes(lib)[0](x=torch.full((2, 3), 3.0), batch_size=[2, 3]))
    return what(lazy["a"]), what(lazy[1]["a"])


LAZY_OPS: dict[str, Callable[[Any], Any]] = {
    "getitem": lambda lib: what(_lazy(lib)["a"]),
    "get": lambda lib: what(_lazy(lib).get("a")),
    "get_nested": lambda lib: what(_lazy(lib).get(("a", "x"))),
    "non_tensor_field": lambda lib: _lazy(lib)["a"].s,
    "stack_dim_1": lambda lib: what(_lazy(lib, 1)["a"]),
    "index_member": lambda lib: what(_lazy(lib)[0]["a"]),
    "index_inner_dim": lambda lib: what(_lazy(lib)[:, 0]["a"]),
    "index_slice": lambda lib: what(_lazy(lib)[0:1]["a"]),
    "index_mask": lambda lib: what(_lazy(lib)[torch.tensor([False, True])]["a"]),
    "unbind": lambda lib: what(_lazy(lib).unbind(0)[1]["a"]),
    "items": lambda lib: [(k, type(v).__name__) for k, v in _lazy(lib).items()],
    "clone": lambda lib: (type(_lazy(lib).clone()).__name__, what(_lazy(lib).clone()["a"])),
    "apply": lambda lib: what(_lazy(lib).apply(lambda t: t + 1)["a"]),
    "contiguous": lambda lib: (type(_lazy(lib).contiguous()).__name__, what(_lazy(lib).contiguous()["a"])),
    "densify": lambda lib: (type(_lazy(lib).densify()).__name__, what(_lazy(lib).densify()["a"])),
    "to_tensordict": lambda lib: what(_lazy(lib).to_tensordict()["a"]),
    "dense_stack": lambda lib: what(torch.stack([_holding(lib, 0), _holding(lib, 1)])["a"]),
    "memmap_load": _memmap_round_trip,
    "consolidate": lambda lib: what(_lazy(lib).consolidate()["a"]),
    "written_through": _written_through,
    "set_instance": _set_instance,
    "lazy_of_lazy": lambda lib: what(lib.LazyStackedTensorDict.lazy_stack([_lazy(lib), _lazy(lib)], 0)["a"]),
    "with_a_tensordict": lambda lib: (
        type(  # members holding a TensorClass and a TensorDict: a lazy stack
            lib.LazyStackedTensorDict.lazy_stack([_holding(lib), _holding(lib).to_tensordict()], 0)["a"]
        ).__name__
    ),
}


@pytest.mark.parametrize("op", list(LAZY_OPS))
def test_lazy_stack_of_tensordicts_holding_a_tensorclass(ref: Any, tb: Any, op: str) -> None:
    expected = outcome(lambda: LAZY_OPS[op](ref))
    assert outcome(lambda: LAZY_OPS[op](tb)) == expected


def test_the_reference_reads_the_class_from_lazy_stacks(ref: Any) -> None:
    """The cases above see what tensordict gives: the class, stacked, and TensorDicts from to_tensordict."""
    assert LAZY_OPS["getitem"](ref) == ("Inner", [2, 3], [("x", [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]])])
    assert LAZY_OPS["contiguous"](ref)[1][0] == "Inner"
    assert LAZY_OPS["to_tensordict"](ref)[0] == "TensorDict"
    assert LAZY_OPS["memmap_load"](ref)[1][0] == "Inner"


def _consolidated_to_file(lib: Any) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        file = os.path.join(folder, "td.bin")
        written = _holding(lib).consolidate(filename=file)
        loaded = lib.TensorDict.from_consolidated(file)
        return what(written["a"]), what(loaded["a"]), loaded["a"].s


CONSOLIDATE_OPS: dict[str, Callable[[Any], Any]] = {
    "entry": lambda lib: what(_holding(lib).consolidate()["a"]),
    "non_tensor_field": lambda lib: _holding(lib, 2).consolidate()["a"].s,
    "nested": lambda lib: what(lib.TensorDict(n=_holding(lib), batch_size=[3]).consolidate()["n", "a"]),
    "locked": lambda lib: what(_holding(lib).lock_().consolidate()["a"]),
    "pickled": lambda lib: what(pickle.loads(pickle.dumps(_holding(lib).consolidate()))["a"]),
    "clone": lambda lib: what(_holding(lib).consolidate().clone()["a"]),
    "is_consolidated": lambda lib: _holding(lib).consolidate().is_consolidated(),
    "file": _consolidated_to_file,
    "field_any": lambda lib: what(
        _classes(lib)[1](a=_classes(lib)[0](x=torch.ones(2), batch_size=[2]), batch_size=[2]).consolidate().a
    ),
}


@pytest.mark.parametrize("op", list(CONSOLIDATE_OPS))
def test_consolidate_keeps_the_class(ref: Any, tb: Any, op: str) -> None:
    expected = outcome(lambda: CONSOLIDATE_OPS[op](ref))
    assert outcome(lambda: CONSOLIDATE_OPS[op](tb)) == expected


def _tensorclass_folder(folder: str, ref: Any) -> None:
    """A folder tensordict writes for a TensorClass: meta.json names the class, its TensorDict in _tensordict/."""
    inner, outer = _classes(ref)
    outer(a=inner(x=torch.arange(2.0), s="w", batch_size=[2]), y=torch.ones(2), batch_size=[2]).memmap(folder)


ROOT_LOADS: dict[str, Callable[[Any, str], Any]] = {
    "tensordict_load": lambda lib, f: what(lib.TensorDict.load_memmap(f)),
    "field": lambda lib, f: (what(lib.TensorDict.load_memmap(f).a), lib.TensorDict.load_memmap(f).a.s),
    "is_locked": lambda lib, f: lib.TensorDict.load_memmap(f).is_locked,
    "class_load": lambda lib, f: what(_classes(lib)[1].load_memmap(f)),
    "other_class_load": lambda lib, f: what(_classes(lib)[0].load_memmap(f)),  # the class the folder names
    "values": lambda lib, f: lib.TensorDict.load_memmap(f).y.tolist(),
}


@pytest.mark.parametrize("op", list(ROOT_LOADS))
def test_load_memmap_of_a_tensorclass_folder(ref: Any, tb: Any, op: str) -> None:
    _classes(tb)  # defined here, so the folder's class is found
    with tempfile.TemporaryDirectory() as folder:
        _tensorclass_folder(folder, ref)
        expected = outcome(lambda: ROOT_LOADS[op](ref, folder))
        assert outcome(lambda: ROOT_LOADS[op](tb, folder)) == expected
    if op == "tensordict_load":
        assert expected[0] == "Outer"


@pytest.mark.skipif(
    os.environ.get(SUBJECT_ENV, "tensorbatch") != "tensorbatch", reason="tensorbatch's rule (tensordict imports)"
)
def test_load_memmap_of_a_tensorclass_folder_whose_class_is_not_defined(ref: Any, tb: Any) -> None:
    """A class not defined in this process is never imported: its TensorDict loads (tensordict imports it)."""
    with tempfile.TemporaryDirectory() as folder:
        _tensorclass_folder(folder, ref)
        meta = os.path.join(folder, "meta.json")
        with open(meta) as f:
            text = f.read()
        with open(meta, "w") as f:
            f.write(text.replace("_held_Outer", "_held_Undefined"))
        loaded = tb.TensorDict.load_memmap(folder)
        assert type(loaded) is tb.TensorDict
        assert loaded["y"].tolist() == [1.0, 1.0]
        assert type(loaded["a"]).__name__ == "Inner"  # (its class is defined)
