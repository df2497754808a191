"""The walks that dynamo traces: lean leaf maps for ``torch.compile`` (issue 15).

Dynamo runs the library's Python bytecode by bytecode on every compile. The generic engine
(``traverse.map_leaves`` with its options, ``flat_leaves``/``from_leaves``, the in-place checks) made a
read/apply/update step on 10 leaves trace ~4,200 bytecodes (the same step on plain dicts: 537), and its
compile take 2.4x as long. While dynamo traces (``dynamo_compiling()``: a constant to dynamo, one call in
eager) the ops of such a step take these walks instead, over a *plain* tree: nodes of the in-memory class,
plain tensor leaves. They leave out what tracing already guarantees (an in-place write that cannot work
fails the trace, so before any leaf is written) and hand everything else to the generic engine, which then
gives what eager gives: non-tensor leaves, lazy stacks, typed wrappers, key sets that differ, results that
are not tensors starting with their node's batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

_Tensor = torch.Tensor


def plain_leaves(td: Any, other: Any = None) -> tuple[list[Any], list[Any]] | None:
    """The leaves of ``td`` and the matching leaves of ``other`` (a TensorDict or None), in walk order.

    None unless ``td`` (and ``other``) is a plain tree, with the same keys.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> [x.tolist() for x in plain_leaves(td)[0]]
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
    n = len(data)
    if other is not None:
        if type(other) is not dense or len(other._tensordict) != n:
            return False
        theirs = other._tensordict
    if list(map(type, data.values())).count(_Tensor) == n:  # a node of tensors, the usual case
        if other is not None:
            found = list(map(theirs.get, data))  # (map, list(), count: no bytecode per leaf to trace)
            if list(map(type, found)).count(_Tensor) != n:
                return False
            rhs.extend(found)
        leaves.extend(data.values())
        return True
    for key, value in data.items():
        if type(value) is _Tensor:
            if other is not None:
                if type(theirs.get(key)) is not _Tensor:
                    return False
                rhs.append(theirs[key])
            leaves.append(value)
        elif type(value) is not dense or not _leaves(value, None if other is None else theirs.get(key), dense,
                                                      leaves, rhs):
            return False
    return True


def lean_map(td: Any, fn: Callable[..., Any], other: Any = None, check: bool = False,
             operand: Any = None) -> tuple[Any, Callable[..., Any]]:
    """``fn(leaf)`` (``fn(leaf, other_leaf)``, ``fn(leaf, operand)``) per leaf of a plain tree: the new tree,
    or None and the function for the generic engine to call instead of ``fn``.

    ``other`` is a TensorDict matched by key; ``operand`` (not None) is passed with every leaf.

    ``check`` (a user function): results must be tensors starting with their node's batch size, else the
    generic engine drops, rebuilds or refuses them; the function it gets then replays the calls made.
    Without ``check`` (a library op), ``fn`` is pure: the generic engine calls it again.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
        >>> lean_map(td, lambda x, y: x + y + 1, td)[0]["n", "b"]
        tensor([3., 3.])
        >>> out, fn = lean_map(td, lambda x: None, check=True)  # fn ran on "a": the generic engine drops it
        >>> out is None, fn(td["a"]) is None
        (True, True)
    """
    dense = type(td)
    if dense is not td._dense_cls:
        return None, fn
    done: list[Any] | None = [] if check else None
    out = _map(td, fn, other, done, dense, operand)
    return out, replay(done, fn) if out is None and done else fn


def _map(td: Any, fn: Callable[..., Any], other: Any, done: list[Any] | None, dense: Any, operand: Any) -> Any:
    """One node of :func:`lean_map` (``done``: the results so far, when they are checked)."""
    data = td._tensordict
    n = len(data)
    if other is not None:
        if type(other) is not dense or len(other._tensordict) != n:
            return None
        theirs = other._tensordict
    if done is not None:
        bs = td._batch_size
        nd = len(bs)
    out: dict[str, Any] = {}
    if list(map(type, data.values())).count(_Tensor) == n:  # a node of tensors: no bytecode per leaf
        if other is None:
            results = list(map(fn, data.values())) if operand is None else list(map(fn, data.values(), [operand] * n))
        else:
            found = list(map(theirs.get, data))
            if list(map(type, found)).count(_Tensor) != n:
                return None
            results = list(map(fn, data.values(), found))
        if done is not None:
            done.extend(results)
            if list(map(type, results)).count(_Tensor) != n:
                return None
            for result in results if nd else ():  # (a loop: sizes may be symbolic, list.count compares by identity)
                if result.shape[:nd] != bs:
                    return None
        out.update(zip(data, results))
        return td._new_node(out)
    for key, value in data.items():
        if type(value) is _Tensor:
            if other is None:
                result = fn(value) if operand is None else fn(value, operand)
            elif type(theirs.get(key)) is _Tensor:
                result = fn(value, theirs[key])
            else:
                return None
            if done is not None:
                done.append(result)
                if type(result) is not _Tensor or (nd and result.shape[:nd] != bs):
                    return None
            out[key] = result
        elif type(value) is dense:
            node = _map(value, fn, None if other is None else theirs.get(key), done, dense, operand)
            if node is None:
                return None
            out[key] = node
        else:
            return None
    return td._new_node(out)


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
