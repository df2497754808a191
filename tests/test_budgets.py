"""Line budgets (STYLE.md R15): no module over 1,500 lines, no function or method over 80 lines."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tensorbatch"
MAX_FILE_LINES = 1500
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert files, f"no .py files found under {PACKAGE}"
    return files


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_files_within_line_budget():
    offenders = []
    for path in _sources():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            offenders.append(f"{_where(path, 1)} has {n} lines")
    assert not offenders, f"files over {MAX_FILE_LINES} lines:\n" + "\n".join(offenders)


def test_functions_within_line_budget():
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    offenders.append(f"{_where(path, node.lineno)} {node.name}() has {n} lines")
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)
