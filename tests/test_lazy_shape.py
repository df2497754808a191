"""Shape operations on a lazy stack give a lazy stack (tensorbatch/_lazy_shape.py), as tensordict 0.15.3.

Each result is checked for its type, stack dim and members, and for its values against the same
operation on the dense stack of the same members.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_lazy import MASK2D, member  # (the same members as the lazy-stack tests)

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack, maybe_dense_stack


def homo(stack_dim: int = 0) -> tuple[LazyStackedTensorDict, list[TensorDict]]:
    tds = [member(i) for i in range(3)]
    return LazyStackedTensorDict(*tds, stack_dim=stack_dim), tds


def hetero(stack_dim: int = 0) -> LazyStackedTensorDict:
    """Two members, batch [3]: ``x`` is [3, 2] in one and [3, 4] in the other."""
    a = TensorDict({"x": torch.zeros(3, 2), "y": torch.arange(3.0)}, [3])
    b = TensorDict({"x": torch.ones(3, 4), "y": torch.arange(3.0) + 3}, [3])
    return LazyStackedTensorDict(a, b, stack_dim=stack_dim)


def dense_of(tds: list[TensorDict], stack_dim: int) -> TensorDict:
    return torch.stack([td.clone() for td in tds], stack_dim)


def assert_same_values(actual: Any, expected: Any) -> None:
    """``actual`` (lazy or dense) holds ``expected``'s batch size, keys and leaves."""
    if isinstance(actual, LazyStackedTensorDict):
        actual = actual.to_tensordict()
    assert actual.batch_size == expected.batch_size
    keys = set(expected.keys(include_nested=True, leaves_only=True))
    assert set(actual.keys(include_nested=True, leaves_only=True)) == keys
    for key in keys:
        a, e = actual.get(key), expected.get(key)
        assert a.dtype == e.dtype, key
        torch.testing.assert_close(a, e, msg=lambda m, key=key: f"{key}: {m}")


# --------------------------------------------------------------------------------------------------
# One op per kind: the stack dim moves, the members follow
# --------------------------------------------------------------------------------------------------
OPS = {
    # op: (stack dim after, for stack dim 0 and 1)
    "reshape": (lambda t: t.reshape(9), (0, 0)),
    "view": (lambda t: t.view(-1), (0, 0)),
    "flatten": (lambda t: t.flatten(0, 1), (0, 0)),
    "unflatten": (lambda t: t.unflatten(1, (3, 1)), (1, 1)),
    "permute": (lambda t: t.permute(1, 0), (1, 0)),
    "transpose": (lambda t: t.transpose(0, 1), (1, 0)),
    "movedim": (lambda t: t.movedim(0, 1), (1, 0)),
    "swapaxes": (lambda t: t.swapaxes(1, 0), (1, 0)),
    "atleast_3d": (lambda t: t.atleast_3d(), (1, 2)),
    "masked_fill": (lambda t: t.masked_fill(MASK2D, -1), (0, 1)),
    "masked_fill_rows": (lambda t: t.masked_fill(torch.tensor([True, False, True]), -1), (0, 1)),
    "where": (lambda t: t.where(MASK2D, 0), (0, 1)),
    "where_td": (lambda t: t.where(MASK2D, t.clone() * 0), (0, 1)),
    "torch_where": (lambda t: torch.where(MASK2D, t, -t), (0, 1)),
    "index_none": (lambda t: t[None], (1, 2)),
    "index_none_mid": (lambda t: t[:, None, 1:], (0, 2)),
    "index_mask2d": (lambda t: t[MASK2D], (0, 0)),
}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_shape_op_lazy(name, stack_dim):
    op, after = OPS[name]
    s, tds = homo(stack_dim)
    out = op(s)
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == after[stack_dim]
    assert_same_values(out, op(dense_of(tds, stack_dim)))
    assert_same_values(s, dense_of(tds, stack_dim))  # the stack is unchanged


def test_permutation_moves_the_stack_dim_and_permutes_the_members():
    s = lazy_stack([TensorDict(a=torch.rand(4, 5, 2), batch_size=[4, 5]) for _ in range(3)], 1)  # [4, 3, 5]
    out = s.permute(2, 1, 0)
    assert out.batch_size == (5, 3, 4) and out.stack_dim == 1
    assert [m.batch_size for m in out.tensordicts] == [torch.Size([5, 4])] * 3
    assert s.transpose(0, 1).tensordicts == s.tensordicts  # the members' own dims keep their order
    assert s.permute(0, 1, 2) is s


def test_flatten_regroups_the_elements():
    s, tds = homo(1)
    out = s.reshape(9)
    assert [m.batch_size for m in out.tensordicts] == [torch.Size([])] * 9
    torch.testing.assert_close(out.tensordicts[1]["x"], tds[1]["x"][0])  # row-major: s[0, 1] is member 1's row 0
    big = lazy_stack([TensorDict(a=torch.rand(4, 5), batch_size=[4, 5]) for _ in range(3)])  # [3, 4, 5]
    merged = big.flatten(1, 2)  # dims off the stack dim: a stack of 20 stacks of the members' elements
    assert merged.batch_size == (3, 20) and merged.stack_dim == 1
    assert all(type(m) is LazyStackedTensorDict for m in merged.tensordicts)
    assert_same_values(merged, big.to_tensordict().flatten(1, 2))


def test_unflatten_nests_stacks():
    s = lazy_stack([member(i) for i in range(4)])  # [4, 3]
    out = s.reshape(2, 2, 3)
    assert out.batch_size == (2, 2, 3) and out.stack_dim == 0
    assert [type(m) for m in out.tensordicts] == [LazyStackedTensorDict] * 2
    assert out.tensordicts[1].tensordicts[0] is s.tensordicts[2]
    assert_same_values(out, s.to_tensordict().reshape(2, 2, 3))


def test_reshape_without_a_lazy_form_is_dense():
    s, tds = homo()
    out = s.reshape(1, 9)  # neither merges nor splits dims
    assert type(out) is TensorDict
    assert_same_values(out, dense_of(tds, 0).reshape(1, 9))
    view = s.view(1, 9)  # tensordict raises: a dense view of the stacked leaves here
    assert type(view) is TensorDict
    assert_same_values(view, dense_of(tds, 0).view(1, 9))
    assert s.reshape(3, 3) is s and s.view(-1, 3) is s


def test_in_place_reshape_refused():
    s, _ = homo()
    with pytest.raises(RuntimeError, match="in-place op changing the batch size"):
        s.reshape(-1, inplace=True)
    with pytest.raises(RuntimeError, match="in-place op changing the batch size"):
        s.flatten(inplace=True)


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t.split(1, 1),
        lambda t: t.split([2, 1], 0),
        lambda t: t.chunk(2, 1),
        lambda t: t.chunk(2, 0),
        lambda t: t.tensor_split(2, 1),
        lambda t: t.tensor_split([1, 1], 0),  # an empty piece
        lambda t: t.unbind(1),
    ],
    ids=["split1", "split0", "chunk1", "chunk0", "tensor_split1", "tensor_split0_empty", "unbind1"],
)
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_split_ops_lazy(op, stack_dim):
    s, tds = homo(stack_dim)
    outs = op(s)
    expected = op(dense_of(tds, stack_dim))
    assert type(outs) is tuple and len(outs) == len(expected)
    for o, e in zip(outs, expected, strict=True):
        assert type(o) is LazyStackedTensorDict or any(o is td for td in tds)  # unbind(stack dim): the members
        if e.numel():
            assert_same_values(o, e)
        else:
            assert o.batch_size == e.batch_size


def test_split_along_the_stack_dim_gives_runs_of_members():
    s, tds = homo()
    first, second = s.split([2, 1], 0)
    assert first.tensordicts == tds[:2] and second.tensordicts == tds[2:]
    assert all(a is b for a, b in zip(first.tensordicts, tds, strict=False))
    assert s.unbind(0) == tuple(tds)


def test_hetero_shape_ops():
    s = hetero()  # [2, 3]
    out = s.reshape(6)
    assert type(out) is LazyStackedTensorDict
    assert [tuple(m["x"].shape) for m in out.tensordicts] == [(2,)] * 3 + [(4,)] * 3
    swapped = s.permute(1, 0)
    assert swapped.batch_size == (3, 2) and swapped.tensordicts == s.tensordicts
    pieces = s.split([1, 2], 1)
    assert [tuple(m["x"].shape) for m in pieces[1].tensordicts] == [(2, 2), (2, 4)]
    with pytest.raises(RuntimeError, match="key 'x'"):
        s.view(3, 2)  # no lazy form: the generic path stacks the leaves
    with pytest.raises(RuntimeError, match="key 'x'"):
        s.sum()


def test_ragged_members_permute():
    s = lazy_stack([TensorDict(a=torch.rand(3, 2), batch_size=[3]), TensorDict(a=torch.rand(4, 2), batch_size=[4])])
    assert s.batch_size == (2, -1)
    out = s.transpose(0, 1)
    assert out.batch_size == (-1, 2) and out.stack_dim == 1 and out.tensordicts == s.tensordicts
    assert s.atleast_3d().batch_size == (1, 2, -1)


def test_expand_stacks_as_maybe_dense_stack():
    s, tds = homo(1)
    out = s.expand(2, 3, 3)  # members that agree: a dense stack, as tensordict
    assert type(out) is TensorDict
    assert_same_values(out, dense_of(tds, 1).expand(2, 3, 3))
    het = hetero().expand(4, 2, 3)  # members of different shapes stay apart
    assert type(het) is LazyStackedTensorDict and het.stack_dim == 1
    assert [tuple(m["x"].shape) for m in het.tensordicts] == [(4, 3, 2), (4, 3, 4)]
    one = lazy_stack([member(0)], stack_dim_name="s").expand(2, 3)  # a stack dim of size 1 repeats the member
    assert type(one) is TensorDict and one.names == ["s", None]
    torch.testing.assert_close(one["x"][1], member(0)["x"])


def test_empty_stack_takes_the_generic_path():
    s = LazyStackedTensorDict(batch_size=[0, 3])
    assert s.permute(1, 0).batch_size == (3, 0)
    assert s.reshape(0).batch_size == (0,)


# --------------------------------------------------------------------------------------------------
# torch.stack / torch.cat
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_torch_stack_of_lazy_stacks(stack_dim, dim):
    s, tds = homo(stack_dim)
    out = torch.stack([s, s.clone()], dim)
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == (stack_dim + 1 if dim <= stack_dim else stack_dim)
    assert [type(m) for m in out.tensordicts] == [TensorDict] * 3
    dense = dense_of(tds, stack_dim)
    assert_same_values(out, torch.stack([dense, dense], dim))


@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("dim", [0, 1])
def test_torch_cat_of_lazy_stacks(stack_dim, dim):
    s, tds = homo(stack_dim)
    dense = dense_of(tds, stack_dim)
    for other in (s.clone(), dense.clone()):
        out = torch.cat([s, other], dim)
        assert type(out) is LazyStackedTensorDict and out.stack_dim == stack_dim
        assert_same_values(out, torch.cat([dense, dense], dim))
    joined = torch.cat([s, s], stack_dim)
    assert joined.tensordicts == tds + tds  # along the stack dim: the members themselves


def test_torch_stack_and_cat_that_stay_dense():
    s, tds = homo()
    out = torch.stack([s, dense_of(tds, 0)])  # a dense one among them: dense, as tensordict
    assert type(out) is TensorDict
    assert_same_values(out, torch.stack([dense_of(tds, 0)] * 2))
    mixed = torch.cat([s, LazyStackedTensorDict(*[member(i) for i in range(3)], stack_dim=1)], 0)
    assert type(mixed) is TensorDict  # different stack dims (tensordict refuses them)
    assert_same_values(mixed, torch.cat([dense_of(tds, 0), dense_of(tds, 1)], 0))


# --------------------------------------------------------------------------------------------------
# where with a tensor, maybe_dense_stack, locks and names
# --------------------------------------------------------------------------------------------------
def test_where_with_a_tensor_other_is_dense():
    s, tds = homo()
    other = torch.full((3, 3, 1), -1.0)  # aligned with each leaf from the right, as TensorDict.where does
    out = s.exclude("i").where(MASK2D, other)
    assert type(out) is TensorDict
    assert_same_values(out, dense_of(tds, 0).exclude("i").where(MASK2D, other))


def test_maybe_dense_stack_nested_shapes_differ():
    a = TensorDict({"k": torch.zeros(3), "n": {"y": torch.zeros(3)}}, [3])
    b = TensorDict({"k": torch.ones(3), "n": {"y": torch.zeros(3, 2)}}, [3])
    out = maybe_dense_stack([a, b])
    assert type(out) is TensorDict  # dense where the keys and shapes agree
    torch.testing.assert_close(out["k"], torch.stack([a["k"], b["k"]]))
    assert type(out["n"]) is LazyStackedTensorDict and out["n"].batch_size == (2, 3)


def test_results_keep_the_lock_and_the_stack_dim_name():
    s = lazy_stack([member(i) for i in range(3)], 0, stack_dim_name="s")
    assert s.permute(1, 0).names == [None, "s"]
    s.lock_()
    for out in (s.permute(1, 0), s.reshape(9), *s.split(1, 1)):
        assert out.is_locked
    assert not s.masked_fill(MASK2D, 0).is_locked  # masked_fill drops the lock, as tensordict
    assert not s.expand(2, 3, 3).is_locked  # expand: a new (here dense) stack of the members, as tensordict
