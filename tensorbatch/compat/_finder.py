"""The import hook: ``tensordict`` and ``tensordict.<sub>`` resolve to alias modules over tensorbatch's.

An alias module is a new module named ``tensordict.<sub>``: it holds the names of tensorbatch's module of the
same path (``tensorbatch.<sub>``, or the one :data:`TARGETS` names), the compat-only private names that
:mod:`._private` adds for it, and falls back to the tensorbatch module for names added later. Objects are
tensorbatch's own: ``tensordict.TensorDict is tensorbatch.TensorDict``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import types
from collections.abc import Callable, Sequence
from typing import Any

from . import _private

PREFIX = "tensordict"

# tensordict modules whose tensorbatch counterpart has another path; None: the module exists only in the
# compat layer (its names come from ._private).
TARGETS: dict[str, str | None] = {
    "tensordict._tensorcollection": "tensorbatch._base.collection",
    "tensordict._nestedkey": "tensorbatch._keys",
    "tensordict._C": None,
    "tensordict.nn.functional_modules": None,
}

# tensordict modules that are packages (have submodules) though their tensorbatch counterpart is not.
PACKAGES = frozenset({"tensordict", "tensordict.nn", "tensordict.nn.distributions", "tensordict._C"})

VERSION = "0.15.3"  # the tensordict release whose API tensorbatch follows (what tensordict.__version__ reads)


def target_name(fullname: str) -> str | None:
    """The tensorbatch module behind ``fullname`` (``tensordict...``), None for a compat-only module."""
    if fullname in TARGETS:
        return TARGETS[fullname]
    return "tensorbatch" + fullname[len(PREFIX) :]


def is_alias(module: Any) -> bool:
    """True for a module this hook made."""
    return getattr(module, "__tensorbatch_alias__", None) is not None


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``tensordict`` and its submodules and loads them as alias modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PREFIX and not fullname.startswith(PREFIX + "."):
            return None
        source = target_name(fullname)
        if source is None:
            if fullname not in _private.OVERLAYS:
                return None
            package = fullname in PACKAGES
        else:
            try:
                spec = importlib.util.find_spec(source)
            except ModuleNotFoundError:
                spec = None
            if spec is None:
                return None  # ModuleNotFoundError naming ``fullname``, as for any missing module
            package = fullname in PACKAGES or spec.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return make_alias(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: :meth:`create_module` filled the module."""


class AliasModule(types.ModuleType):
    """A module over a tensorbatch module. Importing a submodule does not replace a function of the same name.

    (``tensordict.tensorclass`` is the decorator, as in tensorbatch, also after ``import tensordict.tensorclass``.)
    """

    def __setattr__(self, name: str, value: Any) -> None:
        held = self.__dict__.get(name)
        if is_alias(value) and held is not None and not isinstance(held, types.ModuleType):
            return
        super().__setattr__(name, value)


def make_alias(fullname: str) -> types.ModuleType:
    """Build the alias module ``fullname`` (not registered: the import system does that)."""
    source_name = target_name(fullname)
    source = importlib.import_module(source_name) if source_name is not None else None
    module = AliasModule(fullname, getattr(source, "__doc__", None))
    names = module.__dict__
    if source is not None:
        for key, value in vars(source).items():
            if (not key.startswith("__") or key == "__all__") and not _is_tensorbatch_module(value):
                names[key] = value  # submodules are left to __getattr__, which serves their aliases
        if getattr(source, "__file__", None):
            names["__file__"] = source.__file__
    names.update(_private.names_for(fullname))
    if fullname == PREFIX:
        names["__version__"] = VERSION
    names["__tensorbatch_alias__"] = source_name or __name__
    names["__getattr__"] = _fallback(fullname, source)
    return module


def _is_tensorbatch_module(value: Any) -> bool:
    name = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else ""
    return name == "tensorbatch" or name.startswith("tensorbatch.")


def _aliased(value: Any) -> Any:
    """A tensorbatch module held by a module is served as its alias (``tensordict.nn.utils``), imported then."""
    if _is_tensorbatch_module(value):
        return importlib.import_module(PREFIX + value.__name__[len("tensorbatch") :])
    return value


def _fallback(fullname: str, source: types.ModuleType | None) -> Callable[[str], Any]:
    """The alias's module ``__getattr__``: names the tensorbatch module gained after the alias was made."""

    def __getattr__(name: str) -> Any:
        if source is not None and not name.startswith("__"):
            try:
                return _aliased(getattr(source, name))
            except AttributeError:
                pass
        raise AttributeError(
            f"module {fullname!r} has no attribute {name!r} (tensordict resolves to "
            f"tensorbatch through tensorbatch.compat; this name has no counterpart there)"
        )

    return __getattr__
