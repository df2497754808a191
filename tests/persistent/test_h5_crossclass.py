"""The cross-class page's H5 rows (shared/seeds/crossclass-compatibility.txt): TensorClass and TypedTensorDict
over a PersistentTensorDict, one test per row (Build, Read, Write, Index, Clone, Stack, Iter, Update), with
the page's types: ``MyTC(a, b)`` over ``PersistentTensorDict.from_dict(td, filename=...)`` and
``State(x, y)`` over ``PersistentTensorDict.from_h5(...)``.

The backend stays live: writes through the wrapper reach the file, which is checked by reading it back with
h5py alone. ``TB_DIFF_SUBJECT=tensordict`` runs the same tests against the reference (see ``_h5util``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from ._h5util import ours_only, tb

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")


class MyTC(tb.TensorClass):
    a: Tensor
    b: Tensor


class State(tb.TypedTensorDict):
    x: Tensor
    y: Tensor


A = torch.arange(12.0).reshape(4, 3)
B = -torch.arange(20.0).reshape(4, 5)


def flush(h5: Any) -> None:
    """``h5.flush()`` (the reference has none: its h5py file is flushed instead, for the self-check)."""
    if hasattr(h5, "flush"):
        h5.flush()
    else:
        h5.file.flush()


def on_disk(path: Path, key: str) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[key][()]


@pytest.fixture
def tc_h5(tmp_path):
    """The page's ``tc_h5 = MyTC.from_tensordict(PersistentTensorDict.from_dict(td, filename="data.h5"))``."""
    td = tb.TensorDict(a=A.clone(), b=B.clone(), batch_size=[4])
    h5 = tb.PersistentTensorDict.from_dict(td, filename=str(tmp_path / "data.h5"))
    yield MyTC.from_tensordict(h5), h5, tmp_path / "data.h5"
    h5.close()


@pytest.fixture
def state_h5(tmp_path):
    """The page's ``State.from_tensordict(PersistentTensorDict.from_h5("data.h5"))``, opened read-write."""
    td = tb.TensorDict(x=A.clone(), y=B.clone(), batch_size=[4])
    tb.PersistentTensorDict.from_dict(td, filename=str(tmp_path / "data.h5")).close()
    h5 = tb.PersistentTensorDict.from_h5(str(tmp_path / "data.h5"), mode="r+")
    yield State.from_tensordict(h5), h5, tmp_path / "data.h5"
    h5.close()


# --------------------------------------------------------------------------------------------------
# TensorClass over H5
# --------------------------------------------------------------------------------------------------
def test_tc_build(tc_h5):
    tc, h5, _ = tc_h5
    assert type(tc) is MyTC
    assert tc._tensordict is h5  # wraps the backend itself, no copy
    assert tc.batch_size == torch.Size([4])


def test_tc_read(tc_h5):
    tc, _, _ = tc_h5
    assert tc.a.shape == torch.Size([4, 3])  # reads from HDF5
    assert torch.equal(tc.a, A)
    assert torch.equal(tc.b, B)
    assert torch.equal(tc.get("b"), B)
    assert tc.a.dtype == torch.float32


def test_tc_write(tc_h5):
    tc, h5, path = tc_h5
    tc.a = torch.zeros(4, 3)
    tc.set_("b", torch.ones(4, 5))
    flush(h5)
    np.testing.assert_array_equal(on_disk(path, "a"), np.zeros((4, 3), np.float32))
    np.testing.assert_array_equal(on_disk(path, "b"), np.ones((4, 5), np.float32))
    assert torch.equal(tc.a, torch.zeros(4, 3))


def test_tc_index(tc_h5):
    tc, h5, path = tc_h5
    part = tc[1:3]
    assert type(part) is MyTC
    assert part.batch_size == torch.Size([2])
    assert torch.equal(part.a, A[1:3])
    assert torch.equal(tc[[3, 0]].b, B[[3, 0]])
    assert torch.equal(tc[2].a, A[2])
    assert tc[2].batch_size == torch.Size([])
    tc[[0, 2]] = MyTC(a=torch.ones(2, 3), b=torch.ones(2, 5), batch_size=[2])
    flush(h5)
    expected = A.clone()
    expected[[0, 2]] = 1
    np.testing.assert_array_equal(on_disk(path, "a"), expected.numpy())


@ours_only
def test_tc_index_write_unsorted_rows(tc_h5):
    tc, h5, path = tc_h5
    tc[[2, 0, 2]] = MyTC(a=torch.arange(9.0).reshape(3, 3), b=torch.zeros(3, 5), batch_size=[3])
    flush(h5)
    expected = A.clone()
    expected[0], expected[2] = torch.arange(3.0, 6.0), torch.arange(6.0, 9.0)  # the last repeat wins
    np.testing.assert_array_equal(on_disk(path, "a"), expected.numpy())


def test_tc_clone(tc_h5):
    tc, _, path = tc_h5
    copy = tc.clone()
    assert type(copy) is MyTC
    assert copy.batch_size == torch.Size([4])
    assert torch.equal(copy.a, A)
    assert torch.equal(copy.b, B)
    copy.a = copy.a + 5  # the clone is independent of the file
    assert torch.equal(copy.a, A + 5)
    np.testing.assert_array_equal(on_disk(path, "a"), A.numpy())
    assert torch.equal(tc.a, A)


def test_tc_stack(tc_h5):
    tc, _, _ = tc_h5
    stacked = torch.stack([tc, tc[[3, 2, 1, 0]]], dim=0)
    assert type(stacked) is MyTC
    assert stacked.batch_size == torch.Size([2, 4])
    assert torch.equal(stacked.a, torch.stack([A, A.flip(0)]))
    assert torch.equal(stacked.b[1], B.flip(0))
    cat = torch.cat([tc, tc], dim=0)
    assert type(cat) is MyTC
    assert torch.equal(cat.a, torch.cat([A, A]))


def test_tc_iter(tc_h5):
    tc, _, _ = tc_h5
    rows = list(tc)
    assert len(rows) == 4
    for i, row in enumerate(rows):
        assert type(row) is MyTC
        assert row.batch_size == torch.Size([])
        assert torch.equal(row.a, A[i])
        assert torch.equal(row.b, B[i])


def test_tc_update(tc_h5):
    tc, h5, path = tc_h5
    tc.update({"a": torch.full((4, 3), 2.0)})
    flush(h5)
    np.testing.assert_array_equal(on_disk(path, "a"), np.full((4, 3), 2.0, np.float32))
    tc.update(MyTC(a=torch.full((4, 3), 3.0), b=torch.ones(4, 5), batch_size=[4]))
    flush(h5)
    np.testing.assert_array_equal(on_disk(path, "a"), np.full((4, 3), 3.0, np.float32))
    np.testing.assert_array_equal(on_disk(path, "b"), np.ones((4, 5), np.float32))
    assert torch.equal(tc.b, torch.ones(4, 5))


# --------------------------------------------------------------------------------------------------
# TypedTensorDict over H5
# --------------------------------------------------------------------------------------------------
def test_ttd_build(state_h5):
    state, h5, path = state_h5
    assert type(state) is State
    assert isinstance(state, tb.TensorDictBase)
    assert state._source is h5
    assert state.batch_size == torch.Size([4])
    with tb.PersistentTensorDict.from_h5(str(path)) as read_only:  # the page opens the file read-only
        assert State.from_tensordict(read_only).x.shape == torch.Size([4, 3])


def test_ttd_read(state_h5):
    state, _, _ = state_h5
    assert state.x.shape == torch.Size([4, 3])  # reads from HDF5
    assert torch.equal(state.x, A)
    assert torch.equal(state["y"], B)
    assert torch.equal(state.get("x"), A)
    assert sorted(state.keys()) == ["x", "y"]


def test_ttd_write(state_h5):
    state, h5, path = state_h5
    state.x = torch.ones(4, 3)  # writes to the backend
    assert (h5["x"] == 1).all()
    state["y"] = torch.zeros(4, 5)
    flush(h5)
    np.testing.assert_array_equal(on_disk(path, "x"), np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(on_disk(path, "y"), np.zeros((4, 5), np.float32))


def test_ttd_index(state_h5):
    state, h5, path = state_h5
    part = state[1:3]
    assert type(part) is State
    assert part.batch_size == torch.Size([2])
    assert torch.equal(part.x, A[1:3])
    assert torch.equal(state[[3, 0]].y, B[[3, 0]])
    assert type(state[0]) is State
    assert torch.equal(state[0].x, A[0])
    state[[1, 3]] = State(x=torch.zeros(2, 3), y=torch.zeros(2, 5), batch_size=[2])
    flush(h5)
    expected = A.clone()
    expected[[1, 3]] = 0
    np.testing.assert_array_equal(on_disk(path, "x"), expected.numpy())


@ours_only
def test_ttd_index_write_unsorted_rows(state_h5):
    state, h5, path = state_h5
    state[[3, 1, 1]] = State(x=torch.arange(9.0).reshape(3, 3), y=torch.zeros(3, 5), batch_size=[3])
    flush(h5)
    expected = A.clone()
    expected[3], expected[1] = torch.arange(3.0), torch.arange(6.0, 9.0)  # the last repeat wins
    np.testing.assert_array_equal(on_disk(path, "x"), expected.numpy())


def test_ttd_clone(state_h5):
    state, _, path = state_h5
    copy = state.clone()
    assert type(copy) is State
    assert copy.batch_size == torch.Size([4])
    assert torch.equal(copy.x, A)
    assert torch.equal(copy.y, B)
    copy.x = torch.full((4, 3), 9.0)  # the clone is independent of the file
    np.testing.assert_array_equal(on_disk(path, "x"), A.numpy())
    assert torch.equal(state.x, A)


def test_ttd_stack(state_h5):
    state, _, _ = state_h5
    stacked = torch.stack([state, state[[3, 2, 1, 0]]], dim=0)  # dense stacking keeps the subclass
    assert type(stacked) is State
    assert stacked.batch_size == torch.Size([2, 4])
    assert torch.equal(stacked.x, torch.stack([A, A.flip(0)]))
    assert torch.equal(stacked["y"][1], B.flip(0))


def test_ttd_iter(state_h5):
    state, _, _ = state_h5
    rows = list(state)
    assert len(rows) == 4
    for i, row in enumerate(rows):
        assert type(row) is State
        assert row.batch_size == torch.Size([])
        assert torch.equal(row.x, A[i])
        assert torch.equal(row.y, B[i])


def test_ttd_update(state_h5):
    state, h5, path = state_h5
    state.update({"x": torch.full((4, 3), 2.0)})
    state.update_({"y": torch.full((4, 5), 2.0)})
    flush(h5)
    np.testing.assert_array_equal(on_disk(path, "x"), np.full((4, 3), 2.0, np.float32))
    np.testing.assert_array_equal(on_disk(path, "y"), np.full((4, 5), 2.0, np.float32))
    state.update(State(x=torch.full((4, 3), 3.0), y=torch.ones(4, 5), batch_size=[4]))
    assert torch.equal(h5["x"], torch.full((4, 3), 3.0))
    assert torch.equal(state.y, torch.ones(4, 5))
