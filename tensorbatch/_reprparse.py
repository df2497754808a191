"""``parse_tensor_dict_string``: rebuild a TensorDict (zeros) from its printed tree, e.g. from a log."""

from __future__ import annotations

import ast
import re
from typing import Any

import torch

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
_NON_TENSOR = re.compile(r"^data=(.*), batch_size=\[([^\]]*)\], device=([\w:]+)$")


def parse_tensor_dict_string(s: str) -> Any:
    """Build a TensorDict from its printed tree: same keys, shapes, dtypes, devices and batch sizes.

    A debugging aid: the repr holds no values, so every tensor of the result is zeros. Non-tensor
    values are read back when their repr is a Python literal. Facts hidden by the print options
    take defaults (``float32``, the node's device).

    Note:
        Differs from tensordict: it reads this library's tree repr (tensordict's reads its own forms).

    Args:
        s: ``repr(td)`` of a TensorDict.

    Returns:
        A new TensorDict.

    Raises:
        ValueError: naming the line that is no entry of a tree repr, a tensor without its shape, a
            non-tensor value that is no literal, or a lazy stack whose members hold different keys.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(obs=torch.ones(3, 4), next={"done": torch.ones(3, 1, dtype=torch.bool)}, batch_size=[3])
        >>> rebuilt = parse_tensor_dict_string(repr(td))
        >>> rebuilt["next", "done"].dtype, rebuilt.batch_size, rebuilt["obs"].sum()
        (torch.bool, torch.Size([3]), tensor(0.))
    """
    lines = [line for line in s.strip().splitlines() if line.strip()]
    if not lines or not (header := _HEADER.match(lines[0].strip())):
        raise ValueError(f"parse_tensor_dict_string: {lines[0] if lines else s!r} is not the first line of a "
                         "TensorDict repr")
    root = _node(header.group(2), None)
    stack: list[dict[str, Any]] = [root]  # the open nodes, root first
    for line in lines[1:]:
        if line.startswith("(only in member "):
            raise ValueError("parse_tensor_dict_string: a lazy stack whose members hold different keys "
                             f"cannot be rebuilt ({line.strip()!r})")
        entry = _ENTRY.match(line)
        if entry is None:
            raise ValueError(f"parse_tensor_dict_string: {line!r} is not an entry of a TensorDict repr")
        depth = len(entry.group(1)) // 4
        key, cls, body = entry.group(2), entry.group(3), entry.group(4)
        del stack[depth + 1:]
        parent = stack[depth]
        if cls == "Tensor":
            parent["entries"][key] = _tensor(body, parent, line)
        elif cls == "UnbatchedTensor":
            parent["entries"][key] = UnbatchedTensor(_tensor(body, parent, line))
        elif body == "...":  # a lazy stack's nested node: its entries are not printed
            parent["entries"][key] = _node("", parent)
        elif cls.startswith("NonTensor"):
            parent["entries"][key] = _non_tensor(body, line)
        else:
            node = _node(body, parent)
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


def _tensor(body: str, parent: dict[str, Any], line: str) -> torch.Tensor:
    shape = _FIELD["shape"].search(body)
    if shape is None:
        raise ValueError(f"parse_tensor_dict_string: the tensor in {line.strip()!r} has no shape (printed with "
                         "show_shape=False)")
    size = _ints(shape.group(1))
    if -1 in size:
        raise ValueError(f"parse_tensor_dict_string: the tensor in {line.strip()!r} has members of different "
                         "shapes (-1): a lazy stack of them cannot be rebuilt")
    dtype = _FIELD["dtype"].search(body)
    device = _FIELD["device"].search(body)
    return torch.zeros(size, dtype=getattr(torch, dtype.group(1)) if dtype else torch.float32,
                       device=device.group(1) if device else (parent["device"] or "cpu"))


def _non_tensor(body: str, line: str) -> Any:
    match = _NON_TENSOR.match(body)
    try:
        return ast.literal_eval(match.group(1) if match else body.rsplit(", batch_size=", 1)[0])
    except (ValueError, SyntaxError):
        raise ValueError(f"parse_tensor_dict_string: the non-tensor value in {line.strip()!r} is not a Python "
                         "literal") from None


def _build(node: dict[str, Any], cls: Any) -> Any:
    entries = {k: _build(v, cls) if isinstance(v, dict) else v for k, v in node["entries"].items()}
    return cls(entries, batch_size=node["batch_size"], device=node["device"])
