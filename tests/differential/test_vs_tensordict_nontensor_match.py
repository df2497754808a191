"""Differential tests, non-tensor leaves: which leaf objects a copy keeps, dim names as set, lists as set.

- ``to_tensordict()`` keeps the very non-tensor leaf objects of in-memory nodes (nested ones too), and
  ``td[:]`` (any index of ``:``s and one ``...``) is the TensorDict itself; cases return ``is`` flags.
- A non-tensor leaf set into a named TensorDict (constructor, setter, ``update``) takes its names, or
  raises ``RuntimeError`` if it names a dim otherwise; a stack made of a list stays unnamed.
- Under the default ``set_list_to_stack(True)`` a list is read level by level: tensors of one shape
  stack, numbers give tensors, other values a ``NonTensorStack`` as deep as the lists are regular.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.differential

_KEYS = ["x", "d", "l", "m", "n", ("n", "s"), ("n", "st")]


def _source(lib: Any, names: Any = None) -> Any:
    """Batch [2]: a tensor, NonTensorData, NonTensorStack, MetaData and a nested node holding both kinds."""
    td = lib.TensorDict({"x": torch.zeros(2)}, [2], names=names)
    td.set_non_tensor("d", {"k": 1})
    td["l"] = lib.NonTensorStack("a", "b")
    td["m"] = lib.MetaData(3, batch_size=[2])
    td["n"] = lib.TensorDict({"s": lib.NonTensorData("z", batch_size=[2]), "st": lib.NonTensorStack("p", "q")}, [2])
    return td


def _same(op: Any, names: Any = None) -> Any:
    """``op(td)``: whether it is ``td``, whether each entry is ``td``'s, its class, lock and names."""

    def fn(lib: Any, _: Any) -> Any:
        td = _source(lib, names)
        out = op(td)
        return (
            out is td,
            [out.get(k) is td.get(k) for k in _KEYS],
            type(out).__name__,
            out.is_locked,
            out.names,
            out.get("d").names,
        )

    return fn


IDENTITY = [
    pytest.param(_same(lambda td: td.to_tensordict()), id="nt_same_to_tensordict"),
    pytest.param(_same(lambda td: td.to_tensordict(retain_none=True)), id="nt_same_to_tensordict_retain_none"),
    pytest.param(_same(lambda td: td.to_tensordict(), ["a"]), id="nt_same_to_tensordict_named"),
    pytest.param(_same(lambda td: td.lock_().to_tensordict()), id="nt_same_to_tensordict_locked"),
    pytest.param(
        lambda lib, _: (lambda out: (out.is_locked, out.get("d").is_locked, out.get(("n", "s")).is_locked))(
            _source(lib).lock_().to_tensordict()
        ),
        id="nt_to_tensordict_leaf_lock",
    ),
    pytest.param(_same(lambda td: td[:]), id="nt_same_full_slice"),
    pytest.param(_same(lambda td: td[:], ["a"]), id="nt_same_full_slice_named"),
    pytest.param(_same(lambda td: td.lock_()[:]), id="nt_same_full_slice_locked"),
    pytest.param(_same(lambda td: td[(slice(None),)]), id="nt_same_full_slice_tuple"),
    pytest.param(_same(lambda td: td[..., :]), id="nt_same_ellipsis_slice"),
    pytest.param(_same(lambda td: td[:, ...]), id="nt_same_slice_ellipsis"),
    pytest.param(_same(lambda td: td[...]), id="nt_same_ellipsis"),
    pytest.param(_same(lambda td: td[0:2]), id="nt_new_bounded_slice"),
    pytest.param(_same(lambda td: td[::1]), id="nt_new_stepped_slice"),
    pytest.param(_same(lambda td: td[torch.arange(2)]), id="nt_new_tensor_index"),
]


@pytest.mark.parametrize("fn", IDENTITY)
def test_nontensor_same_leaves(run_both, fn):
    run_both(fn, data=None)


def _two_dims(lib: Any, op: Any) -> Any:
    td = lib.TensorDict({"x": torch.zeros(2, 3)}, [2, 3])
    td.set_non_tensor("d", "v")
    out = op(td)
    return out is td, out.batch_size, out.get("d") is td.get("d")


def _lazy_full_slice(lib: Any) -> Any:
    stack = lib.lazy_stack([_source(lib), _source(lib)])
    out = stack[:]
    return out is stack, type(out).__name__, out.batch_size


def _tensorclass_full_slice(lib: Any) -> Any:
    @lib.tensorclass
    class _C:
        x: torch.Tensor
        s: str

    obj = _C(x=torch.zeros(2), s="a", batch_size=[2])
    out = obj[:]
    return out is obj, out._tensordict is obj._tensordict, out.x is obj.x


FULL_INDEX = [
    pytest.param(lambda lib, _: _two_dims(lib, lambda td: td[:, :]), {}, id="nt_2d_slices"),
    pytest.param(lambda lib, _: _two_dims(lib, lambda td: td[:]), {}, id="nt_2d_one_slice"),
    pytest.param(lambda lib, _: _two_dims(lib, lambda td: td[:, 0:3]), {}, id="nt_2d_bounded"),
    pytest.param(lambda lib, _: _two_dims(lib, lambda td: td[:, None]), {}, id="nt_2d_none"),
    pytest.param(lambda lib, _: _two_dims(lib, lambda td: td[:, :, :]), {"raises": IndexError}, id="nt_2d_too_many"),
    pytest.param(lambda lib, _: lib.TensorDict({}, [])[:], {"raises": RuntimeError}, id="nt_0d_slice"),
    pytest.param(lambda lib, _: _lazy_full_slice(lib), {}, id="nt_lazy_full_slice"),
    pytest.param(lambda lib, _: _tensorclass_full_slice(lib), {}, id="nt_tensorclass_full_slice"),
]


@pytest.mark.parametrize(("fn", "kw"), FULL_INDEX)
def test_nontensor_full_index(run_both, fn, kw):
    run_both(fn, data=None, **kw)


# --------------------------------------------------------------------------------------------------
# Dim names of a non-tensor leaf set into a named TensorDict
# --------------------------------------------------------------------------------------------------
def _data(lib: Any, bs: Any = (2,), names: Any = None) -> Any:
    return lib.NonTensorData("v", batch_size=list(bs), names=names)


def _set(value: Any, bs: Any = (2,), names: Any = ("a",), key: Any = "v") -> Any:
    """``td[key] = value(lib)`` into a TensorDict named ``names``: the leaf's names (or the error's gist)."""

    def fn(lib: Any, _: Any) -> Any:
        td = lib.TensorDict({}, list(bs), names=None if names is None else list(names))
        try:
            td[key] = value(lib)
        except RuntimeError as err:
            return "RuntimeError", str(err).split(":")[0], "cannot coerce TensorDict names" in str(err)
        return td.get(key).names

    return fn


def _built(source: Any, bs: Any = (2,), names: Any = ("a",), key: Any = "v") -> Any:
    """``TensorDict(source(lib), bs, names=names)``: the names of ``key`` (or the error's gist)."""

    def fn(lib: Any, _: Any) -> Any:
        try:
            td = lib.TensorDict(source(lib), list(bs), names=list(names))
        except RuntimeError as err:
            return "RuntimeError", str(err).split(":")[0], "cannot coerce TensorDict names" in str(err)
        return td.get(key).names, td.names

    return fn


def _stack(lib: Any) -> Any:
    return lib.NonTensorStack("x", "y")


NAMES = [
    pytest.param(_built(lambda lib: {"v": _stack(lib)}), id="nt_ctor_names_stack"),
    pytest.param(_built(lambda lib: {"v": ["x", "y"]}), id="nt_ctor_list_stack_unnamed"),
    pytest.param(_built(lambda lib: {"v": [["x", "y"]] * 2}, (2, 2), ("a", "b")), id="nt_ctor_list_2d_unnamed"),
    pytest.param(_built(lambda lib: {"n": {"v": ["x", "y"]}}, key=("n", "v")), id="nt_ctor_nested_list_unnamed"),
    pytest.param(_built(lambda lib: {("n", "v"): ["x", "y"]}, key=("n", "v")), id="nt_ctor_nested_key_list"),
    pytest.param(_built(lambda lib: {("n", "v"): "x"}, key=("n", "v")), id="nt_ctor_nested_key_str"),
    pytest.param(_built(lambda lib: {"v": "x"}), id="nt_ctor_str_named"),
    pytest.param(_built(lambda lib: {"v": _data(lib)}), id="nt_ctor_data_named"),
    pytest.param(_built(lambda lib: {"v": _data(lib, names=["z"])}), id="nt_ctor_data_other_names"),
    pytest.param(_built(lambda lib: {"v": _stack(lib).refine_names("z")}), id="nt_ctor_stack_other_names"),
    pytest.param(_built(lambda lib: {"n": {"v": _data(lib, names=["z"])}}, key=("n", "v")), id="nt_ctor_nested_other"),
    pytest.param(_built(lambda lib: {"v": _data(lib, (2, 3), [None, "q"])}), id="nt_ctor_data_extra_dim_named"),
    pytest.param(
        _built(lambda lib: {"n": lib.TensorDict({"v": ["x", "y"]}, [2])}, key=("n", "v")), id="nt_ctor_td_list_named"
    ),
    pytest.param(
        _built(lambda lib: {"n": lib.TensorDict({"v": ["x", "y"]}, [2], names=["a"])}, key=("n", "v")),
        id="nt_ctor_named_td_list_kept",
    ),
    pytest.param(_set(_stack), id="nt_set_stack_named"),
    pytest.param(_set(lambda lib: ["x", "y"]), id="nt_set_list_unnamed"),
    pytest.param(_set(lambda lib: "x"), id="nt_set_str_named"),
    pytest.param(_set(lambda lib: _data(lib, names=["a"])), id="nt_set_same_names"),
    pytest.param(_set(lambda lib: _data(lib, names=["z"])), id="nt_set_other_names"),
    pytest.param(_set(lambda lib: _stack(lib).refine_names("z")), id="nt_set_stack_other_names"),
    pytest.param(_set(lambda lib: _data(lib, names=["z"]), key=("n", "v")), id="nt_set_nested_key_other_names"),
    pytest.param(_set(lambda lib: _data(lib, (2, 3), [None, "q"])), id="nt_set_extra_dim_named"),
    pytest.param(_set(lambda lib: _data(lib, (2, 3), ["z", "q"])), id="nt_set_extra_dim_other"),
    pytest.param(_set(lambda lib: _data(lib, (2, 3), [None, "b"]), (2, 3), ("a", None)), id="nt_set_unnamed_dim"),
    pytest.param(_set(lambda lib: _data(lib, names=["z"]), names=None), id="nt_set_other_names_unnamed_td"),
    pytest.param(
        lambda lib, _: lib.TensorDict({}, [2], names=["a"]).set("v", _data(lib, (2, 2), [None, "a"])),
        {"raises": ValueError},
        id="nt_set_duplicate_name",
    ),
    pytest.param(
        lambda lib, _: lib.TensorDict({}, [2], names=["a"]).update({"v": _data(lib, names=["z"])}),
        {"raises": RuntimeError},
        id="nt_update_other_names",
    ),
    pytest.param(
        lambda lib, _: lib.TensorDict({"v": "w"}, [2], names=["a"]).set_("v", _data(lib, names=["z"])),
        {"raises": RuntimeError},
        id="nt_set_inplace_other_names",
    ),
    pytest.param(
        lambda lib, _: (lambda d: (lib.TensorDict({"v": d}, [2], names=["b"]).get("v").names, d.names))(_data(lib)),
        {},
        id="nt_ctor_leaves_given_leaf_unnamed",
    ),
    pytest.param(
        lambda lib, _: lib.TensorDict({"v": ["x", "y"]}, [2], names=["a"]).clone().get("v").names,
        {},
        id="nt_list_stack_clone_unnamed",
    ),
    pytest.param(
        lambda lib, _: lib.TensorDict({"v": ["x", "y"]}, [2], names=["a"]).rename("b").get("v").names,
        {},
        id="nt_list_stack_renamed",
    ),
]


def _list_stack_after(op: Any) -> Any:
    """A stack made of a list in a TensorDict named ``a``: its names after ``op`` (and whether it is the same)."""

    def fn(lib: Any, _: Any) -> Any:
        td = lib.TensorDict({"v": ["x", "y"], "x": torch.zeros(2)}, [2], names=["a"])
        out = op(lib, td)
        return out.get("v").names, out.get("v") is td.get("v"), out.names

    return fn


LIST_STACK_OPS = {
    "pickle": lambda lib, td: pickle.loads(pickle.dumps(td)),
    "deepcopy": lambda lib, td: copy.deepcopy(td),
    "to_tensordict": lambda lib, td: td.to_tensordict(),
    "select": lambda lib, td: td.select("v"),
    "index": lambda lib, td: td[0:1],
    "unsqueeze": lambda lib, td: td.unsqueeze(0),
    "expand": lambda lib, td: td.expand(3, 2),
    "stack": lambda lib, td: torch.stack([td, td]),
    "cat": lambda lib, td: torch.cat([td, td]),
    "reshape": lambda lib, td: td.reshape(2, 1),
    "rename": lambda lib, td: td.rename("b"),
}
NAMES += [pytest.param(_list_stack_after(op), id=f"nt_list_stack_{name}") for name, op in LIST_STACK_OPS.items()]


@pytest.mark.parametrize(
    ("fn", "kw"), [p if len(p.values) == 2 else pytest.param(*p.values, {}, id=p.id) for p in NAMES]
)
def test_nontensor_names_as_set(run_both, fn, kw):
    run_both(fn, data=None, **kw)


# --------------------------------------------------------------------------------------------------
# Lists under set_list_to_stack(True)
# --------------------------------------------------------------------------------------------------
def _listed(value: Any, bs: Any = (2,)) -> Any:
    """``td["v"] = value(lib)``: class and shape of the leaf, dtype, and the values ``td["v"]`` gives."""

    def fn(lib: Any, _: Any) -> Any:
        td = lib.TensorDict({}, list(bs))
        td["v"] = value(lib)
        leaf, got = td.get("v"), td["v"]
        values = got.tolist() if isinstance(got, torch.Tensor) else _plain(got)
        return type(leaf).__name__, list(leaf.shape), str(getattr(leaf, "dtype", None)), values

    return fn


def _plain(x: Any) -> Any:
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, torch.Tensor):
        return ("tensor", x.tolist())
    if hasattr(x, "to_dict"):
        return x.to_dict()
    return x


T = torch.tensor
LISTS = [
    pytest.param(_listed(lambda lib: [T(1), T(1)]), id="nt_list_scalar_tensors"),
    pytest.param(_listed(lambda lib: [T([1]), T([2])]), id="nt_list_one_element_tensors"),
    pytest.param(_listed(lambda lib: [T([1, 2]), T([3, 4])]), id="nt_list_tensors_stack"),
    pytest.param(_listed(lambda lib: [T([1]), T([2, 3])]), id="nt_list_ragged_tensors"),
    pytest.param(_listed(lambda lib: [T(1), 2]), id="nt_list_tensor_and_int"),
    pytest.param(_listed(lambda lib: [T(1), "a"]), id="nt_list_tensor_and_str"),
    pytest.param(_listed(lambda lib: [[T(1), T(2)], [T(3), T(4)]], (2, 2)), id="nt_list_nested_tensors"),
    pytest.param(_listed(lambda lib: [["a", 1], ["b", 2]], (2, 2)), id="nt_list_mixed_2d"),
    pytest.param(_listed(lambda lib: [["a", 1], ["b", 2]]), id="nt_list_mixed_deeper_than_batch"),
    pytest.param(_listed(lambda lib: [["a", "b"], ["c", "d"]]), id="nt_list_str_deeper_than_batch"),
    pytest.param(_listed(lambda lib: [["a", [1]], ["b", [2]]]), id="nt_list_inner_list_value"),
    pytest.param(_listed(lambda lib: [[T(1), T([1, 2])], [T(1), T([1, 2])]]), id="nt_list_ragged_nested"),
    pytest.param(_listed(lambda lib: [[1, 2], [3]]), id="nt_list_ragged_numbers"),
    pytest.param(_listed(lambda lib: [[1, 2], [3.5, 4]]), id="nt_list_numbers_promoted"),
    pytest.param(_listed(lambda lib: [[[1]], [[2]]]), id="nt_list_numbers_3d"),
    pytest.param(_listed(lambda lib: [[None, None], [None, None]], (2, 2)), id="nt_list_nones_2d"),
    pytest.param(_listed(lambda lib: [np.array([1]), np.array([2])]), id="nt_list_arrays"),
    pytest.param(_listed(lambda lib: [np.float32(1), np.float32(2)]), id="nt_list_numpy_scalars"),
    pytest.param(_listed(lambda lib: [1j, 2j]), id="nt_list_complex"),
    pytest.param(_listed(lambda lib: [True, 2]), id="nt_list_bool_int"),
    pytest.param(_listed(lambda lib: [[], []]), id="nt_list_empty_inner"),
    pytest.param(
        _listed(lambda lib: [lib.TensorDict({"a": T([1])}, []), lib.TensorDict({"a": T([2])}, [])]),
        id="nt_list_tensordicts",
    ),
    pytest.param(_listed(lambda lib: [lib.NonTensorData("a"), lib.NonTensorData("b")]), id="nt_list_non_tensor_data"),
]


@pytest.mark.parametrize("fn", LISTS)
def test_nontensor_list_to_stack(run_both, fn):
    run_both(fn, data=None)


LIST_ERRORS = [
    pytest.param(lambda lib, _: lib.TensorDict({}, [2, 2]).set("v", [["a", 1, 2], ["b", 2, 3]]), id="nt_list_too_long"),
    pytest.param(lambda lib, _: lib.TensorDict({}, [2, 2]).set("v", [["a", 1], ["b"]]), id="nt_list_ragged_2d"),
    pytest.param(lambda lib, _: lib.TensorDict({}, [2, 3]).set("v", ["a", "b"]), id="nt_list_short_of_dims"),
]


@pytest.mark.parametrize("fn", LIST_ERRORS)
def test_nontensor_list_to_stack_errors(run_both, fn):
    run_both(fn, data=None, raises=RuntimeError)
