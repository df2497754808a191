"""Reading the public names of tensordict 0.15.3 (or of tensorbatch) for ``test_names.py``.

A name's *kind* is what a user can do with it: call it on an instance (``method``), read it
(``property``), call it on the class (``classmethod``/``staticmethod``), or, at package level, use it
as a ``class``, a ``callable``, a ``module`` or a plain ``value``. A method's *signature* is its list of
``[parameter, kind]`` pairs (``self``/``cls`` left out), or None where ``inspect`` cannot read one.

Regenerate the checked-in snapshot (``reference_names.json``) after a reference upgrade with::

    python tests/conformance/_names.py
"""

from __future__ import annotations

import inspect
import json
import types
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("reference_names.json")
REFERENCE_VERSION = "0.15.3"

# group -> the attribute of the package holding it ("" for the package itself)
GROUPS: dict[str, str] = {
    "package": "",
    "TensorDict": "TensorDict",
    "TensorDictBase": "TensorDictBase",
    "LazyStackedTensorDict": "LazyStackedTensorDict",
    "TensorClass": "TensorClass",
    "MemoryMappedTensor": "MemoryMappedTensor",
}

_PARAM_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "either",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "keyword",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def public(obj: Any) -> list[str]:
    """The public names of a class or module (``dir``, no leading underscore)."""
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def member_kind(cls: type, name: str) -> str:
    """``method``, ``property``, ``classmethod``, ``staticmethod`` or ``attribute`` of a class member."""
    static = inspect.getattr_static(cls, name)
    if isinstance(static, (classmethod, types.ClassMethodDescriptorType)):
        return "classmethod"
    if isinstance(static, staticmethod):
        return "staticmethod"
    if isinstance(static, property) or inspect.isdatadescriptor(static):
        return "property"
    if callable(static) or inspect.ismethoddescriptor(static):
        return "method"
    return "attribute"


def package_kind(module: types.ModuleType, name: str) -> str:
    """``module``, ``class``, ``callable`` or ``value`` of a package attribute (``optional``: importing it needs
    an optional dependency that is not installed)."""
    try:
        value = getattr(module, name)
    except ImportError:
        return "optional"
    if isinstance(value, types.ModuleType):
        return "module"
    if inspect.isclass(value):
        # a context-manager/decorator class (set_printoptions...) may equally be a function returning one
        return "context" if hasattr(value, "__enter__") else "class"
    return "callable" if callable(value) else "value"


def signature(obj: Any, *, unbound: bool = False) -> list[list[str]] | None:
    """``[[parameter, kind], ...]`` of a callable as a user calls it; None when ``inspect`` cannot read it.

    ``unbound``: ``obj`` is an instance method read from its class, whose first parameter (``self``,
    whatever its name) is left out.
    """
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None
    if unbound and params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return [[p.name, _PARAM_KINDS[p.kind]] for p in params]


def read(package: types.ModuleType) -> dict[str, Any]:
    """``{"names": {group: {name: kind}}, "signatures": {group: {name: signature}}}`` of a package."""
    names: dict[str, dict[str, str]] = {}
    signatures: dict[str, dict[str, list[list[str]]]] = {}
    for group, attr in GROUPS.items():
        if not attr:
            kinds = {n: package_kind(package, n) for n in public(package)}
            owner: Any = package
        else:
            owner = getattr(package, attr)
            kinds = {n: member_kind(owner, n) for n in public(owner)}
        names[group] = kinds
        sigs = {}
        for name, kind in kinds.items():
            if kind in ("method", "classmethod", "staticmethod", "callable"):  # (not "optional")
                sig = signature(getattr(owner, name), unbound=kind == "method")
                if sig is not None:
                    sigs[name] = sig
        signatures[group] = sigs
    return {"version": REFERENCE_VERSION, "names": names, "signatures": signatures}


def load_snapshot() -> dict[str, Any]:
    """The checked-in snapshot of the reference's names."""
    data: dict[str, Any] = json.loads(SNAPSHOT.read_text())
    return data


def write_snapshot() -> None:
    """(Re)write ``reference_names.json`` from the installed tensordict."""
    import tensordict

    if tensordict.__version__ != REFERENCE_VERSION:
        raise SystemExit(f"tensordict {tensordict.__version__} is installed; the reference is {REFERENCE_VERSION}")
    SNAPSHOT.write_text(json.dumps(read(tensordict), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_snapshot()
