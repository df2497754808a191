"""HDF5 files across processes (real subprocesses and DataLoader workers), every test under a time limit.

* A process killed with SIGKILL while ``to_h5``/``from_dict`` with ``atomic=True`` write a large TensorDict
  leaves the previous file intact and readable (the write goes to a temporary sibling renamed into place).
* Unpickling a handle that was opened with mode "w" never truncates the file; it reopens read-write.
* Several reader processes read one file at once; ``torch.utils.data.DataLoader`` with 2 workers (fork and
  spawn) reads one file through a dataset that holds an open PersistentTensorDict.

A hang fails instead of blocking the suite: subprocesses run under ``timeout=``, a watchdog kills the
SIGKILL victim, DataLoaders have ``timeout=``, and an alarm (``_deadline``) fails any test that outlives
``LIMIT_S``.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from ._h5util import SUBJECT, ours_only, quiet, tb

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

# children import the subject this process imported (the checkout under test; -P: not the working directory's)
_HOME = Path(tb.__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_HOME), os.environ.get("PYTHONPATH", "")])}
LIMIT_S = 120


@pytest.fixture(autouse=True)
def _deadline():
    """Fails the test with TimeoutError when it runs past LIMIT_S (SIGALRM: the main thread, POSIX)."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"test ran past {LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _run(code: str, *args: str, timeout: float = 60) -> str:
    """Runs ``code`` in a fresh interpreter (the subject importable); returns its stdout, failing on error."""
    proc = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(code), *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# --------------------------------------------------------------------------------------------------
# SIGKILL during a write
# --------------------------------------------------------------------------------------------------
ROWS = 1_000_000
_SAVER = """
    import importlib, sys, torch
    lib = importlib.import_module(sys.argv[3])
    path, writer = sys.argv[1], sys.argv[2]
    rows = int(sys.argv[4])
    i = 0
    while True:
        data = {f"leaf{k}": torch.full((rows,), float(i)) for k in range(6)}
        data["n"] = {"x": torch.full((rows, 2), float(i)), "y": torch.full((rows,), i, dtype=torch.int64)}
        td = lib.TensorDict(data, batch_size=[rows])
        print(f"saving {i}", flush=True)
        if writer == "to_h5":
            out = td.to_h5(path, atomic=True)
        else:
            out = lib.PersistentTensorDict.from_dict(td, filename=path, atomic=True)
        out.close()
        print(f"saved {i}", flush=True)
        i += 1
"""


def _saved_version(path: Path) -> int:
    """The version every leaf of the file holds (h5py alone, then the subject), failing on a mixed file."""
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert sorted(names) == sorted([f"leaf{k}" for k in range(6)] + ["n/x", "n/y"]), names
        versions = {float(f[name][0].min()) for name in names} | {float(f[name][-1].max()) for name in names}
        assert all(f[name].shape[0] == ROWS for name in names)
    assert len(versions) == 1, f"a half-written file is visible: its leaves hold {sorted(versions)}"
    version = int(versions.pop())
    with tb.from_h5(str(path)) as ptd:
        assert ptd.batch_size == torch.Size([ROWS])
        assert torch.equal(ptd["n", "y"][[0, ROWS // 2, ROWS - 1]], torch.full((3,), version))
        assert float(ptd["leaf5"].sum()) == version * ROWS
    return version


@ours_only  # (atomic=True is tensorbatch's option)
@pytest.mark.slow
@pytest.mark.parametrize("writer", ["to_h5", "from_dict"])
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05])
def test_sigkill_mid_write_leaves_previous_file_intact(tmp_path, writer, delay):
    path = tmp_path / "data.h5"
    args = [str(path), writer, SUBJECT, str(ROWS)]
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", textwrap.dedent(_SAVER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    watchdog = threading.Timer(90, proc.kill)  # a stuck child ends the read loop below (EOF)
    watchdog.start()
    seen_saved, killed = -1, False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # let one write complete, then kill during the next one
            if line.startswith("saved"):
                seen_saved = int(line.split()[1])
            elif line.startswith("saving") and seen_saved >= 0:
                time.sleep(delay)
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
                break
    finally:
        watchdog.cancel()
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert killed, f"the writer never completed a write: {err[-2000:]}"
    assert _saved_version(path) >= seen_saved


# --------------------------------------------------------------------------------------------------
# Pickling never truncates
# --------------------------------------------------------------------------------------------------
def _written_file(path: Path) -> bytes:
    """A handle opened "w", filled and pickled while open; returns the pickle (the handle is closed)."""
    ptd = tb.PersistentTensorDict(filename=str(path), batch_size=[3], mode="w")
    ptd["a"] = torch.arange(3.0)
    ptd["n", "b"] = torch.ones(3, 2, dtype=torch.int64)
    blob = pickle.dumps(ptd)
    ptd.close()
    return blob


def test_unpickling_a_w_handle_keeps_the_file(tmp_path):
    path = tmp_path / "data.h5"
    blob = _written_file(path)
    before = path.read_bytes()
    ptd = pickle.loads(blob)
    try:
        assert torch.equal(ptd["a"], torch.arange(3.0))
        assert torch.equal(ptd["n", "b"], torch.ones(3, 2, dtype=torch.int64))
        ptd["a"][:] = 0  # a copy: the file keeps its values
        ptd["c"] = torch.full((3,), 5.0)  # it was writable: it reopens read-write ("r+", never "w")
    finally:
        ptd.close()
    assert len(path.read_bytes()) >= len(before)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["a"][()], np.arange(3.0, dtype=np.float32))
        np.testing.assert_array_equal(f["c"][()], np.full(3, 5.0, dtype=np.float32))
        assert sorted(f.keys()) == ["a", "c", "n"]
    ptd = pickle.loads(blob)  # once more: the key added after the pickle is still there
    try:
        assert sorted(ptd.keys()) == ["a", "c", "n"]
    finally:
        ptd.close()


def test_unpickling_a_w_handle_in_another_process_keeps_the_file(tmp_path):
    path = tmp_path / "data.h5"
    blob_path = tmp_path / "handle.pkl"
    blob_path.write_bytes(_written_file(path))
    out = _run(
        """
        import pickle, sys, torch
        ptd = pickle.loads(open(sys.argv[1], "rb").read())
        print(ptd["a"].tolist(), ptd["n", "b"].sum().item())
        ptd.close()
    """,
        str(blob_path),
    )
    assert out.split("\n")[0] == "[0.0, 1.0, 2.0] 6"
    with tb.from_h5(str(path)) as ptd:
        assert torch.equal(ptd["a"], torch.arange(3.0))


def test_unpickling_a_read_only_handle_stays_read_only(tmp_path):
    path = tmp_path / "data.h5"
    _written_file(path)
    with tb.from_h5(str(path)) as ptd:
        blob = pickle.dumps(ptd)
    ptd = pickle.loads(blob)
    try:
        assert torch.equal(ptd["a"], torch.arange(3.0))
        with pytest.raises(Exception) as info:  # noqa: PT011 - the error type is the backend's; it names the file
            ptd["a"] = torch.zeros(3)
        assert "data.h5" in str(info.value) + "".join(getattr(info.value, "__notes__", []))
    finally:
        ptd.close()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["a"][()], np.arange(3.0, dtype=np.float32))


# --------------------------------------------------------------------------------------------------
# Several readers
# --------------------------------------------------------------------------------------------------
N = 1000


def _dataset_file(path: Path) -> Path:
    data = {"a": torch.arange(N * 4, dtype=torch.float32).reshape(N, 4), "n": {"c": torch.arange(N, dtype=torch.int64)}}
    quiet(lambda: tb.PersistentTensorDict.from_dict(tb.TensorDict(data, batch_size=[N]), filename=str(path))).close()
    return path


_READER = """
    import importlib, sys, torch
    lib = importlib.import_module(sys.argv[2])
    seed = int(sys.argv[3])
    rows = torch.randperm(1000, generator=torch.Generator().manual_seed(seed))[:100]
    ptd = lib.from_h5(sys.argv[1])
    total = 0
    for _ in range(20):
        total += int(ptd[rows]["n", "c"].sum()) + int(ptd["a"][rows.sort().values].sum())
    print(total, flush=True)
    ptd.close()
"""


def test_several_reader_processes(tmp_path):
    path = _dataset_file(tmp_path / "data.h5")
    with tb.from_h5(str(path)) as held:  # the parent keeps a read handle open meanwhile
        procs = [
            subprocess.Popen(
                [sys.executable, "-P", "-c", textwrap.dedent(_READER), str(path), SUBJECT, str(seed)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            for seed in range(3)
        ]
        outs = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                proc.kill()
            assert proc.returncode == 0, err[-3000:]
            outs.append(int(out))
        assert held["n", "c"][-1] == N - 1
    a = torch.arange(N * 4, dtype=torch.float32).reshape(N, 4)
    for seed, total in enumerate(outs):
        rows = torch.randperm(N, generator=torch.Generator().manual_seed(seed))[:100]
        assert total == 20 * (int(rows.sum()) + int(a[rows].sum()))


_HOLD_OPEN = """
    import importlib, sys, time
    lib = importlib.import_module(sys.argv[2])
    ptd = lib.from_h5(sys.argv[1], mode="r+")
    print("open", flush=True)
    sys.stdin.readline()  # holds the file open for writing until the parent says
    ptd.close()
"""


@ours_only
def test_file_options_reach_h5py_locking(tmp_path):
    """Another process holds the file open for writing: HDF5's file lock refuses a reader, naming the file;
    ``file_options={"locking": False}`` (an h5py.File option, apart from the dataset options) lets it read."""
    path = _dataset_file(tmp_path / "data.h5")
    holder = subprocess.Popen(
        [sys.executable, "-P", "-c", textwrap.dedent(_HOLD_OPEN), str(path), SUBJECT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "open", holder.stderr.read() if holder.poll() else ""
        with pytest.raises(Exception) as info:  # noqa: PT011 - h5py's OSError, with the file named
            tb.from_h5(str(path))
        assert "data.h5" in str(info.value) + "".join(getattr(info.value, "__notes__", []))
        with tb.from_h5(str(path), file_options={"locking": False}) as ptd:
            assert torch.equal(ptd["n", "c"][[0, N - 1]], torch.tensor([0, N - 1]))
        with pytest.raises(TypeError, match="file_options"):
            tb.from_h5(str(path), locking=False)  # a file option among the dataset options
        holder.stdin.write("done\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    assert holder.returncode == 0


# --------------------------------------------------------------------------------------------------
# DataLoader workers
# --------------------------------------------------------------------------------------------------
class _Rows(Dataset):
    """Row ``i`` of an open PersistentTensorDict (pickled to spawn workers, inherited by fork workers)."""

    def __init__(self, ptd: Any) -> None:
        self.ptd = ptd

    def __len__(self) -> int:
        return int(self.ptd.batch_size[0])

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor, int]:
        row = self.ptd[i]
        return i, row["a"], row["n", "c"], os.getpid()


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_two_workers_read_one_file(tmp_path, context):
    path = _dataset_file(tmp_path / "data.h5")
    with tb.from_h5(str(path)) as ptd:
        loader = DataLoader(
            _Rows(ptd),
            batch_size=50,
            shuffle=True,
            num_workers=2,
            multiprocessing_context=context,
            timeout=60,
            generator=torch.Generator().manual_seed(0),
        )
        seen, pids = [], set()
        for idx, a, c, pid in loader:
            assert torch.equal(c, idx)
            assert torch.equal(a, (idx[:, None] * 4 + torch.arange(4)).float())
            seen += idx.tolist()
            pids |= set(pid.tolist())
        assert sorted(seen) == list(range(N))
        assert len(pids) == 2
        assert os.getpid() not in pids
        assert torch.equal(ptd["n", "c"], torch.arange(N))  # the parent's handle still reads
