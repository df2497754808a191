"""Pointwise and arithmetic methods, generated from one table.

Each entry names a torch function; :func:`install` turns the table into methods (and their
in-place twins), aliases and Python operators on ``TensorDictBase``. The table is the single source
of these names: lazy stacks, the typed wrappers' delegation and ``HANDLED`` read ``METHODS``,
``INPLACE``, ``NAMES`` and ``TORCH_FUNCTIONS``. Dense leaves go through ``torch._foreach_*`` when
torch has a variant; if the fast path raises, the same op is re-run leaf by leaf so the error
carries the key path. In-place ops check every leaf before writing any (:func:`map_inplace`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np
import torch

from .._compat import dynamo_compiling, transforms_active
from .._errors import add_path_note, fmt_path, fmt_shape, key_sets_differ
from .._keys import key_of
from .traced import binary, plain_leaves, unary
from .traverse import (
    NON_TENSOR_TYPES,
    first_leaf,
    flat_leaves,
    flat_leaves_like,
    from_leaves,
    is_td,
    map_leaves,
    named_leaves,
    source_leaves,
)

# name -> has an in-place twin
UNARY: dict[str, bool] = {
    name: True
    for name in (
        "abs",
        "acos",
        "asin",
        "atan",
        "ceil",
        "cos",
        "cosh",
        "erf",
        "erfc",
        "exp",
        "expm1",
        "floor",
        "frac",
        "lgamma",
        "log",
        "log10",
        "log1p",
        "log2",
        "neg",
        "reciprocal",
        "round",
        "sigmoid",
        "sign",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "trunc",
        "bitwise_not",
        "logical_not",
    )
} | {name: False for name in ("isfinite", "isnan", "isinf", "isneginf", "isposinf", "isreal", "signbit")}

# name -> (torch function name, has in-place twin)
BINARY: dict[str, tuple[str, bool]] = {
    "add": ("add", True),
    "sub": ("sub", True),
    "mul": ("mul", True),
    "div": ("div", True),
    "pow": ("pow", True),
    "maximum": ("maximum", True),
    "minimum": ("minimum", True),
    "clamp_min": ("clamp_min", True),
    "clamp_max": ("clamp_max", True),
    "floor_divide": ("floor_divide", True),
    "remainder": ("remainder", True),
    "eq": ("eq", False),
    "ne": ("ne", False),
    "lt": ("lt", False),
    "le": ("le", False),
    "gt": ("gt", False),
    "ge": ("ge", False),
    "bitwise_and": ("bitwise_and", True),
    "bitwise_or": ("bitwise_or", True),
    "bitwise_xor": ("bitwise_xor", True),
    "logical_and": ("logical_and", True),
    "logical_or": ("logical_or", True),
    "logical_xor": ("logical_xor", True),
    "rsub": ("rsub", False),  # other - self (torch.rsub): no in-place twin, as in torch
}

# python operator -> (method, reflected torch function or None)
OPERATORS: dict[str, str] = {
    "__add__": "add",
    "__sub__": "sub",
    "__mul__": "mul",
    "__truediv__": "div",
    "__pow__": "pow",
    "__floordiv__": "floor_divide",
    "__mod__": "remainder",
    "__eq__": "eq",
    "__ne__": "ne",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__iadd__": "add_",
    "__isub__": "sub_",
    "__imul__": "mul_",
    "__itruediv__": "div_",
    "__ipow__": "pow_",
    "__ifloordiv__": "floor_divide_",
    "__imod__": "remainder_",
    "__iand__": "bitwise_and_",
    "__ior__": "bitwise_or_",
    "__ixor__": "bitwise_xor_",
    "__neg__": "neg",
    "__abs__": "abs",
    "__invert__": "bitwise_not",
}
REFLECTED: dict[str, str] = {
    "__radd__": "add",
    "__rsub__": "sub",
    "__rmul__": "mul",
    "__rtruediv__": "div",
    "__rpow__": "pow",
    "__rfloordiv__": "floor_divide",
    "__rmod__": "remainder",
    "__rand__": "bitwise_and",
    "__ror__": "bitwise_or",
    "__rxor__": "bitwise_xor",
}

# other names of table methods (torch's own aliases): alias -> method
ALIASES: dict[str, str] = {
    "true_divide": "div",
    "divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "mod": "remainder",
}

# dtype casts: method name -> dtype
CASTS: dict[str, torch.dtype] = {
    "float": torch.float32,
    "double": torch.float64,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int": torch.int32,
    "long": torch.int64,
    "bool": torch.bool,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "short": torch.int16,
    "byte": torch.uint8,
    "char": torch.int8,
    "cfloat": torch.complex64,
    "cdouble": torch.complex128,
    "complex32": torch.complex32,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
}


_OPERANDS = (torch.Tensor, int, float, bool, complex)
_NUMPY_SCALARS = (np.number, np.bool_)


def _scalar_operand(what: str, other: Any) -> Any:
    """A NumPy scalar operand as the Python number it holds (as torch takes it); TypeError for anything else."""
    if isinstance(other, _NUMPY_SCALARS):
        return other.item()
    raise TypeError(f"{what}: unsupported operand of type {type(other).__name__}")


_TENSOR_ONLY = {"maximum", "minimum", "logical_and", "logical_or", "logical_xor"}


def _foreach(name: str) -> Any:  # at op-creation time: a missing name goes through torch's slow __getattr__
    return getattr(torch, f"_foreach_{name}", None)


# _NO_BATCHING: foreach kernels have no vmap batching rule: eager vmap falls back to a slow per-sample loop,
# and under torch.compile (vmap(compile(f)), compile(vmap(f))) tracing fails on them. So no foreach call
# inside a functorch transform: one global check per op (cheaper than asking a leaf whether it is batched;
# dynamo traces it), and eager ops still fall back leaf by leaf on a foreach error. A foreach call that
# falls back when it fails is not made while dynamo traces either: there its failure (an integer leaf beside
# a leaf that requires grad) fails the whole compile instead of reaching the ``except``.


def _use_foreach(td: Any) -> bool:
    # foreach kernels fuse launches on accelerators; on the CPU they are a C++ loop that rarely beats
    # ours once the flat leaf lists are built (measured with torch 2.13: clone does, and opts in with
    # map_dense(cpu=True); unary math like exp is slower).
    device = td.device
    if device is not None:
        return device.type != "cpu"  # type: ignore[no-any-return]
    leaf = first_leaf(td)
    return isinstance(leaf, torch.Tensor) and not leaf.is_cpu


def map_dense(
    td: Any,
    foreach: Any,
    op: Callable[..., Any],
    what: str,
    *args: Any,
    cpu: bool = False,
    copy_values: bool = False,
    keep_non_tensor: bool = False,
    **kwargs: Any,
) -> Any:
    """New tree with ``op(leaf, *args)`` per leaf, through ``foreach(leaves, *args)`` on accelerators.

    ``cpu=True`` takes the foreach path on the CPU too: for ops whose CPU foreach kernel measured faster
    than the loop (clone). ``copy_values``: non-tensor leaves hold deep copies of their values (clone).
    ``keep_non_tensor``: the non-tensor leaves of in-memory nodes are ``td``'s own (to_tensordict).
    """
    if dynamo_compiling() and not args and not kwargs:  # traced.py: lean while dynamo traces
        out = unary(td, op)  # (None for a tree holding non-tensor leaves)
        if out is not None:
            return out
    if foreach is not None and not kwargs and (cpu or _use_foreach(td)):
        try:
            leaves = flat_leaves(td)
        except RuntimeError:  # a lazy stack whose leaves cannot stack: the leaf-by-leaf path maps its members
            return _map_each(td, op, what, args, kwargs, copy_values)
        if not transforms_active() and not dynamo_compiling():  # see _NO_BATCHING
            try:
                return from_leaves(td, foreach(leaves, *args), copy_values=copy_values, keep_non_tensor=keep_non_tensor)
            except Exception:  # the leaf-by-leaf path decides (and names the key if it fails too)
                return _map_each(td, op, what, args, kwargs, copy_values, keep_non_tensor)
    return _map_each(td, op, what, args, kwargs, copy_values, keep_non_tensor)


def _map_each(
    td: Any, op: Callable[..., Any], what: str, args: Any, kwargs: Any, copy_values: bool, keep: bool = False
) -> Any:
    """:func:`map_dense` leaf by leaf (``copy_values``: the non-tensor leaves are mapped to deep copies too)."""
    if keep and not args and not kwargs and type(td) is td._dense_cls:  # the non-tensor leaves themselves

        def own(x: Any) -> Any:
            return x if type(x) in NON_TENSOR_TYPES else op(x)

        return map_leaves(td, own, what=what, is_leaf=NON_TENSOR_TYPES.__contains__)
    if copy_values:

        def each(x: Any) -> Any:
            return x._copied(True) if type(x) in NON_TENSOR_TYPES else op(x, *args, **kwargs)

        return map_leaves(td, each, what=what, is_leaf=NON_TENSOR_TYPES.__contains__)
    if args or kwargs:
        return map_leaves(td, lambda x: op(x, *args, **kwargs), what=what)
    return map_leaves(td, op, what=what)


# Unary ops whose result is floating: in place on an integer or bool leaf cannot work.
_FLOAT_RESULT = {
    "acos",
    "asin",
    "atan",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "exp",
    "expm1",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "reciprocal",
    "sigmoid",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "frac",
}
_INTEGRAL_ONLY = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}
# Binary-like ops whose result is floating even for integer operands (true division).
_TRUE_DIV = {"div", "lerp", "addcdiv"}


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _check_unary_(td: Any, name: str) -> None:
    """Refuse an in-place unary op that would fail on some leaf, before touching any leaf."""
    if name not in _FLOAT_RESULT and name not in _INTEGRAL_ONLY:
        return
    for path, leaf in named_leaves(td):
        bad = (name in _FLOAT_RESULT and not _is_float(leaf.dtype)) or (
            name in _INTEGRAL_ONLY and _is_float(leaf.dtype)
        )
        if bad:
            raise RuntimeError(
                f"{name}_ cannot run in place on leaf {fmt_path(path)} of dtype {leaf.dtype}: nothing was modified"
            )


def _check_binary_(td: Any, name: str, other: Any, rhs: list[Any], leaves: list[Any] | None = None) -> None:
    """Refuse an in-place binary op whose result cannot be written into some leaf (shape or dtype).

    ``leaves``: ``flat_leaves(td)`` when the caller has them.
    """
    if leaves is None:
        leaves = flat_leaves(td)
    if not is_td(other) and not isinstance(other, torch.Tensor):
        if dynamo_compiling():  # dynamo cannot trace torch.result_type; a write that cannot work fails the trace
            return  # (before any leaf is written)
        # a number: the result dtype depends on the leaf's dtype only, so each dtype is checked once
        for dtype, a in {a.dtype: a for a in leaves}.items():  # (no attrgetter: compile traces this)
            _check_result_dtype(name, torch.result_type(a, other), dtype, partial(_path_of_dtype, td, dtype))
        return
    same_ok = name not in _TRUE_DIV
    if same_ok and len(leaves) == len(rhs):  # the usual case, checked in one tight loop: equal dtypes and shapes
        for a, b in zip(leaves, rhs, strict=True):
            if type(b) is not torch.Tensor or a.dtype is not b.dtype or a.shape != b.shape:
                break
        else:
            return
    if dynamo_compiling():  # as for a number (above)
        return
    for i, (a, b) in enumerate(zip(leaves, rhs, strict=True)):
        if type(b) is not torch.Tensor:
            result = torch.result_type(a, b)
        elif b.dtype == a.dtype and b.shape == a.shape and (same_ok or _is_float(a.dtype)):
            continue
        else:
            if b.shape != a.shape:
                try:
                    fits = torch.broadcast_shapes(a.shape, b.shape) == a.shape  # type: ignore[no-untyped-call]
                except RuntimeError:
                    fits = False
                if not fits:
                    raise RuntimeError(
                        f"{name}_: operand of shape {fmt_shape(b.shape)} cannot be written in place into "
                        f"leaf {fmt_path(_path_at(td, i))} of shape {fmt_shape(a.shape)}: nothing was modified"
                    )
            result = torch.result_type(a, b)
        _check_result_dtype(name, result, a.dtype, partial(_path_at, td, i))


def _path_at(td: Any, i: int) -> tuple[str, ...]:
    """The path of ``flat_leaves(td)[i]`` (found only for an error message)."""
    return next(path for j, (path, _) in enumerate(named_leaves(td)) if j == i)


def _path_of_dtype(td: Any, dtype: torch.dtype) -> tuple[str, ...]:
    """The path of the first leaf of ``dtype`` (found only for an error message)."""
    return next(path for path, leaf in named_leaves(td) if leaf.dtype == dtype)


def _check_result_dtype(
    name: str, result: torch.dtype, dtype: torch.dtype, path_of: Callable[[], tuple[str, ...]]
) -> None:
    """Raise if ``name``'s result of dtype ``result`` cannot be written into a leaf of ``dtype``.

    ``path_of()`` gives the leaf's path (only called for the error message).
    """
    if name in _TRUE_DIV and not _is_float(result):
        result = torch.get_default_dtype()
    if not torch.can_cast(result, dtype) or (name in _INTEGRAL_ONLY and _is_float(result)):
        raise RuntimeError(
            f"{name}_: result type {result} cannot be written in place into leaf {fmt_path(path_of())} "
            f"of dtype {dtype}: nothing was modified"
        )


def map_dense_(td: Any, foreach: Any, method: str, what: str, *args: Any, **kwargs: Any) -> Any:
    """In-place ``leaf.<method>(*args)`` on every leaf; returns ``td``.

    Failures that can be predicted (dtype) are refused before any leaf is touched; for the rest the
    failing leaf is named in the error note (found on copies, so no leaf is modified twice).
    """
    _check_unary_(td, method[:-1])
    leaves = flat_leaves(td)
    try:
        if foreach is not None and leaves and not kwargs and not transforms_active():  # see _NO_BATCHING
            foreach(leaves, *args)
        else:
            for leaf in leaves:
                getattr(leaf, method)(*args, **kwargs)
    except Exception as err:
        for path, leaf in named_leaves(td):
            try:
                getattr(leaf.clone(), method)(*args, **kwargs)
            except Exception:
                add_path_note(err, what, path)
                break
        raise
    td._write_back(leaves)  # (a storage hook: the leaves may be copies read from storage)
    return td


def leaves_of(other: Any, like: Any, leaves: list[Any] | None = None) -> list[Any]:
    """The operand matching each leaf of ``like``.

    A TensorDict gives its leaves (same keys required); a tensor is aligned with the batch dims of
    each leaf (trailing singleton dims added over the leaf's feature dims); anything else repeats.
    ``leaves``: ``flat_leaves(like)`` when the caller has them.
    """
    if is_td(other):
        return flat_leaves_like(other, like)
    if leaves is None:
        leaves = flat_leaves(like)
    if isinstance(other, torch.Tensor) and other.ndim:
        return [_align(other, leaf) for leaf in leaves]
    return [other] * len(leaves)


def _align(other: torch.Tensor, leaf: Any) -> torch.Tensor:
    pad = leaf.ndim - other.ndim
    return other.reshape(*other.shape, *([1] * pad)) if pad > 0 else other


def _result_batch(td: Any, other: Any) -> Any:
    """Batch size of ``td <op> other``: a tensor operand broadcasts with the batch dims."""
    if isinstance(other, torch.Tensor) and other.ndim:
        nd = td.batch_dims
        aligned = (*other.shape[:nd], *([1] * (nd - other.ndim)))
        new = torch.broadcast_shapes(td.batch_size, aligned)  # type: ignore[no-untyped-call]
        return None if new == td.batch_size else new
    return None


def _binary_map(td: Any, other: Any, name: str, kwargs: dict[str, Any], op: Any, foreach: Any) -> Any:
    """``op(leaf, other_leaf)`` per leaf (``foreach`` is ``torch._foreach_<name>`` or None)."""
    if is_td(other):
        if foreach is not None and not kwargs and _use_foreach(td):
            leaves, rhs = flat_leaves(td), flat_leaves_like(other, td)
            if not transforms_active() and not dynamo_compiling():  # see _NO_BATCHING
                try:
                    return from_leaves(td, foreach(leaves, rhs))
                except Exception:  # the leaf-by-leaf path decides (and names the key if it fails too)
                    return map_leaves(td, op, other, what=name)
        if kwargs:
            return map_leaves(td, lambda a, b: op(a, b, **kwargs), other, what=name)
        return map_leaves(td, op, other, what=name)
    if isinstance(other, torch.Tensor) and other.ndim:
        out = map_leaves(td, lambda a: op(a, _align(other, a), **kwargs), what=name)
        new_bs = _result_batch(td, other)
        if new_bs is not None:
            out = from_leaves(out, flat_leaves(out), batch_size=new_bs)
        return out
    if foreach is not None and not kwargs:  # with a scalar, foreach beats a Python loop on the CPU too
        leaves = flat_leaves(td)
        if not transforms_active() and not dynamo_compiling():  # see _NO_BATCHING
            try:
                return from_leaves(td, foreach(leaves, other))
            except Exception:  # the leaf-by-leaf path decides (and names the key if it fails too)
                return map_leaves(td, lambda a: op(a, other), what=name)
    if name in _TENSOR_ONLY:  # torch.maximum & co. take no Python scalars
        return map_leaves(td, lambda a: op(a, torch.as_tensor(other, dtype=a.dtype, device=a.device)), what=name)
    return map_leaves(td, lambda a: op(a, other, **kwargs), what=name)


def _with_default(td: Any, other: Any, name: str, default: Any, kwargs: dict[str, Any]) -> Any:
    """Binary op over TensorDicts with different keys: intersection, or ``default`` for missing leaves."""
    op = getattr(torch, name)
    mine = dict(named_leaves(td))
    theirs = dict(named_leaves(other))
    if default == "intersection":
        paths = [p for p in mine if p in theirs]
    else:
        paths = list(mine) + [p for p in theirs if p not in mine]
    out = td.empty()
    for path in paths:
        a = mine.get(path, default)
        b = theirs.get(path, default)
        out.set(path, op(torch.as_tensor(a), b, **kwargs) if path not in mine else op(a, b, **kwargs))
    return out


def _make_unary(name: str) -> Callable[..., Any]:
    op, foreach = getattr(torch, name), _foreach(name)

    def method(self: Any) -> Any:
        return map_dense(self, foreach, op, name)

    method.__name__ = name
    method.__doc__ = f"Apply :func:`torch.{name}` to every leaf. Returns a new TensorDict."
    return method


def _make_unary_(name: str) -> Callable[..., Any]:
    foreach = _foreach(f"{name}_")

    def method(self: Any) -> Any:
        return map_dense_(self, foreach, f"{name}_", f"{name}_")

    method.__name__ = f"{name}_"
    method.__doc__ = f"In-place :func:`torch.{name}` on every leaf. Returns self."
    return method


def _make_binary(name: str, torch_name: str) -> Callable[..., Any]:
    op, foreach = getattr(torch, torch_name), _foreach(torch_name)
    numbers = torch_name not in _TENSOR_ONLY

    def method(self: Any, other: Any, *, alpha: Any = None, default: Any = None) -> Any:
        if dynamo_compiling() and alpha is None and default is None:  # traced.py: lean while dynamo traces
            out = binary(self, other, op, numbers)
            if out is not None:
                return out
        if not is_td(other) and not isinstance(other, _OPERANDS):  # (the set lookup first: cheaper)
            other = _scalar_operand(name, other)
        kwargs = {} if alpha is None else {"alpha": alpha}
        if default is not None and is_td(other):
            return _with_default(self, other, torch_name, default, kwargs)
        return _binary_map(self, other, torch_name, kwargs, op, foreach)

    method.__name__ = name
    method.__doc__ = (
        f"Apply :func:`torch.{torch_name}` leaf-wise with ``other`` (TensorDict, tensor or number). "
        "Returns a new TensorDict."
    )
    return method


def _make_binary_(name: str) -> Callable[..., Any]:
    foreach = _foreach(f"{name}_")
    if hasattr(torch.Tensor, f"{name}_"):

        def write(a: Any, b: Any, **kwargs: Any) -> Any:
            return getattr(a, f"{name}_")(b, **kwargs)
    else:  # e.g. maximum/minimum: no Tensor method, but an ``out=`` form
        op = getattr(torch, name)

        def write(a: Any, b: Any, **kwargs: Any) -> Any:
            return op(a, b, out=a, **kwargs)

    def inplace(a: Any, b: Any, **kwargs: Any) -> Any:
        if name in _TENSOR_ONLY and not isinstance(b, torch.Tensor):  # these take no Python scalars
            b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
        return write(a, b, **kwargs)

    number_foreach = None if name in _TENSOR_ONLY else foreach  # maximum & co. take no Python scalars

    def method(self: Any, other: Any, *, alpha: Any = None) -> Any:
        if dynamo_compiling() and alpha is None and _lean_inplace(self, inplace, other, foreach, number_foreach):
            return self  # traced.py: lean while dynamo traces
        td_other = is_td(other)
        if not td_other and not isinstance(other, _OPERANDS):
            other = _scalar_operand(f"{name}_", other)
        if alpha is not None:
            return map_inplace(self, name, partial(inplace, alpha=alpha), other)
        if td_other:
            return map_inplace(self, name, inplace, other, foreach=foreach)
        return map_inplace(
            self, name, inplace, other, foreach=None if isinstance(other, torch.Tensor) else number_foreach
        )

    method.__name__ = f"{name}_"
    method.__doc__ = f"In-place :func:`torch.{name}` leaf-wise with ``other``. Returns self."
    return method


def map_inplace(
    td: Any,
    name: str,
    write: Callable[..., Any],
    *operands: Any,
    foreach: Any = None,
    check: Callable[[Any, list[Any]], None] | None = None,
) -> Any:
    """In-place ``write(leaf, *operand_leaves)`` on every leaf, once every leaf is known to take it; returns ``td``.

    The one in-place engine of the binary table ops and of ``lerp_``, ``addcmul_``, ``addcdiv_``,
    ``clamp_`` and ``masked_fill_``: all leaves are checked before any is written, so a refused op
    leaves the container unchanged, and errors name the op and the key path.

    Args:
        td: the TensorDict written into.
        name: the op, without the trailing underscore (``"clamp"``), for errors.
        write: the in-place op on one leaf and its operands.
        operands: TensorDicts (matched by key), tensors (aligned with the batch dims) or numbers and
            None (repeated for every leaf).
        foreach: ``torch._foreach_<name>_`` when it may be used (one operand): called with the leaves
            and the operand's leaves (a TensorDict) or the operand itself (a number).
        check: ``check(td, leaves)`` raising before any write; default: the result of each operand
            must fit every leaf's dtype and shape.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.long)}, [2])
        >>> map_inplace(td, "add", torch.Tensor.add_, 1)["a"]
        tensor([1., 1.])
        >>> map_inplace(td, "add", torch.Tensor.add_, 0.5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        RuntimeError: add_: result type torch.float32 cannot be written in place into leaf 'b' ...
        >>> td["a"]
        tensor([1., 1.])
    """
    if (
        dynamo_compiling()
        and len(operands) == 1
        and check is None
        and _lean_inplace(td, write, operands[0], foreach, foreach)
    ):
        return td
    leaves = flat_leaves(td)
    if len(operands) == 1:  # the binary twins, a hot path: no loops over the operands
        rhs = [leaves_of(operands[0], td, leaves)]
        if check is None:
            _check_binary_(td, name, operands[0], rhs[0], leaves)
    else:
        rhs = [leaves_of(o, td, leaves) for o in operands]
        if check is None:
            for other, other_leaves in zip(operands, rhs, strict=True):
                if other is not None:
                    _check_binary_(td, name, other, other_leaves, leaves)
    if check is not None:
        check(td, leaves)
    try:
        # one operand: a TensorDict's leaves, or a number as it is (_NO_BATCHING: no foreach on batched leaves)
        if foreach is not None and leaves and not transforms_active():
            foreach(leaves, rhs[0] if is_td(operands[0]) else operands[0])
        else:
            for row in zip(leaves, *rhs, strict=True):
                write(*row)
    except Exception as err:
        _note_first_failure(td, err, write, rhs, f"{name}_")
        raise
    td._write_back(leaves)  # (a storage hook: the leaves may be copies read from storage)
    return td


def _lean_inplace(td: Any, write: Callable[..., Any], other: Any, foreach: Any, number_foreach: Any) -> bool:
    """:func:`map_inplace` while dynamo traces, on a plain tree (traced.py): False, and nothing written, if not.

    ``other``: a TensorDict (``foreach`` takes the leaves), an int or a float (``number_foreach`` takes it) or a
    0-dim tensor (one write per leaf); anything else goes to the generic engine. No checks first: a write
    that cannot work fails the trace, before any leaf is written (the eager call that follows raises before
    writing too).
    """
    kind = type(other)
    if kind is type(td):
        pairs = plain_leaves(td, other)
    elif kind is float or kind is int:
        pairs, foreach = plain_leaves(td, None), number_foreach
    elif kind is torch.Tensor and not other.ndim:
        pairs, foreach = plain_leaves(td, None), None
    else:
        return False
    if pairs is None:
        return False
    leaves, rhs = pairs
    if foreach is not None and leaves and not transforms_active():  # see _NO_BATCHING
        foreach(leaves, rhs if kind is type(td) else other)
    else:
        list(map(write, leaves, rhs if kind is type(td) else [other] * len(leaves)))
    return True


def _note_first_failure(
    td: Any, err: BaseException, write: Callable[..., Any], rhs: list[list[Any]], what: str
) -> None:
    """Name the first leaf on which ``write`` fails (tried on copies, so no leaf is written twice)."""
    for (path, leaf), *row in zip(named_leaves(td), *rhs, strict=False):
        try:
            write(leaf.clone(), *row)
        except Exception:
            add_path_note(err, what, path)
            return


def _make_reflected(torch_name: str) -> Callable[..., Any]:
    op = getattr(torch, torch_name)

    def method(self: Any, other: Any) -> Any:
        if is_td(other):
            return NotImplemented
        if isinstance(other, _NUMPY_SCALARS):  # (reached when numpy defers: TensorDictBase.__array_ufunc__)
            other = other.item()
        if isinstance(other, torch.Tensor) and other.ndim:  # aligned with the batch dims, as td <op> t
            out = map_leaves(self, lambda x: op(_align(other, x), x), what=torch_name)
            new_bs = _result_batch(self, other)
            return out if new_bs is None else from_leaves(out, flat_leaves(out), batch_size=new_bs)
        return map_leaves(self, lambda x: op(other, x), what=torch_name)

    return method


# The dedicated tensor methods (``x.double()``) skip ``to``'s argument parsing: ~30% cheaper per leaf.
_CAST_METHODS: dict[torch.dtype, Callable[[torch.Tensor], torch.Tensor]] = {
    torch.float64: torch.Tensor.double,
    torch.float32: torch.Tensor.float,
    torch.float16: torch.Tensor.half,
    torch.bfloat16: torch.Tensor.bfloat16,
    torch.int64: torch.Tensor.long,
    torch.int32: torch.Tensor.int,
    torch.int16: torch.Tensor.short,
    torch.int8: torch.Tensor.char,
    torch.uint8: torch.Tensor.byte,
    torch.bool: torch.Tensor.bool,
}


def cast(td: Any, dtype: torch.dtype, cast_filter: Callable[..., bool] | None = None) -> Any:
    """Cast every leaf to ``dtype`` (only those for which ``cast_filter(key_path, leaf)`` is true, if given)."""
    if cast_filter is not None:
        leaves = [
            leaf.to(dtype) if isinstance(leaf, torch.Tensor) and cast_filter(path, leaf) else leaf
            for path, leaf in named_leaves(td)
        ]
        return from_leaves(td, leaves)
    method = _CAST_METHODS.get(dtype)
    if method is not None:
        return map_leaves(td, method, what=f"casting to {dtype}")
    return map_dense(td, None, torch.Tensor.to, f"casting to {dtype}", dtype)


def _make_cast(name: str, dtype: torch.dtype) -> Callable[..., Any]:
    def method(self: Any, *, cast_filter: Callable[..., bool] | None = None) -> Any:
        return cast(self, dtype, cast_filter)

    method.__name__ = name
    method.__doc__ = f"Cast every leaf to ``{dtype}`` (``cast_filter(key_path, leaf)`` picks the leaves)."
    return method


def _zip_map(td: Any, fn: Callable[..., Any], what: str, *operands: Any) -> Any:
    """``fn(leaf, *operand_leaves)`` per leaf; the failing leaf's key path is noted on errors."""
    out = []
    try:
        for row in zip(flat_leaves(td), *(leaves_of(o, td) for o in operands), strict=True):
            out.append(fn(*row))
    except Exception as err:
        if not isinstance(err, KeyError):
            add_path_note(err, what, [p for p, _ in named_leaves(td)][len(out)])
        raise
    return from_leaves(td, out)


def lerp(self: Any, end: Any, weight: Any) -> Any:
    """Linear interpolation towards ``end`` (TensorDict, tensor or number) by ``weight``."""
    return _zip_map(self, torch.lerp, "lerp", end, weight)


def lerp_(self: Any, end: Any, weight: Any) -> Any:
    """In-place :meth:`lerp`."""
    return map_inplace(self, "lerp", torch.Tensor.lerp_, end, weight)


def addcmul(self: Any, other1: Any, other2: Any, *, value: Any = 1) -> Any:
    """``self + value * other1 * other2`` leaf-wise."""
    return _zip_map(self, lambda a, b, c: torch.addcmul(a, b, c, value=value), "addcmul", other1, other2)


def addcmul_(self: Any, other1: Any, other2: Any, *, value: Any = 1) -> Any:
    """In-place :meth:`addcmul`."""
    return map_inplace(self, "addcmul", partial(torch.Tensor.addcmul_, value=value), other1, other2)


def addcdiv(self: Any, other1: Any, other2: Any, *, value: Any = 1) -> Any:
    """``self + value * other1 / other2`` leaf-wise."""
    return _zip_map(self, lambda a, b, c: torch.addcdiv(a, b, c, value=value), "addcdiv", other1, other2)


def addcdiv_(self: Any, other1: Any, other2: Any, *, value: Any = 1) -> Any:
    """In-place :meth:`addcdiv`."""
    return map_inplace(self, "addcdiv", partial(torch.Tensor.addcdiv_, value=value), other1, other2)


def clamp(self: Any, min: Any = None, max: Any = None, *, out: Any = None) -> Any:
    """Clamp every leaf into ``[min, max]`` (numbers, tensors or TensorDicts); ``out`` receives the result."""
    result = _zip_map(self, torch.clamp, "clamp", min, max)
    if out is None:
        return result
    return out.update_(result)


def clamp_(self: Any, min: Any = None, max: Any = None) -> Any:
    """In-place :meth:`clamp`."""
    return map_inplace(self, "clamp", torch.Tensor.clamp_, min, max)


EXTRA: dict[str, Callable[..., Any]] = {
    "lerp": lerp,
    "lerp_": lerp_,
    "addcmul": addcmul,
    "addcmul_": addcmul_,
    "addcdiv": addcdiv,
    "addcdiv_": addcdiv_,
    "clamp": clamp,
    "clamp_": clamp_,
}


_COMPARISONS = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"})


def _operator(
    method: Callable[..., Any], mappings: bool = False, lean: tuple[Any, bool] | None = None
) -> Callable[..., Any]:
    """Python operator form: NotImplemented for operands we don't know (``td == "x"`` is False).

    With ``mappings`` (the comparisons), a dict is compared leaf-wise, as tensordict does:
    ``td == td.to_dict()`` is a TensorDict of booleans, not False. ``lean``: the torch function of a binary
    method and whether it takes Python scalars, for traced.py's walk while dynamo traces (before the
    operand checks below: under dynamo, ``is_td`` guards every collection class).
    """
    torch_op, numbers = lean if lean is not None else (None, False)

    def op(self: Any, *other: Any) -> Any:
        if torch_op is not None and dynamo_compiling() and other:
            out = binary(self, other[0], torch_op, numbers)
            if out is not None:
                return out
        if other and not is_td(other[0]) and not isinstance(other[0], _OPERANDS):
            if mappings and isinstance(other[0], Mapping):
                return method(self, _mapping_operand(self, other[0]))
            if isinstance(other[0], _NUMPY_SCALARS):
                return method(self, other[0].item())
            return NotImplemented
        return method(self, *other)

    op.__name__ = method.__name__
    op.__doc__ = method.__doc__
    return op


def _mapping_operand(td: Any, mapping: Mapping[Any, Any]) -> Any:
    """``mapping``'s values as a TensorDict shaped like ``td`` (KeyError naming the keys when they differ)."""
    theirs = {path: v for path, v in source_leaves(mapping, "comparing") if type(v) not in NON_TENSOR_TYPES}
    mine = dict(named_leaves(td))
    if mine.keys() != theirs.keys():
        raise key_sets_differ((), (str(key_of(p)) for p in mine), (str(key_of(p)) for p in theirs))
    return from_leaves(
        td,
        [
            v if isinstance(v, torch.Tensor) or is_td(v) else torch.as_tensor(v, device=leaf.device)
            for (path, leaf), v in zip(mine.items(), (theirs[p] for p in mine), strict=True)
        ],
    )


# ---------------------------------------------------------------- what the table gives, for every consumer
# (the class's methods and operators, lazy stacks' per-member methods, the typed wrappers' delegation
# lists and ``HANDLED``: each derives its names from these, none keeps its own list)

METHODS: tuple[str, ...] = (
    *UNARY,
    *BINARY,
    *(n for n in EXTRA if not n.endswith("_")),
    *CASTS,
    *ALIASES,
)
"""Every out-of-place method the table installs (aliases included)."""

INPLACE: dict[str, str] = {
    f"{n}_": n
    for n in (
        *(n for n, twin in UNARY.items() if twin),
        *(n for n, (_, twin) in BINARY.items() if twin),
        *(n[:-1] for n in EXTRA if n.endswith("_")),
    )
}
"""Every in-place method the table installs -> its out-of-place twin."""

NAMES: frozenset[str] = frozenset({*METHODS, *INPLACE, *OPERATORS, *REFLECTED})
"""Every attribute :func:`install` sets (methods, in-place twins, operators)."""


def _torch_functions() -> dict[Callable[..., Any], str]:
    out: dict[Callable[..., Any], str] = {}
    for name in METHODS:
        if name in CASTS:  # ``torch.float`` is a dtype, not a function
            continue
        fn = getattr(torch, BINARY[name][0] if name in BINARY else name, None)
        if fn is not None:
            out[fn] = name
    return out


TORCH_FUNCTIONS: dict[Callable[..., Any], str] = _torch_functions()
"""``torch.<fn>`` -> method, for every table method torch also has as a function (``torch.expm1(td)``)."""


def install(cls: type[Any]) -> None:
    """Attach every table entry to ``cls`` as a method (and operator)."""
    for name, inplace in UNARY.items():
        setattr(cls, name, _make_unary(name))
        if inplace:
            setattr(cls, f"{name}_", _make_unary_(name))
    for name, (torch_name, inplace) in BINARY.items():
        setattr(cls, name, _make_binary(name, torch_name))
        if inplace:
            setattr(cls, f"{name}_", _make_binary_(name))
    for name, fn in EXTRA.items():
        setattr(cls, name, fn)
    for name, dtype in CASTS.items():
        setattr(cls, name, _make_cast(name, dtype))
    for alias, name in ALIASES.items():
        setattr(cls, alias, getattr(cls, name))
    for dunder, method in OPERATORS.items():
        fn_name = BINARY[method][0] if method in BINARY else None
        lean = None if fn_name is None else (getattr(torch, fn_name), fn_name not in _TENSOR_ONLY)
        setattr(cls, dunder, _operator(getattr(cls, method), dunder in _COMPARISONS, lean))
    for dunder, torch_name in REFLECTED.items():
        setattr(cls, dunder, _make_reflected(torch_name))
    cls.__hash__ = None  # type: ignore[assignment]  # __eq__ is leaf-wise
