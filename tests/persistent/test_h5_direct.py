"""Rows read straight from the file (``_rows.DirectRows``): where it is used, and that it reads what HDF5 reads.

A read-only file's uncompressed datasets of native numbers whose rows are whole in the file (contiguous, or
chunks spanning the other dims) are read with ``os.preadv``; every other dataset through HDF5's selections.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tensorbatch import from_h5
from tensorbatch._ops.rows import plan_rows
from tensorbatch.persistent import _rows

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

T = torch.tensor
N = 300

INDICES = {
    "sparse": T([290, 3, 157, 3, 12]),  # unsorted, repeated, far apart
    "dense": T([5, 6, 8, 7, 5, 9, 10, 30, 31, 29, 200]),
    "run_with_repeats": torch.arange(40, 120).repeat(2).flip(0),  # long runs read whole
    "range": T([20, 21, 22, 23]),
    "matrix": T([[4, 2], [2, 299]]),
    "mask": torch.arange(N) % 3 == 0,
    "one": T([7]),
    "empty": T([], dtype=torch.long),
}
DIRECT = {  # dataset name -> (create_dataset kwargs, whether its rows are read directly)
    "contiguous": ({}, True),
    "chunked": ({"chunks": (7, 3)}, True),
    "chunked_1d": ({"chunks": (16,)}, True),
    "part_width_chunks": ({"chunks": (7, 2)}, False),  # a row is split among chunks
    "gzip": ({"chunks": (16, 3), "compression": "gzip"}, False),
    "int16": ({"dtype": np.int16}, True),
    "bool": ({"dtype": bool}, False),
}


def _data(name, kwargs):
    shape = (N,) if name.endswith("_1d") else (N, 3)
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    return data.astype(kwargs["dtype"]) if "dtype" in kwargs else data


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("direct") / "data.h5")
    with h5py.File(path, "w") as f:
        for name, (kwargs, _) in DIRECT.items():
            f.create_dataset(name, data=_data(name, kwargs), **kwargs)
        f.create_dataset("half_written", shape=(N, 3), dtype=np.float32, chunks=(50, 3), fillvalue=-1)[:50] = 1
        f.create_dataset("nested/bf16", data=torch.arange(N * 2.0).reshape(N, 2).to(torch.bfloat16).view(torch.int16))
        f["nested/bf16"].attrs["tensorbatch_dtype"] = "bfloat16"
    return path


@pytest.mark.parametrize("index", INDICES)
def test_direct_reads_match_torch(path, index):
    idx = INDICES[index]
    with from_h5(path) as ptd:
        got = ptd[idx].to_tensordict()
        for name, (kwargs, direct) in DIRECT.items():
            expected = torch.from_numpy(_data(name, kwargs))
            assert got[name].dtype == expected.dtype, name
            assert torch.equal(got[name], expected[idx]), name
            assert (ptd._shared.direct.get(f"/{name}") is not None) == direct, name
        half = torch.full((N, 3), -1.0)
        half[:50] = 1
        assert torch.equal(got["half_written"], half[idx])  # a chunk never written: HDF5 gives the fill value
        assert torch.equal(got["nested", "bf16"], torch.arange(N * 2.0).reshape(N, 2).to(torch.bfloat16)[idx])


@pytest.mark.parametrize("budget", [1, 12, 40, 1 << 20])
@pytest.mark.parametrize("layout", ["contiguous", "chunked_1d"])
def test_runs_are_read_in_pieces_within_the_budget(path, layout, budget, monkeypatch):
    """Rows close together are read as one run into a buffer of at most ``budget`` bytes (one row at least)."""
    sizes = []
    original = np.empty

    def spy(shape, dtype=float, *args, **kwargs):
        if dtype is np.uint8:
            sizes.append(shape)
        return original(shape, dtype, *args, **kwargs)

    monkeypatch.setattr(_rows.np, "empty", spy)
    idx = torch.arange(10, 100, 2)[torch.randperm(45, generator=torch.Generator().manual_seed(0))]
    with h5py.File(path, "r") as f:
        ds = f[layout]
        direct = _rows.direct_rows(ds, f)
        assert direct is not None
        got = _rows.read_rows(ds, plan_rows(idx, N), budget=budget, direct=direct)
    assert torch.equal(torch.from_numpy(got), torch.from_numpy(_data(layout, {}))[idx])
    assert sizes
    assert all(size <= max(budget, direct.row_bytes) for size in sizes)


def test_not_direct_when_the_file_is_writable(path, tmp_path):
    idx = T([9, 1, 200])
    with from_h5(path, mode="r+") as ptd:
        assert torch.equal(ptd[idx]["contiguous"], torch.from_numpy(_data("contiguous", {}))[idx])
        assert ptd._shared.direct["/contiguous"] is None
    with h5py.File(path, "r+"), from_h5(path) as ptd:  # open for writing elsewhere in this process
        assert ptd._shared.file.id.get_intent() == h5py.h5f.ACC_RDWR
        assert torch.equal(ptd[idx]["contiguous"], torch.from_numpy(_data("contiguous", {}))[idx])
        assert ptd._shared.direct["/contiguous"] is None


def test_userblock_and_core_driver(tmp_path):
    """Addresses count the user block; a file held in memory (``core`` driver) is read through HDF5."""
    data = np.arange(600, dtype=np.float32).reshape(200, 3)
    path = str(tmp_path / "ub.h5")
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("c", data=data)
        f.create_dataset("k", data=data, chunks=(16, 3))
    idx = T([150, 3, 77, 78, 79, 80, 81, 82, 83, 84, 85, 0])
    with from_h5(path) as ptd:
        got = ptd[idx].to_tensordict()
        assert ptd._shared.direct["/c"] is not None
        assert ptd._shared.direct["/k"] is not None
        assert torch.equal(got["c"], torch.from_numpy(data)[idx])
        assert torch.equal(got["k"], got["c"])
    with from_h5(path, file_options={"driver": "core"}) as ptd:
        assert torch.equal(ptd[idx]["k"], torch.from_numpy(data)[idx])
        assert ptd._shared.direct["/k"] is None


def test_closed_file_raises(path):
    ptd = from_h5(path)
    direct = _rows.direct_rows(ptd._entry("contiguous")[0], ptd._shared.file)
    ptd.close()
    with pytest.raises((ValueError, OSError, RuntimeError)):
        direct.read(np.array([1, 5]), None, (2,), 1 << 16)
