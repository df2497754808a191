"""Modules over TensorDicts (``tensordict.nn``'s API) and parameters as TensorDicts.

Modules read ``in_keys`` from a TensorDict and write ``out_keys``: :class:`TensorDictModule`,
:class:`TensorDictSequential`, the probabilistic modules (:class:`ProbabilisticTensorDictModule`,
:class:`ProbabilisticTensorDictSequential`) and their distributions (``tensorbatch.nn.distributions``),
:class:`EnsembleModule`, :class:`CudaGraphModule`. Parameters: :class:`TensorDictParams`, and
``from_module``/``from_modules``/``to_module``. Importing this package attaches ``TensorDict.from_module``,
``TensorDict.from_modules`` and ``TensorDictBase.to_module`` (``tensorbatch`` imports it).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .._td import TensorDict
from ..functional import make_tensordict as make_tensordict
from . import _modules
from ._mappings import add_custom_mapping as add_custom_mapping
from ._mappings import biased_softplus as biased_softplus
from ._mappings import inv_softplus as inv_softplus
from ._mappings import mappings as mappings
from .common import TensorDictModule as TensorDictModule
from .common import TensorDictModuleBase as TensorDictModuleBase
from .common import TensorDictModuleWrapper as TensorDictModuleWrapper
from .common import WrapModule as WrapModule
from .common import as_tensordict_module as as_tensordict_module
from .common import dispatch as dispatch
from .cudagraphs import CudaGraphModule as CudaGraphModule
from .distributions import AddStateIndependentNormalScale as AddStateIndependentNormalScale
from .distributions import CompositeDistribution as CompositeDistribution
from .distributions import NormalParamExtractor as NormalParamExtractor
from .distributions import OneHotCategorical as OneHotCategorical
from .distributions import TruncatedNormal as TruncatedNormal
from .distributions import rand_one_hot as rand_one_hot
from .ensemble import EnsembleModule as EnsembleModule
from .params import TensorDictParams as TensorDictParams
from .probabilistic import InteractionType as InteractionType
from .probabilistic import ProbabilisticTensorDictModule as ProbabilisticTensorDictModule
from .probabilistic import ProbabilisticTensorDictSequential as ProbabilisticTensorDictSequential
from .probabilistic import composite_lp_aggregate as composite_lp_aggregate
from .probabilistic import interaction_type as interaction_type
from .probabilistic import set_composite_lp_aggregate as set_composite_lp_aggregate
from .probabilistic import set_interaction_type as set_interaction_type
from .sequence import TensorDictSequential as TensorDictSequential
from .tensorclass_module import TensorClassModuleBase as TensorClassModuleBase
from .tensorclass_module import TensorClassModuleWrapper as TensorClassModuleWrapper
from .utils import set_skip_existing as set_skip_existing
from .utils import skip_existing as skip_existing

_modules.install()


def from_module(
    module: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    filter_empty: bool = True,
) -> Any:
    """:meth:`TensorDict.from_module <tensorbatch.TensorDict.from_module>`, locking the result by default.

    Examples:
        >>> import torch
        >>> from tensorbatch import from_module
        >>> params = from_module(torch.nn.Linear(2, 3))
        >>> params.is_locked, params["weight"].shape
        (True, torch.Size([3, 2]))
    """
    return _modules.from_module(
        TensorDict, module, as_module=as_module, lock=lock, use_state_dict=use_state_dict, filter_empty=filter_empty
    )


def from_modules(
    *modules: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    lazy_stack: bool = False,
    expand_identical: bool = False,
) -> Any:
    """:meth:`TensorDict.from_modules <tensorbatch.TensorDict.from_modules>` as a function.

    Examples:
        >>> import torch
        >>> from tensorbatch import from_modules
        >>> from_modules(torch.nn.Linear(2, 3), torch.nn.Linear(2, 3))["weight"].shape
        torch.Size([2, 3, 2])
    """
    return _modules.from_modules(
        TensorDict,
        *modules,
        as_module=as_module,
        lock=lock,
        use_state_dict=use_state_dict,
        lazy_stack=lazy_stack,
        expand_identical=expand_identical,
    )


__all__ = [
    "AddStateIndependentNormalScale",
    "CompositeDistribution",
    "CudaGraphModule",
    "EnsembleModule",
    "InteractionType",
    "NormalParamExtractor",
    "OneHotCategorical",
    "ProbabilisticTensorDictModule",
    "ProbabilisticTensorDictSequential",
    "TensorClassModuleBase",
    "TensorClassModuleWrapper",
    "TensorDictModule",
    "TensorDictModuleBase",
    "TensorDictModuleWrapper",
    "TensorDictParams",
    "TensorDictSequential",
    "TruncatedNormal",
    "WrapModule",
    "add_custom_mapping",
    "as_tensordict_module",
    "biased_softplus",
    "composite_lp_aggregate",
    "dispatch",
    "from_module",
    "from_modules",
    "interaction_type",
    "inv_softplus",
    "make_tensordict",
    "mappings",
    "rand_one_hot",
    "set_composite_lp_aggregate",
    "set_interaction_type",
    "set_skip_existing",
    "skip_existing",
]
