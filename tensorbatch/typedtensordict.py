"""``tensorbatch.typedtensordict``: the module tensordict defines ``TypedTensorDict`` in.

For ``from tensordict.typedtensordict import TypedTensorDict``; the class is :mod:`tensorbatch.typed`'s.
"""

from .typed import TypedTensorDict as TypedTensorDict

__all__ = ["TypedTensorDict"]
