"""Probabilistic modules (tensordict's ``tensordict.nn.probabilistic``).

:class:`ProbabilisticTensorDictModule` (``_prob_module.py``) builds a distribution from TensorDict entries
and writes a value of it; :class:`ProbabilisticTensorDictSequential` (``_prob_sequence.py``) computes its
parameters first. ``InteractionType``, ``interaction_type``/``set_interaction_type`` and the log-prob
aggregation mode live in ``_switches.py``. All are importable from here, tensordict's path.
"""

from __future__ import annotations

import warnings
from typing import Any

from ._prob_module import ProbabilisticTensorDictModule as ProbabilisticTensorDictModule
from ._prob_module import _use_generator as _use_generator
from ._prob_sequence import ProbabilisticTensorDictSequential as ProbabilisticTensorDictSequential
from ._switches import InteractionType as InteractionType
from ._switches import composite_lp_aggregate as composite_lp_aggregate
from ._switches import interaction_type as interaction_type
from ._switches import set_composite_lp_aggregate as set_composite_lp_aggregate
from ._switches import set_interaction_type as set_interaction_type
from .distributions import _deterministic

__all__ = [
    "InteractionType",
    "ProbabilisticTensorDictModule",
    "ProbabilisticTensorDictSequential",
    "interaction_type",
    "set_interaction_type",
]


def __getattr__(name: str) -> Any:
    if name == "DETERMINISTIC_REGISTER":  # deprecated in tensordict 0.15
        warnings.warn(
            f"{__name__}.DETERMINISTIC_REGISTER is deprecated and will be removed in "
            "TensorDict 0.17. Use a deterministic_sample attribute on the distribution instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return _deterministic.REGISTER
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
