"""Differential tests, what a non-tensor leaf carries: copies of its values, dim names, the lock, list options.

``clone()`` deep-copies non-tensor values (``copy.deepcopy`` of each, once per stack member);
``clone(recurse=False)``, ``copy()`` and ``copy.copy`` give new ``dict``/``list``/``tuple`` containers
over the same items; ``to_tensordict`` and value operations share the values. Cases return identity
flags (``is`` against the original objects) and the values, so both libraries must agree on both.
A TensorDict's dim names and its lock are its non-tensor leaves' too.
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


# --------------------------------------------------------------------------------------------------
# Dim names: a TensorDict's names are its non-tensor leaves' names too
# --------------------------------------------------------------------------------------------------
def _named(lib: Any, names: Any = None) -> Any:
    """Batch [2, 3]: ``x``, a NonTensorData ``s`` and a nested ``n.s2`` of batch [2, 3, 4]."""
    return lib.TensorDict(
        {
            "x": torch.zeros(2, 3),
            "s": "hi",
            "n": lib.TensorDict({"s2": lib.NonTensorData("q", batch_size=[2, 3, 4])}, [2, 3, 4]),
        },
        [2, 3],
        names=names,
    )


def _stack_named(lib: Any) -> Any:
    """A TensorDict holding a NonTensorStack ``l``, named after it was built."""
    td = lib.TensorDict({"x": torch.zeros(2, 3), "l": [["a", "b", "c"], ["d", "e", "f"]]}, [2, 3])
    td.names = ["a", "b"]
    return td


def _names_of(out: Any) -> Any:
    return {key: out.get(key).names for key in ("s", ("n", "s2")) if out.get(key, None) is not None}


def _set_names(td: Any, names: Any) -> Any:
    td.names = names
    return td


def _names_case(case_id: str, op: Any) -> Any:
    return pytest.param(lambda lib, _: _names_of(op(lib)), {}, id=case_id)


NAMES = [
    _names_case("nt_names_ctor", lambda lib: _named(lib, ["a", "b"])),
    _names_case("nt_names_setter", lambda lib: _set_names(_named(lib), ["a", "b"])),
    _names_case("nt_names_partial", lambda lib: _named(lib, ["a", None])),
    _names_case("nt_names_reset", lambda lib: _set_names(_named(lib, ["a", "b"]), None)),
    _names_case("nt_names_refine", lambda lib: _named(lib).refine_names("a", "b")),
    _names_case("nt_names_refine_ellipsis", lambda lib: _named(lib).refine_names(..., "b")),
    _names_case("nt_names_rename", lambda lib: _named(lib, ["a", "b"]).rename("c", "d")),
    _names_case("nt_names_rename_", lambda lib: _named(lib, ["a", "b"]).rename_(a="z")),
    _names_case("nt_names_index", lambda lib: _named(lib, ["a", "b"])[0]),
    _names_case("nt_names_unbind", lambda lib: _named(lib, ["a", "b"]).unbind(0)[0]),
    _names_case("nt_names_squeeze", lambda lib: _named(lib, ["a", "b"])[:1].squeeze(0)),
    _names_case("nt_names_unsqueeze", lambda lib: _named(lib, ["a", "b"]).unsqueeze(0)),
    _names_case("nt_names_expand", lambda lib: _named(lib, ["a", "b"]).expand(4, 2, 3)),
    _names_case("nt_names_expand_index", lambda lib: _named(lib, ["a", "b"]).expand(4, 2, 3)[0]),
    _names_case("nt_names_permute", lambda lib: _named(lib, ["a", "b"]).permute(1, 0)),
    _names_case("nt_names_reshape", lambda lib: _named(lib, ["a", "b"]).reshape(6)),
    _names_case("nt_names_stack", lambda lib: torch.stack([_named(lib, ["a", "b"])] * 2)),
    _names_case("nt_names_stack_index", lambda lib: torch.stack([_named(lib, ["a", "b"])] * 2)[0]),
    _names_case("nt_names_cat", lambda lib: torch.cat([_named(lib, ["a", "b"])] * 2)),
    _names_case("nt_names_clone", lambda lib: _named(lib, ["a", "b"]).clone()),
    _names_case("nt_names_clone_shallow", lambda lib: _named(lib, ["a", "b"]).clone(False)),
    _names_case("nt_names_apply", lambda lib: _named(lib, ["a", "b"]).apply(lambda x: x + 1)),
    _names_case("nt_names_float", lambda lib: _named(lib, ["a", "b"]).float()),
    _names_case(
        "nt_names_where",
        lambda lib: _named(lib, ["a", "b"]).where(torch.ones(2, 3, dtype=torch.bool), _named(lib, ["a", "b"])),
    ),
    pytest.param(
        lambda lib, _: (lambda td: (td.set_non_tensor("t", "v"), td.get("t").names)[1])(_named(lib, ["a", "b"])),
        {},
        id="nt_names_set_non_tensor",
    ),
    pytest.param(
        lambda lib, _: (lambda td: (td.set("t", "v"), td.get("t").names)[1])(_named(lib, ["a", "b"])),
        {},
        id="nt_names_set",
    ),
    pytest.param(
        lambda lib, _: _named(lib, ["a", "b"]).update({"t": lib.NonTensorData("v", batch_size=[2, 3])}).get("t").names,
        {},
        id="nt_names_update",
    ),
    pytest.param(
        lambda lib, _: lib.TensorDict({"s": lib.NonTensorData("x", batch_size=[2], names=["q"])}, [2]).get("s").names,
        {},
        id="nt_names_kept_by_unnamed_td",
    ),
    pytest.param(lambda lib, _: _stack_named(lib).get("l").names, {}, id="nt_names_stack_setter"),
    pytest.param(lambda lib, _: _stack_named(lib).rename("c", "d").get("l").names, {}, id="nt_names_stack_rename"),
    pytest.param(
        lambda lib, _: [lib.NonTensorData("x", batch_size=[2], names=["q"]).names, lib.NonTensorStack("x", "y").names],
        {},
        id="nt_names_leaf_ctor",
    ),
    pytest.param(
        lambda lib, _: (lambda nt: (setattr(nt, "names", ["p"]), nt.names, nt.unsqueeze(1).names)[1:])(
            lib.NonTensorData("x", batch_size=[2])
        ),
        {},
        id="nt_names_leaf_setter",
    ),
    pytest.param(
        lambda lib, _: (lambda nt: __import__("pickle").loads(__import__("pickle").dumps(nt)).names)(
            lib.NonTensorData("x", batch_size=[2], names=["q"])
        ),
        {},
        id="nt_names_pickle",
    ),
]


@pytest.mark.parametrize(("fn", "kw"), NAMES)
def test_nontensor_names(run_both, fn, kw):
    run_both(fn, data=None, **kw)


# --------------------------------------------------------------------------------------------------
# The lock: locking a TensorDict locks its non-tensor leaves; memmap returns a locked leaf
# --------------------------------------------------------------------------------------------------
def _locked(op: Any) -> Any:
    return lambda lib, _: op(lib).is_locked


LOCKS = [
    pytest.param(_locked(lambda lib: lib.NonTensorData("x", batch_size=[2]).lock_()), id="nt_lock_data"),
    pytest.param(_locked(lambda lib: lib.NonTensorData("x", batch_size=[2]).lock_().unlock_()), id="nt_unlock_data"),
    pytest.param(_locked(lambda lib: lib.NonTensorStack("x", "y").lock_()), id="nt_lock_stack"),
    pytest.param(_locked(lambda lib: lib.TensorDict({"s": "x"}, [2]).lock_().get("s")), id="nt_lock_with_td"),
    pytest.param(
        _locked(lambda lib: lib.TensorDict({"s": ["x", "y"]}, [2]).lock_().get("s")), id="nt_lock_stack_with_td"
    ),
    pytest.param(
        _locked(lambda lib: lib.TensorDict({"n": {"s": "x"}}, [2]).lock_().get(("n", "s"))), id="nt_lock_nested"
    ),
    pytest.param(
        _locked(lambda lib: lib.TensorDict({"s": "x"}, [2]).lock_().unlock_().get("s")), id="nt_unlock_with_td"
    ),
    pytest.param(
        _locked(lambda lib: lib.TensorDict({"s": "x"}, [2]).lock_()[0].get("s")), id="nt_lock_dropped_by_index"
    ),
    pytest.param(
        _locked(lambda lib: lib.TensorDict({"s": "x"}, [2]).lock_().clone().get("s")), id="nt_lock_dropped_by_clone"
    ),
    pytest.param(
        _locked(lambda lib: lib.NonTensorData("x", batch_size=[2]).lock_()[0]), id="nt_lock_dropped_by_leaf_index"
    ),
    pytest.param(
        lambda lib, _: (lambda nt: (nt.__setitem__(0, "z"), nt.tolist())[1])(lib.NonTensorStack("x", "y").lock_()),
        id="nt_locked_stack_still_written",
    ),
]


@pytest.mark.parametrize("fn", LOCKS)
def test_nontensor_lock(run_both, fn):
    run_both(fn, data=None)


# --------------------------------------------------------------------------------------------------
# set_list_to_stack(False): a list is stored as numpy's array of it (a tensor when it holds numbers)
# --------------------------------------------------------------------------------------------------
def _stored(value: Any) -> Any:
    """What ``td["v"] = value`` stores under ``set_list_to_stack(False)``: class, value's type and dtype, values."""

    def fn(lib: Any, _: Any) -> Any:
        with pytest.warns(DeprecationWarning, match=r"set_list_to_stack\(False\) is deprecated"):
            off = lib.set_list_to_stack(False)
        with off:
            td = lib.TensorDict({"x": torch.zeros(2)}, [2])
            td["v"] = value
            leaf, got = td.get("v"), td["v"]
        kind = str(getattr(got, "dtype", None))
        values = got.tolist() if hasattr(got, "tolist") else got
        return type(leaf).__name__, type(got).__name__, kind, values

    return fn


LIST_OFF = [
    pytest.param(_stored(["a", "b"]), id="nt_list_off_str"),
    pytest.param(_stored(["a", "b", "c"]), id="nt_list_off_other_length"),
    pytest.param(_stored([["a"], ["b"]]), id="nt_list_off_nested"),
    pytest.param(_stored([b"a", b"b"]), id="nt_list_off_bytes"),
    pytest.param(_stored([{"k": 1}, {"k": 2}]), id="nt_list_off_dicts"),
    pytest.param(_stored([None, None]), id="nt_list_off_none"),
    pytest.param(_stored([1, 2]), id="nt_list_off_ints"),
    pytest.param(_stored([1, 2.5]), id="nt_list_off_floats"),
    pytest.param(_stored([torch.zeros(1), torch.ones(1)]), id="nt_list_off_tensors"),
    pytest.param(_stored(("a", "b")), id="nt_tuple_off_str"),
    pytest.param(
        lambda lib, _: (lambda td: (td.set("v", ("a", "b")), td["v"].tolist(), type(td.get("v")).__name__)[1:])(
            lib.TensorDict({}, [2])
        ),
        id="nt_tuple_of_str",
    ),
    pytest.param(
        lambda lib, _: (lambda td: (td.set_non_tensor("v", ["a", "b"]), td["v"])[1])(lib.TensorDict({}, [2])),
        id="nt_set_non_tensor_list",
    ),
]


@pytest.mark.parametrize("fn", LIST_OFF)
def test_nontensor_list_to_stack_off(run_both, fn):
    run_both(fn, data=None)


# --------------------------------------------------------------------------------------------------
# A non-tensor leaf updated from another one takes its value(s) in place
# --------------------------------------------------------------------------------------------------
def _data2(lib: Any, value: str) -> Any:
    return lib.NonTensorData(value, batch_size=[2])


UPDATES = [
    pytest.param(lambda lib, _: _data2(lib, "x").update_(_data2(lib, "z")).data, {}, id="nt_update_inplace"),
    pytest.param(lambda lib, _: _data2(lib, "x").update(_data2(lib, "z")).data, {}, id="nt_update"),
    pytest.param(lambda lib, _: _data2(lib, "x").copy_(_data2(lib, "z")).data, {}, id="nt_copy_inplace"),
    pytest.param(
        lambda lib, _: lib.NonTensorStack("x", "y").update_(lib.NonTensorStack("a", "b")).tolist(),
        {},
        id="nt_stack_update",
    ),
    pytest.param(
        lambda lib, _: lib.NonTensorStack("x", "y").update_(_data2(lib, "a")).tolist(), {}, id="nt_stack_update_data"
    ),
    pytest.param(
        lambda lib, _: _data2(lib, "x").update_(lib.NonTensorStack("a", "b")),
        {"raises": RuntimeError},
        id="nt_data_update_stack",
    ),
    pytest.param(
        lambda lib, _: (lambda td: (td.update_(lib.TensorDict({"s": "z"}, [2])), td["s"])[1])(
            lib.TensorDict({"s": "x"}, [2])
        ),
        {},
        id="nt_td_update_inplace",
    ),
]


@pytest.mark.parametrize(("fn", "kw"), UPDATES)
def test_nontensor_update(run_both, fn, kw):
    run_both(fn, data=None, **kw)
