"""scripts/test.sh, the command CI runs: its phases, their exit codes and the arguments it passes on.

The script runs here against a stand-in ``.venv/bin/python`` (a shell script that logs its arguments and exits
with the code a test chooses for each phase), in a copy of the repository layout, so no install happens.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../../calls.log"
case "$*" in
    *"-m ruff "*) exit "${FAKE_RUFF_RC:-0}" ;;
    *"-m mypy "*) exit "${FAKE_MYPY_RC:-0}" ;;
    *"--doctest-modules"*) exit "${FAKE_DOCTEST_RC:-0}" ;;
    *"-m pytest tests/compile"*) exit "${FAKE_NEWEST_RC:-0}" ;;
    *"-m pytest tests"*) exit "${FAKE_TESTS_RC:-0}" ;;
esac
exit 0
"""


def _run(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None, **rcs: int
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    for venv in (".venv", ".venv-newest"):
        python = tmp_path / venv / "bin" / "python"
        python.parent.mkdir(parents=True, exist_ok=True)
        python.write_text(STAND_IN)
        python.chmod(0o755)
    # (CI runs this test with CI=true: the newest-torch phase is off unless a test asks for it)
    env = {
        **os.environ,
        "TB_NEWEST_TORCH": "0",
        **(env_extra or {}),
        **{f"FAKE_{k.upper()}_RC": str(v) for k, v in rcs.items()},
    }
    proc = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    return proc, (tmp_path / "calls.log").read_text().splitlines()


def test_phases_in_order_with_durations_and_the_extra_args_reach_pytest(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, "-m", "not slow", "-x")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "takes about" in proc.stdout.splitlines()[0]
    ends = re.findall(r"^<== (\w+): (\d+)s \(exit (\d+)\)$", proc.stdout, flags=re.M)
    assert [name for name, _, _ in ends] == ["venv", "installs", "ruff", "mypy", "tests", "doctests"]
    assert all(rc == "0" for _, _, rc in ends)
    assert "-m ruff check tensorbatch tests benchmarks examples tools scripts" in calls
    assert "-m ruff format --check tensorbatch tests benchmarks examples tools scripts" in calls
    assert "-m mypy tensorbatch" in calls
    assert "-m pytest tests -n 2 -m not slow -x" in calls
    assert "-m pytest --doctest-modules tensorbatch" in calls


@pytest.mark.parametrize(("phase", "rc"), [("tests", 5), ("tests", 1), ("ruff", 1), ("mypy", 1), ("doctest", 1)])
def test_a_failing_phase_fails_the_run_and_the_others_still_run(tmp_path: Path, phase: str, rc: int) -> None:
    proc, calls = _run(tmp_path, **{phase: rc})
    assert proc.returncode == rc
    assert len([c for c in calls if c.startswith(("-m ruff", "-m mypy", "-m pytest"))]) == 5
    assert re.search(rf"^\s+{phase}\w*\s+\d+s\s+exit {rc}$", proc.stdout, flags=re.M), proc.stdout


def test_ci_runs_the_readme_command_and_the_test_extra_installs_the_linters() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == ["bash scripts/test.sh"]
    set_up = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert "bash scripts/test.sh " in set_up and 'bash scripts/test.sh -m "not slow"' in set_up
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert {re.split(r"[<>=]", e)[0] for e in extras} >= {"pytest", "ruff", "mypy"}


@pytest.mark.parametrize("env_extra", [{"CI": "true", "TB_NEWEST_TORCH": ""}, {"CI": "", "TB_NEWEST_TORCH": "1"}])
@pytest.mark.parametrize("rc", [0, 1])
def test_newest_torch_phase_runs_on_ci_and_its_failure_fails_the_run(
    tmp_path: Path, env_extra: dict[str, str], rc: int
) -> None:
    proc, calls = _run(tmp_path, env_extra=env_extra, newest=rc)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    ends = re.findall(r"^<== (\w+): (\d+)s \(exit (\d+)\)$", proc.stdout, flags=re.M)
    assert [name for name, _, _ in ends][-2:] == ["doctests", "newest"] and ends[-1][2] == str(rc)
    assert "-m pip install --disable-pip-version-check -q torch==2.14.1 numpy pytest>=8" in calls
    assert "-m pip install --disable-pip-version-check -q --no-deps -e ." in calls
    assert calls[-1] == "-m pytest tests/compile tests/test_vmap.py -q -x -p no:cacheprovider"
    assert re.search(rf"^\s+newest\s+\d+s\s+exit {rc}$", proc.stdout, flags=re.M), proc.stdout


def test_newest_torch_phase_is_off_outside_ci(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, env_extra={"CI": "", "TB_NEWEST_TORCH": ""})
    assert proc.returncode == 0 and "newest" not in proc.stdout
    assert not [c for c in calls if "2.14.1" in c or "tests/compile" in c]
