"""Run a Python script in a fresh interpreter (the switch changes ``sys.modules``; the suite imports the real
tensordict), with this checkout first on the path and a time limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_python(
    code: str | None = None, *, script: Path | None = None, args: tuple[str, ...] = (), timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) or ``script`` with ``args``; the result has ``stdout``/``stderr``/``returncode``."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
    )
    argv = [sys.executable, *(["-c", textwrap.dedent(code)] if code is not None else [str(script)]), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))


def run_scripts_in_parallel(
    runs: dict[str, tuple[Path, tuple[str, ...]]], timeout: float = 240
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run several scripts at once (CI has two cores and pytest uses one); each result by its name."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
    )
    procs = {
        name: (
            argv := [sys.executable, str(script), *args],
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)),
        )
        for name, (script, args) in runs.items()
    }
    results = {}
    for name, (argv, proc) in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for _, other in procs.values():
                other.kill()
            raise
        results[name] = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    return results


def check_output(code: str, timeout: float = 120) -> str:
    """Run ``code``; fail with its stderr when it fails; its stdout."""
    done = run_python(code, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout
