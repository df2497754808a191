"""zarr storage (tensorbatch.stored over the zarr dialect): round trips, tensordict's layout both ways, fsspec URLs,
lazy rows, the pickle gate, read-only stores, schema allocation, pickling and batch-size inference.

The generic behaviour runs in the conformance suite (flavours ``zarr``, ``typed_over_zarr``, ``tensorclass_over_zarr``).
"""

from __future__ import annotations

import inspect
import json
import pickle
import uuid

import numpy as np
import pytest
import torch
from _messages import array_mismatch

from tensorbatch import NonTensorData, NonTensorStack, TensorClass, TensorDict, TypedTensorDict, from_zarr
from tensorbatch.stored import ReadOnlyStorageError, StoredTensorDict, register_storage
from tensorbatch.stored._view import IndexedView

zarr = pytest.importorskip("zarr", reason="zarr (the zarr extra) is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # zarr's note on consolidated metadata


def sample() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12, dtype=torch.float32).view(3, 4),
            "i": torch.tensor([1, -2, 3]),
            "m": torch.tensor([True, False, True]),
            "n": {"b": torch.ones(3, 2, dtype=torch.float64), "deep": {"c": torch.arange(3, dtype=torch.int16)}},
            "s": NonTensorData("hello", batch_size=[3]),
            "st": NonTensorStack("x", "y", "z"),
        },
        batch_size=[3],
        names=["t"],
    )


def test_round_trip_keeps_values_dtypes_names_and_non_tensors(tmp_path):
    td = sample()
    out = td.to_zarr(tmp_path / "d.zarr")
    assert isinstance(out, StoredTensorDict)
    back = from_zarr(tmp_path / "d.zarr")
    for stored in (out, back):
        assert stored.batch_size == torch.Size([3]) and stored.names == ["t"]
        assert stored["n"].batch_size == torch.Size([3]) and stored["n", "deep"].batch_size == torch.Size([3])
        for key in td.keys(include_nested=True, leaves_only=True):
            if key in ("s", "st"):
                continue
            assert stored[key].dtype == td[key].dtype
            assert torch.equal(stored[key], td[key])
        assert stored["s"] == "hello"
        assert list(stored["st"]) == ["x", "y", "z"]
        assert stored.get("st").batch_size == torch.Size([3])
    assert (back.to_tensordict() == td).all()


def test_dtypes_zarr_has_no_type_for_are_stored_as_bits(tmp_path):
    td = TensorDict({"h": torch.tensor([1.5, -2.25], dtype=torch.bfloat16)}, [2])
    back = from_zarr(td.to_zarr(tmp_path / "b.zarr").dialect.where)
    assert back["h"].dtype == torch.bfloat16 and back["h"].tolist() == [1.5, -2.25]
    raw = zarr.open_group(str(tmp_path / "b.zarr"), mode="r")
    assert raw["h"].dtype == np.int16 and raw["h"].attrs["tensorbatch_dtype"] == "bfloat16"


def test_a_dtype_without_any_zarr_type_is_refused_naming_the_key(tmp_path):
    td = TensorDict({"ok": torch.zeros(2), "c": torch.zeros(2, dtype=torch.complex32)}, [2])
    with pytest.raises(TypeError, match=r"'c' of dtype torch\.complex32"):
        td.to_zarr(tmp_path / "c.zarr")


def test_tensordict_reads_what_tensorbatch_writes(tmp_path):
    tensordict = pytest.importorskip("tensordict")
    sample().to_zarr(tmp_path / "ours.zarr")
    theirs = tensordict.TensorDict.from_zarr(str(tmp_path / "ours.zarr"))
    assert theirs.batch_size == torch.Size([3]) and theirs.names == ["t"]
    assert theirs["n"].batch_size == torch.Size([3])
    assert torch.equal(theirs["a"], sample()["a"]) and torch.equal(theirs["n", "deep", "c"], sample()["n", "deep", "c"])
    assert theirs["s"] == "hello"
    assert list(theirs["st"]) == ["x", "y", "z"]


def test_tensorbatch_reads_what_tensordict_writes(tmp_path):
    tensordict = pytest.importorskip("tensordict")
    source = tensordict.TensorDict(
        {
            "a": torch.arange(12.0).view(3, 4),
            "n": {"b": torch.ones(3, dtype=torch.int64), "deep": {"c": torch.zeros(3, 2)}},
            "s": tensordict.NonTensorData("hi", batch_size=[3]),
            "st": tensordict.NonTensorStack("p", "q", "r"),
            "j": tensordict.NonTensorData({"k": [1, 2]}, batch_size=[3]),
        },
        batch_size=[3],
        names=["time"],
    )
    source.to_zarr(str(tmp_path / "theirs.zarr"))
    ours = from_zarr(tmp_path / "theirs.zarr")
    assert ours.batch_size == torch.Size([3]) and ours.names == ["time"]
    assert ours["n", "deep"].batch_size == torch.Size([3])
    assert torch.equal(ours["a"], source["a"]) and torch.equal(ours["n", "b"], source["n", "b"])
    assert ours["s"] == "hi" and ours["j"] == {"k": [1, 2]}
    assert list(ours["st"]) == ["p", "q", "r"]
    assert ours[1]["st"] == "q"


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_fsspec_urls_take_the_same_path(tmp_path, scheme):
    url = f"memory://tb-{uuid.uuid4().hex}" if scheme == "memory" else f"file://{tmp_path}/u.zarr"
    sample().to_zarr(url)
    back = from_zarr(url)
    assert type(back.dialect.root.store).__name__ == "FsspecStore"
    assert (back.to_tensordict() == sample()).all()
    assert back[[2, 0]]["a"].tolist() == [[8.0, 9.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]
    writable = from_zarr(url, mode="r+")
    writable["a"][:] = 0  # (a read is a copy: this writes nothing)
    writable[1] = (
        TensorDict({"a": torch.full((4,), 7.0)}, [])
        .update({"i": torch.tensor(70)}, inplace=False)
        .update(sample()[1].exclude("a", "i"))
    )
    assert from_zarr(url)["a"][1].tolist() == [7.0] * 4 and from_zarr(url)["i"].tolist() == [1, 70, 3]


def test_storage_options_reach_fsspec(tmp_path):
    url = f"memory://tb-{uuid.uuid4().hex}"
    sample().to_zarr(url, storage_options={"skip_instance_cache": True})
    assert from_zarr(url, storage_options={"skip_instance_cache": True})["i"].tolist() == [1, -2, 3]


def test_indexing_gives_a_view_that_reads_rows_and_writes_through(tmp_path):
    td = TensorDict({"a": torch.arange(200.0).view(100, 2), "n": {"b": torch.arange(100)}}, [100])
    stored = td.to_zarr(tmp_path / "v.zarr", chunks=(16,))
    assert stored.dialect.root["a"].chunks == (16, 2)
    view = stored[10:20]
    assert isinstance(view, IndexedView) and view.batch_size == torch.Size([10])
    assert view["a"].tolist() == td["a"][10:20].tolist()
    rows = stored[torch.tensor([5, 1, 5, 99])]
    assert rows["n", "b"].tolist() == [5, 1, 5, 99]
    view["n", "b"] = torch.full((10,), -1)
    assert from_zarr(tmp_path / "v.zarr")["n", "b"][8:22].tolist() == [8, 9] + [-1] * 10 + [20, 21]
    stored[torch.tensor([3, 0, 3])] = TensorDict(
        {"a": torch.tensor([[1.0, 1], [2, 2], [3, 3]]), "n": {"b": torch.tensor([7, 8, 9])}}, [3]
    )
    again = from_zarr(tmp_path / "v.zarr")
    assert again["a"][0].tolist() == [2.0, 2.0] and again["a"][3].tolist() == [3.0, 3.0]  # the last repeat wins
    assert again["n", "b"][[0, 3]].tolist() == [8, 9]


def test_views_read_whole_by_int_or_slice_give_the_rows_names_and_nested_batch(tmp_path):
    deep = TensorDict({"c": torch.arange(60).view(10, 2, 3)}, [10, 2, 3])
    nested = TensorDict({"b": torch.arange(20).view(10, 2), "d": deep}, [10, 2])
    td = TensorDict({"a": torch.arange(40.0).view(10, 2, 2), "n": nested}, [10, 2], names=["t", "p"])
    stored = td.to_zarr(tmp_path / "s.zarr")
    for _ in range(2):  # the second read goes through the layout the first one kept (Dialect.read_slabs)
        for index in (3, -1, slice(2, 9, 3), slice(-4, None)):
            got = stored[index].to_tensordict()
            want = td[index]
            assert type(got) is TensorDict and got.batch_size == want.batch_size
            assert got["n"].batch_size == want["n"].batch_size and got["n", "d"].batch_size == want["n", "d"].batch_size
            assert got.names == want.names  # (as in memory: an int drops dim 0's name only)
            assert (got == want).all()
    rows = torch.tensor([[0, 1], [1, 2]])  # rows of a 2-d index: new dims unnamed, as in memory (it raised)
    assert stored[rows].to_tensordict().names == td[rows].names == [None, None, "p"]


def test_a_failed_row_write_leaves_the_store_unchanged(tmp_path):
    stored = TensorDict({"a": torch.zeros(4, 2), "b": torch.zeros(4)}, [4]).to_zarr(tmp_path / "f.zarr")
    with pytest.raises(RuntimeError, match="'b'"):
        stored[0:2] = TensorDict({"a": torch.ones(2, 2), "b": torch.ones(2, 5)}, [2])
    again = from_zarr(tmp_path / "f.zarr")
    assert not again["a"].any() and not again["b"].any()


def test_pickled_values_are_read_only_with_allow_pickle(tmp_path):
    td = TensorDict({"o": NonTensorData({1, 2}), "a": torch.zeros(2)}, [2])
    written = td.to_zarr(tmp_path / "p.zarr")
    assert written["o"] == {1, 2}  # the writer trusts what it wrote
    raw = zarr.open_group(str(tmp_path / "p.zarr"), mode="r")
    assert raw["o"].attrs["__tensordict_non_tensor__"] == {"encoding": "pickle"}
    with pytest.raises(PermissionError, match=r"p\.zarr'?:/o holds a pickled value.*allow_pickle=True"):
        from_zarr(tmp_path / "p.zarr")["o"]
    assert from_zarr(tmp_path / "p.zarr")["a"].tolist() == [0.0, 0.0]  # other keys read as usual
    assert from_zarr(tmp_path / "p.zarr", allow_pickle=True)["o"] == {1, 2}
    with pytest.raises(PermissionError, match="pickled"):
        td.to_zarr(tmp_path / "q.zarr", allow_pickle=False)["o"]


def test_json_values_are_json(tmp_path):
    TensorDict({"j": NonTensorData({"k": [1, 2.5, "x"]})}, []).to_zarr(tmp_path / "j.zarr")
    raw = zarr.open_group(str(tmp_path / "j.zarr"), mode="r")["j"]
    assert raw.attrs["__tensordict_non_tensor__"] == {"encoding": "json"}
    assert json.loads(raw[...].tobytes()) == {"k": [1, 2.5, "x"]}


def test_a_read_only_store_refuses_writes_naming_the_store_and_key(tmp_path):
    sample().to_zarr(tmp_path / "r.zarr")
    ro = from_zarr(tmp_path / "r.zarr")
    for write in (
        lambda: ro.set("a", torch.zeros(3, 4)),
        lambda: ro.__setitem__("new", torch.zeros(3)),
        lambda: ro.__delitem__("i"),
        lambda: ro["n"].set("b", torch.zeros(3, 2)),
    ):
        with pytest.raises(ReadOnlyStorageError, match=r"r\.zarr.*read-only"):
            write()
    with pytest.raises(ReadOnlyStorageError, match=r"r\.zarr.*read-only"):
        ro[0] = sample()[0].exclude("s", "st")
    assert (from_zarr(tmp_path / "r.zarr").to_tensordict() == sample()).all()


def test_a_missing_store_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.zarr"):
        from_zarr(tmp_path / "nothere.zarr")


def test_modes(tmp_path):
    sample().to_zarr(tmp_path / "m.zarr")
    with pytest.raises(FileExistsError):
        from_zarr(tmp_path / "m.zarr", mode="x")
    rw = from_zarr(tmp_path / "m.zarr", mode="r+")
    rw["extra"] = torch.arange(3)
    del rw["i"]
    back = from_zarr(tmp_path / "m.zarr")
    assert set(back.keys()) == {"a", "m", "n", "s", "st", "extra"} and back["extra"].tolist() == [0, 1, 2]


def test_from_schema_allocates_zero_leaves_without_data(tmp_path):
    out = TensorDict.from_schema(
        {"obs": ([2], torch.uint8), ("n", "r"): ([], torch.float32)},
        batch_size=[5],
        storage="zarr",
        filename=str(tmp_path / "s.zarr"),
        chunks=(2,),
    )
    assert out["obs"].shape == torch.Size([5, 2]) and out["obs"].dtype == torch.uint8 and not out["obs"].any()
    assert out["n"].batch_size == torch.Size([5]) and out["n", "r"].tolist() == [0.0] * 5
    assert not list((tmp_path / "s.zarr" / "obs").glob("c/*"))  # no chunk written
    out[1:3] = TensorDict({"obs": torch.ones(2, 2, dtype=torch.uint8), "n": {"r": torch.ones(2)}}, [2])
    assert from_zarr(tmp_path / "s.zarr")["n", "r"].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]
    with pytest.raises(TypeError, match="filename="):
        TensorDict.from_schema({"a": ([], torch.float32)}, storage="zarr")


def test_pickling_reopens_the_store(tmp_path):
    stored = sample().to_zarr(tmp_path / "k.zarr")
    again = pickle.loads(pickle.dumps(stored["n"]))
    assert isinstance(again, StoredTensorDict) and again.batch_size == torch.Size([3])
    assert again.dialect.mode == "r+"  # never "w": that would erase the store
    assert torch.equal(again["b"], sample()["n", "b"])
    ro = pickle.loads(pickle.dumps(from_zarr(tmp_path / "k.zarr")))
    assert ro.dialect.mode == "r"


def test_batch_sizes_are_inferred_where_none_is_recorded(tmp_path):
    root = zarr.open_group(str(tmp_path / "raw.zarr"), mode="w")
    root.create_array("x", data=np.zeros((4, 3, 2), dtype=np.float32))
    group = root.create_group("g")
    group.create_array("y", data=np.zeros((4, 3), dtype=np.int64))
    assert from_zarr(tmp_path / "raw.zarr").batch_size == torch.Size([4, 3])
    assert from_zarr(tmp_path / "raw.zarr", batch_dims=1).batch_size == torch.Size([4])
    assert from_zarr(tmp_path / "raw.zarr", batch_size=[4]).batch_size == torch.Size([4])
    with pytest.raises(ValueError, match=f"{array_mismatch('x', [4, 3, 2], [5])}|{array_mismatch('g', [4, 3], [5])}"):
        from_zarr(tmp_path / "raw.zarr", batch_size=[5])
    sample().to_zarr(tmp_path / "rec.zarr")
    assert from_zarr(tmp_path / "rec.zarr", auto_batch_size=True).batch_size == torch.Size([3])


def test_batch_size_and_names_changes_are_recorded(tmp_path):
    stored = TensorDict({"a": torch.zeros(3, 4), "n": {"b": torch.zeros(3, 4)}}, [3]).to_zarr(tmp_path / "b.zarr")
    stored.batch_size = [3, 4]
    stored.names = ["x", "y"]
    again = from_zarr(tmp_path / "b.zarr")
    assert again.batch_size == torch.Size([3, 4]) and again.names == ["x", "y"]
    assert again["n"].batch_size == torch.Size([3, 4])
    with pytest.raises(RuntimeError, match=array_mismatch("a", [3, 4], [4])):
        stored.batch_size = [4]
    assert from_zarr(tmp_path / "b.zarr").batch_size == torch.Size([3, 4])


def test_with_block_closes(tmp_path):
    sample().to_zarr(tmp_path / "w.zarr")
    with from_zarr(tmp_path / "w.zarr") as stored:
        assert stored["i"].tolist() == [1, -2, 3]
    assert not stored.dialect.root.store._is_open


class Sample(TensorClass):
    a: torch.Tensor
    i: torch.Tensor


class State(TypedTensorDict):
    a: torch.Tensor
    i: torch.Tensor


def test_typed_wrappers_forward_to_zarr_and_from_zarr(tmp_path):
    tc = Sample(a=torch.zeros(3, 4), i=torch.arange(3), batch_size=[3])
    stored = tc.to_zarr(tmp_path / "tc.zarr")
    assert isinstance(stored, StoredTensorDict) and stored["i"].tolist() == [0, 1, 2]
    state = State(a=torch.ones(3, 4), i=torch.arange(3), batch_size=[3])
    assert state.to_zarr(tmp_path / "tt.zarr")["a"].sum().item() == 12.0
    over = Sample.from_tensordict(from_zarr(tmp_path / "tt.zarr", mode="r+"))
    over.i[...] = 5  # (a read is a copy)
    over[0] = Sample(a=torch.full((4,), 2.0), i=torch.tensor(9), batch_size=[])
    assert from_zarr(tmp_path / "tt.zarr")["i"].tolist() == [9, 1, 2]


def test_register_storage_refuses_a_name_that_is_not_an_identifier():
    with pytest.raises(ValueError, match="not an identifier"):
        register_storage("my-store", to=lambda td, where: td, opener=lambda where: where)


def test_from_zarr_classmethod_names_its_first_parameter_filename(tmp_path):
    """tensordict's classmethod says ``filename``, its function ``zarr_file``: ``register_storage(where=)``."""
    sample().to_zarr(tmp_path / "f.zarr")
    assert next(iter(inspect.signature(TensorDict.from_zarr).parameters)) == "filename"
    assert next(iter(inspect.signature(from_zarr).parameters)) == "zarr_file"
    assert TensorDict.from_zarr(filename=tmp_path / "f.zarr")["i"].tolist() == [1, -2, 3]
    assert TensorDict.from_zarr(tmp_path / "f.zarr", mode="r")["i"].tolist() == [1, -2, 3]
    with pytest.raises(TypeError, match="from_zarr\\(\\) got multiple values for argument 'filename'"):
        TensorDict.from_zarr(tmp_path / "f.zarr", filename=tmp_path / "f.zarr")


def test_to_tensordict_reads_each_leaf_as_one_slice(tmp_path, monkeypatch):
    from tensorbatch.stored._zarr import ZarrDialect

    td = TensorDict({"a": torch.arange(12.0).view(6, 2), "n": {"b": torch.arange(6)}}, [6], names=["t"])
    stored = td.to_zarr(tmp_path / "t.zarr")
    kinds, read_rows = [], ZarrDialect.read_rows

    def counted(self, path, plan):
        kinds.append((path, plan.kind))
        return read_rows(self, path, plan)

    monkeypatch.setattr(ZarrDialect, "read_rows", counted)
    out = stored.to_tensordict()
    assert kinds == [(("a",), "slice"), (("n", "b"), "slice")]  # (not a gather of every row)
    assert type(out) is TensorDict and out.names == ["t"] and out.batch_size == torch.Size([6])
    assert (out == td).all()
    out["a"].fill_(-1.0)  # new memory: the store is unchanged
    assert stored["a"].tolist() == td["a"].tolist()


def test_persistent_tensordict_with_the_zarr_backend(tmp_path):
    from tensorbatch import PersistentTensorDict

    sample().to_zarr(tmp_path / "p.zarr")
    opened = PersistentTensorDict(filename=tmp_path / "p.zarr", backend="zarr", mode="r+", batch_size=[3])
    assert isinstance(opened, StoredTensorDict) and opened.dialect.mode == "r+"
    assert opened["i"].tolist() == [1, -2, 3]
    assert PersistentTensorDict.from_zarr(tmp_path / "p.zarr")["n", "b"].shape == torch.Size([3, 2])
    with pytest.raises(NotImplementedError, match="'h5' and 'zarr'"):
        PersistentTensorDict(filename=tmp_path / "p.zarr", backend="n5")
