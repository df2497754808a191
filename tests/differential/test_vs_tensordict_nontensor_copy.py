"""Differential tests, non-tensor leaves: what copies copy (clone, copy, deepcopy), dim names, list options.

``clone()`` deep-copies non-tensor values (``copy.deepcopy`` of each, once per stack member);
``clone(recurse=False)``, ``copy()`` and ``copy.copy`` give new ``dict``/``list``/``tuple`` containers
over the same items; ``to_tensordict`` and value operations share the values. Cases return identity
flags (``is`` against the original objects) and the values, so both libraries must agree on both.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


class _Obj:
    """A plain object (deep-copied by ``copy.deepcopy``, shared by a container copy)."""

    def __init__(self) -> None:
        self.inner = [1, 2]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Obj) and other.inner == self.inner

    __hash__ = None  # type: ignore[assignment]


def _source(lib: Any) -> tuple[Any, dict[str, Any]]:
    """A TensorDict holding a dict ``d``, an object ``o``, a MetaData ``m``, a stack ``l`` and a nested ``n.s``."""
    objs = {"d": {"k": [1]}, "o": _Obj(), "m": _Obj(), "l0": [1], "l1": [2], "n": ["x"]}
    td = lib.TensorDict({"x": torch.zeros(2)}, [2])
    td.set_non_tensor("d", objs["d"])
    td.set_non_tensor("o", objs["o"])
    td["m"] = lib.MetaData(objs["m"], batch_size=[2])
    td["l"] = lib.NonTensorStack(objs["l0"], objs["l1"])
    td["n"] = lib.TensorDict({"s": lib.NonTensorData(objs["n"], batch_size=[2])}, [2])
    return td, objs


def _report(out: Any, objs: dict[str, Any]) -> Any:
    """For each leaf: the class, whether its value is the original object (and its items), and the values."""
    d, o, m = out.get("d").data, out.get("o").data, out.get("m").data
    stack = out.get("l").tolist()
    nested = out.get(("n", "s")).data
    return {
        "d": (d is objs["d"], d["k"] is objs["d"]["k"], d),
        "o": (o is objs["o"], o.inner is objs["o"].inner, o.inner),
        "m": (type(out.get("m")).__name__, m is objs["m"]),
        "l": (type(out.get("l")).__name__, stack[0] is objs["l0"], stack[1] is objs["l1"], stack),
        "n": (nested is objs["n"], nested),
    }


def _copy_case(case_id: str, op: Any) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        td, objs = _source(lib)
        return _report(op(lib, td), objs)

    return pytest.param(fn, {}, id=case_id)


def _lazy_clone(lib: Any, td: Any, recurse: bool) -> Any:
    return lib.lazy_stack([td, td.clone(False)]).clone(recurse)[0]


COPIES = [
    _copy_case("nt_clone", lambda lib, td: td.clone()),
    _copy_case("nt_clone_shallow", lambda lib, td: td.clone(recurse=False)),
    _copy_case("nt_copy", lambda lib, td: td.copy()),
    _copy_case("nt_copy_module", lambda lib, td: copy.copy(td)),
    _copy_case("nt_deepcopy_module", lambda lib, td: copy.deepcopy(td)),
    _copy_case("nt_torch_clone", lambda lib, td: torch.clone(td)),
    _copy_case("nt_to_tensordict", lambda lib, td: td.to_tensordict()),
    _copy_case("nt_update_clone", lambda lib, td: lib.TensorDict({}, [2]).update(td, clone=True)),
    _copy_case("nt_split_keys", lambda lib, td: td.split_keys(["x"])[1]),
    _copy_case("nt_apply_shares", lambda lib, td: td.apply(lambda x: x + 1)),
    _copy_case("nt_select_shares", lambda lib, td: td.select("d", "o", "m", "l", "n")),
    _copy_case("nt_clone_locked", lambda lib, td: td.lock_().clone()),
    _copy_case("nt_lazy_clone", lambda lib, td: _lazy_clone(lib, td, True)),
    _copy_case("nt_lazy_clone_shallow", lambda lib, td: _lazy_clone(lib, td, False)),
]


@pytest.mark.parametrize(("fn", "kw"), COPIES)
def test_nontensor_copies(run_both, fn, kw):
    run_both(fn, data=None, **kw)


def _flags(value: Any, original: Any) -> Any:
    return value is original, value == original


def _leaf_copy(make: Any, op: Any) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        original = {"k": [1]}
        leaf = make(lib, original)
        out = op(leaf)
        values = out.tolist() if out.batch_dims else [out.data]
        flat = values if not isinstance(values[0], list) else [v for row in values for v in row]
        return type(out).__name__, [_flags(v, original) for v in flat], [v["k"] is original["k"] for v in flat]

    return fn


def _data(lib: Any, value: Any) -> Any:
    return lib.NonTensorData(value, batch_size=[2])


def _meta(lib: Any, value: Any) -> Any:
    return lib.MetaData(value, batch_size=[2])


def _stack(lib: Any, value: Any) -> Any:
    return lib.NonTensorStack(value, value)


def _expanded(lib: Any, value: Any) -> Any:
    td = lib.TensorDict({"x": torch.zeros(2)}, [2])
    td.set_non_tensor("v", value)
    return td.expand(3, 2).get("v")


LEAF_COPIES = [
    pytest.param(_leaf_copy(make, op), id=f"nt_{name}_{op_name}")
    for name, make in (("data", _data), ("meta", _meta), ("stack", _stack), ("expanded", _expanded))
    for op_name, op in (
        ("clone", lambda leaf: leaf.clone()),
        ("clone_shallow", lambda leaf: leaf.clone(recurse=False)),
        ("copy", lambda leaf: leaf.copy()),
        ("copy_module", copy.copy),
        ("deepcopy_module", copy.deepcopy),
    )
]


@pytest.mark.parametrize("fn", LEAF_COPIES)
def test_nontensor_leaf_copies(run_both, fn):
    run_both(fn, data=None)


def _with_lock(lib: Any) -> Any:
    td = lib.TensorDict({"x": torch.zeros(2)}, [2])
    td.set_non_tensor("lock", threading.Lock())
    return td


OTHERS = [
    pytest.param(lambda lib, _: _with_lock(lib).clone(), {"raises": TypeError}, id="nt_clone_uncopyable"),
    pytest.param(
        lambda lib, _: _with_lock(lib).clone(recurse=False).get("lock").data is not None, {}, id="nt_shallow_uncopyable"
    ),
    pytest.param(
        lambda lib, _: (lambda td: type(torch.stack([td, td.clone()]).get("m")).__name__)(_source(lib)[0]),
        {},
        id="nt_metadata_stacked_with_clone",
    ),
    pytest.param(
        lambda lib, _: (lambda td: type(torch.stack([td, td.copy()]).get("m")).__name__)(_source(lib)[0]),
        {},
        id="nt_metadata_stacked_with_copy",
    ),
]


@pytest.mark.parametrize(("fn", "kw"), OTHERS)
def test_nontensor_copy_others(run_both, fn, kw):
    run_both(fn, data=None, **kw)
