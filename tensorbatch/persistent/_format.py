"""The HDF5 layout: keys, dtypes, non-tensor values and the attributes this package adds.

Files are plain HDF5, laid out as tensordict 0.15.3 lays them out: a group per nested TensorDict, a dataset
per leaf, a string as a string dataset marked with ``__tensordict_str__``, other non-tensor values as opaque
datasets, a stack of non-tensor values as one array marked with its shape (``__tensordict_stack__``).
What tensordict does not keep goes in attributes other readers ignore: a group's batch size and dim names
(``tensorbatch_batch_size``, ``tensorbatch_names``), and the dtype of a leaf whose dtype HDF5 lacks
(bfloat16 and float8 are stored as their bits, int16/uint8, with ``tensorbatch_dtype``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._errors import fmt_path
from ..stored._dtypes import BITS, BY_NAME, NUMPY_OF, TORCH_OF
from ..stored._dtypes import DTYPE_ATTR as DTYPE_ATTR

if TYPE_CHECKING:
    import h5py
else:
    from ._h5 import h5py  # (imported on first use)

BATCH_ATTR = "tensorbatch_batch_size"
NAMES_ATTR = "tensorbatch_names"
STR_ATTR = "__tensordict_str__"  # tensordict's mark of the strings it wrote
STACK_ATTR = "__tensordict_stack__"  # tensordict's mark of a NonTensorStack's array, with its shape

BITS_DTYPES = frozenset({np.dtype(np.int16), np.dtype(np.uint8)})  # only these may carry DTYPE_ATTR

BAD_KEYS = ("", ".", "..")


def check_key(key: str) -> None:
    """Refuse a key HDF5 would read as a path (``"a/b"``, ``""``, ``"."``, ``".."``)."""
    if type(key) is not str:
        raise TypeError(f"PersistentTensorDict keys are strings, got {type(key).__name__} {key!r}")
    if "/" in key or key in BAD_KEYS:
        raise ValueError(
            f"invalid key {key!r} for an HDF5 file: a key cannot be '', '.', '..' or hold '/' (HDF5 reads it as a path)"
        )


def stored_dtype(dtype: torch.dtype) -> tuple[Any, str | None]:
    """``(numpy dtype written, name for DTYPE_ATTR or None)`` for a torch dtype."""
    bits = BITS.get(dtype)
    if bits is not None:
        return NUMPY_OF[bits], str(dtype).removeprefix("torch.")
    numpy_dtype = NUMPY_OF.get(dtype)
    if numpy_dtype is None:
        raise TypeError(f"HDF5 cannot store dtype {dtype}")
    return numpy_dtype, None


def to_numpy(value: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """``value`` as the numpy array written into a dataset of torch dtype ``dtype`` (cast as torch casts)."""
    if value.dtype != dtype:
        value = value.to(dtype)
    bits = BITS.get(dtype)
    if bits is not None:
        value = value.view(bits)
    return value.detach().cpu().numpy()


def leaf_dtype(ds: h5py.Dataset) -> torch.dtype | None:
    """The torch dtype of a tensor dataset (None: the dataset holds non-tensor data)."""
    dt = ds.dtype
    found = TORCH_OF.get(dt)
    if found is None or dt.metadata:  # (opaque values compare equal to their plain dtype)
        return None
    if dt in BITS_DTYPES:  # only datasets of these dtypes can hold bits of another dtype: one attr read
        name = ds.attrs.get(DTYPE_ATTR)
        if name is not None:
            return BY_NAME[name if isinstance(name, str) else name.decode()]
    return found


def stored_as_bits(dtype: Any) -> bool:
    """True for a torch dtype stored as the bits of an integer dtype (bfloat16, float8)."""
    return dtype in BITS


def from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over a numpy array read from a dataset of torch dtype ``dtype``."""
    flags = array.flags
    out = torch.from_numpy(array if flags.c_contiguous and flags.writeable else array.copy())
    return out.view(dtype) if dtype in BITS else out


def is_non_tensor(ds: h5py.Dataset) -> bool:
    """True for a dataset holding non-tensor data (strings, opaque or other non-numeric dtypes)."""
    return leaf_dtype(ds) is None


def stack_shape(ds: h5py.Dataset) -> torch.Size | None:
    """The shape of the NonTensorStack a non-tensor dataset holds, or None."""
    shape = ds.attrs.get(STACK_ATTR)
    return None if shape is None else torch.Size(int(n) for n in shape)


def read_non_tensor(ds: h5py.Dataset, batch_size: torch.Size, as_stack: bool) -> Any:
    """The non-tensor leaf a dataset holds (a NonTensorData, or a NonTensorStack of its elements)."""
    from .._nontensor import NonTensorData, NonTensorStack

    shape = stack_shape(ds)
    if (
        shape is None
        and as_stack
        and batch_size
        and ds.shape[: len(batch_size)] == tuple(batch_size)
        and not h5py.check_opaque_dtype(ds.dtype)
    ):
        shape = batch_size  # a foreign column with one element per row
    if shape is not None:
        values = _decode(ds, ds[()])
        if not len(shape):
            return NonTensorData(values, batch_size)
        return NonTensorStack.from_list(values, depth=len(shape))
    return NonTensorData(_decode(ds, ds[()]), batch_size)


def _decode(ds: h5py.Dataset, value: Any) -> Any:
    info = h5py.check_string_dtype(ds.dtype)
    if info is not None:  # strings: str for those tensordict marked (or stacked), bytes as written otherwise
        if isinstance(value, np.ndarray):
            # the strings of a stack tensordict wrote come back as str; other tools' stay bytes (as tensordict)
            return ds.asstr()[()].tolist() if STACK_ATTR in ds.attrs else value.tolist()
        if isinstance(value, bytes) and ds.attrs.get(STR_ATTR, False):
            return value.decode(info.encoding)
        return value
    if isinstance(value, np.ndarray):
        if h5py.check_opaque_dtype(ds.dtype):
            value = value.astype(value.dtype.newbyteorder("="), copy=False).view(np.dtype(value.dtype.str))
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def encode_non_tensor(path: tuple[str, ...], value: Any) -> tuple[Any, str | None, Any]:
    """``(data, attribute, its value)`` written for the non-tensor leaf at ``path``, as tensordict writes it.

    ``value`` is a NonTensorData or NonTensorStack; one HDF5 cannot hold raises ``TypeError`` naming ``path``.
    """
    from .._nontensor import NonTensorStack

    if isinstance(value, NonTensorStack):
        shape = value.batch_size
        values = value.tolist()
        flat = np.array(values, dtype=object).ravel().tolist() if shape else [values]
        if all(type(v) is str for v in flat):
            return np.array(values, dtype=h5py.string_dtype()), STACK_ATTR, list(shape)
        if any(all(type(v) is t for v in flat) for t in (bytes, bool, int, float)):
            return _opaque(values), STACK_ATTR, list(shape)
        raise TypeError(
            f"cannot write the NonTensorStack at {fmt_path(path)} to HDF5: its elements must be all str, "
            "bytes, bool, int or float, of one type"
        )
    data = value.data if hasattr(value, "data") else value
    if isinstance(data, str):
        return data, STR_ATTR, True
    try:
        return _opaque(data), None, None
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"cannot write the non-tensor value at {fmt_path(path)} of type {type(data).__name__} to HDF5: "
            "only str, bytes, numbers and arrays of them can be stored"
        ) from err


def write_non_tensor(group: h5py.Group, key: str, encoded: tuple[Any, str | None, Any]) -> None:
    """Write a non-tensor leaf as :func:`encode_non_tensor` encoded it."""
    data, attr, attr_value = encoded
    ds = group.create_dataset(key, data=data)
    if attr is not None:
        ds.attrs[attr] = attr_value


def _opaque(value: Any) -> np.ndarray:
    out = np.array(value)
    if out.dtype == object:
        raise TypeError(f"not an array of one plain type: {value!r:.60}")
    return out.astype(h5py.opaque_dtype(out.dtype))


def write_batch_attrs(group: h5py.Group, batch_size: torch.Size, names: Any = None, new: bool = False) -> None:
    """Record a node's batch size (and dim names) in its group's attributes (``new``: a group just made)."""
    size = np.asarray(list(batch_size), dtype=np.int64)
    gid = group.id
    if not new and h5py.h5a.exists(gid, _BATCH_NAME):
        h5py.h5a.delete(gid, _BATCH_NAME)
    # (HDF5's own calls: h5py's ``attrs[...] =`` costs twice as much, a tenth of writing a small file)
    h5py.h5a.create(gid, _BATCH_NAME, h5py.h5t.STD_I64LE, h5py.h5s.create_simple(size.shape)).write(size)
    if names is not None and any(n is not None for n in names):
        group.attrs[NAMES_ATTR] = ["" if n is None else n for n in names]
    elif not new and h5py.h5a.exists(gid, _NAMES_NAME):
        h5py.h5a.delete(gid, _NAMES_NAME)


_BATCH_NAME, _NAMES_NAME = BATCH_ATTR.encode(), NAMES_ATTR.encode()


def read_batch_attrs(group: h5py.Group) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
    """``(batch size, names)`` recorded on a group, each None when absent."""
    attrs = group.attrs
    if BATCH_ATTR not in attrs:  # (a membership test is cheap; a missing attribute read raises inside h5py)
        return None, None
    size = attrs[BATCH_ATTR]
    names = None
    if NAMES_ATTR in attrs:
        names = tuple((n.decode() if isinstance(n, bytes) else str(n)) or None for n in attrs[NAMES_ATTR])
    return torch.Size(int(n) for n in size), names
