"""README.md stays true: its Python examples run as they stand, each on its own; its Layout names every module.

Each block runs in a fresh namespace, in an empty working folder: a reader can copy any one block alone. User
documents (README, docs, docstrings) name no internal issue numbers.
"""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"readme_block_{index}"}
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), namespace)


PACKAGE = README.parent / "tensorbatch"
DESCRIPTION_COLUMN = 20  # a line indented this far continues the description above it


def _layout() -> dict[str, str]:
    """README's Layout block as ``{path under tensorbatch/: description}`` (directories end with ``/``)."""
    section = README.read_text(encoding="utf-8").split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, flags=re.S)
    assert block is not None, "README.md's Layout section has no code block"
    lines = block.group(1).splitlines()
    assert lines[0] == "tensorbatch/", lines[0]
    entries: dict[str, str] = {}
    parents: list[str] = []
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip(" "))
        if indent >= DESCRIPTION_COLUMN:
            continue
        if indent == 0:  # past the package (tests/ ...)
            break
        assert indent % 2 == 0, f"Layout: odd indent in {line!r}"
        depth = indent // 2 - 1
        assert depth <= len(parents), f"Layout: {line!r} is indented under no directory"
        del parents[depth:]
        name, _, description = line.strip().partition(" ")
        path = "".join(parents) + name
        assert path not in entries, f"Layout names {path} twice"
        entries[path] = description.strip()
        if name.endswith("/"):
            parents.append(name)
    return entries


def _package_files() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*"):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
            continue
        found.add(rel.as_posix() + ("/" if path.is_dir() else ""))
    return found


def test_layout_names_every_module():
    listed = _layout()
    missing = sorted(_package_files() - set(listed))
    assert not missing, (
        "README.md's Layout section does not name these files of tensorbatch/ (add one line each, "
        f"under their directory): {missing}"
    )
    assert any(path.endswith(".py") for path in listed)


def test_layout_names_only_what_exists():
    gone = sorted(set(_layout()) - _package_files())
    assert not gone, f"README.md's Layout section names files that tensorbatch/ does not have: {gone}"


def test_layout_says_what_each_module_is():
    empty = [path for path, description in _layout().items() if not description]
    assert not empty, f"README.md's Layout section: no description for {empty}"


ROOT = README.parent
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", flags=re.I)
# what users read: documents, docstrings and comments of the package, benchmarks and examples (CHANGELOG.md may
# name the project's issues)
USER_DOCUMENTS = (
    "README.md",
    "CONTRIBUTING.md",
    "docs/**/*",
    "benchmarks/**/*.py",
    "benchmarks/README.md",
    "examples/**/*.py",
    "tensorbatch/**/*.py",
    "tensorbatch/**/*.pyi",
    "tensorbatch/**/*.md",
)


def test_user_documents_name_no_internal_issue():
    found = []
    for pattern in USER_DOCUMENTS:
        for path in sorted(ROOT.glob(pattern)):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ISSUE_NUMBER.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "say what the thing is, not which issue made it:\n" + "\n".join(found)
