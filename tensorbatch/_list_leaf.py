"""The leaf a Python list becomes when it is set into a TensorDict under ``set_list_to_stack(True)``.

The list is read level by level, as tensordict 0.15 reads it:

- a level whose items are all lists reads each item first; their results stand for them;
- Python numbers (``bool``, ``int``, ``float``) give a tensor;
- tensors of one shape are stacked; tensors of different shapes give a ``NonTensorStack`` of them;
- TensorDicts (non-tensor leaves included) are stacked with ``torch.stack``;
- anything else gives a ``NonTensorStack`` of the items, and stacks of one shape stack again.

So ``[tensor([1]), tensor([2])]`` is a tensor of shape ``[2, 1]``, and ``[["a", 1], ["b", 2]]`` a
``NonTensorStack`` of shape ``[2, 2]`` under a batch ``[2]`` too: the dims of a stack beyond the batch
are stack dims, as those of a tensor are feature dims. Where tensordict fails (stacks of different
shapes, a level that mixes stacks, tensors and TensorDicts) :func:`read_list` gives None: the caller
keeps a stack of the list's first levels, one per batch dim.
"""

from __future__ import annotations

from typing import Any

import torch

from ._ops.traverse import is_td

_Tensor = torch.Tensor

# A level read: ("tensor", tensor) | ("tds", stacked TensorDict) | ("stack", nested values, shape)
_Read = tuple[str, Any, Any]


def read_list(value: list[Any], stack_cls: Any) -> Any:
    """The leaf ``value`` gives (a tensor, a stacked TensorDict or a ``stack_cls``), or None (see module)."""
    read = _read(value)
    if read is None:
        return None
    kind, out, shape = read
    if kind == "stack":
        return stack_cls.from_list(out, depth=len(shape))
    return out


def _read(items: list[Any]) -> _Read | None:
    if items and all(isinstance(item, list) for item in items):
        parts = [_read(item) for item in items]
        if any(part is None for part in parts):
            return None
        return _combine(parts)  # type: ignore[arg-type]  # (no None left)
    return _level(items)


def _level(items: list[Any]) -> _Read:
    """A level of values (not all lists)."""
    if all(isinstance(item, (bool, int, float)) for item in items):
        return "tensor", torch.tensor(items), None
    if all(isinstance(item, _Tensor) for item in items):
        if len({item.shape for item in items}) == 1:
            return "tensor", torch.stack(items), None
        return "stack", list(items), (len(items),)
    if all(is_td(item) for item in items):
        return "tds", torch.stack(items), None
    return "stack", list(items), (len(items),)


def _combine(parts: list[_Read]) -> _Read | None:
    """A level whose items were all lists, from their reads."""
    kinds = {kind for kind, _, _ in parts}
    if kinds == {"tensor"}:
        tensors = [out for _, out, _ in parts]
        if len({t.shape for t in tensors}) == 1:
            return "tensor", torch.stack(tensors), None
        return "stack", tensors, (len(tensors),)
    if kinds == {"stack"} and len({shape for _, _, shape in parts}) == 1:
        return "stack", [out for _, out, _ in parts], (len(parts), *parts[0][2])
    if kinds == {"tds"}:
        return "tds", torch.stack([out for _, out, _ in parts]), None
    return None
