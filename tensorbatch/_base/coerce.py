"""Argument coercion shared by the base class and the backends: batch sizes, devices, dim names."""

from __future__ import annotations

from typing import Any

import torch

_Size = torch.Size


def as_size(batch_size: Any) -> torch.Size:
    """``batch_size`` (None, an int or a sequence of ints) as a ``torch.Size``; ValueError otherwise."""
    if type(batch_size) is _Size:
        return batch_size
    if batch_size is None:
        return _Size(())
    if isinstance(batch_size, (int, torch.SymInt)):  # (a SymInt: a dynamic size under torch.export or compile)
        return _Size((batch_size,))  # type: ignore[arg-type]  # (torch.Size takes SymInts; its stub says ints)
    try:
        return _Size(batch_size)
    except TypeError:
        raise ValueError(f"batch_size must be an int or a sequence of ints, got {batch_size!r}") from None


def checked_names(value: Any, batch_size: torch.Size) -> tuple[str | None, ...]:
    """``value`` as a tuple of dim names, one per batch dim and unique (ValueError otherwise)."""
    names = tuple(value)
    if len(names) != len(batch_size):
        raise ValueError(  # the second sentence is tensordict's, which users match on
            f"names {list(names)} must have one entry per batch dim (batch_size {list(batch_size)}): "
            "the length of the dimension names must equate the tensordict batch_dims attribute"
        )
    named = [n for n in names if n is not None]
    if len(set(named)) != len(named):
        raise ValueError(f"names must be unique, got {list(names)}: Some dimension names are non-unique")
    return names


def as_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None)."""
    if device is None or type(device) is torch.device:
        return device
    return torch.device(device)
