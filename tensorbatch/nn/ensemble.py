"""EnsembleModule: several copies of one module, with their own parameters, run at once with ``torch.vmap``."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .._lazy import LazyStackedTensorDict
from .._td import TensorDict
from ..base import TensorDictBase
from .common import TensorDictModuleBase
from .params import TensorDictParams

__all__ = ["EnsembleModule"]


class EnsembleModule(TensorDictModuleBase):
    """``num_copies`` copies of ``module``, each with freshly reset parameters, called together under vmap.

    Args:
        module: the TensorDict module to copy (its parameters are stacked, then each copy is reset).
        num_copies: how many copies.
        expand_input: give every copy the same input (else the input's first batch dim is split among them).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import EnsembleModule, TensorDictModule
        >>> module = TensorDictModule(torch.nn.Linear(3, 2), in_keys=["x"], out_keys=["y"])
        >>> ensemble = EnsembleModule(module, num_copies=4)
        >>> ensemble(TensorDict(x=torch.randn(5, 3), batch_size=[5]))["y"].shape
        torch.Size([4, 5, 2])
    """

    def __init__(self, module: TensorDictModuleBase, num_copies: int, expand_input: bool = True) -> None:
        super().__init__()
        self.in_keys = module.in_keys
        self.out_keys = module.out_keys
        params = TensorDict.from_module(module).expand(num_copies).to_tensordict()
        self.module = module
        self.vmapped_forward = torch.vmap(self._func_module_call, (None, 0) if expand_input else 0)
        self.reset_parameters_recursive(params)
        self.params_td = TensorDictParams(params)

    def _func_module_call(self, input: Any, params: Any) -> Any:
        with params.to_module(self.module, preserve_module_state=False):
            return self.module(input)

    def forward(self, tensordict: Any) -> Any:
        """Call every copy; the results are stacked along a new first batch dim."""
        return self.vmapped_forward(tensordict, self.params_td)

    def reset_parameters_recursive(self, parameters: TensorDictBase | None = None) -> TensorDictBase | None:
        """Reset ``parameters`` (one set per copy along its batch dims) in place, as the module would.

        Args:
            parameters: the copies' parameters (required: an ensemble keeps them outside the module).

        Returns:
            The reset parameters (a lazy stack of the copies when batched).
        """
        if parameters is None:
            raise ValueError(
                "Ensembles are functional and require passing a TensorDict of parameters to reset_parameters_recursive"
            )
        if parameters.ndim:
            copies = (
                [parameters[i] for i in range(parameters.shape[0])]
                if parameters.ndim > 1
                else list(parameters.unbind(0))
            )
            for copy in copies:
                self.reset_parameters_recursive(copy)
            return LazyStackedTensorDict.lazy_stack(copies, 0)  # type: ignore[no-any-return]
        if any(name not in ("module", "ensemble_parameters", "params_td") for name, _ in self.named_children()):
            warnings.warn(
                "EnsembleModule.reset_parameters_recursive() only resets parameters of self.module, but "
                "other parameters were detected. These parameters will not be reset.",
                stacklevel=2,
            )
        return self.module.reset_parameters_recursive(parameters)
