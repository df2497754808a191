"""CudaGraphModule: capture a module's call once as a CUDA graph, then replay it on new inputs.

The first ``warmup`` calls run the module eagerly (on a side stream); the next one captures the call into a
``torch.cuda.CUDAGraph`` over copies of its inputs; later calls copy their inputs onto the captured ones,
replay the graph and return a copy of the captured outputs. Shapes, the batch size and non-tensor arguments
are those of the capture. Without CUDA every call runs the module (after cloning the inputs, as a warmup
call does).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import warnings
import weakref
from collections.abc import Callable
from textwrap import indent
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from .._keys import NestedKey
from .common import _is_collection, dispatch

__all__ = ["CudaGraphModule"]

_GRAD_ERROR = (
    "CudaGraphModule cannot be part of a graph (or leaves variables). If you need tensors to require "
    "gradients, please pass them as constant inputs to the module instead (e.g. `def func(a, b, c=c): "
    "...` where c is the tensor requiring gradients)."
)


def _clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor) or _is_collection(x):
        if x.requires_grad:
            raise RuntimeError(_GRAD_ERROR)
        return x.clone()
    return x


def _check_cuda(x: Any) -> None:
    if isinstance(x, torch.Tensor):
        if x.device.type != "cuda":
            raise ValueError(f"All tensors must be stored on CUDA. Got {x.device.type}.")
        if x.requires_grad:
            raise RuntimeError(_GRAD_ERROR)


def _leaves(tree: Any) -> list[Any]:
    return tree_leaves(tree, is_leaf=_is_collection)


class CudaGraphModule:
    """Run ``module`` through a CUDA graph after ``warmup`` eager calls.

    Args:
        module: a TensorDict module (called with a TensorDict) or a function of tensors.
        warmup: eager calls before the capture (at least 1).
        in_keys: the keys read, for a function that has no ``in_keys`` (makes it a TensorDict callable).
        out_keys: the keys written, likewise.
        device: the CUDA device of the streams.

    Examples:
        >>> import torch, warnings
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import CudaGraphModule, TensorDictModule
        >>> module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # (no CUDA here: calls run the module)
        ...     graphed = CudaGraphModule(module, warmup=2)
        >>> graphed(TensorDict(x=torch.zeros(2)))["y"]
        tensor([1., 1.])
    """

    def __init__(
        self,
        module: Callable[..., Any],
        warmup: int = 2,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        device: torch.device | None = None,
    ) -> None:
        self._has_cuda = torch.cuda.is_available()
        if not self._has_cuda:
            warnings.warn(
                "This module is instantiated on a machine without CUDA device available. We permit this "
                "usage, but calls to this instance will just pass through it and execute the provided "
                "function without additional performance gain.",
                stacklevel=2,
            )
        if not isinstance(warmup, int) or warmup < 1:
            raise ValueError("warmup must be an integer greater than 0.")
        self.module = module
        self.counter = 0
        self._warmup = warmup
        self.device = device
        stream: Any = torch.cuda.Stream
        self._stream: Any = stream(device) if self._has_cuda else None
        self._capture_stream: Any = stream(device) if self._has_cuda else None
        self.in_keys: Any = getattr(module, "in_keys", in_keys)
        default_out: Any = [] if out_keys is None and self.in_keys is not None else out_keys
        self.out_keys: Any = getattr(module, "out_keys", default_out)
        self._prob_modules: list[Any] = []
        self._graph_types: list[Any] = []
        me = weakref.proxy(self)
        if self.in_keys is not None:

            @dispatch(source=self.in_keys, dest=self.out_keys, auto_batch_size=False)
            def call(tensordict: Any, *args: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
                return me._call_td(tensordict, args, kwargs, tensordict_out)
        else:

            def call(*args: Any, **kwargs: Any) -> Any:
                return me._call_tensors(args, kwargs)

        self._call_func = functools.wraps(module)(call)

    def _side_stream(self) -> Any:
        if not self._has_cuda:
            return contextlib.nullcontext()
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self._stream)

    def _eager(self, run: Callable[[], Any]) -> Any:
        with self._side_stream():
            out = run()
        if self._has_cuda:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
        self.counter += self._has_cuda
        return out

    # -- the probabilistic modules' interaction type is fixed at capture ---------------------------------
    def _interaction_types(self) -> list[Any]:
        current = importlib.import_module(f"{__package__}.probabilistic").interaction_type()
        return [m.default_interaction_type if current is None else current for m in self._prob_modules]

    def _record_interaction_types(self) -> None:
        probabilistic = importlib.import_module(f"{__package__}.probabilistic")
        modules = self.module.modules() if isinstance(self.module, torch.nn.Module) else ()
        self._prob_modules = [m for m in modules if isinstance(m, probabilistic.ProbabilisticTensorDictModule)]
        self._graph_types = self._interaction_types()

    def _check_interaction_types(self) -> None:
        if self._prob_modules and self._interaction_types() != self._graph_types:
            now = [str(t) for t in self._interaction_types()]
            self._prob_modules = []
            warnings.warn(
                f"{type(self).__name__} was captured with the interaction types "
                f"{[str(t) for t in self._graph_types]} but is called with {now}. The replay ignores the "
                f"interaction type and repeats the captured branch. Capture one {type(self).__name__} per "
                "interaction type.",
                UserWarning,
                stacklevel=4,
            )

    # -- TensorDict callables ------------------------------------------------------------------------
    def _call_td(self, tensordict: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensordict_out: Any) -> Any:
        if self.counter >= self._warmup:
            return self._replay_td(tensordict, tensordict_out)
        if tensordict_out is not None:
            kwargs["tensordict_out"] = tensordict_out
        if not self._has_cuda or self.counter < self._warmup - 1:

            def run() -> Any:
                tensordict.update(tensordict.apply(_clone))
                out = self.module(tensordict, *args, **kwargs)
                self._out_is_input = out is tensordict
                return out

            return self._eager(run)
        return self._capture_td(tensordict, args, kwargs, tensordict_out)

    def _capture_td(self, tensordict: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensordict_out: Any) -> Any:
        if tensordict.device is None:
            tensordict.apply(_check_cuda, filter_empty=True)
        elif tensordict.device.type != "cuda":
            raise ValueError("The input tensordict device must be of the 'cuda' type.")
        if any(isinstance(leaf, torch.Tensor) for leaf in _leaves((args, kwargs))):
            raise ValueError("All tensors must be passed in the tensordict, not as arg or kwarg.")
        self._record_interaction_types()
        torch.cuda.synchronize(self.device)
        saved_out = tensordict_out.copy() if tensordict_out is not None else None
        with self._side_stream():
            tensordict.update(tensordict.apply(_clone))
            self._inputs = tensordict.clone()
            self._graph_inputs = self._inputs.copy()
            this_out = self.module(tensordict, *args, **kwargs)
        self._capture_stream.wait_stream(self._stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self._capture_stream):
            if saved_out is not None:
                kwargs["tensordict_out"] = saved_out
            out = self.module(self._inputs, *args, **kwargs)
        if out is not None and not _is_collection(out):
            raise RuntimeError(
                f"The output of the function must be a tensordict, a tensorclass or None. Got type(out)={type(out)}."
            )
        if out is not None:
            out.lock_()
        self._out = out
        self._out_is_input = out is self._inputs
        if self._out_is_input:  # the entries the module wrote: its out_keys, or those no longer the inputs'
            self._written = (
                list(self.out_keys)
                if self.out_keys
                else [key for key, value in out.items(True, True) if value is not self._graph_inputs.get(key, None)]
            )
        self.counter += 1
        return this_out

    def _replay_td(self, tensordict: Any, tensordict_out: Any) -> Any:
        self._check_interaction_types()
        if tensordict.batch_size != self._graph_inputs.batch_size:
            raise ValueError(
                f"{type(self).__name__} was captured with batch_size={self._graph_inputs.batch_size} "
                f"but got batch_size={tensordict.batch_size}. CUDA graphs replay fixed shapes."
            )
        graph_keys = set(self._graph_inputs.keys(True, True))
        missing = [key for key in self.in_keys if key in graph_keys and key not in tensordict.keys(True)]
        if missing:
            raise KeyError(
                f"{type(self).__name__} input is missing the in_keys {missing} that the captured graph reads."
            )
        for key, value in tensordict.items(True, True):
            if key in graph_keys and value.shape != self._graph_inputs.get(key).shape:
                raise ValueError(
                    f"{type(self).__name__} was captured with the entry {key!r} of shape "
                    f"{self._graph_inputs.get(key).shape} but got shape {value.shape}. CUDA graphs "
                    "replay fixed shapes."
                )
        self._graph_inputs.update_(tensordict.select(*graph_keys, strict=False))
        self.graph.replay()
        if self._out_is_input:
            return tensordict.update(self._out, keys_to_update=self._written, clone=True)
        if tensordict_out is not None:
            return tensordict_out.update(self._out, clone=True)
        return self._out.clone() if self._out is not None else None

    # -- functions of tensors ------------------------------------------------------------------------
    def _call_tensors(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.counter >= self._warmup:
            return self._replay_tensors(args, kwargs)
        if not self._has_cuda or self.counter < self._warmup - 1:
            a, k = tree_map(_clone, (args, kwargs), is_leaf=_is_collection)
            return self._eager(lambda: self.module(*a, **k))
        self._record_interaction_types()
        flat, spec = tree_flatten((args, kwargs), is_leaf=_is_collection)
        for leaf in flat:
            if isinstance(leaf, torch.Tensor) or _is_collection(leaf):
                if leaf.requires_grad:
                    raise RuntimeError(_GRAD_ERROR)
                if leaf.device is None:
                    leaf.apply(_check_cuda, filter_empty=True)
                elif leaf.device.type != "cuda":
                    raise ValueError(f"All tensors must be stored on CUDA. Got {leaf.device.type}.")
        self._flat = tuple(_clone(leaf) for leaf in flat)
        self._args, self._kwargs = tree_unflatten(list(self._flat), spec)
        with self._side_stream():
            a, k = tree_map(_clone, (self._args, self._kwargs), is_leaf=_is_collection)
            this_out = self.module(*a, **k)
        self._capture_stream.wait_stream(self._stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self._capture_stream):
            out = self.module(*self._args, **self._kwargs)
        self._out, self._out_spec = tree_flatten(out, is_leaf=_is_collection)
        inputs = self._flat
        if any(isinstance(x, torch.Tensor) and any(x is o for o in self._out) for x in inputs):
            warnings.warn(
                "An input tensor is also present in the output of the wrapped function. "
                f"{type(self).__name__} will not copy tensors in place: the output will be cloned and the "
                "identity between input and output will not match anymore. Make sure you don't rely on "
                "input-output identity further in the code.",
                stacklevel=3,
            )
        self._unchanged = not self._out
        self._out = [o.lock_() if _is_collection(o) else o for o in self._out]
        self.counter += 1
        return this_out

    def _replay_tensors(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        srcs: list[torch.Tensor] = []
        dests: list[torch.Tensor] = []
        for src, dest in zip(_leaves((args, kwargs)), self._flat, strict=True):
            if isinstance(src, torch.Tensor):
                if src.shape != dest.shape:
                    raise ValueError(
                        f"CudaGraphModule was captured with an input of shape {dest.shape} but got "
                        f"shape {src.shape}. CUDA graphs replay fixed shapes."
                    )
                srcs.append(src)
                dests.append(dest)
            elif _is_collection(src):
                if src.batch_size != dest.batch_size:
                    raise ValueError(
                        f"CudaGraphModule was captured with batch_size={dest.batch_size} but got "
                        f"batch_size={src.batch_size}. CUDA graphs replay fixed shapes."
                    )
                dest.copy_(src)
            elif src != dest:
                raise ValueError("Varying inputs must be torch.Tensor subclasses.")
        if dests:
            torch._foreach_copy_(dests, srcs)
        self._check_interaction_types()
        self.graph.replay()
        if self._unchanged:
            return tree_unflatten(self._out, self._out_spec)
        return tree_unflatten([o.clone() if hasattr(o, "clone") else o for o in self._out], self._out_spec)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module (eagerly during warmup, then by replaying the captured graph)."""
        return self._call_func(*args, **kwargs)

    def __repr__(self) -> str:
        fields = [
            f"module={self.module}",
            f"warmup={self._warmup}",
            f"in_keys={self.in_keys}",
            f"out_keys={self.out_keys}",
        ]
        return f"{type(self).__name__}(\n" + ", \n".join(indent(f, "    ") for f in fields) + "\n)"

    def state_dict(self) -> Any:
        """The module's state dict (empty for a function)."""
        state = getattr(self.module, "state_dict", None)
        return state() if state is not None else {}

    def load_state_dict(self, state_dict: Any) -> None:
        """Load into the module (nothing for a function)."""
        load = getattr(self.module, "load_state_dict", None)
        if load is not None:
            load(state_dict)
