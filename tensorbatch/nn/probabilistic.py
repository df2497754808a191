"""Probabilistic modules: the interaction type that says how a module gets a value from a distribution.

``InteractionType``, ``interaction_type``/``set_interaction_type`` and the log-prob aggregation switch live
in ``_switches`` (they hold no module logic) and are re-exported here, at tensordict's import path.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch
from torch.compiler import is_compiling

from ._switches import InteractionType as InteractionType
from ._switches import composite_lp_aggregate as composite_lp_aggregate
from ._switches import interaction_type as interaction_type
from ._switches import set_composite_lp_aggregate as set_composite_lp_aggregate
from ._switches import set_interaction_type as set_interaction_type

__all__ = ["InteractionType", "interaction_type", "set_interaction_type"]


@contextlib.contextmanager
def _use_generator(generator: torch.Generator | None) -> Iterator[None]:
    """Draws the block's global random numbers from ``generator`` (which advances); the global RNG stays.

    A no-op for ``None`` and under ``torch.compile`` (forking the RNG state is not traceable).
    """
    if generator is None or is_compiling():
        yield
        return
    device = generator.device
    cuda = device.type == "cuda"
    read: Callable[[], torch.Tensor] = (
        functools.partial(torch.cuda.get_rng_state, device) if cuda else torch.get_rng_state)
    write: Callable[[torch.Tensor], None] = (
        functools.partial(torch.cuda.set_rng_state, device=device) if cuda else torch.set_rng_state)
    with torch.random.fork_rng(devices=[device.index] if cuda else []):
        write(generator.get_state())
        try:
            yield
        finally:
            generator.set_state(read())
