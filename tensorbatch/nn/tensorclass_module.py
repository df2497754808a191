"""Modules typed by TensorClasses: ``TensorClassModuleBase[In, Out]`` and its TensorDict-module wrapper."""

from __future__ import annotations

import dataclasses
import warnings
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar, get_args, get_origin

from torch import nn

from .common import TensorDictModuleBase, dispatch

__all__ = ["TensorClassModuleBase", "TensorClassModuleWrapper"]


def _is_tensorclass(cls: Any) -> bool:
    # (nn sits below the typed wrappers: a TensorClass is known by being a tensor-collection dataclass)
    return isinstance(cls, type) and dataclasses.is_dataclass(cls) and getattr(cls, "_is_tensor_collection", False)


def _tensor_class_keys(cls: type) -> list[tuple[str, ...]]:
    """The key of every field of ``cls``, nested TensorClass fields expanded to their own fields' keys."""
    keys: list[tuple[str, ...]] = []
    for field in dataclasses.fields(cls):
        tp = field.type
        if _is_tensorclass(tp):
            assert isinstance(tp, type)
            keys += [(field.name, *sub) for sub in _tensor_class_keys(tp)]
        else:
            keys.append((field.name,))
    return keys


InputClass = TypeVar("InputClass")
OutputClass = TypeVar("OutputClass")


class TensorClassModuleBase(Generic[InputClass, OutputClass], ABC, nn.Module):
    """A module from one TensorClass (or tensor) type to another, declared as ``TensorClassModuleBase[In, Out]``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorClass, TensorDict
        >>> from tensorbatch.nn import TensorClassModuleBase
        >>> class In(TensorClass):
        ...     x: torch.Tensor
        >>> class Out(TensorClass):
        ...     y: torch.Tensor
        >>> class Double(TensorClassModuleBase[In, Out]):
        ...     def forward(self, x: In) -> Out:
        ...         return Out(y=x.x * 2, batch_size=x.batch_size)
        >>> Double()(In(x=torch.ones(2), batch_size=[2])).y
        tensor([2., 2.])
        >>> Double().as_td_module()(TensorDict(x=torch.ones(2), batch_size=[2]))["y"]
        tensor([2., 2.])
    """

    input_type: type[InputClass]
    output_type: type[OutputClass]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is TensorClassModuleBase:
                args = get_args(base)
                if not args:
                    raise ValueError("Generic input/output types not set in TensorClassModuleBase")
                cls.input_type, cls.output_type = args

    @abstractmethod
    def forward(self, x: InputClass) -> OutputClass:
        """The computation, from an ``input_type`` to an ``output_type``."""

    def __call__(self, x: InputClass) -> OutputClass:
        """Run ``forward`` through the module's hooks (typed for the input and output classes)."""
        out: OutputClass = super().__call__(x)
        return out

    def as_td_module(self) -> TensorClassModuleWrapper:
        """This module as a TensorDict module reading the input class's fields and writing the output's."""
        input_type = getattr(self, "input_type", None)
        output_type = getattr(self, "output_type", None)
        if not (isinstance(input_type, type) and isinstance(output_type, type)):
            raise ValueError(
                "Generic input/output types not set in TensorClassModuleBase. To convert "
                f"{type(self).__name__} to TensorDictModule, subclass TensorClassModuleBase[InputClass, "
                "OutputClass] directly, with a class for each type."
            )
        if not (_is_tensorclass(input_type) and _is_tensorclass(output_type)):
            raise ValueError(
                "Only TensorClassModuleBase implementations with both input and output type as "
                "TensorClass can be converted to TensorDictModule"
            )
        return TensorClassModuleWrapper(self)


class TensorClassModuleWrapper(TensorDictModuleBase):
    """A :class:`TensorClassModuleBase` called with TensorDicts: the fields are read from and returned as keys.

    Args:
        module: the TensorClass module.
    """

    def __init__(self, module: TensorClassModuleBase[Any, Any]) -> None:
        super().__init__()
        self.training = module.training
        self.tc_module = module
        self.in_keys = _tensor_class_keys(module.input_type)  # type: ignore[assignment]
        self.out_keys = _tensor_class_keys(module.output_type)  # type: ignore[assignment]

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, *args: Any, **kwargs: Any) -> Any:
        """Build the input class from ``tensordict`` (extra keys dropped), call, return a TensorDict."""
        if args or kwargs:
            ignored = (["positional arguments"] if args else []) + [repr(name) for name in kwargs]
            warnings.warn(
                f"TensorClassModuleWrapper ignores {', '.join(ignored)}. Starting with TensorDict 0.17, "
                "the default will change to writing the outputs into tensordict_out and returning it, as "
                "TensorDictModule does, and to raising a TypeError for the other arguments.",
                FutureWarning,
                stacklevel=2,
            )
        input_type: Any = self.tc_module.input_type
        fields = {f.name for f in dataclasses.fields(input_type)}
        extra = [key for key in tensordict.keys() if key not in fields]
        if extra:
            tensordict = tensordict.exclude(*extra)
        return self.tc_module(input_type.from_tensordict(tensordict)).to_tensordict()
