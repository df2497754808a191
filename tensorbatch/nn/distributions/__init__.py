"""Distributions and parameter modules for probabilistic modules (``tensordict.nn.distributions``).

The distributions are :mod:`torch.distributions` classes; this package adds the few that tensordict adds
(``Delta``, ``OneHotCategorical``, ``TruncatedNormal``, ``CompositeDistribution`` over TensorDict samples)
and the modules that turn a network's output into distribution parameters.
"""

from __future__ import annotations

import warnings
from typing import Any

from .._mappings import add_custom_mapping as add_custom_mapping
from .._mappings import mappings as mappings
from .._switches import InteractionType as InteractionType
from .._switches import set_interaction_type as set_interaction_type
from . import continuous as continuous
from . import discrete as discrete
from .composite import CompositeDistribution as CompositeDistribution
from .continuous import AddStateIndependentNormalScale as AddStateIndependentNormalScale
from .continuous import Delta as Delta
from .continuous import NormalParamExtractor as NormalParamExtractor
from .discrete import OneHotCategorical as OneHotCategorical
from .discrete import rand_one_hot as rand_one_hot
from .truncated_normal import TruncatedNormal as TruncatedNormal

__all__ = [
    "AddStateIndependentNormalScale",
    "CompositeDistribution",
    "Delta",
    "InteractionType",
    "NormalParamExtractor",
    "OneHotCategorical",
    "TruncatedNormal",
    "add_custom_mapping",
    "continuous",
    "discrete",
    "mappings",
    "rand_one_hot",
    "set_interaction_type",
]


def _by_name() -> dict[str, Any]:
    """The classes a probabilistic module takes by name (``distribution_class="Delta"``), by lower-case name."""
    return {
        cls.__name__.lower(): cls
        for cls in (NormalParamExtractor, AddStateIndependentNormalScale, Delta, OneHotCategorical)
    }


def __getattr__(name: str) -> Any:
    if name == "distributions_maps":  # deprecated in tensordict 0.15
        warnings.warn(
            f"{__name__}.distributions_maps is deprecated and will be removed in TensorDict 0.17.",
            DeprecationWarning,
            stacklevel=2,
        )
        return _by_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
