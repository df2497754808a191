"""The suite's own rules for collecting tests (pyproject.toml, ``[tool.pytest.ini_options]``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_an_empty_parametrization_fails_collection(tmp_path):
    (tmp_path / "test_empty.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('x', [n for n in range(3) if n > 5])\n"
        "def test_never(x):\n"
        "    assert False\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(PYPROJECT),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_empty.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0, run.stdout
    assert "Empty parameter set in 'test_never'" in run.stdout + run.stderr
