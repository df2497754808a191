"""The package type-checks under mypy --strict (STYLE.md R12), with the configuration in pyproject.toml."""

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_strict_is_clean():
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (it is in the test extra)")
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), str(ROOT / "tensorbatch")])
    assert status == 0, f"mypy found problems:\n{stdout}{stderr}"
    assert "Success" in stdout


@pytest.mark.slow
def test_base_module_itself_type_checks(tmp_path):
    """``base.pyi`` (generated) hides ``base.py`` from mypy: check the implementation without the stub too.

    Other modules' errors in that run are expected (they use methods installed at import time, which only
    the stub declares), so only ``base.py``'s lines count.
    """
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (it is in the test extra)")
    package = tmp_path / "tensorbatch"
    shutil.copytree(ROOT / "tensorbatch", package, ignore=shutil.ignore_patterns("*.pyi", "__pycache__"))
    stdout, stderr, _ = api.run(["--strict", "--python-version", "3.11", "--cache-dir", os.devnull, str(package)])
    base = os.path.join("tensorbatch", "base.py")
    problems = [line for line in stdout.splitlines() if line.split(":")[0].endswith(base)]
    assert not problems, "mypy found problems in base.py:\n" + "\n".join(problems)
    assert "checked" in stdout or "Success" in stdout, stdout + stderr
