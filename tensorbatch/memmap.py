"""MemoryMappedTensor: a tensor whose storage is a file mapped into memory.

Reads and writes go to the page cache of the file, so several processes mapping the same file see
each other's writes. Pickling sends the file name and the view (offset, shape, strides), never the
data: the receiving process maps the same file. ``torch.load(weights_only=True)`` of such a pickle
maps the file privately instead (copy-on-write: a crafted checkpoint can read a file the user can
read, never write it; see ``_rebuild_file_private``). Indexing keeps the type (a view of the same
file); other operations return plain tensors.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.overrides import get_default_nowrap_functions

from . import _compat

__all__ = ["MemoryMappedTensor"]

_NO_WRAP = get_default_nowrap_functions()


def _nbytes(shape: torch.Size, dtype: torch.dtype) -> int:
    return shape.numel() * dtype.itemsize


def _map(filename: str, dtype: torch.dtype, numel: int, shared: bool = True) -> torch.Tensor:
    """A flat tensor over the first ``numel`` elements of ``filename``.

    ``shared``: writes reach the file; else the mapping is private (copy-on-write: the pages are read
    lazily as for a shared one, and a written page becomes a private copy, the file never changes).
    """
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    return torch.from_file(filename, shared=shared, size=numel, dtype=dtype)


_MODES = (None, "r", "r+")


def _shared_for(filename: str, mode: str | None) -> bool:
    """Whether ``mode`` maps ``filename`` shared (writes reach it): tensordict's rule for the three modes.

    ``"r"``: never (copy-on-write). ``"r+"``: always (PermissionError when the file cannot be written).
    None: when the process can write the file, else copy-on-write.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be 'r', 'r+' or None, got {mode!r}.")
    if mode == "r":
        return False
    writable = os.access(filename, os.W_OK)
    if mode == "r+" and not writable:
        raise PermissionError(f"Cannot open {filename} with mode='r+': the file is not writable.")
    return writable


def _create(filename: str, nbytes: int, existsok: bool) -> None:
    if os.path.islink(filename):  # the link's target lies outside the caller's choice (tensordict's wording)
        raise RuntimeError(f"Refusing to write memory-mapped tensor through symlink {filename}.")
    if not existsok and os.path.exists(filename):
        raise RuntimeError(f"the file {filename} already exists (pass existsok=True to overwrite it)")
    Path(filename).parent.mkdir(parents=True, exist_ok=True)
    with open(filename, "wb") as f:
        f.truncate(nbytes)


def _check_cpu(device: Any) -> None:
    """Memory-mapped tensors live on the CPU: refuse any other device (tensordict's error)."""
    if device is not None and torch.device(device).type != "cpu":
        raise RuntimeError(f"Only CPU tensors are supported: a MemoryMappedTensor cannot live on {device}.")


class MemoryMappedTensor(torch.Tensor):
    """A ``torch.Tensor`` backed by a memory-mapped file (or by shared memory when it has no file).

    Build one with :meth:`from_tensor`, :meth:`from_filename`, :meth:`empty`, :meth:`zeros`,
    :meth:`ones`, :meth:`full` or :meth:`from_storage`.

    Examples:
        >>> import tempfile, torch
        >>> from tensorbatch.memmap import MemoryMappedTensor
        >>> path = tempfile.mkdtemp() + "/x.memmap"
        >>> m = MemoryMappedTensor.from_tensor(torch.arange(4.0), filename=path)
        >>> m.filename == path, m[1:].tolist()
        (True, [1.0, 2.0, 3.0])
        >>> type(m + 1).__name__
        'Tensor'
    """

    _filename: str | None
    _parent_shape: torch.Size  # the shape of the tensor this one views (its own when it views it whole)
    _mode: str | None  # how the file was mapped: None, "r" (copy-on-write) or "r+" (from_filename's mode)

    @staticmethod
    def _wrap(
        tensor: torch.Tensor, filename: str | None, parent_shape: Any = None, mode: str | None = None
    ) -> MemoryMappedTensor:
        out = tensor.as_subclass(MemoryMappedTensor)
        out._filename = filename
        out._parent_shape = tensor.shape if parent_shape is None else torch.Size(parent_shape)
        out._mode = mode
        return out

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        # ``t._base``, ``t.grad``: as they are (a base wrapped anew has a base again: dynamo, reading the
        # chain of bases of an input, recursed without end). While dynamo traces or a functorch transform
        # (grad, vmap) runs, results are plain tensors: the storage comparison below cannot be traced, and a
        # transform's wrapped tensors have no storage to compare.
        if func in _NO_WRAP or _compat.dynamo_compiling() or _compat.transforms_active():
            return out
        source = args[0] if args and isinstance(args[0], MemoryMappedTensor) else None
        if source is None:
            return out
        if isinstance(out, torch.Tensor):
            return _keep_if_view(out, source)
        if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
            return type(out)(_keep_if_view(o, source) for o in out)  # split, unbind, chunk: views
        return out

    @property
    def filename(self) -> str:
        """The mapped file (RuntimeError for a shared-memory tensor without a file)."""
        name: str | None = getattr(self, "_filename", None)
        if name is None:
            raise RuntimeError("this MemoryMappedTensor has no file (it lives in shared memory)")
        return name

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_tensor(
        cls,
        input: torch.Tensor,
        *,
        filename: str | Path | None = None,
        existsok: bool = False,
        copy_existing: bool = False,
        copy_data: bool = True,
        shape: torch.Size | None = None,
    ) -> MemoryMappedTensor:
        """A memory-mapped copy of ``input`` (in ``filename``, or in shared memory without one).

        Args:
            input: the tensor to copy (must be on the CPU or movable there).
            filename: where to write; None keeps the data in shared memory.
            existsok: allow overwriting an existing file.
            copy_existing: when ``input`` is already a MemoryMappedTensor of another file, copy it anyway
                (otherwise that is refused, as silently duplicating a big file is rarely intended).
            copy_data: False allocates the file without copying the values.
            shape: the shape to allocate (defaults to ``input.shape``).
        """
        shape = torch.Size(input.shape if shape is None else shape)
        if isinstance(input, MemoryMappedTensor) and getattr(input, "_filename", None) is not None:
            if filename is not None and str(filename) == input._filename:
                return input
            if filename is not None and not copy_existing:
                raise RuntimeError(
                    f"the tensor is already mapped from {input._filename}; pass copy_existing=True to copy it "
                    f"to {filename}"
                )
        if filename is None:
            out = torch.empty(shape, dtype=input.dtype).share_memory_()  # type: ignore[no-untyped-call]
            if copy_data:
                out.copy_(input)
            return cls._wrap(out, None)
        name = str(filename)
        _create(name, _nbytes(shape, input.dtype), existsok)
        out = _map(name, input.dtype, shape.numel()).view(shape)
        if copy_data:
            with torch._C.DisableTorchFunctionSubclass():
                out.copy_(input)
        return cls._wrap(out, name)

    @classmethod
    def from_filename(
        cls, filename: str | Path, dtype: torch.dtype, shape: Any, index: Any = None, mode: str | None = None
    ) -> MemoryMappedTensor:
        """Map an existing file holding ``shape`` elements of ``dtype`` (checks the file size first).

        Args:
            filename: the file (raw data, no header).
            dtype: the dtype of the data.
            shape: the shape of the data.
            index: applied to the result, as ``tensor[index]``.
            mode: ``"r"`` maps the file copy-on-write: in-place writes change the tensor in memory only,
                never the file. ``"r+"`` maps it shared: in-place writes reach the file. None (the default,
                as tensordict's): shared when the process can write the file, else copy-on-write.

        Raises:
            RuntimeError: when the file is shorter or longer than ``shape`` and ``dtype`` need.
            ValueError: for a ``mode`` other than None, ``"r"`` and ``"r+"``.
            PermissionError: with ``mode="r+"`` when the file is not writable.

        Examples:
            >>> import tempfile, torch
            >>> from tensorbatch.memmap import MemoryMappedTensor
            >>> path = tempfile.mkdtemp() + "/x.memmap"
            >>> _ = MemoryMappedTensor.from_tensor(torch.arange(3), filename=path)
            >>> x = MemoryMappedTensor.from_filename(path, torch.int64, (3,), mode="r")
            >>> x[0] = 100  # copy-on-write: the file keeps 0
            >>> x.tolist(), MemoryMappedTensor.from_filename(path, torch.int64, (3,)).tolist()
            ([100, 1, 2], [0, 1, 2])
        """
        name = str(filename)
        shared = _shared_for(name, mode)
        shape = torch.Size(shape)
        expected = _nbytes(shape, dtype)
        actual = os.path.getsize(name)
        if actual != expected:
            raise RuntimeError(
                f"the file {name} holds {actual} bytes but shape {list(shape)} of {dtype} needs {expected}: "
                "it is truncated or does not belong to this tensor"
            )
        out = cls._wrap(_map(name, dtype, shape.numel(), shared).view(shape), name, mode=mode)
        return out if index is None else out[index]  # type: ignore[return-value]  # views keep the type

    @classmethod
    def _filled(cls, args: Any, kwargs: dict[str, Any], fill: Any) -> MemoryMappedTensor:
        shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
        if "shape" in kwargs:
            if args:
                raise TypeError(
                    f"give the shape as arguments or as shape=, not both (got {args} and shape={kwargs['shape']})"
                )
            shape = kwargs.pop("shape")
        dtype = kwargs.pop("dtype", None) or torch.get_default_dtype()
        _check_cpu(kwargs.pop("device", None))
        filename = kwargs.pop("filename", None)
        existsok = kwargs.pop("existsok", False)
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)}")
        proto = torch.empty(0, dtype=dtype)
        out = cls.from_tensor(proto, filename=filename, existsok=existsok, copy_data=False, shape=torch.Size(shape))
        if fill is not None:
            with torch._C.DisableTorchFunctionSubclass():
                out.fill_(fill)
        return out

    @classmethod
    def empty(cls, *args: Any, **kwargs: Any) -> MemoryMappedTensor:
        """An uninitialised tensor of the given shape (or ``shape=``).

        Keywords: ``dtype``, ``device`` (None or the CPU only), ``filename``, ``existsok``.
        """
        return cls._filled(args, kwargs, None)

    @classmethod
    def zeros(cls, *args: Any, **kwargs: Any) -> MemoryMappedTensor:
        """A tensor of zeros (a new file is already zero-filled)."""
        return cls._filled(args, kwargs, None if kwargs.get("filename") else 0)

    @classmethod
    def ones(cls, *args: Any, **kwargs: Any) -> MemoryMappedTensor:
        """A tensor of ones."""
        return cls._filled(args, kwargs, 1)

    @classmethod
    def full(cls, *args: Any, fill_value: Any = None, **kwargs: Any) -> MemoryMappedTensor:
        """A tensor filled with ``fill_value`` (``full(shape, value)`` or ``full(shape, fill_value=value)``)."""
        if fill_value is None:
            *args, fill_value = args  # type: ignore[assignment]
        return cls._filled(tuple(args), kwargs, fill_value)

    @classmethod
    def empty_like(cls, input: torch.Tensor, *, filename: str | Path | None = None) -> MemoryMappedTensor:
        """An uninitialised tensor of ``input``'s shape and dtype.

        Examples:
            >>> from tensorbatch.memmap import MemoryMappedTensor
            >>> MemoryMappedTensor.full_like(torch.zeros(2, dtype=torch.int32), 7).tolist()
            [7, 7]
        """
        return cls._filled((input.shape,), {"dtype": input.dtype, "filename": filename}, None)

    @classmethod
    def zeros_like(cls, input: torch.Tensor, *, filename: str | Path | None = None) -> MemoryMappedTensor:
        """A tensor of zeros of ``input``'s shape and dtype."""
        return cls.zeros(input.shape, dtype=input.dtype, filename=filename)

    @classmethod
    def ones_like(cls, input: torch.Tensor, *, filename: str | Path | None = None) -> MemoryMappedTensor:
        """A tensor of ones of ``input``'s shape and dtype."""
        return cls.ones(input.shape, dtype=input.dtype, filename=filename)

    @classmethod
    def full_like(
        cls, input: torch.Tensor, fill_value: Any, *, filename: str | Path | None = None
    ) -> MemoryMappedTensor:
        """A tensor of ``input``'s shape and dtype filled with ``fill_value``."""
        return cls.full(input.shape, fill_value, dtype=input.dtype, filename=filename)

    @classmethod
    def from_storage(
        cls,
        storage: Any,
        *,
        shape: torch.Size | None = None,
        dtype: torch.dtype | None = None,
        device: Any = None,
        index: Any = None,
        filename: str | Path | None = None,
        handler: Any = None,
    ) -> MemoryMappedTensor:
        """A tensor over an existing (file-backed or shared) storage."""
        _check_cpu(device)
        dtype = dtype or torch.uint8
        tensor = torch.empty(0, dtype=dtype).set_(
            storage.untyped_storage() if hasattr(storage, "untyped_storage") else storage
        )
        if shape is not None:
            tensor = tensor.view(shape)
        name = str(filename) if filename is not None else getattr(tensor.untyped_storage(), "filename", None)
        out = cls._wrap(tensor, name)
        return out if index is None else out[index]  # type: ignore[return-value]  # views keep the type

    # ------------------------------------------------------------------ deprecated in tensordict 0.15
    @classmethod
    def from_handler(cls, handler: Any, dtype: torch.dtype, shape: Any, index: Any = None) -> MemoryMappedTensor:
        """Deprecated: a tensor over the memory of a shared-memory handler (an object with a ``buffer``).

        tensordict 0.14 and earlier pickled shared-memory tensors through this method; it has no
        replacement. ``shape`` may not be a tensor of nested shapes here.

        Examples:
            >>> import types, warnings, torch
            >>> from tensorbatch.memmap import MemoryMappedTensor
            >>> handler = types.SimpleNamespace(buffer=bytearray(torch.arange(6.0).numpy().tobytes()))
            >>> with warnings.catch_warnings(record=True):
            ...     MemoryMappedTensor.from_handler(handler, torch.float32, (2, 3), index=1).tolist()
            [3.0, 4.0, 5.0]
        """
        _deprecated("from_handler()")
        if isinstance(shape, torch.Tensor):
            raise NotImplementedError(
                "MemoryMappedTensor.from_handler: nested shapes (a tensor of shapes) are not "
                "supported; this deprecated method has no replacement"
            )
        shape = torch.Size(shape)
        buffer = memoryview(handler.buffer)
        if buffer.readonly:  # a tensor over it would write into immutable memory: copy-on-write, by hand
            buffer = memoryview(bytearray(buffer))
        flat = (
            torch.frombuffer(buffer, dtype=dtype, count=shape.numel()) if shape.numel() else torch.empty(0, dtype=dtype)
        )
        out = cls._wrap(flat.view(shape), None)
        return out if index is None else out[index]  # type: ignore[return-value]  # views keep the type

    @property
    def parent_shape(self) -> torch.Size:
        """Deprecated: the shape of the tensor this one views (internal to pickling in tensordict)."""
        _deprecated("parent_shape")
        return getattr(self, "_parent_shape", self.shape)

    # ------------------------------------------------------------------ pickling: the file, not the data
    def __reduce_ex__(self, protocol: Any) -> Any:
        name = getattr(self, "_filename", None)
        parent = tuple(getattr(self, "_parent_shape", self.shape))
        if name is None:
            return (_rebuild_shared, (self.as_subclass(torch.Tensor), parent))
        file_numel = os.path.getsize(name) // self.element_size()
        # the receiver maps the file as this tensor was mapped: a copy-on-write tensor stays one (and, as with
        # tensordict, the receiver sees the file's data, not this process's private writes)
        mode = getattr(self, "_mode", None)
        return (
            _rebuild_file,
            (name, self.dtype, file_numel, self.storage_offset(), tuple(self.shape), self.stride(), parent, mode),
        )


def _deprecated(name: str) -> None:
    warnings.warn(
        f"MemoryMappedTensor.{name} is deprecated (tensordict 0.15) and will be removed in 0.17; it has no replacement",
        DeprecationWarning,
        stacklevel=3,
    )


# (a frame of its own under dynamo: wrong attribute reads, see _compat.skip_dynamo_frame)
_compat.skip_dynamo_frame(MemoryMappedTensor.__torch_function__)


def _keep_if_view(out: torch.Tensor, source: MemoryMappedTensor) -> torch.Tensor:
    """Views of the mapped file stay MemoryMappedTensors (they pickle as the file); copies become plain."""
    if out.untyped_storage().data_ptr() == source.untyped_storage().data_ptr():
        return MemoryMappedTensor._wrap(
            out.as_subclass(torch.Tensor),
            getattr(source, "_filename", None),
            getattr(source, "_parent_shape", None),
            getattr(source, "_mode", None),
        )
    return out.as_subclass(torch.Tensor) if isinstance(out, MemoryMappedTensor) else out


def _checked_file(filename: Any, dtype: Any, file_numel: Any) -> None:
    """TypeError/ValueError for arguments of a file rebuild that cannot come from ``__reduce_ex__``."""
    if type(filename) is not str or not isinstance(dtype, torch.dtype) or type(file_numel) is not int:
        raise TypeError(
            f"unpickling a MemoryMappedTensor: expected a file name, a dtype and an element count, got "
            f"{type(filename).__name__}, {type(dtype).__name__} and {type(file_numel).__name__}"
        )
    if not file_numel:
        return
    facts = os.stat(filename)  # FileNotFoundError names the file
    if not stat.S_ISREG(facts.st_mode):  # a FIFO blocks, a device maps what it wants
        raise ValueError(f"unpickling a MemoryMappedTensor: {filename!r} is not a regular file")
    if facts.st_size < file_numel * dtype.itemsize:
        raise RuntimeError(
            f"unpickling a MemoryMappedTensor: {filename!r} holds {facts.st_size} bytes, fewer than "
            f"the {file_numel} {dtype} elements it had when pickled"
        )


def _rebuild_file(
    filename: str,
    dtype: torch.dtype,
    file_numel: int,
    offset: int,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    parent_shape: tuple[int, ...] | None = None,
    mode: str | None = None,
) -> MemoryMappedTensor:
    """Unpickling: map the file with the sender's mode (None: shared when writable, as ``from_filename``).

    A weights-only ``torch.load`` calls :func:`_rebuild_file_private` in its place.
    """
    _checked_file(filename, dtype, file_numel)
    flat = _map(filename, dtype, file_numel, _shared_for(filename, mode))
    return MemoryMappedTensor._wrap(flat.as_strided(shape, stride, offset), filename, parent_shape, mode)


def _rebuild_file_private(
    filename: Any,
    dtype: Any,
    file_numel: Any,
    offset: Any,
    shape: Any,
    stride: Any,
    parent_shape: Any = None,
    mode: Any = None,
) -> MemoryMappedTensor:
    """What a pickled file-backed MemoryMappedTensor gives under ``torch.load(weights_only=True)``.

    Pickles (and ``torch.save``) of a MemoryMappedTensor with a file hold the file's name, not its data.
    A crafted file can name any path: loading it then maps a file the user can read, as reading it with
    ``torch.from_file`` would (tensordict maps files named by its pickles too). It can do no more: the file
    must be a regular file at least as large as the pickle says (no FIFO that blocks, no device), and it
    is mapped privately (copy-on-write), so writes to the loaded tensor never reach the file, which may
    be read-only. The result has no ``filename``: pickling it again sends its data, not the path. A
    trusted ``torch.load(weights_only=False)`` maps the file shared instead (:func:`_rebuild_file`).

    Raises:
        TypeError: for arguments that are no file name, dtype and element count.
        FileNotFoundError: when the file is missing.
        ValueError: when it is no regular file.
        RuntimeError: when it is shorter than pickled, or the view lies outside it.
    """
    _checked_file(filename, dtype, file_numel)
    if not file_numel:
        flat = torch.empty(0, dtype=dtype)
    else:
        flat = torch.from_file(filename, shared=False, size=file_numel, dtype=dtype)
    return MemoryMappedTensor._wrap(flat.as_strided(shape, stride, offset), None, parent_shape)


def _rebuild_shared(tensor: torch.Tensor, parent_shape: tuple[int, ...] | None = None) -> MemoryMappedTensor:
    """Unpickle a MemoryMappedTensor without a file (its data came with the pickle).

    Raises:
        TypeError: for a ``tensor`` that is no tensor (crafted arguments).
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"unpickling a MemoryMappedTensor: expected a tensor, got a {type(tensor).__name__}")
    return MemoryMappedTensor._wrap(tensor, None, parent_shape)


_compat.allow_in_weights_only_load(_rebuild_shared, (_rebuild_file_private, f"{__name__}._rebuild_file"))
