"""Generate ``tensorbatch/base.pyi`` so type checkers see the table-generated methods (STYLE.md R3).

The stub is built by introspecting the imported module ``tensorbatch.base``: every function and class
defined there, and every member of those classes (public, private and dunder; methods installed from
``tensorbatch._ops`` tables included), with signatures from :func:`inspect.signature`. String
annotations are kept when every name in them can be imported in the stub; otherwise the annotation
becomes ``Any``. Table-generated pointwise methods, annotated ``-> Any`` in the source, are declared to
return ``TensorDictBase`` (``Self`` for in-place ones).

Note: a ``.pyi`` next to a ``.py`` takes precedence for type checkers, so everything other modules
import from ``tensorbatch.base`` (private helpers included) must be declared here, which is why all
module-level functions and classes are emitted.

Usage::

    python tools/gen_stubs.py            # (re)write tensorbatch/base.pyi
    python tools/gen_stubs.py --check    # exit 1 if the committed stub is stale
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import inspect
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tensorbatch.base"
STUB_PATH = ROOT / "tensorbatch" / "base.pyi"
POINTWISE = "tensorbatch._ops.pointwise"
LINE_LENGTH = 110  # pyproject.toml [tool.ruff]

_SKIP_MEMBERS = {
    "__abstractmethods__",
    "__annotations__",
    "__dict__",
    "__doc__",
    "__firstlineno__",
    "__module__",
    "__orig_bases__",
    "__qualname__",
    "__slots__",
    "__static_attributes__",
    "__weakref__",
    "_abc_impl",
}
# Operators whose return type differs from ``object``'s: the stub must say so to the type checker.
_OVERRIDES_OBJECT = {"__eq__", "__ne__"}
_EMPTY = inspect.Parameter.empty


class _Imports:
    """Names a stub needs, resolved to deterministic import lines."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module = module
        self.lines: set[str] = set()
        # builtins hidden by a member of the class being rendered (``def bool(self)``, ``def float(self)``)
        self.shadowed: set[str] = set()
        self.local: set[str] = {
            n
            for n, v in vars(module).items()
            if (inspect.isclass(v) or inspect.isfunction(v)) and getattr(v, "__module__", None) == module.__name__
        }

    def resolve(self, name: str, namespace: dict[str, Any]) -> bool:
        """Record the import that defines ``name``; False when it cannot be imported in the stub."""
        if name in self.local or (name == "Self" and self._add("from typing import Self")):
            return True
        if name in vars(builtins) and namespace.get(name, vars(builtins)[name]) is vars(builtins)[name]:
            return True
        if name not in namespace:
            return False
        obj = namespace[name]
        if isinstance(obj, types.ModuleType):
            return self._add(f"import {obj.__name__}" if obj.__name__ == name else f"import {obj.__name__} as {name}")
        home = _home_module(name, obj)
        if home is None:
            return False
        mod, real = home
        return self._add(f"from {mod} import {real}" if real == name else f"from {mod} import {real} as {name}")

    def _add(self, line: str) -> bool:
        self.lines.add(line)
        return True

    def render(self) -> list[str]:
        """isort-style: stdlib, third party, first party; plain imports first, one line per module."""
        sections: dict[int, list[str]] = {0: [], 1: [], 2: []}
        froms: dict[str, set[str]] = {}
        for line in self.lines:
            if line.startswith("from "):
                mod, names = line[5:].split(" import ", 1)
                froms.setdefault(mod, set()).add(names)
            else:
                sections[_section(line.split()[1])].append(line)
        for mod, names in froms.items():
            sections[_section(mod)].append(f"from {mod} import {', '.join(sorted(names))}")
        out: list[str] = []
        for key in sorted(sections):
            block = sorted(sections[key], key=lambda line: (line.startswith("from "), line.split()[1]))
            if block:
                out += [*([""] if out else []), *block]
        return out


def _section(module: str) -> int:
    top = module.split(".")[0]
    return 0 if top in sys.stdlib_module_names else 2 if top == "tensorbatch" else 1


def _home_module(name: str, obj: Any) -> tuple[str, str] | None:
    """``(module, attribute)`` from which ``obj`` can be imported, preferring where it is defined."""
    mod = getattr(obj, "__module__", None)
    candidates = []
    if isinstance(mod, str) and mod in sys.modules:
        for attr in (name, getattr(obj, "__name__", None), getattr(obj, "_name", None)):
            if isinstance(attr, str) and getattr(sys.modules[mod], attr, None) is obj:
                candidates.append((mod, attr))
    if candidates:
        return candidates[0]
    # aliases with no __module__ of their own (``X = str | tuple``): the shallowest tensorbatch module holding them
    names = (m for m in sys.modules if m == "tensorbatch" or m.startswith("tensorbatch."))
    for modname in sorted(names, key=lambda m: (m.count("."), m)):
        if modname == MODULE or modname == "tensorbatch":
            continue
        if vars(sys.modules[modname]).get(name) is obj:
            return modname, name
    return None


def _names_in(expr: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(expr) if isinstance(node, ast.Name)}


def _annotation(ann: Any, namespace: dict[str, Any], imports: _Imports) -> str:
    """Source text for ``ann`` valid in the stub, or ``Any``."""
    if ann is _EMPTY:
        imports.resolve("Any", {"Any": Any})
        return "Any"
    if not isinstance(ann, str):
        if ann is None or ann is type(None):
            return "None"
        if inspect.isclass(ann):
            home = _home_module(ann.__name__, ann)
            if home is not None:
                imports.resolve(ann.__name__, {ann.__name__: ann})
                return ann.__name__
        imports.resolve("Any", {"Any": Any})
        return "Any"
    try:
        tree = ast.parse(ann, mode="eval")
    except SyntaxError:
        tree = None
    if tree is None or not all(imports.resolve(n, namespace) for n in sorted(_names_in(tree))):
        imports.resolve("Any", {"Any": Any})
        return "Any"
    hidden = {n for n in _names_in(tree) if n in imports.shadowed and n in vars(builtins)}
    if hidden:
        imports.resolve("builtins", {"builtins": builtins})
        tree = _Qualify(hidden).visit(tree)
    return ast.unparse(tree)


class _Qualify(ast.NodeTransformer):
    """``bool`` -> ``builtins.bool`` where a class member of that name would shadow it."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Attribute(ast.Name("builtins", ast.Load()), node.id, ast.Load()), node)
        return node


def _params(
    func: Any,
    namespace: dict[str, Any],
    imports: _Imports,
    *,
    bound: bool,
    override: list[inspect.Parameter] | None = None,
) -> list[str]:
    params = override if override is not None else list(inspect.signature(func).parameters.values())
    parts: list[str] = []
    star_done = False
    for i, p in enumerate(params):
        if i and params[i - 1].kind is p.POSITIONAL_ONLY and p.kind is not p.POSITIONAL_ONLY:
            parts.append("/")
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        star_done = star_done or p.kind is p.VAR_POSITIONAL
        if i == 0 and bound and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            text = p.name
        else:
            text = f"{prefix}{p.name}: {_annotation(p.annotation, namespace, imports)}"
        if p.default is not _EMPTY:
            text += " = ..."
        parts.append(text)
    if params and params[-1].kind is inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    return parts


def _defined_in(func: Any) -> str | None:
    """The module whose code made ``func`` (its globals): base.py names table methods as TensorDictBase's own."""
    return getattr(func, "__globals__", {}).get("__name__")


def _table_return(name: str, func: Any, imports: _Imports) -> str | None:
    """Return type of a table-generated pointwise method (the source says ``Any``)."""
    if _defined_in(func) != POINTWISE or inspect.signature(func).return_annotation != "Any":
        return None
    inplace = (name.endswith("_") and not name.endswith("__")) or (name.startswith("__i") and name != "__invert__")
    if inplace:
        imports.resolve("Self", {})
        return "Self"
    return "TensorDictBase"


def _operator_params(cls: type, name: str, func: Any) -> list[inspect.Parameter] | None:
    """``(self, other)`` or ``(self)`` for table operators written as ``op(self, *other)``."""
    params = list(inspect.signature(func).parameters.values())
    if _defined_in(func) != POINTWISE or len(params) != 2 or params[1].kind is not params[1].VAR_POSITIONAL:
        return None
    table = importlib.import_module(POINTWISE)
    target = getattr(cls, table.OPERATORS.get(name, ""), None)
    takes_other = (
        target is None
        or len([p for p in inspect.signature(target).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]) > 1
    )
    other = inspect.Parameter("other", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Any")
    return [
        params[0].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *([other] if takes_other else []),
    ]


def _def(
    name: str,
    func: Any,
    imports: _Imports,
    *,
    bound: bool,
    indent: str,
    decorators: tuple[str, ...] = (),
    cls: type | None = None,
) -> list[str]:
    func = inspect.unwrap(func)  # (a method wrapped by _base/locks.keep_lock: the wrapped one's annotations)
    namespace = getattr(func, "__globals__", {})
    ret = _table_return(name, func, imports) if cls is not None else None
    override = _operator_params(cls, name, func) if cls is not None else None
    if ret is None:
        ret = _annotation(inspect.signature(func).return_annotation, namespace, imports)
    if getattr(func, "__isabstractmethod__", False):
        imports.resolve("abc", {"abc": importlib.import_module("abc")})
        decorators = (*decorators, "abc.abstractmethod")
    ignore = "  # type: ignore[override]" if name in _OVERRIDES_OBJECT and ret != "bool" else ""
    lines = [f"{indent}@{d}" for d in decorators]
    params = _params(func, namespace, imports, bound=bound, override=override)
    one_line = f"{indent}def {name}({', '.join(params)}) -> {ret}: ...{ignore}"
    if len(one_line) <= LINE_LENGTH:
        return [*lines, one_line]
    # ruff-format's layout: one parameter per line with a trailing comma
    lines.append(f"{indent}def {name}(")
    lines += [f"{indent}    {part}," for part in params]
    return [*lines, f"{indent}) -> {ret}: ...{ignore}"]


def _member(cls: type, name: str, value: Any, imports: _Imports) -> list[str]:
    ind = "    "
    if value is None:  # ``__hash__ = None`` (overrides object's method: mypy wants the ignore), ``__array_ufunc__``
        imports.resolve("ClassVar", {"ClassVar": importlib.import_module("typing").ClassVar})
        ignore = "  # type: ignore[assignment]" if hasattr(object, name) else ""
        return [f"{ind}{name}: ClassVar[None]{ignore}"]
    annotations = inspect.get_annotations(cls)
    if name in annotations:  # declared attributes (``_dense_cls: ClassVar[Any] = None``), whatever they hold now
        owner = sys.modules[cls.__module__]
        return [f"{ind}{name}: {_annotation(annotations[name], vars(owner), imports)}"]
    if isinstance(value, property):
        lines = _def(name, value.fget, imports, bound=True, indent=ind, decorators=("property",))
        if value.fset is not None:
            lines += _def(name, value.fset, imports, bound=True, indent=ind, decorators=(f"{name}.setter",))
        if value.fdel is not None:
            lines += _def(name, value.fdel, imports, bound=True, indent=ind, decorators=(f"{name}.deleter",))
        return lines
    if isinstance(value, classmethod):
        return _def(name, value.__func__, imports, bound=True, indent=ind, decorators=("classmethod",), cls=cls)
    if isinstance(value, staticmethod):
        return _def(name, value.__func__, imports, bound=False, indent=ind, decorators=("staticmethod",), cls=cls)
    if inspect.isfunction(value):
        return _def(name, value, imports, bound=True, indent=ind, cls=cls)
    if callable(value):
        imports.resolve("Any", {"Any": Any})
        return [f"{ind}def {name}(self, *args: Any, **kwargs: Any) -> Any: ..."]
    imports.resolve("Any", {"Any": Any})
    return [f"{ind}{name}: Any"]


def _base_expr(base: type, imports: _Imports) -> str:
    mod = sys.modules[base.__module__]
    if base.__module__ == MODULE:
        return base.__qualname__
    if getattr(mod, base.__name__, None) is base and "." not in base.__module__:
        imports.resolve(base.__module__, {base.__module__: mod})
        return f"{base.__module__}.{base.__name__}"
    imports.resolve(base.__name__, {base.__name__: base})
    return base.__name__


def _class(cls: type, imports: _Imports) -> list[str]:
    bases = [_base_expr(b, imports) for b in cls.__bases__ if b is not object]
    lines = [f"class {cls.__name__}({', '.join(bases)}):" if bases else f"class {cls.__name__}:"]
    body: list[str] = []
    imports.shadowed = set(cls.__dict__)
    for name in sorted(cls.__dict__):
        if name in _SKIP_MEMBERS:
            continue
        body += _member(cls, name, cls.__dict__[name], imports)
    imports.shadowed = set()
    return lines + (body or ["    ..."])


def render() -> str:
    """The stub text for ``tensorbatch.base`` (deterministic: members sorted by name)."""
    module = importlib.import_module(MODULE)
    imports = _Imports(module)
    functions, classes = [], []
    for name, value in sorted(vars(module).items()):
        if getattr(value, "__module__", None) != MODULE:
            continue
        if inspect.isclass(value):
            classes.append(value)
        elif inspect.isfunction(value):
            functions.append((name, value))
    # TensorDictBase first: it is what the stub is for
    classes.sort(key=lambda c: (c.__name__ != "TensorDictBase", c.__name__))
    blocks = [_class(c, imports) for c in classes]
    blocks.append([line for name, fn in functions for line in _def(name, fn, imports, bound=False, indent="")])
    out = [
        f'"""Type stub for :mod:`{MODULE}`, generated by tools/gen_stubs.py: do not edit.',
        "",
        "Regenerate with ``python tools/gen_stubs.py`` after changing tensorbatch/base.py or the op tables.",
        '"""',
        "",
        *imports.render(),
    ]
    for block in blocks:
        out += ["", *block]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the stub, or with ``--check`` report whether it is stale (exit status 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed stub is stale")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    text = render()
    if args.check:
        current = STUB_PATH.read_text() if STUB_PATH.exists() else ""
        if current != text:
            print(f"{STUB_PATH.relative_to(ROOT)} is stale: run `python tools/gen_stubs.py`", file=sys.stderr)
            return 1
        return 0
    STUB_PATH.write_text(text)
    print(f"wrote {STUB_PATH.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
