"""The documentation site (mkdocs.yml, docs/): every page is in the nav, every Python example on a page runs as it
stands (README sections included by snippets run in tests/test_readme.py), and the site builds in strict mode.
"""

from __future__ import annotations

import importlib
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


# the API reference: a page per public module (README's Layout names the import paths), every exported name on one
PUBLIC_MODULES = [
    "tensorbatch",
    "tensorbatch.base",
    "tensorbatch.functional",
    "tensorbatch.tensorclass",
    "tensorbatch.typed",
    "tensorbatch.memmap",
    "tensorbatch.persistent",
    "tensorbatch.stored",
    "tensorbatch.store",
    "tensorbatch.tabular",
    "tensorbatch.nn",
    "tensorbatch.nn.distributions",
    "tensorbatch.utils",
    "tensorbatch.compat",
]


def _resolve(identifier: str) -> object:
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(identifier)


def _documented() -> dict[str, list[str]]:
    """Every identifier a reference page renders (``::: x`` and the names of its ``members:`` list), per page."""
    out: dict[str, list[str]] = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        found: list[str] = []
        current = None
        in_members = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("::: "):
                current, in_members = line[4:].strip(), False
                found.append(current)
            elif line.strip() == "members:":
                in_members = True
            elif in_members and line.strip().startswith("- ") and current:
                found.append(f"{current}.{line.strip()[2:]}")
            elif line.strip() and not line.startswith("        "):
                in_members = False
        out[page.name] = found
    return out


def _exports(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # no __all__: the public functions and classes defined there
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module.__name__
        ]
    return [n for n in names if not isinstance(getattr(module, n), types.ModuleType) and n != "install"]


def test_readme_public_modules_have_reference_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"The public import paths are (.*?)\.\n", readme, flags=re.S)
    assert sentence is not None
    named = {"tensorbatch" + n.removeprefix("tensorbatch") for n in re.findall(r"`([\w.]+)`", sentence.group(1))}
    assert named <= set(PUBLIC_MODULES), named - set(PUBLIC_MODULES)


def test_the_reference_documents_every_public_name():
    documented = _documented()
    for page, identifiers in documented.items():
        for identifier in identifiers:  # a page names only what exists
            try:
                _resolve(identifier)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"docs/reference/{page} renders {identifier}, which does not exist: {exc}")
    ids = {id(_resolve(i)) for identifiers in documented.values() for i in identifiers}
    missing = [
        f"{name}.{n}"
        for name in PUBLIC_MODULES
        for n in _exports(importlib.import_module(name))
        if id(getattr(importlib.import_module(name), n)) not in ids
    ]
    assert not missing, f"not on any page of docs/reference: {missing}"


def test_tensordictbase_methods_are_named_as_its_own():
    # the reference (mkdocstrings, by inspection) skips a method whose __qualname__ is a factory's
    # (`_make_unary.<locals>.method`): base.py names the table-made ones, wrappers and what they wrap
    from tensorbatch.base import TensorDictBase

    unnamed = []
    for name, value in vars(TensorDictBase).items():
        fn = getattr(value, "__func__", value)
        while callable(fn) and not name.startswith("_"):
            if "<locals>" in getattr(fn, "__qualname__", ""):
                unnamed.append(f"{name}: {fn.__qualname__}")
            fn = getattr(fn, "__wrapped__", None)
    assert not unnamed
