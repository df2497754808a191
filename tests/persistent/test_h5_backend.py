"""Unit tests of the HDF5 backend's own code (tensorbatch/persistent): the row reader's strategies, writes,
the file layout, safety (keys, read-only files, corrupt files, checksums, atomic writes), pickling, views.

The generic behaviour is checked by the conformance suite (flavours h5, typed_over_h5, tensorclass_over_h5);
interop with tensordict and multi-process use by the other test_h5_* files.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

from tensorbatch import TensorDict, from_h5
from tensorbatch._ops.rows import plan_rows
from tensorbatch.persistent import PersistentTensorDict, ReadOnlyError, _rows

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

T = torch.tensor


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "data.h5")


def _dataset(path, data, **kwargs):
    f = h5py.File(path, "w")
    return f, f.create_dataset("x", data=data, **kwargs)


LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (7, 3)},
    "gzip": {"chunks": (16, 3), "compression": "gzip"},
}
INDICES = {
    "sparse": T([90, 3, 57, 3, 12]),  # unsorted, repeated, far apart
    "dense": T([5, 6, 8, 7, 5, 9, 10]),
    "range": T([20, 21, 22, 23]),
    "matrix": T([[4, 2], [2, 99]]),
    "mask": torch.arange(100) % 3 == 0,
    "empty": T([], dtype=torch.long),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index", INDICES)
def test_read_rows_matches_torch(path, layout, index):
    data = np.arange(300, dtype=np.float32).reshape(100, 3)
    f, ds = _dataset(path, data, **LAYOUTS[layout])
    with f:
        idx = INDICES[index]
        got = _rows.read_rows(ds, plan_rows(idx, 100))
        assert torch.equal(torch.from_numpy(got), torch.from_numpy(data)[idx])


@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
@pytest.mark.parametrize("block", [1, 2, 64])
def test_span_reads_in_blocks(path, layout, block):
    """A dense request is read as the span in blocks of at most ``budget`` bytes, scattered into the result."""
    data = np.arange(300, dtype=np.float32).reshape(100, 3)
    f, ds = _dataset(path, data, **LAYOUTS[layout])
    with f:
        idx = T([9, 1, 5, 3, 1, 7, 2])
        plan = plan_rows(idx, 100)
        assert _rows._strategy(ds, plan.rows.numpy(), 12) == "span"
        got = _rows.read_rows(ds, plan, budget=block * 12)
        assert torch.equal(torch.from_numpy(got), torch.from_numpy(data)[idx])
        pieces = list(_rows._pieces(ds, plan.rows.numpy(), "span", block))
        assert all(len(rows) <= block for _, _, rows in pieces)
        assert [i for a, b, _ in pieces for i in range(a, b)] == list(range(7 - 1))  # each unique row once


def test_strategies(path):
    """Sparse rows: selections (in blocks); dense ones: span blocks; compressed chunks: touched ones, once."""
    data = np.arange(64_000, dtype=np.float32).reshape(1000, 64)
    f, ds = _dataset(path, data)
    with f:
        sparse = np.array([0, 500, 999])
        assert _rows._strategy(ds, sparse, 256) == "select"
        assert [(a, b) for a, b, _ in _rows._pieces(ds, sparse, "select", 2)] == [(0, 2), (2, 3)]
        dense = np.arange(0, 200, 2)
        assert _rows._strategy(ds, dense, 256) == "span"
        pieces = list(_rows._pieces(ds, dense, "span", 50))
        assert [(a, b) for a, b, _ in pieces] == [(0, 25), (25, 50), (50, 75), (75, 100)]  # 50-row blocks
        assert np.array_equal(np.concatenate([p for _, _, p in pieces]), data[dense])
        assert _rows._strategy(ds, np.arange(5, 9), 256) == "range"
        gz = f.create_dataset("z", data=data, chunks=(100, 64), compression="gzip")
        rows = np.array([1, 2, 150, 990])
        assert _rows._strategy(gz, rows, 256) == "chunks"
        pieces = list(_rows._pieces(gz, rows, "chunks", 200))
        assert [(a, b) for a, b, _ in pieces] == [(0, 3), (3, 4)]  # touched chunks once: 0 and 1 together, 9
        pieces = list(_rows._pieces(gz, rows, "chunks", 1))
        assert [(a, b) for a, b, _ in pieces] == [(0, 2), (2, 3), (3, 4)]  # blocks of at least one chunk
        plain = f.create_dataset("c", data=data, chunks=(100, 64))  # read as a contiguous one, chunk cache off
        assert _rows._strategy(plain, sparse, 256) == "select"
        assert _rows._strategy(plain, dense, 256) == "span"


@pytest.mark.parametrize("index", [T([7, 3, 9]), T([3, 7, 9]), slice(2, 5), 4])
def test_rows_in_order_are_read_as_the_result(path, index):
    """A slice, an int, and sorted rows read as a selection are the array h5py returns: no copy, no buffer."""
    data = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    f, ds = _dataset(path, data)
    with f:
        got = _rows.read_rows(ds, plan_rows(index, 1000), budget=0)  # (no room for a block buffer)
        assert torch.equal(torch.from_numpy(got), torch.from_numpy(data)[index])
        assert got.flags.c_contiguous
        assert got.flags.writeable
        assert got.base is None


def test_chunked_datasets_are_read_without_chunk_cache(path):
    """Uncompressed chunked datasets are opened with no chunk cache (HDF5 reads just the rows selected);
    compressed ones keep the default cache; a chunk cache size given by the caller is kept."""
    with h5py.File(path, "w") as f:
        for name, kwargs in LAYOUTS.items():
            f.create_dataset(name, data=np.arange(300, dtype=np.float32).reshape(100, 3), **kwargs)

    def cache_bytes(ptd, key):
        ptd[T([5, 1, 70])].to_tensordict()
        return ptd._entry(key)[0].id.get_access_plist().get_chunk_cache()[1]

    with from_h5(path) as ptd:
        default = h5py.File(path, "r")["gzip"].id.get_access_plist().get_chunk_cache()[1]
        assert cache_bytes(ptd, "chunked") == 0
        assert cache_bytes(ptd, "gzip") == default > 0
        assert torch.equal(ptd[T([5, 1, 70])]["chunked"], torch.arange(300.0).reshape(100, 3)[[5, 1, 70]])
    with PersistentTensorDict(filename=path, batch_size=[100], file_options={"rdcc_nbytes": 1 << 16}) as ptd:
        assert cache_bytes(ptd, "chunked") == 1 << 16
    with PersistentTensorDict(filename=path, batch_size=[100], mode="r+") as ptd:
        assert cache_bytes(ptd, "chunked") == 0
        ptd[T([3, 1])] = TensorDict({"chunked": torch.full((2, 3), -1.0)}, [2])
        assert torch.equal(ptd["chunked"][[1, 3, 4]][:, 0], T([-1.0, -1.0, 12.0]))


def test_read_buffers_stay_within_half_the_result(path, monkeypatch):
    """The budget of a read is a quarter of all its leaves' result (at least MIN_BLOCK_BYTES), for every leaf."""
    monkeypatch.setattr(_rows, "MIN_BLOCK_BYTES", 16)
    seen = []
    original = _rows._pieces

    def spy(ds, rows, how, block_rows):
        seen.append((ds.name, block_rows * ds.dtype.itemsize * int(np.prod(ds.shape[1:]))))
        return original(ds, rows, how, block_rows)

    monkeypatch.setattr(_rows, "_pieces", spy)
    with PersistentTensorDict(filename=path, batch_size=[1000], mode="w") as ptd:
        ptd["wide"] = torch.arange(64_000.0).reshape(1000, 64)
        ptd["n", "thin"] = torch.arange(1000.0)
        idx = T([900, 10, 500, 20, 30, 40])  # sparse for "wide", dense for "thin" (4-byte rows)
        got = ptd[idx].to_tensordict()
        assert torch.equal(got["wide"], ptd["wide"][idx])
        assert torch.equal(got["n", "thin"], ptd["n", "thin"][idx])
    budget = (6 * 64 * 4 + 6 * 4) // 4
    assert seen
    assert all(0 < size <= budget for _, size in seen)
    assert {name for name, _ in seen} == {"/wide", "/n/thin"}


def test_write_rows_last_repeat_wins(path):
    f, ds = _dataset(path, np.zeros((6, 2), dtype=np.int64))
    with f:
        idx = T([4, 1, 4, 0])
        value = np.array([[1, 1], [2, 2], [3, 3], [4, 4]])
        _rows.write_rows(ds, plan_rows(idx, 6), value)
        expected = torch.zeros(6, 2, dtype=torch.long)
        expected[idx] = torch.from_numpy(value)  # torch: the last repeat wins on the CPU
        assert torch.equal(torch.from_numpy(ds[()]), expected)


def _content():
    return TensorDict(
        {
            "a": torch.arange(12.0).reshape(4, 3),
            "b": torch.arange(4),
            "n": {"c": torch.ones(4, 2, 5, dtype=torch.float64)},
        },
        [4],
    )


def test_round_trip_keeps_batch_names_nested_batch_and_dtypes(path):
    td = _content()
    td["n"].batch_size = [4, 2]
    td["h"] = torch.arange(8, dtype=torch.float32).reshape(4, 2).bfloat16()
    td.names = ["rows"]
    td.to_h5(path).close()
    with from_h5(path) as data:
        assert data.batch_size == torch.Size([4])
        assert data.names == ["rows"]
        assert data["n"].batch_size == torch.Size([4, 2])
        assert data["h"].dtype == torch.bfloat16
        assert torch.equal(data["h"], td["h"])
    with h5py.File(path) as f:  # other readers see the bits as int16, the dtype in an attribute
        assert f["h"].dtype == np.int16
        assert f["h"].attrs["tensorbatch_dtype"] == "bfloat16"


def test_strings_and_non_tensor_values(path):
    td = _content()
    td["s"] = "hello"
    td.set_non_tensor("k", 3)
    td.to_h5(path).close()
    with h5py.File(path) as f:
        assert f["s"].attrs["__tensordict_str__"]
        assert h5py.check_string_dtype(f["s"].dtype) is not None
    with from_h5(path) as data:
        assert data["s"] == "hello"
        assert data["k"] == 3


def test_from_h5_infers_batch_size_of_foreign_file(path):
    with h5py.File(path, "w") as f:
        f["a"] = np.zeros((5, 3))
        f["g/b"] = np.zeros((5, 3, 2))
    with from_h5(path) as data:
        assert data.batch_size == torch.Size([5, 3])
        assert data["g"].batch_size == torch.Size([5, 3, 2])
    with from_h5(path, batch_dims=1) as data:
        assert data.batch_size == torch.Size([5])
    with pytest.raises(TypeError, match="not both"):
        from_h5(path, batch_size=[5], auto_batch_size=True)


@pytest.mark.parametrize("key", ["a/b", "", ".", ".."])
def test_bad_keys_raise_naming_the_key(path, key):
    with PersistentTensorDict(filename=path, batch_size=[2], mode="w") as data:
        with pytest.raises(ValueError, match="invalid key"):
            data[key] = torch.zeros(2)
        assert list(data.keys()) == []


def test_read_only_writes_raise_one_error_naming_file_and_dataset(path):
    _content().to_h5(path).close()
    with from_h5(path) as data:
        for write in (
            lambda: data.set("a", torch.zeros(4, 3)),
            lambda: data.__setitem__(1, 0.0),
            lambda: data.set_("b", torch.zeros(4, dtype=torch.long)),
            lambda: data.zero_(),
        ):
            with pytest.raises(ReadOnlyError, match=r"data\.h5.*read-only|read-only") as info:
                write()
            assert path in str(info.value)
        assert torch.equal(data["a"], _content()["a"])


def test_corrupt_file_raises_naming_it(path):
    _content().to_h5(path).close()
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(OSError, match=r"data\.h5"):
        from_h5(path)


def test_fletcher32_detects_bit_corruption(path):
    td = TensorDict({"a": torch.arange(4096.0)}, [4096])
    td.to_h5(path, fletcher32=True, chunks=(1024,)).close()
    with h5py.File(path) as f:
        offset = f["a"].id.get_chunk_info(1).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset + 100)
        byte = f.read(1)
        f.seek(offset + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with from_h5(path) as data, pytest.raises(OSError, match=r"(?i)checksum|filter") as info:
        data["a"]
    assert any("data.h5" in note for note in getattr(info.value, "__notes__", ()))


@pytest.mark.parametrize("atomic", [False, True])
def test_to_h5_refusing_a_value_leaves_the_file_untouched(path, atomic):
    _content().to_h5(path).close()
    before = os.stat(path)
    bad = _content()
    bad["n", "z"] = object()  # HDF5 cannot hold it: refused before the file is opened
    with pytest.raises(TypeError, match=r"\('n', 'z'\).*object"):
        bad.to_h5(path, atomic=atomic)
    assert os.listdir(os.path.dirname(path)) == ["data.h5"]  # no temporary file left
    assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    with from_h5(path) as data:
        assert set(data.keys()) == {"a", "b", "n"}


def test_to_h5_failing_half_way_atomic_keeps_the_previous_file(path, monkeypatch):
    _content().to_h5(path).close()
    from tensorbatch.persistent import _dialect

    def fail(self, path_, value):
        raise OSError("disk full")

    monkeypatch.setattr(_dialect.H5Dialect, "write", fail)  # (the write itself fails, after the checks)
    with pytest.raises(OSError, match="disk full"):
        _content().to_h5(path, atomic=True)
    monkeypatch.undo()
    assert os.listdir(os.path.dirname(path)) == ["data.h5"]
    with from_h5(path) as data:
        assert set(data.keys()) == {"a", "b", "n"}
        assert torch.equal(data["a"], _content()["a"])


def test_to_h5_overwrites_in_place_by_default_and_renames_with_atomic(path):
    _content().to_h5(path).close()
    inode = os.stat(path).st_ino
    out = TensorDict({"x": torch.arange(4.0)}, [4]).to_h5(path)
    assert os.stat(path).st_ino == inode  # truncated and written in place, as tensordict
    assert list(out.keys()) == ["x"] and out.filename == path and out.mode == "r+"
    out.close()
    reader = from_h5(path)  # open while the next write replaces the file
    out = TensorDict({"y": torch.ones(4)}, [4]).to_h5(path, atomic=True)
    assert os.stat(path).st_ino != inode and out.file.filename == path
    assert list(out.keys()) == ["y"] and torch.equal(out["y"], torch.ones(4))
    assert torch.equal(reader["x"], torch.arange(4.0))  # the open reader keeps the file it opened
    out["y"] += 1  # the returned handle writes the new file
    out.close()
    reader.close()
    with from_h5(path) as data:
        assert torch.equal(data["y"], torch.full((4,), 2.0))
    assert os.listdir(os.path.dirname(path)) == ["data.h5"]


def test_to_h5_onto_its_own_open_file_replaces_it(path):
    source = _content().to_h5(path)
    out = (source.to_tensordict() * 0 + 7).to_h5(path)  # HDF5 cannot truncate it: written aside, renamed
    assert torch.equal(out["a"], torch.full_like(source["a"], 7))  # (source still reads its own file)
    assert not torch.equal(source["a"], out["a"])
    again = source.to_h5(path)  # the source written onto the file it was read from
    assert torch.equal(again["a"], source["a"]) and set(again.keys()) == {"a", "b", "n"}
    for handle in (source, out, again):
        handle.close()
    assert os.listdir(os.path.dirname(path)) == ["data.h5"]


def test_pickle_reopens_without_truncating(path):
    data = PersistentTensorDict(filename=path, batch_size=[4], mode="w")
    data["a"] = torch.ones(4)
    clone = pickle.loads(pickle.dumps(data))
    assert clone.mode == "r+"
    assert torch.equal(clone["a"], torch.ones(4))
    clone.close()
    data.close()
    reader = from_h5(path)
    again = pickle.loads(pickle.dumps(reader["a"] if False else reader))
    assert again.mode == "r"
    reader.close()
    again.close()


def test_index_is_a_lazy_view_writing_through(path):
    data = _content().to_h5(path)
    view = data[T([3, 1])]
    assert view.batch_size == torch.Size([2])
    view["a"] = torch.zeros(2, 3)
    view["n", "c"] += 1
    assert torch.equal(data["a"][[3, 1]], torch.zeros(2, 3))
    assert torch.equal(data["n", "c"][1], torch.full((2, 5), 2.0, dtype=torch.float64))
    data[T([2, 0, 2])] = TensorDict(
        {
            "a": torch.arange(9.0).reshape(3, 3),
            "b": T([7, 8, 9]),
            "n": {"c": torch.zeros(3, 2, 5, dtype=torch.float64)},
        },
        [3],
    )
    assert data["b"].tolist() == [8, 1, 9, 3]  # row 2 written twice: the last value wins
    data.close()


def test_alloc_writes_no_data(path):
    with PersistentTensorDict(filename=path, batch_size=[1000], mode="w") as data:
        data._alloc_leaf("big", (1000, 100_000), torch.float32)  # 400 MB
        data.flush()
        assert os.path.getsize(path) < 1 << 20
        assert data["big"][3:5].abs().sum() == 0


def test_device_cast_on_read_and_file_options(path):
    _content().to_h5(path).close()
    with from_h5(path, device="cpu", file_options={"locking": False, "rdcc_nbytes": 1 << 20}) as data:
        assert data.device == torch.device("cpu")
        assert data["a"].device == torch.device("cpu")
    with pytest.raises(TypeError, match="file_options"):
        from_h5(path, locking=False)
    with pytest.raises(TypeError, match=r"\['compresion'\].*create_dataset options"):
        from_h5(path, compresion="gzip")  # misspelt: refused at once, not at the first write
    with pytest.raises(TypeError, match="compresion"):
        _content().to_h5(path + ".other", compresion="gzip")
    assert not os.path.exists(path + ".other")


def test_clone(path):
    data = _content().to_h5(path)
    deep = data.clone()
    assert type(deep) is PersistentTensorDict
    assert deep.filename != data.filename
    deep["a"] = torch.zeros(4, 3)
    assert not torch.equal(data["a"], deep["a"])
    shallow = data.clone(False)
    assert shallow.filename == data.filename
    assert torch.equal(shallow["a"], data["a"])
    name = deep.filename
    deep.close()
    assert not os.path.exists(name)  # a temporary clone is removed on close
    data.close()


def test_to_tensordict_and_memmap(path, tmp_path):
    data = _content().to_h5(path)
    out = data.to_tensordict()
    assert type(out) is TensorDict
    assert (out == _content()).all()
    mm = data.memmap(str(tmp_path / "mm"))
    assert (mm.to_tensordict() == _content()).all()
    data.close()


def test_from_schema_allocates_without_data(path):
    data = TensorDict.from_schema(
        {"obs": ([1024], torch.float32), ("n", "r"): ([], torch.bfloat16)},
        batch_size=[100_000],
        storage="h5",
        filename=path,
    )
    try:
        assert type(data) is PersistentTensorDict
        assert data["obs"].shape == torch.Size([100_000, 1024])  # 400 MB of zeros, none on disk
        assert data["n", "r"].dtype == torch.bfloat16
        assert os.stat(path).st_blocks * 512 < 1 << 20
        data[T([5, 2])] = TensorDict({"obs": torch.ones(2, 1024), "n": {"r": torch.ones(2)}}, [2])
        assert data.get_at("obs", 5).sum() == 1024
    finally:
        data.close()
    with pytest.raises(ValueError, match="unknown storage"):
        TensorDict.from_schema({"a": ([], torch.float32)}, storage="nope")
    assert TensorDict.from_schema({"a": ([2], torch.int64)}, batch_size=[3])["a"].shape == torch.Size([3, 2])


def test_write_back_of_in_place_ops(path):
    data = _content().to_h5(path)
    data["a"] += 1
    data.apply_(lambda x: x * 2)
    data.zero_()
    data.fill_("b", 3)
    assert data["a"].sum() == 0
    assert data["b"].tolist() == [3, 3, 3, 3]
    data.close()


def test_closed_file_raises_naming_it(path):
    data = _content().to_h5(path)
    data.close()
    with pytest.raises(ValueError, match=r"data\.h5' is closed"):
        data["a"]
    with pytest.raises(ValueError, match="closed"):
        data["a"] = torch.zeros(4, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("index", [3, slice(1, 8, 3), slice(5, 5)])
def test_int_and_slice_reads_of_every_dtype(path, dtype, index):
    """An int or a slice takes h5py's reader for simple numbers when it can, the general path otherwise."""
    value = (torch.arange(20) % 3).reshape(10, 2).to(dtype)
    with PersistentTensorDict(filename=path, batch_size=[10], mode="w") as ptd:
        ptd["x"] = value
        got = ptd[index].to_tensordict()["x"]
        assert got.dtype == dtype
        assert torch.equal(got, value[index])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("index", [3, -1, slice(1, 8, 3), slice(-4, None), slice(5, 5), slice(None)])
def test_int_and_slice_reads_of_a_read_only_file(path, dtype, index):
    """A read-only file keeps h5py's readers of its datasets (as h5py does); the values are the same."""
    value = (torch.arange(40) % 3).reshape(10, 4).to(dtype)
    with PersistentTensorDict(filename=path, batch_size=[10], mode="w") as ptd:
        ptd["x"] = value
        ptd["n", "y"] = value[:, :2]
        ptd["s"] = "text"
    with from_h5(path) as ptd:
        for _ in range(2):  # the second read uses the kept readers
            got = ptd[index].to_tensordict()
            assert got.batch_size == torch.zeros(10)[index].shape
            assert got["x"].dtype == dtype
            assert torch.equal(got["x"], value[index])
            assert got["n"].batch_size == torch.zeros(ptd["n"].batch_size)[index].shape
            assert torch.equal(got["n", "y"], value[:, :2][index])
            assert got["s"] == "text"
        assert torch.equal(ptd.to_tensordict()["x"], value)


def test_slice_reads_follow_writes_of_entries(path):
    """What slice reads keep of a level (its entries, h5py objects) is dropped when an entry changes."""
    with PersistentTensorDict(filename=path, batch_size=[6], mode="w") as ptd:
        ptd["a"] = torch.arange(6)
        ptd["n", "b"] = torch.ones(6, 2)
        assert ptd[1:3].to_tensordict()["a"].tolist() == [1, 2]
        ptd["a"] = torch.arange(6.0) * 10  # replaced: new dtype
        ptd["c"] = torch.full((6,), 7)  # added
        ptd["n", "b"] = torch.zeros(6, 3)
        got = ptd[1:3].to_tensordict()
        assert got["a"].tolist() == [10.0, 20.0]
        assert got["c"].tolist() == [7, 7]
        assert got["n", "b"].shape == (2, 3)
        assert not got["n", "b"].any()
        del ptd["c"]
        ptd["n"] = torch.ones(6)  # a group replaced by a dataset
        got = ptd[4].to_tensordict()
        assert set(got.keys()) == {"a", "n"}
        assert got["n"].item() == 1.0
        assert got.batch_size == ()
        ptd[2:4] = TensorDict({"a": torch.zeros(2), "n": torch.zeros(2)}, [2])  # written in place
        assert ptd[1:5].to_tensordict()["a"].tolist() == [10.0, 0.0, 0.0, 40.0]
        other = ptd.clone(recurse=False)  # the same open file: one cache
        other["a"] = torch.arange(6) + 1
        assert ptd[1:3].to_tensordict()["a"].tolist() == [2, 3]


def test_a_new_file_records_the_batch_size_given_to_the_constructor(tmp_path):
    path = str(tmp_path / "new.h5")
    ptd = PersistentTensorDict(filename=path, mode="w", batch_size=[10])
    ptd["n"] = TensorDict({"x": torch.zeros(10, 2, 3)}, batch_size=[10])
    ptd.close()
    back = from_h5(path)
    assert back.batch_size == torch.Size([10])
    assert back["n"].batch_size == torch.Size([10])
    assert back["n", "x"].shape == torch.Size([10, 2, 3])
    back.close()


def test_to_h5_checks_stored_and_lazy_sources_without_reading_their_tensors(path, tmp_path, monkeypatch):
    from tensorbatch import lazy_stack
    from tensorbatch.persistent import _dialect

    source = _content().to_h5(str(tmp_path / "source.h5"))
    reads = []
    read = _dialect.H5Dialect.read
    monkeypatch.setattr(_dialect.H5Dialect, "read", lambda self, p: reads.append(p) or read(self, p))
    _dialect.check_tree(source)  # metadata only: no dataset read
    assert reads == []
    copy = source.to_h5(path)  # each dataset read once, by the write
    assert sorted(reads) == [("a",), ("b",), ("n", "c")]
    assert torch.equal(copy["n", "c"], source["n", "c"])
    copy.close()
    source.close()
    ragged = lazy_stack([TensorDict(x=torch.zeros(2)), TensorDict(x=torch.zeros(3))])
    before = os.stat(path).st_mtime_ns
    with pytest.raises(RuntimeError):
        ragged.to_h5(path)  # the members differ in shape: refused before the file is touched
    assert os.stat(path).st_mtime_ns == before
    stacked = lazy_stack([TensorDict(x=torch.zeros(2), s="a"), TensorDict(x=torch.ones(2), s="b")])
    with stacked.to_h5(path) as out:
        assert torch.equal(out["x"], torch.stack([torch.zeros(2), torch.ones(2)]))
