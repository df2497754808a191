"""The documentation site (mkdocs.yml, docs/): every page is in the nav, every Python example on a page runs as it
stands (README sections included by snippets run in tests/test_readme.py), and the site builds in strict mode.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
# pages whose examples need what a test cannot start here as written (their code is tested elsewhere)
NEEDS_SETUP = {
    "distributed.md": "its examples run under torchrun (tests/distributed runs the same calls on gloo)",
    "store.md": "its examples name a server host (tests/store runs the same calls on a real local server)",
}
BLOCKS = [
    (page, i, block)
    for page in PAGES
    if page not in NEEDS_SETUP
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S))
]


def test_the_nav_lists_every_page():
    nav = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), flags=re.M))
    assert nav == set(PAGES)


def test_pages_include_only_existing_readme_sections():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        for section in re.findall(r'--8<-- "README\.md:(\w+)"', (DOCS / page).read_text(encoding="utf-8")):
            assert f"[start:{section}]" in readme and f"[end:{section}]" in readme, (page, section)


@pytest.mark.parametrize(("page", "index", "block"), BLOCKS, ids=[f"{p}-{i}" for p, i, _ in BLOCKS])
def test_page_example_runs(page, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType(f"docs_block_{index}")  # a real module: dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(block, f"docs/{page} python block {index}", "exec"), module.__dict__)


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs (the docs extra) is not installed")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings (the docs extra) is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "storage" / "index.html").read_text().count("from_zarr") > 0
