"""Named elementwise maps (mostly to positive numbers) that parameter extractors use for scales.

``tensorbatch.nn.utils`` re-exports these names, as ``tensordict.nn.utils`` holds them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["add_custom_mapping", "biased_softplus", "expln", "inv_softplus", "mappings"]


def inv_softplus(bias: float | torch.Tensor) -> float | torch.Tensor:
    """The input that softplus maps to ``bias``: ``log(expm1(bias))``, with ``expm1(bias)`` kept >= 1e-6.

    Args:
        bias: the softplus output; a Python number gives a Python float back.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import inv_softplus
        >>> inv_softplus(torch.tensor([1.0, 2.0]))
        tensor([0.5413, 1.8546])
        >>> round(inv_softplus(1.0), 4)
        0.5413
    """
    if isinstance(bias, torch.Tensor):
        return bias.expm1().clamp_min(1e-6).log()
    out = torch.tensor(bias).expm1().clamp_min(1e-6).log()
    return out.item() if out.numel() == 1 else out


class biased_softplus(nn.Module):
    """``softplus(x + inv_softplus(bias - min_val)) + min_val``: ``bias`` at 0, always above ``min_val``.

    Args:
        bias: the value for a zero input.
        min_val: the lower bound.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import biased_softplus
        >>> biased_softplus(1.0)(torch.zeros(2))
        tensor([1., 1.])
    """

    def __init__(self, bias: float, min_val: float = 0.01) -> None:
        super().__init__()
        self.bias = inv_softplus(bias - min_val)
        self.min_val = min_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x + self.bias) + self.min_val


def expln(x: torch.Tensor) -> torch.Tensor:
    """``exp(x)`` where ``x <= 0`` and ``log1p(x) + 1`` elsewhere: smooth, positive, logarithmic growth.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import mappings
        >>> mappings("expln")(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([0.3679, 1.0000, 1.6931])
    """
    negative = x <= 0
    out = torch.empty_like(x)
    out[negative] = x[negative].exp()
    out[~negative] = x[~negative].log1p() + 1
    return out


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


_MAPPINGS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus": torch.nn.functional.softplus,
    "exp": torch.exp,
    "relu": torch.relu,
    "biased_softplus": biased_softplus(1.0),
    "none": _identity,
    "expln": expln,
}


def mappings(key: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The map named ``key``.

    Args:
        key: ``"softplus"``, ``"exp"``, ``"relu"``, ``"expln"``, ``"biased_softplus"`` (bias 1),
            ``"none"`` (identity), a name given to :func:`add_custom_mapping`, or
            ``"biased_softplus_{bias}"`` / ``"biased_softplus_{bias}_{min_val}"``.

    Raises:
        NotImplementedError: unknown name.
        ValueError: a ``biased_softplus_`` name with another number of parts.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import mappings
        >>> mappings("exp")(torch.zeros(2))
        tensor([1., 1.])
        >>> mappings("biased_softplus_2.0_0.1")(torch.zeros(2))
        tensor([2., 2.])
    """
    found = _MAPPINGS.get(key)
    if found is not None:
        return found
    if not key.startswith("biased_softplus"):
        raise NotImplementedError(f"Unknown mapping {key}")
    parts = key.split("_")
    if len(parts) == 3:
        return biased_softplus(float(parts[2]))
    if len(parts) == 4:
        return biased_softplus(float(parts[2]), min_val=float(parts[3]))
    raise ValueError(f"Invalid number of args in  {key}")


def add_custom_mapping(name: str, mapping: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Registers ``mapping`` under ``name`` for :func:`mappings` (replacing any map of that name).

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import add_custom_mapping, mappings
        >>> add_custom_mapping("zero", torch.zeros_like)
        >>> mappings("zero")(torch.ones(2))
        tensor([0., 0.])
    """
    _MAPPINGS[name] = mapping
