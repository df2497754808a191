"""Memory-mapped TensorDicts across processes: crash-safe saves and shared writes (real subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tensorbatch import TensorDict

_SAVER = textwrap.dedent(
    """
    import sys, torch
    from tensorbatch import TensorDict
    prefix = sys.argv[1]
    i = 0
    while True:
        td = TensorDict({f"leaf{k}": torch.full((1_000_000,), float(i)) for k in range(8)}, batch_size=[])
        print(f"saving {i}", flush=True)
        td.memmap(prefix)
        print(f"saved {i}", flush=True)
        i += 1
    """
)


def _check_intact(prefix: Path) -> int | None:
    """The saved version number, after checking every leaf holds it (None when nothing is there)."""
    if not prefix.exists():
        return None
    td = TensorDict.load_memmap(prefix)
    values = {float(td[k][0]) for k in td.keys()} | {float(td[k][-1]) for k in td.keys()}
    assert len(td.keys()) == 8, f"a save with {len(td.keys())} of 8 leaves is visible"
    assert len(values) == 1, f"a half-written save is visible: leaves hold {sorted(values)}"
    return int(values.pop())


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06])
def test_sigkill_mid_save_leaves_previous_save_or_nothing(tmp_path, delay):
    prefix = tmp_path / "save"
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, str(prefix)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen_saved = -1
        for line in proc.stdout:  # let one save complete, then kill during the next one
            if line.startswith("saved"):
                seen_saved = int(line.split()[1])
            if line.startswith("saving") and seen_saved >= 0:
                time.sleep(delay)
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait()
    version = _check_intact(prefix)
    assert version is None or version >= seen_saved
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "save"]
    assert all(name.startswith(".save.") for name in leftovers), leftovers  # only hidden temporaries


def _worker_writes(td: TensorDict) -> None:
    td["a"][0] = 42.0
    td["n", "b"][1] = -1


@pytest.mark.slow
def test_memmapped_td_shared_with_a_worker_process(tmp_path):
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(3, dtype=torch.int64)}}, [3]).memmap(tmp_path / "m")
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_worker_writes, args=(td,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert td["a"].tolist() == [42.0, 0.0, 0.0]  # the parent sees the worker's writes (same files)
    assert td["n", "b"].tolist() == [0, -1, 0]
    assert TensorDict.load_memmap(tmp_path / "m")["a"][0] == 42.0


@pytest.mark.slow
def test_shared_memory_td_shared_with_a_worker_process():
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(3, dtype=torch.int64)}}, [3]).share_memory_()
    assert td.is_shared()
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_worker_writes, args=(td,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert td["a"].tolist() == [42.0, 0.0, 0.0]
    assert td["n", "b"].tolist() == [0, -1, 0]


def _double(td: TensorDict) -> TensorDict:
    return td.apply(lambda x: x * 2)


def _row_sums(td: TensorDict) -> TensorDict:
    return TensorDict({"s": td["a"].sum(-1)}, batch_size=td.batch_size)


@pytest.mark.slow
def test_map_over_a_memmapped_td_into_a_memmapped_out(tmp_path):
    td = TensorDict({"a": torch.arange(40.0).view(10, 4)}, [10]).memmap(tmp_path / "in")
    out = TensorDict({"s": torch.zeros(10)}, [10]).memmap_like(tmp_path / "out")
    result = td.map(_row_sums, num_workers=2, chunksize=3, out=out, mp_start_method="spawn")
    assert result is out
    assert out["s"].tolist() == torch.arange(40.0).view(10, 4).sum(-1).tolist()  # written by the workers
    assert TensorDict.load_memmap(tmp_path / "out")["s"][9] == 36 + 37 + 38 + 39


@pytest.mark.slow
def test_map_joins_results_and_map_iter_yields_them(tmp_path):
    td = TensorDict({"a": torch.arange(12.0).view(6, 2)}, [6]).memmap(tmp_path / "in")
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        joined = td.map(_double, chunksize=2, pool=pool)
        assert torch.equal(joined["a"], torch.arange(12.0).view(6, 2) * 2)
        stacked = td.map(_double, chunksize=0, pool=pool)
        assert stacked.batch_size == torch.Size([6])
        pieces = list(td.map_iter(_double, num_chunks=3, pool=pool))
    assert [p.batch_size[0] for p in pieces] == [2, 2, 2]
    assert torch.equal(torch.cat([p["a"] for p in pieces]), torch.arange(12.0).view(6, 2) * 2)
    with pytest.raises(ValueError, match="chunksize or num_chunks"):
        td.map(_double, chunksize=2, num_chunks=2)


@pytest.mark.slow
def test_map_with_a_progress_bar(tmp_path, capsys):
    pytest.importorskip("tqdm", reason="pbar=True needs tqdm (in the test extra)")
    td = TensorDict({"a": torch.arange(8.0)}, [8]).memmap(tmp_path / "in")
    out = td.map(_double, num_workers=2, num_chunks=4, pbar=True, mp_start_method="spawn")
    assert out["a"].tolist() == [2.0 * i for i in range(8)]
    assert "4/4" in capsys.readouterr().err  # tqdm's counter reached every chunk
