"""Shared benchmark data and the tiny helpers the raw (plain dict) baseline uses.

All tensors come from one seeded generator and are created once at import;
:func:`flat` and :func:`nested` hand out fresh clones, so every implementation
sees identical values and in-place cases cannot leak between implementations.

Data:
    flat:   5 float32 leaves ``a..e`` of shape [64, 16], batch_size [64].
    nested: 3 levels, 10 leaves, batch_size [64]; deepest leaf ``("x", "y", "z")``.
    small:  100 flat dicts, 5 leaves of shape [16, 4] (for ``stack_100``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

B = 64
FLAT_KEYS = ("a", "b", "c", "d", "e")

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    """Standard-normal float32 tensor from the shared seeded generator."""
    return torch.randn(*shape, generator=_gen)


FLAT = {k: rand(B, 16) for k in FLAT_KEYS}
FLAT2 = {k: rand(B, 16) for k in FLAT_KEYS}
NESTED = {
    "a": rand(B, 16),
    "b": rand(B, 16),
    "c": rand(B, 8),
    "x": {
        "p": rand(B, 16),
        "q": rand(B, 4),
        "y": {"r": rand(B, 16), "s": rand(B, 8), "z": rand(B, 16), "w": rand(B, 2)},
    },
    "u": {"v": rand(B, 16)},
}
SMALL = [{k: rand(16, 4) for k in FLAT_KEYS} for _ in range(100)]
IDX = torch.randperm(B, generator=_gen)[:16]
MASK = torch.rand(B, generator=_gen) > 0.5


def rmap(fn: Callable[[Any], Any], d: dict) -> dict:
    """Recursively maps ``fn`` over the leaves of a nested dict.

    Args:
        fn: Called as ``fn(leaf)`` for every leaf.
        d: Nested dict of tensors.

    Returns:
        A new nested dict with the same structure holding ``fn``'s results.
    """
    return {k: rmap(fn, v) if isinstance(v, dict) else fn(v) for k, v in d.items()}


def rmap2(fn: Callable[[Any, Any], Any], d: dict, o: dict) -> dict:
    """Binary :func:`rmap`: ``fn(leaf, other_leaf)`` over two same-shaped dicts.

    Kept separate from :func:`rmap` (no ``*others``) so the raw floor stays
    minimal.
    """
    return {k: rmap2(fn, v, o[k]) if isinstance(v, dict) else fn(v, o[k]) for k, v in d.items()}


NESTED2 = rmap(lambda v: torch.randn(v.shape, generator=_gen), NESTED)


def clone(d: dict) -> dict:
    """Deep copy of a nested dict of tensors."""
    return rmap(torch.clone, d)


def flat(lib: Any, src: dict = FLAT) -> Any:
    """Fresh flat data: a ``lib.TensorDict`` or, for raw, a plain dict."""
    d = clone(src)
    return d if lib is None else lib.TensorDict(d, batch_size=[B])


def nested(lib: Any, src: dict = NESTED) -> Any:
    """Fresh nested data: a ``lib.TensorDict`` or, for raw, nested dicts."""
    d = clone(src)
    return d if lib is None else lib.TensorDict(d, batch_size=[B])


def leaf_keys(d: dict, prefix: tuple = ()) -> list:
    """Leaf keys like ``keys(include_nested=True, leaves_only=True)``."""
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.extend(leaf_keys(v, (*prefix, k)))
        else:
            out.append((*prefix, k) if prefix else k)
    return out


def flatten(d: dict, prefix: str = "", out: dict | None = None) -> dict:
    """Flattens nested dicts into ``"x.y.z"`` keys (``flatten_keys``)."""
    out = {} if out is None else out
    for k, v in d.items():
        if isinstance(v, dict):
            flatten(v, prefix + k + ".", out)
        else:
            out[prefix + k] = v
    return out
