"""``TensorCollection``: the base class of every tensor collection, for ``isinstance`` checks and hints."""

from __future__ import annotations

import abc

import torch


class TensorCollection(abc.ABC):
    """The abstract base of TensorDicts (every backend, non-tensor leaves included) and TensorClasses.

    Use it in type hints and ``isinstance`` checks for "a TensorDict or a TensorClass". It cannot be
    instantiated. ``TensorDictBase`` inherits from it; ``TensorClass`` (and so every ``@tensorclass``,
    which is a TensorClass subclass here) is registered as a virtual subclass.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorClass, TensorCollection, TensorDict
        >>> class Data(TensorClass):
        ...     x: torch.Tensor
        >>> isinstance(TensorDict(x=torch.zeros(3), batch_size=[3]), TensorCollection)
        True
        >>> isinstance(Data(x=torch.zeros(3), batch_size=[3]), TensorCollection)
        True
        >>> isinstance(torch.zeros(3), TensorCollection)
        False
    """

    __slots__ = ()

    @property
    @abc.abstractmethod
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every entry."""
