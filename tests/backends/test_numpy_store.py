"""NumpyStore (a test backend implementing only the backend contract): the generic paths reach it through
the storage hooks, and never read whole leaves where rows (or metadata) are enough.

The generic behaviour is checked by the conformance suite (flavours ``numpy_store``, ``typed_over_numpy``,
``tensorclass_over_numpy``); these tests check *how* it is reached, with the store's call counters.
"""

from __future__ import annotations

import pytest
import torch
from _flavours import BATCH, LEAF_KEYS, leaves, make_numpy_store, reference
from _messages import batch_size_refused

from tensorbatch import TensorDict

T = torch.tensor

# id -> a batch index that only selects rows of dim 0
ROW_INDICES = {
    "int": 1,
    "neg_int": -1,
    "slice": slice(0, 2),
    "step": slice(None, None, 2),
    "list": [2, 0],
    "repeats": T([2, 0, 2]),
    "sorted": T([0, 2]),
    "mask": T([True, False, True]),
}


@pytest.fixture
def store():
    return make_numpy_store()


@pytest.mark.parametrize("case", ROW_INDICES, ids=list(ROW_INDICES))
def test_getitem_reads_rows_once_and_no_whole_leaf(store, case):
    index = ROW_INDICES[case]
    out = store[index]
    assert store.stats == {"read_rows": 1}
    want = torch.as_tensor(index) if isinstance(index, list) else index
    for path, value in reference(0).items():
        assert torch.equal(out.get(path), value[want]), path
    assert type(out) is TensorDict


def test_getitem_past_dim0_reads_the_rows_then_indexes_in_memory(store):
    out = store[1, T([3, 0])]
    assert store.stats == {"read_rows": 1}
    assert torch.equal(out.get(("nested", "d")), reference(0)["nested", "d"][1, T([3, 0])])


def test_slice_and_int_reads_share_the_store_memory(store):
    """A numpy int or slice index is a view, as torch's: writing into the rows read writes the store."""
    store[1:3].get("a").fill_(-1.0)
    store[0].get("b").fill_(-5)
    assert (store.get("a")[1:3] == -1).all()
    assert not (store.get("a")[0] == -1).any()
    assert (store.get("b")[0] == -5).all()
    store[T([0])].get("a").fill_(7.0)  # rows: a copy, as torch's advanced indexing
    assert not (store.get("a") == 7).any()


@pytest.mark.parametrize("case", ROW_INDICES, ids=list(ROW_INDICES))
def test_setitem_at_rows_is_one_write_without_reads(store, case):
    index = ROW_INDICES[case]
    if case == "repeats":
        index = T([2, 0])
    want = torch.as_tensor(index) if isinstance(index, list) else index
    store[index] = 0
    assert store.stats == {"write_rows": 1}
    for path, value in reference(0).items():
        value = value.clone()
        value[want] = 0
        assert torch.equal(store.get(path), value), path


def test_setitem_with_a_tensordict_value(store):
    other = make_numpy_store(seed=1)
    store[T([2, 0])] = other[T([2, 0])]
    assert store.stats["write_rows"] == 1
    assert store.stats["leaf"] == 0
    ref0, ref1 = reference(0), reference(1)
    for path in LEAF_KEYS:
        assert torch.equal(store.get(path)[T([2, 0])], ref1[path][T([2, 0])])
        assert torch.equal(store.get(path)[1], ref0[path][1])


def test_setitem_with_repeated_rows_keeps_the_last_value(store):
    store[T([1, 0, 1])] = {"b": T([[1] * 4, [2] * 4, [3] * 4])}
    assert store.get("b")[1].tolist() == [3] * 4
    assert store.get("b")[0].tolist() == [2] * 4


def test_setitem_past_dim0_reads_then_writes_the_touched_rows(store):
    store[1, T([0, 3])] = 0
    assert store.stats == {"read_rows": 1, "write_rows": 1}
    a = reference(0)["a",].clone()
    a[1, T([0, 3])] = 0
    assert torch.equal(store.get("a"), a)


def test_setitem_validates_everything_before_writing(store):
    with pytest.raises(RuntimeError, match=r"cannot write a value of shape \[3, 2\] into \('nested', 'd'\)"):
        store[0] = {"a": torch.zeros(4, 5), "nested": {"d": torch.zeros(3, 2)}}
    assert store.stats == {"write_rows": 1}  # the hook's own check refused it, before any write
    for path, value in leaves(store).items():
        assert torch.equal(value, reference(0)[path]), path


def test_setitem_new_key_is_allocated_from_its_schema(store):
    store[0:2] = {"new": torch.ones(2, 4, 3, dtype=torch.float16), "nested": {"f": torch.ones(2, 4)}}
    assert store.stats["alloc"] == 2
    new = store.get("new")
    assert new.shape == (3, 4, 3)
    assert new.dtype == torch.float16
    assert (new[:2] == 1).all()
    assert (new[2] == 0).all()
    assert store.get(("nested", "f"))[:2].eq(1).all()
    assert store.get(("nested", "f"))[2].eq(0).all()


def test_setitem_new_key_on_a_locked_store_is_refused_before_anything(store):
    store.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        store[0] = {"new": torch.ones(4)}
    assert "new" not in store
    store[0] = {"b": torch.zeros(4, dtype=torch.int64)}  # existing keys: allowed on a locked store
    assert (store.get("b")[0] == 0).all()


def test_get_at_reads_only_that_leaf_rows(store):
    got = store.get_at(("nested", "deep", "e"), T([2, 0]))
    assert store.stats == {"read_rows": 1}
    assert torch.equal(got, reference(0)["nested", "deep", "e"][T([2, 0])])
    assert torch.equal(store.get_at("a", (1, slice(0, 2))), reference(0)["a",][1, 0:2])
    assert store.get_at("missing", 0, "default") == "default"
    assert store.get_at(("nested", "missing"), 0) is None


def test_set_at_and_update_at_write_rows_after_checking_every_key(store):
    store.set_at_("b", T([100, 200, 300, 400]), 2)
    assert store.stats == {"write_rows": 1}
    assert store.get("b")[2].tolist() == [100, 200, 300, 400]
    with pytest.raises(KeyError, match="missing"):
        store.update_at_({"a": torch.zeros(4, 5), "missing": torch.zeros(4)}, 0)
    assert torch.equal(store.get("a"), reference(0)["a",])  # nothing written
    store.update_at_({"a": torch.zeros(5), ("nested", "d"): torch.ones(4, 2)}, (0, slice(None)))
    assert (store.get("a")[0] == 0).all()
    assert (store.get(("nested", "d"))[0] == 1).all()


def test_leaf_meta_answers_without_reading(store):
    meta = store._leaf_meta("a")
    assert (meta.shape, meta.dtype, meta.kind) == (torch.Size([3, 4, 5]), torch.float32, "tensor")
    assert store._leaf_meta("nested").kind == "node"
    assert store._leaf_meta("nested").shape == BATCH
    with pytest.raises(KeyError, match="missing"):
        store._leaf_meta("missing")
    assert store.stats == {}


def test_batch_size_checks_use_metadata(store):
    with pytest.raises(RuntimeError, match=batch_size_refused("a", [3, 4, 5], [3, 5])):
        store.batch_size = [3, 5]
    assert store.batch_size == BATCH
    store.batch_size = [3]
    assert store.batch_size == torch.Size([3])
    assert store.get("nested").batch_size == BATCH
    assert store.stats == {}


def test_keys_repr_entry_class_and_shapes_read_no_leaf(store):
    assert store.keys(include_nested=True, leaves_only=True) == [
        "a",
        "b",
        "c",
        ("nested", "d"),
        ("nested", "deep", "e"),
    ]
    assert sorted(store.keys(True), key=str) == sorted(
        ["a", "b", "c", "nested", ("nested", "d"), ("nested", "deep"), ("nested", "deep", "e")], key=str
    )
    text = repr(store)
    assert "d: Tensor(shape=[3, 4, 2], dtype=float32, device=cpu)" in text
    assert "deep: NumpyStore(batch_size=[3, 4])" in text
    assert store.entry_class("a") is torch.Tensor
    assert store.entry_class("nested") is type(store)
    assert store.get_item_shape(("nested", "d")) == torch.Size([3, 4, 2])
    assert store.get_item_shape("nested") == BATCH
    with pytest.raises(KeyError, match="missing"):
        store.get_item_shape(("nested", "missing"))
    assert store.stats == {}


def test_to_tensordict_is_one_read_into_new_memory(store):
    out = store.to_tensordict()
    assert store.stats == {"read_rows": 1}
    assert type(out) is TensorDict
    assert out.batch_size == BATCH
    for path, value in reference(0).items():
        assert torch.equal(out.get(path), value)
    out.get("a").fill_(0)
    assert torch.equal(store.get("a"), reference(0)["a",])  # a copy
