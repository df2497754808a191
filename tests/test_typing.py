"""The package type-checks under mypy --strict (STYLE.md R12), with the configuration in pyproject.toml."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_strict_is_clean():
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (it is in the test extra)")
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), str(ROOT / "tensorbatch")])
    assert status == 0, f"mypy found problems:\n{stdout}{stderr}"
    assert "Success" in stdout
