"""Module-level functions that work on any TensorDict type."""

from __future__ import annotations

from ._ops.torch_function import cat, stack

__all__ = ["cat", "stack"]
