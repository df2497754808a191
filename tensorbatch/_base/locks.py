"""Locking a tree of TensorDicts, and the lock graph that keeps a shared sub-TensorDict locked.

A TensorDict can be an entry of several trees. Locking a tree records, on every nested TensorDict,
the TensorDicts above it that hold the lock (weakly). Unlocking refuses, as tensordict does, while a
nested TensorDict (or the one unlocked) still has a locked holder outside what is being unlocked:
that holder's lock would otherwise silently stop protecting it. The record is kept out of the
TensorDict's slots (only locking trees with nested TensorDicts pays for it).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from .._compat import dynamo_compiling
from .._ops import pointwise
from .._ops.traverse import NON_TENSOR_TYPES, named_nodes
from . import writeback

if TYPE_CHECKING:
    from ..base import TensorDictBase

_T = TypeVar("_T")
_weakref = weakref.ref  # (a global: one lookup less on every shape op)

# id(td) -> (weakref to td, weakrefs to the locked TensorDicts holding it)
_HOLDERS: dict[int, tuple[weakref.ref[Any], list[weakref.ref[Any]]]] = {}

LOCKED_GRAPH_MSG = (
    "Cannot unlock a tensordict that is part of a locked graph. Unlock the root tensordict first. "
    "If the tensordict is part of multiple graphs, group the graphs under a common tensordict an unlock this root."
)


def _holders(td: Any) -> list[weakref.ref[Any]] | None:
    entry = _HOLDERS.get(id(td))
    if entry is None:
        return None
    if entry[0]() is not td:  # a dead TensorDict's id, reused
        del _HOLDERS[id(td)]
        return None
    return entry[1]


def _ref(td: Any, callback: Any = None) -> weakref.ref[Any] | None:
    """A weak reference to ``td``; None for a backend without ``__weakref__`` (it takes no part in the graph)."""
    try:
        return weakref.ref(td, callback)
    except TypeError:
        return None


def _add_holders(td: Any, refs: list[weakref.ref[Any]]) -> None:
    held = _holders(td)
    if held is None:
        key = id(td)
        ref = _ref(td, lambda _, key=key: _HOLDERS.pop(key, None))
        if ref is not None and refs:
            _HOLDERS[key] = (ref, list(refs))
        return
    held.extend(r for r in refs if not any(r is h for h in held))


def lock_(self: TensorDictBase) -> TensorDictBase:
    """Lock this TensorDict and its nested ones: no key may be added or removed.

    Also a context manager: ``with td.lock_():`` unlocks on exit, unless ``td`` was locked already.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": 0})
        >>> with td.lock_():
        ...     td.is_locked
        True
        >>> td.is_locked
        False
    """
    undo = _nothing if self.is_locked else unlock_
    nodes = named_nodes(self, members=True)  # a lazy stack's members are what it stores
    for _, node in nodes:
        node._set_lock(True)
        _lock_non_tensor(node, True)
    if len(nodes) > 1:  # each nested node records the locked nodes above it (a parent comes before its nodes)
        ref = _ref(self)
        # node path -> weak references to that node and the nodes above it
        chains: dict[tuple[str, ...], list[weakref.ref[Any]]] = {(): [] if ref is None else [ref]}
        for path, node in nodes[1:]:
            above = chains[path[:-1]]
            _add_holders(node, above)
            ref = _ref(node)
            chains[path] = above if ref is None else [*above, ref]
    self._last_op = undo
    return self


def _check_unlock(td: Any, retry: bool = True) -> None:
    held = _holders(td)
    if not held:
        return
    holder = next((obj for obj in (r() for r in held) if obj is not None and obj.is_locked), None)
    if holder is None:
        del _HOLDERS[id(td)]
        return
    if retry:  # the holder may be garbage held only by a cycle
        del holder
        gc.collect()
        _check_unlock(td, retry=False)
        return
    raise RuntimeError(f"{LOCKED_GRAPH_MSG} self: {td!r}, obj: {holder!r}")


def unlock_(self: TensorDictBase) -> TensorDictBase:
    """Unlock this TensorDict and its nested ones.

    Raises:
        RuntimeError: when this TensorDict, or one nested in it, is also an entry of another locked
            TensorDict (unlock that one first). Everything stays locked.

    Also a context manager: ``with td.unlock_():`` locks again on exit, if ``td`` was locked.
    """
    undo = lock_ if self.is_locked else _nothing
    nodes = named_nodes(self, post_order=True, members=True)
    for _, node in nodes:
        node._set_lock(False)
        _lock_non_tensor(node, False)
    subs = [node for _, node in nodes[:-1]]
    try:
        for sub in subs:
            _check_unlock(sub)
        _check_unlock(self)
    except RuntimeError:
        lock_(self)
        raise
    self._last_op = undo
    return self


def _lock_non_tensor(node: Any, value: bool) -> None:
    """Lock or unlock the non-tensor leaves of an in-memory node with it (tensordict's leaves are nodes)."""
    entries = getattr(node, "_tensordict", None)
    if type(entries) is dict and not NON_TENSOR_TYPES.isdisjoint(map(type, entries.values())):  # (C-speed test)
        for leaf in entries.values():
            if type(leaf) in NON_TENSOR_TYPES:
                leaf._set_lock(value)


def _nothing(td: Any) -> None:
    """The undo of a lock_/unlock_ that changed nothing (a ``with`` block on it then does nothing either)."""


# id(td) -> the undo functions of the ``with`` blocks entered on td (innermost last); only while inside them
_ENTERED: dict[int, list[Any]] = {}


def __enter__(self: TensorDictBase) -> TensorDictBase:
    """Enter a ``with`` block on the result of ``lock_``, ``unlock_`` or ``to_module``: exiting undoes it."""
    _ENTERED.setdefault(id(self), []).append(getattr(self, "_last_op", None))
    return self


def __exit__(self: TensorDictBase, exc_type: Any, exc: Any, tb: Any) -> None:
    """Undo the operation the block was entered with (also when the block raised, which then propagates).

    A block on the result of a shape op, ``to`` or ``flatten_keys`` writes it back into the TensorDict it was
    made from, unless the block raised (see :mod:`.writeback`). A block entered with nothing to undo (a plain
    ``with td:``) calls ``td._exit_plain()``: nothing for in-memory TensorDicts; file- and server-backed ones close.
    """
    if not exit_undo(self, exc_type is not None and issubclass(exc_type, Exception)):
        self._exit_plain()


def exit_undo(self: TensorDictBase, raised: bool = False) -> bool:
    """Undo what the ``with`` block being left was entered with; False when it was entered with nothing to undo.

    ``raised``: the block raised an exception (a lock is undone all the same; nothing is written back).
    """
    stack = _ENTERED[id(self)]
    undo = stack.pop()
    if not stack:
        del _ENTERED[id(self)]
    if undo is None:
        return False
    if type(undo) is tuple:  # a result to write back: (op name, args, kwargs, weak reference to its source)
        if not raised:
            writeback.write_back(self, undo)
        return True
    undo(self)
    return True


def clear_refs_for_compile_(self: TensorDictBase) -> TensorDictBase:
    """Forget the last ``lock_``/``unlock_``/``to_module`` of this TensorDict and its nested ones.

    The record lets ``with td.lock_():`` undo the operation; clearing it drops the references it holds
    (the module of a ``to_module``). Returns ``self``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": {"b": 0}}).lock_()
        >>> with td.clear_refs_for_compile_():  # nothing to undo: td stays locked
        ...     pass
        >>> td.is_locked
        True
    """
    for _, node in named_nodes(self, members=True):
        node._last_op = None
    return self


# ------------------------------------------------------------------------------------ results that keep the lock
# The operations whose result is locked when the TensorDict they are called on is: tensordict 0.15.3's rule,
# measured op by op (tests/differential/test_vs_tensordict_locks.py). Its pointwise math, casts, moves and
# shape views keep the lock; indexing, clone/copy/contiguous, comparisons, clamp, masked_fill, reductions (but
# norm), apply, select/exclude, stack/cat, unbind, pad and new_* give an unlocked result. Names tensordict lacks
# follow their family (``floor_divide`` as ``//``'s siblings, ``eq`` as ``==``).
_DROP_LOCK = frozenset(  # table names whose results are unlocked (tensordict's | and ^ operators drop it too)
    {"clamp", "eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
    | {"__or__", "__ror__", "__xor__", "__rxor__"}
)
KEEP_LOCK_SHAPE = (
    "view", "reshape", "permute", "transpose", "unsqueeze", "squeeze", "flatten", "unflatten", "expand",
    "expand_as", "split", "chunk", "tensor_split", "movedim", "moveaxis", "swapaxes", "swapdims", "repeat",
    "repeat_interleave", "roll", "flip", "fliplr", "flipud", "narrow", "detach", "cpu", "cuda", "to", "where",
    "norm",
)  # fmt: skip


def keep_lock(method: Any, dtype_view: bool = False, name: str | None = None, keep: bool = True) -> Any:
    """``method`` (a TensorDict method or a torch function taking one first) whose results keep its lock.

    Not under ``torch.compile`` (locking a result walks and records its nodes: not worth a graph break), nor
    (``dtype_view``: ``view``) when the first argument is a dtype. ``name``: the result also records how to write
    itself back at the end of a ``with`` block on it (:func:`record`); ``keep=False``: only that.
    """

    @functools.wraps(method)
    def keeping(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = self.batch_size if kwargs and name is not None and kwargs.get("inplace") else None
        out = method(self, *args, **kwargs)
        if (
            keep
            and out is not self
            and self.is_locked
            and not torch.compiler.is_compiling()
            and not (dtype_view and args and isinstance(args[0], torch.dtype))
        ):
            for result in out if isinstance(out, (tuple, list)) else (out,):
                if not getattr(result, "is_locked", True):  # (a TensorDict; tensors and locked ones pass)
                    result.lock_()
        if name is not None:
            try:  # (record's body, inlined: every shape op's path)
                source = self if dynamo_compiling() else self.__weakref__ or _weakref(self)
                out._last_op = (name, args, kwargs, source, before)
            except (AttributeError, TypeError):  # not a TensorDict, or no weak reference to ``self``
                _record_strong(out, name, args, kwargs, self, before)
        return out

    return keeping


def record(out: _T, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], source: Any, before: Any = None) -> _T:
    """Record on ``out`` how a ``with`` block on it writes back into ``source`` (see :mod:`.writeback`); ``out``.

    The record, in ``out._last_op``: ``(name, args, kwargs, weak reference to source, batch size before)``, the
    last for an ``inplace=True`` call (``out`` is ``source``, changed; None otherwise). :func:`keep_lock` does this
    inline for the methods it wraps; ``flatten_keys``/``unflatten_keys`` call it. Under ``torch.compile`` the
    record holds ``source`` itself (a weak reference breaks the graph), as tensordict's; so it does for a class
    without weak references (an HDF5 file's TensorDict).
    """
    try:  # (an existing weak reference is reused: cheaper than asking weakref)
        ref = source if dynamo_compiling() else source.__weakref__ or _weakref(source)
        out._last_op = (name, args, kwargs, ref, before)  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # not a TensorDict, or no weak reference to the source
        _record_strong(out, name, args, kwargs, source, before)
    return out


def _record_strong(out: Any, name: str, args: Any, kwargs: Any, source: Any, before: Any) -> None:
    """The record holding ``source`` itself: a class without weak references (an HDF5 file's TensorDict)."""
    with contextlib.suppress(AttributeError):  # (``out`` is no TensorDict: nothing to record)
        out._last_op = (name, args, kwargs, source, before)


def install_keep_lock(cls: type[Any], drop: frozenset[str] = frozenset()) -> None:
    """Wrap the lock-keeping and writing-back methods that ``cls`` itself defines with :func:`keep_lock`.

    ``drop`` names the methods whose results ``cls`` leaves as they come (a lazy stack's ``expand`` is a new
    stack). ``data`` is a property.
    """
    done: dict[Any, Any] = {}
    names = (*pointwise.METHODS, *pointwise.OPERATORS, *pointwise.REFLECTED, *KEEP_LOCK_SHAPE, "data")
    for name in dict.fromkeys((*names, *sorted(writeback.WRITE_BACK - writeback.RECORD_THEMSELVES))):
        method = cls.__dict__.get(name)
        records = name in writeback.WRITE_BACK and name not in writeback.RECORD_THEMSELVES
        keep = name in names and name not in _DROP_LOCK and name not in drop
        if method is None or not (keep or records):
            continue
        if isinstance(method, property):
            setattr(cls, name, property(keep_lock(method.fget), method.fset, method.fdel, method.__doc__))
        elif callable(method):  # an alias (``divide`` of ``div``) stays the same object as what it names
            if method not in done:
                done[method] = keep_lock(method, dtype_view=name == "view", name=name if records else None, keep=keep)
            setattr(cls, name, done[method])
