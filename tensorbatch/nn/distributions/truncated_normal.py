"""Normal distributions restricted to an interval ``[a, b]``, with reparameterized samples.

With ``phi``/``Phi`` the standard normal density/CDF (``Phi`` kept in ``[eps, 1 - eps]``) and
``Z = Phi(b) - Phi(a)``, the truncated standard normal has density ``phi(x) / Z`` on ``[a, b]``,
mean ``-(phi(b) - phi(a)) / Z``, variance ``1 - (b phi(b) - a phi(a)) / Z - mean**2`` and entropy
``log(sqrt(2 pi e) Z) - (b phi(b) - a phi(a)) / (2 Z)``; samples invert the CDF of a uniform draw in
``[eps, 1 - eps]`` (J. Burkardt, "The truncated normal distribution", 2014).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Number
from typing import Any, ClassVar

import torch
from torch.distributions import Distribution, constraints
from torch.distributions.utils import broadcast_all

__all__ = ["TruncatedNormal", "TruncatedStandardNormal"]

_LOG_SQRT_2PI_E = 0.5 * math.log(2 * math.pi * math.e)
_LOG_INV_SQRT_2PI = math.log(1 / math.sqrt(2 * math.pi))
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


class TruncatedStandardNormal(Distribution):
    """The standard normal distribution (mean 0, standard deviation 1) restricted to ``[a, b]``.

    Args:
        a: the lower bound.
        b: the upper bound; ``a`` and ``b`` broadcast together into the batch shape.
        validate_args: see :class:`torch.distributions.Distribution`.

    Raises:
        ValueError: ``a`` and ``b`` have different dtypes, or ``a >= b`` somewhere.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn.distributions.truncated_normal import TruncatedStandardNormal
        >>> dist = TruncatedStandardNormal(torch.zeros(2), torch.tensor([1.0, 2.0]))
        >>> dist.mean, dist.auc
        (tensor([0.4599, 0.7228]), tensor([0.3413, 0.4772]))
    """

    arg_constraints: ClassVar[dict[str, Any]] = {"a": constraints.real, "b": constraints.real}
    has_rsample = True
    eps = 1e-6

    def __init__(self, a: float | torch.Tensor, b: float | torch.Tensor, validate_args: bool | None = None) -> None:
        self.a, self.b = broadcast_all(a, b)
        scalar = isinstance(a, Number) and isinstance(b, Number)
        super().__init__(torch.Size() if scalar else self.a.size(), validate_args=validate_args)
        if self.a.dtype != self.b.dtype:
            raise ValueError("Truncation bounds types are different")
        if bool((self.a >= self.b).any()):
            raise ValueError("Incorrect truncation range")
        self._phi_a, self._phi_b = self._density(self.a), self._density(self.b)
        self._cdf_a, self._cdf_b = self._std_cdf(self.a), self._std_cdf(self.b)
        self._Z = (self._cdf_b - self._cdf_a).clamp(self.eps, 1 - self.eps)
        self._log_Z = self._Z.log()
        # an infinite bound has zero density: replace it by a finite extreme so that 0 * bound is 0, not nan
        a_finite, b_finite = torch.nan_to_num(self.a, nan=math.nan), torch.nan_to_num(self.b, nan=math.nan)
        self._lpbb_m_lpaa_d_Z = (self._phi_b * b_finite - self._phi_a * a_finite) / self._Z
        self._mean = -(self._phi_b - self._phi_a) / self._Z
        self._variance = 1 - self._lpbb_m_lpaa_d_Z - ((self._phi_b - self._phi_a) / self._Z) ** 2
        self._entropy = _LOG_SQRT_2PI_E + self._log_Z - 0.5 * self._lpbb_m_lpaa_d_Z

    @constraints.dependent_property
    def support(self) -> Any:
        """The interval ``[a, b]``."""
        return constraints.interval(self.a, self.b)  # type: ignore[no-untyped-call]

    @property
    def mean(self) -> torch.Tensor:
        """The mean of the truncated distribution."""
        return self._mean

    @property
    def variance(self) -> torch.Tensor:
        """The variance of the truncated distribution."""
        return self._variance

    def entropy(self) -> torch.Tensor:
        """The entropy of the truncated distribution."""
        return self._entropy

    @property
    def auc(self) -> torch.Tensor:
        """``Z``: the mass of the standard normal between ``a`` and ``b``."""
        return self._Z

    @staticmethod
    def _density(x: torch.Tensor) -> torch.Tensor:
        return (-(x**2) * 0.5).exp() * _INV_SQRT_2PI

    def _std_cdf(self, x: torch.Tensor) -> torch.Tensor:
        return (0.5 * (1 + (x * (1 / math.sqrt(2))).erf())).clamp(self.eps, 1 - self.eps)

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        """The CDF at ``value``, in ``[0, 1]``."""
        if self._validate_args:
            self._validate_sample(value)
        return ((self._std_cdf(value) - self._cdf_a) / self._Z).clamp(0, 1)

    def icdf(self, value: torch.Tensor) -> torch.Tensor:
        """The value whose CDF is ``value``."""
        y = (self._cdf_a + value * self._Z).clamp(self.eps, 1 - self.eps)
        return math.sqrt(2) * (2 * y - 1).erfinv()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-density at ``value``."""
        if self._validate_args:
            self._validate_sample(value)
        return _LOG_INV_SQRT_2PI - self._log_Z - (value**2) * 0.5

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """Reparameterized samples: the inverse CDF of uniform draws in ``[eps, 1 - eps]``."""
        shape = self._extended_shape(torch.Size(sample_shape or ()))
        uniform = torch.empty(shape, device=self.a.device).uniform_(self.eps, 1 - self.eps)
        return self.icdf(uniform)


class TruncatedNormal(TruncatedStandardNormal):
    """The normal distribution of mean ``loc`` and standard deviation ``scale`` restricted to ``[a, b]``.

    Args:
        loc: the mean before truncation.
        scale: the standard deviation before truncation (at least 1e-6).
        a: the lower bound, in the units of ``loc``.
        b: the upper bound.
        validate_args: see :class:`torch.distributions.Distribution`.

    Raises:
        ValueError: ``a >= b`` somewhere.

    Examples:
        >>> import torch
        >>> from tensorbatch.nn import TruncatedNormal
        >>> dist = TruncatedNormal(loc=torch.zeros(3), scale=torch.ones(3), a=-1.0, b=1.0)
        >>> dist.mean, bool(dist.sample((100,)).abs().max() <= 1)
        (tensor([0., 0., 0.]), True)
        >>> TruncatedNormal(loc=5.0, scale=1.0, a=4.0, b=6.0).mean
        tensor(5.)
    """

    has_rsample = True

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        a: float | torch.Tensor,
        b: float | torch.Tensor,
        validate_args: bool | None = None,
    ) -> None:
        self.loc, scale, a, b = broadcast_all(loc, scale, a, b)
        self.scale = scale.clamp_min(self.eps)
        self._non_std_a, self._non_std_b = a, b
        super().__init__((a - self.loc) / self.scale, (b - self.loc) / self.scale, validate_args=validate_args)
        self._log_scale = self.scale.log()
        self._mean = self._mean * self.scale + self.loc
        self._variance = self._variance * self.scale**2
        self._entropy += self._log_scale

    @constraints.dependent_property
    def support(self) -> Any:
        """The interval ``[a, b]``."""
        return constraints.interval(self._non_std_a, self._non_std_b)  # type: ignore[no-untyped-call]

    def _to_std_rv(self, value: torch.Tensor) -> torch.Tensor:
        return (value - self.loc) / self.scale

    def _from_std_rv(self, value: torch.Tensor) -> torch.Tensor:
        return value * self.scale + self.loc

    def _validated_std_rv(self, value: torch.Tensor) -> torch.Tensor:
        standard = self._to_std_rv(value)
        if self._validate_args:  # the support is [a, b]: check the value, not its standardized form
            self._validate_sample(torch.as_tensor(value, dtype=standard.dtype, device=standard.device))
        return standard

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        """The CDF at ``value``, in ``[0, 1]``."""
        standard = self._validated_std_rv(value)
        return ((self._std_cdf(standard) - self._cdf_a) / self._Z).clamp(0, 1)

    def icdf(self, value: torch.Tensor) -> torch.Tensor:
        """The value whose CDF is ``value``, kept inside ``[a, b]``."""
        sample = self._from_std_rv(super().icdf(value))
        # keep rounding inside [a, b] without cutting the gradient
        low, high = self._non_std_a.detach(), self._non_std_b.detach()
        sample.data.copy_(torch.minimum(torch.maximum(sample.detach(), low), high))
        return sample

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-density at ``value``."""
        standard = self._validated_std_rv(value)
        return _LOG_INV_SQRT_2PI - self._log_Z - (standard**2) * 0.5 - self._log_scale
