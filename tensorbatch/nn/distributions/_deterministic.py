"""What the ``DETERMINISTIC`` interaction type reads from a distribution that has no ``deterministic_sample``.

``REGISTER`` maps each distribution class to the attribute to fall back on: the mode for classes with an
enumerable support, the mean for the others (``Delta`` and ``LogisticNormal`` have their own value).
``deterministic_sample(dist)`` also gives the value of the three torch classes to which tensordict adds a
``deterministic_sample`` attribute at import; this package patches nothing in torch and computes it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import distributions as D

from .._switches import InteractionType
from .continuous import Delta
from .discrete import OneHotCategorical
from .truncated_normal import TruncatedNormal, TruncatedStandardNormal


def _torch_register() -> dict[type, InteractionType]:
    register: dict[type, InteractionType] = {}
    for name in dir(D):
        cls = getattr(D, name)
        if isinstance(cls, type) and issubclass(cls, D.Distribution):
            if cls is D.LogisticNormal:
                register[cls] = InteractionType.DETERMINISTIC
            elif getattr(cls, "has_enumerate_support", False):
                register[cls] = InteractionType.MODE
            else:
                register[cls] = InteractionType.MEAN
    return register


REGISTER = _torch_register()
REGISTER[Delta] = InteractionType.DETERMINISTIC
REGISTER[OneHotCategorical] = InteractionType.MODE
REGISTER[TruncatedNormal] = InteractionType.MEAN
REGISTER[TruncatedStandardNormal] = InteractionType.MEAN


def _logistic_normal(dist: Any) -> torch.Tensor:
    value: torch.Tensor = dist.loc
    for transform in dist.transforms:
        value = transform(value)
    return value


def _relaxed_bernoulli(dist: Any) -> torch.Tensor:
    probs: torch.Tensor = dist.probs
    mode = (probs >= 0.5).to(probs)
    mode[probs == 0.5] = torch.nan
    return mode


def _relaxed_one_hot(dist: Any) -> torch.Tensor:
    probs: torch.Tensor = dist.base_dist.probs
    return torch.nn.functional.one_hot(probs.argmax(dim=-1), num_classes=probs.shape[-1]).to(probs)


_TORCH_VALUES: dict[type, Callable[[Any], torch.Tensor]] = {
    D.LogisticNormal: _logistic_normal,
    D.RelaxedBernoulli: _relaxed_bernoulli,
    D.RelaxedOneHotCategorical: _relaxed_one_hot,
}


def deterministic_sample(dist: Any) -> Any:
    """``dist.deterministic_sample`` (or the value tensordict gives the torch classes it patches), else None."""
    value = getattr(dist, "deterministic_sample", None)
    if value is not None:
        return value
    for cls in type(dist).__mro__:  # tensordict's attribute is inherited by subclasses
        compute = _TORCH_VALUES.get(cls)
        if compute is not None:
            return compute(dist)
    return None


def registered(dist: Any) -> InteractionType | None:
    """The fallback that ``REGISTER`` gives the class of ``dist`` (of its base for ``Independent``)."""
    cls = type(dist.base_dist) if isinstance(dist, D.Independent) else type(dist)
    return REGISTER.get(cls)
