"""Differential tests, non-tensor leaves: storage, lookups, batch ops, value ops, writes, leaf classes.

A returned TensorDict is compared on its tensor leaves only (``keys(leaves_only=True)`` excludes
non-tensor leaves in both libraries), so every case returns the non-tensor leaves it is about
(``td.get(key)``: class, batch size and ``tolist()`` are compared) or their values. tensordict returns
``LinkedList`` (a ``list`` subclass) for ``td[key]`` on a stack; :func:`_plain` turns it into a list.

Deliberate differences are listed in ``DIFFERENCES`` (conftest.py); bugs are strict xfails marked
here (only when the subject is tensorbatch, so the self-check against tensordict stays green).
"""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV

pytestmark = pytest.mark.differential

_IS_TB = os.environ.get(SUBJECT_ENV, "tensorbatch") == "tensorbatch"


def bug(reason: str) -> Any:
    """A strict xfail for a tensorbatch bug (inactive when the suite runs against another subject)."""
    return pytest.mark.xfail(_IS_TB, strict=True, reason=f"bug: {reason}")


def _summary(x: Any) -> Any:
    """Non-tensor leaves as ``(class name, batch_size, values)``, inside lists, tuples and dicts too.

    Needed because ``assert_same`` takes tensordict's NonTensorStack (a TensorDictBase) down its
    TensorDict branch, which compares tensor leaves only: the values of a stack would go unchecked.
    """
    if type(x).__name__ in ("NonTensorData", "NonTensorStack"):
        return type(x).__name__, x.batch_size, _plain(x.tolist())
    if isinstance(x, list):
        return [_summary(v) for v in x]
    if isinstance(x, tuple) and not isinstance(x, torch.Size):
        return tuple(_summary(v) for v in x)
    if isinstance(x, dict):
        return {k: _summary(v) for k, v in x.items()}
    return x


def _summarized(fn: Any) -> Any:
    return lambda lib, td: _summary(fn(lib, td))


def case(case_id: str, fn: Any, **kwargs: Any) -> Any:
    """A ``pytest.param`` of (fn, run_both keyword arguments); non-tensor leaves are summarized."""
    return pytest.param(_summarized(fn), kwargs, id=case_id)


class _Token:
    """An arbitrary Python object (one shared instance, so both libraries store the same one)."""

    def __repr__(self) -> str:
        return "<token>"


TOKEN = _Token()


def _plain(x: Any) -> Any:
    """Lists (LinkedList included), tuples and dicts rebuilt from plain builtins."""
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, tuple) and not isinstance(x, torch.Size):
        return tuple(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _where_s(lib: Any, mask: list[bool]) -> Any:
    """The non-tensor leaf "s" of ``where(mask, {"s": "v"}, {"s": "w"})``."""
    mine = lib.TensorDict({"s": "v", "x": torch.zeros(2)}, [2])
    return mine.where(torch.tensor(mask), lib.TensorDict({"s": "w", "x": torch.ones(2)}, [2])).get("s")


def _td(lib: Any, batch_size: Any = (2, 3)) -> Any:
    """Tensor leaf ``x``, a NonTensorData ``s`` and a NonTensorStack ``l`` (all values different)."""
    td = lib.TensorDict({"x": torch.arange(6.0).reshape(2, 3)}, batch_size)
    td["s"] = "hi"
    td["l"] = [["a", "b", "c"], ["d", "e", "f"]]
    return td


def _td1(lib: Any) -> Any:
    """Batch [3]: ``x``, a NonTensorData ``s`` and a NonTensorStack ``l`` with a repeated value."""
    return lib.TensorDict({"x": torch.arange(3.0), "s": "hi", "l": ["a", "b", "a"]}, [3])


def _leaves(out: Any) -> Any:
    """The result and its two non-tensor leaves (a list of those for a sequence of TensorDicts)."""
    if isinstance(out, (list, tuple)):
        return [_leaves(o) for o in out]
    return out, out.get("s"), out.get("l")


def _with(lib: Any, fn: Any) -> Any:
    return _leaves(fn(lib, _td(lib)))


def _leaf_case(case_id: str, fn: Any, **kwargs: Any) -> Any:
    return case(case_id, lambda lib, _: _with(lib, fn), data=None, **kwargs)


# --------------------------------------------------------------------------------------------------
# What is stored
# --------------------------------------------------------------------------------------------------
def _stored(value: Any, batch_size: Any = (2,)) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        td = lib.TensorDict({"x": torch.zeros(*batch_size)}, batch_size)
        td["v"] = copy.deepcopy(value, memo={id(TOKEN): TOKEN})  # a fresh value for each library
        return td, td.get("v")

    return fn


STORE = [
    case("nt_str", _stored("hello"), data=None),
    case("nt_none", _stored(None), data=None),
    case("nt_bytes", _stored(b"raw"), data=None),
    case("nt_object", _stored(TOKEN), data=None),
    case("nt_list_of_str", _stored(["a", "b"]), data=None),
    case("nt_list_mixed", _stored(["a", 1]), data=None),
    case("nt_list_of_none", _stored([None, None]), data=None),
    case("nt_list_of_dicts", _stored([{"k": 1}, {"k": 2}]), data=None),
    case("nt_nested_list_2d", _stored([["a", "b"], ["c", "d"]], (2, 2)), data=None),
    case("nt_list_of_numbers_is_tensor", _stored([1, 2]), data=None),
    case("nt_tuple_is_tensor", _stored((1, 2)), data=None),
    case("nt_dict_is_td", lambda lib, _: lib.TensorDict({"d": {"s": "v"}}, [2]).get("d").get("s"), data=None),
    case("nt_list_wrong_length", _stored(["a", "b", "c"]), data=None, raises=RuntimeError),
    case(
        "nt_ragged_list",
        lambda lib, _: (lambda v: (type(v).__name__, v.batch_size))(lib.TensorDict({"r": [[1, 2], [3]]}, [2]).get("r")),
        data=None,
    ),
    case(
        "nt_set_non_tensor_dict",
        lambda lib, _: lib.TensorDict({}, [2]).set_non_tensor("c", {"k": 1}).get("c"),
        data=None,
    ),
    case(
        "nt_set_non_tensor_int",
        lambda lib, _: lib.TensorDict({}, [2]).set_non_tensor("c", 3).get("c"),
        data=None,
    ),
    case(
        "nt_set_non_tensor_list",
        lambda lib, _: lib.TensorDict({}, [2]).set_non_tensor("c", ["a", "b"]).get("c"),
        data=None,
    ),
    case(
        "nt_set_non_tensor_nested",
        lambda lib, _: lib.TensorDict({}, [2]).set_non_tensor(("a", "b"), {"k": 1})["a", "b"],
        data=None,
    ),
    case(
        "nt_set_leaf_same_batch",
        lambda lib, _: lib.TensorDict({}, [2]).set("s", lib.NonTensorData("a", batch_size=[2])).get("s"),
        data=None,
    ),
    case(
        "nt_set_stack_leaf",
        lambda lib, _: lib.TensorDict({}, [2]).set("s", lib.NonTensorStack("a", "b")).get("s"),
        data=None,
    ),
    case(
        "nt_set_leaf_shorter_batch",
        lambda lib, _: lib.TensorDict({}, [2]).set("s", lib.NonTensorData("a")).get("s"),
        data=None,
    ),
    case(
        "nt_list_into_2d_batch",
        lambda lib, _: lib.TensorDict({"x": torch.zeros(2, 3)}, [2, 3]).set("l", ["a", "b"]).get("l"),
        data=None,
        raises=RuntimeError,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), STORE)
def test_nontensor_store(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Lookups, views and conversions
# --------------------------------------------------------------------------------------------------
LOOKUP = [
    case("nt_getitem_data", lambda lib, _: _td1(lib)["s"], data=None),
    case("nt_getitem_stack", lambda lib, _: _plain(_td(lib)["l"]), data=None),
    case("nt_getitem_none", lambda lib, _: lib.TensorDict({"n": None}, [2])["n"], data=None),
    case("nt_getitem_nested", lambda lib, _: lib.TensorDict({"n": {"s": "v"}}, [2])["n", "s"], data=None),
    case(
        "nt_get_non_tensor",
        lambda lib, _: (_td1(lib).get_non_tensor("s"), _plain(_td1(lib).get_non_tensor("l"))),
        data=None,
    ),
    case("nt_get_non_tensor_default", lambda lib, _: _td1(lib).get_non_tensor("zz", 5), data=None),
    case("nt_get_non_tensor_tensor", lambda lib, _: _td1(lib).get_non_tensor("x"), data=None),
    case(
        "nt_is_non_tensor",
        lambda lib, _: tuple(_td1(lib).is_non_tensor(k) for k in ("s", "l", "x")),
        data=None,
    ),
    case("nt_is_non_tensor_missing", lambda lib, _: _td1(lib).is_non_tensor("zz"), data=None, raises=KeyError),
    case(
        "nt_non_tensor_items",
        lambda lib, _: [(k, v) for k, v in lib.TensorDict({"n": {"s": "v"}, "t": "w"}, [2]).non_tensor_items()],
        data=None,
    ),
    case(
        "nt_non_tensor_items_nested",
        lambda lib, _: [
            (k, v) for k, v in lib.TensorDict({"n": {"s": "v"}, "t": "w"}, [2]).non_tensor_items(include_nested=True)
        ],
        data=None,
    ),
    case(
        "nt_filter_non_tensor_data",
        lambda lib, _: lib.TensorDict(
            {"n": {"s": "v", "y": torch.zeros(2)}, "t": "w", "x": torch.ones(2)}, [2]
        ).filter_non_tensor_data(),
        data=None,
    ),
    case("nt_keys", lambda lib, _: (list(_td(lib).keys()), list(_td(lib).keys(leaves_only=True))), data=None),
    case("nt_values", lambda lib, _: list(_td1(lib).values()), data=None),
    case("nt_tolist", lambda lib, _: _plain(_td(lib).tolist()), data=None),
    case("nt_to_dict", lambda lib, _: _plain(_td(lib).to_dict()), data=None),
    case("nt_state_dict", lambda lib, _: _td(lib).state_dict(), data=None),
    case("nt_pickle", lambda lib, _: _leaves(pickle.loads(pickle.dumps(_td(lib)))), data=None),
    case("nt_select", lambda lib, _: _leaves(_td(lib).select("s", "l")), data=None),
    case("nt_exclude", lambda lib, _: _td(lib).exclude("s", "l"), data=None),
    case("nt_pop", lambda lib, _: _td1(lib).pop("l"), data=None),
    case("nt_update", lambda lib, _: _td1(lib).update({"s": "new"}).get("s"), data=None),
    case(
        "nt_flatten_keys",
        lambda lib, _: lib.TensorDict({"n": {"s": "v"}}, [2]).flatten_keys().get("n.s"),
        data=None,
    ),
    case("nt_iter_rows", lambda lib, _: [row["l"] for row in _td1(lib)], data=None),
]


@pytest.mark.parametrize(("fn", "kw"), LOOKUP)
def test_nontensor_lookup(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Batch operations: the non-tensor leaves move with the batch
# --------------------------------------------------------------------------------------------------
BATCH_OPS = {
    "nt_int": lambda lib, td: td[1],
    "nt_int_int": lambda lib, td: td[1, 2],
    "nt_slice": lambda lib, td: td[:, 1:],
    "nt_mask": lambda lib, td: td[torch.tensor([True, False])],
    "nt_mask_2d": lambda lib, td: td[torch.tensor([[True, False, True], [False, True, True]])],
    "nt_long": lambda lib, td: td[torch.tensor([1, 0, 1])],
    "nt_none": lambda lib, td: td[None],
    "nt_ellipsis": lambda lib, td: td[..., 1],
    "nt_reshape": lambda lib, td: td.reshape(3, 2),
    "nt_view": lambda lib, td: td.view(-1),
    "nt_permute": lambda lib, td: td.permute(1, 0),
    "nt_transpose": lambda lib, td: td.transpose(0, 1),
    "nt_unsqueeze": lambda lib, td: td.unsqueeze(-1),
    "nt_squeeze": lambda lib, td: td[:1].squeeze(0),
    "nt_flatten": lambda lib, td: td.flatten(0, 1),
    "nt_unflatten": lambda lib, td: td.flatten(0, 1).unflatten(0, (3, 2)),
    "nt_expand": lambda lib, td: td.expand(4, 2, 3),
    "nt_repeat": lambda lib, td: td.repeat(2, 1),
    "nt_repeat_interleave": lambda lib, td: td.repeat_interleave(2, dim=1),
    "nt_gather": lambda lib, td: td.gather(1, torch.tensor([[0, 2], [1, 1]])),
    "nt_unbind": lambda lib, td: td.unbind(1),
    "nt_split": lambda lib, td: td.split([2, 1], 1),
    "nt_chunk": lambda lib, td: td.chunk(2, 0),
    "nt_masked_select": lambda lib, td: td.masked_select(torch.tensor([[True, False, True], [False, True, True]])),
    "nt_stack0": lambda lib, td: torch.stack([td, td.clone()], 0),
    "nt_stack1": lambda lib, td: torch.stack([td, td.clone()], 1),
    "nt_cat0": lambda lib, td: torch.cat([td, td.clone()], 0),
    "nt_cat1": lambda lib, td: torch.cat([td, td.clone()], 1),
    # expand and unsqueeze stack copies of a NonTensorData: the dims they add are stack dims, which
    # an index, squeeze or unbind takes away again (a NonTensorData), and the other ops keep
    "nt_expand_index": lambda lib, td: td.expand(4, 2, 3)[0],
    "nt_expand_index_member_dim": lambda lib, td: td.expand(4, 2, 3)[:, 0],
    "nt_expand_index_both": lambda lib, td: td.expand(4, 2, 3)[0, 0],
    "nt_expand_slice_one": lambda lib, td: td.expand(4, 2, 3)[:1],
    "nt_expand_slice_squeeze": lambda lib, td: td.expand(4, 2, 3)[:1].squeeze(0),
    "nt_expand_unbind": lambda lib, td: td.expand(4, 2, 3).unbind(0),
    "nt_expand_unbind_member_dim": lambda lib, td: td.expand(4, 2, 3).unbind(2),
    "nt_expand_reshape": lambda lib, td: td.expand(4, 2, 3).reshape(-1),
    "nt_expand_transpose_index": lambda lib, td: td.expand(4, 2, 3).transpose(0, 1)[:, 0],
    "nt_expand_split": lambda lib, td: td.expand(4, 2, 3).split(1, 0),
    "nt_expand_long_index": lambda lib, td: td.expand(4, 2, 3)[torch.tensor([0, 0])],
    "nt_expand_size_one_dims": lambda lib, td: td[:1].expand(5, 3),
    "nt_expand_same_size": lambda lib, td: td.expand(2, 3),
    "nt_expand_of_expand": lambda lib, td: td[0].expand(4, 5, 3)[0],
    "nt_unsqueeze_front": lambda lib, td: td.unsqueeze(0),
    "nt_unsqueeze_middle": lambda lib, td: td.unsqueeze(1),
    "nt_unsqueeze_squeeze": lambda lib, td: td.unsqueeze(0).squeeze(0),
    "nt_unsqueeze_squeeze_all": lambda lib, td: td.unsqueeze(1).squeeze(),
    "nt_unsqueeze_index_stack_dim": lambda lib, td: td.unsqueeze(-1)[..., 0],
    "nt_unsqueeze_index_member_dim": lambda lib, td: td.unsqueeze(-1)[0],
    "nt_unsqueeze_view": lambda lib, td: td.unsqueeze(0).view(6),
    "nt_unsqueeze_flatten": lambda lib, td: td.unsqueeze(0).flatten(0, 1),
    "nt_unsqueeze_permute": lambda lib, td: td.unsqueeze(0).permute(2, 1, 0),
    "nt_unsqueeze_unbind": lambda lib, td: td.unsqueeze(0).unbind(0),
    "nt_unsqueeze_unbind_member_dim": lambda lib, td: td.unsqueeze(0).unbind(1),
    "nt_unsqueeze_twice_index": lambda lib, td: td.unsqueeze(0).unsqueeze(0)[0, 0],
    "nt_unsqueeze_then_expand": lambda lib, td: td.unsqueeze(0).expand(5, 2, 3),
    "nt_flatten_0d": lambda lib, td: td[0, 0].flatten(),
    "nt_expand_0d": lambda lib, td: td[0, 0].expand(3),
    "nt_atleast_3d": lambda lib, td: torch.atleast_3d(td),
    "nt_stack0_index": lambda lib, td: torch.stack([td, td], 0)[0],
    "nt_stack0_index_member_dim": lambda lib, td: torch.stack([td, td], 0)[:, 0],
    "nt_stack1_unbind": lambda lib, td: torch.stack([td, td], 1).unbind(1),
}


@pytest.mark.parametrize("op", list(BATCH_OPS.values()), ids=list(BATCH_OPS))
def test_nontensor_batch_op(run_both, op):
    run_both(_summarized(lambda lib, _: _with(lib, op)), data=None)


def _kind(leaf: Any) -> Any:
    return type(leaf).__name__, leaf.batch_size


STACKING = [
    case(
        "nt_expand_captured",
        lambda lib, _: lib.set_capture_non_tensor_stack(True)(lambda: _kind(_td(lib).expand(4, 2, 3).get("s")))(),
        data=None,
    ),
    case(
        "nt_unsqueeze_captured",
        lambda lib, _: lib.set_capture_non_tensor_stack(True)(lambda: _kind(_td(lib).unsqueeze(0).get("s")))(),
        data=None,
    ),
    case(
        "nt_expand_metadata",
        lambda lib, _: [
            _kind(op(lib.TensorDict({"m": lib.MetaData(TOKEN, batch_size=[2])}, [2])).get("m"))
            for op in (lambda td: td.expand(3, 2), lambda td: td.unsqueeze(1), lambda td: td.unsqueeze(0)[0])
        ],
        data=None,
    ),
    case(
        "nt_expand_root",
        lambda lib, _: [
            op(lib.NonTensorData("a", batch_size=[2]))
            for op in (
                lambda nt: nt.expand(3, 2),
                lambda nt: nt.unsqueeze(1),
                lambda nt: nt.unsqueeze(0).squeeze(0),
                lambda nt: nt.expand(3, 2)[0],
                lambda nt: nt[0].flatten(),
            )
        ],
        data=None,
    ),
    case(
        "nt_expand_nested_extra_dims",
        lambda lib, _: [
            op(lib.TensorDict({"n": lib.TensorDict({"s": lib.NonTensorData("q", batch_size=[2, 3])}, [2, 3])}, [2]))
            for op in (
                lambda td: td.expand(4, 2).get(("n", "s")),
                lambda td: td.unsqueeze(-1).get(("n", "s")),
                lambda td: td.unsqueeze(-1)[:, 0].get(("n", "s")),
            )
        ],
        data=None,
    ),
    case(
        "nt_expand_lookup",
        lambda lib, _: [_plain(_td(lib).unsqueeze(0)["s"]), _td(lib).unsqueeze(0).squeeze(0)["s"]],
        data=None,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), STACKING)
def test_nontensor_stacking_op(run_both, fn, kw):
    run_both(fn, **kw)


BATCH_1D = [
    case(
        "nt_stack_same_values",
        lambda lib, _: torch.stack([lib.TensorDict({"s": "a"}), lib.TensorDict({"s": "a"})]).get("s"),
        data=None,
    ),
    case(
        "nt_stack_different_values",
        lambda lib, _: torch.stack([lib.TensorDict({"s": "a"}), lib.TensorDict({"s": "b"})]).get("s"),
        data=None,
    ),
    case(
        "nt_stack_nested_values",
        lambda lib, _: _plain(
            torch.stack([lib.TensorDict({"n": {"s": "a"}}), lib.TensorDict({"n": {"s": "b"}})])["n", "s"]
        ),
        data=None,
    ),
    case(
        "nt_cat_data_and_stack",
        lambda lib, _: torch.cat([lib.TensorDict({"s": ["a", "b"]}, [2]), lib.TensorDict({"s": "c"}, [2])]).get("s"),
        data=None,
    ),
    case(
        "nt_stack_only_stacks",
        lambda lib, _: (lambda td: torch.stack([td, td], 0).get("l"))(_td1(lib)),
        data=None,
    ),
    case("nt_expand_stack", lambda lib, _: _td1(lib).expand(2, 3).get("l"), data=None),
    case("nt_unsqueeze_stack", lambda lib, _: _td1(lib).unsqueeze(0).get("l"), data=None),
    case("nt_index_int_of_stack", lambda lib, _: _td1(lib)[1].get("l"), data=None),
    case("nt_index_repeated_position", lambda lib, _: _td1(lib)[torch.tensor([0, 0])].get("l"), data=None),
    case("nt_index_equal_values", lambda lib, _: _td1(lib)[torch.tensor([0, 2])].get("l"), data=None),
    case("nt_split_to_single_values", lambda lib, _: [t.get("l") for t in _td1(lib).split(1, 0)], data=None),
    case("nt_unbind_stack", lambda lib, _: [t.get("l") for t in _td1(lib).unbind(0)], data=None),
    case(
        "nt_batch_size_setter",
        lambda lib, _: (lambda td: (setattr(td, "batch_size", [2]), td.get("s"))[1])(_td(lib)),
        data=None,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), BATCH_1D)
def test_nontensor_stack_cat(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Value operations keep the leaf; comparisons compare values; reductions
# --------------------------------------------------------------------------------------------------
def _other(lib: Any) -> Any:
    return lib.TensorDict({"x": torch.arange(3.0), "s": "ho", "l": ["a", "c", "a"]}, [3])


def _reduce_message(lib: Any, _: Any) -> bool:
    try:
        _td1(lib).sum()
    except RuntimeError as err:
        return "exclude the key" in str(err)
    return False


VALUE = [
    _leaf_case("nt_add", lambda lib, td: td + 1),
    _leaf_case("nt_float", lambda lib, td: td.float()),
    _leaf_case("nt_apply", lambda lib, td: td.apply(lambda x: x * 2)),
    _leaf_case("nt_clone", lambda lib, td: td.clone()),
    _leaf_case("nt_to_dtype", lambda lib, td: td.to(torch.float64)),
    _leaf_case("nt_detach", lambda lib, td: td.detach()),
    _leaf_case("nt_zero_", lambda lib, td: td.zero_()),
    _leaf_case("nt_where_scalar", lambda lib, td: td.where(torch.tensor([[True, False, True]] * 2), 0.0)),
    _leaf_case("nt_masked_fill", lambda lib, td: td.masked_fill(torch.tensor([[True, False, True]] * 2), 1.0)),
    case("nt_where_other_td", lambda lib, _: _where_s(lib, [True, False]), data=None),
    case("nt_where_other_td_all_self", lambda lib, _: _where_s(lib, [True, True]), data=None),
    case("nt_sum_data", lambda lib, _: _td(lib).exclude("l").sum(0).get("s"), data=None),
    case("nt_mean_all_data", lambda lib, _: _td(lib).exclude("l").mean().get("s"), data=None),
    case("nt_std_data", lambda lib, _: _td(lib).exclude("l").std(1).get("s"), data=None),
    case("nt_sum_stack_raises", lambda lib, _: _td1(lib).sum(), data=None, raises=RuntimeError),
    case("nt_mean_dim_stack_raises", lambda lib, _: _td(lib).mean(1), data=None, raises=RuntimeError),
    case("nt_sum_stack_message", _reduce_message, data=None),
    case("nt_amax_stack", lambda lib, _: _td1(lib).amax(0).get("x"), data=None),
    case("nt_eq_clone", lambda lib, _: (_td1(lib) == _td1(lib).clone()).to_dict(), data=None),
    case("nt_eq_other", lambda lib, _: (_td1(lib) == _other(lib)).to_dict(), data=None),
    case("nt_ne_other", lambda lib, _: (_td1(lib) != _other(lib)).to_dict(), data=None),
    case("nt_eq_2d", lambda lib, _: (_td(lib) == _td(lib).clone()).get("l"), data=None),
    case(
        "nt_eq_all",
        lambda lib, _: ((_td1(lib) == _td1(lib)).all(), (_td1(lib) == _other(lib)).all()),
        data=None,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), VALUE)
def test_nontensor_value_op(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Writes
# --------------------------------------------------------------------------------------------------
def _write(index: Any, value: Any, key: str = "l", make: Any = _td1) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        td = make(lib)
        # a fresh value for each library (tensordict converts the entries of a written dict in place)
        td[index] = value(lib) if callable(value) else copy.deepcopy(value)
        return td, td.get(key)

    return fn


def _set_at(key: Any, value: Any, index: Any, make: Any = _td1) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        td = make(lib)
        td.set_at_(key, value, index)
        return td, td.get(key)

    return fn


def _nested(lib: Any) -> Any:
    return lib.TensorDict({"n": {"s": "v", "y": torch.zeros(2)}}, [2])


WRITE = [
    case(
        "nt_setitem_td_int",
        _write(1, lambda lib: lib.TensorDict({"x": torch.tensor(9.0), "s": "zz", "l": "q"}), key="s"),
        data=None,
    ),
    case(
        "nt_setitem_td_int_stack",
        _write(1, lambda lib: lib.TensorDict({"x": torch.tensor(9.0), "s": "zz", "l": "q"})),
        data=None,
    ),
    case("nt_setitem_dict_slice_str", _write(slice(0, 2), {"x": torch.zeros(2), "s": "zz"}, key="s"), data=None),
    case("nt_setitem_same_value", _write(0, {"x": torch.tensor(0.0), "s": "hi"}, key="s"), data=None),
    case(
        "nt_setitem_td_stack_value",
        _write(slice(0, 2), lambda lib: lib.TensorDict({"l": ["p", "q"]}, [2])),
        data=None,
    ),
    case(
        "nt_setitem_dict_list_value",
        _write(slice(0, 2), {"x": torch.zeros(2), "l": ["p", "q"]}),
        data=None,
    ),
    case(
        "nt_setitem_mask",
        _write(torch.tensor([True, False, True]), lambda lib: lib.TensorDict({"l": "q"}, [2])),
        data=None,
    ),
    case("nt_setitem_2d_index", _write((0, 1), lambda lib: lib.TensorDict({"l": "q"}), make=_td), data=None),
    case("nt_set_at_data", _set_at("s", "yo", 0), data=None),
    case("nt_set_at_stack", _set_at("l", "yo", 1), data=None),
    case("nt_set_at_all", _set_at("l", "yo", slice(None)), data=None),
    case("nt_set_at_stack_value", _set_at("s", "q", slice(0, 2)), data=None),
    case("nt_set_at_nested", _set_at(("n", "s"), "q", 1, make=_nested), data=None),
    case("nt_set_at_missing", _set_at("zz", "q", 1), data=None, raises=KeyError),
    case("nt_setitem_key_replaces", _write("s", "w", key="s"), data=None),
    case("nt_setitem_new_key_at_index", _write(0, {"new": "v"}, key="new"), data=None),
]


@pytest.mark.parametrize(("fn", "kw"), WRITE)
def test_nontensor_write(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# The leaf classes themselves
# --------------------------------------------------------------------------------------------------
def _nt(lib: Any, value: Any) -> Any:
    return lib.NonTensorData(value, batch_size=[3])


def _stack(lib: Any) -> Any:
    return lib.NonTensorStack.from_list([["a", "b", "c"], ["d", "e", "f"]])


CLASSES = [
    case("nt_stack_ctor", lambda lib, _: lib.NonTensorStack("a", "b"), data=None),
    case(
        "nt_stack_ctor_data",
        lambda lib, _: lib.NonTensorStack(lib.NonTensorData("a"), lib.NonTensorData("b")),
        data=None,
    ),
    case("nt_stack_from_list", lambda lib, _: lib.NonTensorStack.from_list([["a", "b"], ["c", "d"]]), data=None),
    case(
        "nt_stack_ctor_stack_dim",
        lambda lib, _: lib.NonTensorStack(lib.NonTensorStack("a", "b"), lib.NonTensorStack("c", "d"), stack_dim=1),
        data=None,
    ),
    case(
        "nt_stack_ctor_bad_batch",
        lambda lib, _: lib.NonTensorStack("a", "b", batch_size=[3]),
        data=None,
        raises=RuntimeError,
    ),
    case("nt_stack_len", lambda lib, _: len(lib.NonTensorStack("a", "b", "c")), data=None),
    case(
        "nt_stack_index_int",
        lambda lib, _: (lambda v: (v, v.data))(lib.NonTensorStack("a", "b")[1]),
        data=None,
    ),
    case("nt_stack_index_neg", lambda lib, _: lib.NonTensorStack("a", "b", "c")[-1], data=None),
    case("nt_stack_index_slice", lambda lib, _: lib.NonTensorStack("a", "b", "c")[1:], data=None),
    case(
        "nt_stack_index_tensor",
        lambda lib, _: lib.NonTensorStack("a", "b", "c")[torch.tensor([2, 0])],
        data=None,
    ),
    case("nt_stack_index_2d", lambda lib, _: _stack(lib)[:, 1], data=None),
    case(
        "nt_stack_index_oob",
        lambda lib, _: lib.NonTensorStack("a", "b", "c")[5],
        data=None,
        raises=IndexError,
    ),
    case("nt_stack_reshape", lambda lib, _: _stack(lib).reshape(3, 2), data=None),
    case("nt_stack_permute", lambda lib, _: _stack(lib).permute(1, 0), data=None),
    case("nt_stack_clone", lambda lib, _: _stack(lib).clone(), data=None),
    case(
        "nt_stack_unbind",
        lambda lib, _: _stack(lib).unbind(1),
        data=None,
    ),
    case(
        "nt_stack_data_attr",
        lambda lib, _: lib.NonTensorStack("a", "b").data,
        data=None,
        raises=AttributeError,
    ),
    case("nt_stack_eq", lambda lib, _: lib.NonTensorStack("a", "b") == lib.NonTensorStack("a", "c"), data=None),
    case("nt_stack_ne", lambda lib, _: lib.NonTensorStack("a", "b") != lib.NonTensorStack("a", "c"), data=None),
    case("nt_stack_pickle", lambda lib, _: pickle.loads(pickle.dumps(_stack(lib))), data=None),
    # ^ and | of two non-tensor leaves: the truth of each pair of values, a bool tensor shaped like the batch
    case("nt_data_xor", lambda lib, _: lib.NonTensorData(True, batch_size=[3]) ^ _nt(lib, True), data=None),
    case("nt_data_xor_differ", lambda lib, _: lib.NonTensorData(True, batch_size=[3]) ^ _nt(lib, False), data=None),
    case("nt_data_xor_ints", lambda lib, _: lib.NonTensorData(3, batch_size=[3]) ^ _nt(lib, 5), data=None),
    case("nt_data_or", lambda lib, _: lib.NonTensorData(False, batch_size=[3]) | _nt(lib, False), data=None),
    case("nt_data_xor_0d", lambda lib, _: lib.NonTensorData(True) ^ lib.NonTensorData(False), data=None),
    case("nt_data_xor_str", lambda lib, _: _nt(lib, "a") ^ _nt(lib, "b"), data=None, raises=TypeError),
    case(
        "nt_stack_xor",
        lambda lib, _: lib.NonTensorStack(True, False, True) ^ lib.NonTensorStack(True, True, True),
        data=None,
    ),
    case(
        "nt_stack_or",
        lambda lib, _: lib.NonTensorStack(True, False, False) | lib.NonTensorStack(False, False, True),
        data=None,
    ),
    case("nt_data_ctor", lambda lib, _: lib.NonTensorData("a", batch_size=[2, 3]), data=None),
    case(
        "nt_data_attrs",
        lambda lib, _: (lambda d: (d.data, d.batch_size, d.tolist()))(lib.NonTensorData("a", batch_size=[2, 1])),
        data=None,
    ),
    case("nt_data_tolist_0d", lambda lib, _: lib.NonTensorData("a").tolist(), data=None),
    case("nt_data_unwraps_data", lambda lib, _: lib.NonTensorData(lib.NonTensorData("a")).data, data=None),
    case("nt_data_index", lambda lib, _: lib.NonTensorData("a", batch_size=[2, 3])[0], data=None),
    case(
        "nt_data_eq",
        lambda lib, _: (
            lib.NonTensorData("a", batch_size=[2]) == lib.NonTensorData("a", batch_size=[2]),
            lib.NonTensorData("a", batch_size=[2]) == lib.NonTensorData("b", batch_size=[2]),
        ),
        data=None,
    ),
    case("nt_data_unbind", lambda lib, _: lib.NonTensorData("a", batch_size=[2]).unbind(0), data=None),
    case(
        "nt_data_clone_shallow",
        lambda lib, _: lib.NonTensorData("a", batch_size=[2]).clone(False),
        data=None,
    ),
    case(
        "nt_data_pickle",
        lambda lib, _: pickle.loads(pickle.dumps(lib.NonTensorData("a", batch_size=[2]))),
        data=None,
    ),
    case(
        "nt_torch_stack_data",
        lambda lib, _: torch.stack([lib.NonTensorData("a"), lib.NonTensorData("b")]),
        data=None,
    ),
    case(
        "nt_torch_stack_data_same",
        lambda lib, _: torch.stack([lib.NonTensorData("a"), lib.NonTensorData("a")]),
        data=None,
    ),
    case(
        "nt_is_non_tensor_fn",
        lambda lib, _: tuple(
            lib.is_non_tensor(v)
            for v in (
                lib.NonTensorData("a"),
                lib.NonTensorStack("a", "b"),
                torch.zeros(1),
                "a",
                lib.TensorDict(),
            )
        ),
        data=None,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), CLASSES)
def test_nontensor_classes(run_both, fn, kw):
    run_both(fn, **kw)
