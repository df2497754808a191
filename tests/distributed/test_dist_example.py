"""The two-process example of docs/distributed.md runs under torchrun (gloo; nccl with two GPUs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _dist_group import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "distributed_example.py"


def _torchrun() -> list[str]:
    """The venv's torchrun next to this Python, else the same launcher as a module."""
    script = Path(sys.executable).with_name("torchrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _run(*extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    cmd = [
        *_torchrun(),
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(EXAMPLE),
        *extra,
    ]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150, check=False)
    except subprocess.TimeoutExpired as err:  # a hang fails the test (subprocess.run killed the launcher)
        pytest.fail(f"the example hung: {err.stdout}\n{err.stderr}")


def _check(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "rank 1 received ['obs', ('next', 'reward')]" in out, out
    for rank in (0, 1):
        assert f"rank {rank}: all_reduce sum = [3.0, 3.0]" in out, out
        assert f"rank {rank}: " in out, out
        assert "structure mismatch at key 'a'" in out, out
    assert "the sender (rank 0) has float32 [3], this receiver has float32 [5]" in out, out
    assert "rank 1 got a = [0.0, 1.0, 2.0]" in out, out


def test_example_runs_under_torchrun():
    _check(_run())


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nccl needs one GPU per process (2 GPUs)")
def test_example_runs_on_nccl():  # pragma: no cover (no multi-GPU machine in CI)
    _check(_run("--backend", "nccl"))
