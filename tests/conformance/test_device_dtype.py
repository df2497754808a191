"""Device and dtype moves, copies (clone/contiguous/detach), in-place fills, new_* and *_like, grads."""

from __future__ import annotations

import pytest
import torch
from _flavours import (
    BATCH,
    assert_leaves,
    assert_op,
    assert_same_content,
    assert_same_leaf,
    leaf_ids,
    leaves,
    make_td,
    requires,
    snapshot,
)

CPU = torch.device("cpu")
DTYPES = [torch.float64, torch.float32, torch.float16, torch.int32, torch.int64, torch.bool]
CASTS = {
    "float": torch.float32,
    "double": torch.float64,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int": torch.int32,
    "long": torch.int64,
    "bool": torch.bool,
    "short": torch.int16,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}


def test_device_attribute(flavour, tdf):
    expected = CPU if "device" in flavour.caps else None
    assert tdf.device == expected
    assert tdf.get("nested").device == expected
    assert tdf.get(("nested", "deep")).device == expected
    assert all(x.device == CPU for x in leaves(tdf).values())


@pytest.mark.parametrize("device", ["cpu", CPU])
def test_to_device(tdf, device):
    out = tdf.to(device)
    assert out.device == CPU
    assert out.get(("nested", "deep")).device == CPU
    assert_same_content(out)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_to_dtype(tdf, dtype):
    out = assert_op(tdf, lambda td: td.to(dtype), lambda x: x.to(dtype), batch_size=BATCH)
    assert out.dtype == dtype
    assert out.device == tdf.device
    assert_same_content(tdf)


@pytest.mark.parametrize("name", CASTS)
def test_cast_methods(tdf, name):
    out = assert_op(tdf, lambda td: getattr(td, name)(), lambda x: x.to(CASTS[name]))
    assert out.get(("nested", "deep")).batch_size == BATCH


def test_to_device_and_dtype_keywords(tdf):
    assert_op(tdf, lambda td: td.to("cpu", torch.float64), lambda x: x.to(torch.float64))
    assert_op(tdf, lambda td: td.to(device="cpu", dtype=torch.int32), lambda x: x.to(torch.int32))
    out = tdf.to(tdf.float())
    assert out.device == tdf.float().device
    assert_same_content(out)


def test_dtype_property(tdf):
    assert tdf.dtype is None  # mixed leaf dtypes
    assert tdf.float().dtype == torch.float32
    assert tdf.select("a", ("nested", "d")).dtype == torch.float32


def test_clone(flavour, tdf):
    out = tdf.clone()
    assert_same_content(out)
    assert out.device == tdf.device
    assert out.get(("nested", "deep")).batch_size == BATCH
    mine = leaves(tdf)
    for path, leaf in leaves(out).items():
        assert leaf.data_ptr() != mine[path].data_ptr()
    out.zero_()
    assert_same_content(tdf)


def test_clone_shallow(flavour, tdf):
    out = tdf.clone(False)
    assert out is not tdf
    assert out.get("nested") is not tdf.get("nested")
    mine = leaves(tdf)
    for path, leaf in leaves(out).items():
        assert_same_leaf(flavour, leaf, mine[path])
    assert_same_content(out)


def test_contiguous(flavour, tdf):
    assert tdf.is_contiguous() is ("noncontiguous" not in flavour.caps)
    out = tdf.contiguous()
    assert out.is_contiguous()
    assert all(x.is_contiguous() for x in leaves(out).values())
    assert_same_content(out)


def test_detach_shares_storage(flavour, tdf):
    out = tdf.detach()
    mine = leaves(tdf)
    for path, leaf in leaves(out).items():
        if "stored_leaves" in flavour.caps:
            assert leaf.data_ptr() == mine[path].data_ptr()
        assert not leaf.requires_grad
    assert_same_content(out)
    if {"inplace", "shared_select"} <= flavour.caps:  # an in-place write through the detached TD reaches the source
        out.set_(("nested", "d"), torch.full((3, 4, 2), -1.0))
        assert (tdf.get(("nested", "d")) == -1).all()


def test_requires_grad_and_backward(flavour, tdf):
    requires(flavour, "grad")
    x = tdf.float()
    assert not x.requires_grad
    assert x.requires_grad_() is x
    assert x.requires_grad
    assert all(v.requires_grad for v in leaves(x).values())
    loss = (x * 3).sum(reduce=True)
    loss.backward()
    grads = x.grad
    assert_leaves(x, lambda v: torch.full_like(v, 3.0), grads)
    assert not any(v.requires_grad for v in leaves(x.detach()).values())
    x.zero_grad()
    assert all(v.grad is None for v in leaves(x).values())


def test_zero_(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    ids = leaf_ids(flavour, tdf)
    assert tdf.zero_() is tdf
    assert leaf_ids(flavour, tdf) == ids
    assert_leaves(before, torch.zeros_like, tdf)


def test_copy_(flavour, tdf):
    requires(flavour, "inplace")
    ids = leaf_ids(flavour, tdf)
    assert tdf.copy_(flavour.factory(seed=1)) is tdf
    assert leaf_ids(flavour, tdf) == ids
    assert_same_content(tdf, seed=1)


def test_copy_across_flavours(flavour, tdf):
    requires(flavour, "inplace")
    tdf.copy_(make_td(seed=2))
    assert_same_content(tdf, seed=2)
    target = make_td(seed=1)
    target.copy_(tdf)
    assert_same_content(target, seed=2)


def test_copy_shape_mismatch_raises(flavour, tdf):
    requires(flavour, "inplace")
    with pytest.raises(RuntimeError):
        tdf.copy_(flavour.factory(seed=1)[:2])
    assert_same_content(tdf)


NEW = {
    "new_zeros": (lambda td: td.new_zeros(2), lambda x: x.new_zeros(2, *x.shape[2:])),
    "new_zeros_list": (lambda td: td.new_zeros([2, 5]), lambda x: x.new_zeros(2, 5, *x.shape[2:])),
    "new_ones": (lambda td: td.new_ones(2, 1), lambda x: x.new_ones(2, 1, *x.shape[2:])),
    "new_full": (lambda td: td.new_full([4], 3), lambda x: x.new_full((4, *x.shape[2:]), 3)),
    "zeros_like": (torch.zeros_like, torch.zeros_like),
    "ones_like": (torch.ones_like, torch.ones_like),
    "full_like": (lambda td: torch.full_like(td, 2), lambda x: torch.full_like(x, 2)),
}


@pytest.mark.parametrize("case", NEW, ids=list(NEW))
def test_new_and_like(tdf, case):
    td_op, leaf_op = NEW[case]
    out = assert_op(tdf, td_op, leaf_op)
    assert out.get(("nested", "deep")).batch_size == out.batch_size


def test_new_empty_shapes(tdf):
    out = tdf.new_empty(2, 3)
    assert out.batch_size == torch.Size([2, 3])
    for path, leaf in leaves(tdf).items():
        assert leaves(out)[path].shape == (2, 3, *leaf.shape[2:])
        assert leaves(out)[path].dtype == leaf.dtype


def test_allclose(flavour, tdf):
    x = tdf.float()
    assert x.allclose(flavour.factory().float())
    assert not x.allclose(x + 1e-2)
    assert x.allclose(x + 1e-6, atol=1e-5)
    assert not x.allclose(flavour.factory(seed=1).float())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_cuda_and_back(tdf):
    gpu = tdf.to("cuda")
    assert gpu.device.type == "cuda"
    assert all(x.device.type == "cuda" for x in leaves(gpu).values())
    assert gpu.get(("nested", "deep")).device == gpu.device
    back = gpu.cpu()
    assert back.device == CPU
    assert_same_content(back)
    assert_leaves(tdf, lambda x: x.float() * 2, (gpu.float() * 2).cpu())
