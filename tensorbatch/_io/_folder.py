"""The files of a saved folder: their names, which ones a save wrote, and putting a new save in place.

A save owns the files its ``meta.json`` files name (the leaves' ``.memmap`` files, the nodes' folders, the
pickles of non-tensor values); anything else in the folder is the user's and survives every save
(docs/security.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

META = "meta.json"
PICKLE = "other.pickle"  # a pickled NonTensorData value (tensordict's layout)
STACK_PICKLE = "pickle.pkl"  # a pickled NonTensorStack's values (tensordict's layout)


_UNSAFE = set('/<>:"|?*\\ %')
_NEEDS_ENCODING = re.compile(r'[/<>:"|?*\\ %\x00-\x1f\x7f]')  # _UNSAFE and the control characters


def _file_key(key: str, robust_key: bool = True) -> str:
    """The file or folder name for ``key``: characters that are unsafe in file names are percent-encoded.

    The encoded set is tensordict's (path separators, ``<>:"|?*``, space, ``%``, control characters), so
    both libraries name files alike; ``""`` becomes ``%`` (no encoded name is a bare ``%``), ``"."`` and ``".."``
    become ``%2E`` and ``%2E%2E``.
    """
    if not key:
        return "%"
    if key in (".", ".."):
        return "%2E" * len(key)
    if not robust_key:
        if "/" in key or "\0" in key:
            raise ValueError(f"the key {key!r} cannot be stored as a file name (robust_key=False)")
        return key
    if _NEEDS_ENCODING.search(key) is None:  # the usual key: one regex scan instead of a loop per character
        return key
    return "".join(f"%{ord(c):02X}" if c in _UNSAFE or ord(c) < 32 or ord(c) == 127 else c for c in key)


def _swap_into_place(tmp: Path, prefix: Path) -> None:
    """Rename ``tmp`` to ``prefix``; an existing ``prefix`` is moved aside first and removed after.

    What ``prefix`` holds that no previous save wrote is carried over into ``tmp`` first (_carry_foreign).
    """
    try:  # nothing there (or an empty folder, which a rename replaces): one system call
        os.rename(tmp, prefix)
        return
    except OSError:  # a folder with files (ENOTEMPTY/EEXIST) or a file (ENOTDIR): moved aside below
        pass
    undo = _carry_foreign(prefix, tmp)
    old = prefix.parent / f".{prefix.name}.old-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(prefix, old)
    except BaseException:
        undo()
        raise
    try:
        os.rename(tmp, prefix)
    except BaseException:
        os.rename(old, prefix)
        undo()
        raise
    _remove(old)


_TEMPORARY = re.compile(r"^\..+\.tmp-[0-9a-f]{8}$")  # a file an interrupted in-place save left (_write_one)


def _owned(folder: Path) -> tuple[set[str], set[str]]:
    """The names in ``folder`` that a save wrote, by its ``meta.json``: (files, node folders).

    A folder without a readable ``meta.json`` owns nothing: all it holds is the user's.
    """
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return set(), set()
    return owned_by(meta, folder)


def owned_by(meta: Any, folder: Path) -> tuple[set[str], set[str]]:
    """The names in ``folder`` that the node saved with ``meta`` (its ``meta.json``) owns: (files, node folders)."""
    if not isinstance(meta, dict):
        return set(), set()
    files: set[str] = {META}
    folders: set[str] = set()
    kind = str(meta.get("_class", "")).rpartition(":")[2]
    if meta.get("_is_non_tensor") or kind == "NonTensorStack":
        return files | {PICKLE, STACK_PICKLE}, folders
    if kind == "LazyStackedTensorDict":
        return files, {p.name for p in folder.iterdir() if p.name.isdigit()}
    if "shape" not in meta and "_type" in meta:  # a TensorClass's folder: its TensorDict in _tensordict/
        return files, {"_tensordict"}
    for key, entry in meta.items():
        if not isinstance(entry, dict) or not isinstance(key, str):
            continue
        try:
            name = _file_key(key)
        except ValueError:
            continue
        if "type" in entry:
            folders.add(name)
        elif "dtype" in entry:
            files.update((f"{name}.memmap", f"{name}.shape.memmap"))
    return files, folders


def _foreign(folder: Path, rel: Path = Path()) -> Iterator[Path]:
    """The paths (relative to the save's root) under ``folder`` that no save wrote: the user's files."""
    files, folders = _owned(folder)
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if (name in files and not entry.is_dir(follow_symlinks=False)) or _TEMPORARY.match(name):
                continue
            if name in folders and entry.is_dir(follow_symlinks=False):
                yield from _foreign(folder / name, rel / name)
            else:
                yield rel / name


def _carry_foreign(prefix: Path, tmp: Path) -> Any:
    """Put what ``prefix`` holds that no save wrote (the user's files) at the same place in ``tmp``.

    Files are hard-linked, so that they stay in ``prefix`` until ``tmp`` replaces it (a process killed at
    any point leaves them in place); folders (and files where links fail) are moved. A file of the new save
    never replaces one of them: that raises before anything moved. Returns the function that moves them back.

    Raises:
        RuntimeError: naming the folder and the file that the new save would replace.
    """
    moves: list[tuple[Path, Path]] = []
    for rel in _foreign(prefix):
        target = tmp / rel
        if os.path.lexists(target):
            raise RuntimeError(
                f"cannot save into {prefix}: the save would replace {prefix / rel}, which no "
                "previous save wrote (move it away or save elsewhere)"
            )
        moves.append((prefix / rel, target))
    moved: list[tuple[Path, Path]] = []

    def undo() -> None:
        for source, target in reversed(moved):
            if not os.path.lexists(source):
                os.rename(target, source)

    try:
        for source, target in moves:
            target.parent.mkdir(parents=True, exist_ok=True)
            if not source.is_dir() or source.is_symlink():
                try:
                    os.link(source, target, follow_symlinks=False)
                    continue
                except OSError:  # a file system without hard links: moved below
                    pass
            os.rename(source, target)
            moved.append((source, target))
    except BaseException:
        undo()
        raise
    return undo


def _remove_owned(folder: Path) -> None:
    """Delete what a save wrote in ``folder`` (by its ``meta.json``), then the folder if nothing else is left."""
    files, folders = _owned(folder)
    for name in files:
        _remove(folder / name)
    for name in folders:
        if (folder / name).is_dir() and not (folder / name).is_symlink():
            _remove_owned(folder / name)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty: the user's files stay


def _remove(path: Path) -> None:
    """Delete a file or a folder tree (nothing when absent)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
