"""``td.attrs()`` (a TensorDict of TensorAttrs leaves) and ``to(attrs)`` (a leaf-by-leaf cast), against tensordict."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import tensorbatch as tb
from tensorbatch import TensorAttrs, TensorDict, TypedTensorDict, lazy_stack, tensorclass

td_ref = pytest.importorskip("tensordict")


def _sample(m: Any) -> Any:
    return m.TensorDict(a=torch.zeros(3, 2), s="x", b={"c": torch.ones(3, dtype=torch.int64)}, batch_size=[3])


def _target(m: Any) -> Any:
    return m.TensorDict(a=torch.zeros(3, 2, dtype=torch.int32), b={"c": torch.ones(3)}, batch_size=[3])


def test_attrs_describes_each_tensor_leaf() -> None:
    out = _sample(tb).attrs()
    assert type(out) is TensorDict and out.batch_size == torch.Size([]) and out.device is None
    assert type(out["a"]) is TensorAttrs
    assert (out["a"].tgt_device, out["a"].tgt_dtype, out["a"].tgt_shape) == (
        torch.device("cpu"),
        torch.float32,
        torch.Size([3, 2]),
    )
    assert out["b", "c"].tgt_dtype == torch.int64 and out["b", "c"].tgt_shape == torch.Size([3])
    assert out["s"] == "x"  # non-tensor leaves are kept as they are


def test_attrs_fields_and_errors() -> None:
    out = _sample(tb).attrs(fields=("dtype",), num_threads=2)
    assert out["a"].tgt_dtype == torch.float32 and out["a"].tgt_device is None and out["a"].tgt_shape is None
    with pytest.raises(ValueError, match=r"attrs\(\): unknown fields \['bogus'\]"):
        _sample(tb).attrs(fields=("dtype", "bogus"))
    with pytest.raises(ValueError, match="num_threads must be a non-negative int"):
        _sample(tb).attrs(num_threads=-1)


@pytest.mark.xfail(strict=True, reason="deliberate difference: an unknown field raises (tensordict ignores it)")
def test_difference_attrs_ignores_unknown_fields() -> None:
    _sample(tb).attrs(fields=("bogus",))


@pytest.mark.parametrize("m", [tb, td_ref], ids=["tensorbatch", "tensordict"])
def test_to_attrs_casts_leaf_by_leaf(m: Any) -> None:
    out = _target(m).to(_sample(m).attrs())
    assert out["a"].dtype == torch.float32 and out["b", "c"].dtype == torch.int64
    assert out["b", "c"].tolist() == [1, 1, 1] and out.batch_size == torch.Size([3])
    only_dtype = _target(m).to(_sample(m).attrs(fields=("dtype",)))
    assert only_dtype["a"].dtype == torch.float32
    # keys the attrs lack and leaves where the attrs hold a node stay as they are
    other = m.TensorDict(a=torch.zeros(3, 2, dtype=torch.int32), b=torch.ones(3), z=torch.ones(3), batch_size=[3])
    out = other.to(_sample(m).attrs())
    assert (out["a"].dtype, out["b"].dtype, out["z"].dtype) == (torch.float32, torch.float32, torch.float32)
    # a TensorDict of tensors (no TensorAttrs) gives its device only: no dtype cast
    assert _target(m).to(_sample(m))["a"].dtype == torch.int32


def test_to_attrs_refuses_other_arguments() -> None:
    with pytest.raises(TypeError, match="takes no other argument"):
        _target(tb).to(_sample(tb).attrs(), torch.float64)


def test_attrs_on_lazy_stacks_and_wrappers() -> None:
    s = lazy_stack([_sample(tb).exclude("s"), _sample(tb).exclude("s")])
    out = s.attrs()
    assert out["a"].tgt_shape == torch.Size([2, 3, 2])

    @tensorclass
    class C:
        x: torch.Tensor

    class T(TypedTensorDict):
        x: torch.Tensor

    for cls in (C, T):
        described = cls(x=torch.zeros(3, 2), batch_size=[3]).attrs()
        assert type(described) is cls and described.batch_size == torch.Size([])
        cast = cls(x=torch.zeros(3, 2, dtype=torch.int64), batch_size=[3]).to(described)
        assert type(cast) is cls and cast.x.dtype == torch.float32


def test_attrs_matches_the_reference_structure() -> None:
    ours, ref = _sample(tb).attrs(), _sample(td_ref).attrs()
    assert sorted(ours.keys(True, True)) == sorted(ref.keys(True, True))
    for key in (("a",), ("b", "c")):
        assert (ours[key].tgt_device, ours[key].tgt_dtype, ours[key].tgt_shape) == (
            ref[key].tgt_device,
            ref[key].tgt_dtype,
            ref[key].tgt_shape,
        )
