"""``parse_tensor_dict_string``: rebuild a TensorDict (zeros) from its printed tree, e.g. from a log."""

from __future__ import annotations

import ast
import math
import re
from typing import Any

import torch

from ._errors import fmt_path
from ._td import TensorDict
from ._unbatched import UnbatchedTensor

# one entry of the tree: its depth (4 columns per level), key, class and what is in the parentheses
_ENTRY = re.compile(r"^((?:[| ] {3})*)[|`]-- (.*?): (\w+)\((.*)\)$")
_HEADER = re.compile(r"^(\w+)\((.*)\)$")
_FIELD = {
    "shape": re.compile(r"shape=\[([^\]]*)\]"),
    "batch_size": re.compile(r"batch_size=\[([^\]]*)\]"),
    "dtype": re.compile(r"dtype=(\w+)"),
    "device": re.compile(r"device=([\w:]+)"),
}
_NON_TENSOR = re.compile(r"^data=(.*), batch_size=(?:torch\.Size\()?\[([^\]]*)\]\)?, device=([\w:]+)$")


MAX_NUMEL = 2**24
"""``parse_tensor_dict_string``'s default bound on the elements of all the tensors it makes together."""


def parse_tensor_dict_string(s: str, *, max_numel: int | None = MAX_NUMEL) -> Any:
    """Build a TensorDict from its printed tree: same keys, shapes, dtypes, devices and batch sizes.

    A debugging aid: the repr holds no values, so every tensor of the result is zeros. Non-tensor
    values are read back as Python literals where their printed text is one, else as that text (the repr
    prints ``str(value)``, as tensordict's: ``"1"`` and ``1`` print alike). Facts hidden by the print options
    take defaults (``float32``, the node's device).

    A repr is text from anywhere (a log, a message): a few characters can declare a huge shape, so the
    tensors made are bounded by ``max_numel`` elements in all (16,777,216 by default, 64 MiB of float32).

    Note:
        Differs from tensordict: it reads this library's tree repr (tensordict's reads its own forms),
        and it bounds the memory it allocates.

    Args:
        s: ``repr(td)`` of a TensorDict.
        max_numel: the most elements all the tensors of the result may hold together; None: no bound
            (only for a repr you trust).

    Returns:
        A new TensorDict.

    Raises:
        ValueError: naming the line that is no entry of a tree repr, a tensor without its shape, an
            unknown dtype, a lazy stack whose members hold
            different keys, or the key whose tensor would pass ``max_numel``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(obs=torch.ones(3, 4), next={"done": torch.ones(3, 1, dtype=torch.bool)}, batch_size=[3])
        >>> rebuilt = parse_tensor_dict_string(repr(td))
        >>> rebuilt["next", "done"].dtype, rebuilt.batch_size, rebuilt["obs"].sum()
        (torch.bool, torch.Size([3]), tensor(0.))
    """
    lines = [line for line in s.strip().splitlines() if line.strip()]
    if not lines or not (header := _HEADER.match(lines[0].strip())):
        raise ValueError(
            f"parse_tensor_dict_string: {lines[0] if lines else s!r} is not the first line of a TensorDict repr"
        )
    root = _node(header.group(2), None)
    stack: list[dict[str, Any]] = [root]  # the open nodes, root first
    budget = [max_numel]  # the elements still allowed (None: no bound)
    for line in lines[1:]:
        if line.startswith("(only in member "):
            raise ValueError(
                "parse_tensor_dict_string: a lazy stack whose members hold different keys "
                f"cannot be rebuilt ({line.strip()!r})"
            )
        entry = _ENTRY.match(line)
        if entry is None:
            raise ValueError(f"parse_tensor_dict_string: {line!r} is not an entry of a TensorDict repr")
        depth = len(entry.group(1)) // 4
        key, cls, body = entry.group(2), entry.group(3), entry.group(4)
        del stack[depth + 1 :]
        parent = stack[depth]
        if cls in ("Tensor", "UnbatchedTensor"):
            path = (*(node["key"] for node in stack[1 : depth + 1]), key)
            tensor = _tensor(body, parent, line, path, budget)
            parent["entries"][key] = UnbatchedTensor(tensor) if cls == "UnbatchedTensor" else tensor
        elif body == "...":  # a lazy stack's nested node: its entries are not printed
            parent["entries"][key] = _node("", parent)
        elif cls.startswith("NonTensor"):
            parent["entries"][key] = _non_tensor(body, line)
        else:
            node = _node(body, parent)
            node["key"] = key
            parent["entries"][key] = node
            stack.append(node)
    return _build(root, TensorDict)  # a lazy stack prints its stacked shapes: it comes back dense


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _node(body: str, parent: dict[str, Any] | None) -> dict[str, Any]:
    size = _FIELD["batch_size"].search(body)
    device = _FIELD["device"].search(body)
    return {
        "batch_size": _ints(size.group(1)) if size else (parent["batch_size"] if parent else []),
        "device": None if device is None or device.group(1) == "None" else torch.device(device.group(1)),
        "entries": {},
    }


def _tensor(
    body: str, parent: dict[str, Any], line: str, path: tuple[str, ...], budget: list[int | None]
) -> torch.Tensor:
    shape = _FIELD["shape"].search(body)
    if shape is None:
        raise ValueError(
            f"parse_tensor_dict_string: the tensor in {line.strip()!r} has no shape (printed with show_shape=False)"
        )
    size = _ints(shape.group(1))
    if -1 in size:
        raise ValueError(
            f"parse_tensor_dict_string: the tensor in {line.strip()!r} has members of different "
            "shapes (-1): a lazy stack of them cannot be rebuilt"
        )
    if any(n < 0 for n in size):
        raise ValueError(
            f"parse_tensor_dict_string: the tensor at key {fmt_path(path)} has a negative size in its shape {size}"
        )
    numel = math.prod(size)
    left = budget[0]
    if left is not None:
        if numel > left:
            raise ValueError(
                f"parse_tensor_dict_string: the tensor at key {fmt_path(path)} of shape {size} "
                f"({numel} elements) would pass max_numel ({left} elements left of the bound): "
                "pass a larger max_numel (or None) for a repr you trust"
            )
        budget[0] = left - numel
    dtype = _FIELD["dtype"].search(body)
    kind = getattr(torch, dtype.group(1), None) if dtype else torch.float32
    if not isinstance(kind, torch.dtype):
        raise ValueError(
            f"parse_tensor_dict_string: the tensor at key {fmt_path(path)} has an unknown dtype "
            f"{dtype.group(1) if dtype else None!r}"
        )
    device = _FIELD["device"].search(body)
    return torch.zeros(size, dtype=kind, device=device.group(1) if device else (parent["device"] or "cpu"))


def _non_tensor(body: str, line: str) -> Any:
    """The value of a non-tensor line: a Python literal, else its text (the repr prints ``str(value)``)."""
    match = _NON_TENSOR.match(body)
    text = match.group(1) if match else body.rsplit(", batch_size=", 1)[0]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _build(node: dict[str, Any], cls: Any) -> Any:
    entries = {k: _build(v, cls) if isinstance(v, dict) else v for k, v in node["entries"].items()}
    return cls(entries, batch_size=node["batch_size"], device=node["device"])
