"""tensorbatch.functional (pad, pad_sequence, merge_tensordicts, make_tensordict, group_by) and the
conversions of tensorbatch._convert (from_/to_ namedtuple, tuple, struct array, pytree, from_any)."""

from __future__ import annotations

import collections
import dataclasses
import re
import warnings
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from _messages import batch_mismatch

import tensorbatch
from tensorbatch import NonTensorData, NonTensorStack, TensorDict, TensorDictBase
from tensorbatch import _convert as convert
from tensorbatch.functional import cat, group_by, make_tensordict, merge_tensordicts, pad, pad_sequence, stack


@pytest.fixture(scope="module", autouse=True)
def conversions_installed():
    """Attach the conversion methods for this module (a no-op once tensorbatch wires install())."""
    added = convert.install(TensorDictBase)
    yield
    for name in added:
        delattr(TensorDictBase, name)


def td3(names: Any = None) -> TensorDict:
    """batch [3, 4]: a f32[2] (values 1..), n: {b i64[]}."""
    return TensorDict(
        {"a": torch.arange(1.0, 25.0).reshape(3, 4, 2), "n": {"b": torch.arange(1, 13).reshape(3, 4)}},
        batch_size=[3, 4],
        names=names,
    )


def snapshot(td: Any) -> dict:
    return {k: v.clone() for k, v in td.items(include_nested=True, leaves_only=True)} | {"__batch__": td.batch_size}


def assert_unchanged(td: Any, before: dict) -> None:
    assert td.batch_size == before["__batch__"]
    now = {k: v for k, v in td.items(include_nested=True, leaves_only=True)}
    assert set(now) == set(before) - {"__batch__"}
    for k, v in now.items():
        assert v.shape == before[k].shape, k
        assert torch.equal(v, before[k]), k


def test_stack_and_cat_are_still_exported():
    from tensorbatch._ops import torch_function

    assert stack is torch_function.stack
    assert cat is torch_function.cat
    td = td3()
    assert stack([td, td]).batch_size == torch.Size([2, 3, 4])
    assert cat([td, td], 1).batch_size == torch.Size([3, 8])


# ============================================================================================== pad
def test_pad_values_shapes_and_names():
    td = td3(names=["x", "y"])
    out = pad(td, [1, 0, 0, 2], value=-1.0)
    assert out is not td
    assert out.batch_size == torch.Size([4, 6])
    assert out["a"].shape == (4, 6, 2)
    assert out["a"].dtype == torch.float32
    assert out["n", "b"].shape == (4, 6)
    assert out["n", "b"].dtype == torch.int64
    assert torch.equal(out["a"][1:, :4], td["a"])
    assert (out["a"][0] == -1).all()
    assert (out["a"][:, 4:] == -1).all()
    assert (out["n", "b"][0] == -1).all()
    assert out.names == ["x", "y"]
    assert out["n"].names == ["x", "y"]
    assert td.batch_size == torch.Size([3, 4])  # input untouched


def test_pad_only_the_first_dims_and_crop():
    td = td3()
    out = pad(td, (0, 1))
    assert out.batch_size == torch.Size([4, 4])
    assert torch.equal(out["a"][:3], td["a"])
    assert (out["a"][3] == 0).all()
    cropped = pad(td, [-1, 0, 0, -3])
    assert cropped.batch_size == torch.Size([2, 1])
    assert torch.equal(cropped["a"], td["a"][1:, :1])
    assert pad(td, torch.tensor([1, 1])).batch_size == torch.Size([5, 4])
    assert pad(td, [-3, 0]).batch_size == torch.Size([0, 4])


def test_pad_casts_the_value_per_leaf_and_keeps_nested_extra_dims():
    td = TensorDict(
        {
            "i": torch.ones(2, dtype=torch.int64),
            "f": torch.ones(2, dtype=torch.bool),
            "n": TensorDict({"x": torch.ones(2, 5, 3)}, batch_size=[2, 5]),
        },
        batch_size=[2],
    )
    out = pad(td, [1, 1], value=2.5)
    assert out["i"].tolist() == [2, 1, 1, 2]
    assert out["i"].dtype == torch.int64
    assert out["f"].dtype == torch.bool
    assert out["f"].all()
    assert out["n"].batch_size == torch.Size([4, 5])
    assert out["n", "x"].shape == (4, 5, 3)


def test_pad_keeps_grad_and_device():
    x = torch.ones(2, 3, requires_grad=True)
    out = pad(TensorDict({"x": x}, batch_size=[2], device="cpu"), [0, 1])
    assert out.device == torch.device("cpu")
    out["x"].sum().backward()
    assert torch.equal(x.grad, torch.ones(2, 3))


def test_pad_inplace_keeps_identity_and_nested_nodes():
    td = td3()
    nested = td["n"]
    old_a = td["a"]
    out = pad(td, [0, 1], inplace=True)
    assert out is td
    assert td["n"] is nested
    assert td["a"] is not old_a
    assert td.batch_size == torch.Size([4, 4])
    assert nested.batch_size == torch.Size([4, 4])
    assert torch.equal(td["a"][:3], old_a)
    assert (td["a"][3] == 0).all()


@pytest.mark.parametrize(
    ("pad_size", "match"),
    [
        (
            [1, 1, 1, 1, 1, 1],
            r"pad_size has 6 entries but the TensorDict has 2 batch dims \(batch_size \[3, 4\]\)",
        ),
        ([1], r"pad_size must have an even number of entries"),
        (
            [-4, 0],
            r"padding \(-4, 0\) on batch dim 0 of size 3 \(batch_size \[3, 4\]\) would give a negative",
        ),
        ([0, 0, 0, -5], r"on batch dim 1 of size 4"),
    ],
)
@pytest.mark.parametrize("inplace", [False, True])
def test_pad_bad_sizes_raise_and_leave_the_input(pad_size, match, inplace):
    td = td3()
    before = snapshot(td)
    with pytest.raises(RuntimeError, match=match):
        pad(td, pad_size, inplace=inplace)
    assert_unchanged(td, before)


def test_pad_unsafe_still_writes_nothing_on_failure():
    td = td3()
    before = snapshot(td)
    with pytest.raises(RuntimeError) as info:
        pad(td, [-5, 0], inplace=True, safe=False)
    assert "while padding at key 'a'" in "\n".join(info.value.__notes__)
    assert_unchanged(td, before)


def test_pad_bad_arguments():
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        pad(td3(), [1.5, 1])
    with pytest.raises(TypeError, match="pad expects a TensorDict, got Tensor"):
        pad(torch.zeros(3), [1, 1])
    locked = td3().lock_()
    before = snapshot(locked)
    with pytest.raises(RuntimeError, match="Cannot modify locked TensorDict"):
        pad(locked, [1, 1], inplace=True)
    assert_unchanged(locked, before)
    assert not pad(locked, [1, 1]).is_locked


def test_pad_non_tensor_slots_hold_none():
    td = TensorDict({"a": torch.zeros(2), "s": "hi"}, batch_size=[2])
    out = pad(td, [1, 1])
    assert isinstance(out.get("s"), NonTensorStack)
    assert out.get("s").tolist() == [None, "hi", "hi", None]
    same = pad(td, [1, 1], inplace=True)
    assert same is td
    assert td.get("s").tolist() == [None, "hi", "hi", None]


# ===================================================================================== pad_sequence
def seq(n: int, start: float = 0.0, **extra: Any) -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(n, dtype=torch.float32) + start,
            "n": {"b": torch.ones(n, 2) * (start + 1)},
            **extra,
        },
        batch_size=[n],
    )


def test_pad_sequence_right_and_left():
    right = pad_sequence([seq(2), seq(3, 10)])
    assert right.batch_size == torch.Size([2, 3])
    assert right["n"].batch_size == torch.Size([2, 3])
    assert right["a"].tolist() == [[0, 1, 0], [10, 11, 12]]
    assert right["n", "b"].shape == (2, 3, 2)
    assert right.names == [None, None]
    left = pad_sequence([seq(2), seq(3, 10)], padding_side="left", padding_value=-1)
    assert left["a"].tolist() == [[-1, 0, 1], [10, 11, 12]]
    assert left["n", "b"][0, 0].tolist() == [-1, -1]


def test_pad_sequence_masks():
    out = pad_sequence([seq(2), seq(3)], return_mask=True, padding_side="left")
    assert set(out["masks"].keys(include_nested=True, leaves_only=True)) == {"a", ("n", "b")}
    assert out["masks", "a"].dtype == torch.bool
    assert out["masks", "a"].tolist() == [[False, True, True], [True, True, True]]
    assert out["masks", "n", "b"].shape == (2, 3)
    custom = pad_sequence([seq(2), seq(3)], return_mask=("x", "y"))
    assert custom["x", "y", "a"].tolist() == [[True, True, False], [True, True, True]]
    assert "masks" not in custom
    assert "masks" in pad_sequence([seq(1)], return_mask="masks")


def test_pad_sequence_padding_value_mapping():
    out = pad_sequence([seq(1), seq(2)], padding_value={("n", "b"): 7, "a": -100})
    assert out["a"].tolist() == [[0, -100], [0, 1]]
    assert out["n", "b"][0, 1].tolist() == [7, 7]
    partial = pad_sequence([seq(1), seq(2)], padding_value={"a": 5})
    assert partial["n", "b"][0, 1].tolist() == [0, 0]
    with pytest.raises(KeyError, match=r"padding_value has keys \['zz'\] that name no leaf.*\[\('n', 'b'\), 'a'\]"):
        pad_sequence([seq(1), seq(2)], padding_value={"zz": 1})


def test_pad_sequence_feature_dim():
    tds = [TensorDict({"x": torch.ones(3, n)}, batch_size=[3]) for n in (2, 4)]
    out = pad_sequence(tds, pad_dim=1, return_mask=True)
    assert out.batch_size == torch.Size([2, 3])  # the batch is not padded
    assert out["x"].shape == (2, 3, 4)
    assert out["x"][0, :, 2:].eq(0).all()
    assert out["masks", "x"].shape == (2, 3, 4)
    assert out["masks", "x"][0].sum().item() == 6
    unbatched = [TensorDict({"x": torch.ones(n, 8)}) for n in (3, 5)]
    out = pad_sequence(unbatched, return_mask=True)
    assert out.batch_size == torch.Size([2])
    assert out["masks", "x"].sum(-1).tolist() == [3, 5]


def test_pad_sequence_negative_pad_dim():
    tds = [TensorDict({"a": torch.ones(n, 2)}, batch_size=[n]) for n in (3, 5)]
    out = pad_sequence(tds, pad_dim=-2, return_mask=True)
    assert out.batch_size == torch.Size([2, 5])
    assert out["masks", "a"].shape == (2, 5)
    mixed = [TensorDict({"a": torch.ones(n, 2), "b": torch.ones(n)}, batch_size=[n]) for n in (3, 5)]
    with pytest.raises(ValueError, match=r"pad_dim=-1 .* lands on batch dims \[0\] and on feature dims.*'b'"):
        pad_sequence(mixed, pad_dim=-1)


def test_pad_sequence_dtype_of_first_and_nested_extra_dims():
    tds = [
        TensorDict({"i": torch.ones(2, dtype=torch.int32), "n": TensorDict({"x": torch.ones(2, 4)}, [2, 4])}, [2]),
        TensorDict({"i": torch.ones(3, dtype=torch.int64), "n": TensorDict({"x": torch.ones(3, 4)}, [3, 4])}, [3]),
    ]
    out = pad_sequence(tds, padding_value=9)
    assert out["i"].dtype == torch.int32
    assert out["i"].tolist() == [[1, 1, 9], [1, 1, 1]]
    assert out["n"].batch_size == torch.Size([2, 3, 4])


def test_pad_sequence_without_leaves_and_device():
    out = pad_sequence([TensorDict(batch_size=[3]), TensorDict(batch_size=[5])])
    assert out.batch_size == torch.Size([2, 5])
    dev = pad_sequence([TensorDict({"a": torch.ones(1)}, [1], device="cpu"), TensorDict({"a": torch.ones(2)}, [2])])
    assert dev.device == torch.device("cpu")
    empty = pad_sequence(
        [TensorDict({"a": torch.ones(1), "e": {}}, [1]), TensorDict({"a": torch.ones(2), "e": {}}, [2])]
    )
    assert "e" in empty
    assert empty["e"].batch_size == torch.Size([2, 2])


def test_pad_sequence_out():
    out = TensorDict({"a": torch.full((2, 3), -5.0)}, batch_size=[2, 3])
    target_a = out["a"]
    res = pad_sequence([TensorDict({"a": torch.ones(2)}, [2]), TensorDict({"a": torch.ones(3)}, [3])], out=out)
    assert res is out
    assert out["a"] is target_a
    assert out["a"].tolist() == [[1, 1, 0], [1, 1, 1]]


def test_pad_sequence_out_mismatch_writes_nothing():
    out = TensorDict({"a": torch.zeros(2, 4), "b": torch.zeros(2, 4)}, batch_size=[2, 4])
    before = snapshot(out)
    tds = [
        TensorDict({"a": torch.ones(2), "b": torch.ones(2)}, [2]),
        TensorDict({"a": torch.ones(3), "b": torch.ones(3)}, [3]),
    ]
    with pytest.raises(RuntimeError):
        pad_sequence(tds, out=out)
    assert_unchanged(out, before)


def test_pad_sequence_non_tensor_leaves():
    out = pad_sequence([seq(2, s="x"), seq(3, s="y")])
    assert isinstance(out.get("s"), NonTensorStack)
    assert out.get("s").tolist() == [["x", "x", None], ["y", "y", "y"]]
    left = pad_sequence([seq(2, s="x"), seq(3, s="y")], padding_side="left")
    assert left.get("s").tolist()[0] == [None, "x", "x"]


@pytest.mark.parametrize(
    ("tds", "kwargs", "exc", "match"),
    [
        ([], {}, RuntimeError, "list_of_tensordicts cannot be empty"),
        ([seq(1)], {"padding_side": "up"}, ValueError, "padding_side must be 'left' or 'right', got 'up'"),
        (
            [seq(2), TensorDict({"a": torch.ones(3)}, [3])],
            {},
            KeyError,
            r"tensordict 1 and tensordict 0 have different leaves: only in tensordict 0: \[\('n', 'b'\)\]",
        ),
        (
            [TensorDict({"a": torch.ones(3, 2)}, [3]), TensorDict({"a": torch.ones(5, 3)}, [5])],
            {},
            RuntimeError,
            r"leaf 'a' has shape \[5, 3\] in tensordict 1 but \[3, 2\] in tensordict 0; shapes may differ",
        ),
        (
            [TensorDict({"a": torch.ones(3, 2)}, [3]), TensorDict({"a": torch.ones(5, 2, 1)}, [5])],
            {},
            RuntimeError,
            r"leaf 'a' has shape \[5, 2, 1\] in tensordict 1",
        ),
        (
            [TensorDict({"a": torch.tensor(1.0)})],
            {},
            RuntimeError,
            "cannot pad scalars: the leaf 'a' is 0-dim",
        ),
        ([seq(2)], {"pad_dim": 5}, IndexError, r"pad_dim=5 is out of range for the leaf 'a' of shape \[2\]"),
        ([seq(2)], {"pad_dim": -3}, IndexError, r"pad_dim=-3 is out of range"),
        (
            [seq(2)],
            {"return_mask": "a"},
            RuntimeError,
            r"cannot store the mask \('a', 'a'\): 'a' is a leaf of the result",
        ),
        (
            [TensorDict({"a": torch.ones(2), "m": {"a": torch.ones(2)}}, [2])],
            {"return_mask": "m"},
            RuntimeError,
            r"cannot store the mask \('m', 'a'\): \('m', 'a'\) is a leaf",
        ),
        (
            [seq(2), torch.ones(2)],
            {},
            TypeError,
            "pad_sequence expects TensorDicts, got Tensor at position 1",
        ),
        ([seq(2, s="x"), seq(2, s=torch.ones(2))], {}, TypeError, "the leaf 's' must be a tensor in every"),
    ],
)
def test_pad_sequence_errors(tds, kwargs, exc, match):
    befores = [snapshot(td) for td in tds if isinstance(td, TensorDict)]
    with pytest.raises(exc, match=match):
        pad_sequence(tds, **kwargs)
    for td, before in zip([t for t in tds if isinstance(t, TensorDict)], befores, strict=True):
        assert_unchanged(td, before)


# ================================================================================ merge_tensordicts
def test_merge_union_first_wins_no_copy():
    a = TensorDict({"x": torch.zeros(2), "n": {"y": torch.zeros(2)}, "c": torch.zeros(2)}, [2], names=["t"])
    b = TensorDict({"z": torch.ones(2, 3), "n": {"w": torch.ones(2)}, "c": torch.ones(2)}, [2])
    out = merge_tensordicts(a, b)
    assert set(out.keys(include_nested=True, leaves_only=True)) == {"x", "c", "z", ("n", "y"), ("n", "w")}
    assert out["x"] is a["x"]
    assert out["z"] is b["z"]
    assert out["c"] is a["c"]
    assert out.batch_size == torch.Size([2])
    assert out.names == ["t"]
    assert out["n"].names == ["t"]
    assert out["n"] is not a["n"]  # a new tree; the inputs are not modified
    assert set(a.keys()) == {"x", "n", "c"}


def test_merge_callbacks():
    a = TensorDict({"c": torch.zeros(2), "n": {"y": torch.zeros(2)}, "only": torch.zeros(2)}, [2])
    b = TensorDict({"c": torch.ones(2), "n": {"y": torch.ones(2)}}, [2])
    c = TensorDict({"c": torch.full((2,), 2.0), "n": {"y": torch.full((2,), 2.0)}}, [])
    out = merge_tensordicts(a, b, c, callback_exist=lambda *v: torch.stack(v, -1))
    assert out["c"].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert out["n", "y"].shape == (2, 3)
    assert out["only"] is a["only"]  # not in every input: first value, no callback
    per_key = merge_tensordicts(a, b, callback_exist={("n", "y"): lambda *v: v[1], "c": lambda *v: v[0] + 5})
    assert per_key["n", "y"] is b["n", "y"]
    assert per_key["c"].tolist() == [5, 5]


def test_merge_keeps_first_structure_and_device():
    a = TensorDict({"n": {"e": {}}, "x": torch.zeros(2)}, [2], device="cpu")
    b = TensorDict({"y": torch.ones(2)}, [2])
    out = merge_tensordicts(a, b)
    assert ("n", "e") in out.keys(include_nested=True)
    assert out.device == torch.device("cpu")
    assert merge_tensordicts(b, a).device is None


def test_merge_non_tensor_first_wins():
    a = TensorDict({"x": torch.zeros(2), "s": "a"}, [2])
    b = TensorDict({"x": torch.ones(2), "s": "b", "t": "only b"}, [2])
    out = merge_tensordicts(a, b, callback_exist=lambda *v: v[0] + v[1])
    assert out["s"] == "a"
    assert out["t"] == "only b"
    assert out["x"].tolist() == [1, 1]
    short = TensorDict({"u": NonTensorStack("p", "q", "r")}, [3])
    assert "u" not in merge_tensordicts(a, short)  # does not fit the batch: left out, as tensordict


def test_merge_errors():
    a = TensorDict({"n": {"y": torch.zeros(2)}, "x": torch.zeros(2)}, [2])
    with pytest.raises(RuntimeError, match="at least 2 tensordicts must be provided, got 1"):
        merge_tensordicts(a)
    with pytest.raises(TypeError, match="merge_tensordicts expects TensorDicts, got dict at position 1"):
        merge_tensordicts(a, {"x": torch.zeros(2)})
    with pytest.raises(TypeError, match=r"key \('n', 'y'\): 'n' is a Tensor in tensordict 1, not a TensorDict"):
        merge_tensordicts(a, TensorDict({"n": torch.zeros(2)}, [2]))
    with pytest.raises(TypeError, match=r"key 'n' is a TensorDict in tensordict 1 but a leaf in another"):
        merge_tensordicts(TensorDict({"n": torch.zeros(2)}, [2]), a)
    with pytest.raises(TypeError, match=r"key \('n', 'y'\) of tensordict 2 conflicts with 'n'"):
        merge_tensordicts(TensorDict({"z": torch.zeros(2)}, [2]), TensorDict({"n": torch.zeros(2)}, [2]), a)
    with pytest.raises(TypeError, match=r"key 'x' is a TensorDict in tensordict 1 but a leaf"):
        merge_tensordicts(a, TensorDict({"x": {"q": torch.zeros(2)}}, [2]))
    with pytest.raises(RuntimeError, match=batch_mismatch([2], "x", [5])):
        merge_tensordicts(a, a.clone(), callback_exist={"x": lambda *v: torch.zeros(5)})
    with pytest.raises(RuntimeError, match=batch_mismatch([2], ("n", "y"), [5])):
        merge_tensordicts(a, a.clone(), callback_exist=lambda *v: torch.zeros(5))
    with pytest.raises(ZeroDivisionError) as info:
        merge_tensordicts(a, a.clone(), callback_exist={"x": lambda *v: 1 / 0})
    assert "while calling callback_exist at key 'x'" in info.value.__notes__


# ================================================================================== make / group_by
def test_make_tensordict():
    td = make_tensordict({"a": torch.zeros(3)}, a=torch.ones(3, 4), b=torch.zeros(3, 4), batch_size=3)
    assert td.batch_size == torch.Size([3])
    assert td["a"].shape == (3,)
    auto = make_tensordict({"a": torch.zeros(3), "b": {"c": torch.zeros(3, 4)}}, auto_batch_size=True)
    assert auto.batch_size == torch.Size([3])
    assert auto["b"].batch_size == torch.Size([3, 4])
    conv = make_tensordict(pair=(torch.zeros(2), 1), device="cpu")
    assert conv.device == torch.device("cpu")
    assert conv["pair", "1"].dtype == torch.int64
    assert make_tensordict().batch_size == torch.Size([])
    with pytest.raises(RuntimeError, match=batch_mismatch([4], "a", [3, 4])):
        make_tensordict(a=torch.zeros(3, 4), batch_size=[4])


def test_group_by_tensor_entries():
    td = TensorDict({"uid": torch.tensor([2, 0, 2, 1, 0]), "r": torch.arange(5.0)}, batch_size=[5])
    values, groups = group_by(td, "uid")
    assert values.tolist() == [0, 1, 2]
    assert isinstance(groups, tuple)
    assert [g["r"].tolist() for g in groups] == [[1, 4], [3], [0, 2]]
    assert all(type(g) is TensorDict for g in groups)
    rows = TensorDict({"k": torch.tensor([[1, 2], [0, 0], [1, 2]]), "n": {"v": torch.arange(3)}}, batch_size=[3])
    values, groups = group_by(rows, "k")
    assert values.tolist() == [[0, 0], [1, 2]]
    assert [g["n", "v"].tolist() for g in groups] == [[1], [0, 2]]
    values, _ = group_by(rows, ("n", "v"))
    assert values.tolist() == [0, 1, 2]


def test_group_by_non_tensor_entry():
    td = TensorDict({"name": NonTensorStack("b", "a", "b"), "r": torch.arange(3)}, batch_size=[3])
    values, groups = group_by(td, "name")
    assert values == ["a", "b"]
    assert [g["r"].tolist() for g in groups] == [[1], [0, 2]]


def test_group_by_errors():
    with pytest.raises(ValueError, match=r"group_by: groups rows along the first batch dim.*batch_size \[\]"):
        group_by(TensorDict({"a": torch.zeros(2)}), "a")
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}, "o": NonTensorStack({}, {})}, [2])
    with pytest.raises(KeyError, match=r"no entry 'zz'; its keys are \['a', 'n', 'o'\]"):
        group_by(td, "zz")
    with pytest.raises(TypeError, match="needs a tensor or non-tensor entry, but 'n' holds a TensorDict"):
        group_by(td, "n")
    with pytest.raises(TypeError, match="the values of the non-tensor entry 'o' must be hashable and sortable"):
        group_by(td, "o")


# ===================================================================================== conversions
class Point(NamedTuple):
    x: torch.Tensor
    y: Any


@dataclasses.dataclass
class Data:
    obs: torch.Tensor
    extra: tuple


@dataclasses.dataclass
class Defaults:
    a: int = 1
    b: float = 2.0


def test_from_namedtuple_nested_and_batch_keywords():
    nt = Point(torch.zeros(3, 4), Point(torch.ones(3), 1))
    td = TensorDict.from_namedtuple(nt)
    assert type(td) is TensorDict
    assert td.batch_size == torch.Size([])
    assert td["y", "y"].dtype == torch.int64
    assert td["y", "y"].shape == ()
    auto = TensorDict.from_namedtuple(Point(torch.zeros(3, 4), {"k": torch.zeros(3, 2)}), auto_batch_size=True)
    assert auto.batch_size == torch.Size([3])
    assert auto["y"].batch_size == torch.Size([3, 2])
    sized = TensorDict.from_namedtuple(Point(torch.zeros(3), {"k": torch.zeros(3)}), batch_size=[3], device="cpu")
    assert sized["y"].batch_size == torch.Size([3])
    assert sized.device == torch.device("cpu")
    limited = TensorDict.from_namedtuple(
        Point(torch.zeros(3, 4), torch.zeros(3, 4)), auto_batch_size=True, batch_dims=1
    )
    assert limited.batch_size == torch.Size([3])


def test_from_namedtuple_structseq_and_mapping():
    td = TensorDict.from_namedtuple(torch.tensor([[2, 0], [1, 3]]).max(0))
    assert list(td.keys()) == ["values", "indices"]
    assert td["values"].tolist() == [2, 3]
    assert TensorDict.from_namedtuple({"a": torch.zeros(1)})["a"].shape == (1,)
    assert TensorDict.from_namedtuple(Point(torch.zeros(1), None)).get("y").data is None


def test_from_namedtuple_errors_and_warnings():
    with pytest.raises(TypeError, match="from_namedtuple expects a named tuple, got tuple"):
        TensorDict.from_namedtuple((torch.zeros(2),))
    with pytest.raises(TypeError, match="Conflicting batch sizes in from_namedtuple"):
        TensorDict.from_namedtuple(Point(torch.zeros(3), torch.zeros(3)), batch_size=[3], auto_batch_size=True)
    with pytest.raises(RuntimeError, match=batch_mismatch([3], "y", [])):
        TensorDict.from_namedtuple(Point(torch.zeros(3), 1), batch_size=[3])
    with pytest.warns(FutureWarning, match="from_namedtuple ignores batch_dims=1 without auto_batch_size=True"):
        TensorDict.from_namedtuple(Point(torch.zeros(3), torch.zeros(3)), batch_dims=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # batch_dims would not change this result: no warning
        TensorDict.from_namedtuple(Point(torch.zeros(3), torch.zeros(2)), batch_dims=1)


def test_from_tuple():
    td = TensorDict.from_tuple((torch.zeros(3, 4), (torch.ones(3), {"z": torch.ones(3, 2)})), auto_batch_size=True)
    assert td.batch_size == torch.Size([3])
    assert td["1", "1"].batch_size == torch.Size([3, 2])
    assert list(td.keys()) == ["0", "1"]
    assert TensorDict.from_tuple((torch.zeros(2), 1.5))["1"].dtype == torch.float32
    assert TensorDict.from_tuple(()).batch_size == torch.Size([])
    assert list(TensorDict.from_tuple(Point(torch.zeros(1), torch.zeros(1))).keys()) == ["0", "1"]
    with pytest.raises(TypeError, match="Conflicting batch sizes in from_tuple"):
        TensorDict.from_tuple((torch.zeros(3),), batch_size=[3], auto_batch_size=True)
    with pytest.raises(RuntimeError, match=batch_mismatch([3], "0", [2])):
        TensorDict.from_tuple((torch.zeros(2),), batch_size=[3])


def test_from_struct_array_is_zero_copy():
    x = np.zeros(4, dtype=[("a", "i4"), ("b", "f4"), ("c", "f8", (2,)), ("n", [("p", "f4"), ("q", "i4")])])
    td = TensorDict.from_struct_array(x)
    assert td.batch_size == torch.Size([4])
    assert td["n"].batch_size == torch.Size([4])
    assert {k: td[k].dtype for k in ("a", "b", "c")} == {
        "a": torch.int32,
        "b": torch.float32,
        "c": torch.float64,
    }
    assert td["c"].shape == (4, 2)
    assert td["n", "q"].dtype == torch.int32
    for key in ("a", "b", "c", ("n", "p"), ("n", "q")):
        assert np.shares_memory(td[key].numpy(), x), key
    assert td["a"].data_ptr() == x.ctypes.data
    x["a"] += 3
    td["b"][1] = 7
    assert td["a"].tolist() == [3, 3, 3, 3]
    assert x["b"][1] == 7
    strided = TensorDict.from_struct_array(x[::2])
    assert strided.batch_size == torch.Size([2])
    assert np.shares_memory(strided["a"].numpy(), x)


def test_from_struct_array_copies_what_torch_cannot_view():
    packed = np.array([(1, 2.5), (3, 4.5)], dtype=[("i", "i8"), ("f", "f4")])  # 12-byte records
    td = TensorDict.from_struct_array(packed)
    assert td["i"].tolist() == [1, 3]
    assert td["f"].tolist() == [2.5, 4.5]
    assert not np.shares_memory(td["i"].numpy(), packed)
    assert np.shares_memory(td["f"].numpy(), packed)
    big = np.array([(1,), (2,)], dtype=[("d", ">i4")])
    assert TensorDict.from_struct_array(big)["d"].tolist() == [1, 2]


def test_from_struct_array_keywords_and_strings():
    x = np.zeros((2, 3), dtype=[("a", "f4", (5,))])
    assert TensorDict.from_struct_array(x, batch_size=[2]).batch_size == torch.Size([2])
    assert TensorDict.from_struct_array(x, auto_batch_size=True).batch_size == torch.Size([2, 3, 5])
    assert TensorDict.from_struct_array(x, auto_batch_size=True, batch_dims=1).batch_size == torch.Size([2])
    assert TensorDict.from_struct_array(x, device="cpu").device == torch.device("cpu")
    named = np.array([("Rex", 9), ("Fido", 3)], dtype=[("name", "U10"), ("age", "i4")])
    td = TensorDict.from_struct_array(named)
    assert isinstance(td.get("name"), NonTensorData)
    assert list(td.get("name").data) == ["Rex", "Fido"]
    back = td.to_struct_array()
    assert back.dtype == named.dtype
    assert (back == named).all()


def test_from_struct_array_errors():
    with pytest.raises(TypeError, match=r"expects a NumPy structured array .* got ndarray of dtype float64"):
        TensorDict.from_struct_array(np.zeros(3))
    with pytest.raises(TypeError, match="got list"):
        TensorDict.from_struct_array([1, 2])
    with pytest.raises(TypeError, match="Conflicting batch sizes in from_struct_array"):
        TensorDict.from_struct_array(np.zeros(3, dtype=[("a", "f4")]), batch_size=[3], auto_batch_size=True)
    with pytest.raises(RuntimeError, match=batch_mismatch([5], "a", [3])):
        TensorDict.from_struct_array(np.zeros(3, dtype=[("a", "f4")]), batch_size=[5])


def test_to_struct_array():
    td = TensorDict(
        {
            "a": torch.arange(3),
            "b": torch.ones(3, 2),
            "n": TensorDict({"c": torch.zeros(3, 4, dtype=torch.bool)}, [3, 4]),
        },
        batch_size=[3],
    )
    arr = td.to_struct_array()
    assert arr.shape == (3,)
    assert arr.dtype == np.dtype([("a", "<i8"), ("b", "<f4", (2,)), ("n", [("c", "?")], (4,))])
    assert arr["a"].tolist() == [0, 1, 2]
    assert arr["n"]["c"].shape == (3, 4)
    assert not np.shares_memory(arr, td["a"].numpy())
    back = TensorDict.from_struct_array(arr)
    assert torch.equal(back["a"], td["a"])
    assert torch.equal(back["b"], td["b"])
    scalar = TensorDict({"a": torch.tensor(3.0), "v": torch.arange(3.0)}).to_struct_array()
    assert scalar.shape == ()
    assert scalar["v"].tolist() == [0.0, 1.0, 2.0]
    grad = TensorDict({"a": torch.ones(2, requires_grad=True), "s": "long string here"}, [2]).to_struct_array()
    assert grad.dtype["s"] == np.dtype("U16")
    assert grad["s"].tolist() == ["long string here"] * 2


def test_to_struct_array_errors():
    with pytest.raises(ValueError, match="the TensorDict has no entries"):
        TensorDict(batch_size=[2]).to_struct_array()
    with pytest.raises(ValueError, match=r"the TensorDict at 'n' has no entries"):
        TensorDict({"a": torch.ones(2), "n": {}}, [2]).to_struct_array()
    with pytest.raises(TypeError, match=r"the leaf \('n', 'b'\) of dtype torch.bfloat16 and shape \[2\] has no NumPy"):
        TensorDict({"n": {"b": torch.ones(2, dtype=torch.bfloat16)}}, [2]).to_struct_array()


def test_to_namedtuple():
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3, 2)}, "e": {}}, [3])
    nt = td.to_namedtuple()
    assert type(nt).__name__ == "GenericDict"
    assert nt._fields == ("a", "n", "e")
    assert type(nt.n).__name__ == "GenericDict"
    assert nt.n.b.shape == (3, 2)
    assert nt.e == ()
    D = collections.namedtuple("D", ["a", "n", "e"])
    typed = td.to_namedtuple(D)
    assert type(typed) is D
    assert type(typed.n).__name__ == "GenericDict"
    E = collections.namedtuple("E", ["b", "c"], defaults=[5])
    filled = TensorDict({"b": torch.ones(1)}).to_namedtuple(E)
    assert type(filled) is E
    assert filled.c == 5
    X = collections.namedtuple("X", ["x", "b", "c"], defaults=[0, 0, 0])
    nested = TensorDict({"x": {"b": torch.ones(1)}}).to_namedtuple(X)
    assert type(nested.x) is X
    assert nested.x.c == 0
    other = TensorDict({"x": {"q": torch.ones(1)}}).to_namedtuple(X)
    assert type(other.x).__name__ == "GenericDict"  # ...and a GenericDict when it does not
    assert TensorDict({"q": torch.ones(1)}).to_namedtuple(dict) == {"q": torch.ones(1)}
    with pytest.raises(ValueError, match="must be valid identifiers"):
        TensorDict({"not valid": torch.ones(1)}).to_namedtuple()
    with pytest.raises(TypeError, match="unexpected keyword argument 'q'"):
        TensorDict({"q": torch.ones(1)}).to_namedtuple(E)
    back = TensorDict.from_namedtuple(td.to_namedtuple())
    assert set(back.keys(include_nested=True)) == set(td.keys(include_nested=True))


def test_from_any_dispatch():
    t = torch.zeros(2)
    td = TensorDict({"a": t}, [2])
    assert TensorDict.from_any(t) is t
    assert TensorDict.from_any(td) is td
    obj = object()
    assert TensorDict.from_any(obj) is obj
    assert TensorDict.from_any(None) is None
    assert TensorDict.from_any("s") == "s"
    assert TensorDict.from_any([1, 2, 3]).tolist() == [1, 2, 3]
    assert TensorDict.from_any([[1.0], [2.0]]).shape == (2, 1)
    assert isinstance(TensorDict.from_any([1, 2.0]), NonTensorStack)
    assert TensorDict.from_any(["a", "b"]).tolist() == ["a", "b"]
    d = TensorDict.from_any(collections.UserDict({"a": torch.zeros(2, 3), "t": (torch.zeros(2),)}), batch_size=[2])
    assert d.batch_size == torch.Size([2])
    assert d["t"].batch_size == torch.Size([2])
    with pytest.raises(RuntimeError, match=batch_mismatch([2], "1", [])):
        TensorDict.from_any({"t": (torch.zeros(2), 1)}, batch_size=[2])
    assert TensorDict.from_any({"a": np.ones(2)})["a"].dtype == torch.float64
    assert TensorDict.from_any(np.zeros(3, dtype=[("a", "f4")])).batch_size == torch.Size([3])
    assert list(TensorDict.from_any(Point(torch.zeros(1), torch.zeros(1))).keys()) == ["x", "y"]
    assert TensorDict.from_any({"a": torch.zeros(2, 3)}, auto_batch_size=True, batch_size=[2]).batch_size == (2,)
    with pytest.raises(KeyError, match="keys must be a str"):
        TensorDict.from_any({1: torch.zeros(3)})
    with pytest.raises(ValueError, match="Cannot pass both batch_size and batch_dims"):
        convert.from_dict({"a": torch.zeros(3)}, batch_size=[3], batch_dims=1)


def test_from_any_structseq_warns_and_uses_positions():
    with pytest.warns(FutureWarning, match=r"torch.return_types.max like a plain tuple, with the keys \['0', '1'\]"):
        td = TensorDict.from_any(torch.tensor([2, 0]).max(0))
    assert list(td.keys()) == ["0", "1"]


def test_from_any_and_from_dataclass():
    data = Data(obs=torch.zeros(3, 4), extra=(torch.ones(3), {"x": torch.ones(3)}))
    td = TensorDict.from_any(data, auto_batch_size=True)
    assert type(td) is TensorDict
    assert td.batch_size == torch.Size([3])
    assert list(td.keys(include_nested=True, leaves_only=True)) == [
        "obs",
        ("extra", "0"),
        ("extra", "1", "x"),
    ]
    assert TensorDict.from_any(data, batch_size=[3])["extra", "1"].batch_size == torch.Size([3])
    with pytest.warns(FutureWarning, match="from_any ignores batch_dims=1"):
        TensorDict.from_any(data, batch_dims=1)
    with pytest.warns(FutureWarning, match="dataclass type Defaults was converted"):
        defaults = TensorDict.from_any(Defaults)
    assert defaults["a"].item() == 1
    with pytest.raises(TypeError, match=r"dataclass type Data, whose fields \['obs', 'extra'\] have no default"):
        TensorDict.from_dataclass(Data)
    with pytest.raises(TypeError, match="from_dataclass expects a dataclass instance, got int"):
        TensorDict.from_dataclass(1)
    as_tc = TensorDict.from_dataclass(data, as_tensorclass=True, batch_size=[3])
    assert type(as_tc).__name__ == "Data_tc" and as_tc.batch_size == torch.Size([3])
    assert torch.equal(as_tc.obs, data.obs)
    with pytest.raises(TypeError, match="Conflicting batch sizes in from_dataclass"):
        TensorDict.from_dataclass(data, batch_size=[3], auto_batch_size=True)


def _tree_equal(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _tree_equal(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _tree_equal(x, y)
    else:
        assert a == b


class Key:
    pass


@pytest.mark.parametrize(
    "tree",
    [
        pytest.param({"obs": torch.zeros(3, 4), "pair": (torch.zeros(3), torch.ones(3))}, id="dict-tuple"),
        pytest.param([torch.arange(3), [torch.zeros(2), {"a": torch.ones(1)}]], id="nested-lists"),
        pytest.param(collections.OrderedDict(b=torch.ones(1), a=torch.zeros(1)), id="ordered-dict"),
        pytest.param(Point(torch.zeros(2), {"k": torch.ones(2)}), id="namedtuple"),
        pytest.param({"a": {"b": {"c": torch.ones(1)}}}, id="deep"),
    ],
)
def test_pytree_round_trip(tree):
    td = TensorDict.from_pytree(tree)
    assert "_pytree_type" in td
    _tree_equal(tree, td.to_pytree())
    _tree_equal(tree, convert.from_pytree(tree).to_pytree())


def test_pytree_special_keys_numbers_and_types():
    key = Key()
    tree = {"t": torch.ones(2), key: torch.arange(2), 3: torch.zeros(1)}
    back = TensorDict.from_pytree(tree).to_pytree()
    assert list(back) == ["t", key, 3]
    assert torch.equal(back[key], torch.arange(2))
    numbers = TensorDict.from_pytree([1, 2.5, np.ones(2)]).to_pytree()
    assert [type(v) for v in numbers] == [torch.Tensor] * 3
    assert numbers[0].dtype == torch.int64
    dd = collections.defaultdict(list, a=torch.zeros(1))
    rebuilt = TensorDict.from_pytree(dd).to_pytree()
    assert type(rebuilt) is collections.defaultdict
    assert rebuilt.default_factory is None
    t = torch.zeros(1)
    assert TensorDict.from_pytree(t) is t
    plain = TensorDict({"a": torch.zeros(1)})
    assert plain.to_pytree() is plain
    with pytest.raises(NotImplementedError, match="from_pytree: unsupported type str"):
        TensorDict.from_pytree(["a"])


def test_pytree_auto_batch_size():
    auto = TensorDict.from_pytree({"a": torch.zeros(3, 2), "b": [torch.zeros(3)]}, auto_batch_size=True)
    assert auto.batch_size == torch.Size([3])


def test_pytree_batch_size():
    td = TensorDict.from_pytree({"a": torch.zeros(3), "b": [torch.zeros(3)]}, batch_size=[3])
    assert td["b"].batch_size == torch.Size([3])
    assert isinstance(td["b"].get("_pytree_type"), NonTensorData)
    assert type(td.to_pytree()["b"]) is list


def test_module_level_functions_build_tensordicts():
    nt = Point(torch.zeros(2), torch.ones(2))
    assert type(convert.from_namedtuple(nt)) is TensorDict
    assert list(convert.from_tuple((torch.zeros(1),)).keys()) == ["0"]
    assert convert.from_struct_array(np.zeros(2, dtype=[("a", "f4")])).batch_size == torch.Size([2])
    assert convert.from_any({"a": torch.zeros(2)}, auto_batch_size=True).batch_size == torch.Size([2])
    assert convert.from_dict({"a": torch.zeros(2, 3)}, batch_dims=1).batch_size == torch.Size([2])


def test_install_is_idempotent_and_does_not_clobber():
    assert convert.install(TensorDictBase) == []  # the fixture installed them already

    class Own:
        def to_pytree(self):
            return "mine"

    added = convert.install(Own)
    assert "to_pytree" not in added
    assert Own().to_pytree() == "mine"
    assert set(added) == {
        "from_any",
        "from_dataclass",
        "from_dict",
        "from_namedtuple",
        "from_pytree",
        "from_struct_array",
        "from_tuple",
        "to_namedtuple",
        "to_struct_array",
    }
    assert convert.install(Own) == []
    for name in ("from_any", "from_namedtuple", "to_namedtuple", "to_struct_array"):
        assert hasattr(TensorDict, name)
    assert tensorbatch.TensorDict.from_tuple.__self__ is TensorDict  # bound to the class it is called on


def test_error_messages_name_the_key_path():
    td = TensorDict({"n": {"x": torch.ones(2, 3)}}, [2])
    with pytest.raises(RuntimeError) as info:
        pad_sequence([td, TensorDict({"n": {"x": torch.ones(3, 4)}}, [3])])
    assert re.search(r"leaf \('n', 'x'\) has shape \[3, 4\] in tensordict 1 but \[2, 3\]", str(info.value))
