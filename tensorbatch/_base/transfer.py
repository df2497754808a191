"""Moving leaves between devices: ``to``, ``cpu``, ``cuda``, ``pin_memory``.

Every copy between devices is issued non-blocking, and one synchronisation follows where the result must
be safe to read from the host: after a device-to-host move, unless the caller asked for
``non_blocking=True`` (then the caller synchronises, as with a tensor). A device-to-host copy made
non-blocking lands in pinned memory (torch allocates it from its pinned-memory cache), which is what makes
the move run at the copy engine's speed: a blocking copy per leaf into fresh pageable memory ran 30x slower.
Host-to-device and device-to-device results need no synchronisation: the destination's stream orders the
kernels that read them after the copy (as tensordict documents).

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from .._ops import pointwise as _pointwise
from .._ops.traverse import flat_leaves, from_leaves, is_td
from .coerce import as_device as _as_device
from .values import _attrs_targets, _to_attrs

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_HOST = ("cpu", "meta")  # devices that need no synchronisation


def to(self: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
    """Move and/or cast every leaf: ``to(device)``, ``to(dtype)``, ``to(other_td)``, ``to(device, dtype)``.

    Keyword arguments: ``device``, ``dtype``, ``non_blocking``, ``batch_size``; ``inplace=True``
    makes ``self`` take the moved leaves (and device) and returns it; ``non_blocking_pin=True`` pins
    CPU leaves on the fly before their non-blocking copy to an accelerator, ``num_threads`` threads
    pinning and copying them. ``cast_filter(key_path, leaf) -> bool`` picks the tensor leaves the dtype
    cast applies to (the others keep their dtype but still move; ``key_path`` is a tuple of str, and
    :func:`~tensorbatch.utils.is_inexact` fits); it is not used without a dtype or with ``td.attrs()``.

    Copies between devices are non-blocking; after a move to the CPU from an accelerator one
    synchronisation makes the result safe to read, unless ``non_blocking=True`` is passed (the caller
    then synchronises before reading, e.g. ``torch.cuda.synchronize()``).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict({"a": torch.ones(2)}, batch_size=[2]).to(torch.float64)["a"].dtype
        torch.float64
        >>> TensorDict({"a": torch.ones(2)}, batch_size=[2]).to("cpu", non_blocking=True)["a"]
        tensor([1., 1.])
        >>> from tensorbatch import is_inexact
        >>> td = TensorDict(x=torch.zeros(2), done=torch.zeros(2, dtype=torch.bool)).to(
        ...     torch.bfloat16, cast_filter=is_inexact
        ... )
        >>> td["x"].dtype, td["done"].dtype
        (torch.bfloat16, torch.bool)
    """
    if len(args) == 1 and not kwargs and type(args[0]) is torch.dtype:  # the common cast, kept cheap
        cast: TensorDictBase = _pointwise.cast(self, args[0])
        return cast
    inplace = kwargs.pop("inplace", False)
    if inplace:
        return self._take_result(to(self, *args, **kwargs))
    non_blocking = kwargs.pop("non_blocking", None)
    pin, num_threads = kwargs.pop("non_blocking_pin", False), kwargs.pop("num_threads", None)
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    batch_size = kwargs.pop("batch_size", None)
    cast_filter = kwargs.pop("cast_filter", None)
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif is_td(arg) and (targets := _attrs_targets(arg)):  # td.attrs(): leaf by leaf
            if len(args) > 1 or kwargs:
                raise TypeError("to(attrs): a TensorDict of TensorAttrs (td.attrs()) takes no other argument")
            return _to_attrs(self, targets)
        elif is_td(arg) or isinstance(arg, _Tensor):
            device = arg.device
        elif arg is not None:
            device = arg
    if kwargs:
        raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
    if num_threads is not None and (type(num_threads) is not int or num_threads < 0):
        raise ValueError(f"to(): num_threads must be a non-negative int, got {num_threads!r}")
    result: TensorDictBase = self
    if device is not None:
        device = _as_device(device)
        assert device is not None  # (a device given is a device)
        if device == self.device and dtype is None and batch_size is None:
            return self  # already there: itself, as tensordict
        result = move(
            self,
            device,
            non_blocking=non_blocking is True,
            pin=pin and dtype is None and batch_size is None,
            num_threads=num_threads,
            whole=dtype is None and batch_size is None,
        )
    if dtype is not None:
        result = _pointwise.cast(result, dtype, cast_filter)
    if batch_size is not None:
        result = result.clone(False) if result is self else result
        result.batch_size = batch_size
    return result


def move(
    td: TensorDictBase,
    device: torch.device,
    *,
    non_blocking: bool = False,
    pin: bool = False,
    num_threads: int | None = None,
    whole: bool = True,
) -> TensorDictBase:
    """``td`` with its leaves on ``device``: non-blocking copies, then :func:`settle` unless ``non_blocking``.

    ``pin``: CPU leaves are pinned on the fly before a copy to an accelerator; ``num_threads`` (> 1)
    threads do each leaf's pin and copy; ``whole``: a consolidated ``td`` may move as one buffer.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> move(TensorDict({"a": torch.ones(2)}, [2]), torch.device("meta"))["a"].device
        device(type='meta')
    """
    sources: set[torch.device] = set()  # the accelerators a copy to the host came from
    moved = td._consolidated_to(device, True) if whole and not pin else None  # one buffer
    if moved is not None:
        if device.type in _HOST and not non_blocking:
            sources.update(accelerators_of(td))
    else:
        if pin and device.type not in _HOST:
            copy = _pin_and_copy(device)
        else:
            copy = _copy(device, sources if device.type in _HOST and not non_blocking else None)
        if num_threads is not None and num_threads > 1:
            from concurrent.futures import ThreadPoolExecutor  # only for a threaded move

            with ThreadPoolExecutor(num_threads) as pool:
                moved = from_leaves(td, list(pool.map(copy, flat_leaves(td))), device=device)
        else:
            moved = _plain_moved(td, copy, device)
            if moved is None:  # lazy stacks, non-tensor leaves, typed nodes: the generic engine
                moved = td._map(copy, "moving to device", device=device)
    settle(sources)
    return moved


def _plain_moved(td: Any, copy: Callable[[_Tensor], _Tensor], device: torch.device) -> Any:
    """``td`` moved by a walk of its nodes when it is a plain tree (in-memory nodes, tensor leaves), else None.

    Half the cost of the generic engine on a nested tree of 64 leaves: a move has no result to check.
    """
    dense = type(td)
    if dense is not td._dense_cls:
        return None
    out: dict[str, Any] = {}
    for key, value in td._tensordict.items():
        if type(value) is _Tensor:
            out[key] = copy(value)
        elif type(value) is dense:
            node = _plain_moved(value, copy, device)
            if node is None:
                return None
            out[key] = node
        else:
            return None
    return dense._new_unsafe(out, td._batch_size, device, td._names)


def _copy(device: torch.device, sources: set[torch.device] | None) -> Callable[[_Tensor], _Tensor]:
    """The copy of one leaf; ``sources`` (a move to the host) collects the accelerators copied from."""
    to_cpu = device.type == "cpu"  # (read once: a device's .type makes a new str at each read)
    if sources is None:

        def copy(x: _Tensor) -> _Tensor:
            return x if to_cpu and x.is_cpu else x.to(device, non_blocking=True)
    else:

        def copy(x: _Tensor) -> _Tensor:
            if x.is_cpu:  # nothing to copy, nothing to wait for
                return x if to_cpu else x.to(device, non_blocking=True)
            sources.add(x.device)  # (settle passes over meta)
            return x.to(device, non_blocking=True)

    return copy


def _pin_and_copy(device: torch.device) -> Callable[[_Tensor], _Tensor]:
    def copy(x: _Tensor) -> _Tensor:
        if x.device.type == "cpu" and not x.is_pinned():
            x = x.pin_memory()  # one copy into torch's pinned-memory cache
        return x.to(device, non_blocking=True)

    return copy


def accelerators_of(td: Any) -> tuple[torch.device, ...]:
    """The devices holding ``td``'s leaves that a host read must wait for (not the CPU, not meta).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> accelerators_of(TensorDict({"a": torch.ones(2)}, [2]))
        ()
    """
    device = td.device
    if device is not None:
        return () if device.type in _HOST else (device,)
    found = {leaf.device for leaf in flat_leaves(td) if isinstance(leaf, _Tensor)}
    return tuple(d for d in found if d.type not in _HOST)


def settle(devices: Iterable[torch.device]) -> None:
    """Wait for the work queued on ``devices`` (the copies made non-blocking to the host).

    Examples:
        >>> settle(())  # nothing to wait for
    """
    for device in devices:
        if device.type in _HOST:
            continue
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        else:  # another accelerator (mps, xpu, ...): torch's device-generic call
            torch.accelerator.synchronize(device)


def cpu(self: TensorDictBase, **kwargs: Any) -> TensorDictBase:
    """Move every leaf to the CPU (one synchronisation after the copies: see :meth:`to`)."""
    return self.to("cpu", **kwargs)


def cuda(self: TensorDictBase, device: Any = None, **kwargs: Any) -> TensorDictBase:
    """Move every leaf to a CUDA device."""
    if device is None:
        device = "cuda"
    elif isinstance(device, int):
        device = f"cuda:{device}"
    return self.to(device, **kwargs)


def pinned(td: TensorDictBase, num_threads: int | None = None) -> TensorDictBase:
    """``td`` with its CPU leaves in page-locked memory (``num_threads`` > 1: pinned by a thread pool).

    Each leaf is copied once, into torch's pinned-memory cache; leaves already pinned or not on the
    CPU are kept.
    """

    def pin(x: _Tensor) -> _Tensor:
        return x.pin_memory() if x.device.type == "cpu" and not x.is_pinned() else x

    if not num_threads or num_threads == 1:
        return td._map(pin, "pinning memory")
    from concurrent.futures import ThreadPoolExecutor  # only for a threaded pin

    with ThreadPoolExecutor(num_threads) as pool:
        return from_leaves(td, list(pool.map(pin, flat_leaves(td))))
