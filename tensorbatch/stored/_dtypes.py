"""The dtypes storages keep: torch's and numpy's of the same name, and those stored as the bits of an integer.

HDF5 and zarr have no type for bfloat16 nor the float8s: a leaf of such a dtype is stored as its bits (int16,
uint8) with its torch dtype named in the attribute ``tensorbatch_dtype``, which other readers ignore.
"""

from __future__ import annotations

import numpy as np
import torch

DTYPE_ATTR = "tensorbatch_dtype"  # the name (a key of BY_NAME) of the dtype whose bits a leaf holds

NUMPY_OF: dict[torch.dtype, np.dtype] = {
    torch.float64: np.dtype("float64"),
    torch.float32: np.dtype("float32"),
    torch.float16: np.dtype("float16"),
    torch.int64: np.dtype("int64"),
    torch.int32: np.dtype("int32"),
    torch.int16: np.dtype("int16"),
    torch.int8: np.dtype("int8"),
    torch.uint8: np.dtype("uint8"),
    torch.bool: np.dtype("bool"),
    torch.complex64: np.dtype("complex64"),
    torch.complex128: np.dtype("complex128"),
    torch.uint16: np.dtype("uint16"),
    torch.uint32: np.dtype("uint32"),
    torch.uint64: np.dtype("uint64"),
}
TORCH_OF: dict[np.dtype, torch.dtype] = {v: k for k, v in NUMPY_OF.items()}
BITS: dict[torch.dtype, torch.dtype] = {  # dtype -> the integer dtype whose bits store it
    torch.bfloat16: torch.int16,
    **{
        getattr(torch, n): torch.uint8
        for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
        if hasattr(torch, n)
    },
}
BY_NAME: dict[str, torch.dtype] = {str(d).removeprefix("torch."): d for d in BITS}
