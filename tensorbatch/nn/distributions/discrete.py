"""Discrete helpers: a categorical distribution over one-hot values, and one-hot sampling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import distributions as D

__all__ = ["OneHotCategorical"]


def _drop_unit_category(params: torch.Tensor | None) -> torch.Tensor | None:
    """A trailing dim of size 1 is no category dim: drop it."""
    if params is not None and params.shape[-1] == 1:
        return params[..., 0]
    return params


def rand_one_hot(values: torch.Tensor, do_softmax: bool = True) -> torch.Tensor:
    """A one-hot ``torch.long`` sample along the last dim of ``values``.

    Args:
        values: logits (or probabilities with ``do_softmax=False``) along the last dim.
        do_softmax: apply a softmax to ``values`` first.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import rand_one_hot
        >>> rand_one_hot(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), do_softmax=False)
        tensor([[0, 1],
                [1, 0]])
    """
    if do_softmax:
        values = values.softmax(-1)
    above = values.cumsum(-1) > torch.rand_like(values[..., :1])
    return (above.cumsum(-1) == 1).to(torch.long)


class OneHotCategorical(D.Categorical):
    """A :class:`torch.distributions.Categorical` whose values are one-hot ``torch.long`` tensors.

    ``sample``, ``mode`` and ``deterministic_sample`` give one-hot tensors (the mode marks the first of
    tied maxima), ``log_prob`` reads one, and ``rsample`` gives a straight-through sample: one-hot
    values that carry the gradient of a relaxed (temperature 1) sample.

    Args:
        logits: unnormalized log-probabilities along the last dim (a last dim of size 1 is dropped).
        probs: probabilities, as ``logits``; give one of the two.
        **kwargs: for :class:`~torch.distributions.Categorical` (``validate_args``).

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import OneHotCategorical
        >>> dist = OneHotCategorical(logits=torch.tensor([0.0, 2.0, 1.0]))
        >>> dist.mode, dist.sample((4,)).shape
        (tensor([0, 1, 0]), torch.Size([4, 3]))
        >>> dist.log_prob(torch.tensor([0, 1, 0]))
        tensor(-0.4076)
    """

    num_params: int = 1

    def __init__(self, logits: torch.Tensor | None = None, probs: torch.Tensor | None = None, **kwargs: Any) -> None:
        super().__init__(probs=_drop_unit_category(probs), logits=_drop_unit_category(logits), **kwargs)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-probability of the category that the one-hot ``value`` marks (its argmax)."""
        log_prob: torch.Tensor = super().log_prob(value.argmax(dim=-1))  # type: ignore[no-untyped-call]
        return log_prob

    @property
    def mode(self) -> torch.Tensor:
        """The one-hot most likely category (the first of tied ones)."""
        return torch.nn.functional.one_hot(self.logits.max(-1).indices, self.logits.shape[-1])

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mode."""
        return self.mode

    def sample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """One-hot samples of shape ``sample_shape + batch_shape + (categories,)``."""
        index = super().sample(torch.Size(sample_shape or ()))  # type: ignore[no-untyped-call]
        return torch.nn.functional.one_hot(index, self.logits.shape[-1]).to(torch.long)

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """Straight-through one-hot samples: the values are one-hot, the gradient a relaxed sample's."""
        relaxed = D.RelaxedOneHotCategorical(1.0, logits=self.logits)  # type: ignore[arg-type]
        soft = relaxed.rsample(torch.Size(sample_shape or ()))
        hard = (soft == soft.max(-1, keepdim=True).values).to(soft.dtype)
        return hard + (soft - soft.detach())
