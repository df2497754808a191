"""PersistentTensorDict on the stored layer: the class, the registration, and reads through the shared paths."""

from __future__ import annotations

import pytest
import torch

import tensorbatch as tb
from tensorbatch.persistent import PersistentTensorDict, ReadOnlyError
from tensorbatch.stored import ReadOnlyStorageError, StoredTensorDict
from tensorbatch.stored._register import STORAGES

pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")


def _content() -> tb.TensorDict:
    return tb.TensorDict(
        {"obs": torch.arange(80.0).view(10, 8), "reward": torch.arange(10.0), "n": {"a": torch.arange(10)}}, [10]
    )


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "data.h5")


def test_a_stored_tensordict_registered_as_h5(path):
    assert "h5" in STORAGES
    with _content().to_h5(path) as data:
        assert isinstance(data, StoredTensorDict)
        assert isinstance(data["n"], PersistentTensorDict)
        assert issubclass(ReadOnlyError, ReadOnlyStorageError)


@pytest.mark.parametrize("index", [3, -1, slice(2, 7), slice(None, None, 3), [7, 1, 7]])
def test_rows_of_one_dim_leaves_of_a_read_only_file(path, index):
    """Ints and slices of 1-d datasets take h5py's reader of a read-only file; the results are torch's."""
    _content().to_h5(path).close()
    with tb.from_h5(path) as data:
        got = data[index].to_tensordict()
        want = _content()[index]
        assert got.batch_size == want.batch_size
        assert (got == want).all()
        assert data.get_at("reward", index).tolist() == want["reward"].tolist()


def test_reads_see_writes_through_a_shallow_copy(path):
    with _content().to_h5(path) as data:
        copy = data.clone(False)
        assert data[2:4].to_tensordict()["reward"].tolist() == [2.0, 3.0]  # (the row layout is kept)
        copy["extra"] = torch.ones(10)
        del copy["obs"]
        rows = data[2:4].to_tensordict()
        assert sorted(rows.keys()) == ["extra", "n", "reward"]
        assert rows["extra"].tolist() == [1.0, 1.0]


def test_device_cast_on_every_read_path(path):
    _content().to_h5(path).close()
    with PersistentTensorDict(filename=path, device="meta") as data:
        assert data.device == torch.device("meta")
        assert data["obs"].device.type == "meta"
        assert data[[1, 2]].to_tensordict()["n", "a"].device.type == "meta"
        assert data[1:3]["reward"].device.type == "meta"


def test_batch_size_and_names_of_a_read_only_file_are_kept_in_memory(path):
    """As tensordict: the file is left as it is, the handle takes them (zarr refuses: tests/stored)."""
    tb.TensorDict({"a": torch.zeros(4, 3), "n": {"b": torch.zeros(4, 3, 2)}}, [4]).to_h5(path).close()
    with tb.from_h5(path) as data:
        data.batch_size = [4, 3]
        data.names = ["t", None]
        assert data.batch_size == torch.Size([4, 3])
        assert data.names == ["t", None]
        assert data["n"].batch_size == torch.Size([4, 3])
    with tb.from_h5(path) as data:
        assert data.batch_size == torch.Size([4])
        assert data.names == [None]
