"""Opening HDF5 files, their options, the errors naming them, and the refusal of data outside a file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._io._shared import atomic_target as atomic_target  # (the one atomic file write)
from ..stored._dialect import ReadOnlyStorageError, RefusedEntry

if TYPE_CHECKING:
    import h5py
else:
    from ._h5 import h5py  # (imported on first use)

# h5py.File options (the rest of a PersistentTensorDict's keyword arguments are dataset options)
FILE_OPTIONS = frozenset(
    {
        "driver",
        "libver",
        "userblock_size",
        "swmr",
        "rdcc_nslots",
        "rdcc_nbytes",
        "rdcc_w0",
        "track_order",
        "fs_strategy",
        "fs_persist",
        "fs_threshold",
        "fs_page_size",
        "page_buf_size",
        "min_meta_keep",
        "min_raw_keep",
        "locking",
        "alignment_threshold",
        "alignment_interval",
        "meta_block_size",
    }
)


class ReadOnlyError(ReadOnlyStorageError):
    """A write through a PersistentTensorDict whose file is open for reading only."""


class OutsideDataError(RefusedEntry):
    """An entry whose data lies outside the HDF5 file, reached without ``allow_external=True``.

    An external link, external raw storage, or a virtual dataset mapping other files.
    """


def outside(group: h5py.Group, key: str, obj: Any, fileno: Any) -> str | None:
    """Why the entry ``key`` of ``group`` reaches data outside the file (None: it does not).

    ``obj`` is None to check the link alone (before it is followed: an external link is refused without
    opening the file it names); else the object it leads to.
    """
    if obj is None:
        try:
            external = group.id.links.get_info(key.encode()).type == h5py.h5l.TYPE_EXTERNAL
        except (KeyError, RuntimeError):  # no such entry (h5py raises either)
            return None
        if external:
            link = group.get(key, getlink=True)
            return f"it is an external link to {link.path!r} in the file {link.filename!r}"
        return None
    if obj.id.fileno != fileno:  # a soft link through an external link
        return f"it leads into the file {obj.file.filename!r}"
    if type(obj) is h5py.Dataset:
        dcpl = obj.id.get_create_plist()
        if dcpl.get_external_count():
            return f"its data is stored in the outside file(s) {sorted({str(e[0]) for e in obj.external})}"
        if dcpl.get_layout() == h5py.h5d.VIRTUAL:
            files = sorted({s.file_name for s in obj.virtual_sources() if s.file_name != "."})
            if files:
                return f"it is a virtual dataset mapping the file(s) {files}"
    return None


def refuse_outside(filename: str, name: str, why: str) -> OutsideDataError:
    return OutsideDataError(
        f"refusing to open {name!r} of the HDF5 file {filename!r}: {why}, outside this "
        "file; pass allow_external=True (from_h5, PersistentTensorDict) to read and write "
        "outside files through it (only for files you trust)"
    )


# h5py's create_dataset options (besides shape, dtype and data, which the layer gives)
DATASET_OPTIONS = frozenset(
    {
        "chunks", "compression", "compression_opts", "shuffle", "fletcher32", "maxshape", "fillvalue",
        "scaleoffset", "track_times", "external", "track_order", "dcpl", "dapl", "efile_prefix",
        "virtual_prefix", "allow_unknown_filter", "rdcc_nslots", "rdcc_nbytes", "rdcc_w0", "fill_time",
    }
)  # fmt: skip


def split_options(kwargs: dict[str, Any], file_options: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(file options, dataset options)``: file options come from ``file_options``, the rest are datasets'."""
    options = dict(file_options or {})
    unknown = set(options) - FILE_OPTIONS
    if unknown:
        raise TypeError(f"unknown h5py.File options {sorted(unknown)}; h5py.File takes {sorted(FILE_OPTIONS)}")
    misplaced = set(kwargs) & (FILE_OPTIONS - {"track_order"})
    if misplaced:
        raise TypeError(
            f"{sorted(misplaced)} are h5py.File options: pass them as file_options={{...}} "
            "(the other keyword arguments go to create_dataset)"
        )
    unknown = set(kwargs) - DATASET_OPTIONS
    if unknown:  # refused now, not at the first write (or never, for a file only read)
        raise TypeError(
            f"unexpected keyword arguments {sorted(unknown)}: the keyword arguments besides the documented ones "
            f"are h5py create_dataset options, one of {sorted(DATASET_OPTIONS)}"
        )
    return options, kwargs


def open_file(filename: str | os.PathLike[str], mode: str, options: dict[str, Any]) -> h5py.File:
    """``h5py.File(filename, mode, **options)``; a file that cannot be opened raises naming it."""
    if mode not in ("r", "r+", "w", "w-", "x", "a"):
        raise ValueError(f"mode must be 'r', 'r+', 'w', 'w-', 'x' or 'a', got {mode!r}")
    options = {"track_order": True, **options} if mode in ("w", "w-", "x", "a") else options
    try:
        return h5py.File(filename, mode, **options)
    except OSError as err:
        if mode in ("r", "r+") and os.path.exists(filename):
            raise OSError(
                f"cannot open {os.fspath(filename)!r} as an HDF5 file (truncated or corrupt?): {err}"
            ) from err
        err.add_note(f"while opening the HDF5 file {os.fspath(filename)!r} with mode {mode!r}")
        raise


@contextlib.contextmanager
def h5_errors(filename: str, name: str) -> Iterator[None]:
    """Add a note naming the file and the dataset to an error from h5py."""
    try:
        yield
    except (OSError, ValueError, TypeError, KeyError, RuntimeError) as err:
        add_h5_note(err, filename, name)
        raise


def add_h5_note(err: BaseException, filename: str, name: str) -> None:
    """Name the file and the HDF5 object in a note of ``err`` (once)."""
    note = f"(HDF5 file {filename!r}, object {name!r})"
    if note not in getattr(err, "__notes__", ()):
        err.add_note(note)
