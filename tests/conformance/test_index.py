"""Indexing: getitem/setitem over batch dims, iteration, get_at/set_at_, masks, where, gather."""

from __future__ import annotations

import pytest
import torch
from _flavours import (
    BATCH,
    assert_leaves,
    assert_op,
    assert_same_content,
    leaf_ids,
    leaves,
    reference,
    requires,
    snapshot,
)

T = torch.tensor
MASK = T([[True, False, True, True], [False, False, False, False], [True, True, False, True]])

# id -> (index on the TensorDict, the same index on a leaf); most are identical
INDICES = {
    "int": (1, 1),
    "neg_int": (-1, -1),
    "slice": (slice(0, 2), slice(0, 2)),
    "step": (slice(None, None, 2), slice(None, None, 2)),
    "empty_slice": (slice(2, 2), slice(2, 2)),
    "int_int": ((1, 2), (1, 2)),
    "slice_int": ((slice(1, 3), 0), (slice(1, 3), 0)),
    "int_slice": ((0, slice(1, None)), (0, slice(1, None))),
    "ellipsis_int": ((..., 1), (slice(None), 1)),
    "ellipsis_first": ((0, ...), (0,)),
    "none": (None, None),
    "none_mid": ((slice(None), None), (slice(None), None)),
    "none_end": ((slice(None), slice(None), None), (slice(None), slice(None), None)),
    "list": ([0, 2], [0, 2]),
    "long_tensor": (T([2, 0, 2]), T([2, 0, 2])),
    "tensor_2d": (T([[0, 1], [2, 0]]), T([[0, 1], [2, 0]])),
    "tensor_dim1": ((slice(None), T([3, 0])), (slice(None), T([3, 0]))),
    "two_tensors": ((T([0, 2]), T([1, 3])), (T([0, 2]), T([1, 3]))),
    "bool_dim0": (T([True, False, True]), T([True, False, True])),
    "bool_2d": (MASK, MASK),
    "int_bool": ((1, T([True, False, True, False])), (1, T([True, False, True, False]))),
    "tuple_of_ints": (((0, 2),), ((0, 2),)),  # a tuple of ints inside the index is a list index, as in torch
    "tuple_pair": (((0, 2), (1, 3)), ((0, 2), (1, 3))),
}
SET_INDICES = ["int", "slice", "int_int", "tensor_dim1", "bool_2d", "ellipsis_int", "step", "tuple_pair"]
SET_NUMBER_INDICES = [*SET_INDICES, "long_tensor", "list"]


def _batch_after(idx):
    return torch.empty(BATCH)[idx].shape


@pytest.mark.parametrize("case", INDICES, ids=list(INDICES))
def test_getitem(flavour, tdf, case):
    requires(flavour, "uniform_members")
    td_idx, leaf_idx = INDICES[case]
    out = tdf[td_idx]
    assert_leaves(tdf, lambda x: x[leaf_idx], out, batch_size=_batch_after(leaf_idx))
    assert out.get("nested").batch_size == out.batch_size
    assert out.get(("nested", "deep")).batch_size == out.batch_size


@pytest.mark.parametrize("case", ["int", "slice", "ellipsis_int"])
def test_getitem_nested_then_index_agree(flavour, tdf, case):
    requires(flavour, "uniform_members")
    td_idx, leaf_idx = INDICES[case]
    assert torch.equal(tdf[td_idx].get(("nested", "deep", "e")), tdf.get(("nested", "deep", "e"))[leaf_idx])
    assert_leaves(tdf.get("nested"), lambda x: x[leaf_idx], tdf.get("nested")[td_idx])


def test_slice_is_a_view(flavour, tdf):
    requires(flavour, "inplace")
    requires(flavour, "index_views")
    sub = tdf[1:3]
    sub.set_(("nested", "d"), torch.full((2, 4, 2), -1.0))
    assert (tdf.get(("nested", "d"))[1:3] == -1).all()
    assert not (tdf.get(("nested", "d"))[0] == -1).any()
    if "stored_leaves" in flavour.caps:  # the slice's leaves are views too
        sub.get("a").fill_(-2.0)
        assert (tdf.get("a")[1:3] == -2).all()
        assert not (tdf.get("a")[0] == -2).any()


@pytest.mark.parametrize("idx", [3, -4, (0, 4), (slice(None), slice(None), 0)], ids=["row", "neg", "col", "extra"])
def test_getitem_out_of_range(tdf, idx):
    with pytest.raises(IndexError):
        tdf[idx]


def test_getitem_wrong_mask_shape(tdf):
    with pytest.raises(IndexError):
        tdf[torch.ones(4, dtype=torch.bool)]


def test_iteration_over_dim0(flavour, tdf):
    requires(flavour, "uniform_members")
    rows = list(tdf)
    assert len(rows) == 3
    for i, row in enumerate(rows):
        assert_leaves(tdf, lambda x, i=i: x[i], row, batch_size=[4])


@pytest.mark.parametrize("case", SET_INDICES)
def test_setitem_tensordict_value(flavour, tdf, case):
    requires(flavour, "inplace")
    td_idx, leaf_idx = INDICES[case]
    other = flavour.factory(seed=1)
    before = snapshot(tdf)
    ids = leaf_ids(flavour, tdf)
    tdf[td_idx] = other[td_idx]

    def expected(path, x):
        x = x.clone()
        x[leaf_idx] = leaves(other)[path][leaf_idx]
        return x

    assert_leaves({p: expected(p, x) for p, x in before.items()}, lambda x: x, tdf)
    assert leaf_ids(flavour, tdf) == ids  # written in place


@pytest.mark.parametrize("case", SET_NUMBER_INDICES)
def test_setitem_number(flavour, tdf, case):
    requires(flavour, "inplace")
    td_idx, leaf_idx = INDICES[case]
    before = snapshot(tdf)
    tdf[td_idx] = 0

    def expected(x):
        x = x.clone()
        x[leaf_idx] = 0
        return x

    assert_leaves(before, expected, tdf)


def test_setitem_partial_nested_dict(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    e = torch.zeros(2, 4, dtype=torch.float64)
    tdf[0:2] = {"a": torch.full((2, 4, 5), 7.0), "nested": {"deep": {"e": e}}}
    after = leaves(tdf)
    assert (after["a",][:2] == 7).all()
    assert torch.equal(after["a",][2], before["a",][2])
    assert (after["nested", "deep", "e"][:2] == 0).all()
    for key in (("b",), ("c",), ("nested", "d")):
        assert torch.equal(after[key], before[key])


def test_setitem_rejects_bad_shape_without_partial_write(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    with pytest.raises(RuntimeError):
        tdf[0] = {"a": torch.zeros(4, 5), "nested": {"d": torch.zeros(3, 2)}}
    assert_leaves(before, lambda x: x, tdf)


def test_get_at(flavour, tdf):
    idx = (slice(1, 3), T([0, 3]))
    assert torch.equal(tdf.get_at(("nested", "d"), idx), tdf.get(("nested", "d"))[idx])
    assert torch.equal(tdf.get_at("a", 2), tdf.get("a")[2])
    if "uniform_members" in flavour.caps:  # get_at(node, i) hands out a lazy stack's member
        sub = tdf.get_at("nested", 1)
        assert_leaves(tdf.get("nested"), lambda x: x[1], sub, batch_size=[4])
    sentinel = torch.zeros(())
    assert tdf.get_at("missing", 0, sentinel) is sentinel


def test_set_at_(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    tdf.set_at_(("nested", "d"), torch.full((4, 2), -3.0), 1)
    tdf.set_at_("b", T([100, 200]), (2, T([0, 3])))
    d, b = before["nested", "d"].clone(), before["b",].clone()
    d[1] = -3.0
    b[2, T([0, 3])] = T([100, 200])
    after = leaves(tdf)
    assert torch.equal(after["nested", "d"], d)
    assert torch.equal(after["b",], b)
    with pytest.raises(KeyError):
        tdf.set_at_("missing", torch.zeros(4), 0)


def test_update_at_(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    tdf.update_at_({"a": torch.zeros(4, 5), "nested": {"d": torch.ones(4, 2)}}, 2)
    after = leaves(tdf)
    assert (after["a",][2] == 0).all()
    assert torch.equal(after["a",][:2], before["a",][:2])
    assert (after["nested", "d"][2] == 1).all()
    assert torch.equal(after["b",], before["b",])


def test_copy_at_(flavour, tdf):
    requires(flavour, "inplace")
    other = flavour.factory(seed=1)
    ids = leaf_ids(flavour, tdf)
    assert tdf.copy_at_(other[1:3], slice(1, 3)) is tdf
    got, before, new = leaves(tdf), reference(0), reference(1)
    for path, value in got.items():
        assert torch.equal(value[1:3], new[path][1:3]), path
        assert torch.equal(value[0], before[path][0]), path
    assert leaf_ids(flavour, tdf) == ids  # written into, not replaced


def _expand(mask, x):
    return mask.reshape(*mask.shape, *([1] * (x.ndim - mask.ndim))).expand_as(x)


def test_masked_fill(tdf):
    out = tdf.masked_fill(MASK, 0)
    assert_leaves(tdf, lambda x: x.masked_fill(_expand(MASK, x), 0), out, batch_size=BATCH)
    assert_same_content(tdf)


def test_masked_fill_(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    assert tdf.masked_fill_(MASK, 1) is tdf
    assert_leaves(before, lambda x: x.masked_fill(_expand(MASK, x), 1), tdf)


def test_masked_select(tdf):
    out = tdf.masked_select(MASK)
    assert_leaves(tdf, lambda x: x[MASK], out, batch_size=[int(MASK.sum())])


def test_where_with_tensordict(flavour, tdf):
    other = flavour.factory(seed=1)
    out = tdf.where(MASK, other)
    expected = {p: torch.where(_expand(MASK, x), x, leaves(other)[p]) for p, x in leaves(tdf).items()}
    assert_leaves(expected, lambda x: x, out, batch_size=BATCH)
    out2 = torch.where(MASK, tdf, other)
    assert_leaves(expected, lambda x: x, out2, batch_size=BATCH)


def test_where_with_scalar(tdf):
    out = tdf.where(MASK, 0)
    assert_op(tdf, lambda td: td.where(MASK, 0), lambda x: torch.where(_expand(MASK, x), x, 0))
    assert out.get("c").dtype == torch.where(MASK[..., None], tdf.get("c"), 0).dtype


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(tdf, dim):
    index = T([[0, 3], [1, 1], [2, 0]]) if dim != 0 else T([[2, 0, 1, 1], [0, 0, 2, 1]])

    def leaf(x):
        d = dim % 2
        idx = index.reshape(*index.shape, *([1] * (x.ndim - 2))).expand(*index.shape, *x.shape[2:])
        return torch.gather(x, d, idx)

    assert_leaves(tdf, leaf, tdf.gather(dim, index), batch_size=index.shape)
