"""The dialect protocol: what a storage must say for :class:`~tensorbatch.stored.StoredTensorDict` to run on it.

A dialect speaks one storage (zarr, a dict of numpy arrays, ...) in terms of paths (tuples of keys from the
root). It knows nothing of batch sizes checks, locks, names, views or the TensorDict API: the stored layer does
all of that once, over these few calls. Entries are of three kinds (``tensorbatch._ops.meta``): ``TENSOR``,
``NODE`` (a nested TensorDict: a group) and ``NON_TENSOR`` (a NonTensorData/NonTensorStack held whole).

Every method takes paths the layer has checked (the entry exists and has the kind asked for), except where
said. A dialect raises ``TypeError`` for a value it cannot store (a dtype it has no type for, say), before it
changes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._errors import batch_size_refused, fmt_path
from .._ops.rows import RowPlan

Path = tuple[str, ...]
_CPU = torch.device("cpu")


class ReadOnlyStorageError(PermissionError):
    """A write through a StoredTensorDict whose storage is open for reading only."""


class RefusedEntry(PermissionError):
    """An entry a dialect lists but refuses to open (its data lies outside the storage, say).

    Raised by the dialect's reads and metadata calls on it; such an entry does not decide inferred batch sizes.
    """


def array_mismatch(batch_size: torch.Size, path: Path, shape: torch.Size, kind: str, opening: bool) -> Exception:
    """The refusal of a batch size by an HDF5 or zarr TensorDict in tensordict's words, naming the entry.

    A ValueError when ``opening`` (a batch size given to the constructor), else a RuntimeError (the setter).
    """
    error = ValueError if opening else RuntimeError
    return error(
        f"batch size and array size mismatch: array.shape={tuple(shape)}, batch_size={torch.Size(batch_size)} "
        f"(entry {fmt_path(path)})."
    )


class Dialect:
    """Base class of the storage dialects (see the module docstring); subclasses override every method.

    Class facts:
        name: the storage's name, as ``register_storage`` and error messages use it (``"zarr"``).
        copy_reads: True when ``read`` returns a copy (zarr, HDF5, a server), False when it shares the storage's
            memory (a numpy array): in-place tensor ops then reach the storage without a write-back.
        lazy_index: True when ``td[index]`` is a view reading its rows on access and writing through (what h5py
            and zarr TensorDicts give in tensordict), False when it reads the rows at once.
        device: the device of the tensors ``read``/``read_rows`` return (the CPU by default; None for a
            storage read "as stored", as HDF5's default).
        read_only_facts: True when a batch size or dim names set on a storage open read-only are kept in memory
            (tensordict's HDF5 behaviour); False (default) when they are refused like any write.
        keeps_entries: True when a value set on an existing entry of its kind is written into it (a tensor's
            values by ``write_into``, a node's entries merged into it) instead of replacing it: a storage whose
            entries are shared beyond the node (a stored lazy stack's element); False by default.
        objects_in_rows: True when ``read_many`` also takes non-tensor leaves (giving ``value[plan.index]``), so
            that a row read fetches them with the tensors (a server: one round trip); False by default.
    """

    name: str = "storage"
    copy_reads: bool = True
    lazy_index: bool = True
    device: torch.device | None = _CPU
    read_only_facts: bool = False
    keeps_entries: bool = False
    objects_in_rows: bool = False

    # ------------------------------------------------------------------ structure
    def entries(self, path: Path) -> dict[str, str]:
        """``{key: kind}`` of the node at ``path``, in a stable order."""
        raise NotImplementedError

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        """``(shape, dtype)`` of the tensor leaf at ``path``, from metadata only."""
        raise NotImplementedError

    def node_facts(self, path: Path) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
        """``(batch size, dim names)`` recorded for the node at ``path``, each None when the storage has none."""
        raise NotImplementedError

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        """Record the batch size (and names, None for none) of the node at ``path``."""
        raise NotImplementedError

    def create_node(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        """Create an empty node at ``path`` (its parent exists; nothing is there) with these facts."""
        raise NotImplementedError

    def delete(self, path: Path) -> None:
        """Remove the entry at ``path`` and, for a node, everything under it."""
        raise NotImplementedError

    # ------------------------------------------------------------------ tensor leaves
    def read(self, path: Path) -> torch.Tensor:
        """The whole tensor leaf at ``path`` (a CPU tensor)."""
        raise NotImplementedError

    def read_rows(self, path: Path, plan: RowPlan) -> torch.Tensor:
        """The rows ``plan`` selects of the tensor leaf at ``path``: ``leaf[plan.index]``."""
        raise NotImplementedError

    def write(self, path: Path, value: torch.Tensor) -> None:
        """Store ``value`` (a CPU tensor) as a new tensor leaf at ``path`` (nothing is there)."""
        raise NotImplementedError

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        """Overwrite the values of the tensor leaf at ``path`` with ``value`` (broadcastable to its shape)."""
        raise NotImplementedError

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        """``leaf[plan.index] = value``: ``value`` has ``plan.target_shape(shape)``; the last repeat of a row wins."""
        raise NotImplementedError

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        """Create a zero-filled tensor leaf at ``path`` (nothing is there) without writing data if possible."""
        raise NotImplementedError

    def read_many(self, paths: list[Path], plan: RowPlan) -> list[torch.Tensor]:
        """``[read_rows(path, plan) for path in paths]``: the rows of many leaves read at once.

        One call for every tensor leaf an index reads, so that a dialect can share a read budget or batch
        its requests (the default reads them one by one).
        """
        return [self.read_rows(path, plan) for path in paths]

    def write_many(self, plan: RowPlan, values: list[tuple[Path, torch.Tensor]]) -> None:
        """``write_rows(path, plan, value)`` for each pair, as one transaction (a server: one script)."""
        with self.transaction():
            for path, value in values:
                self.write_rows(path, plan, value)

    def read_slabs(self, paths: list[Path], index: int | slice, size: int) -> list[torch.Tensor]:
        """``[leaf[index] for leaf at paths]`` for an int or a forward slice on a dim of length ``size``.

        The hot path of an indexed view read whole (``td[i].to_tensordict()``): ``index`` is in bounds but
        not normalised (a negative int, a slice as typed). By default ``read_many`` with the index's
        :class:`~tensorbatch._ops.rows.RowPlan`; a dialect reading these cheaper (one hyperslab each) overrides it.
        """
        if not isinstance(index, slice):
            return self.read_many(paths, RowPlan("int", size, index))
        return self.read_many(paths, RowPlan("slice", size, index, shape=(len(range(*index.indices(size))),)))

    # ------------------------------------------------------------------ checks before a write
    def check_value(self, path: Path, value: Any) -> None:
        """Raise (naming ``path``) for a key or a value this storage cannot hold, before anything changes.

        ``value`` is the tensor, TensorDict or non-tensor value about to be written at ``path``, or None for a
        leaf about to be allocated. Nothing by default (a dialect's write raises ``TypeError`` first thing).
        """

    def check_replace(self, path: Path) -> None:
        """Raise when the existing entry at ``path`` may not be replaced (nothing by default)."""

    def batch_mismatch(
        self, batch_size: torch.Size, path: Path, shape: torch.Size, kind: str, opening: bool
    ) -> Exception:
        """The error refusing ``batch_size`` for the entry at ``path`` (of ``shape`` and ``kind``).

        ``kind`` is ``"Tensor"`` or ``"TensorDict"``; ``opening``: the batch size was given to the constructor,
        else set on an open TensorDict. By default the in-memory setter's error (a RuntimeError); a file format
        dialect may give tensordict's :func:`array_mismatch` instead.
        """
        return batch_size_refused(batch_size, path, shape, kind)

    def refuse_write(self, key: Any, path: Path) -> Exception:
        """The error a write of ``key`` at the node ``path`` raises when ``writable`` is False."""
        return ReadOnlyStorageError(
            f"cannot write {key!r}: {self.describe(path)} is open read-only (open it with mode='r+' or 'a' to write)"
        )

    # ------------------------------------------------------------------ non-tensor leaves
    def read_object(self, path: Path, batch_size: torch.Size) -> Any:
        """The NonTensorData or NonTensorStack at ``path`` (``batch_size``: its node's)."""
        raise NotImplementedError

    def object_shape(self, path: Path, batch_size: torch.Size) -> torch.Size:
        """The batch size of the non-tensor leaf at ``path`` without decoding it."""
        raise NotImplementedError

    def write_object(self, path: Path, value: Any) -> None:
        """Store a NonTensorData or NonTensorStack at ``path`` (nothing is there)."""
        raise NotImplementedError

    def leaf_id(self, path: Path) -> int:
        """An identity of the stored tensor leaf at ``path``: new when the leaf is replaced, kept by writes into it.

        What tests check in-place ops with.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ life
    @contextlib.contextmanager
    def transaction(self, operation: str = "writing") -> Iterator[None]:
        """A group of writes the storage makes atomic where it can (nothing by default); ``operation`` names it."""
        yield

    def same_storage(self, other: Dialect) -> bool:
        """True when ``other`` reaches the same stored tree (a node written onto its own tree is read first)."""
        return other is self

    def atomic(self, operation: str, body: Callable[[], Any]) -> Any:
        """``body()`` (several writes: ``update``, an index write) as one transaction; its result.

        ``operation`` names it in errors. A storage whose transactions may conflict with other writers (a
        server) overrides it to run ``body`` again on a conflict.
        """
        with self.transaction():
            return body()

    def flush(self) -> None:
        """Make the writes so far durable (nothing by default)."""

    def close(self) -> None:
        """Release the storage (nothing by default); reads after it may fail."""

    @property
    def writable(self) -> bool:
        """False when the storage was opened read-only: the layer refuses every write before it starts."""
        return True

    def describe(self, path: Path) -> str:
        """Where ``path`` lives, for error messages (``"store.zarr:/a/b"``)."""
        return f"{self.name}:/" + "/".join(path)
