"""``TensorCollection``: the base class of every tensor collection, for ``isinstance`` checks and hints."""

from __future__ import annotations

import abc
from typing import Any

import torch


class TensorCollection(abc.ABC):  # noqa: B024  # (an ABC for register(); its __init__ refuses it)
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # (not abstract methods: their TypeError is not the NotImplementedError tensordict raises here, and a
        # __new__ would cost every TensorDict built; subclasses define their own __init__)
        if type(self) is TensorCollection:
            raise NotImplementedError("TensorCollection is an abstract base class and cannot be instantiated directly.")
        super().__init__()

    @property
    def batch_size(self) -> torch.Size:
        """The leading dimensions shared by every entry."""
        raise NotImplementedError(f"{type(self).__name__} does not define batch_size")
