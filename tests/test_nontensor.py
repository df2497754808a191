"""Non-tensor leaves: NonTensorData (one value for the batch) and NonTensorStack (one value per element).

Batch operations are checked against a tensor oracle: the TensorDict also holds ``pos``, an int64
leaf numbering the elements, and after any batch operation the stack ``l`` must hold
``LETTERS[pos]`` element for element, with the batch size of the result.

Deliberate differences from tensordict 0.15.3 asserted here: identical values stack to one
NonTensorData; expand (and unsqueeze) keep a NonTensorData; a stack cut down to one repeated
value collapses to a NonTensorData; reducing a stack of different values raises RuntimeError.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch
from _messages import batch_mismatch

import tensorbatch
from tensorbatch import NonTensorData, NonTensorStack, TensorDict, is_non_tensor, set_capture_non_tensor_stack
from tensorbatch._nontensor import LinkedList

LETTERS = "abcdef"


def bug(reason: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"bug: {reason}")


def _grid() -> list[list[str]]:
    return [list(LETTERS[:3]), list(LETTERS[3:])]


def make_td() -> TensorDict:
    """Batch [2, 3]: ``pos`` numbers the elements, ``s`` is one value, ``l`` one letter per element."""
    td = TensorDict({"pos": torch.arange(6).reshape(2, 3), "x": torch.ones(2, 3, 2)}, batch_size=[2, 3])
    td["s"] = "hi"
    td["l"] = _grid()
    return td


def make_td1() -> TensorDict:
    """Batch [3]: tensor ``x``, NonTensorData ``s`` and NonTensorStack ``l`` (with a repeated value)."""
    return TensorDict({"x": torch.arange(3.0), "s": "hi", "l": ["a", "b", "a"]}, batch_size=[3])


def expected_letters(pos: torch.Tensor) -> Any:
    """What the stack must hold where the oracle leaf holds ``pos``."""
    if pos.ndim == 0:
        return LETTERS[int(pos)]
    return [expected_letters(p) for p in pos]


def check_follows(out: TensorDict) -> None:
    """``s`` and ``l`` of ``out`` moved with the batch exactly as the tensor leaf ``pos`` did."""
    s, stack = out.get("s"), out.get("l")
    assert s.batch_size == out.batch_size
    if type(s) is NonTensorStack:  # a stack of equal values stays a stack (tensordict's default)
        assert set(np.array(s.tolist(), dtype=object).ravel().tolist()) == {"hi"}
    else:
        assert type(s) is NonTensorData and s.data == "hi"
    assert stack.batch_size == out.batch_size
    assert stack.tolist() == expected_letters(out["pos"])
    if out.get("pos").unique().numel() > 1:
        assert type(stack) is NonTensorStack


# --------------------------------------------------------------------------------------------------
# What is stored
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    ["hello", None, b"raw", object(), 1 + 2j],
    ids=["str", "none", "bytes", "object", "complex_via_set_non_tensor"],
)
def test_python_objects_become_non_tensor_data(value):
    td = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    if isinstance(value, complex):
        td.set_non_tensor("v", value)
    else:
        td["v"] = value
    leaf = td.get("v")
    assert type(leaf) is NonTensorData
    assert leaf.batch_size == torch.Size([2])
    assert leaf.data is value or leaf.data == value
    assert td["v"] is value or td["v"] == value


def test_list_of_strings_becomes_a_stack():
    td = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    td["l"] = ["a", "b"]
    assert type(td.get("l")) is NonTensorStack
    assert td.get("l").batch_size == torch.Size([2])
    assert td["l"] == ["a", "b"]
    assert type(td["l"]) is LinkedList  # tensordict's list type
    assert isinstance(td["l"], list)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(["a", 1], ["a", 1]), ([None, None], [None, None]), ([{"k": 1}, {"k": 2}], [{"k": 1}, {"k": 2}])],
    ids=["mixed", "nones", "dicts"],
)
def test_unconvertible_lists_become_stacks(value, expected):
    td = TensorDict(batch_size=[2]).set("l", value)
    assert type(td.get("l")) is NonTensorStack
    assert td["l"] == expected


def test_nested_list_of_strings_follows_two_batch_dims():
    td = TensorDict(batch_size=[2, 2]).set("l", [["a", "b"], ["c", "d"]])
    assert type(td.get("l")) is NonTensorStack
    assert td.get("l").batch_size == torch.Size([2, 2])
    assert td["l"] == [["a", "b"], ["c", "d"]]
    assert td[1, 0]["l"] == "c"


def test_ragged_list_becomes_a_stack():
    td = TensorDict(batch_size=[2]).set("r", [[1, 2], [3]])
    assert type(td.get("r")) is NonTensorStack
    assert td.get("r").batch_size == torch.Size([2])
    values = td["r"]  # each inner list of numbers is a tensor (as tensordict), of different shapes: a stack
    assert [type(v) for v in values] == [torch.Tensor, torch.Tensor]
    assert [v.tolist() for v in values] == [[1, 2], [3]]


@pytest.mark.parametrize(
    ("value", "dtype"),
    [([1, 2], torch.int64), ([1.5, 2.5], torch.float32), ((1, 2), torch.int64)],
    ids=["int_list", "float_list", "int_tuple"],
)
def test_numbers_become_tensors(value, dtype):
    td = TensorDict(batch_size=[2]).set("v", value)
    assert isinstance(td.get("v"), torch.Tensor)
    assert not td.is_non_tensor("v")
    assert td["v"].dtype == dtype
    assert td["v"].tolist() == list(value)


def test_dict_becomes_nested_td_with_non_tensor_leaf():
    td = TensorDict({"d": {"s": "v", "x": torch.zeros(2)}}, batch_size=[2])
    assert isinstance(td.get("d"), TensorDict)
    assert not td.is_non_tensor("d")
    assert td["d", "s"] == "v"
    assert td.get(("d", "s")).batch_size == torch.Size([2])


def test_list_of_wrong_length_raises_naming_the_key():
    td = TensorDict(batch_size=[2])
    with pytest.raises(RuntimeError, match=batch_mismatch([2], "l", [3])):
        td.set("l", ["a", "b", "c"])
    assert "l" not in td


@pytest.mark.parametrize(
    "value",
    [{"lr": 0.1}, 3, ["a", "b"], torch.zeros(2)],
    ids=["dict", "int", "list", "tensor"],
)
def test_set_non_tensor_always_stores_non_tensor_data(value):
    td = TensorDict(batch_size=[2]).set_non_tensor("c", value)
    leaf = td.get("c")
    assert type(leaf) is NonTensorData
    assert leaf.batch_size == torch.Size([2])
    assert leaf.data is value
    assert td.get_non_tensor("c") is value


def test_set_non_tensor_nested_key_creates_levels():
    td = TensorDict(batch_size=[2]).set_non_tensor(("a", "b"), {"k": 1})
    assert isinstance(td.get("a"), TensorDict)
    assert td["a", "b"] == {"k": 1}
    assert td.is_non_tensor(("a", "b"))


def test_set_leaf_object_with_same_batch():
    td = TensorDict(batch_size=[2]).set("s", NonTensorData("a", batch_size=[2]))
    assert td.get("s").data == "a"
    td.set("t", NonTensorStack("p", "q"))
    assert td["t"] == ["p", "q"]


def test_set_leaf_with_shorter_batch_is_expanded():
    td = TensorDict(batch_size=[2]).set("s", NonTensorData("a"))
    assert type(td.get("s")) is NonTensorData
    assert td.get("s").batch_size == torch.Size([2])
    assert td["s"] == "a"


def test_list_under_two_dim_batch_raises():
    td = TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3])
    with pytest.raises(RuntimeError, match="'l'"):
        td.set("l", ["a", "b"])


# --------------------------------------------------------------------------------------------------
# Lookups, views and conversions
# --------------------------------------------------------------------------------------------------
def test_getitem_gives_values_and_get_gives_leaves():
    td = make_td1()
    assert td["s"] == "hi"
    assert td["l"] == ["a", "b", "a"]
    assert isinstance(td.get("s"), NonTensorData)
    assert isinstance(td.get("l"), NonTensorStack)
    assert td.get("s").data == "hi"


def test_get_non_tensor():
    td = make_td1()
    assert td.get_non_tensor("s") == "hi"
    assert td.get_non_tensor("l") == ["a", "b", "a"]
    assert td.get_non_tensor("zz", 5) == 5
    assert torch.equal(td.get_non_tensor("x"), torch.arange(3.0))
    with pytest.raises(KeyError, match="zz"):
        td.get_non_tensor("zz")


def test_is_non_tensor():
    td = make_td1().set(("n", "t"), "v")
    assert td.is_non_tensor("s")
    assert td.is_non_tensor("l")
    assert td.is_non_tensor(("n", "t"))
    assert not td.is_non_tensor("x")
    assert not td.is_non_tensor("n")
    with pytest.raises(KeyError, match="zz"):
        td.is_non_tensor("zz")


def test_non_tensor_items():
    td = TensorDict({"n": {"s": "v", "y": torch.zeros(2)}, "t": "w", "x": torch.ones(2)}, batch_size=[2])
    assert [(k, v.data) for k, v in td.non_tensor_items()] == [("t", "w")]
    nested = list(td.non_tensor_items(include_nested=True))
    assert [k for k, _ in nested] == [("n", "s"), "t"]
    assert all(type(v) is NonTensorData for _, v in nested)


def test_filter_non_tensor_data_keeps_nested_nodes():
    td = TensorDict({"n": {"s": "v", "y": torch.zeros(2)}, "m": {"s": "v"}, "t": "w", "x": torch.ones(2)}, [2])
    out = td.filter_non_tensor_data()
    assert set(out.keys(include_nested=True)) == {"n", ("n", "y"), "m", "x"}
    assert out.get("m").is_empty()
    assert "t" in td  # the input is untouched


def test_keys_and_state_dict_skip_non_tensor_leaves():
    td = make_td()
    assert set(td.keys()) == {"pos", "x", "s", "l"}
    assert set(td.keys(leaves_only=True)) == {"pos", "x"}
    assert set(td.keys(include_nested=True, leaves_only=True)) == {"pos", "x"}
    assert set(td.state_dict()) == {"pos", "x"}


def test_tolist_gives_values_per_element():
    td = TensorDict({"x": torch.arange(2.0), "s": "hi", "l": ["a", "b"]}, batch_size=[2])
    rows = td.tolist()
    assert [r["s"] for r in rows] == ["hi", "hi"]
    assert [r["l"] for r in rows] == ["a", "b"]
    assert [float(r["x"]) for r in rows] == [0.0, 1.0]


def test_to_dict_gives_values():
    td = TensorDict({"n": {"s": "v"}, "l": ["a", "b"], "x": torch.zeros(2)}, batch_size=[2])
    out = td.to_dict()
    assert out["n"] == {"s": "v"}
    assert out["l"] == ["a", "b"]
    assert torch.equal(out["x"], torch.zeros(2))


def test_repr_shows_values():
    text = repr(make_td1())
    assert "NonTensorData(data=hi, batch_size=torch.Size([3])" in text
    assert "NonTensorStack(['a', 'b', 'a']" in text


def test_pickle_roundtrip_keeps_leaves():
    out = pickle.loads(pickle.dumps(make_td()))
    assert type(out.get("s")) is NonTensorData
    assert out["s"] == "hi"
    assert type(out.get("l")) is NonTensorStack
    assert out["l"] == _grid()
    assert out.get("l").batch_size == torch.Size([2, 3])


def test_iterating_rows_gives_values():
    assert [row["l"] for row in make_td1()] == ["a", "b", "a"]
    assert [row["s"] for row in make_td1()] == ["hi", "hi", "hi"]


# --------------------------------------------------------------------------------------------------
# Batch operations: the leaves follow the batch (oracle: the tensor leaf ``pos``)
# --------------------------------------------------------------------------------------------------
MASK_2D = torch.tensor([[True, False, True], [False, True, True]])

BATCH_OPS = {
    "int": lambda td: td[1],
    "int_int": lambda td: td[1, 2],
    "neg_int": lambda td: td[-1, -1],
    "slice": lambda td: td[:, 1:],
    "step": lambda td: td[:, ::2],
    "mask": lambda td: td[torch.tensor([False, True])],
    "mask_2d": lambda td: td[MASK_2D],
    "long": lambda td: td[torch.tensor([1, 0, 1])],
    "long_dim1": lambda td: td[:, torch.tensor([2, 0])],
    "none": lambda td: td[None],
    "ellipsis": lambda td: td[..., 1],
    "reshape": lambda td: td.reshape(3, 2),
    "view": lambda td: td.view(-1),
    "permute": lambda td: td.permute(1, 0),
    "transpose": lambda td: td.transpose(0, 1),
    "unsqueeze": lambda td: td.unsqueeze(1),
    "squeeze": lambda td: td[:1].squeeze(0),
    "flatten": lambda td: td.flatten(0, 1),
    "unflatten": lambda td: td.flatten(0, 1).unflatten(0, (3, 2)),
    "expand": lambda td: td.expand(4, 2, 3),
    "repeat": lambda td: td.repeat(2, 2),
    "repeat_interleave": lambda td: td.repeat_interleave(2, dim=1),
    "repeat_interleave_tensor": lambda td: td.repeat_interleave(torch.tensor([1, 2]), dim=0),
    "gather": lambda td: td.gather(1, torch.tensor([[2, 0], [1, 1]])),
    "masked_select": lambda td: td.masked_select(MASK_2D),
    "cat0": lambda td: torch.cat([td, td[:1]], 0),
    "cat1": lambda td: torch.cat([td, td[:, :1]], 1),
    "stack0": lambda td: torch.stack([td, td], 0),
    "stack1": lambda td: torch.stack([td, td], 1),
}


@pytest.mark.parametrize("op", list(BATCH_OPS.values()), ids=list(BATCH_OPS))
def test_batch_op_moves_non_tensor_leaves(op):
    check_follows(op(make_td()))


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.unbind(0),
        lambda td: td.unbind(1),
        lambda td: td.split([2, 1], 1),
        lambda td: td.chunk(2, 0),
    ],
    ids=["unbind0", "unbind1", "split", "chunk"],
)
def test_splitting_ops_move_non_tensor_leaves(op):
    parts = op(make_td())
    assert len(parts) >= 2
    for part in parts:
        check_follows(part)


def test_batch_size_setter_keeps_extra_dims_of_leaves():
    td = make_td()
    td.batch_size = [2]  # like tensors, the leaves keep the dims that leave the batch
    assert td.get("s").batch_size == torch.Size([2, 3])
    assert td.get("l").batch_size == torch.Size([2, 3])
    assert td["l"] == _grid()
    assert td[1]["l"] == list("def")


# deliberate differences ---------------------------------------------------------------------------
def test_stacking_identical_values_gives_a_stack_by_default():
    out = torch.stack([TensorDict({"s": "a"}), TensorDict({"s": "a"})])
    assert type(out.get("s")) is NonTensorStack
    assert out["s"] == ["a", "a"]
    cat = torch.cat([TensorDict({"s": "a"}, [1]), TensorDict({"s": "a"}, [2])])
    assert type(cat.get("s")) is NonTensorData and cat.get("s").batch_size == torch.Size([3])  # (tensordict too)


@set_capture_non_tensor_stack(True)
def test_stacking_identical_values_gives_one_non_tensor_data_under_the_capture_option():
    out = torch.stack([TensorDict({"s": "a"}), TensorDict({"s": "a"})])
    assert type(out.get("s")) is NonTensorData
    assert out.get("s").batch_size == torch.Size([2])
    assert out["s"] == "a"


def test_stacking_different_values_gives_a_stack():
    out = torch.stack([TensorDict({"s": "a"}), TensorDict({"s": "b"})])
    assert type(out.get("s")) is NonTensorStack
    assert out["s"] == ["a", "b"]


def test_cat_of_data_and_stack():
    out = torch.cat([TensorDict({"s": ["a", "b"]}, [2]), TensorDict({"s": "c"}, [2])])
    assert type(out.get("s")) is NonTensorStack
    assert out["s"] == ["a", "b", "c", "c"]


def test_cat_of_equal_data_stays_data():
    out = torch.cat([TensorDict({"s": "c"}, [2]), TensorDict({"s": "c"}, [1])])
    assert type(out.get("s")) is NonTensorData
    assert out.get("s").batch_size == torch.Size([3])


@pytest.mark.parametrize("op", [lambda td: td.expand(4, 3), lambda td: td.unsqueeze(0)], ids=["expand", "unsqueeze"])
def test_expand_and_unsqueeze_stack_non_tensor_data(op):
    out = op(make_td1())
    assert type(out.get("s")) is NonTensorStack  # stacked copies, as tensordict
    assert out.get("s").batch_size == out.batch_size
    assert out.get("s").tolist() == [["hi"] * 3] * out.batch_size[0]
    assert type(out.get("l")) is NonTensorStack
    with set_capture_non_tensor_stack(True):
        assert type(op(make_td1()).get("s")) is NonTensorData


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        (lambda td: td.expand(4, 3)[0], NonTensorData),  # the stack dim indexed away: one member
        (lambda td: td.expand(4, 3)[:, 0], NonTensorStack),
        (lambda td: td.expand(4, 3)[:1], NonTensorStack),
        (lambda td: td.expand(4, 3).unbind(0)[1], NonTensorData),
        (lambda td: td.unsqueeze(0).squeeze(0), NonTensorData),
        (lambda td: td.unsqueeze(1)[:, 0], NonTensorData),
        (lambda td: td.unsqueeze(1)[0], NonTensorStack),
        (lambda td: td.unsqueeze(0).reshape(3), NonTensorStack),  # regrouped: no members left
        (lambda td: torch.stack([td, td])[1], NonTensorData),
        (lambda td: td[:1].expand(4), NonTensorData),  # no new dim: nothing stacked
    ],
    ids=[
        "index",
        "index_member_dim",
        "slice",
        "unbind",
        "squeeze",
        "index_1",
        "index_member_0",
        "reshape",
        "stack",
        "size_one",
    ],
)
def test_stack_dims_taken_away_give_data(op, kind):
    out = op(make_td1())
    assert type(out.get("s")) is kind
    assert out.get("s").batch_size == out.batch_size
    assert set(np.array(out.get("s").tolist(), dtype=object).reshape(-1).tolist()) == {"hi"}


def test_expand_keeps_metadata():
    td = TensorDict({"m": tensorbatch.MetaData("cfg", batch_size=[2])}, [2])
    assert type(td.expand(3, 2).get("m")) is tensorbatch.MetaData
    assert type(td.unsqueeze(0).get("m")) is tensorbatch.MetaData


@pytest.mark.parametrize(
    ("op", "values"),
    [
        (lambda td: td[1:2], ["b"]),
        (lambda td: td[torch.tensor([0, 0])], ["a", "a"]),
        (lambda td: td.split(1, 0)[1], ["b"]),
    ],
    ids=["slice_one", "repeated_index", "split"],
)
def test_stack_cut_to_one_value_stays_a_stack(op, values):
    out = op(make_td1())  # (as tensordict: only an int index gives the element's NonTensorData)
    leaf = out.get("l")
    assert type(leaf) is NonTensorStack
    assert leaf.tolist() == values and leaf.data == values[0]
    assert leaf.batch_size == out.batch_size


def test_stack_indexed_to_one_element_is_its_data():
    leaf = make_td1()[2].get("l")
    assert type(leaf) is NonTensorData and leaf.data == "a" and leaf.batch_size == torch.Size([])


def test_equal_values_at_different_positions_stay_a_stack():
    leaf = make_td1()[torch.tensor([0, 2])].get("l")
    assert leaf.tolist() == ["a", "a"]
    assert type(leaf) is NonTensorStack


# --------------------------------------------------------------------------------------------------
# Value operations keep the leaf; comparisons; reductions
# --------------------------------------------------------------------------------------------------
VALUE_OPS = {
    "add": lambda td: td + 1,
    "mul_td": lambda td: td * td,
    "float": lambda td: td.float(),
    "double": lambda td: td.double(),
    "to_dtype": lambda td: td.to(torch.float64),
    "apply": lambda td: td.apply(lambda x: x * 2),
    "clone": lambda td: td.clone(),
    "detach": lambda td: td.detach(),
    "zero_": lambda td: td.zero_(),
    "where_scalar": lambda td: td.where(MASK_2D, 0),
    "masked_fill": lambda td: td.masked_fill(MASK_2D, 1),
}


@pytest.mark.parametrize("op", list(VALUE_OPS.values()), ids=list(VALUE_OPS))
def test_value_op_keeps_non_tensor_leaves(op):
    out = op(make_td())
    assert out.batch_size == torch.Size([2, 3])
    assert type(out.get("s")) is NonTensorData
    assert out["s"] == "hi"
    assert type(out.get("l")) is NonTensorStack
    assert out["l"] == _grid()


def test_clone_is_independent():
    td = make_td1()
    other = td.clone()
    other[0] = {"l": "z", "s": "z"}
    assert td["l"] == ["a", "b", "a"]
    assert td["s"] == "hi"
    assert other["l"] == ["z", "b", "a"]


def test_where_with_other_td_picks_other_values():
    td = TensorDict({"s": "v", "x": torch.zeros(2)}, [2])
    other = TensorDict({"s": "w", "x": torch.ones(2)}, [2])
    out = td.where(torch.tensor([True, False]), other)
    assert out["s"] == ["v", "w"]
    assert type(out.get("s")) is NonTensorStack
    assert torch.equal(out["x"], torch.tensor([0.0, 1.0]))
    assert torch.where(torch.tensor([False, True]), td, other)["s"] == ["w", "v"]
    assert td["s"] == "v"  # the sources are untouched
    assert other["s"] == "w"


def test_where_non_tensor_collapses_and_keeps_self_against_a_number():
    td = TensorDict({"s": "v", "x": torch.zeros(2, 3)}, [2])
    other = TensorDict({"s": NonTensorStack("a", "b"), "x": torch.ones(2, 3)}, [2])
    all_self = td.where(torch.tensor([True, True]), other)
    assert type(all_self.get("s")) is NonTensorData
    assert all_self["s"] == "v"
    assert td.where(torch.tensor([False, True]), other)["s"] == ["a", "v"]
    assert td.where(torch.tensor([False, False]), 0)["s"] == "v"  # a number: the values stay (as tensordict)


@pytest.mark.parametrize(
    ("op", "batch"),
    [
        (lambda td: td.sum(0), [3]),
        (lambda td: td.mean(), []),
        (lambda td: td.std(1), [2]),
        (lambda td: td.amax(1), [2]),
        (lambda td: td.sum(1, keepdim=True), [2, 1]),
    ],
    ids=["sum0", "mean_all", "std1", "amax1", "sum_keepdim"],
)
def test_reductions_keep_non_tensor_data(op, batch):
    out = op(make_td().exclude("l").float())
    assert out.batch_size == torch.Size(batch)
    assert type(out.get("s")) is NonTensorData
    assert out.get("s").batch_size == torch.Size(batch)
    assert out["s"] == "hi"


@pytest.mark.parametrize(
    "op",
    [lambda td: td.sum(), lambda td: td.mean(0), lambda td: td.amax(0), lambda td: td.sum(0, keepdim=True)],
    ids=["sum", "mean0", "amax0", "sum_keepdim"],
)
def test_reducing_a_stack_of_different_values_raises(op):
    td = make_td1()
    with pytest.raises(RuntimeError, match="exclude the key"):
        op(td)
    assert td["l"] == ["a", "b", "a"]
    assert torch.equal(op(td.exclude("l"))["x"], op(td.select("x"))["x"])


def test_eq_compares_values_elementwise():
    td = make_td1()
    other = TensorDict({"x": torch.arange(3.0), "s": "ho", "l": ["a", "c", "a"]}, [3])
    eq = td == other
    assert eq["s"].dtype == torch.bool
    assert eq["s"].tolist() == [False, False, False]
    assert eq["l"].tolist() == [True, False, True]
    assert eq["x"].tolist() == [True, True, True]
    ne = td != other
    assert ne["l"].tolist() == [False, True, False]
    assert ne["s"].tolist() == [True, True, True]
    assert not eq.all()
    assert (td == td.clone()).all()


def test_eq_on_two_batch_dims():
    td = make_td()
    other = make_td()
    other[1, 2] = {"l": "z"}
    eq = td == other
    assert eq["l"].shape == torch.Size([2, 3])
    assert eq["l"].tolist() == [[True, True, True], [True, True, False]]


def test_eq_data_against_stack():
    eq = TensorDict({"l": ["a", "b"]}, [2]) == TensorDict({"l": "a"}, [2])
    assert eq["l"].tolist() == [True, False]


# --------------------------------------------------------------------------------------------------
# Writes
# --------------------------------------------------------------------------------------------------
def test_setitem_td_at_index_turns_data_into_stack():
    td = make_td1()
    td[1] = TensorDict({"x": torch.tensor(9.0), "s": "zz", "l": "q"})
    assert type(td.get("s")) is NonTensorStack
    assert td["s"] == ["hi", "zz", "hi"]
    assert td["l"] == ["a", "q", "a"]
    assert td["x"].tolist() == [0.0, 9.0, 2.0]


def test_setitem_same_value_keeps_non_tensor_data():
    td = make_td1()
    td[0] = {"s": "hi"}
    assert type(td.get("s")) is NonTensorData
    assert td["s"] == "hi"


def test_setitem_dict_with_str_at_slice():
    td = make_td1()
    td[0:2] = {"x": torch.zeros(2), "s": "zz"}
    assert td["s"] == ["zz", "zz", "hi"]
    assert td["x"].tolist() == [0.0, 0.0, 2.0]


def test_setitem_td_with_stack_at_slice():
    td = make_td1()
    td[0:2] = TensorDict({"l": ["p", "q"]}, [2])
    assert td["l"] == ["p", "q", "a"]


def test_setitem_dict_with_list_at_slice():
    td = make_td1()
    td[0:2] = {"l": ["p", "q"]}
    assert td["l"] == ["p", "q", "a"]


def test_setitem_mask_and_two_dim_index():
    td = make_td1()
    td[torch.tensor([True, False, True])] = TensorDict({"l": "q"}, [2])
    assert td["l"] == ["q", "b", "q"]
    td2 = make_td()
    td2[0, 1] = TensorDict({"l": "q", "s": "t"})
    assert td2["l"] == [["a", "q", "c"], ["d", "e", "f"]]
    assert td2["s"] == [["hi", "t", "hi"], ["hi", "hi", "hi"]]


def test_setitem_everything_with_one_value_stays_a_stack():
    td = make_td1()
    td[:] = {"l": "z"}  # (as tensordict: a stack written over stays a stack)
    assert type(td.get("l")) is NonTensorStack
    assert td["l"] == ["z", "z", "z"] and td.get("l").data == "z"
    assert td.get("l").batch_size == torch.Size([3])


def test_setitem_new_key_at_index_holds_the_value_everywhere():
    td = TensorDict({"x": torch.zeros(3)}, [3])
    td[0] = {"new": "v"}
    assert type(td.get("new")) is NonTensorData
    assert td["new"] == "v"
    td2 = TensorDict({"x": torch.zeros(3)}, [3])
    td2[0:2] = {"new": ["p", "q"]}  # one value per position: None elsewhere
    assert td2["new"] == ["p", "q", None]


def test_set_at_():
    td = make_td1()
    assert td.set_at_("s", "yo", 0) is td
    assert td["s"] == ["yo", "hi", "hi"]
    td.set_at_("l", "z", 1)
    assert td["l"] == ["a", "z", "a"]
    td.set_at_("l", NonTensorStack("p", "q"), slice(1, 3))
    assert td["l"] == ["a", "p", "q"]
    td.set_at_("l", "w", slice(None))
    assert type(td.get("l")) is NonTensorStack
    assert td["l"] == ["w", "w", "w"]


def test_set_at_nested_and_missing():
    td = TensorDict({"n": {"s": "v", "y": torch.zeros(2)}}, [2])
    td.set_at_(("n", "s"), "q", 1)
    assert td["n", "s"] == ["v", "q"]
    with pytest.raises(KeyError, match="zz"):
        td.set_at_("zz", "q", 1)


@pytest.mark.parametrize(
    ("make", "value", "path"),
    [
        (lambda: TensorDict({"x": torch.zeros(3), "s": "v"}, [3]), {"s": "w", "x": "bad"}, "'x'"),
        (lambda: TensorDict({"x": torch.zeros(3), "s": "v"}, [3]), {"x": "bad", "s": "w"}, "'x'"),
        (
            lambda: TensorDict({"n": {"x": torch.zeros(3)}, "s": "v"}, [3]),
            {"s": "w", "n": {"x": "bad"}},
            r"\('n', 'x'\)",
        ),
    ],
    ids=["str_after", "str_first", "nested"],
)
def test_writing_str_into_tensor_leaf_raises_and_changes_nothing(make, value, path):
    td = make()
    before = {k: v.clone() for k, v in td.items(include_nested=True, leaves_only=True)}
    with pytest.raises(TypeError, match=path):
        td[0] = value
    assert td["s"] == "v"
    assert type(td.get("s")) is NonTensorData
    for key, tensor in before.items():
        assert torch.equal(td[key], tensor)


def test_writing_tensor_into_non_tensor_leaf_raises():
    td = TensorDict({"x": torch.zeros(3), "s": "v"}, [3])
    with pytest.raises(TypeError, match="non-tensor leaf 's'"):
        td[0] = {"x": torch.ones(()), "s": torch.ones(())}
    assert td["s"] == "v"
    assert td["x"].tolist() == [0.0, 0.0, 0.0]


def test_set_at_str_into_tensor_leaf_names_the_key():
    td = make_td1()
    with pytest.raises(TypeError, match="'x'"):
        td.set_at_("x", "yo", 0)


def test_setitem_key_replaces_leaf():
    td = make_td1()
    td["l"] = "flat"
    assert type(td.get("l")) is NonTensorData
    assert td["l"] == "flat"
    del td["s"]
    assert "s" not in td


# --------------------------------------------------------------------------------------------------
# The leaf classes
# --------------------------------------------------------------------------------------------------
def test_non_tensor_data_basics():
    leaf = NonTensorData("a", batch_size=[2, 1])
    assert leaf.data == "a"
    assert leaf.batch_size == torch.Size([2, 1])
    assert leaf.tolist() == [["a"], ["a"]]
    assert NonTensorData("a").tolist() == "a"
    assert NonTensorData("a").batch_size == torch.Size([])
    assert NonTensorData(NonTensorData("a")).data == "a"
    assert list(leaf.keys()) == []


def test_non_tensor_data_tolist_rows_are_independent():
    rows = NonTensorData("a", batch_size=[2, 2]).tolist()
    rows[0][0] = "z"
    assert rows[1][0] == "a"


def test_non_tensor_data_indexing():
    leaf = NonTensorData("a", batch_size=[2, 3])
    sub = leaf[0]
    assert type(sub) is NonTensorData
    assert sub.batch_size == torch.Size([3])
    assert leaf[:, 1:].batch_size == torch.Size([2, 2])
    assert leaf[1, 2].data == "a"
    with pytest.raises(IndexError):
        leaf[5]


def test_non_tensor_stack_constructors():
    st = NonTensorStack("a", "b")
    assert st.batch_size == torch.Size([2])
    assert st.tolist() == ["a", "b"]
    assert len(st) == 2
    grid = NonTensorStack.from_list([["a", "b"], ["c", "d"]])
    assert grid.batch_size == torch.Size([2, 2])
    assert grid.tolist() == [["a", "b"], ["c", "d"]]
    by_col = NonTensorStack(NonTensorStack("a", "b"), NonTensorStack("c", "d"), stack_dim=1)
    assert by_col.tolist() == [["a", "c"], ["b", "d"]]
    assert NonTensorStack(NonTensorData("a"), NonTensorData("b")).tolist() == ["a", "b"]


def test_non_tensor_stack_constructor_errors():
    with pytest.raises(ValueError, match="at least one value"):
        NonTensorStack()
    with pytest.raises(RuntimeError, match=r"batch_size \[3\]"):
        NonTensorStack("a", "b", batch_size=[3])


def test_non_tensor_stack_indexing():
    st = NonTensorStack("a", "b", "c")
    assert type(st[1]) is NonTensorData
    assert st[1].data == "b"
    assert st[-1].data == "c"
    assert type(st[1:]) is NonTensorStack
    assert st[1:].tolist() == ["b", "c"]
    assert st[torch.tensor([2, 0])].tolist() == ["c", "a"]
    assert st[torch.tensor([True, False, True])].tolist() == ["a", "c"]
    assert NonTensorStack.from_list([["a", "b"], ["c", "d"]])[:, 1].tolist() == ["b", "d"]
    with pytest.raises(IndexError):
        st[5]


def test_non_tensor_stack_shape_ops():
    grid = NonTensorStack.from_list([["a", "b", "c"], ["d", "e", "f"]])
    assert grid.reshape(3, 2).tolist() == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert grid.permute(1, 0).tolist() == [["a", "d"], ["b", "e"], ["c", "f"]]
    assert grid.flatten(0, 1).tolist() == list(LETTERS)
    assert grid.clone().tolist() == grid.tolist()
    stacked = torch.stack([grid, grid], 0)
    assert stacked.batch_size == torch.Size([2, 2, 3])


@pytest.mark.parametrize(
    "op",
    [lambda st: st.unbind(0), lambda st: st.split(1, 0), lambda st: st.chunk(2, 0)],
    ids=["unbind", "split", "chunk"],
)
def test_non_tensor_stack_splitting(op):
    parts = op(NonTensorStack("a", "b"))
    assert [p.tolist() for p in parts] in (["a", "b"], [["a"], ["b"]])


def test_non_tensor_data_unbind():
    parts = NonTensorData("a", batch_size=[2]).unbind(0)
    assert [p.data for p in parts] == ["a", "a"]
    assert all(p.batch_size == torch.Size([]) for p in parts)


def test_non_tensor_equality():
    eq = NonTensorStack("a", "b") == NonTensorStack("a", "c")
    assert eq.dtype == torch.bool
    assert eq.tolist() == [True, False]
    assert (NonTensorStack("a", "b") != NonTensorStack("a", "c")).tolist() == [False, True]
    assert (NonTensorData("a", batch_size=[2]) == NonTensorData("a", batch_size=[2])).tolist() == [True, True]
    assert (NonTensorData("a", batch_size=[2]) == NonTensorData("b", batch_size=[2])).tolist() == [
        False,
        False,
    ]
    assert (NonTensorData("a", batch_size=[2]) == "a").tolist() == [True, True]
    assert (NonTensorStack("a", "b") == ["a", "c"]).tolist() == [True, False]
    assert (NonTensorData(torch.zeros(1)) == torch.zeros(1)).tolist() is False  # tensors: by identity


def test_non_tensor_leaves_are_unhashable():
    with pytest.raises(TypeError, match="unhashable"):
        hash(NonTensorData("a"))


def test_non_tensor_repr():
    assert repr(NonTensorData("a", batch_size=[2])) == "NonTensorData(data=a, batch_size=torch.Size([2]), device=None)"
    assert repr(NonTensorStack("a", "b")) == (
        "NonTensorStack(\n    ['a', 'b'],\n    batch_size=torch.Size([2]),\n    device=None)"
    )  # tensordict's form


def test_non_tensor_pickle():
    data = pickle.loads(pickle.dumps(NonTensorData({"k": 1}, batch_size=[2])))
    assert type(data) is NonTensorData
    assert data.data == {"k": 1}
    assert data.batch_size == torch.Size([2])
    grid = pickle.loads(pickle.dumps(NonTensorStack.from_list([["a", "b"], ["c", "d"]])))
    assert type(grid) is NonTensorStack
    assert grid.tolist() == [["a", "b"], ["c", "d"]]
    assert grid[1].tolist() == ["c", "d"]


def test_is_non_tensor_function():
    assert is_non_tensor(NonTensorData("a"))
    assert is_non_tensor(NonTensorStack("a", "b"))
    assert not is_non_tensor(torch.zeros(1))
    assert not is_non_tensor("a")
    assert not is_non_tensor(TensorDict())
    assert tensorbatch.is_non_tensor is is_non_tensor


def test_leaf_holds_no_keys():
    leaf = NonTensorData("a")
    with pytest.raises(RuntimeError, match="non-tensor value"):
        leaf.set("x", torch.zeros(()))
    assert leaf.get("x") is None
    with pytest.raises(KeyError, match="no keys"):
        leaf["x"]


def test_batch_size_setter_on_leaves():
    data = NonTensorData("a", batch_size=[2])
    data.batch_size = [2, 1]
    assert data.tolist() == [["a"], ["a"]]
    st = NonTensorStack("a", "b")
    with pytest.raises(RuntimeError, match="NonTensorStack"):
        st.batch_size = [3]
    assert st.tolist() == ["a", "b"]


def test_non_tensor_stack_has_no_single_data():
    with pytest.raises(AttributeError, match="tolist"):
        NonTensorStack("a", "b").data  # noqa: B018


def test_non_tensor_stack_of_equal_values_has_their_data():
    assert NonTensorStack("a", "a").data == "a"
    stack = tensorbatch.lazy_stack([NonTensorData("x"), NonTensorData("x")])
    assert type(stack) is NonTensorStack and stack.data == "x" and stack.tolist() == ["x", "x"]
    assert NonTensorStack("a", "b", "a")[::2].data == "a"


def test_non_tensor_data_shallow_clone():
    out = NonTensorData("a", batch_size=[2]).clone(False)
    assert type(out) is NonTensorData
    assert out.data == "a"


def test_naming_a_tensordict_with_non_tensor_leaves():
    td = TensorDict({"s": "x", "a": torch.zeros(2, 3), "n": {"t": "y"}}, [2], names=["b"])
    assert td.names == ["b"]
    assert td.get("n").names == ["b"]
    assert td.get("s").names == ["b"] and td.get(("n", "t")).names == ["b"]  # as tensordict
    td.names = ["c"]
    assert td.get("n").names == ["c"] and td.get("s").names == ["c"] and td.get(("n", "t")).names == ["c"]
    assert td["s"] == "x"
    assert td[0].get("s").names == [] and td.unsqueeze(0).get("s").names == [None, "c"]
    td.set_non_tensor("u", "z")
    assert td.get("u").names == ["c"]
    td.names = None
    assert td.get("s").names == [None]


def test_empty_recurse_keeps_non_tensor_leaves():
    """As tensordict: ``empty(recurse=True)`` empties the nodes and keeps the non-tensor leaves."""
    td = TensorDict({"a": torch.zeros(2), "s": "hello", "n": {"b": torch.zeros(2), "t": "x"}}, batch_size=[2])
    out = td.empty(recurse=True)
    assert sorted(map(str, out.keys(include_nested=True))) == ["('n', 't')", "n", "s"]
    assert out["s"] == "hello"
    assert out["n", "t"] == "x"
    assert is_non_tensor(out.get("s"))
    assert is_non_tensor(out.get(("n", "t")))
    smaller = td.empty(recurse=True, batch_size=[])  # the leaves follow the new batch size
    assert smaller.get("s").batch_size == torch.Size([])
    assert smaller.get(("n", "t")).batch_size == torch.Size([])
    assert list(td.empty().keys()) == []


def test_clone_deep_copies_non_tensor_values():
    item = object()
    value = {"k": [item]}
    td = TensorDict({"x": torch.zeros(2), "l": NonTensorStack([1], [2])}, [2])
    td.set_non_tensor("d", value)
    deep, shallow = td.clone(), td.clone(recurse=False)
    assert deep.get("d").data is not value and deep.get("d").data["k"][0] is not item
    assert deep.get("l").tolist() == [[1], [2]] and deep.get("l").tolist()[0] is not td.get("l").tolist()[0]
    shallow_value = shallow.get("d").data
    assert shallow_value is not value and shallow_value["k"] is not value["k"] and shallow_value["k"][0] is item
    assert td.to_tensordict().get("d").data is value  # to_tensordict shares the values (as tensordict)
    assert td.get("d").clone(recurse=False).data is value and td.get("d").copy().data is not value
