"""``append_memmap``: grow a saved TensorDict folder by rows, along its first batch dimension.

Everything is checked before the first byte is written. Then each leaf file grows by the new rows' bytes
and each ``meta.json`` is rewritten: all the new ones are written aside first, then renamed over the old
ones (the top one first). A failure puts the old files and sizes back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from .._errors import fmt_path
from .._nontensor import NonTensorData, is_non_tensor
from .._ops.traverse import is_td, stacked_members, unwrapped
from .._td import TensorDict
from . import memmap as _memmap
from .archive import _tensor_chunks


def append_memmap(prefix: str | Path, rows: Any, *, allow_pickle: bool | None = None) -> None:
    """Append ``rows`` to the TensorDict saved in the folder ``prefix``, along the first batch dimension.

    ``rows`` must have the saved keys, dtypes and feature shapes, and a batch size that differs from the
    saved one in its first dimension only. A non-tensor leaf stays as saved: ``rows`` must hold the same
    value there. A saved lazy stack, non-tensor stack or nested tensor cannot grow. Readers that mapped the
    folder before keep seeing the old rows; :func:`~tensorbatch.load_memmap` afterwards sees them all.
    Use one writer at a time, and don't load the folder while appending.

    Args:
        prefix: the folder written by ``memmap``/``save`` (an archive cannot grow: unpack it first).
        rows: a TensorDict (or TensorClass) of the rows to append.
        allow_pickle: whether the saved folder's pickled non-tensor values may be unpickled to compare them.

    Raises:
        ValueError: when ``prefix`` is not a folder, or ``rows`` does not fit, naming the key.
        TypeError: when ``rows`` is not a TensorDict or TensorClass.

    Examples:
        >>> import tempfile, torch
        >>> import tensorbatch
        >>> from tensorbatch import TensorDict
        >>> folder = tempfile.mkdtemp()
        >>> _ = TensorDict(a=torch.zeros(3, 2), batch_size=[3]).memmap(folder)
        >>> tensorbatch.append_memmap(folder, TensorDict(a=torch.ones(2, 2), batch_size=[2]))
        >>> tensorbatch.load_memmap(folder)["a"].sum(-1).tolist()
        [0.0, 0.0, 0.0, 2.0, 2.0]
    """
    from ..tensorclass import is_tensorclass

    prefix = Path(prefix).absolute()
    if not prefix.is_dir():
        raise ValueError(
            f"append_memmap appends to a saved folder and {prefix} is not one "
            "(an archive cannot grow: unpack it with unpack_memmap first)"
        )
    if is_tensorclass(rows):
        rows = rows._tensordict  # saved as its TensorDict
    if not is_td(rows):
        raise TypeError(f"rows must be a TensorDict or a TensorClass, got {type(rows).__name__}")
    saved = unwrapped(TensorDict.load_memmap(prefix, allow_pickle=allow_pickle))
    if not saved.batch_dims or not rows.batch_dims:
        raise ValueError(
            f"append_memmap appends along the first batch dimension, which the saved TensorDict "
            f"(batch size {list(saved.batch_size)}) and the rows ({list(rows.batch_size)}) need"
        )
    leaves: list[tuple[Path, int, torch.Tensor]] = []
    metas: list[Path] = []
    _check(saved, rows, (), _data_folder(prefix), leaves, metas)
    total = saved.batch_size[0] + rows.batch_size[0]
    del saved
    _grow(leaves, metas, total)


def _check(
    saved: Any,
    rows: Any,
    path: tuple[str, ...],
    folder: Path,
    leaves: list[tuple[Path, int, torch.Tensor]],
    metas: list[Path],
) -> None:
    """Check that ``rows`` fit the saved node ``saved``; collect the leaf files and meta.json files to change."""
    where = f"the entry {fmt_path(path)}" if path else "the saved TensorDict"
    if stacked_members(saved) is not None:
        raise ValueError(f"cannot append to {where}: a lazy stack cannot grow")
    if not is_td(rows) or is_non_tensor(rows):
        raise ValueError(f"cannot append a {type(rows).__name__} to {where}, a TensorDict")
    if rows.batch_size[1:] != saved.batch_size[1:]:
        raise ValueError(
            f"cannot append rows of batch size {list(rows.batch_size)} to {where}, of batch size "
            f"{list(saved.batch_size)}: they differ beyond the first dimension"
        )
    if set(saved.keys()) != set(rows.keys()):
        raise ValueError(
            f"cannot append rows with the keys {sorted(rows.keys())} to {where}, which has the keys "
            f"{sorted(saved.keys())}"
        )
    metas.append(folder / _memmap.META)
    for key, old in saved._items_str():
        new, at = rows._get_str(key, None), (*path, key)
        name, where = _memmap._file_key(key), f"the entry {fmt_path(at)}"
        if is_non_tensor(old):
            if not isinstance(old, NonTensorData):
                raise ValueError(f"cannot append to {where}: a stack of non-tensor values cannot grow")
            values = [new.data] if isinstance(new, NonTensorData) else _flat(new.tolist()) if is_non_tensor(new) else []
            if not is_non_tensor(new) or not all(_equal(value, old.data) for value in values):
                raise ValueError(
                    f"cannot append to {where}: the saved non-tensor value {old.data!r} stays as it "
                    f"is, so the rows must hold that value, not {getattr(new, 'data', new)!r}"
                )
        elif is_td(old):
            _check(unwrapped(old), unwrapped(new), at, _data_folder(folder / name), leaves, metas)
        elif not isinstance(new, torch.Tensor):
            raise ValueError(f"cannot append a {type(new).__name__} to {where}, a tensor")
        elif old.is_nested or new.is_nested:
            raise ValueError(f"cannot append to {where}: a nested tensor cannot grow")
        elif new.dtype != old.dtype or new.shape[1:] != old.shape[1:]:
            raise ValueError(
                f"cannot append rows of dtype {new.dtype} and shape {list(new.shape)} to {where}, of "
                f"dtype {old.dtype} and shape {list(old.shape)}"
            )
        else:
            leaves.append((folder / f"{name}.memmap", old.numel() * old.element_size(), new))


def _data_folder(folder: Path) -> Path:
    """Where the node saved in ``folder`` keeps its entries: a TensorClass's folder, in ``_tensordict/``."""
    return folder / _memmap._TC_DATA if _memmap.is_class_folder(folder) else folder


def _flat(values: Any) -> list[Any]:
    return [v for item in values for v in _flat(item)] if isinstance(values, list) else [values]


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an ambiguous comparison (arrays...) is a difference
        return False


def _grow(leaves: list[tuple[Path, int, torch.Tensor]], metas: list[Path], total: int) -> None:
    """Write the new rows after the saved ones, then the meta.json files; undo everything on a failure."""
    old_sizes: dict[Path, int | None] = {}
    replaced: list[tuple[Path, bytes]] = []
    pending: list[tuple[Path, Path]] = []
    try:
        for file, nbytes, value in leaves:
            if not value.numel():
                continue
            old_sizes[file] = file.stat().st_size if file.exists() else None  # an empty leaf may have no file
            with open(file, "r+b" if old_sizes[file] is not None else "wb") as f:
                f.seek(nbytes)  # right after the saved rows (a failed append may have left more)
                for chunk in _tensor_chunks(value):
                    f.write(chunk)
        for meta_file in metas:  # every new meta.json is written before the first replaces the old one
            meta = json.loads(meta_file.read_bytes())
            meta["shape"][0] = total
            for entry in meta.values():
                if isinstance(entry, dict) and "dtype" in entry and "shape" in entry:
                    entry["shape"][0] = total
            tmp = meta_file.with_name(f".{meta_file.name}.append.tmp")
            tmp.write_text(json.dumps(meta))
            pending.append((tmp, meta_file))
        for tmp, meta_file in pending:  # the top meta.json first
            old = meta_file.read_bytes()
            os.replace(tmp, meta_file)
            replaced.append((meta_file, old))
    except BaseException:
        for meta_file, old in replaced:
            meta_file.write_bytes(old)
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        for file, size in old_sizes.items():
            if size is None:
                file.unlink(missing_ok=True)
            else:
                os.truncate(file, size)
        raise
