"""Arrow columns <-> TensorDict leaves, for :mod:`tensorbatch.tabular` (pyarrow is imported by the caller).

Two readings of a column, as tensordict 0.15.3 has them:

- :func:`arrow_leaf` (``from_arrow``): numbers view the Arrow buffer, ``list`` columns of numbers become
  jagged nested tensors, ``fixed_size_list`` columns trailing dims, ``struct`` columns nested dicts (nested
  TensorDicts once built), anything else a :class:`NonTensorStack` of the Python values. Nulls raise, fill or
  fill-and-mask (``nulls=``).
- :func:`parquet_leaf` (``from_parquet``): numbers as numpy reads them (integers with nulls become float with
  NaN), timestamps int64 nanoseconds (NaT the smallest int64), anything else one Python value per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._nontensor import NonTensorStack
from ._ops.traverse import is_non_tensor

NULLS = ("raise", "fill", "mask")
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def stack(values: list[Any]) -> NonTensorStack:
    """A NonTensorStack holding ``values``, one per row (one shared list, no per-row object)."""
    return NonTensorStack._new(values, torch.arange(len(values)), None)


def combined(column: Any) -> Any:
    """One Arrow array for a (possibly chunked) column; a single chunk is taken as is, not copied."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    return column


# ------------------------------------------------------------------------------------ from_arrow
def _is_tensor_type(pa: Any, kind: Any) -> bool:
    if isinstance(kind, pa.FixedShapeTensorType):
        return _is_tensor_type(pa, kind.storage_type)
    if pa.types.is_fixed_size_list(kind):
        return _is_tensor_type(pa, kind.value_type)
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _no_nulls(array: Any, key: tuple[str, ...]) -> None:
    if array.null_count:
        raise ValueError(
            f"the Arrow column {key} has {array.null_count} null value(s): pass nulls='fill' to "
            f"fill them, or nulls='mask' to also get a mask entry"
        )


def _no_inner_nulls(pa: Any, array: Any, key: tuple[str, ...]) -> None:
    """Raise for a null inside the rows of a list or struct column, at any depth."""
    kind = array.type
    if pa.types.is_struct(kind):
        children = array.flatten()
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        children = [array.flatten()]
    else:
        return
    for child in children:
        _no_nulls(child, key)
        _no_inner_nulls(pa, child, key)


def _primitive(pa: Any, array: Any, copy: bool | None) -> torch.Tensor:
    """A 1-D tensor of a primitive array without nulls: a view of its buffer unless ``copy`` says otherwise."""
    if pa.types.is_boolean(array.type):  # bits: always a copy into bytes
        return torch.from_numpy(array.to_numpy(zero_copy_only=False))
    if len(array) == 0:  # DLPack refuses empty buffers
        return torch.from_numpy(array.to_numpy(zero_copy_only=False).copy())
    tensor = torch.utils.dlpack.from_dlpack(array)  # honours the array's offset; keeps the buffer alive
    buffer = array.buffers()[1]
    # torch has no read-only tensors: writing into a view of an immutable (memory-mapped) buffer kills the process
    if copy or (copy is None and buffer is not None and not buffer.is_mutable):
        tensor = tensor.clone()
    return tensor


def _tensor(pa: Any, array: Any, copy: bool | None, nulls: str, key: tuple[str, ...]) -> torch.Tensor:
    """A dense tensor of a numeric/boolean, fixed_size_list or fixed_shape_tensor array; nulls filled."""
    kind = array.type
    if nulls == "raise":
        _no_nulls(array, key)
    rows = len(array)
    if isinstance(kind, pa.FixedShapeTensorType):
        tensor = _tensor(pa, array.storage, copy, nulls, key).view(rows, *kind.shape)
        if kind.permutation is not None:
            tensor = tensor.permute(0, *[1 + d for d in kind.permutation])
        return tensor
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size  # ``values`` ignores the array's offset and nulls: slice, then fill below
        tensor = _tensor(pa, array.values.slice(array.offset * size, rows * size), copy, nulls, key)
        tensor = tensor.view(rows, size, *tensor.shape[1:])
    elif array.null_count:  # the values under the validity bitmap, filled below
        tensor = _primitive(
            pa, pa.Array.from_buffers(kind, rows, [None, array.buffers()[1]], null_count=0, offset=array.offset), True
        )
    else:
        return _primitive(pa, array, copy)
    if array.null_count:
        valid = torch.from_numpy(array.is_valid().to_numpy(zero_copy_only=False))
        dtype = tensor.dtype  # masked_fill lacks the unsigned widths: fill a signed view (0 has the same bits)
        fill = float("nan") if tensor.is_floating_point() else 0
        tensor = (
            tensor.view(_SIGNED.get(dtype, dtype))
            .masked_fill(~valid.view(rows, *[1] * (tensor.ndim - 1)), fill)
            .view(dtype)
        )
    return tensor


def _jagged(pa: Any, array: Any, copy: bool | None, nulls: str, key: tuple[str, ...]) -> torch.Tensor:
    """A jagged nested tensor (``layout=torch.jagged``) of a list column of numbers; a null row is empty."""
    if array.null_count:
        array = array.fill_null(pa.scalar([], type=array.type))
    offsets = _primitive(pa, array.offsets, copy).to(torch.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    values = _tensor(pa, array.values.slice(start, stop - start), copy, nulls, key)
    return torch.nested.nested_tensor_from_jagged(values, offsets - start)


def arrow_leaf(
    array: Any, copy: bool | None, nulls: str, key: tuple[str, ...], masks: dict[Any, Any], text: Any
) -> Any:
    """The leaf (or nested dict, for a struct) of one Arrow array; ``masks[key]`` gets its validity if asked.

    ``text`` reads a string or dictionary column (the fast reader that builds each repeated string once).
    """
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):  # flatten() gives each field the struct's nulls
        return {
            field.name: arrow_leaf(child, copy, nulls, (*key, field.name), masks, text)
            for field, child in zip(kind, array.flatten(), strict=True)
        }
    if nulls == "raise":
        _no_nulls(array, key)
    if array.null_count and nulls == "mask":
        masks[key] = torch.from_numpy(array.is_valid().to_numpy(zero_copy_only=False))
    if _is_tensor_type(pa, kind):
        return _tensor(pa, array, copy, nulls, key)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_tensor_type(pa, kind.value_type):
        return _jagged(pa, array, copy, nulls, key)
    if nulls == "raise":
        _no_inner_nulls(pa, array, key)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind):
        return text(array)
    return stack(array.to_pylist())


# ------------------------------------------------------------------------------------ from_parquet
def parquet_leaf(column: Any, dtype: torch.dtype | None, text: Any) -> Any:
    """One Parquet column read as numpy does: numbers (NaN for missing), int64-ns timestamps, else values."""
    import pyarrow as pa

    kind = column.type
    if (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_timestamp(kind)
    ):
        array = column.to_numpy()
        if array.dtype.kind == "M":
            return torch.from_numpy(array.astype("datetime64[ns]").view(np.int64).copy())
        if array.dtype.kind == "O":  # booleans with nulls: one value per row, None where missing
            return stack(array.tolist())
        tensor = torch.from_numpy(np.array(array, copy=True))
        return tensor if dtype is None else tensor.to(dtype)
    if (
        getattr(kind, "extension_name", None) == "arrow.fixed_shape_tensor"
        and column.null_count == 0
        and (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type))
    ):
        tensor = torch.from_numpy(np.array(combined(column).to_numpy_ndarray(), copy=True))
        return tensor if dtype is None else tensor.to(dtype)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind):
        return text(column)
    return _rows(column.to_pylist())


def _rows(values: list[Any]) -> Any:
    """Rows of Python values; lists of numbers become tensors (one dense tensor when they all have one length)."""

    def numbers(v: Any) -> bool:
        return isinstance(v, list) and all(type(x) in (int, float, bool) for x in v)

    if values and all(numbers(v) for v in values):  # (a missing row keeps the lists, as tensordict does)
        if len({len(v) for v in values}) == 1 and values[0]:
            return torch.tensor(values)
        return stack([torch.tensor(v) for v in values])
    return stack(values)


# ------------------------------------------------------------------------------------ to_arrow
def arrow_array(value: Any, key: tuple[str, ...]) -> Any:
    """The Arrow array of one entry: tensors by rank, jagged tensors as large lists, nested TensorDicts as structs."""
    import pyarrow as pa

    if is_non_tensor(value):
        values = value.tolist()
        return pa.array(values if isinstance(values, list) else [values] * value.batch_size[0])
    if getattr(type(value), "_is_tensor_collection", False):  # a nested TensorDict or TensorClass
        keys = value.keys()
        items = [(k, value.get(k)) for k in keys]
        if not items:
            return pa.array([{}] * value.batch_size[0], type=pa.struct([]))
        return pa.StructArray.from_arrays([arrow_array(v, (*key, k)) for k, v in items], names=[k for k, _ in items])
    tensor = value.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        raise TypeError(f"the entry {key!r} is bfloat16, which numpy and Arrow cannot hold: cast it first")
    if tensor.is_nested:
        if tensor.layout is not torch.jagged:
            raise ValueError(
                f"the entry {key!r} is a nested tensor of layout {tensor.layout}: to_arrow converts "
                f"torch.jagged ones only"
            )
        if tensor._ragged_idx != 1:
            raise ValueError(
                f"the entry {key!r} is ragged in dim {tensor._ragged_idx}: to_arrow needs the ragged "
                f"dim at position 1 (move it with .transpose(1, {tensor._ragged_idx}))"
            )
        return pa.LargeListArray.from_arrays(pa.array(tensor.offsets().numpy()), arrow_array(tensor.values(), key))
    if tensor.ndim == 1:
        return pa.array(tensor.numpy())
    if not len(tensor):  # from_numpy_ndarray refuses an empty array
        kind = pa.fixed_shape_tensor(pa.from_numpy_dtype(tensor.numpy().dtype), tensor.shape[1:])
        return pa.ExtensionArray.from_storage(kind, pa.array([], kind.storage_type))
    return pa.FixedShapeTensorArray.from_numpy_ndarray(tensor.numpy())
