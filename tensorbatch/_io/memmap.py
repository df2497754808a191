"""Save TensorDicts as memory-mapped folders and load them back (the format is in README.md).

Saving is atomic: everything is written into a temporary sibling folder, which is then renamed into
place, so a killed process leaves the previous save or nothing, never a half-written one. Loading
checks every file against its metadata and refuses to unpickle anything unless asked to. Under an
active ``FakeTensorMode`` (tracing, export) loading reads the metadata only and gives fake tensors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import shutil
import stat
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from .. import _progress
from .._compat import fake_mode_active
from .._errors import fmt_path
from .._lazy import LazyStackedTensorDict
from .._nontensor import MetaData, NonTensorData, NonTensorDataBase, NonTensorStack, is_non_tensor
from .._ops import ragged
from .._ops.traverse import REWRAP_TYPES, is_td, named_nodes, stacked_members, unwrapped
from .._tc_registry import class_name, lookup
from .._unbatched import UnbatchedTensor
from ..memmap import MemoryMappedTensor
from ._folder import META as META
from ._folder import PICKLE as PICKLE
from ._folder import STACK_PICKLE as STACK_PICKLE
from ._folder import _file_key as _file_key
from ._folder import _remove as _remove
from ._folder import _remove_owned as _remove_owned
from ._folder import _swap_into_place as _swap_into_place
from ._folder import owned_by
from ._shared import DTYPES, stored_leaves

FORMAT_VERSION = 1

# Node kinds carry the names tensordict gives them: the format's vocabulary, so that either library
# reads the other's folders (tensordict resolves ``_type`` to a class; we read only the kind). A TensorClass
# held in a node is written as tensordict writes one: a folder whose meta.json names its class in ``_type``
# (``<class 'module.QualName'>``), with its TensorDict in ``_tensordict/``. Loading rebuilds the class only
# when a TensorClass of that exact name is defined in this process (_tc_registry, a look-up: nothing named
# by a file is ever imported); else the entry loads as a TensorDict.
_KINDS = {
    "TensorDict": "tensordict._td.TensorDict",
    "LazyStackedTensorDict": "tensordict._lazy.LazyStackedTensorDict",
    "NonTensorData": "tensordict.tensorclass.NonTensorData",
    "MetaData": "tensordict.tensorclass.MetaData",
    "NonTensorStack": "tensordict.tensorclass.NonTensorStack",
}


_TC_DATA = "_tensordict"  # the folder holding a TensorClass's TensorDict, inside the TensorClass's folder


def _held_class(value: Any) -> bool:
    """True for a TensorClass instance held in a node (saved in a folder of its own that names its class)."""
    return type(value) in REWRAP_TYPES and hasattr(value, "_non_tensordict")


def _class_of(meta: dict[str, Any]) -> str | None:
    """``module.QualName`` from a TensorClass folder's ``_type`` (``"<class 'module.QualName'>"``), else None."""
    tag = meta.get("_type")
    if not isinstance(tag, str) or not tag.startswith("<class '") or not tag.endswith("'>"):
        return None
    return tag[8:-2]


def is_class_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a TensorClass saved as tensordict saves one (its TensorDict in ``_tensordict/``)."""
    try:
        meta = _read_json(folder / META)
    except (OSError, ValueError, RuntimeError):
        return False
    return _is_class_meta(meta, folder)


def _is_class_meta(meta: dict[str, Any], folder: Path) -> bool:
    return "shape" not in meta and (folder / _TC_DATA).is_dir()


def _class_tag(obj: Any) -> dict[str, Any]:
    kind = next((k for k in _KINDS if k == type(obj).__name__), "TensorDict")
    return {"_type": f"<class '{_KINDS[kind]}'>", "_format_version": FORMAT_VERSION, "_class": f"tensordict:{kind}"}


def _class_meta(value: Any, path: tuple[str, ...]) -> dict[str, Any]:
    """The meta.json of a TensorClass's folder: its class in ``_type`` (tensordict's), its extra values."""
    meta: dict[str, Any] = {"_type": f"<class '{class_name(type(value))}'>"}
    for name, extra in value._non_tensordict.items():
        try:
            json.dumps(extra)
        except (TypeError, ValueError):
            where = f" at key {fmt_path(path)}" if path else ""
            raise TypeError(
                f"the value of field {name!r} of the {type(value).__name__}{where} "
                f"({type(extra).__name__}) is not JSON-serializable and cannot be saved with it"
            ) from None
        meta[name] = extra
    return meta


# ---------------------------------------------------------------------------------------------- save
class _Writer:
    """Collects the files of one save, then writes the tensor data (optionally on threads)."""

    def __init__(self, allow_pickle: bool, like: bool, fresh: bool = False) -> None:
        # fresh: the folder is a new temporary one, renamed into place whole, so its files need no
        # temporary name of their own (an in-place re-save replaces each file atomically instead)
        self.allow_pickle, self.like, self.fresh = allow_pickle, like, fresh
        self.jobs: list[tuple[torch.Tensor, Path, bool]] = []  # (tensor, file, zero-filled instead of written)
        self.metas: dict[Path, dict[str, Any]] = {}  # each node's metadata by folder (what load reads)
        self.keep: dict[Path, Path] = {}  # memmap_like over a save: new file -> the old file it takes over

    def tree(self, td: Any, root: Path) -> None:
        """Write every node of ``td`` (a node before the ones below it; a lazy stack's members in ``0/``, ``1/``...)."""
        folders: dict[tuple[str, ...], Path] = {(): root}
        for path, node in named_nodes(td, members=True):
            folder = folders[path]
            folder.mkdir(parents=True, exist_ok=True)
            node = unwrapped(node)
            stacked = stacked_members(node)
            if stacked is not None:
                dim, members = stacked
                for i in range(len(members)):
                    folders[(*path, str(i))] = folder / str(i)
                self.json(folder / META, {**_class_tag(node), "stack_dim": dim, "stack_dim_name": node.names[dim]})
                continue
            meta: dict[str, Any] = {}
            held: list[tuple[Any, Path, tuple[str, ...]]] = []  # written once the old save's files are dropped
            for key, value in node._items_str():
                name = _file_key(key)
                if type(value) is torch.Tensor or isinstance(value, torch.Tensor):
                    if value.is_nested:
                        meta[key] = self.nested(value, folder, name)
                        continue
                    meta[key] = {
                        "device": str(value.device),
                        "shape": list(value.shape),
                        "dtype": str(value.dtype),
                        "is_nested": False,
                    }
                    if isinstance(value, UnbatchedTensor):  # its shape need not start with the batch size
                        meta[key]["unbatched"] = True
                        value = value._plain()
                    self.jobs.append((value, folder / f"{name}.memmap", self.like))
                elif is_non_tensor(value):
                    meta[key] = {"type": type(value).__name__}
                    self.non_tensor(value, folder / name, (*path, key))
                elif _held_class(value):  # its class in its folder, its TensorDict in _tensordict/ (tensordict's)
                    meta[key] = {"type": type(value).__name__}
                    folders[(*path, key)] = folder / name / _TC_DATA
                    held.append((value, folder / name, (*path, key)))
                elif is_td(value):  # written when the walk reaches it
                    meta[key] = {"type": "TensorDict" if stacked_members(value) is None else "LazyStackedTensorDict"}
                    folders[(*path, key)] = folder / name
                else:
                    raise TypeError(f"cannot save a {type(value).__name__} at key {fmt_path((*path, key))}")
            # files live on the CPU: a TensorDict without a device loads back on "cpu" (as with tensordict)
            meta.update({"shape": list(node.batch_size), "device": "cpu" if node.device is None else str(node.device)})
            meta.update(_class_tag(node))
            names = node._maybe_names()
            if names is not None:
                meta["_names"] = list(names)
            if not self.fresh:
                self._drop_stale(folder, meta)
            for value, held_folder, held_path in held:
                self.held(value, held_folder, held_path)
            self.json(folder / META, meta)

    def held(self, value: Any, folder: Path, path: tuple[str, ...]) -> None:
        """The folder of a TensorClass held at ``path``: its meta.json names the class (and holds its extra values).

        Its TensorDict, in ``_tensordict/``, is written when the walk reaches it.
        """
        meta = _class_meta(value, path)
        folder.mkdir(parents=True, exist_ok=True)
        if not self.fresh:
            self._drop_stale(folder, meta)
        self.json(folder / META, meta)

    def nested(self, value: torch.Tensor, folder: Path, name: str) -> dict[str, Any]:
        """A nested tensor leaf, stored as tensordict stores one.

        Its elements go to ``<name>.memmap``, one row of sizes per component to ``<name>.shape.memmap``; the
        metadata's shape is that of the sizes.

        A jagged one is marked ``"layout": "jagged"`` (tensordict, which cannot save that layout, ignores the
        mark and loads it strided).
        """
        data, sizes = ragged.to_flat(value)
        self.jobs.append((data, folder / f"{name}.memmap", self.like))
        self.jobs.append((sizes, folder / f"{name}.shape.memmap", False))  # the sizes, also for memmap_like
        entry = {"device": str(value.device), "shape": list(sizes.shape), "dtype": str(value.dtype), "is_nested": True}
        if value.layout is torch.jagged:
            entry["layout"] = "jagged"
        return entry

    def root(self, td: Any, folder: Path, as_class: Any = None) -> None:
        """Write the tree rooted at ``td`` (a TensorDict, a lazy stack or a single non-tensor leaf).

        ``as_class``: the TensorClass whose TensorDict ``td`` is, saved as tensordict saves one (its folder
        names the class, ``td`` goes to ``_tensordict/``).
        """
        if as_class is not None:
            self.held(as_class, folder, ())
            folder = folder / _TC_DATA
        if is_non_tensor(td):
            self.non_tensor(td, folder, ())
        else:
            self.tree(td, folder)

    def _drop_stale(self, folder: Path, meta: dict[str, Any]) -> None:
        """Re-saving in place: remove the files of the old save that the new one does not write alike.

        Those of keys the new save no longer has (or stores differently), and the old layout's when a node
        changes between a TensorDict and a TensorClass (whose TensorDict is in ``_tensordict/``). Only what
        the old ``meta.json`` names goes: the user's files stay.
        """
        if not (folder / META).exists():
            return
        try:
            old = _read_json(folder / META)
        except (RuntimeError, ValueError):
            return
        old_files, old_folders = owned_by(old, folder)
        new_files, new_folders = owned_by(meta, folder)
        for name in old_files - new_files:
            _remove(folder / name)
        for name in old_folders - new_folders:
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                _remove_owned(folder / name)
        for key, entry in old.items():
            if not isinstance(entry, dict):
                continue
            new = meta.get(key)
            if isinstance(new, dict) and new.keys() == entry.keys() and new.get("type") == entry.get("type"):
                continue  # stored alike (a node of the same kind drops its own stale files when it is written)
            try:
                name = _file_key(key)
            except ValueError:
                continue
            _remove(folder / f"{name}.memmap")
            _remove(folder / f"{name}.shape.memmap")
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                _remove_owned(folder / name)  # a node of the old save: its files, not the user's

    def non_tensor(self, value: Any, folder: Path, path: tuple[str, ...]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        data = value.data if isinstance(value, NonTensorDataBase) else value.tolist()
        tag = _class_tag(value)
        meta: dict[str, Any]  # exactly tensordict's fields, which it checks
        if isinstance(value, NonTensorStack):
            meta = {**tag, "stack_dim": 0, "device": None}
        else:
            meta = {"_type": tag["_type"], "_metadata": None, "_is_non_tensor": True}
        try:
            json.dumps(data)
        except (TypeError, ValueError):
            if not self.allow_pickle:
                raise TypeError(
                    f"the non-tensor value at key {fmt_path(path)} ({type(data).__name__}) is not JSON-serializable; "
                    "pass allow_pickle=True to store it with pickle (loading it will need allow_pickle=True too)"
                ) from None
            if isinstance(value, NonTensorStack):
                with open(folder / STACK_PICKLE, "wb") as f:
                    pickle.dump(data, f)
                meta["data"] = STACK_PICKLE
            else:
                with open(folder / PICKLE, "wb") as f:
                    pickle.dump({"data": data}, f)
        else:
            meta["data"] = data
        self.json(folder / META, meta)

    def json(self, file: Path, meta: dict[str, Any]) -> None:
        """Write a metadata file: directly into a fresh folder (renamed into place whole), else replaced whole.

        ``metas`` keeps it by folder, for the load that follows a save.
        """
        self.metas[file.parent] = meta
        if self.fresh:
            _write_bytes(file, json.dumps(meta).encode())
        else:
            _write_json(file, meta)

    def write(self, num_threads: int, progress: bool | None = None) -> None:
        if _progress.wanted(progress):
            self._write_counted(num_threads, progress)
        elif num_threads > 1 and len(self.jobs) > 1:
            with ThreadPoolExecutor(num_threads) as pool:
                list(pool.map(self._write_one, self.jobs))
        else:
            for job in self.jobs:
                self._write_one(job)

    def _write_counted(self, num_threads: int, progress: bool | None) -> None:
        """``write`` with a progress bar counting each file's bytes as it is done (updated on this thread)."""
        sizes = [tensor.numel() * tensor.element_size() for tensor, _, _ in self.jobs]
        with _progress.bar(progress, "memmap_like" if self.like else "memmap", sum(sizes)) as bar:
            if num_threads > 1 and len(self.jobs) > 1:
                with ThreadPoolExecutor(num_threads) as pool:  # (map yields in order, each once it is done)
                    for size, _ in zip(sizes, pool.map(self._write_one, self.jobs), strict=True):
                        bar.update(size)
            else:
                for size, job in zip(sizes, self.jobs, strict=True):
                    self._write_one(job)
                    bar.update(size)

    def _write_one(self, job: tuple[torch.Tensor, Path, bool]) -> None:
        tensor, file, like = job
        if _is_whole_file(tensor, file):  # re-saving in place: the leaf already is that file
            return
        nbytes = tensor.numel() * tensor.element_size()
        tmp = file if self.fresh else file.with_name(f".{file.name}.tmp-{uuid.uuid4().hex[:8]}")
        old = self.keep.get(file) if like else None
        if old is not None and _link_or_copy(old, tmp):  # memmap_like keeps what the previous save held there
            pass
        elif like or not nbytes:  # a sparse, zero-filled file: no page is touched
            fd = os.open(tmp, _CREATE, 0o666)  # (os level: a Python file object costs four more system calls)
            try:
                os.ftruncate(fd, nbytes)
            finally:
                os.close(fd)
        else:
            with open(tmp, "wb") as f:
                self._copy(tensor, f)
        if tmp is not file:
            os.replace(tmp, file)

    @staticmethod
    def _copy(tensor: torch.Tensor, f: Any) -> None:
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        raw = data.as_subclass(torch.Tensor).contiguous().reshape(-1).view(torch.uint8).numpy()
        f.write(raw.data)


def _is_whole_file(tensor: torch.Tensor, file: Path) -> bool:
    """Whether ``tensor`` is the whole of ``file``, mapped shared (so its values already are the file's).

    A copy-on-write leaf (loaded with ``mode="r"``) names its file but may hold private writes: it is
    written like any other tensor.
    """
    if getattr(tensor, "_filename", None) != str(file) or tensor.storage_offset() or not tensor.is_contiguous():
        return False
    if tensor.numel() and tensor.untyped_storage().filename != str(file):  # (torch names shared mappings only)
        return False
    return file.exists() and os.path.getsize(file) == tensor.numel() * tensor.element_size()


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def _write_bytes(file: Path, data: bytes) -> None:
    """Create ``file`` holding ``data`` (os level: a Python file object costs four more system calls)."""
    fd = os.open(file, _CREATE, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _write_json(file: Path, meta: dict[str, Any]) -> None:
    tmp = file.with_name(f".{file.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, file)  # each metadata file is replaced whole


def stage(td: Any, folder: Path, *, allow_pickle: bool, like: bool) -> dict[Path, torch.Tensor]:
    """Write ``td``'s folder with empty (sparse) leaf files; return the tensor of each such file.

    An archive streams each leaf's bytes from its tensor (archive.py), so the data is written once.
    ``like``: no tensor is returned, the archive takes the zero-filled files.
    """
    writer = _Writer(allow_pickle, like=True, fresh=True)
    writer.root(td, folder)
    writer.write(0)
    return {} if like else {file: tensor for tensor, file, empty in writer.jobs if empty}


def add_node_to_meta(folder: Path, key: str, node: Any) -> None:
    """Record a nested TensorDict created in an existing save (``make_memmap`` of a new nested key).

    Its folder gets the node's own meta.json (batch size, device, class), the parent's lists it.
    """
    child = folder / _file_key(key)
    child.mkdir(exist_ok=True)
    device = "cpu" if node.device is None else str(node.device)
    _write_json(child / META, {"shape": list(node.batch_size), "device": device, **_class_tag(node)})
    meta = _read_json(folder / META)
    meta[key] = {"type": "TensorDict"}
    _write_json(folder / META, meta)


def add_to_meta(folder: Path, key: str, tensor: torch.Tensor) -> None:
    """Record a leaf created in an existing save (``make_memmap``) in its node's meta.json."""
    meta = _read_json(folder / META)
    meta[key] = {"device": "cpu", "shape": list(tensor.shape), "dtype": str(tensor.dtype), "is_nested": False}
    _write_json(folder / META, meta)


def save(
    td: Any,
    prefix: str | Path,
    *,
    existsok: bool = True,
    num_threads: int = 0,
    allow_pickle: bool = False,
    like: bool = False,
    metas: dict[Path, Any] | None = None,
    progress: bool | None = None,
    as_class: Any = None,
) -> Path:
    """Write ``td`` into the folder ``prefix``, atomically (a temporary sibling renamed into place).

    Files and folders of ``prefix`` that are not part of a previous save (not named by its ``meta.json``
    files) are kept, at the same place: they are carried over into the new folder before it is renamed into
    place (see :func:`_carry_foreign`). The files of a previous save are replaced.

    ``metas``: a dict that gets the metadata written for each TensorDict node, by its folder (``load`` takes
    it instead of reading those files back). ``progress``: a bar counting the leaves' bytes (``_progress``).
    ``as_class``: the TensorClass whose TensorDict ``td`` is: the folder is that class's (see ``_Writer.root``).

    Raises:
        RuntimeError: when ``prefix`` holds a save (a ``meta.json``) and ``existsok`` is False; when
            a file of the new save would replace a file of ``prefix`` that no previous save wrote.
        NotADirectoryError: when ``prefix`` is a file.
    """
    prefix = Path(prefix).absolute()
    mode = _mode(prefix, follow=False)  # (one system call for what is there)
    if mode is not None and stat.S_ISLNK(mode):  # a link: save into its target (as tensordict), keep the link
        prefix = prefix.resolve()
        mode = _mode(prefix, follow=True)
    if mode is not None and not stat.S_ISDIR(mode):  # (tensordict fails the same way, on the first leaf)
        raise NotADirectoryError(f"cannot save a TensorDict into {prefix}: it is a file, not a folder")
    if mode is not None and not existsok and (prefix / META).exists():
        # a folder without a save (empty, or only the user's files) is a place made ready for the save:
        # tensordict writes beside what is there too
        raise RuntimeError(f"the folder {prefix} already exists and holds a save (pass existsok=True to replace it)")
    if mode is not None and stat.S_ISDIR(mode):
        _refuse_symlinks(td, prefix, as_class=as_class)
    writer = _Writer(allow_pickle, like)  # (a missing parent folder is made with the temporary folder)
    if mode is not None and _maps_from(td, prefix):
        # The TensorDict is mapped from this very folder: update it in place (file by file), as tensordict
        # does, so that its existing mappings keep reaching the files.
        writer.root(td, prefix, as_class)
        writer.write(num_threads, progress)
        if metas is not None:
            metas.update(writer.metas)
        return prefix
    tmp = prefix.parent / f".{prefix.name}.tmp-{uuid.uuid4().hex[:12]}"
    writer.fresh = True
    try:
        writer.root(td, tmp, as_class)
        if like and mode is not None:
            writer.keep = _kept_files(writer.metas, tmp, prefix)
        writer.write(num_threads, progress)
        _swap_into_place(tmp, prefix)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if metas is not None:
        metas.update({prefix / folder.relative_to(tmp): meta for folder, meta in writer.metas.items()})
    return prefix


def _kept_files(metas: dict[Path, dict[str, Any]], tmp: Path, prefix: Path) -> dict[Path, Path]:
    """For ``memmap_like`` into a folder holding a save: the new files that take over an old one's data.

    As in tensordict, ``memmap_like`` over a save keeps the values saved there: a leaf whose old entry has the
    same shape and dtype (and whose file has the size that says) maps the old file (tensordict maps any old file
    of that name, and reads other dtypes' bytes as garbage); the other leaves are zeros.
    """
    kept = {}
    for folder, meta in metas.items():
        old_folder = prefix / folder.relative_to(tmp)
        try:
            old_meta = json.loads((old_folder / META).read_text())
        except (OSError, ValueError):
            continue
        for key, entry in meta.items():
            old = old_meta.get(key) if isinstance(old_meta, dict) else None
            if not (isinstance(entry, dict) and "dtype" in entry and not entry.get("is_nested")):
                continue
            same = ("shape", "dtype", "is_nested", "unbatched")
            if not isinstance(old, dict) or any(old.get(f) != entry.get(f) for f in same):
                continue
            name = f"{_file_key(key)}.memmap"
            dtype = DTYPES.get(entry["dtype"])
            nbytes = math.prod(entry["shape"]) * (dtype.itemsize if dtype is not None else -1)
            with contextlib.suppress(OSError):
                if (old_folder / name).stat().st_size == nbytes and nbytes > 0:
                    kept[folder / name] = old_folder / name
    return kept


def _link_or_copy(old: Path, new: Path) -> bool:
    """``new`` becomes ``old``'s file: a hard link, or a copy where links are not possible (False: neither).

    Through a link, mappings of the old save and of the new one see each other's writes, as tensordict's maps.
    """
    try:
        os.link(old, new)
    except OSError:
        try:
            shutil.copyfile(old, new)
        except OSError:
            return False
    return True


def _mode(path: Path, *, follow: bool) -> int | None:
    """The file mode of what ``path`` names (of the link itself unless ``follow``), None when nothing is there."""
    try:
        return (os.stat(path) if follow else os.lstat(path)).st_mode
    except FileNotFoundError:
        return None


def _refuse_symlinks(td: Any, folder: Path, keys: tuple[str, ...] = (), as_class: Any = None) -> None:
    """Refuse to save over an existing folder whose entries for ``td``'s keys are symbolic links.

    A link there points outside the save (tensordict refuses the same way); the check runs before
    anything is written. ``folder`` itself may be a link: it is the place the user chose. ``as_class``:
    ``td`` is saved for that TensorClass, in ``folder``'s ``_tensordict/``.
    """
    if as_class is not None:
        if (folder / _TC_DATA).is_symlink():
            raise RuntimeError(f"Refusing to write a memory-mapped TensorDict through symlink {folder / _TC_DATA}")
        folder = folder / _TC_DATA
    if is_non_tensor(td) or not folder.is_dir():
        return
    stacked = td._stacked_members()
    if stacked is not None:
        entries = [(str(i), member, folder / str(i)) for i, member in enumerate(stacked[1])]
    else:
        entries = []
        for key, value in td._items_str():
            name = _file_key(key)
            leaf = isinstance(value, torch.Tensor)
            entries.append((key, value, folder / (f"{name}.memmap" if leaf else name)))
    for key, value, file in entries:
        if file.is_symlink():
            # tensordict's wording (users match on it), then the key path
            what = "memory-mapped tensor" if isinstance(value, torch.Tensor) else "a memory-mapped TensorDict"
            raise RuntimeError(f"Refusing to write {what} through symlink {file} (key {fmt_path((*keys, key))})")
        if _held_class(value):  # its TensorDict in _tensordict/ (see _Writer.held)
            if (file / _TC_DATA).is_symlink():
                raise RuntimeError(
                    f"Refusing to write a memory-mapped TensorDict through symlink {file / _TC_DATA} "
                    f"(key {fmt_path((*keys, key))})"
                )
            _refuse_symlinks(unwrapped(value), file / _TC_DATA, (*keys, key))
        elif not isinstance(value, torch.Tensor):
            _refuse_symlinks(value, file, (*keys, key))


def _maps_from(td: Any, prefix: Path) -> bool:
    """True when a tensor leaf of ``td`` is mapped from a file inside ``prefix``."""
    inside = str(prefix) + os.sep
    return any(str(getattr(leaf, "_filename", None) or "").startswith(inside) for leaf in stored_leaves(td))


# ---------------------------------------------------------------------------------------------- load
def _read_json(file: Path) -> dict[str, Any]:
    try:
        meta = json.loads(file.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no {META} in {file.parent}: not a saved TensorDict folder") from None
    except json.JSONDecodeError as err:  # the error tensordict lets out, naming the file
        raise json.JSONDecodeError(
            f"{file} is not valid JSON, the save is corrupted: {err.msg}", err.doc, err.pos
        ) from None
    if not isinstance(meta, dict):
        raise RuntimeError(f"{file} does not hold a JSON object: the save is corrupted")
    return meta


def _shape(entry: Any, file: Path) -> torch.Size:
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise RuntimeError(f"{file}: invalid shape {shape!r} in the metadata")
    return torch.Size(shape)


class _Reader:
    """Reads a saved folder (or an archive, whose entries stand for its files: archive.py).

    ``mode``: how leaf files are mapped (``MemoryMappedTensor.from_filename``'s). ``root``: the folder
    loaded; a symbolic link in it that leads outside it is refused (see :meth:`inside`).
    """

    def __init__(
        self,
        dense_cls: Any,
        device: Any,
        allow_pickle: bool,
        robust_key: bool,
        metas: dict[Path, Any] | None = None,
        mode: str | None = None,
        root: Path | None = None,
    ) -> None:
        self.dense_cls, self.device, self.allow_pickle, self.robust_key = dense_cls, device, allow_pickle, robust_key
        self.metas = metas or {}  # metadata just written by save (not read back)
        self.mode = mode
        self.root = root  # (resolved lazily: only a folder holding a link needs it)
        self._real_root: Path | None = None
        meta_device = device is not None and torch.device(device).type == "meta"
        self.metadata_only = meta_device or fake_mode_active()  # leaves from the metadata, no file read
        self.bar: Any = _progress.NO_BAR  # counts the bytes of the leaves mapped (load(progress=True))
        self.root_class = False  # a TensorClass saved at the root loads as its class (else as its TensorDict)

    def inside(self, path: Any) -> None:
        """Refuse ``path`` when it is a symbolic link whose target lies outside the loaded folder.

        Writing through a loaded leaf (``mode="r+"``) would change a file outside the folder, and reading
        one would expose it: a folder from elsewhere must not reach out. Links inside the folder are fine;
        the folder itself may be a link (the place the caller chose).
        """
        if self.root is None or not isinstance(path, Path):  # (an archive's entries are no files)
            return
        try:
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                return
        except FileNotFoundError:
            return  # reported by whoever opens it
        if self._real_root is None:
            self._real_root = self.root.resolve()
        target = path.resolve()
        if not target.is_relative_to(self._real_root):
            raise RuntimeError(
                f"Refusing to load {path}: it is a symbolic link to {target}, outside the folder "
                f"{self.root} being loaded"
            )

    def node(self, folder: Path) -> Any:
        meta = self.metas.get(folder)
        if meta is None:
            if folder != self.root:
                self.inside(folder)
            self.inside(folder / META)
            meta = _read_json(folder / META)
        kind = str(meta.get("_class", "")).rpartition(":")[2]
        if _is_class_meta(meta, folder):  # a TensorClass's folder (see _KINDS)
            return self.held(folder, meta)
        if meta.get("_is_non_tensor") or kind == "NonTensorStack":
            return self.non_tensor(folder, meta)
        if kind == "LazyStackedTensorDict":
            members = sorted(
                (p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
            )
            return LazyStackedTensorDict(
                *(self.node(p) for p in members),
                stack_dim=int(meta.get("stack_dim", 0)),
                stack_dim_name=meta.get("stack_dim_name"),
            )
        out = {}
        for key, entry in meta.items():
            if key in ("shape", "device", "_type", "_format_version", "_class", "_non_tensor", "names", "_names"):
                continue
            name = _file_key(key, self.robust_key)
            if isinstance(entry, dict) and "type" in entry:
                out[key] = self.node(folder / name)
            elif isinstance(entry, dict) and entry.get("is_nested"):
                out[key] = self.nested(folder / f"{name}.memmap", entry)
            elif isinstance(entry, dict) and "dtype" in entry:
                out[key] = self.leaf(folder / f"{name}.memmap", entry)
                if entry.get("unbatched"):
                    out[key] = UnbatchedTensor(out[key])
            else:
                raise RuntimeError(f"{folder / META}: invalid entry for key {key!r}")
        device = self.device if self.device is not None else meta.get("device")
        names = meta.get("_names")
        return self.dense_cls(
            out, batch_size=_shape(meta, folder / META), device=device, names=names if isinstance(names, list) else None
        )

    def held(self, folder: Path, meta: dict[str, Any]) -> Any:
        """The TensorClass saved in ``folder``: its class when one of that name is defined here, else its TensorDict.

        The class is looked up, never imported (see _KINDS); the root's only with ``root_class`` (else the
        caller wraps what it reads).
        """
        td = self.node(folder / _TC_DATA)
        name = _class_of(meta)
        cls = None if name is None or (folder == self.root and not self.root_class) else lookup(name)
        if cls is None:
            return td
        extras = {k: v for k, v in meta.items() if k != "_type"}
        return cls.from_tensordict(td, extras or None)  # type: ignore[attr-defined]

    def leaf(self, file: Path, entry: dict[str, Any], on_cpu: bool = False) -> torch.Tensor:
        """The tensor in ``file`` (mapped), on the device asked for unless ``on_cpu`` (read, kept on the CPU)."""
        dtype = DTYPES.get(str(entry.get("dtype")))
        if dtype is None:
            raise KeyError(f"{file}: unknown dtype {entry.get('dtype')!r} in the metadata")  # tensordict's type
        shape = _shape(entry, file)
        if self.metadata_only and not on_cpu:  # "meta", or fake tensors (on the device asked for, else the CPU)
            return torch.empty(shape, dtype=dtype, device="cpu" if self.device is None else self.device)
        self.inside(file)
        try:  # from_filename stats the file once: no separate existence check
            tensor: torch.Tensor = (
                MemoryMappedTensor.from_filename(file, dtype, shape, mode=self.mode)
                if isinstance(file, Path)
                else file.tensor(dtype, shape)
            )  # an entry of an archive (archive.py)
        except FileNotFoundError:
            if shape.numel() == 0:  # tensordict writes no file for an empty leaf
                return torch.empty(shape, dtype=dtype)
            raise FileNotFoundError(f"{file} is missing: the save is incomplete") from None
        if self.device is not None and torch.device(self.device).type != "cpu" and not on_cpu:
            tensor = tensor.to(self.device)
        self.bar.update(shape.numel() * dtype.itemsize)
        return tensor

    def nested(self, file: Path, entry: dict[str, Any]) -> torch.Tensor:
        """A nested tensor leaf (see ``_Writer.nested``): a view of its mapped file."""
        sizes_file = file.with_name(file.name.removesuffix(".memmap") + ".shape.memmap")
        sizes = self.leaf(sizes_file, {**entry, "dtype": "torch.int64"}, on_cpu=True)
        if sizes.ndim != 2 or bool((sizes < 0).any()):
            raise RuntimeError(f"{sizes_file}: invalid nested sizes")
        sizes = sizes.as_subclass(torch.Tensor).clone()  # small: no mapping kept open for it
        numel = int(sizes.prod(1).sum())
        data = self.leaf(file, {**entry, "shape": [numel]}).as_subclass(torch.Tensor)
        if data.storage_offset():  # a view into an archive: a nested view addresses its storage from the start
            data = data.clone()
        layout = torch.jagged if entry.get("layout") == "jagged" else torch.strided
        try:
            return ragged.from_flat(data, sizes, layout)
        except RuntimeError as err:
            raise RuntimeError(f"{file}: cannot rebuild the nested tensor: {err}") from None

    def non_tensor(self, folder: Path, meta: dict[str, Any]) -> Any:
        stack_pickle = meta.get("data") == STACK_PICKLE and (folder / STACK_PICKLE).exists()
        if stack_pickle or ("data" not in meta and (folder / PICKLE).exists()):
            file = folder / (STACK_PICKLE if stack_pickle else PICKLE)
            self.inside(file)
            if not self.allow_pickle:
                raise RuntimeError(
                    f"{file} holds a pickled value; loading it runs arbitrary code, so it needs "
                    "allow_pickle=True (only for files you trust)"
                )
            with file.open("rb") as f:
                loaded = pickle.load(f)  # allowed explicitly by the caller
            data = loaded if stack_pickle else loaded["data"]
        elif "data" in meta:
            data = meta["data"]
        elif (folder / PICKLE).exists():
            if not self.allow_pickle:
                raise RuntimeError(
                    f"{folder / PICKLE} holds a pickled value; loading it runs arbitrary code, so it needs "
                    "allow_pickle=True (only for files you trust)"
                )
            self.inside(folder / PICKLE)
            with (folder / PICKLE).open("rb") as f:
                data = pickle.load(f)["data"]  # allowed explicitly by the caller
        else:
            raise RuntimeError(f"{folder}: a non-tensor entry without data")
        if str(meta.get("_class", "")).endswith("NonTensorStack") or "NonTensorStack" in str(meta.get("_type")):
            return NonTensorStack.from_list(data) if isinstance(data, list) else NonTensorData(data)
        if "tensorclass.MetaData'" in str(meta.get("_type")):
            return MetaData(data)
        return NonTensorData(data)  # the batch size comes from the parent node


def load(
    prefix: str | Path,
    dense_cls: Any,
    device: Any = None,
    *,
    allow_pickle: bool = False,
    robust_key: bool = True,
    metas: dict[Path, Any] | None = None,
    mode: str | None = None,
    progress: bool | None = None,
    root_class: bool = False,
) -> Any:
    """Read the folder ``prefix`` (leaves map its files; an archive file is read by archive.py).

    ``device="meta"`` or an active ``FakeTensorMode`` read the metadata only: leaves are meta (or fake)
    tensors of the saved shapes and dtypes. ``mode``: how the leaf files are mapped (``"r"``: copy-on-write).
    A symbolic link in the folder leading outside it is refused. ``progress``: a bar counting the bytes mapped
    (its total, unknown until every ``meta.json`` is read, is set at the end). ``root_class``: a folder that
    tensordict wrote for a TensorClass loads as that class when it is defined here (a look-up, as below it).
    """
    folder = Path(prefix).absolute()  # mapped file names are absolute, whatever the working directory
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder with a saved TensorDict")
    # (after a save, ``metas`` given: the folder was just written, with no link, see _refuse_symlinks)
    root = folder if metas is None else None
    reader = _Reader(dense_cls, device, allow_pickle, robust_key, metas, mode, root)
    reader.root_class = root_class
    if not _progress.wanted(progress):
        return reader.node(folder)
    reader.bar = _progress.bar(progress, "load_memmap", None)
    try:
        out = reader.node(folder)
    except BaseException:
        reader.bar.close()
        raise
    _progress.finish(reader.bar)
    return out


def run_early(fn: Any) -> Future[Any]:
    """Run ``fn`` on a background thread and return its future (``return_early=True``)."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future
