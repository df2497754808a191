"""Benchmark cases for parameters as TensorDicts under ``torch.vmap``, same protocol as ``cases.py``.

Run them with ``benchmarks/run.py --suite vmap``. The raw floor is torch's own functional API on a flat dict
of tensors: ``torch.func.stack_module_state`` + ``functional_call`` for the ensemble, the flat dict through
vmap for entering and leaving it, ``functional_call`` for the swap into a module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

Setup = Callable[[Any], Callable[[], Any]]

CASES: dict[str, Setup] = {}
#: Results are tensors or TensorDicts of parameters: compared in the tests, not against raw's dicts.
UNCHECKED: set[str] = set()


def case(setup: Setup) -> Setup:
    CASES[setup.__name__] = setup
    UNCHECKED.add(setup.__name__)
    return setup


def _mlps(n: int = 8) -> list[nn.Module]:
    torch.manual_seed(0)
    return [
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)) for _ in range(n)
    ]


X = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))


@case
def vmap_ensemble_step(lib: Any) -> Callable[[], Any]:
    """Forward and backward of 8 MLPs at once: vmap over stacked parameters swapped into one module."""
    modules = _mlps()
    base = copy.deepcopy(modules[0]).to("meta")
    if lib is None:
        params, buffers = stack_module_state(modules)

        def raw_call(p: Any, b: Any, x: torch.Tensor) -> torch.Tensor:
            return functional_call(base, (p, b), (x,))

        fn = torch.vmap(raw_call, in_dims=(0, 0, None))
        return lambda: fn(params, buffers, X).sum().backward()
    stacked = lib.TensorDict.from_modules(*modules)

    def call(p: Any, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(base):
            return base(x)

    vfn = torch.vmap(call, (0, None))
    return lambda: vfn(stacked, X).sum().backward()


@case
def vmap_enter_leave(lib: Any) -> Callable[[], Any]:
    """``vmap(f)(params)`` with ``f`` giving its input back: the flatten and unflatten of the parameter tree."""
    modules = _mlps()
    if lib is None:
        params, _ = stack_module_state(modules)
        flat = {k: v.detach() for k, v in params.items()}
        return lambda: torch.vmap(lambda p: p)(flat)
    stacked = lib.TensorDict.from_modules(*modules).detach()
    return lambda: torch.vmap(lambda p: p)(stacked)


@case
def to_module_forward(lib: Any) -> Callable[[], Any]:
    """Swap a parameter TensorDict into a module, run it, swap back."""
    module = _mlps(1)[0]
    if lib is None:
        flat = {k: v.detach().clone() for k, v in module.named_parameters()}
        return lambda: functional_call(module, flat, (X,))
    params = lib.TensorDict.from_module(module).detach().clone()

    def fn() -> torch.Tensor:
        with params.to_module(module):
            return module(X)

    return fn
