"""Line budgets (STYLE.md R15): no module over 1,500 lines, no function or method over 80 lines.

A function's size is counted in statement lines (the lines where a statement of its body starts; the docstring,
comments, blank lines and the lines ruff's format splits a call or a signature onto do not count), with a
budget of 65: the tree was written to 80 physical lines before it was put in ruff's format, where the longest
functions had 64 statement lines; the formatter alone cannot push a function over this measure.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tensorbatch"
MAX_FILE_LINES = 1500
MAX_FUNCTION_LINES = 65  # statement lines (see the module docstring)


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


def _statement_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]  # the docstring
    return len({sub.lineno for stmt in body for sub in ast.walk(stmt) if isinstance(sub, ast.stmt)})


def test_statement_lines_ignore_the_layout():
    compact = "def f(a, b):\n    x = g(a, b)\n    return x\n"
    split = 'def f(\n    a,\n    b,\n):\n    """Doc."""\n\n    x = g(\n        a,\n        b,\n    )\n    return x\n'
    counts = [_statement_lines(ast.parse(src).body[0]) for src in (compact, split)]
    assert counts == [2, 2]


def test_functions_within_line_budget():
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = _statement_lines(node)
                if n > MAX_FUNCTION_LINES:
                    offenders.append(f"{_where(path, node.lineno)} {node.name}() has {n} statement lines")
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)
