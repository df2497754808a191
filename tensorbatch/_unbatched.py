"""``UnbatchedTensor``: a tensor leaf that does not have the batch dims of the TensorDict holding it.

It is a ``torch.Tensor`` subclass. Torch functions called on it compute on its data and return
``UnbatchedTensor`` results (``__torch_function__``), so value operations of a TensorDict (arithmetic,
``clone``, ``to``, ``apply``) need nothing special. Batch operations (index, reshape, stack, unbind,
reductions over batch dims...) must leave its data alone: it takes part in them through the same
*positions* protocol as the non-tensor leaves (see ``_nontensor.py``): the traversal applies the batch
op to a zero-stride stand-in shaped like the batch (``_positions``) and rebuilds the leaf, data
unchanged, with the batch size of the result (``_from_positions``).

This module depends on torch (and ``_compat``) only: the traversal (``_ops``) imports it.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.overrides import get_default_nowrap_functions

from . import _compat

_Size = torch.Size
_NO_WRAP = get_default_nowrap_functions()  # ``t._base``, ``t.grad``: their results are not re-wrapped
_disabled = torch._C.DisableTorchFunctionSubclass


class UnbatchedTensor(torch.Tensor):
    """A tensor entry that batch operations of its TensorDict leave unchanged.

    A plain tensor entry must have a shape that starts with the batch size; an ``UnbatchedTensor``
    can have any shape: it belongs to the whole batch (a lookup table, shared parameters, a mask).
    Indexing, ``reshape``/``view``/``flatten``/``unsqueeze``/``squeeze``/``permute``/``transpose``/
    ``expand``, ``unbind``/``split``, ``torch.stack``/``torch.cat`` and reductions over batch dims return
    the entry with its data and shape unchanged (an alias of the same storage). Value operations
    (arithmetic, ``clone``, ``to``, ``apply``) apply to it as to any tensor and return an
    ``UnbatchedTensor``.

    ``batch_size`` is the batch size of the TensorDict that holds it (set when it is stored, and after
    each batch operation); it does not change the shape of the data.

    Args:
        data: the payload; data that is not a tensor is converted with :func:`torch.as_tensor`.
        batch_size: the batch size it is given; defaults to ``[]``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict, UnbatchedTensor
        >>> td = TensorDict(table=UnbatchedTensor(torch.zeros(3, 4)), obs=torch.zeros(2, 5), batch_size=[2])
        >>> td[0]["table"].shape, td.reshape(1, 2)["table"].batch_size
        (torch.Size([3, 4]), torch.Size([1, 2]))
        >>> type(td["table"] + 1).__name__
        'UnbatchedTensor'
    """

    @staticmethod
    def __new__(cls, data: Any, batch_size: Any = None) -> UnbatchedTensor:
        if isinstance(data, UnbatchedTensor):
            return data if batch_size is None else data._with_batch_size(_Size(batch_size))
        if not isinstance(data, torch.Tensor):
            data = torch.as_tensor(data)
        out = data.as_subclass(cls)  # shares the storage and stays on the autograd graph
        if batch_size is not None:
            out._batch_size = _Size(batch_size)
        return out  # type: ignore[no-any-return]  # as_subclass(cls) is a cls

    # ([] until it is stored; a class default, not a __dict__ lookup: dynamo breaks the graph on a tensor
    # subclass's __dict__, and a graph break inside __torch_function__ compiles that frame with no guard on
    # ``func`` (torch 2.13): the next op of an UnbatchedTensor in a compiled function replayed the first.)
    _batch_size: torch.Size = _Size()

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the TensorDict holding this entry (``[]`` when it was never stored)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._batch_size = _Size(value)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        with _disabled():
            result = func(*args, **(kwargs or {}))
        if func in _NO_WRAP:
            return result
        return _wrap(result, args, _batch_size_in(args))

    def _plain(self) -> torch.Tensor:
        """The data as a plain tensor (an alias)."""
        with _disabled():
            return self.as_subclass(torch.Tensor)

    def _with_batch_size(self, batch_size: torch.Size) -> UnbatchedTensor:
        """An alias of this entry (same data, same storage) with ``batch_size``."""
        with _disabled():
            out = self.as_subclass(type(self))
        out._batch_size = batch_size
        return out

    # the batch-op protocol of the traversal (see the module docstring)
    def _positions(self) -> torch.Tensor:
        # floating: the reductions a batch op may be (mean, std...) refuse integers
        return torch.zeros((), device=self.device).expand(self.batch_size)

    def _from_positions(self, positions: torch.Tensor) -> UnbatchedTensor:
        return self._with_batch_size(positions.shape)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's is untyped
        return f"UnbatchedTensor({self._plain()!r})"

    def __str__(self) -> str:
        return str(self._plain())

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild, (self._plain(), self.batch_size))


# (a frame of its own under dynamo: wrong attribute reads, see _compat.skip_dynamo_frame)
_compat.skip_dynamo_frame(UnbatchedTensor.__torch_function__)


def _rebuild(data: Any, batch_size: Any) -> UnbatchedTensor:
    """Unpickle an UnbatchedTensor (allowed in ``torch.load(weights_only=True)``).

    Raises:
        TypeError: for crafted arguments: ``data`` no tensor, ``batch_size`` no ``torch.Size``.
    """
    if not isinstance(data, torch.Tensor) or not isinstance(batch_size, torch.Size):
        raise TypeError(
            f"unpickling an UnbatchedTensor: expected a tensor and a torch.Size, got a "
            f"{type(data).__name__} and a {type(batch_size).__name__}"
        )
    return UnbatchedTensor(data.as_subclass(torch.Tensor), batch_size)


_compat.allow_in_weights_only_load(_rebuild)


def _batch_size_in(args: Any) -> torch.Size | None:
    """The batch size of the first ``UnbatchedTensor`` among the arguments (lists looked into)."""
    for arg in args:
        if isinstance(arg, UnbatchedTensor):
            return arg.batch_size
        if isinstance(arg, (list, tuple)):
            found = _batch_size_in(arg)
            if found is not None:
                return found
    return None


def _wrap(result: Any, args: Any, batch_size: torch.Size | None) -> Any:
    """``result`` with its tensors as ``UnbatchedTensor`` (carrying ``batch_size``).

    A list op (``torch._foreach_*``, ``broadcast_tensors``) maps the i-th input to the i-th output:
    only the outputs of unbatched inputs are wrapped, so a plain leaf beside an unbatched one stays plain.
    """
    if isinstance(result, torch.Tensor):
        if type(result) is not torch.Tensor:  # already unbatched (an in-place op returns its input)
            return result
        out = result.as_subclass(UnbatchedTensor)
        if batch_size is not None:
            out._batch_size = batch_size
        return out
    if isinstance(result, (list, tuple)):
        first = args[0] if args else None
        if isinstance(first, (list, tuple)) and len(first) == len(result):
            items = [
                _wrap(r, (), batch_size) if isinstance(a, UnbatchedTensor) else r
                for r, a in zip(result, first, strict=True)
            ]
        else:
            items = [_wrap(r, (), batch_size) for r in result]
        return type(result)(items)  # (torch.return_types too: they take a sequence)
    return result


def check_shared(items: list[Any], what: str, where: str) -> None:
    """Before ``items`` (one entry per stacked TensorDict) become one entry: the first one's data.

    Raises ``RuntimeError`` when an item is not unbatched; warns, as tensordict 0.15.3 does, when an item's
    data lie in other storage than the first's (a clone with equal values warns too: only the first is kept).
    """
    first = items[0]
    for item in items[1:]:
        if not isinstance(item, UnbatchedTensor):
            raise RuntimeError(
                f"{what}: the entry {where} is an UnbatchedTensor in the first TensorDict and a "
                f"{type(item).__name__} in another"
            )
    if any(
        item is not first and not (item.shape == first.shape and item.data_ptr() == first.data_ptr())
        for item in items[1:]
    ):
        warnings.warn(
            f"{what}: the UnbatchedTensor entries {where} hold their data in different storage: the result keeps "
            "the first one's (an UnbatchedTensor is shared by the whole batch; use a plain tensor for "
            "data per batch element)",
            UserWarning,
            stacklevel=4,
        )


def is_unbatched(value: Any) -> bool:
    """True for an ``UnbatchedTensor`` (or subclass) entry."""
    return isinstance(value, UnbatchedTensor)


__all__ = ["UnbatchedTensor", "check_shared", "is_unbatched"]
