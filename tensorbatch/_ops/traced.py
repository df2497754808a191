"""The walks that dynamo traces: lean leaf maps for ``torch.compile``.

Dynamo runs the library's Python bytecode by bytecode on every compile. The generic engine
(``traverse.map_leaves`` with its options, ``flat_leaves``/``from_leaves``, the in-place checks) made a
read/apply/update step on 10 leaves trace ~4,200 bytecodes (the same step on plain dicts: 537), and its
compile take 2.4x as long. While dynamo traces (``dynamo_compiling()``: a constant to dynamo, one call in
eager) the ops of such a step take these walks instead, over a *plain* tree: nodes of the in-memory class,
plain tensor leaves. They leave out what tracing already guarantees (an in-place write that cannot work
fails the trace, so before any leaf is written) and hand everything else to the generic engine, which then
gives what eager gives: non-tensor leaves, lazy stacks, typed wrappers, key sets that differ, results that
are not tensors starting with their node's batch size.

What a compile costs here is less the bytecodes than what dynamo does per call, per guard and per object:
an inlined call (argument binding, a guard on every default used), a module global (a guard on the module
and one on the value), a set or tuple membership test (a guard on every member). So the entries take every
argument explicitly, the walks are plain loops over a node's items (dynamo traces them for less than
``map``/``list`` calls and type counts) and build their nodes inline, and the callers come here before
any generic check (``is_td``: a guard per collection class).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_Tensor = torch.Tensor


def plain_leaves(td: Any, other: Any) -> tuple[list[Any], list[Any]] | None:
    """The leaves of ``td`` and the matching leaves of ``other`` (a TensorDict or None), in walk order.

    None unless ``td`` (and ``other``) is a plain tree, with the same keys.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> [x.tolist() for x in plain_leaves(td, None)[0]]
        [[0.0, 0.0], [1.0, 1.0]]
        >>> plain_leaves(td, td.exclude("a")) is None  # key sets differ: the generic engine says how
        True
    """
    dense = type(td)
    if dense is not td._dense_cls:
        return None
    leaves: list[Any] = []
    rhs: list[Any] = []
    return (leaves, rhs) if _leaves(td, other, dense, leaves, rhs) else None


def _leaves(td: Any, other: Any, dense: Any, leaves: list[Any], rhs: list[Any]) -> bool:
    data = td._tensordict
    if other is not None:
        if type(other) is not dense:
            return False
        theirs = other._tensordict
        if len(theirs) != len(data):
            return False
    for key, value in data.items():
        if type(value) is _Tensor:
            if other is not None:
                mate = theirs.get(key)
                if type(mate) is not _Tensor:
                    return False
                rhs.append(mate)
            leaves.append(value)
        elif type(value) is not dense or not _leaves(
            value, None if other is None else theirs.get(key), dense, leaves, rhs
        ):
            return False
    return True


def lean_map(td: Any, fn: Callable[..., Any], other: Any) -> tuple[Any, Callable[..., Any]]:
    """``fn(leaf)`` per leaf of a plain tree, for ``apply`` (``fn(leaf, other_leaf)``: ``other`` matched by key).

    Returns the new tree, or None and the function for the generic engine to call instead of ``fn``.

    Results must be tensors starting with their node's batch size, else the generic engine drops, rebuilds
    or refuses them; the function it gets then replays the calls made (a user function runs once per leaf).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> lean_map(td, lambda x, y: x + y + 1, td)[0]["n", "b"]
        tensor([3., 3.])
        >>> out, fn = lean_map(td, lambda x: None, None)  # fn ran on "a": the generic engine drops it
        >>> out is None, fn(td["a"]) is None
        (True, True)
    """
    dense = type(td)
    if dense is not td._dense_cls:
        return None, fn
    done: list[Any] = []
    out = _checked(td, fn, other, done, dense)
    return out, replay(done, fn) if out is None and done else fn


def unary(td: Any, op: Callable[..., Any]) -> Any:
    """``op(leaf)`` per leaf of a plain tree (``op``: a library op, pure), or None.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> unary(TensorDict({"a": torch.zeros(2)}, batch_size=[2]), torch.exp)["a"]
        tensor([1., 1.])
    """
    dense = type(td)
    return _each(td, op, dense) if dense is td._dense_cls else None


def binary(td: Any, other: Any, op: Callable[..., Any], numbers: bool) -> Any:
    """``op(leaf, other)`` per leaf of a plain tree, or None.

    ``other`` is a TensorDict, a 0-dim tensor or (``numbers``: ``op`` takes Python scalars) an int or a float.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
        >>> binary(td, 2.0, torch.mul, True)["a"]
        tensor([2., 2.])
        >>> binary(td, torch.ones(2), torch.mul, True) is None  # aligned with the batch dims: the generic engine
        True
    """
    dense = type(td)
    if dense is not td._dense_cls:
        return None
    kind = type(other)
    if kind is dense:
        return _pairs(td, op, other, dense)
    if (kind is _Tensor and not other.ndim) or (numbers and (kind is float or kind is int)):
        return _with(td, op, other, dense)
    return None


# The walks, one per kind of call: a test per leaf less than one walk with options. Each node is built inline
# (TensorDict._new_node's body: an inlined call less per node). None: not a plain tree (or a result that
# does not fit), for the generic engine.


def _each(td: Any, fn: Callable[..., Any], dense: Any) -> Any:
    out: dict[str, Any] = {}
    for key, value in td._tensordict.items():
        if type(value) is _Tensor:
            out[key] = fn(value)
        elif type(value) is dense:
            node = _each(value, fn, dense)
            if node is None:
                return None
            out[key] = node
        else:
            return None
    node = object.__new__(dense)
    node._tensordict = out
    node._batch_size = td._batch_size
    node._device = td._device
    node._names = td._names
    node._is_locked = False
    return node


def _with(td: Any, fn: Callable[..., Any], operand: Any, dense: Any) -> Any:
    out: dict[str, Any] = {}
    for key, value in td._tensordict.items():
        if type(value) is _Tensor:
            out[key] = fn(value, operand)
        elif type(value) is dense:
            node = _with(value, fn, operand, dense)
            if node is None:
                return None
            out[key] = node
        else:
            return None
    node = object.__new__(dense)
    node._tensordict = out
    node._batch_size = td._batch_size
    node._device = td._device
    node._names = td._names
    node._is_locked = False
    return node


def _pairs(td: Any, fn: Callable[..., Any], other: Any, dense: Any) -> Any:
    data = td._tensordict
    theirs = other._tensordict
    if len(theirs) != len(data):
        return None
    out: dict[str, Any] = {}
    for key, value in data.items():
        mate = theirs.get(key)
        if type(value) is _Tensor:
            if type(mate) is not _Tensor:
                return None
            out[key] = fn(value, mate)
        elif type(value) is dense and type(mate) is dense:
            node = _pairs(value, fn, mate, dense)
            if node is None:
                return None
            out[key] = node
        else:
            return None
    node = object.__new__(dense)
    node._tensordict = out
    node._batch_size = td._batch_size
    node._device = td._device
    node._names = td._names
    node._is_locked = False
    return node


def _checked(td: Any, fn: Callable[..., Any], other: Any, done: list[Any], dense: Any) -> Any:
    """``apply``'s walk: ``done`` collects the results so far (replayed if the generic engine takes over)."""
    data = td._tensordict
    if other is not None:
        if type(other) is not dense:
            return None
        theirs = other._tensordict
        if len(theirs) != len(data):
            return None
    bs = td._batch_size
    nd = len(bs)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if type(value) is _Tensor:
            if other is None:
                result = fn(value)
            else:
                mate = theirs.get(key)
                if type(mate) is not _Tensor:
                    return None
                result = fn(value, mate)
            done.append(result)
            # (sizes may be symbolic: compared one result at a time)
            if type(result) is not _Tensor or (nd and result.shape[:nd] != bs):
                return None
        elif type(value) is dense:
            result = _checked(value, fn, None if other is None else theirs.get(key), done, dense)
            if result is None:
                return None
        else:
            return None
        out[key] = result
    node = object.__new__(dense)
    node._tensordict = out
    node._batch_size = bs
    node._device = td._device
    node._names = td._names
    node._is_locked = False
    return node


def replay(results: list[Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that gives ``results`` for its first calls: the generic engine redoes a walk, not the calls made.

    Examples:
        >>> f = replay([1, 2], lambda x: x * 10)
        >>> f("anything"), f("anything"), f(3)
        (1, 2, 30)
    """
    it = iter(results)

    def call(*args: Any) -> Any:
        for result in it:
            return result
        return fn(*args)

    return call
