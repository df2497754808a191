"""``tensorbatch/base.pyi`` is what ``tools/gen_stubs.py`` generates from the current code (STYLE.md R3)."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from tensorbatch import TensorDictBase
from tensorbatch._ops.pointwise import NAMES, OPERATORS

ROOT = Path(__file__).resolve().parent.parent
FIX = "run `python tools/gen_stubs.py` and commit tensorbatch/base.pyi"


@pytest.fixture(scope="module")
def gen_stubs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "tools" / "gen_stubs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(gen_stubs: ModuleType) -> str:
    return gen_stubs.render()


def test_stub_is_up_to_date(gen_stubs: ModuleType, generated: str) -> None:
    path: Path = gen_stubs.STUB_PATH
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: {FIX}"
    committed = path.read_text()
    if committed != generated:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                "tensorbatch/base.pyi (committed)",
                "tensorbatch/base.pyi (generated)",
                n=1,
            )
        )
        pytest.fail(f"tensorbatch/base.pyi is stale: {FIX}\n{diff[:6000]}", pytrace=False)


def test_generation_is_deterministic(gen_stubs: ModuleType, generated: str) -> None:
    assert gen_stubs.render() == generated


def _stub_members(text: str) -> dict[str, set[str]]:
    tree = ast.parse(text)
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            out[node.name] = names
    return out


def test_stub_declares_every_member(generated: str) -> None:
    declared = _stub_members(generated)["TensorDictBase"]
    public = {n for n in vars(TensorDictBase) if not n.startswith("_")}
    assert public <= declared, sorted(public - declared)


def test_stub_declares_every_table_method(generated: str) -> None:
    declared = _stub_members(generated)["TensorDictBase"]
    table = NAMES
    assert table <= declared, sorted(table - declared)


def test_stub_signatures_match_runtime(generated: str) -> None:
    """Parameter names and kinds in the stub are those of the runtime methods."""
    stub = ast.parse(generated)
    cls = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "TensorDictBase")
    checked = 0
    for item in cls.body:
        if not isinstance(item, ast.FunctionDef) or any(
            isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in item.decorator_list
        ):
            continue
        value = inspect.getattr_static(TensorDictBase, item.name)
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        runtime = [p.name for p in inspect.signature(func).parameters.values()]
        a = item.args
        names = [x.arg for x in (*a.posonlyargs, *a.args)]
        names += [a.vararg.arg] if a.vararg else []
        names += [x.arg for x in a.kwonlyargs]
        names += [a.kwarg.arg] if a.kwarg else []
        if item.name in OPERATORS:  # written as op(self, *other) at runtime; the stub spells it out
            continue
        assert names == runtime, (item.name, names, runtime)
        checked += 1
    assert checked > 100


def test_stub_compiles(generated: str) -> None:
    compile(generated, "base.pyi", "exec")
