"""Pieces shared by the persistence modules: dtype table, storage walk, side state, atomic file writes."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from .._ops.traverse import named_nodes, stacked_members

DTYPES: dict[str, torch.dtype] = {
    str(d): d
    for d in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex32,
        torch.complex64,
        torch.complex128,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    )
}
"""Every dtype the formats store, by its ``str`` (``"torch.float32"``): read back without ``eval``."""


def stored_leaves(td: Any) -> Iterator[torch.Tensor]:
    """The tensors a TensorDict stores (a lazy stack's members' leaves, not stacked copies)."""
    for _, node in named_nodes(td, members=True):
        if stacked_members(node) is None:
            for value in node._values_str():
                if isinstance(value, torch.Tensor):
                    yield value


class SideTable:
    """Facts attached to live objects without touching their slots (dropped when the object dies)."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}

    def set(self, obj: Any, value: Any) -> None:
        key = id(obj)
        if key not in self._values:
            weakref.finalize(obj, self._values.pop, key, None)
        self._values[key] = value

    def get(self, obj: Any) -> Any:
        return self._values.get(id(obj))


@contextlib.contextmanager
def atomic_target(filename: str | os.PathLike[str], *, create: bool = True) -> Iterator[str]:
    """A temporary sibling of ``filename`` to write; renamed onto ``filename`` when the block succeeds.

    A process killed while writing leaves the previous file intact (and a ``.tmp`` sibling behind).
    ``create=False`` yields a fresh name without making the file: the writer creates it itself, exclusively
    (h5py's mode ``"w-"``), with the usual permissions; it may keep the file open across the rename (POSIX).
    """
    target = os.path.abspath(os.fspath(filename))
    folder = os.path.dirname(target)
    if create:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
        os.close(fd)
    else:
        tmp = os.path.join(folder, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    try:  # the mode the replaced file had; mkstemp's file is private (0600): else the usual one
        os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
    except FileNotFoundError:
        if create:
            os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, target)


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it back at once
    os.umask(mask)
    return mask
