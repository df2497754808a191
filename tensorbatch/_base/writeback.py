"""Writing the result of a shape operation back into the TensorDict it was made from, on leaving a ``with`` block.

``with td.permute(1, 0) as t:`` works on ``t``; on exit the inverse operation runs on ``t`` and its entries
replace those of ``td`` (new keys are added; keys deleted in the block stay in ``td``). The result records
``(op name, args, kwargs, weak reference to td, batch size before an inplace=True call)`` in its ``_last_op``
(see :func:`.locks.keep_lock`); a block that raises writes nothing back.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._errors import user_stacklevel
from .._ops import shape as _shape

# the methods whose result writes back (aliases with their own name)
WRITE_BACK = frozenset(
    {"unsqueeze", "squeeze", "view", "transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis"}
    | {"flip", "fliplr", "flipud", "roll", "rot90", "atleast_1d", "atleast_2d", "atleast_3d", "flatten"}
    | {"unflatten", "flatten_keys", "unflatten_keys", "to"}
)
RECORD_THEMSELVES = frozenset({"flatten_keys", "unflatten_keys"})  # (hot paths: no wrapper, they call record)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    """The argument at position ``i`` or keyword ``name``."""
    return args[i] if len(args) > i else kwargs.get(name, default)


def _unsqueeze(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    return result.squeeze(_arg(args, kwargs, 0, "dim"))


def _squeeze(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    dim = _arg(args, kwargs, 0, "dim")
    if dim is None:
        raise RuntimeError(
            "squeeze() without a dim cannot write back at the end of a with block (which dims to restore is "
            "unknown): call squeeze(dim)"
        )
    return None if result.batch_dims == source.batch_dims else result.unsqueeze(dim)  # (None: nothing squeezed)


def _permute(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    order = _shape.permute_order(source, *args, **kwargs)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return result.permute(*inverse)


def _flatten(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    start, end = _arg(args, kwargs, 0, "start_dim"), _arg(args, kwargs, 1, "end_dim")
    nd = source.batch_dims
    if nd == 0:  # a 0-dim TensorDict flattens to batch size [1]
        return result.squeeze(0)
    start = 0 if start is None else start % nd
    end = nd - 1 if end is None else end % nd
    return result.unflatten(start, source.batch_size[start : end + 1])


def _unflatten(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    dim, sizes = _arg(args, kwargs, 0, "dim"), _arg(args, kwargs, 1, "unflattened_size")
    dim %= source.batch_dims
    return result.flatten(dim, dim + len(sizes) - 1)


def _roll(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    shifts, dims = _arg(args, kwargs, 0, "shifts"), _arg(args, kwargs, 1, "dims")
    back = -shifts if isinstance(shifts, int) else tuple(-s for s in shifts)
    return result.roll(back, dims)


def _atleast(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    for _ in range(result.batch_dims - source.batch_dims):  # the leading dims it added
        result = result.squeeze(0)
    return result


def _to(result: Any, source: Any, args: Any, kwargs: Any) -> Any:
    cast = "dtype" in kwargs or any(isinstance(a, torch.dtype) or getattr(a, "batch_size", None) for a in args)
    # (a TensorDict argument: to(other) or to(td.attrs()), which may cast)
    if source.is_locked:
        raise RuntimeError(
            "Cannot modify locked TensorDict: a with block on to() writes its leaves back, unlock the TensorDict first"
        )

    def back(x: torch.Tensor, y: Any) -> torch.Tensor:
        if y is None:  # a key set in the block: as it is
            return x
        return x.to(device=y.device, dtype=y.dtype) if cast else x.to(y.device)

    return result.apply(back, source, default=None)


# op name -> inverse(result, source, args, kwargs): the TensorDict to write back (None: nothing to write)
INVERSE: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "view": lambda result, source, args, kwargs: result.view(source.batch_size),
    "transpose": lambda result, source, args, kwargs: result.transpose(*args, *kwargs.values()),
    "permute": _permute,
    "movedim": lambda result, source, args, kwargs: result.movedim(
        _arg(args, kwargs, 1, "destination"), _arg(args, kwargs, 0, "source")
    ),
    "flip": lambda result, source, args, kwargs: result.flip(_arg(args, kwargs, 0, "dims")),
    "fliplr": lambda result, source, args, kwargs: result.fliplr(),
    "flipud": lambda result, source, args, kwargs: result.flipud(),
    "roll": _roll,
    "rot90": lambda result, source, args, kwargs: result.rot90(
        -_arg(args, kwargs, 0, "k", 1), _arg(args, kwargs, 1, "dims", (0, 1))
    ),
    "atleast_1d": _atleast,
    "flatten": _flatten,
    "unflatten": _unflatten,
    "flatten_keys": lambda result, source, args, kwargs: result.unflatten_keys(_arg(args, kwargs, 0, "separator", ".")),
    "unflatten_keys": lambda result, source, args, kwargs: result.flatten_keys(_arg(args, kwargs, 0, "separator", ".")),
    "to": _to,
}
INVERSE.update(
    swapaxes=INVERSE["transpose"],
    swapdims=INVERSE["transpose"],
    moveaxis=INVERSE["movedim"],
    atleast_2d=_atleast,
    atleast_3d=_atleast,
)


def _flatten_inplace(td: Any, args: Any, kwargs: Any, before: torch.Size) -> None:
    nd = len(before)
    start, end = _arg(args, kwargs, 0, "start_dim"), _arg(args, kwargs, 1, "end_dim")
    start = 0 if start is None else start
    end = -1 if end is None else end
    sizes = before[start % nd : end % nd + 1] if nd else before
    # as tensordict 0.15: the dims given, read against the flattened batch size, name one dim: it stays flat
    now = td.batch_dims
    d0, d1 = (start + now if start < 0 else start), (end + now if end < 0 else end)
    if -now <= d0 < now and len(td.batch_size[d0 : d1 + 1]) == 1:
        if len(sizes) > 1:
            warnings.warn(
                f"a with block on flatten(..., inplace=True) leaves the batch size flattened "
                f"({list(td.batch_size)}), as tensordict 0.15 (0.17 restores it on exit): to keep it, call "
                "flatten(..., inplace=True) outside a with block",
                FutureWarning,
                stacklevel=user_stacklevel(),  # the with statement
            )
        return
    td.unflatten(start % nd, sizes, inplace=True)


def _unflatten_inplace(td: Any, args: Any, kwargs: Any, before: torch.Size) -> None:
    dim, sizes = _arg(args, kwargs, 0, "dim"), _arg(args, kwargs, 1, "unflattened_size")
    dim %= len(before)
    td.flatten(dim, dim + len(sizes) - 1, inplace=True)


# op name -> undo(td, args, kwargs, batch size before) of its ``inplace=True`` form (the others: as above;
# flatten_keys gets, for the batch size, whether no key held the separator before: False, as the others)
INPLACE_UNDO: dict[str, Callable[[Any, Any, Any, torch.Size], None]] = {
    "flatten": _flatten_inplace,
    "unflatten": _unflatten_inplace,
    "flatten_keys": lambda td, args, kwargs, exact: td.unflatten_keys(args[0], inplace=True),
}


def write_back(result: Any, record: tuple[Any, ...]) -> None:
    """Write ``result`` (the ``with`` block's TensorDict) back into the TensorDict it was made from.

    An ``inplace=True`` flatten, unflatten or flatten_keys changed that TensorDict itself (it is ``result``):
    its inverse runs in place.

    Raises:
        RuntimeError: when that TensorDict no longer exists, or (``squeeze()``) the op cannot be inverted.
    """
    name, args, kwargs, ref, before = record
    source = ref() if type(ref) is weakref.ref else ref  # (the source itself when recorded under torch.compile)
    if source is None:
        raise RuntimeError(
            f"the TensorDict that {name}() was called on no longer exists: nothing to write the with block back into"
        )
    if kwargs and kwargs.get("inplace") and name in INPLACE_UNDO and before is not False:
        # (flatten_keys records False when a key held the separator before: then as the other form)
        INPLACE_UNDO[name](result, args, kwargs, before)
        return
    back = INVERSE[name](result, source, args, kwargs)
    if back is None:
        return
    if source.is_locked:  # (its keys cannot change: the values, in place)
        source.update_(back)
    else:
        source.update(back, inplace=False)
