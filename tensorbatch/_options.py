"""Global options (tensordict's flags, and progress bars): the print options and five modes, in one place.

Each option is a module global read where it matters, off the hot paths: ``get`` reads
``GET_DEFAULTS_TO_NONE`` only for a missing key, ``set`` reads ``LIST_TO_STACK`` only for a list that is
no tensor, ``stack``/``cat`` read ``CAPTURE_NON_TENSOR_STACK`` only for non-tensor leaves, and the repr
reads ``REPR``. A setter is a context manager, a decorator (each call runs inside a fresh block) and,
through ``.set()``, a global setter, as in tensordict. Entering a block also writes the mode to the
environment variable tensordict reads at import, so that spawned worker processes start in it.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


def _env_mode(name: str, default: bool) -> bool:
    """The mode the environment variable ``name`` sets at import (``default`` when unset or not a truth value)."""
    value = os.environ.get(name, "").lower()
    return True if value in _TRUE else False if value in _FALSE else default


EXPLICIT: set[str] = {
    g
    for g, env in (("LIST_TO_STACK", "LIST_TO_STACK"), ("CAPTURE_NON_TENSOR_STACK", "CAPTURE_NONTENSOR_STACK"))
    if os.environ.get(env, "").lower() in _TRUE | _FALSE
}
"""The modes given a value (by the environment at import, or by a setter): the others read ``None`` under
``allow_none=True``, as in tensordict."""

LIST_TO_STACK = _env_mode("LIST_TO_STACK", True)
"""A list (no tensor) set under a key becomes a NonTensorStack; when False, one NonTensorData holding it."""

CAPTURE_NON_TENSOR_STACK = _env_mode("CAPTURE_NONTENSOR_STACK", False)
"""Stacking identical non-tensor values gives one NonTensorData; when False, a NonTensorStack."""

GET_DEFAULTS_TO_NONE = _env_mode("TD_GET_DEFAULTS_TO_NONE", True)
"""``get(key)`` of a missing key returns None; when False, it raises KeyError."""

PROGRESS = _env_mode("TENSORBATCH_PROGRESS", False)
"""Calls given no ``progress=`` show tqdm progress bars (``_progress.py``); off unless set."""

REPR_DEFAULTS: dict[str, Any] = {
    "show_batch_size": True,
    "show_device": True,
    "show_is_shared": True,
    "show_shape": True,
    "show_field_device": True,
    "show_dtype": True,
    "show_field_is_shared": True,
    "show_grad": False,
    "show_is_contiguous": False,
    "show_is_view": False,
    "show_storage_size": False,
    "plain": False,
    "sort_keys": "alphabetical",
    "compact": True,
    "html": True,
}
REPR: dict[str, Any] = dict(REPR_DEFAULTS)
"""The current print options (the repr reads them; ``set_printoptions`` changes them)."""

# Options that only the detailed form (compact=False) shows: passing one without ``compact`` turns it off.
_DETAILED_ONLY = frozenset(
    {
        "show_is_shared",
        "show_field_is_shared",
        "show_grad",
        "show_is_contiguous",
        "show_is_view",
        "show_storage_size",
        "plain",
    }
)
_QUIET = {
    "show_device": False,
    "show_is_shared": False,
    "show_field_device": False,
    "show_dtype": False,
    "show_field_is_shared": False,
}

LAZY_LEGACY_DIFFERENCE = (
    "the legacy lazy mode (lazy shape ops and lazy torch.stack) is not provided: see "
    "'Legacy lazy mode' in README.md, Differences from tensordict; use lazy_stack(...) for a lazy stack"
)


class _Block:
    """Context manager, decorator and global setter of one option (subclasses say which and how)."""

    def _apply(self) -> Any:  # pragma: no cover - abstract
        """Make the option current; return what ``_restore`` needs to undo it."""
        raise NotImplementedError

    def _restore(self, old: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def set(self) -> None:
        """Apply the option for the rest of the program."""
        self._apply()

    def __enter__(self) -> None:
        # a stack of saved states, so one instance can be entered again while it is active
        self.__dict__.setdefault("_saved", []).append(self._apply())

    def __exit__(self, *exc: Any) -> None:
        self._restore(self.__dict__["_saved"].pop())

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def inside(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return inside


class _Mode(_Block):
    """A boolean mode held in a module global and mirrored in an environment variable."""

    GLOBAL = ""
    ENV = ""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def _apply(self) -> Any:
        old = (globals()[self.GLOBAL], os.environ.get(self.ENV), self.GLOBAL in EXPLICIT)
        globals()[self.GLOBAL] = self.mode
        os.environ[self.ENV] = str(self.mode)
        EXPLICIT.add(self.GLOBAL)
        return old

    def _restore(self, old: Any) -> None:
        globals()[self.GLOBAL], env, explicit = old
        if not explicit:
            EXPLICIT.discard(self.GLOBAL)
        if env is None:
            os.environ.pop(self.ENV, None)
        else:
            os.environ[self.ENV] = env


class set_list_to_stack(_Mode):
    """Set whether a list stored under a key becomes a stack of non-tensor values.

    By default (``True``), ``td[key] = ["a", "b"]`` stores a ``NonTensorStack`` with one value per
    element, one stack dim per level of regular nested lists (``[["a", 1], ["b", 2]]`` is ``[2, 2]``);
    numbers give a tensor and tensors of one shape are stacked (``[tensor([1]), tensor([2])]`` is a
    tensor of shape ``[2, 1]``), as in tensordict. With ``False`` a list is stored as numpy's array of
    it (deprecated in tensordict, which warns; use ``td.set_non_tensor(key, value)`` instead). Use it as
    a context manager, a decorator, or ``set_list_to_stack(mode).set()`` for the rest of the program.

    Args:
        mode: ``True`` to store lists as stacks, ``False`` to store them as one value.

    Examples:
        >>> from tensorbatch import TensorDict, set_list_to_stack
        >>> td = TensorDict(batch_size=[2])
        >>> with set_list_to_stack(True):
        ...     td["x"] = ["a", "b"]
        >>> type(td.get("x")).__name__, td["x"]
        ('NonTensorStack', LinkedList(['a', 'b']))
    """

    GLOBAL, ENV = "LIST_TO_STACK", "LIST_TO_STACK"

    def __init__(self, mode: bool) -> None:
        super().__init__(mode)
        if not mode:
            warnings.warn(
                "set_list_to_stack(False) is deprecated (tensordict removes it in 0.17): use "
                "td.set_non_tensor(key, value) to store a list as one value",
                DeprecationWarning,
                stacklevel=2,
            )


def list_to_stack(allow_none: bool = False) -> bool | None:
    """Whether a list stored under a key becomes a ``NonTensorStack`` (see :class:`set_list_to_stack`).

    Args:
        allow_none: give ``None`` while the mode has not been set (by the environment variable
            ``LIST_TO_STACK`` at import, or by a setter), as tensordict does.

    Examples:
        >>> from tensorbatch import list_to_stack
        >>> list_to_stack()
        True
    """
    return None if allow_none and "LIST_TO_STACK" not in EXPLICIT else LIST_TO_STACK


class set_capture_non_tensor_stack(_Mode):
    """Set whether stacking identical non-tensor values gives one value instead of a stack.

    ``False`` is the default, as tensordict 0.15's: ``torch.stack`` of non-tensor leaves gives a
    ``NonTensorStack`` even when they all hold the same value. With ``True``, identical values give one
    ``NonTensorData`` (no warning, where tensordict warns). ``torch.cat`` keeps one value when all agree either way,
    as tensordict's. Use it as a context manager, a decorator, or ``.set()`` for the rest of the program.

    Args:
        mode: ``True`` to capture identical values in one ``NonTensorData``.

    Examples:
        >>> import torch
        >>> from tensorbatch import NonTensorData, set_capture_non_tensor_stack
        >>> type(torch.stack([NonTensorData("a"), NonTensorData("a")])).__name__
        'NonTensorStack'
        >>> with set_capture_non_tensor_stack(True):
        ...     one = torch.stack([NonTensorData("a"), NonTensorData("a")])
        >>> type(one).__name__, one.data
        ('NonTensorData', 'a')
    """

    GLOBAL, ENV = "CAPTURE_NON_TENSOR_STACK", "CAPTURE_NONTENSOR_STACK"


def capture_non_tensor_stack(allow_none: bool = False) -> bool | None:
    """Whether stacking identical non-tensor values gives one value (see :class:`set_capture_non_tensor_stack`).

    Args:
        allow_none: give ``None`` while the mode has not been set (by the environment variable
            ``CAPTURE_NONTENSOR_STACK`` at import, or by a setter), as tensordict does.

    Examples:
        >>> from tensorbatch import capture_non_tensor_stack
        >>> capture_non_tensor_stack()
        False
    """
    if allow_none and "CAPTURE_NON_TENSOR_STACK" not in EXPLICIT:
        return None
    return CAPTURE_NON_TENSOR_STACK


class set_lazy_legacy(_Mode):
    """tensordict's legacy lazy mode switch: ``False`` (the default) works, ``True`` raises.

    In tensordict, the legacy lazy mode (deprecated there) makes shape operations return lazy views and
    ``torch.stack`` return lazy stacks. Shape operations here always give TensorDicts and ``torch.stack``
    stacks densely: use :func:`lazy_stack` to build a lazy stack.

    Args:
        mode: must be ``False``.

    Raises:
        NotImplementedError: for ``mode=True``, naming the README's Differences entry.

    Examples:
        >>> from tensorbatch import lazy_legacy, set_lazy_legacy
        >>> with set_lazy_legacy(False):
        ...     lazy_legacy()
        False
    """

    def __init__(self, mode: bool) -> None:
        if mode:
            raise NotImplementedError(f"set_lazy_legacy(True): {LAZY_LEGACY_DIFFERENCE}")
        super().__init__(mode)

    def _apply(self) -> Any:
        explicit = "LAZY_LEGACY" in EXPLICIT  # the mode is always False: only whether it was set changes
        EXPLICIT.add("LAZY_LEGACY")
        return explicit

    def _restore(self, old: Any) -> None:
        if not old:
            EXPLICIT.discard("LAZY_LEGACY")


def lazy_legacy(allow_none: bool = False) -> bool | None:
    """Whether tensordict's legacy lazy mode is on: always ``False`` (see :class:`set_lazy_legacy`).

    Args:
        allow_none: give ``None`` unless inside a ``set_lazy_legacy(False)`` block (or after its ``set()``),
            as tensordict does.

    Examples:
        >>> from tensorbatch import lazy_legacy
        >>> lazy_legacy()
        False
    """
    return None if allow_none and "LAZY_LEGACY" not in EXPLICIT else False


def set_get_defaults_to_none(set_to_none: bool = True) -> None:
    """Set whether ``get(key)`` of a missing key returns ``None`` (the default) or raises ``KeyError``.

    It applies to ``get`` and ``get_at`` called without a default, for the rest of the program
    (deprecated in tensordict, which warns: use ``td[key]`` to raise for a missing key).

    Args:
        set_to_none: ``True`` to return ``None``, ``False`` to raise ``KeyError``.

    Examples:
        >>> import warnings
        >>> from tensorbatch import TensorDict, set_get_defaults_to_none
        >>> td = TensorDict()
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     set_get_defaults_to_none(True)
        >>> td.get("missing") is None
        True
    """
    global GET_DEFAULTS_TO_NONE
    _warn_get_defaults("set_get_defaults_to_none()")
    GET_DEFAULTS_TO_NONE = bool(set_to_none)


def get_defaults_to_none(set_to_none: bool = True) -> bool:
    """Whether ``get(key)`` of a missing key returns ``None`` (see :func:`set_get_defaults_to_none`).

    Args:
        set_to_none: ignored (as in tensordict).
    """
    _warn_get_defaults("get_defaults_to_none()")
    return GET_DEFAULTS_TO_NONE


def _warn_get_defaults(what: str) -> None:
    warnings.warn(
        f"{what} is deprecated (tensordict removes it in 0.17): use td[key] to raise a KeyError for a missing key",
        DeprecationWarning,
        stacklevel=3,
    )


class set_printoptions(_Block):
    """Set what the repr of a TensorDict shows.

    Options not passed keep their value. Use it as a context manager or a decorator for a block, or
    ``set_printoptions(...).set()`` for the rest of the program; :func:`get_printoptions` reads them.

    The repr here is a tree, one entry per line (see the README's Differences). Every option is
    honoured in it: ``show_batch_size`` and ``show_device`` (the header), ``show_shape``,
    ``show_field_device`` and ``show_dtype`` (each tensor), ``sort_keys`` (``"alphabetical"``, a key
    function given each key, or anything else for insertion order). ``compact=False`` adds the detailed
    facts: ``show_is_shared`` (header and nodes), ``show_field_is_shared``, ``show_grad``,
    ``show_is_contiguous``, ``show_is_view``, ``show_storage_size`` and ``plain`` (a value summary:
    mean and std, or min and max). Passing one of those without ``compact`` sets ``compact=False``, as
    in tensordict. ``html`` is kept for compatibility (no notebook display here).

    Args:
        verbose: when ``False``, hide devices, dtypes and ``is_shared`` unless an option sets them.
        **options: the options above.

    Raises:
        TypeError: naming an unknown option.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict, set_printoptions
        >>> td = TensorDict(b=torch.zeros(3), a=torch.ones(3, dtype=torch.int64), batch_size=[3])
        >>> with set_printoptions(show_device=False, show_field_device=False):
        ...     print(td)
        TensorDict(batch_size=[3])
        |-- a: Tensor(shape=[3], dtype=int64)
        `-- b: Tensor(shape=[3], dtype=float32)
    """

    def __init__(self, *, verbose: bool = True, **options: Any) -> None:
        unknown = set(options) - set(REPR_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown print options {sorted(unknown)}; valid options: {sorted(REPR_DEFAULTS)}")
        if "compact" not in options and not _DETAILED_ONLY.isdisjoint(options):
            options["compact"] = False
        self.options = options if verbose else {**_QUIET, **options}

    def _apply(self) -> Any:
        old = dict(REPR)
        REPR.update(self.options)
        return old

    def _restore(self, old: Any) -> None:
        REPR.update(old)


def get_printoptions() -> dict[str, Any]:
    """The current print options, as a new dict (see :class:`set_printoptions`).

    Examples:
        >>> from tensorbatch import get_printoptions
        >>> get_printoptions()["sort_keys"]
        'alphabetical'
    """
    return dict(REPR)


class set_progress:
    """Turn tqdm progress bars on or off for the calls a user waits on, when they are given no ``progress=``.

    The calls: ``memmap``/``memmap_``/``memmap_like``/``save``, ``pack_memmap``, ``load_memmap``, ``consolidate``,
    ``to_h5``/``PersistentTensorDict.from_dict``, ``to_store``/``TensorDictStore.from_tensordict`` and the table
    reads (``from_pandas``, ``from_csv``, ``from_json``, ``from_parquet``, ``from_arrow``). Bars are off by
    default; the environment variable ``TENSORBATCH_PROGRESS=1`` turns them on at import. A call's own
    ``progress=True``/``False`` wins over this switch. Showing a bar needs tqdm (the ``progress`` extra).

    Like ``torch.set_grad_enabled``, calling it sets the mode at once, for the rest of the program; used as a
    ``with`` block, it puts the previous mode back at the end of the block.

    Note:
        An addition: tensordict 0.15.3 has no progress bars on these calls.

    Args:
        mode: ``True`` to show bars, ``False`` to hide them.

    Examples:
        >>> from tensorbatch import get_progress, set_progress
        >>> with set_progress(True):
        ...     get_progress()
        True
        >>> get_progress()
        False
    """

    def __init__(self, mode: bool) -> None:
        global PROGRESS
        self._old = PROGRESS
        PROGRESS = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        global PROGRESS
        PROGRESS = self._old


def get_progress() -> bool:
    """Whether calls given no ``progress=`` show progress bars (see :class:`set_progress`).

    Examples:
        >>> from tensorbatch import get_progress
        >>> get_progress()
        False
    """
    return PROGRESS
