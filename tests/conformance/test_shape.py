"""Shape ops over batch dims: view/reshape/flatten/unflatten/permute/transpose/(un)squeeze/expand/
repeat, unbind/split/chunk and the batch_size setter; each leaf is checked against torch."""

from __future__ import annotations

import pytest
import torch
from _flavours import BATCH, assert_leaves, assert_op, assert_same_content, leaves, requires


def _feat(x):
    return x.shape[2:]


def _ones(x):
    return [1] * (x.ndim - 2)


# id -> (op on the TensorDict, the same op on a leaf of batch [3, 4], expected batch size)
SHAPE_OPS = {
    "reshape_12": (lambda td: td.reshape(12), lambda x: x.reshape(12, *_feat(x)), [12]),
    "reshape_-1": (lambda td: td.reshape(-1), lambda x: x.reshape(12, *_feat(x)), [12]),
    "reshape_tuple": (lambda td: td.reshape((2, 6)), lambda x: x.reshape(2, 6, *_feat(x)), [2, 6]),
    "reshape_2_-1_3": (lambda td: td.reshape(2, -1, 3), lambda x: x.reshape(2, 2, 3, *_feat(x)), [2, 2, 3]),
    "view_12": (lambda td: td.view(12), lambda x: x.view(12, *_feat(x)), [12]),
    "view_3_2_2": (lambda td: td.view(3, 2, 2), lambda x: x.view(3, 2, 2, *_feat(x)), [3, 2, 2]),
    "view_same": (lambda td: td.view(3, 4), lambda x: x.view(3, 4, *_feat(x)), [3, 4]),
    "flatten": (lambda td: td.flatten(), lambda x: x.flatten(0, 1), [12]),
    "flatten_0_1": (lambda td: td.flatten(0, 1), lambda x: x.flatten(0, 1), [12]),
    "flatten_1_1": (lambda td: td.flatten(1, 1), lambda x: x, [3, 4]),
    "unflatten_1": (lambda td: td.unflatten(1, (2, 2)), lambda x: x.unflatten(1, (2, 2)), [3, 2, 2]),
    "unflatten_-2": (lambda td: td.unflatten(-2, (3, 1)), lambda x: x.unflatten(0, (3, 1)), [3, 1, 4]),
    "permute": (lambda td: td.permute(1, 0), lambda x: x.transpose(0, 1), [4, 3]),
    "permute_neg": (lambda td: td.permute(-1, -2), lambda x: x.transpose(0, 1), [4, 3]),
    "permute_list": (lambda td: td.permute([1, 0]), lambda x: x.transpose(0, 1), [4, 3]),
    "permute_identity": (lambda td: td.permute(0, 1), lambda x: x, [3, 4]),
    "transpose": (lambda td: td.transpose(0, 1), lambda x: x.transpose(0, 1), [4, 3]),
    "transpose_neg": (lambda td: td.transpose(-1, 0), lambda x: x.transpose(0, 1), [4, 3]),
    "unsqueeze_0": (lambda td: td.unsqueeze(0), lambda x: x.unsqueeze(0), [1, 3, 4]),
    "unsqueeze_1": (lambda td: td.unsqueeze(1), lambda x: x.unsqueeze(1), [3, 1, 4]),
    "unsqueeze_2": (lambda td: td.unsqueeze(2), lambda x: x.unsqueeze(2), [3, 4, 1]),
    "unsqueeze_-1": (lambda td: td.unsqueeze(-1), lambda x: x.unsqueeze(2), [3, 4, 1]),
    "unsqueeze_-3": (lambda td: td.unsqueeze(-3), lambda x: x.unsqueeze(0), [1, 3, 4]),
    "squeeze_none": (lambda td: td.squeeze(), lambda x: x, [3, 4]),
    "squeeze_dim": (lambda td: td.unsqueeze(1).squeeze(1), lambda x: x, [3, 4]),
    "squeeze_neg": (lambda td: td.unsqueeze(-1).squeeze(-1), lambda x: x, [3, 4]),
    "squeeze_non1": (lambda td: td.squeeze(0), lambda x: x, [3, 4]),
    "expand": (lambda td: td.expand(2, 3, 4), lambda x: x.expand(2, *x.shape), [2, 3, 4]),
    "expand_size": (lambda td: td.expand(torch.Size([2, 3, 4])), lambda x: x.expand(2, *x.shape), [2, 3, 4]),
    "expand_same": (lambda td: td.expand(3, 4), lambda x: x, [3, 4]),
    "expand_unsq": (
        lambda td: td.unsqueeze(1).expand(3, 5, 4),
        lambda x: x.unsqueeze(1).expand(3, 5, *x.shape[1:]),
        [3, 5, 4],
    ),
    "repeat": (lambda td: td.repeat(2, 1), lambda x: x.repeat(2, 1, *_ones(x)), [6, 4]),
    "repeat_both": (lambda td: td.repeat(2, 3), lambda x: x.repeat(2, 3, *_ones(x)), [6, 12]),
    "repeat_interleave": (
        lambda td: td.repeat_interleave(2, dim=1),
        lambda x: x.repeat_interleave(2, dim=1),
        [3, 8],
    ),
    "torch_permute": (lambda td: torch.permute(td, (1, 0)), lambda x: x.transpose(0, 1), [4, 3]),
    "torch_unsqueeze": (lambda td: torch.unsqueeze(td, 0), lambda x: x.unsqueeze(0), [1, 3, 4]),
    "torch_flatten": (lambda td: torch.flatten(td, 0, 1), lambda x: x.flatten(0, 1), [12]),
    "torch_reshape": (lambda td: torch.reshape(td, (4, 3)), lambda x: x.reshape(4, 3, *_feat(x)), [4, 3]),
    "torch_transpose": (lambda td: torch.transpose(td, 0, 1), lambda x: x.transpose(0, 1), [4, 3]),
}


@pytest.mark.parametrize("case", SHAPE_OPS, ids=list(SHAPE_OPS))
def test_shape_op(tdf, case):
    td_op, leaf_op, batch = SHAPE_OPS[case]
    out = assert_op(tdf, td_op, leaf_op, batch_size=batch)
    if out is not None:
        assert out.get("nested").batch_size == out.batch_size
        assert out.get(("nested", "deep")).batch_size == out.batch_size
    assert_same_content(tdf)  # the source is untouched


@pytest.mark.parametrize("case", ["view_12", "view_3_2_2", "permute", "transpose", "unsqueeze_1", "expand"])
def test_views_share_storage(flavour, tdf, case):
    requires(flavour, "inplace")
    requires(flavour, "stored_leaves")  # a lazy stack's shape ops give in-memory TensorDicts (copies)
    td_op, _, _ = SHAPE_OPS[case]
    try:
        out = td_op(tdf)
    except RuntimeError:  # a view of non-contiguous leaves, refused as torch refuses it
        return
    out.get(("nested", "d")).fill_(-1.0)
    assert (tdf.get(("nested", "d")) == -1).all()


# id -> op expected to fail on a [3, 4] batch (as on a torch.empty(3, 4) tensor)
BAD_OPS = {
    "reshape_5": lambda t: t.reshape(5),
    "view_5": lambda t: t.view(5),
    "permute_repeated": lambda t: t.permute(0, 0),
    "permute_too_many": lambda t: t.permute(0, 1, 2),
    "transpose_out": lambda t: t.transpose(0, 2),
    "unsqueeze_out": lambda t: t.unsqueeze(4),
    "squeeze_out": lambda t: t.squeeze(5),
    "expand_bad": lambda t: t.expand(4, 4),
    "expand_fewer": lambda t: t.expand(4),
    "unflatten_bad": lambda t: t.unflatten(1, (3, 3)),
    "repeat_fewer": lambda t: t.repeat(2),
    "unbind_out": lambda t: t.unbind(2),
    "split_zero": lambda t: t.split(0),
}


@pytest.mark.parametrize("case", BAD_OPS, ids=list(BAD_OPS))
def test_bad_shape_op_raises(tdf, case):
    op = BAD_OPS[case]
    with pytest.raises((RuntimeError, IndexError)):
        op(torch.empty(BATCH))
    # the exception type follows tensordict 0.15.3, which sometimes says ValueError where torch says otherwise
    with pytest.raises((RuntimeError, IndexError, ValueError)):
        op(tdf)
    assert_same_content(tdf)


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_unbind(flavour, tdf, dim):
    requires(flavour, "uniform_members")
    pieces = tdf.unbind(dim)
    n = BATCH[dim]
    assert len(pieces) == n
    for i, piece in enumerate(pieces):
        assert_leaves(tdf, lambda x, i=i: x.unbind(dim % 2)[i], piece)
        assert piece.get(("nested", "deep")).batch_size == piece.batch_size
    assert len(torch.unbind(tdf, dim)) == n


@pytest.mark.parametrize(("size", "dim"), [(2, 1), ([1, 2], 0), (1, -1), (3, 0), ([3, 1], 1)])
def test_split(flavour, tdf, size, dim):
    if dim % 2 == 0:  # a lazy stack's pieces along its stack dim are runs of members: one shows its own keys
        requires(flavour, "uniform_members")
    pieces = tdf.split(size, dim)
    expected = [list(x.split(size, dim % 2)) for x in leaves(tdf).values()]
    assert len(pieces) == len(expected[0])
    for i, piece in enumerate(pieces):
        assert_leaves(tdf, lambda x, i=i: x.split(size, dim % 2)[i], piece)
    assert len(torch.split(tdf, size, dim)) == len(pieces)


@pytest.mark.parametrize(("chunks", "dim"), [(2, 1), (3, 0), (2, 0), (4, -1), (5, 1)])
def test_chunk(flavour, tdf, chunks, dim):
    if dim % 2 == 0:  # as in test_split
        requires(flavour, "uniform_members")
    pieces = tdf.chunk(chunks, dim)
    n = len(torch.empty(BATCH).chunk(chunks, dim))
    assert len(pieces) == n
    for i, piece in enumerate(pieces):
        assert_leaves(tdf, lambda x, i=i: x.chunk(chunks, dim % 2)[i], piece)
    assert len(torch.chunk(tdf, chunks, dim)) == n


def test_batch_size_setter(flavour, tdf):
    with pytest.raises(RuntimeError):
        tdf.batch_size = [4]
    with pytest.raises(RuntimeError):
        tdf.batch_size = [3, 4, 5, 6]
    assert_same_content(tdf)
    requires(flavour, "batch_size_shrink")
    tdf.batch_size = [3]
    assert tdf.batch_size == torch.Size([3])
    assert tdf.batch_dims == 1
    assert_leaves(dict(leaves(flavour.factory())), lambda x: x, tdf)
    with pytest.raises(RuntimeError):
        tdf.batch_size = [4]
    with pytest.raises(RuntimeError):
        tdf.batch_size = [3, 4, 5, 6]
    assert tdf.batch_size == torch.Size([3])
    tdf.batch_size = [3, 4]
    assert_same_content(tdf)


def test_batch_size_setter_grows_to_feature_dims(tdf):
    sub = tdf.select("a")
    sub.batch_size = [3, 4, 5]
    assert sub.batch_size == torch.Size([3, 4, 5])
    assert sub[0, 0, 0].get("a").shape == torch.Size([])


def test_shape_queries(tdf):
    assert tdf.shape == BATCH
    assert tdf.size() == BATCH
    assert tdf.size(0) == 3
    assert tdf.size(-1) == 4
    assert tdf.numel() == 12
    assert tdf.reshape(12).numel() == 12
    assert tdf.unsqueeze(0).ndimension() == 3
