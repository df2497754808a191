"""Memory-mapped archives: a saved TensorDict folder as one zip file (tensordict's ``.tdz`` format).

The entries of the archive are the files of the folder (README.md of this package) under their relative
paths, each level's ``meta.json`` first, so ``unzip`` gives the folder back and either library opens the
other's archives. Tensor payloads are stored uncompressed at 64-byte aligned offsets: loading maps the whole
file once and each leaf is a view into that mapping (no copy; pages are read when first touched).
Compressed payloads (``compression="deflate"``...) are read into memory instead.

Writes are atomic: the archive is written to a temporary sibling, then renamed over the target.
"""

from __future__ import annotations

import io
import shutil
import struct
import tempfile
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import _progress
from . import memmap as _memmap
from ._shared import atomic_target

SUFFIX = ".tdz"
"""The file suffix that makes ``td.memmap(path)`` / ``save`` write an archive instead of a folder."""

_ALIGN = 64  # a multiple of every dtype's item size, so that every payload can be viewed as its dtype
_PAD_ID = 0xD935  # the zip extra-field id of alignment padding (the one Android's zipalign writes)
_LOCAL = struct.Struct("<4s5H3I2H")  # a zip local file header, before its name and extra field
_LOCAL_SIG = b"PK\x03\x04"
_ZIP64_EXTRA = 20  # the zip64 block zipfile appends to the local header of an entry near 2 GiB or more
_CHUNK = 16 << 20  # bytes copied at a time: bounded memory whatever the leaf size
_COMPRESSION = {
    None: zipfile.ZIP_STORED,
    "stored": zipfile.ZIP_STORED,
    "deflate": zipfile.ZIP_DEFLATED,
    "deflated": zipfile.ZIP_DEFLATED,
    "bzip2": zipfile.ZIP_BZIP2,
    "lzma": zipfile.ZIP_LZMA,
}


def is_memmap_archive(path: str | Path) -> bool:
    """Whether ``path`` is a memory-mapped TensorDict archive: a zip file with a top-level ``meta.json``.

    A folder, a missing path or any other file gives ``False``.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from tensorbatch import TensorDict, is_memmap_archive
        >>> tmp = Path(tempfile.mkdtemp())
        >>> _ = TensorDict(a=torch.zeros(3)).memmap(tmp / "td.tdz")
        >>> _ = TensorDict(a=torch.zeros(3)).memmap(tmp / "td")
        >>> is_memmap_archive(tmp / "td.tdz"), is_memmap_archive(tmp / "td")
        (True, False)
    """
    path = Path(path)
    if not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            return _memmap.META in zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def pack_memmap(
    prefix: str | Path,
    archive_path: str | Path,
    *,
    compression: str | int | None = None,
    compresslevel: int | None = None,
    progress: bool | None = None,
) -> Path:
    """Pack a saved TensorDict folder (``td.memmap(prefix)``) into one archive file.

    ``TensorDict.load_memmap(archive_path)`` maps it back without a copy; :func:`unpack_memmap` (or
    ``unzip``) gives the folder back. An existing archive is replaced atomically.

    Args:
        prefix: the folder, written by ``memmap``/``save`` (of either library).
        archive_path: the archive to write, outside ``prefix``.
        compression: ``None``/``"stored"`` (the default: leaves are mapped when loaded), ``"deflate"``,
            ``"bzip2"``, ``"lzma"`` or a :mod:`zipfile` constant (smaller; leaves are read into memory).
        compresslevel: the compression level, passed to :mod:`zipfile`.
        progress: show a tqdm bar counting the bytes packed (None: the switch :class:`~tensorbatch.set_progress`).

    Returns:
        ``archive_path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: when ``prefix`` has no ``meta.json``, when ``archive_path`` lies inside ``prefix``,
            or for an unknown ``compression``.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from tensorbatch import TensorDict, pack_memmap
        >>> tmp = Path(tempfile.mkdtemp())
        >>> td = TensorDict(a=torch.arange(3.0), b=TensorDict(c=torch.ones(3, 2)), batch_size=[3])
        >>> _ = td.memmap(tmp / "saved")
        >>> archive = pack_memmap(tmp / "saved", tmp / "saved.tdz")
        >>> TensorDict.load_memmap(archive)["b", "c"].shape
        torch.Size([3, 2])
    """
    prefix, archive_path = Path(prefix), Path(archive_path)
    if not (prefix / _memmap.META).is_file():
        raise ValueError(f"{prefix} is not a saved TensorDict folder (it has no {_memmap.META})")
    if archive_path.resolve().is_relative_to(prefix.resolve()):
        raise ValueError(f"the archive {archive_path} must lie outside the folder {prefix} it packs")
    _write(prefix, archive_path, _compression(compression), compresslevel, progress=progress, desc="pack_memmap")
    return archive_path


def unpack_memmap(archive_path: str | Path, prefix: str | Path) -> Path:
    """Extract an archive into the folder ``prefix`` (the inverse of :func:`pack_memmap`).

    The folder is written aside and renamed into place, like a save; an existing ``prefix`` must be an
    empty folder or a saved TensorDict folder, whose save is replaced (files no save wrote are kept, as
    by a save). Every entry's declared size is checked before anything is written, then its checksum.

    Returns:
        ``prefix`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: when ``archive_path`` is not an archive, or ``prefix`` is a file or a folder that
            holds something else than a saved TensorDict.
        RuntimeError: for a corrupted entry (its checksum, its header), naming the archive and the entry.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from tensorbatch import TensorDict, unpack_memmap
        >>> tmp = Path(tempfile.mkdtemp())
        >>> _ = TensorDict(a=torch.zeros(3)).memmap(tmp / "td.tdz")
        >>> folder = unpack_memmap(tmp / "td.tdz", tmp / "td")
        >>> sorted(p.name for p in folder.iterdir())
        ['a.memmap', 'meta.json']
    """
    archive_path, prefix = Path(archive_path), Path(prefix).absolute()
    zf = _open_zip(archive_path)
    if prefix.exists() and not (prefix.is_dir() and (not any(prefix.iterdir()) or (prefix / _memmap.META).exists())):
        raise ValueError(f"cannot unpack into {prefix}: it exists and is not an empty or saved TensorDict folder")
    tmp = prefix.parent / f".{prefix.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with zf:
            for info in zf.infolist():
                _check_declared_size(archive_path, info)  # (before any file is written)
            for info in zf.infolist():
                try:
                    zf.extract(info, tmp)  # zipfile keeps every entry inside tmp ("..", absolute names)
                except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                    raise _corrupt(archive_path, info.filename, err) from err
        _memmap._swap_into_place(tmp, prefix)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return prefix


def refresh_archive_checksums(archive_path: str | Path) -> Path:
    """Recompute the CRC-32 checksums of an archive's uncompressed entries after in-place writes.

    Leaves loaded with ``load_memmap(path, mode="r+")`` (or made by ``memmap_like`` into a ``.tdz``) write
    into the archive without updating the checksums zip files keep; ``load_memmap`` does not check them,
    but :func:`unpack_memmap` and zip tools do. The checksum fields are patched in place (a rewritten
    file would detach the live ``r+`` mappings).

    Returns:
        ``archive_path`` as a :class:`~pathlib.Path`.

    Examples:
        >>> import tempfile, torch, zipfile
        >>> from pathlib import Path
        >>> from tensorbatch import TensorDict, refresh_archive_checksums
        >>> path = Path(tempfile.mkdtemp()) / "td.tdz"
        >>> _ = TensorDict(a=torch.zeros(3)).memmap(path)
        >>> _ = TensorDict.load_memmap(path, mode="r+")["a"].add_(1)
        >>> zipfile.ZipFile(path).testzip()  # the first entry whose checksum is wrong
        'a.memmap'
        >>> print(zipfile.ZipFile(refresh_archive_checksums(path)).testzip())
        None
    """
    archive_path = Path(archive_path)
    with _open_zip(archive_path) as zf:
        infos, central = zf.infolist(), zf.start_dir
    with open(archive_path, "r+b") as f:
        changed = set()
        for info in infos:
            if info.is_dir() or info.compress_type != zipfile.ZIP_STORED:
                continue  # a compressed payload cannot have been written in place
            start = _payload_start(f, info, archive_path)
            f.seek(start)
            crc, left = 0, info.file_size
            while left:
                chunk = f.read(min(left, _CHUNK))
                if not chunk:
                    raise _corrupt(archive_path, info.filename, "its payload is truncated")
                crc, left = zlib.crc32(chunk, crc), left - len(chunk)
            if crc == info.CRC:
                continue
            changed.add(info.filename)
            info.CRC = crc
            if info.flag_bits & 0x08:  # the CRC is in a data descriptor after the payload (signature optional)
                f.seek(start + info.compress_size)
                f.seek(start + info.compress_size + (4 if f.read(4) == b"PK\x07\x08" else 0))
            else:
                f.seek(info.header_offset + 14)
            f.write(struct.pack("<I", crc))
        pos = central  # central directory records come in infolist's order
        for info in infos:
            f.seek(pos)
            record = f.read(46)
            if record[:4] != b"PK\x01\x02":
                raise _corrupt(archive_path, info.filename, "its central directory record is corrupted")
            if info.filename in changed:
                f.seek(pos + 16)
                f.write(struct.pack("<I", info.CRC))
            pos += 46 + sum(struct.unpack_from("<3H", record, 28))
    return archive_path


# ---------------------------------------------------------------------------------------------- write
def wanted(prefix: str | Path | None, archive: bool | None, compression: Any) -> bool:
    """Whether a save to ``prefix`` writes an archive: ``archive=True``, or by default a ``.tdz`` suffix."""
    if archive is None:
        archive = prefix is not None and Path(prefix).suffix == SUFFIX
    if archive and prefix is None:
        raise ValueError("a path is required to write a memmap archive")
    if compression is not None and not archive:
        raise ValueError("compression applies to archives only: pass archive=True or a '.tdz' path")
    return bool(archive)


def save(
    td: Any,
    path: str | Path | None,
    *,
    existsok: bool = True,
    allow_pickle: bool = False,
    like: bool = False,
    compression: Any = None,
    progress: bool | None = None,
) -> Path:
    """Write ``td`` as an archive at ``path``: one pass over the data, straight into the archive.

    The folder layout is staged with empty (sparse) leaf files, and each leaf's bytes are streamed from
    its tensor into the archive. ``like=True`` writes zero-filled leaves (``memmap_like``). ``progress``: a
    bar counting the bytes of the archive's entries as they are written (``_progress``).
    """
    if path is None:
        raise ValueError("a path is required to write a memmap archive")
    path = Path(path).absolute()
    if path.is_dir():
        raise ValueError(f"cannot write an archive at {path}: it is a folder")
    if path.exists() and not existsok:
        raise RuntimeError(f"the file {path} already exists (pass existsok=True to replace it)")
    method = _compression(compression)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        sources = _memmap.stage(td, staging / "td", allow_pickle=allow_pickle, like=like)
        _write(staging / "td", path, method, None, sources, progress, "memmap_like" if like else "memmap")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def _compression(compression: Any) -> int:
    if isinstance(compression, int) and compression in _COMPRESSION.values():
        return compression
    method = _COMPRESSION.get(compression.lower() if isinstance(compression, str) else compression)
    if method is None:
        raise ValueError(
            f"unknown compression {compression!r}: expected one of "
            f"{sorted(k for k in _COMPRESSION if k)} or a zipfile constant"
        )
    return method


def _folder_files(folder: Path) -> list[Path]:
    """The files of a saved folder: each level's meta.json, its other files, then its sub-folders (sorted)."""
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    files = sorted((p for p in entries if p.is_file()), key=lambda p: p.name != _memmap.META)
    for sub in entries:
        if sub.is_dir():
            files += _folder_files(sub)
    return files


def _write(
    folder: Path,
    target: Path,
    method: int,
    level: int | None,
    sources: dict[Path, torch.Tensor] | None = None,
    progress: bool | None = False,
    desc: str = "",
) -> None:
    """Write the files of ``folder`` as an archive at ``target`` (a ``.memmap`` in ``sources`` from its tensor)."""
    files = _folder_files(folder)  # listed first: the archive may be written inside a symlinked folder
    target.parent.mkdir(parents=True, exist_ok=True)
    bar = (
        _progress.bar(progress, desc, sum(f.stat().st_size for f in files))
        if _progress.wanted(progress)
        else _progress.NO_BAR
    )
    with bar, atomic_target(target) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
        for file in files:
            name = file.relative_to(folder).as_posix()
            leaf = file.suffix == ".memmap"
            size = file.stat().st_size
            source = (sources or {}).get(file)
            chunks: Iterator[Any]
            if source is None:
                chunks = _file_chunks(file)
            else:
                chunks = _tensor_chunks(source)
                if source.numel() * source.element_size() != size:
                    raise RuntimeError(f"internal error: the tensor of {name} does not match its staged file")
            _add(zf, name, chunks, size, method if leaf else zipfile.ZIP_STORED, level, bar)


def _add(
    zf: zipfile.ZipFile,
    name: str,
    chunks: Iterator[Any],
    size: int,
    method: int,
    level: int | None,
    bar: Any = _progress.NO_BAR,
) -> None:
    """One entry; an uncompressed one's payload starts at a multiple of ``_ALIGN`` in the file."""
    info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
    info.compress_type, info.file_size, info.external_attr = method, size, 0o644 << 16
    if level is not None:
        setattr(info, "compress_level" if hasattr(zipfile.ZipInfo, "compress_level") else "_compresslevel", level)
    if method == zipfile.ZIP_STORED:
        # The payload follows the local header, the name and the extra field (then zipfile's zip64 block for
        # a large entry, zipfile's own test): pad the extra field up to the alignment.
        large = size * 1.05 > zipfile.ZIP64_LIMIT
        start = zf.start_dir + _LOCAL.size + len(info.filename.encode("utf-8")) + 6 + (_ZIP64_EXTRA if large else 0)
        pad = -start % _ALIGN
        info.extra = struct.pack("<HHH", _PAD_ID, 2 + pad, _ALIGN) + bytes(pad)
    with zf.open(info, "w") as out:
        if method == zipfile.ZIP_STORED and zf.fp.tell() % _ALIGN:  # type: ignore[union-attr]
            raise RuntimeError(f"internal error: the payload of {name} is not aligned (zipfile's header changed?)")
        for chunk in chunks:
            out.write(chunk)
            bar.update(len(chunk))


def _file_chunks(file: Path) -> Iterator[bytes]:
    with open(file, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _tensor_chunks(tensor: torch.Tensor) -> Iterator[memoryview]:
    data = tensor.detach().as_subclass(torch.Tensor).resolve_conj().resolve_neg().cpu().contiguous()
    view = data.reshape(-1).view(torch.uint8).numpy().data  # a memoryview: no copy
    for i in range(0, len(view), _CHUNK):
        yield view[i : i + _CHUNK]


# ---------------------------------------------------------------------------------------------- read
def _open_zip(path: Path) -> zipfile.ZipFile:
    """The zip file at ``path``; ValueError naming it when it is not an archive (or is truncated)."""
    if not path.is_file():
        raise ValueError(f"{path} is not a memory-mapped TensorDict archive (no such file)")
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path} is not a memory-mapped TensorDict archive: {err} (truncated or corrupted?)") from None
    if _memmap.META not in zf.namelist():
        zf.close()
        raise ValueError(f"{path} is not a memory-mapped TensorDict archive: it has no top-level {_memmap.META}")
    return zf


def _corrupt(path: Path, entry: str, why: Any) -> RuntimeError:
    return RuntimeError(f"{path}: the entry {entry!r} is corrupted ({why})")


def _payload_start(f: Any, info: zipfile.ZipInfo, path: Path) -> int:
    """Where ``info``'s payload starts: after its local header, whose name and extra field lengths vary."""
    f.seek(info.header_offset)
    header = f.read(_LOCAL.size)
    if len(header) != _LOCAL.size or header[:4] != _LOCAL_SIG:
        raise _corrupt(path, info.filename, "its local header is missing or damaged")
    name_len, extra_len = struct.unpack_from("<2H", header, 26)
    return int(info.header_offset + _LOCAL.size + name_len + extra_len)


_DEFLATE_RATIO = 1032  # deflate cannot expand a byte of payload into more (a 258-byte match in 2 bits)


def _check_declared_size(path: Path, info: zipfile.ZipInfo) -> None:
    """Refuse an entry whose declared size its payload cannot hold, before anything is allocated for it.

    An uncompressed entry holds exactly its payload; a deflated one at most ``_DEFLATE_RATIO`` times it.
    (bzip2 and lzma have no such bound: their entries are read as the data arrives, see Archive.inflate.)
    """
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise _corrupt(
            path,
            info.filename,
            f"it declares {info.file_size} bytes but its uncompressed payload holds {info.compress_size}",
        )
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > info.compress_size * _DEFLATE_RATIO + 1024:
        raise _corrupt(
            path,
            info.filename,
            f"it declares {info.file_size} bytes but its {info.compress_size} "
            "deflated bytes cannot hold more than "
            f"{info.compress_size * _DEFLATE_RATIO + 1024}",
        )


class Archive:
    """An open archive: where each entry's payload lies, and one mapping of the whole file for the leaves.

    The mapping is private (copy-on-write: writes to a leaf never reach the file, whose checksums stay
    valid) unless ``writable`` (``mode="r+"``): then writes reach the file, see refresh_archive_checksums.
    """

    def __init__(self, path: Path, writable: bool = False) -> None:
        self.path, self.writable = path, writable
        self.zip = _open_zip(path)
        self.size = path.stat().st_size
        self.entries: dict[str, tuple[zipfile.ZipInfo, int]] = {}
        self.children: dict[str, set[str]] = {"": set()}  # folder -> the names in it ("" is the root)
        self._mapping: torch.Tensor | None = None
        with open(path, "rb") as f:
            for info in self.zip.infolist():
                name = info.filename.rstrip("/")
                parts = name.split("/")
                for i in range(len(parts)):
                    self.children.setdefault("/".join(parts[:i]), set()).add(parts[i])
                if info.is_dir():
                    self.children.setdefault(name, set())
                    continue
                if info.flag_bits & 0x01:
                    raise _corrupt(path, name, "it is encrypted")
                start = _payload_start(f, info, path)
                if start + info.compress_size > self.size:
                    raise _corrupt(path, name, "its payload ends past the end of the file: truncated")
                _check_declared_size(path, info)
                self.entries[name] = (info, start)

    def read(self, name: str) -> bytes:
        """The bytes of an entry, checksum checked (its declared size was checked when the archive opened)."""
        try:
            return self.zip.read(name)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as err:
            raise _corrupt(self.path, name, err) from err

    def inflate(self, name: str, nbytes: int) -> torch.Tensor:
        """A compressed leaf's ``nbytes`` bytes, streamed from the archive, checksum checked.

        The buffer grows as the data is decompressed (a ``bytearray``: no copy at the end), so memory follows
        the data the entry really holds, never only the size it declares.
        """
        info, _ = self.entries[name]
        grown = bytearray()
        try:
            with self.zip.open(info) as f:
                while chunk := f.read(min(_CHUNK, nbytes - len(grown) + 1)):
                    if len(grown) + len(chunk) > nbytes:
                        raise _corrupt(self.path, name, f"it holds more than the {nbytes} bytes it declares")
                    grown += chunk
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as err:
            raise _corrupt(self.path, name, err) from err
        if len(grown) != nbytes:
            raise _corrupt(self.path, name, f"it holds {len(grown)} bytes, not the {nbytes} it declares")
        return torch.frombuffer(grown, dtype=torch.uint8) if grown else torch.empty(0, dtype=torch.uint8)

    def tensor(self, name: str, dtype: torch.dtype, shape: torch.Size) -> torch.Tensor:
        """The leaf in entry ``name``: a view of the mapping (a copy when compressed or misaligned)."""
        where = f"{self.path}::{name}"
        if name not in self.entries:
            raise FileNotFoundError(where)
        info, start = self.entries[name]
        nbytes = shape.numel() * dtype.itemsize
        if info.file_size != nbytes:
            raise RuntimeError(
                f"{where} holds {info.file_size} bytes but shape {list(shape)} of {dtype} needs "
                f"{nbytes}: it is truncated or does not belong to this tensor"
            )
        copied = info.compress_type != zipfile.ZIP_STORED or start % dtype.itemsize  # (foreign, unaligned zips)
        if copied and self.writable:
            raise RuntimeError(
                f"cannot open {where} with mode='r+': the entry is compressed or unaligned, so "
                "writes could not reach the file (re-save the archive uncompressed)"
            )
        if info.compress_type != zipfile.ZIP_STORED:
            flat = self.inflate(name, nbytes)
        else:
            if self._mapping is None:
                self._mapping = torch.from_file(str(self.path), shared=self.writable, size=self.size, dtype=torch.uint8)
            flat = self._mapping[start : start + nbytes]
            flat = flat.clone() if copied else flat
        return flat.view(dtype).view(shape)


class ArchivePath:
    """A file or folder inside an archive, with the few ``Path`` methods the folder reader calls."""

    __slots__ = ("archive", "at")

    def __init__(self, archive: Archive, at: str = "") -> None:
        self.archive, self.at = archive, at

    def __truediv__(self, name: str) -> ArchivePath:
        return ArchivePath(self.archive, f"{self.at}/{name}" if self.at else name)

    @property
    def name(self) -> str:
        return self.at.rpartition("/")[2]

    @property
    def parent(self) -> ArchivePath:
        return ArchivePath(self.archive, self.at.rpartition("/")[0])

    def with_name(self, name: str) -> ArchivePath:
        return self.parent / name

    def exists(self) -> bool:
        return self.at in self.archive.entries or self.at in self.archive.children

    def is_dir(self) -> bool:
        return self.at in self.archive.children

    def iterdir(self) -> Iterator[ArchivePath]:
        return (self / name for name in sorted(self.archive.children.get(self.at, ())))

    def read_text(self) -> str:
        if self.at not in self.archive.entries:
            raise FileNotFoundError(str(self))
        return self.archive.read(self.at).decode("utf-8")

    def open(self, mode: str = "rb") -> io.BytesIO:
        if mode != "rb":
            raise ValueError(f"{self} can only be read")
        return io.BytesIO(self.archive.read(self.at))

    def tensor(self, dtype: torch.dtype, shape: torch.Size) -> torch.Tensor:
        return self.archive.tensor(self.at, dtype, shape)

    def __str__(self) -> str:
        return f"{self.archive.path}::{self.at}"


def load(
    path: str | Path,
    dense_cls: Any,
    device: Any = None,
    *,
    allow_pickle: bool = False,
    robust_key: bool = True,
    writable: bool = False,
) -> Any:
    """Read the archive at ``path`` with the folder reader (memmap._Reader): its entries stand for the files."""
    reader = _memmap._Reader(dense_cls, device, allow_pickle, robust_key)
    root: Any = ArchivePath(Archive(Path(path).absolute(), writable))  # stands for the folder's Path
    return reader.node(root)
