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
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


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
                return [*stack[stack.index(dep):], dep]
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
    allowed = ("tensorbatch._ops", "tensorbatch._base", "tensorbatch._keys", "tensorbatch._errors",
               "tensorbatch._compat")
    above = {m for m in import_graph()["tensorbatch.base"] if not m.startswith(allowed)}
    assert not above, f"base.py imports {sorted(above)}"


def test_io_never_tests_for_a_backend_class():
    for path in (PACKAGE / "_io").glob("*.py"):
        text = path.read_text()
        assert "isinstance(td, LazyStackedTensorDict)" not in text, path.name
        assert "isinstance(value, LazyStackedTensorDict)" not in text, path.name


def test_every_module_imports_first_and_alone():
    """Each module, imported first in a fresh interpreter, then the package works (four interpreters at a time)."""
    code = ("import {module}\nimport torch\nimport tensorbatch\n"
            "td = tensorbatch.TensorDict({{'a': torch.zeros(2), 's': 'x'}}, [2])\n"
            "assert td[1:]['a'].shape == (1,) and td.memmap_() is td and td.to_namedtuple().s == 'x'\n")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    failures = {}
    names = sorted(MODULES)
    for start in range(0, len(names), 4):
        procs = {m: subprocess.Popen([sys.executable, "-c", code.format(module=m)], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for m in names[start:start + 4]}
        for module, proc in procs.items():
            try:
                _, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                err = "timed out"
            if proc.returncode != 0:
                failures[module] = err[-1500:]
    assert not failures, "\n".join(f"{m}:\n{e}" for m, e in failures.items())


def test_package_import_leaves_optional_backends_alone():
    """``tensorbatch.TensorDictStore`` and ``PersistentTensorDict`` import redis and h5py on first use only."""
    code = ("import sys, tensorbatch; assert 'redis' not in sys.modules and 'h5py' not in sys.modules; "
            "assert {'TensorDictStore', 'LazyStackedTensorDictStore', 'PersistentTensorDict'} <= set(dir(tensorbatch))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
