"""Persistence methods of every TensorDict (attached to TensorDictBase by :func:`install`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import _schema
from .._base import transfer as _transfer
from .._keys import NestedKey as NestedKey
from .._keys import key_tuple
from .._nontensor import is_non_tensor
from .._ops import ragged
from .._ops.traverse import named_nodes, stacked_members, unwrapped
from .._tc_registry import class_name
from .._td import TensorDict  # the in-memory backend: the package-level load functions build one
from .._unbatched import UnbatchedTensor
from ..base import TensorDictBase
from ..memmap import MemoryMappedTensor
from . import archive as _archive
from . import consolidate as _consolidate
from . import memmap as _memmap
from . import parallel as _parallel
from ._shared import SideTable, stored_leaves

_SAVED = SideTable()  # a TensorDict -> the folder it was saved to or loaded from (see saved_path)
_MODE = SideTable()  # a TensorDict loaded with load_memmap(mode="r"/"r+") -> that mode (memmap_refresh_ keeps it)
_AS_CLASS: dict[int, Any] = {}  # id of a TensorDict being saved for a TensorClass -> that instance (save_as_class)


def _shared(nested: torch.Tensor, zeros: bool = False) -> torch.Tensor:
    """A copy of a nested tensor (or zeros like it) whose elements are in shared memory, on the CPU."""
    data, sizes = ragged.to_flat(nested)
    data = torch.zeros(data.shape, dtype=data.dtype) if zeros else data.to("cpu", copy=True)
    return ragged.from_flat(data.share_memory_(), sizes, nested.layout)  # type: ignore[no-untyped-call]


def _remember(td: Any, prefix: str | Path) -> None:
    _SAVED.set(td, str(Path(prefix).absolute()))


def _data_path(prefix: str | Path, as_class: bool) -> Path:
    """The folder of a saved TensorDict's files: a TensorClass's folder keeps them in ``_tensordict/``."""
    return Path(prefix) / _memmap._TC_DATA if as_class else Path(prefix)


def _save_and_load(td: Any, prefix: str | Path, *, allow_pickle: bool = False, **kwargs: Any) -> Any:
    """Save ``td`` into the folder ``prefix`` and load it back mapped and locked, as ``load_memmap`` does.

    The metadata just written is handed to the load instead of being read back from its files.
    """
    metas: dict[Path, Any] = {}
    as_class = _AS_CLASS.get(id(td))
    _memmap.save(td, prefix, allow_pickle=allow_pickle, metas=metas, as_class=as_class, **kwargs)
    loaded = _memmap.load(
        prefix, type(td)._dense_cls, None, allow_pickle=allow_pickle, metas=metas, progress=False
    )  # (the bar of the save is the one shown)
    _remember(loaded, _data_path(prefix, as_class is not None))
    return loaded.lock_()


def save_as_class(td: Any, wrapper: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A TensorClass's ``memmap``, ``memmap_``, ``memmap_like``, ``save`` or ``dumps``: ``td.name(...)`` for it.

    ``td`` is ``wrapper``'s TensorDict. A folder is written as tensordict writes a TensorClass's: its
    ``meta.json`` names the class (and holds its extra values), ``td`` goes to ``_tensordict/``; shared
    memory and archives are ``td``'s. The result is ``wrapper`` for ``td`` itself, else wrapped like it.
    """
    if kwargs.get("return_early") and kwargs.get("num_threads"):  # the future's result is wrapped too
        later = {**kwargs, "return_early": False}
        return _memmap.run_early(lambda: save_as_class(td, wrapper, name, args, later))
    _AS_CLASS[id(td)] = wrapper
    try:
        result = getattr(td, name)(*args, **kwargs)
    finally:
        _AS_CLASS.pop(id(td), None)
    return wrapper if result is td else wrapper._wrap_like(result)


def _class_into(loaded: Any, out: Any) -> Any:
    """``load_memmap(out=...)`` of a TensorClass's folder (``loaded``), as tensordict.

    ``out`` an instance of that class (by name) gets the saved values and is returned; a TensorDict gets
    them and the class is returned over it; an instance of another TensorClass is left alone.
    """
    is_class = getattr(type(out), "_tb_tensorclass", False)
    if is_class and class_name(type(out)) != class_name(type(loaded)):
        return loaded
    out.update_(unwrapped(loaded))
    return out if is_class else loaded._wrap_like(unwrapped(out))


class _Persistence:
    """The methods; :func:`install` copies them onto TensorDictBase."""

    def memmap(
        self: Any,
        prefix: str | Path | None = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        return_early: bool = False,
        share_non_tensor: bool = False,
        existsok: bool = True,
        robust_key: bool | None = True,
        archive: bool | None = None,
        compression: str | int | None = None,
        allow_pickle: bool = False,
        progress: bool | None = None,
        atomic: bool = False,
    ) -> Any:
        """A memory-mapped copy: saved to the folder ``prefix`` (or in shared memory without one), locked.

        Saving is atomic (written aside, then renamed into place). An existing save in the folder is
        replaced; files there that no save wrote (the user's) are kept where they are, as with tensordict,
        and a save that would replace one of them is refused (RuntimeError naming it). Non-tensor leaves are
        stored as JSON; other Python objects need ``allow_pickle=True``. A ``prefix`` ending in ``.tdz`` (or
        ``archive=True``) writes one archive file instead of a folder (see :func:`~tensorbatch.pack_memmap`);
        the result's leaves are views of the mapped archive, not locked, and writes to them stay in memory.

        Args:
            prefix: the folder; None maps every leaf in shared memory instead of files.
            copy_existing: copy leaves already mapped from other files (else that is refused).
            num_threads: write the leaves on this many threads.
            return_early: with ``num_threads`` > 0, return a :class:`concurrent.futures.Future` of the result at
                once (without threads the call returns its result, as tensordict).
            share_non_tensor: accepted for tensordict compatibility (non-tensor leaves are copied).
            existsok: allow saving into a folder that holds a save (it is replaced; the user's files are
                kept). False refuses such a folder only: one without a save is written into.
            robust_key: accepted for compatibility: keys are always percent-encoded into file names.
            archive: write an archive file; None: when ``prefix`` ends in ``.tdz``.
            compression: an archive's leaf compression (``"deflate"``, ``"bzip2"``, ``"lzma"``); compressed
                leaves are read into memory when loaded instead of being mapped.
            allow_pickle: store non-JSON non-tensor values with pickle.
            progress: show a tqdm bar counting the bytes written (into the folder or the archive; None: the switch,
                :class:`~tensorbatch.set_progress`; needs tqdm). An addition: tensordict has no such option.
            atomic: accepted for tensordict compatibility (saves are always atomic).

        Examples:
            >>> import tempfile, torch
            >>> from tensorbatch import TensorDict
            >>> td = TensorDict({"a": torch.arange(3.0), "n": {"b": torch.ones(3, 2)}}, batch_size=[3])
            >>> folder = tempfile.mkdtemp() + "/td"
            >>> m = td.memmap(folder)
            >>> m.is_locked, m.is_memmap(), TensorDict.load_memmap(folder)["n", "b"].shape
            (True, True, torch.Size([3, 2]))
        """

        def run() -> Any:
            if _archive.wanted(prefix, archive, compression):  # the data is copied into the archive
                _archive.save(
                    self,
                    prefix,
                    existsok=existsok,
                    allow_pickle=allow_pickle,
                    compression=compression,
                    progress=progress,
                )
                return type(self).load_memmap(prefix, allow_pickle=allow_pickle)
            if prefix is None:  # shared memory, on the CPU (as files would be)
                out = self.apply(
                    lambda x: (
                        _shared(x) if x.is_nested else MemoryMappedTensor.from_tensor(x, copy_existing=copy_existing)
                    ),
                    device=torch.device("cpu"),
                )
                return out.lock_()
            _check_existing(self, prefix, copy_existing)
            loaded = _save_and_load(
                self, prefix, existsok=existsok, num_threads=num_threads, allow_pickle=allow_pickle, progress=progress
            )
            if is_non_tensor(self) and loaded.batch_size != self.batch_size:  # a leaf's batch is its parent's
                loaded = loaded._follow(self.batch_size).lock_()
            return loaded

        return _memmap.run_early(run) if return_early and num_threads else run()  # (a future with threads only)

    def memmap_(
        self: Any,
        prefix: str | Path | None = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        return_early: bool = False,
        share_non_tensor: bool = False,
        existsok: bool = True,
        robust_key: bool | None = True,
        allow_pickle: bool = False,
        progress: bool | None = None,
        atomic: bool = False,
    ) -> Any:
        """Like :meth:`memmap`, but this TensorDict's leaves become the mapped ones (then it is locked)."""

        def run() -> Any:
            mapped = self.memmap(
                prefix,
                copy_existing,
                num_threads=num_threads,
                existsok=existsok,
                allow_pickle=allow_pickle,
                progress=progress,
            )
            _adopt(self, mapped)
            if prefix is not None and not _archive.wanted(prefix, None, None):
                _remember(self, _data_path(prefix, id(self) in _AS_CLASS))
            return self.lock_()

        return _memmap.run_early(run) if return_early and num_threads else run()  # (a future with threads only)

    def memmap_like(
        self: Any,
        prefix: str | Path | None = None,
        copy_existing: bool = False,
        *,
        existsok: bool = True,
        num_threads: int = 0,
        return_early: bool = False,
        share_non_tensor: bool = False,
        robust_key: bool | None = True,
        archive: bool | None = None,
        progress: bool | None = None,
    ) -> Any:
        """An empty memory-mapped TensorDict with this one's structure (zero-filled, sparse files).

        Nothing is copied and no page is touched, so a huge ``td.expand(n).memmap_like(folder)`` costs
        almost no memory. Into an archive (``.tdz`` or ``archive=True``) the zeros are written, and the result
        writes into the archive (as ``load_memmap(path, mode="r+")``). ``progress``: a tqdm bar counting the
        bytes of the files made (as :meth:`memmap`'s).
        """

        def run() -> Any:
            if _archive.wanted(prefix, archive, None):
                _archive.save(self, prefix, existsok=existsok, like=True, progress=progress)
                return type(self).load_memmap(prefix, mode="r+")
            if prefix is None:
                out = self.apply(
                    lambda x: (
                        _shared(x, zeros=True) if x.is_nested else MemoryMappedTensor.zeros(x.shape, dtype=x.dtype)
                    ),
                    device=torch.device("cpu"),
                )
                return out.lock_()
            return _save_and_load(
                self, prefix, existsok=existsok, num_threads=num_threads, like=True, progress=progress
            )

        return _memmap.run_early(run) if return_early and num_threads else run()  # (a future with threads only)

    @classmethod
    def load_memmap(
        cls: Any,
        prefix: str | Path,
        device: Any = None,
        non_blocking: bool = False,
        *,
        out: Any = None,
        robust_key: bool | None = True,
        subpath: Any = None,
        mode: str | None = None,
        num_threads: int = 0,
        allow_pickle: bool | None = None,
        progress: bool | None = None,
    ) -> Any:
        """Load a folder written by :meth:`memmap` (or by tensordict): leaves map its files (unlocked, as tensordict).

        Every file is checked against its metadata first; a truncated or missing file raises naming it.
        ``device="meta"`` reads the metadata only. Pickled values load only with ``allow_pickle=True``.
        ``subpath`` (a nested key) loads one nested TensorDict of the folder. An archive file (``.tdz``,
        :func:`~tensorbatch.pack_memmap`) loads unlocked, its leaves views of one copy-on-write mapping of the
        file; with ``mode="r+"`` writes to the leaves reach the archive. ``num_threads`` is accepted for
        compatibility: the files are mapped, not read, so one thread does it.

        ``mode`` (tensordict's): ``"r"`` maps every file copy-on-write: in-place writes into the leaves stay
        in memory and the files never change (load data you only read, or do not own, this way). ``"r+"``
        maps them shared: in-place writes reach the files (PermissionError for a file the process cannot
        write). None (the default): a folder's files as with ``"r+"`` when the process can write them, else
        as with ``"r"``; an archive as with ``"r"``. A symbolic link in the folder that leads outside it (a
        leaf file or a sub-folder) is refused, in every mode. ``progress=True`` shows a tqdm bar counting the
        bytes of a folder's leaves as they are mapped (None: the global switch, :class:`~tensorbatch.set_progress`).

        A TensorClass held in the saved TensorDict (an entry, or a field annotated ``Any``) has its class named
        in its folder (``_type``, as tensordict writes it): it loads as that class when a TensorClass subclass of
        that exact module and qualname is defined in this process, and as a TensorDict otherwise (tensordict
        imports the module the folder names; nothing named by a file is imported or evaluated here).
        A TensorClass's own folder (``memmap`` of a TensorClass) loads as its class the same way; with ``out=``
        (a TensorDict), that class over ``out``, as tensordict.

        Raises:
            ValueError: ``subpath`` names no saved TensorDict in the folder; ``mode`` other than None, ``"r"``
                or ``"r+"``.
            RuntimeError: a symbolic link in the folder leads outside it (the error names the link).

        Examples:
            >>> import tempfile, torch
            >>> from tensorbatch import TensorDict
            >>> folder = tempfile.mkdtemp() + "/td"
            >>> _ = TensorDict(a=torch.zeros(3)).memmap(folder)
            >>> TensorDict.load_memmap(folder, mode="r")["a"].add_(1).tolist()  # in memory only
            [1.0, 1.0, 1.0]
            >>> TensorDict.load_memmap(folder)["a"].tolist()
            [0.0, 0.0, 0.0]
        """
        if mode not in (None, "r", "r+"):
            raise ValueError(f"load_memmap(): mode must be None, 'r' or 'r+', got {mode!r}")
        if Path(prefix).is_file():  # an archive, as tensordict: not locked (writes stay in memory unless r+)
            if subpath is not None:
                raise ValueError(f"load_memmap(): subpath= reads a folder; {str(prefix)!r} is an archive file")
            td = _archive.load(
                prefix,
                cls._dense_cls,
                device,
                allow_pickle=bool(allow_pickle),
                robust_key=robust_key is not False,
                writable=mode == "r+",
            )
            return out.update_(td) if out is not None else td
        if subpath is not None:
            prefix = Path(prefix).joinpath(*key_tuple(subpath))
            if not (prefix / "meta.json").is_file():
                raise ValueError(
                    f"load_memmap(): no TensorDict saved under subpath {subpath!r} "
                    f"({str(prefix / 'meta.json')!r} is missing)"
                )
        td = _memmap.load(
            prefix,
            cls._dense_cls,
            device,
            allow_pickle=bool(allow_pickle),
            robust_key=robust_key is not False,
            mode=mode,
            progress=progress,
            root_class=True,  # a TensorClass's folder loads as its class, as tensordict (when defined here)
        )
        backend = unwrapped(td)
        # (a TensorClass's folder: its TensorDict's files are in _tensordict/, as tensordict's saved_path says)
        in_class = (Path(prefix) / _memmap._TC_DATA).is_dir() and _memmap.is_class_folder(Path(prefix))
        _remember(backend, _data_path(prefix, in_class))
        if mode is not None:
            _MODE.set(backend, mode)
        if out is None:
            return td  # (unlocked, as tensordict's; memmap() returns its result locked)
        if td is backend:
            return out.update_(backend)
        return _class_into(td, out)

    def load_memmap_(
        self: Any,
        prefix: str | Path,
        robust_key: bool | None = True,
        *,
        allow_pickle: bool | None = None,
        mode: str | None = None,
    ) -> Any:
        """Copy the values of a saved folder into this TensorDict (same keys and shapes).

        The folder is only read: its files are mapped copy-on-write whatever ``mode`` (accepted for
        tensordict compatibility, and checked), so nothing is ever written into them.
        """
        if mode not in (None, "r", "r+"):
            raise ValueError(f"load_memmap_(): mode must be None, 'r' or 'r+', got {mode!r}")
        loaded = unwrapped(type(self).load_memmap(prefix, allow_pickle=allow_pickle, mode="r"))
        return self.update_(loaded)

    def is_memmap(self: Any) -> bool:
        """True when every tensor leaf is a MemoryMappedTensor (an UnbatchedTensor: over a mapped file)."""
        leaves = list(stored_leaves(self))
        return bool(leaves) and all(
            isinstance(x, MemoryMappedTensor)
            or (isinstance(x, UnbatchedTensor) and x.untyped_storage().filename is not None)
            for x in leaves
        )

    @property
    def saved_path(self: Any) -> str | None:
        """The folder this TensorDict was saved to with ``memmap_`` or loaded from (else None)."""
        return _SAVED.get(self)  # type: ignore[no-any-return]

    def share_memory_(self: Any) -> Any:
        """Move every leaf's storage to shared memory (in place); locks the TensorDict."""
        for leaf in stored_leaves(self):
            leaf.share_memory_()  # type: ignore[no-untyped-call]
        return self.lock_()

    def is_shared(self: Any) -> bool:
        """True when every tensor leaf lives in shared memory (or is memory-mapped from a file)."""
        leaves = list(stored_leaves(self))
        return bool(leaves) and all(
            x.is_shared() or isinstance(x, MemoryMappedTensor)  # type: ignore[no-untyped-call]
            for x in leaves
        )

    def consolidate(
        self: Any,
        filename: str | Path | None = None,
        *,
        num_threads: int = 0,
        device: Any = None,
        non_blocking: bool = False,
        inplace: bool = False,
        return_early: bool = False,
        use_buffer: bool = False,
        share_memory: bool = False,
        pin_memory: bool = False,
        metadata: bool = False,
        progress: bool | None = None,
    ) -> Any:
        """A copy whose tensor leaves are views into one contiguous byte buffer (in a file if given).

        Moving (``to(device)``), pickling or sending a consolidated TensorDict to another process moves
        that one buffer. Operations return ordinary TensorDicts. ``num_threads`` (> 1) copies the leaves on that
        many threads; ``progress=True`` shows a tqdm bar counting the bytes copied (None: the global switch,
        :class:`~tensorbatch.set_progress`).

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> c = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3, 2)}}, batch_size=[3]).consolidate()
            >>> c.is_consolidated(), c["a"].untyped_storage().data_ptr() == c["n", "b"].untyped_storage().data_ptr()
            (True, True)
        """

        def run() -> Any:
            out = _consolidate.consolidate(
                self,
                filename,
                device=device,
                non_blocking=non_blocking,
                share_memory=share_memory,
                pin_memory=pin_memory,
                num_threads=num_threads,
                progress=progress,
            )
            if inplace:
                self._replace_with(out)
                buffer, layout = _consolidate.state(out)  # type: ignore[misc]
                return _consolidate._remember(self, buffer, layout)
            return out

        return _memmap.run_early(run) if return_early and num_threads else run()  # (a future with threads only)

    def map(
        self: Any,
        fn: Any,
        dim: int = 0,
        num_workers: int | None = None,
        *,
        out: Any = None,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = False,
        pbar: bool = False,
        mp_start_method: str | None = None,
    ) -> Any:
        """Apply ``fn`` to chunks along ``dim`` in a pool of processes and join the results.

        The results are concatenated along ``dim`` (stacked when ``chunksize=0``).

        Chunks of a memory-mapped or shared TensorDict reach the workers as file names or shared handles (no
        copy); an ``out`` that is memory-mapped or shared is written by the workers directly, so results
        larger than memory can be produced. ``fn`` must be picklable (a module-level function).

        Args:
            fn: called on each chunk; returns a TensorDict, a tensor or None.
            dim: the batch dim to split.
            num_workers: pool size (default: one per CPU); ignored with ``pool``.
            out: where to write the joined result.
            chunksize: chunk length along ``dim`` (0: one element at a time); exclusive with ``num_chunks``.
            num_chunks: how many chunks (default: one per worker).
            pool: an existing ``multiprocessing`` pool to use.
            generator: accepted for tensordict compatibility.
            max_tasks_per_child: recycle workers after this many chunks.
            worker_threads: torch threads in each worker.
            index_with_generator: accepted for tensordict compatibility.
            pbar: show a tqdm progress bar (needs tqdm).
            mp_start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: torch's default).
        """
        return _parallel.map_chunks(
            self,
            fn,
            dim,
            num_workers,
            out=out,
            chunksize=chunksize,
            num_chunks=num_chunks,
            pool=pool,
            max_tasks_per_child=max_tasks_per_child,
            worker_threads=worker_threads,
            pbar=pbar,
            mp_start_method=mp_start_method,
        )

    def map_iter(
        self: Any,
        fn: Any,
        dim: int = 0,
        num_workers: int | None = None,
        *,
        shuffle: bool = False,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = True,
        pbar: bool = False,
        mp_start_method: str | None = None,
    ) -> Iterator[Any]:
        """Like :meth:`map`, but yield each chunk's result as it arrives (``shuffle`` randomises chunk order)."""
        return _parallel.map_iter_chunks(
            self,
            fn,
            dim,
            num_workers,
            shuffle=shuffle,
            chunksize=chunksize,
            num_chunks=num_chunks,
            pool=pool,
            generator=generator,
            max_tasks_per_child=max_tasks_per_child,
            worker_threads=worker_threads,
            pbar=pbar,
            mp_start_method=mp_start_method,
        )

    def make_memmap(
        self: Any, key: NestedKey, shape: Any, *, dtype: torch.dtype | None = None, robust_key: bool | None = True
    ) -> MemoryMappedTensor:
        """Create an empty memory-mapped leaf at ``key`` (a file in :attr:`saved_path`, else shared memory)."""
        proto = torch.empty(0, dtype=dtype or torch.get_default_dtype())
        return _new_leaf(self, key, proto, torch.Size(shape), copy_data=False, existsok=True)

    def make_memmap_from_tensor(
        self: Any,
        key: NestedKey,
        tensor: torch.Tensor,
        *,
        copy_data: bool = True,
        existsok: bool = True,
        robust_key: bool | None = True,
    ) -> MemoryMappedTensor:
        """Create a memory-mapped leaf at ``key`` holding a copy of ``tensor`` (or its shape only)."""
        return _new_leaf(self, key, tensor, tensor.shape, copy_data=copy_data, existsok=existsok)

    def make_memmap_from_storage(
        self: Any,
        key: NestedKey,
        storage: Any,
        shape: Any,
        *,
        dtype: torch.dtype | None = None,
        robust_key: bool | None = True,
    ) -> Any:
        """Put a MemoryMappedTensor over an existing storage at ``key``."""
        leaf = MemoryMappedTensor.from_storage(storage, shape=torch.Size(shape), dtype=dtype)
        _set_ignoring_lock(self, key, leaf)
        return leaf

    def memmap_refresh_(self: Any, *, allow_pickle: bool | None = None) -> Any:
        """Re-read :attr:`saved_path` (keys or values another process added there) into this TensorDict.

        The files are mapped again with the mode this TensorDict was loaded with (``load_memmap(mode=...)``),
        so a TensorDict loaded copy-on-write (``mode="r"``) stays so.
        """
        path = self.saved_path
        if path is None:
            raise RuntimeError("memmap_refresh_ needs a TensorDict saved with memmap_ or loaded with load_memmap")
        mode = _MODE.get(self)
        loaded = unwrapped(type(self).load_memmap(path, allow_pickle=allow_pickle, mode=mode))
        locked = self.is_locked
        self.unlock_()
        self.update(loaded)
        return self.lock_() if locked else self

    def is_consolidated(self: Any) -> bool:
        """True for the result of :meth:`consolidate` (not for TensorDicts derived from it)."""
        return _consolidate.state(self) is not None

    @classmethod
    def from_consolidated(cls: Any, filename: str | Path) -> Any:
        """Map a file written by ``consolidate(filename)`` back (leaves are views of the mapped file)."""
        return _consolidate.from_consolidated(cls._dense_cls, filename)

    def pin_memory(self: Any, num_threads: int | None = None, inplace: bool = False) -> Any:
        """Page-locked copies of the CPU leaves (needs an accelerator build of torch).

        Each leaf is copied once into torch's pinned-memory cache; ``num_threads`` (> 1) threads copy them.
        """
        out = _transfer.pinned(self, num_threads)
        return self._replace_with(out) if inplace else out

    def pin_memory_(self: Any, num_threads: int = 0) -> Any:
        """Deprecated (as in tensordict 0.15): ``pin_memory(inplace=True)``."""
        warnings.warn(
            "pin_memory_() is deprecated (tensordict removes it in 0.17): use pin_memory(inplace=True)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.pin_memory(num_threads, inplace=True)

    def load_(self: Any, prefix: str | Path, *args: Any, **kwargs: Any) -> Any:
        """Load a saved folder into this TensorDict: :meth:`load_memmap_`."""
        return self.load_memmap_(prefix, *args, **kwargs)


def _adopt(td: Any, mapped: Any) -> None:
    """Make ``td``'s leaves the mapped ones (member by member for a lazy stack); they live on the CPU."""
    theirs = dict(named_nodes(mapped, members=True))
    nodes = list(named_nodes(td, members=True))
    stacks = {path for path, node in nodes if stacked_members(node) is not None}
    for path, node in nodes:  # the top nodes that store leaves: the root, or lazy stacks' members
        if path not in stacks and (not path or path[:-1] in stacks):
            node.unlock_()
            node.update(theirs[path])
    for _, node in named_nodes(td, members=True):
        if hasattr(node, "_device"):
            node._device = torch.device("cpu")


def _set_ignoring_lock(td: Any, key: NestedKey, leaf: Any) -> None:
    locked = td.is_locked
    td.unlock_()
    try:
        td.set(key, leaf)
    finally:
        if locked:
            td.lock_()


def _new_leaf(
    td: Any, key: NestedKey, proto: torch.Tensor, shape: torch.Size, copy_data: bool, existsok: bool
) -> MemoryMappedTensor:
    """A new memory-mapped leaf at ``key``: a file beside the others (and in meta.json) when saved."""
    path = td.saved_path
    keys = key_tuple(key)
    if path is None:
        leaf = MemoryMappedTensor.from_tensor(proto, copy_data=copy_data, shape=shape)
    else:
        folder = Path(path).joinpath(*(_memmap._file_key(k) for k in keys[:-1]))
        if not folder.resolve().is_relative_to(Path(path).resolve()):  # a sub-folder is a link leading out
            raise RuntimeError(
                f"Refusing to write memory-mapped tensor through symlink: {folder} leads outside {path} (key {keys!r})"
            )
        new_nodes = [
            i for i in range(1, len(keys)) if not Path(path).joinpath(*map(_memmap._file_key, keys[:i])).is_dir()
        ]
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / f"{_memmap._file_key(keys[-1])}.memmap"
        leaf = MemoryMappedTensor.from_tensor(proto, filename=file, existsok=existsok, copy_data=copy_data, shape=shape)
        _set_ignoring_lock(td, key, leaf)  # (makes the nested TensorDicts the new folders are for)
        for i in new_nodes:  # a nested key the save did not have: its nodes join the save, as tensordict
            parent = Path(path).joinpath(*map(_memmap._file_key, keys[: i - 1]))
            _memmap.add_node_to_meta(parent, keys[i - 1], td.get(keys[:i]))
        _memmap.add_to_meta(folder, keys[-1], leaf)
        return leaf
    _set_ignoring_lock(td, key, leaf)
    return leaf


def _check_existing(td: Any, prefix: str | Path, copy_existing: bool) -> None:
    """Refuse to copy leaves already mapped from other files unless ``copy_existing``."""
    if copy_existing:
        return
    target = str(Path(prefix).absolute())
    for leaf in stored_leaves(td):
        name = getattr(leaf, "_filename", None)
        if name is not None and not name.startswith(target + "/"):
            raise RuntimeError(
                f"a leaf is already memory-mapped from {name}; pass copy_existing=True to copy it into {target}"
            )


def consolidated_to(td: Any, device: Any, non_blocking: bool) -> Any:
    """``to(device)`` of a consolidated TensorDict: one buffer moves (None when ``td`` is not consolidated)."""
    found = _consolidate.state(td)
    if found is None:
        return None
    buffer, layout = found
    moved = buffer.to(device, non_blocking=non_blocking)  # (to() passes True and synchronises itself)
    layout = {**layout, "device": str(device)}
    if moved is buffer:  # already there (a TensorDict without a device): the same views, with the device set
        same = _transfer.move(td, device, whole=False)
        return _consolidate.remember(same, buffer, layout)
    return _consolidate.restore(td._dense_cls, moved, layout)


def reduce_consolidated(td: Any) -> Any:
    """Pickling a consolidated TensorDict: its one buffer and its layout (None when not consolidated)."""
    found = _consolidate.state(td)
    if found is None:
        return None
    buffer, layout = found
    return (_consolidate.restore, (td._dense_cls, buffer, layout))


def install(cls: type) -> None:
    """Attach the persistence methods (and tensordict's aliases) to ``cls``."""
    for name, value in vars(_Persistence).items():
        if not name.startswith("__"):
            setattr(cls, name, value)
    methods = vars(_Persistence)
    for alias, name in (("save", "memmap"), ("dumps", "memmap"), ("load", "load_memmap")):
        setattr(cls, alias, methods[name])
    hooks = (
        ("_consolidated_to", consolidated_to),  # to(device)
        ("_reduce_consolidated", reduce_consolidated),  # pickling
        ("_save_as_class", save_as_class),  # a TensorClass's memmap (tensorclass.py)
    )
    for hook, fn in hooks:
        setattr(cls, hook, fn)


install(TensorDictBase)  # the persistence methods attach themselves: base.py imports no feature


def schema_memmap(schema: Any, *, batch_size: torch.Size, device: Any = None, prefix: Any = None, **kwargs: Any) -> Any:
    """``from_schema(..., storage="memmap", prefix=...)``: zero-filled memory-mapped leaves (``memmap_like``).

    ``prefix``: the folder (None: shared memory); the other keyword arguments are :meth:`memmap_like`'s.
    Nothing is allocated in memory: each leaf is an expanded zero until its file is made.
    """
    empty = TensorDict({}, batch_size=batch_size, device=device)
    for key, (shape, dtype) in schema.items():
        empty.set(key, torch.zeros((), dtype=dtype, device=device).expand((*batch_size, *shape)))
    return empty.memmap_like(prefix, **kwargs)


_schema.register("memmap", schema_memmap)


# ---------------------------------------------------------------------------------------------- functions
def memmap(
    data: Any, prefix: str | Path | None = None, copy_existing: bool = False, *, atomic: bool = False, **kwargs: Any
) -> Any:
    """``data.memmap(prefix, ...)`` as a function (``atomic`` is accepted: saves are always atomic)."""
    return data.memmap(prefix, copy_existing, **kwargs)


def save(
    data: Any, prefix: str | Path | None = None, copy_existing: bool = False, *, atomic: bool = False, **kwargs: Any
) -> Any:
    """``data.save(prefix, ...)`` as a function (an alias of :func:`memmap`)."""
    return data.memmap(prefix, copy_existing, **kwargs)


def load_memmap(
    prefix: str | Path,
    device: Any = None,
    non_blocking: bool = False,
    *,
    out: Any = None,
    robust_key: bool | None = True,
    subpath: Any = None,
    mode: str | None = None,
    num_threads: int = 0,
    allow_pickle: bool | None = None,
    progress: bool | None = None,
) -> Any:
    """Load a saved folder; its metadata decides the type (TensorDict, lazy stack, ...).

    The keywords are :meth:`TensorDictBase.load_memmap`'s.
    """
    return TensorDict.load_memmap(
        prefix,
        device,
        non_blocking,
        out=out,
        robust_key=robust_key,
        subpath=subpath,
        mode=mode,
        num_threads=num_threads,
        allow_pickle=allow_pickle,
        progress=progress,
    )


load = load_memmap


def from_consolidated(filename: str | Path) -> Any:
    """Map a file written by ``consolidate(filename=...)`` back (as ``TensorDict.from_consolidated``).

    Examples:
        >>> import tempfile
        >>> import tensorbatch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), b={"c": torch.ones(3)}, batch_size=[3])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = td.consolidate(filename=f"{folder}/td.bin")
        ...     tensorbatch.from_consolidated(f"{folder}/td.bin")["b", "c"]
        tensor([1., 1., 1.])
    """
    return TensorDict.from_consolidated(filename)
