"""Dependencies point one way (DESIGN.md): no import cycle between modules, and any module imports alone.

The imports are read with ``ast``; imports under ``if TYPE_CHECKING:`` are for type checkers only and do
not count. A cycle is reported with the modules on it, e.g. ``base -> _nontensor -> base``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tensorbatch"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere (functions included), except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules an import statement loads (``from . import x`` loads ``pkg.x`` when it is one)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    is_package = MODULES[module].name == "__init__.py"
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    out = {target} if target in MODULES else set()
    out |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES}
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time (excluding itself and its own package inits)."""
    graph = {}
    for module, path in MODULES.items():
        deps: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            deps |= _resolve(module, node)
        parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        graph[module] = deps - {module} - parents  # a package's __init__ runs first anyway
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "tensorbatch.base" in graph["tensorbatch._td"]
    assert "tensorbatch._ops.traverse" in graph["tensorbatch.base"]


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_base_imports_nothing_above_ops():
    allowed = (
        "tensorbatch._ops",
        "tensorbatch._base",
        "tensorbatch._keys",
        "tensorbatch._errors",
        "tensorbatch._compat",
    )
    above = {m for m in import_graph()["tensorbatch.base"] if not m.startswith(allowed)}
    assert not above, f"base.py imports {sorted(above)}"


def test_io_never_tests_for_a_backend_class():
    for path in (PACKAGE / "_io").glob("*.py"):
        text = path.read_text()
        assert "isinstance(td, LazyStackedTensorDict)" not in text, path.name
        assert "isinstance(value, LazyStackedTensorDict)" not in text, path.name


# Imports torch once, then forks a child per module: each child imports that module first (no tensorbatch
# module is loaded before it), then checks that the package works. Forking after torch's import saves its cost
# per module; the children of one driver run one at a time.
_CHECK = (
    "import {module}\n"
    "import torch\n"
    "import tensorbatch\n"
    "td = tensorbatch.TensorDict({{'a': torch.zeros(2), 's': 'x'}}, [2])\n"
    "assert td[1:]['a'].shape == (1,) and td.memmap_() is td and td.to_namedtuple().s == 'x'\n"
)
_DRIVER = f"""
import os, sys, traceback
import torch  # (shared by the children: the expensive part of a fresh interpreter)
CHECK = {_CHECK!r}
assert not any(name.startswith('tensorbatch') for name in sys.modules)
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 2)
        try:
            exec(CHECK.format(module=module), {{}})
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status:
        print('FAILED ' + module + chr(10) + err[-1500:], flush=True)
"""
_ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def test_every_module_imports_first_and_alone():
    """Each module, imported first (before any other of the package), then the package works."""
    names = sorted(MODULES)
    halves = [names[0::2], names[1::2]]  # two drivers: one per core
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DRIVER, *half],
            cwd=ROOT,
            env=_ENV,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for half in halves
    ]
    reports = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            reports.append(f"timed out\n{out[-3000:]}")
            continue
        if proc.returncode != 0:
            reports.append(f"driver failed ({proc.returncode}):\n{err[-1500:]}")
        if "FAILED" in out:
            reports.append(out)
    assert not reports, "\n".join(reports)


def test_the_import_check_reports_a_failing_module():
    """The driver names a module whose import fails, and not the others."""
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, "tensorbatch._no_such_module", "tensorbatch._keys"],
        cwd=ROOT,
        env=_ENV,
        text=True,
        capture_output=True,
        timeout=300,
    ).stdout
    assert "FAILED tensorbatch._no_such_module" in out and "ModuleNotFoundError" in out
    assert "FAILED tensorbatch._keys" not in out
