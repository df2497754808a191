"""Regexes of the error messages users match on (tensordict 0.15.3's texts), for ``pytest.raises(match=...)``.

A key is given as a key path (``"x"`` or ``("n", "x")``): where tensordict names the last key only, our
messages name the full path in the same slot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def _key(path: str | tuple[str, ...]) -> str:
    return repr(path[0] if isinstance(path, tuple) and len(path) == 1 else path)


def _size(shape: Sequence[int]) -> str:
    return f"torch.Size({list(shape)})"


def batch_mismatch(batch_size: Sequence[int], path: str | tuple[str, ...], shape: Sequence[int]) -> str:
    """A value at ``path`` whose leading dims (``shape``) do not match its node's ``batch_size``."""
    return re.escape(
        f"batch dimension mismatch, got self.batch_size={_size(batch_size)} and value.shape={_size(shape)} "
        f"for key {_key(path)}. The leading dimensions of a value must match the batch size."
    )


def batch_size_refused(
    path: str | tuple[str, ...], shape: Sequence[int], batch_size: Sequence[int], kind: str = "Tensor"
) -> str:
    """The ``batch_size`` setter's refusal of the entry at ``path`` (of type name ``kind``)."""
    name = path if isinstance(path, str) else _key(path)
    return re.escape(
        f"the {kind} {name} has shape {_size(shape)} which is incompatible with the batch-size {_size(batch_size)}."
    )


def array_mismatch(path: str | tuple[str, ...], shape: Sequence[int], batch_size: Sequence[int]) -> str:
    """An HDF5 or zarr TensorDict's refusal of a batch size (tensordict's text), naming the entry at ``path``."""
    return re.escape(
        f"batch size and array size mismatch: array.shape={tuple(shape)}, batch_size={_size(batch_size)} "
        f"(entry {_key(path)})."
    )
