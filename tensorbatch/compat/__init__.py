"""The switch that runs libraries written for tensordict (TorchRL) on tensorbatch.

One line, before the library is imported::

    import tensorbatch.compat; tensorbatch.compat.install()
    import torchrl  # its ``import tensordict`` now gives tensorbatch

:func:`install` puts an import hook first on ``sys.meta_path``: ``import tensordict`` and every
``tensordict.<sub>`` (``tensordict.nn``, ``tensordict.utils``, ``tensordict.base``...) give an alias module over
tensorbatch's module of the same path, so ``tensordict.TensorDict is tensorbatch.TensorDict``. The private
names such libraries import (``tensordict.utils._zip_strict``, ``tensordict.base._NESTED_TENSORS_AS_LISTS``...)
and the private TensorDict methods they call (``_fast_apply``, ``_set_str(..., non_blocking=...)``) exist only
while the switch is on, in this package; tensorbatch's own modules do not have them.

Put the line at the top of the main script: processes started with ``spawn`` (TorchRL's ``ParallelEnv``,
multi-process collectors) import that script again and so install the switch too.

``tensordict.__version__`` reads ``"0.15.3"``, the tensordict release whose API tensorbatch follows, for
libraries that compare it; ``tensorbatch.__version__`` is tensorbatch's own.
"""

from __future__ import annotations

import sys

from . import _finder, _methods

__all__ = ["install", "is_installed", "uninstall"]

_hook: _finder.Finder | None = None


def _real_tensordict() -> list[str]:
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if (name == _finder.PREFIX or name.startswith(_finder.PREFIX + "."))
        and module is not None
        and not _finder.is_alias(module)
    )


def install() -> None:
    """Make ``import tensordict`` (and its submodules) resolve to tensorbatch. A second call does nothing.

    Raises:
        RuntimeError: if the real tensordict is already imported (call ``install()`` before importing it or
            any library that imports it).

    Examples:
        >>> import tensorbatch.compat
        >>> tensorbatch.compat.is_installed()
        False
    """
    global _hook
    if _hook is not None:
        return
    real = _real_tensordict()
    if real:
        raise RuntimeError(
            f"tensorbatch.compat.install() must run before tensordict is imported, but the real tensordict is "
            f"already imported ({', '.join(real[:3])}{'...' if len(real) > 3 else ''}). Call it first, before "
            f"importing tensordict or any library that imports it (such as torchrl)."
        )
    _hook = _finder.Finder()
    sys.meta_path.insert(0, _hook)
    _methods.attach()


def uninstall() -> None:
    """Remove the hook, the alias modules and the private methods (for tests).

    Modules that imported ``tensordict`` meanwhile keep what they got.
    """
    global _hook
    if _hook is None:
        return
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    _hook = None
    for name, module in list(sys.modules.items()):
        if (name == _finder.PREFIX or name.startswith(_finder.PREFIX + ".")) and _finder.is_alias(module):
            del sys.modules[name]
    _methods.detach()


def is_installed() -> bool:
    """True while the switch is on."""
    return _hook is not None
