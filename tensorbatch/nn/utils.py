"""Helpers of the modules: the skip-existing and dispatch modes, and the value mappings.

``set_skip_existing`` / ``skip_existing``: a module whose outputs are already in the TensorDict returns
it unchanged. The dispatch mode (``_set_dispatch_td_nn_modules``; environment variable
``DISPATCH_TDNN_MODULES``, read at import) says whether modules accept tensors as arguments as well as
TensorDicts. The mappings (``mappings("softplus")``, ``biased_softplus``, ...) turn a raw network output
into a positive scale.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from torch.compiler import is_compiling
from torch.nn.parameter import Buffer as Buffer

from .._compat import DecoratorContextManager
from .._keys import NestedKey, unravel_key_list
from .._options import _env_mode

__all__ = [
    # (the mappings and the aggregation mode come from the module ``__getattr__`` below)
    "add_custom_mapping",  # noqa: F822
    "biased_softplus",  # noqa: F822
    "composite_lp_aggregate",  # noqa: F822
    "expln",  # noqa: F822
    "inv_softplus",  # noqa: F822
    "mappings",  # noqa: F822
    "set_composite_lp_aggregate",  # noqa: F822
    "set_skip_existing",
    "skip_existing",
]

_UNSET = object()


class Mode:
    """A process-wide value with an optional per-thread override (read on every module call: no lock).

    Examples:
        >>> m = Mode(False)
        >>> m.get(), m.set(True), m.get()
        (False, None, True)
    """

    __slots__ = ("_local", "_threads", "value")

    def __init__(self, default: Any) -> None:
        self.value = default
        self._local = threading.local()
        self._threads = False  # no thread set its own value yet: reads skip the thread-local lookup

    def get(self) -> Any:
        """The value of this thread (its own, or the process-wide one)."""
        if self._threads:
            own = getattr(self._local, "value", _UNSET)
            if own is not _UNSET:
                return own
        return self.value

    def set(self, value: Any) -> None:
        """Change the value: this thread's own if it has one, else the process-wide value."""
        if self._threads and getattr(self._local, "value", _UNSET) is not _UNSET:
            self._local.value = value
        else:
            self.value = value

    def get_thread(self) -> Any:
        """This thread's own value (``_UNSET`` when it has none)."""
        return getattr(self._local, "value", _UNSET)

    def set_thread(self, value: Any) -> None:
        """Give this thread its own value (``_UNSET`` removes it)."""
        self._threads = True
        self._local.value = value


_SKIP_EXISTING = Mode(False)
_DISPATCH = Mode(_env_mode("DISPATCH_TDNN_MODULES", True))


def skip_existing() -> bool | list[NestedKey]:
    """The current skip-existing mode: False, True, or the list of output keys that may be skipped.

    Examples:
        >>> from tensorbatch.nn import set_skip_existing, skip_existing
        >>> with set_skip_existing(True):
        ...     print(skip_existing())
        True
        >>> skip_existing()
        False
    """
    mode: bool | list[NestedKey] = _SKIP_EXISTING.get()
    return mode


def _dispatch_td_nn_modules() -> bool:
    """Whether modules accept tensors (by in-key name) as well as TensorDicts."""
    return bool(_DISPATCH.get())


def _can_skip(mode: Any, module: Any, tensordict: Any, in_attr: str, out_attr: str) -> bool:
    """True when every output of ``module`` is already in ``tensordict`` and no input is also an output."""
    out_keys = getattr(module, out_attr)
    if mode is not True and not all(key in mode for key in out_keys):
        return False
    present = tensordict.keys(True)
    in_keys = getattr(module, in_attr)
    return all(key in present for key in out_keys) and not any(key in out_keys for key in in_keys)


def _check_first_arg(func: Callable[..., Any]) -> None:
    for i, name in enumerate(inspect.signature(func).parameters):
        if i == 0:
            continue
        if name != "tensordict":
            raise RuntimeError("the first argument of the wrapped function must be named 'tensordict'.")
        break


class set_skip_existing(DecoratorContextManager):
    """Skip modules whose outputs are already in the input TensorDict.

    As a context manager or decorator of a block, ``set_skip_existing(True)`` makes every module whose
    ``out_keys`` are all present (and none of them an input) return its input unchanged;
    ``set_skip_existing(["a"])`` does so only for modules whose outputs are all in that list. As a decorator
    of a module's ``forward``, ``set_skip_existing(None)`` applies the mode current at call time.

    Args:
        mode: True, False, a list of keys, or None (only as a decorator of ``forward``).
        in_key_attr: the module attribute listing its inputs.
        out_key_attr: the module attribute listing its outputs.
        thread_local: change the mode of this thread only.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictModule, set_skip_existing
        >>> module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
        >>> td = TensorDict(x=torch.zeros(2), y=torch.full((2,), 5.0))
        >>> with set_skip_existing(True):
        ...     print(module(td)["y"])
        tensor([5., 5.])
        >>> module(td)["y"]
        tensor([1., 1.])
    """

    def __init__(
        self,
        mode: bool | list[NestedKey] | None = True,
        in_key_attr: str = "in_keys",
        out_key_attr: str = "out_keys",
        *,
        thread_local: bool = False,
    ) -> None:
        self.mode = unravel_key_list(mode) if isinstance(mode, list) else mode
        self.in_key_attr = in_key_attr
        self.out_key_attr = out_key_attr
        self.thread_local = thread_local
        self._called = False

    def clone(self) -> set_skip_existing:
        """A fresh copy (each decorated call enters its own)."""
        out = type(self)(self.mode, self.in_key_attr, self.out_key_attr, thread_local=self.thread_local)
        out._called = self._called
        return out

    def __call__(self, func: Callable[..., Any]) -> Any:
        """``func`` (a module's ``forward``) run under this mode, skipping when its outputs are present."""
        return super().__call__(self._skipping(func, restore=False))

    def _skipping(self, func: Callable[..., Any], restore: bool) -> Callable[..., Any]:
        """``func`` returning its input unchanged when the mode current at call time allows it.

        With ``restore`` (the per-call decorator of ``forward``) the mode is put back after the call if a nested
        module changed it, and a compiled region refuses an active mode.
        """
        self._called = True
        _check_first_arg(func)
        in_attr, out_attr = self.in_key_attr, self.out_key_attr

        @functools.wraps(func)
        def wrapper(_self: Any, tensordict: Any, *args: Any, **kwargs: Any) -> Any:
            mode = _SKIP_EXISTING.get()
            if not mode:
                return func(_self, tensordict, *args, **kwargs)
            if restore and is_compiling():
                raise RuntimeError("skip_existing is not compatible with torch.compile.")
            if _can_skip(mode, _self, tensordict, in_attr, out_attr):
                return tensordict
            if not restore:
                return func(_self, tensordict, *args, **kwargs)
            try:
                return func(_self, tensordict, *args, **kwargs)
            finally:  # a nested module may have changed it
                if _SKIP_EXISTING.get() is not mode:
                    _SKIP_EXISTING.set(mode)

        return wrapper

    def __enter__(self) -> None:
        if self.mode and is_compiling():
            raise RuntimeError("skip_existing is not compatible with TorchDynamo.")
        self.prev = _SKIP_EXISTING.get_thread() if self.thread_local else _SKIP_EXISTING.get()
        if self.mode is not None:
            if self.thread_local:
                _SKIP_EXISTING.set_thread(self.mode)
            else:
                _SKIP_EXISTING.set(self.mode)
        elif not self._called:
            raise RuntimeError(
                f"It seems you are using {type(self).__name__} as a context manager with ``None`` "
                "input. This behaviour is not allowed."
            )

    def __exit__(self, *exc: Any) -> None:
        if self.thread_local:
            _SKIP_EXISTING.set_thread(self.prev)
        else:
            _SKIP_EXISTING.set(self.prev)


class _set_skip_existing_None(set_skip_existing):
    """The decorator of ``forward`` methods: applies the skip-existing mode current at call time.

    Unlike ``set_skip_existing(None)`` it enters no context per call (it is on every module call).
    """

    def __init__(self) -> None:
        super().__init__(None)

    def clone(self) -> _set_skip_existing_None:
        """A fresh copy."""
        return type(self)()

    def __call__(self, func: Callable[..., Any]) -> Any:
        return self._skipping(func, restore=True)


class _set_dispatch_td_nn_modules(DecoratorContextManager):
    """Turn the dispatch of tensor arguments on or off within a block (or a decorated function).

    Examples:
        >>> from tensorbatch.nn.utils import _dispatch_td_nn_modules, _set_dispatch_td_nn_modules
        >>> with _set_dispatch_td_nn_modules(False):
        ...     print(_dispatch_td_nn_modules())
        False
        >>> _dispatch_td_nn_modules()
        True
    """

    def __init__(self, mode: bool) -> None:
        self.mode = mode
        self._saved: list[Any] = []

    def clone(self) -> _set_dispatch_td_nn_modules:
        """A fresh copy."""
        return type(self)(self.mode)

    def __enter__(self) -> None:
        self._saved.append(_DISPATCH.get())
        _DISPATCH.set(self.mode)

    def __exit__(self, *exc: Any) -> None:
        _DISPATCH.set(self._saved.pop())


def __getattr__(name: str) -> Any:
    # the mappings and the log-prob aggregation mode live beside the distributions and the probabilistic
    # modules (which import this module): resolved on first use
    if name in ("mappings", "biased_softplus", "inv_softplus", "expln", "add_custom_mapping"):
        return getattr(importlib.import_module(f"{__package__}._mappings"), name)
    if name in ("composite_lp_aggregate", "set_composite_lp_aggregate"):
        return getattr(importlib.import_module(f"{__package__}.probabilistic"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
