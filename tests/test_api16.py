"""Issue 16 behaviour the differential suite cannot pin (tensordict lacks it or differs on purpose): the
storage an in-place form releases, ``stack``'s extra keywords, argument errors, and the listed differences."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch

import tensorbatch
from tensorbatch import LazyStackedTensorDict, MemoryMappedTensor, TensorDict


def _td() -> TensorDict:
    return TensorDict({"a": torch.arange(24.0).view(2, 3, 4), "n": {"b": torch.arange(6).view(2, 3)}}, [2, 3])


@pytest.mark.parametrize(
    "call",
    [
        lambda td: td.reshape(-1, inplace=True),
        lambda td: td.roll(1, 0, inplace=True),
        lambda td: td.to(torch.float64, inplace=True),
        lambda td: td.contiguous(inplace=True),
    ],
    ids=["reshape", "roll", "to", "contiguous"],
)
def test_inplace_releases_old_storage(call):
    td = _td().permute(1, 0)  # non-contiguous leaves, so contiguous() has something to replace
    old = weakref.ref(td["a"])
    nested = td["n"]
    assert call(td) is td
    gc.collect()
    assert old() is None, "the replaced leaf is still referenced"
    assert td["n"] is nested  # nested nodes keep their identity


def test_inplace_keeps_names_and_refuses_bad_shape():
    td = _td()
    td.names = ["x", "y"]
    td.roll(1, 1, inplace=True)
    assert td.names == ["x", "y"]
    snapshot = td.clone()
    with pytest.raises(RuntimeError, match="invalid"):
        td.reshape(7, inplace=True)
    assert (td == snapshot).all()
    assert td.batch_size == snapshot.batch_size


def test_gather_out_and_inplace_refused():
    td = _td()
    with pytest.raises(ValueError, match="not both"):
        td.gather(1, torch.zeros(2, 2, dtype=torch.long), out=td.clone(), inplace=True)


def test_to_num_threads_checked():
    with pytest.raises(ValueError, match="num_threads"):
        _td().to("cpu", num_threads=-1)
    with pytest.raises(TypeError, match="unexpected arguments"):
        _td().to("cpu", pin=True)


def test_stack_keywords():
    a, b = _td(), _td() + 1
    for out in (
        TensorDict.stack([a, b], 1, contiguous=True),
        tensorbatch.stack([a, b], 1, strict=True),
        TensorDict.stack([a, b], 1, device="cpu"),
    ):
        assert type(out) is TensorDict
        assert out.batch_size == torch.Size([2, 2, 3])
        torch.testing.assert_close(out["a"], torch.stack([a["a"], b["a"]], 1))
    assert TensorDict.stack([a, b], device="cpu").device == torch.device("cpu")


def test_quantile_tuple_dim_takes_dims_together():
    td = _td().float()
    out = td.quantile(0.5, (0, 1))
    assert out.batch_size == torch.Size([])
    torch.testing.assert_close(out["a"], td["a"].reshape(6, 4).quantile(0.5, 0))
    kept = td.quantile(torch.tensor([0.25, 0.5]), (0, 1), keepdim=True)
    assert kept.batch_size == torch.Size([2, 1, 1])


def test_cat_tensors_repeated_key_and_atomic_refusal():
    td = _td()
    td.cat_tensors("a", "a", out_key="z", dim=-1)
    assert td["z"].shape == (2, 3, 8)
    assert "a" not in td
    td = _td()
    with pytest.raises(RuntimeError, match="batch"):
        td.cat_tensors("a", "a", out_key="z", dim=0)  # (4, 3, 4) does not fit batch [2, 3]
    assert set(td.keys()) == {"a", "n"}  # nothing deleted


def test_separates_stores_none_for_missing_keys():
    td = _td()
    out = td.separates("a", "zz", strict=False)  # (as tensordict: a NonTensorData holding None)
    assert list(out.keys()) == ["a", "zz"]
    assert out["zz"] is None and out.get("zz").batch_size == out.batch_size
    assert list(td.keys()) == ["n"]


def test_locked_structure_edits_refused():
    td = _td().lock_()
    for call in (
        lambda: td.separates("a"),
        lambda: td.create_nested("x"),
        lambda: td.cat_tensors("a", "a", out_key="z", dim=-1),
    ):
        with pytest.raises(RuntimeError, match="locked"):
            call()
    assert set(td.keys(True, True)) == {"a", ("n", "b")}


def test_backward_with_gradient_td():
    x = torch.ones(2, 3, requires_grad=True)
    td = TensorDict(a=x * 2, n={"b": x * 3}, batch_size=[2, 3])
    td.backward(TensorDict(a=torch.ones(2, 3), n={"b": torch.full((2, 3), 2.0)}, batch_size=[2, 3]))
    torch.testing.assert_close(x.grad, torch.full((2, 3), 8.0))
    with pytest.raises(TypeError, match="gradient must be a TensorDict"):
        td.backward(torch.ones(2, 3))


def test_lazy_stack_inplace_forms():
    s = LazyStackedTensorDict(*_td().unbind(0), stack_dim=0)
    members = list(s.tensordicts)
    dense = s.to_tensordict()
    assert s.roll(1, 1, inplace=True) is s
    assert s.tensordicts == members
    torch.testing.assert_close(s.to_tensordict()["a"], dense["a"].roll(1, 1))
    with pytest.raises(NotImplementedError, match="not supported on a lazy stack"):
        s.flatten(inplace=True)
    assert s.batch_size == torch.Size([2, 3])


def test_memmap_shape_keyword_conflict(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        MemoryMappedTensor.zeros(2, shape=(2,))
    m = MemoryMappedTensor.ones_like(torch.zeros(2, 2, dtype=torch.int16), filename=tmp_path / "x.mm")
    assert m.dtype == torch.int16
    assert m.filename == str(tmp_path / "x.mm")
    assert m.sum().item() == 4


def test_new_tensor_from_a_list_warns_nothing_and_takes_each_leafs_dtype():
    td = TensorDict({"f": torch.zeros(2), "n": {"i": torch.zeros(2, dtype=torch.int32)}}, [2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when a tensor is copy-constructed: a list is not one
        out = td.new_tensor([1, 2, 3])
    assert out.batch_size == torch.Size([3])
    assert out["f"].dtype == torch.float32
    assert out["n", "i"].dtype == torch.int32
    assert out["f"].tolist() == [1.0, 2.0, 3.0]
