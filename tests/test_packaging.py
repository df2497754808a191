"""Packaging: one version source, and a wheel and sdist that build and that ``twine check`` accepts.

The build tests need ``build`` and ``hatchling`` (the ``test`` extra installs them; they skip without), and build
offline (``--no-isolation``: the installed hatchling, nothing fetched). ``twine check`` needs ``twine``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import tensorbatch

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# PEP 440's public version form (release, optional pre/post/dev parts)
PEP440 = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[test]' installs them)")


def test_version_is_written_once():
    project = PYPROJECT["project"]
    assert "version" not in project, "pyproject.toml: the version lives in tensorbatch/__init__.py only"
    assert "version" in project["dynamic"]
    assert PYPROJECT["tool"]["hatch"]["version"] == {"path": "tensorbatch/__init__.py"}
    source = (ROOT / "tensorbatch" / "__init__.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "([^"]+)"$', source, flags=re.M) == [tensorbatch.__version__]
    assert PEP440.match(tensorbatch.__version__), tensorbatch.__version__


def test_version_matches_installed_metadata():
    try:
        installed = importlib.metadata.version("tensorbatch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tensorbatch is not installed (imported from the source tree)")
    assert tensorbatch.__version__ == installed, "reinstall (pip install -e .) after changing __version__"


def test_license_and_project_files():
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md"):
        assert (ROOT / name).is_file(), name
    assert PYPROJECT["project"]["readme"] == "README.md"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it, as ``python -m build`` makes them (offline)."""
    _need("build", "hatchling")
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


def test_wheel_contents(dist: Path):
    wheel = _one(dist, f"tensorbatch-{tensorbatch.__version__}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"tensorbatch-{tensorbatch.__version__}.dist-info/METADATA").decode()
    assert {"tensorbatch/py.typed", "tensorbatch/base.pyi", "tensorbatch/__init__.py"} <= names
    assert f"tensorbatch-{tensorbatch.__version__}.dist-info/licenses/LICENSE" in names
    # the package and its metadata only: no tests, benchmarks, docs or tools
    tops = {name.split("/")[0] for name in names}
    assert tops == {"tensorbatch", f"tensorbatch-{tensorbatch.__version__}.dist-info"}, tops
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]
    # every module of the source tree is in the wheel
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tensorbatch").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    assert f"\nVersion: {tensorbatch.__version__}\n" in metadata
    assert "\nLicense-Expression: MIT\n" in metadata
    assert "\nDescription-Content-Type: text/markdown\n" in metadata
    for extra in PYPROJECT["project"]["optional-dependencies"]:
        assert f"\nProvides-Extra: {extra}\n" in metadata


def test_sdist_contents(dist: Path):
    sdist = _one(dist, f"tensorbatch-{tensorbatch.__version__}.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {name.split("/", 1)[1] for name in tf.getnames() if "/" in name}
    assert {
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "pyproject.toml",
        "PKG-INFO",
        "tensorbatch/__init__.py",
        "tensorbatch/py.typed",
        "tensorbatch/base.pyi",
    } <= names
    assert not [n for n in names if n.startswith((".venv/", "dist/", "build/")) or "__pycache__" in n]


def test_twine_check(dist: Path):
    _need("twine")
    files = [str(p) for p in sorted(dist.iterdir())]
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_editable_wheel_version(tmp_path: Path):
    """``pip install -e .`` reads the same version (hatchling's editable wheel)."""
    _need("hatchling", "editables")
    code = "import sys; from hatchling.build import build_editable; print(build_editable(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    wheel = tmp_path / result.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"tensorbatch-{tensorbatch.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {tensorbatch.__version__}\n" in metadata


def test_wheel_installs_and_runs(dist: Path, tmp_path: Path):
    """The wheel alone is a working package: unpacked onto sys.path ahead of the source tree, it imports and runs."""
    wheel = _one(dist, f"tensorbatch-{tensorbatch.__version__}-py3-none-any.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    code = (
        "import os, sys, tempfile, torch, tensorbatch\n"
        "from tensorbatch import TensorDict, nn, persistent, store, tabular, compat\n"
        "assert tensorbatch.__file__.startswith(sys.argv[1]), tensorbatch.__file__\n"
        "td = TensorDict(a=torch.arange(6.).reshape(3, 2), b={'c': torch.ones(3)}, batch_size=[3])\n"
        "back = TensorDict.load_memmap(td.memmap(os.path.join(tempfile.mkdtemp(), 'f')).saved_path)\n"
        "print(tensorbatch.__version__, (td + back)['a'].sum().item(), back['b', 'c'].shape)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [tensorbatch.__version__, "30.0", "torch.Size([3])"]
