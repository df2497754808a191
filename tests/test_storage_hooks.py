"""The storage hooks' generic defaults (``tensorbatch/_base/storage.py``) on the in-memory backends."""

from __future__ import annotations

import pytest
import torch

from tensorbatch import TensorDict, lazy_stack
from tensorbatch._base.storage import StorageHooks
from tensorbatch._ops.meta import LeafMeta, meta_of
from tensorbatch._ops.rows import plan_rows

T = torch.tensor


def _td():
    return TensorDict(
        {"a": torch.arange(12.0).reshape(3, 4), "n": {"b": torch.arange(3 * 2).reshape(3, 2)}, "s": "text"},
        batch_size=[3],
    )


def test_in_memory_backends_keep_the_in_memory_defaults():
    hooks = ("_read_index", "_write_index", "_read_at", "_set_at", "_update_at", "_write_back", "_write_back_leaf")
    for td in (_td(), lazy_stack([_td(), _td()])):
        for name in hooks:
            assert getattr(type(td), name) is getattr(StorageHooks, name), name
    td = _td()
    assert td._materialize() is td


def test_in_memory_write_back_hooks_change_nothing():
    td = _td()
    leaves = [td["a"], td["n", "b"]]
    leaves[0].add_(1)
    td._write_back(leaves)
    td._write_back_leaf(("n", "b"), leaves[1])
    assert torch.equal(td["a"], torch.arange(12.0).reshape(3, 4) + 1)
    assert td["a"] is leaves[0]


def test_leaf_meta_default_reads_the_value():
    td = _td()
    assert td._leaf_meta("a") == LeafMeta(torch.Size([3, 4]), torch.float32, "tensor")
    assert td._leaf_meta("n") == LeafMeta(torch.Size([3]), None, "node")
    assert td._leaf_meta("s") == LeafMeta(torch.Size([3]), None, "non-tensor")
    with pytest.raises(KeyError, match='"missing" not found'):
        td._leaf_meta("missing")
    assert meta_of(torch.zeros((), dtype=torch.bool)) == LeafMeta(torch.Size([]), torch.bool, "tensor")


def test_meta_items_default_is_the_items():
    td = _td()
    assert list(td._meta_items()) == list(td._items_str())


@pytest.mark.parametrize(
    "index", [1, slice(0, 2), [2, 0, 2], T([True, False, True])], ids=["int", "slice", "rows", "mask"]
)
def test_read_rows_default_is_indexing(index):
    td = _td()
    out = td._read_rows(plan_rows(index, 3))
    want = td[T(index) if isinstance(index, list) else index]
    assert out.batch_size == want.batch_size
    assert torch.equal(out["a"], want["a"])
    assert torch.equal(out["n", "b"], want["n", "b"])


def test_read_rows_of_some_keys():
    out = _td()._read_rows(plan_rows(slice(1, 3), 3), keys=["a"])
    assert list(out.keys()) == ["a"]
    assert torch.equal(out["a"], _td()["a"][1:3])


def test_write_rows_default_writes_in_place():
    td = _td()
    a, b = td["a"], td["n", "b"]
    td._write_rows(plan_rows([2, 0], 3), {("a",): torch.zeros(2, 4), ("n", "b"): 7})
    assert td["a"] is a
    assert td["n", "b"] is b
    assert a[0].eq(0).all()
    assert a[2].eq(0).all()
    assert a[1].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert b[0].tolist() == [7, 7]
    assert b[1].tolist() == [2, 3]


def test_write_rows_casts_to_the_leaf_dtype():
    td = _td()
    td._write_rows(plan_rows(0, 3), {("n", "b"): torch.full((2,), 2.7)})
    assert td["n", "b"].dtype == torch.int64
    assert td["n", "b"][0].tolist() == [2, 2]


def test_write_rows_validates_everything_first():
    td = _td()
    before = td["a"].clone()
    with pytest.raises(RuntimeError, match=r"cannot write a value of shape \[5\] into \('n', 'b'\)"):
        td._write_rows(plan_rows(slice(0, 2), 3), {("a",): torch.zeros(2, 4), ("n", "b"): torch.zeros(5)})
    assert torch.equal(td["a"], before)
    with pytest.raises(KeyError, match='"missing"'):
        td._write_rows(plan_rows(0, 3), {("a",): torch.zeros(4), ("missing",): 0})
    with pytest.raises(TypeError, match=r"cannot write rows into 'n': it holds a TensorDict"):
        td._write_rows(plan_rows(0, 3), {("n",): 0})
    assert torch.equal(td["a"], before)


def test_alloc_leaf_default_is_zeros_on_the_device():
    td = TensorDict(batch_size=[3], device="cpu")
    td._alloc_leaf("x", (3, 2), torch.int16)
    assert td["x"].dtype == torch.int16
    assert td["x"].shape == (3, 2)
    assert not td["x"].any()
    assert td["x"].device == torch.device("cpu")


def test_every_copy_on_read_backend_takes_the_stored_layers_hooks():
    from tensorbatch.persistent import PersistentTensorDict
    from tensorbatch.store import TensorDictStore
    from tensorbatch.store._lazy import _StoreElement
    from tensorbatch.stored import StoredTensorDict
    from tensorbatch.stored._copies import CopyOnRead
    from tensorbatch.stored._view import IndexedView

    for cls in (StoredTensorDict, PersistentTensorDict, TensorDictStore, IndexedView, _StoreElement):
        assert issubclass(cls, CopyOnRead), cls
        assert cls._write_back is CopyOnRead._write_back
        assert cls._set_at is CopyOnRead._set_at
