"""Continuous helpers: modules that produce normal parameters, and the point-mass distribution ``Delta``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import distributions as D
from torch import nn

from .._mappings import mappings

__all__ = ["AddStateIndependentNormalScale", "Delta", "NormalParamExtractor"]


class NormalParamExtractor(nn.Module):
    """Splits the last dim of its first input into a location and a positive scale.

    The first half is the location; the second half, mapped by ``scale_mapping`` and clamped to at
    least ``scale_lb``, is the scale (an odd size gives the location one more element, as
    ``torch.chunk``). Further inputs come back unchanged: ``module(x, *others)`` returns
    ``(loc, scale, *others)``.

    Args:
        scale_mapping: the name of the positive map (see :func:`~tensorbatch.nn.mappings`).
        scale_lb: the smallest scale.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import NormalParamExtractor
        >>> loc, scale = NormalParamExtractor()(torch.zeros(3, 4))
        >>> loc.shape, scale
        (torch.Size([3, 2]), tensor([[1., 1.],
                [1., 1.],
                [1., 1.]]))
    """

    def __init__(self, scale_mapping: str = "biased_softplus_1.0", scale_lb: float = 1e-4) -> None:
        super().__init__()
        self.scale_mapping = mappings(scale_mapping)
        self.scale_lb = scale_lb

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(loc, scale, *others)`` from ``(tensor, *others)``."""
        first, *others = tensors
        loc, scale = first.chunk(2, -1)
        return (loc, self.scale_mapping(scale).clamp_min(self.scale_lb), *others)


class AddStateIndependentNormalScale(nn.Module):
    """Returns its input as the location, with a learned scale that does not depend on the input.

    The module holds ``state_independent_scale`` of shape ``scale_shape`` (a parameter, or a buffer
    with ``make_param=False``); ``module(loc, *others)`` returns ``(loc, scale, *others)`` where the
    scale is that tensor expanded to ``loc``, mapped by ``scale_mapping`` and clamped to ``scale_lb``.

    Args:
        scale_shape: the shape of the scale; it must be the trailing shape of ``loc``.
        scale_mapping: the name of the positive map (see :func:`~tensorbatch.nn.mappings`).
        scale_lb: the smallest scale.
        device: the device of the scale tensor.
        make_param: a trainable parameter (True) or a buffer.
        init_value: the initial value, before the mapping.

    Raises:
        RuntimeError: (on call) the trailing dims of ``loc`` are not ``scale_shape``.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import AddStateIndependentNormalScale
        >>> loc, scale = AddStateIndependentNormalScale(2)(torch.zeros(3, 2))
        >>> scale.shape, scale[0]
        (torch.Size([3, 2]), tensor([1., 1.], grad_fn=<SelectBackward0>))
    """

    def __init__(
        self,
        scale_shape: torch.Size | int | Sequence[int] | None = None,
        *,
        scale_mapping: str = "exp",
        scale_lb: float = 1e-4,
        device: torch.device | str | None = None,
        make_param: bool = True,
        init_value: float = 0.0,
    ) -> None:
        super().__init__()
        if scale_shape is None:
            scale_shape = torch.Size(())
        elif isinstance(scale_shape, int):
            scale_shape = (scale_shape,)
        self.scale_shape = torch.Size(scale_shape)
        self.scale_mapping = scale_mapping
        self.scale_lb = scale_lb
        value = torch.full(self.scale_shape, init_value, dtype=torch.get_default_dtype(), device=device)
        if make_param:
            self.state_independent_scale = nn.Parameter(value)
        else:
            self.register_buffer("state_independent_scale", value)

    def forward(self, loc: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(loc, scale, *others)``, the scale expanded to ``loc``."""
        trailing = loc.shape[max(loc.ndim - len(self.scale_shape), 0) :]
        if trailing != self.scale_shape:
            raise RuntimeError(
                f"Last dimensions of loc ({trailing}) do not match the number of dimensions "
                f"in scale ({self.state_independent_scale.shape})"
            )
        scale = mappings(self.scale_mapping)(self.state_independent_scale.expand_as(loc))
        return (loc, scale.clamp_min(self.scale_lb), *others)


class Delta(D.Distribution):
    """All the mass on one value, ``param``.

    Samples are ``param`` (expanded to the sample shape); ``mean``, ``mode`` and ``deterministic_sample``
    are ``param``. ``log_prob`` is ``inf`` where a value equals ``param`` on every element of the event
    (within ``atol + rtol * |param|``) and ``-inf`` elsewhere.

    Args:
        param: the value that holds the mass.
        atol: the absolute tolerance of ``log_prob``.
        rtol: the relative tolerance of ``log_prob``.
        batch_shape: the batch shape.
        event_shape: the event shape. When neither shape is given (or both are empty), the last dim of
            ``param`` is the event and the others the batch.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn.distributions import Delta
        >>> dist = Delta(torch.tensor([1.0, 2.0]))
        >>> dist.batch_shape, dist.event_shape, dist.sample((2,)).shape
        (torch.Size([]), torch.Size([2]), torch.Size([2, 2]))
        >>> dist.log_prob(torch.tensor([1.0, 2.0])), dist.log_prob(torch.tensor([1.0, 3.0]))
        (tensor(inf), tensor(-inf))
    """

    arg_constraints: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        param: torch.Tensor,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        batch_shape: torch.Size | Sequence[int] | None = None,
        event_shape: torch.Size | Sequence[int] | None = None,
    ) -> None:
        batch_shape = torch.Size(batch_shape or ())
        event_shape = torch.Size(event_shape or ())
        self.update(param)
        self.atol = atol
        self.rtol = rtol
        if not batch_shape and not event_shape:
            batch_shape, event_shape = param.shape[:-1], param.shape[-1:]
        super().__init__(batch_shape=batch_shape, event_shape=event_shape)

    def update(self, param: torch.Tensor) -> None:
        """Replaces ``param`` (the shapes stay)."""
        self.param = param

    def _is_equal(self, value: torch.Tensor) -> torch.Tensor:
        param = self.param.expand_as(value)
        equal = (value - param).abs() < self.atol + self.rtol * param.abs()
        if self.event_shape:
            equal = equal.flatten(-len(self.event_shape)).all(-1)
        return equal

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``inf`` where ``value`` is ``param`` (within the tolerances), ``-inf`` elsewhere."""
        equal = self._is_equal(value)
        inf = torch.full_like(equal, math.inf, dtype=value.dtype)
        return torch.where(equal, inf, -inf)

    @torch.no_grad()
    def sample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """``param`` expanded to ``sample_shape + param.shape``, without gradient."""
        return self.rsample(sample_shape)

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """``param`` expanded to ``sample_shape + param.shape``."""
        return self.param.expand((*(sample_shape or ()), *self.param.shape))

    @property
    def mode(self) -> torch.Tensor:
        """``param``."""
        return self.param

    @property
    def mean(self) -> torch.Tensor:
        """``param``."""
        return self.param

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """``param``: the value a module writes with the ``DETERMINISTIC`` interaction type."""
        return self.param
