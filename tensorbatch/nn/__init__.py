"""Parameters as TensorDicts: :class:`TensorDictParams`, and ``from_module``/``from_modules``/``to_module``.

Importing this package attaches ``TensorDict.from_module``, ``TensorDict.from_modules`` and
``TensorDictBase.to_module`` (``tensorbatch`` imports it).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .._td import TensorDict
from . import _modules
from .common import TensorDictModule as TensorDictModule
from .common import TensorDictModuleBase as TensorDictModuleBase
from .common import TensorDictModuleWrapper as TensorDictModuleWrapper
from .common import WrapModule as WrapModule
from .common import as_tensordict_module as as_tensordict_module
from .common import dispatch as dispatch
from .cudagraphs import CudaGraphModule as CudaGraphModule
from .ensemble import EnsembleModule as EnsembleModule
from .params import TensorDictParams as TensorDictParams
from .sequence import TensorDictSequential as TensorDictSequential
from .tensorclass_module import TensorClassModuleBase as TensorClassModuleBase
from .tensorclass_module import TensorClassModuleWrapper as TensorClassModuleWrapper
from .utils import set_skip_existing as set_skip_existing
from .utils import skip_existing as skip_existing

_modules.install()


def from_module(module: nn.Module, as_module: bool = False, lock: bool = True, use_state_dict: bool = False,
                filter_empty: bool = True) -> Any:
    """:meth:`TensorDict.from_module <tensorbatch.TensorDict.from_module>`, locking the result by default.

    Examples:
        >>> import torch
        >>> from tensorbatch import from_module
        >>> params = from_module(torch.nn.Linear(2, 3))
        >>> params.is_locked, params["weight"].shape
        (True, torch.Size([3, 2]))
    """
    return _modules.from_module(TensorDict, module, as_module=as_module, lock=lock, use_state_dict=use_state_dict,
                                filter_empty=filter_empty)


def from_modules(*modules: nn.Module, as_module: bool = False, lock: bool = True, use_state_dict: bool = False,
                 lazy_stack: bool = False, expand_identical: bool = False) -> Any:
    """:meth:`TensorDict.from_modules <tensorbatch.TensorDict.from_modules>` as a function.

    Examples:
        >>> import torch
        >>> from tensorbatch import from_modules
        >>> from_modules(torch.nn.Linear(2, 3), torch.nn.Linear(2, 3))["weight"].shape
        torch.Size([2, 3, 2])
    """
    return _modules.from_modules(TensorDict, *modules, as_module=as_module, lock=lock, use_state_dict=use_state_dict,
                                 lazy_stack=lazy_stack, expand_identical=expand_identical)


__all__ = [
    "CudaGraphModule", "EnsembleModule", "TensorClassModuleBase", "TensorClassModuleWrapper", "TensorDictModule", "TensorDictModuleBase", "TensorDictModuleWrapper", "TensorDictParams", "TensorDictSequential",
    "WrapModule", "as_tensordict_module", "dispatch", "from_module", "from_modules", "set_skip_existing",
    "skip_existing",
]
