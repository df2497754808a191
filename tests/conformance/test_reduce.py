"""Reductions over batch dims (sum, mean, std, amax, max with indices, all/any, reduce=True)."""

from __future__ import annotations

import pytest
import torch
from _flavours import LEAF_KEYS, assert_leaves, assert_op, assert_same_content, leaves
from torch.overrides import TorchFunctionMode

TOL = {"rtol": 1e-5, "atol": 1e-6}
NAMES = ["sum", "mean", "nansum", "nanmean", "prod", "std", "var", "amax", "amin", "norm"]
DIMS = {"all": None, "0": 0, "1": 1, "-1": -1, "both": (0, 1), "both_neg": (-1, 0)}


def _leaf_reduce(name, x, dim, keepdim=False, **kwargs):
    """``name`` applied to one leaf over the batch dims ``dim`` (None: over every element)."""
    if dim is None:
        return torch.linalg.vector_norm(x) if name == "norm" else getattr(torch, name)(x, **kwargs)
    dims = tuple(sorted(d % 2 for d in ((dim,) if isinstance(dim, int) else dim)))
    if name == "norm":
        return torch.linalg.vector_norm(x, dim=dims, keepdim=keepdim)
    if name == "prod":  # torch.prod takes a single dim
        for d in reversed(dims):
            x = torch.prod(x, dim=d, keepdim=keepdim)
        return x
    return getattr(torch, name)(x, dim=dims, keepdim=keepdim, **kwargs)


def _batch(dim, keepdim=False):
    return _leaf_reduce("sum", torch.zeros(3, 4), dim, keepdim).shape


@pytest.mark.parametrize("dim", DIMS, ids=list(DIMS))
@pytest.mark.parametrize("name", NAMES)
def test_reduction(tdf, name, dim):
    d = DIMS[dim]
    call = (lambda td: getattr(td, name)()) if d is None else (lambda td: getattr(td, name)(dim=d))
    out = assert_op(tdf.float(), call, lambda x: _leaf_reduce(name, x, d), batch_size=_batch(d), **TOL)
    assert out.get(("nested", "deep")).batch_size == out.batch_size


@pytest.mark.parametrize("name", NAMES)
def test_reduction_keepdim(tdf, name):
    assert_op(
        tdf.float(),
        lambda td: getattr(td, name)(1, keepdim=True),
        lambda x: _leaf_reduce(name, x, 1, keepdim=True),
        batch_size=[3, 1],
        **TOL,
    )
    assert_op(
        tdf.float(),
        lambda td: getattr(td, name)((0, 1), keepdim=True),
        lambda x: _leaf_reduce(name, x, (0, 1), keepdim=True),
        batch_size=[1, 1],
        **TOL,
    )


@pytest.mark.parametrize("name", ["std", "var"])
def test_correction(tdf, name):
    assert_op(
        tdf.float(),
        lambda td: getattr(td, name)(0, correction=0),
        lambda x: getattr(torch, name)(x, dim=0, correction=0),
        **TOL,
    )


@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin", "mean"])
def test_reduction_on_int_and_bool_leaves(tdf, name):
    # dtype promotion (bool/int sum -> int64) or torch's refusal (mean of ints) is the leaf's own
    assert_op(tdf, lambda td: getattr(td, name)(dim=0), lambda x: _leaf_reduce(name, x, 0), batch_size=[4])


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "prod", "nansum"])
def test_reduce_true_folds_every_leaf(tdf, name):
    x = tdf.float()
    flat = torch.cat([v.reshape(-1) for v in leaves(x).values()])
    got = getattr(x, name)(reduce=True)
    assert isinstance(got, torch.Tensor)
    assert got.shape == torch.Size([])
    torch.testing.assert_close(got, getattr(torch, name)(flat), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_with_indices(tdf, name, dim):
    x = tdf.float()
    out = getattr(x, name)(dim=dim)
    ref = {p: getattr(torch, name)(v, dim=dim % 2) for p, v in leaves(x).items()}
    assert_leaves({p: r.values for p, r in ref.items()}, lambda v: v, out.values, batch_size=_batch(dim))
    assert_leaves({p: r.indices for p, r in ref.items()}, lambda v: v, out.indices)
    values, indices = out
    assert values is out.values
    assert indices is out.indices


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_without_dim(tdf, name):
    x = tdf.float()
    assert_op(x, lambda td: getattr(td, name)(), lambda v: getattr(torch, name)(v), batch_size=[])
    flat = torch.cat([v.reshape(-1) for v in leaves(x).values()])
    assert torch.equal(getattr(x, name)(reduce=True), getattr(torch, name)(flat))


def test_all_any(tdf):
    b = tdf.bool()
    assert b.all() is (all(bool(v.all()) for v in leaves(b).values()))
    assert b.any() is True
    assert (tdf == tdf).all() is True
    assert (tdf != tdf).any() is False
    for dim in (0, 1, -1):
        assert_op(b, lambda td, dim=dim: td.all(dim=dim), lambda v, dim=dim: v.all(dim=dim % 2))
        assert_op(b, lambda td, dim=dim: td.any(dim=dim), lambda v, dim=dim: v.any(dim=dim % 2))


def test_feature_reduction(tdf):
    def leaf(v):
        dims = tuple(range(2, v.ndim))
        return v.sum(dim=dims) if dims else v

    assert_op(tdf.float(), lambda td: td.sum(dim="feature"), leaf, batch_size=[3, 4], **TOL)


def test_torch_reduction_functions(tdf):
    x = tdf.float()
    assert_op(x, lambda td: torch.sum(td, 0), lambda v: v.sum(0), **TOL)
    assert_op(x, lambda td: torch.mean(td, dim=1), lambda v: v.mean(1), **TOL)
    assert_op(x, lambda td: torch.amax(td, (0, 1)), lambda v: v.amax((0, 1)), **TOL)


@pytest.mark.parametrize("dim", [2, -3, (0, 0)], ids=["out", "neg_out", "repeated"])
def test_bad_dim_raises(tdf, dim):
    with pytest.raises((IndexError, ValueError, RuntimeError)):
        tdf.float().sum(dim=dim)
    assert_same_content(tdf)


class _CountCalls(TorchFunctionMode):
    """Counts the calls of the torch functions in ``funcs`` made while active."""

    def __init__(self, *funcs):
        super().__init__()
        self.funcs = funcs
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.funcs:
            self.calls += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_reduce_each_leaf_once(tdf, name):
    x = tdf.float()
    with _CountCalls(getattr(torch, name), getattr(torch.Tensor, name)) as counter:
        out = getattr(x, name)(dim=1)
    assert counter.calls == len(LEAF_KEYS)
    ref = {p: getattr(torch, name)(v, dim=1) for p, v in leaves(x).items()}
    assert_leaves({p: r.indices for p, r in ref.items()}, lambda v: v, out.indices, batch_size=[3])
