"""The zarr dialect (zarr >= 3, the ``zarr`` extra): TensorDicts in zarr groups, on a path or an fsspec URL.

The layout is tensordict 0.15.3's, so each library reads what the other writes: a group per nested
TensorDict with its batch size (and dim names) in the ``__tensordict__`` attribute; an array per tensor leaf
(one chunk per leaf and no compressor unless ``chunks=``/``compressors=`` say otherwise); a non-tensor value
as a ``uint8`` array of its JSON (or pickle) bytes marked ``__tensordict_non_tensor__``; a stack of strings as
a string array marked ``__tensordict_stack__`` with its shape. What tensordict cannot store goes in an
attribute other readers ignore: a bfloat16/float8 leaf is stored as its bits with ``tensorbatch_dtype``.
``from_zarr``, ``to_zarr`` and ``from_schema`` below are registered as the storage ``"zarr"``.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import os
import pickle
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .._ops.meta import NODE, NON_TENSOR, TENSOR
from .._ops.rows import RowPlan
from ..base import TensorDictBase
from ._dialect import Dialect, Path, array_mismatch
from ._dtypes import BITS, BY_NAME, DTYPE_ATTR, NUMPY_OF, TORCH_OF
from ._node import StoredTensorDict
from ._register import register_storage
from ._write import allocate, write_all

FACTS_ATTR = "__tensordict__"
NON_TENSOR_ATTR = "__tensordict_non_tensor__"
STACK_ATTR = "__tensordict_stack__"


def zarr_module() -> Any:
    """zarr, imported on first use (a clear error naming the extra when it is missing or older than 3)."""
    try:
        zarr = importlib.import_module("zarr")
    except ImportError as err:
        raise ModuleNotFoundError(
            "zarr storage needs zarr >= 3, which is not installed (pip install 'zarr>=3', or the 'zarr' extra)",
            name="zarr",
        ) from err
    if int(zarr.__version__.split(".")[0]) < 3:
        raise ImportError(f"zarr storage needs zarr >= 3, found zarr {zarr.__version__} (pip install -U zarr)")
    return zarr


class ZarrDialect(Dialect):
    """One zarr hierarchy: a path, an fsspec URL (``memory://``, ``file://``, ``s3://``...) or a zarr store.

    Args:
        where: the root: a path, a URL or a zarr store.
        mode: ``"r"`` (read only), ``"r+"`` (read and write, must exist), ``"a"`` (create if missing), ``"w"``
            (create, replacing what is there), ``"x"``/``"w-"`` (create, fail if it exists).
        storage_options: fsspec options of a URL (credentials, endpoints...).
        allow_pickle: read non-tensor values stored pickled (pickle runs code: trusted data only).
        array_options: options of ``zarr.Group.create_array`` for new leaves (``chunks``, ``compressors``...);
            ``chunks`` applies to the leading dims of every leaf, the others stay whole.
    """

    name = "zarr"
    batch_mismatch = staticmethod(array_mismatch)  # (tensordict's words for its file formats)
    copy_reads = True

    def __init__(
        self,
        where: Any,
        mode: str = "r",
        *,
        storage_options: dict[str, Any] | None = None,
        allow_pickle: bool = False,
        array_options: dict[str, Any] | None = None,
    ) -> None:
        zarr = zarr_module()
        self.where, self.mode = os.fspath(where) if isinstance(where, os.PathLike) else where, mode
        self.storage_options = dict(storage_options or {})
        self.allow_pickle = bool(allow_pickle)
        self.array_options = dict(array_options or {})
        if isinstance(self.where, str) and self.where.startswith("file://") and mode != "r":
            self.storage_options.setdefault("auto_mkdir", True)  # (fsspec's local files do not make folders)
        options: dict[str, Any] = {"mode": "w-" if mode == "x" else mode}
        if mode != "r":
            options["use_consolidated"] = False  # consolidated metadata would go stale under writes
        if self.storage_options:
            options["storage_options"] = self.storage_options
        try:
            self.root = zarr.open_group(self.where, **options)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"no zarr group at {self.where!r} (mode {mode!r})") from err
        self._nodes: dict[Path, Any] = {(): self.root}
        self._arrays: dict[Path, Any] = {}
        self._count = itertools.count(1)  # leaf_id: a number per created leaf
        self._serials: dict[Path, int] = {}
        # whether the store keeps consolidated metadata, which each structural change must refresh (None: not
        # looked yet; a new store has none until to_zarr consolidates it), and the open transactions' depth
        self._consolidated: bool | None = False if mode in ("w", "x", "w-") else None
        self._depth, self._changed = 0, False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as what reopens it: never ``"w"``, which would erase it."""
        if not isinstance(self.where, str):
            raise TypeError(
                f"a zarr TensorDict over a {type(self.where).__name__} store cannot be pickled (open it "
                "from a path or a URL to pickle it)"
            )
        mode = "r" if self.mode == "r" else "r+"
        return {
            "where": self.where,
            "mode": mode,
            "storage_options": self.storage_options,
            "allow_pickle": self.allow_pickle,
            "array_options": self.array_options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.pop("where"), state.pop("mode"), **state)  # type: ignore[misc]

    @property
    def writable(self) -> bool:
        return self.mode != "r"

    def describe(self, path: Path) -> str:
        return f"zarr {self.where!r}:/" + "/".join(path)

    # ------------------------------------------------------------------ structure
    def _node(self, path: Path) -> Any:
        found = self._nodes.get(path)
        if found is None:
            found = self._nodes[path] = self._node(path[:-1])[path[-1]]
        return found

    def _array(self, path: Path) -> Any:
        found = self._arrays.get(path)
        if found is None:
            found = self._arrays[path] = self._node(path[:-1])[path[-1]]
        return found

    def entries(self, path: Path) -> dict[str, str]:
        zarr, out = zarr_module(), {}
        for key, member in self._node(path).members():
            if isinstance(member, zarr.Group):
                self._nodes[(*path, key)] = member
                out[key] = NODE
            else:
                self._arrays[(*path, key)] = member
                attrs = member.attrs
                plain = np.dtype(member.dtype) in TORCH_OF if _numpy_dtype(member) else False
                out[key] = TENSOR if plain and NON_TENSOR_ATTR not in attrs and STACK_ATTR not in attrs else NON_TENSOR
        return out

    def tensor_meta(self, path: Path) -> tuple[torch.Size, torch.dtype]:
        array = self._array(path)
        return torch.Size(array.shape), _torch_dtype(array)

    def node_facts(self, path: Path) -> tuple[torch.Size | None, tuple[Any, ...] | None]:
        facts = self._node(path).attrs.get(FACTS_ATTR)
        if not isinstance(facts, dict) or "batch_size" not in facts:
            return None, None
        names = facts.get("names")
        return torch.Size(int(n) for n in facts["batch_size"]), None if names is None else tuple(names)

    def set_node_facts(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        self._node(path).attrs[FACTS_ATTR] = _facts(batch_size, names)
        self._structure_changed()

    def create_node(self, path: Path, batch_size: torch.Size, names: tuple[Any, ...] | None) -> None:
        node = self._node(path[:-1]).create_group(path[-1], attributes={FACTS_ATTR: _facts(batch_size, names)})
        self._nodes[path] = node
        self._structure_changed()

    def delete(self, path: Path) -> None:
        del self._node(path[:-1])[path[-1]]
        n = len(path)
        for table in (self._nodes, self._arrays):
            for known in [p for p in table if p[:n] == path]:
                del table[known]
        self._structure_changed()

    # ------------------------------------------------------------------ tensor leaves
    def read(self, path: Path) -> torch.Tensor:
        array = self._array(path)
        return _as_tensor(array[...], array)

    def read_rows(self, path: Path, plan: RowPlan) -> torch.Tensor:
        array = self._array(path)
        if plan.kind != "rows":
            return _as_tensor(array[plan.index], array)
        rows = array.oindex[plan.rows.numpy()]  # the sorted unique rows, put in order by the inverse permutation
        return _as_tensor(rows if plan.inverse is None else rows[plan.inverse.numpy()], array)

    def write(self, path: Path, value: torch.Tensor) -> None:
        array = self._create(path, tuple(value.shape), value.dtype)
        array[...] = _as_numpy(value)

    def write_into(self, path: Path, value: torch.Tensor) -> None:
        array = self._array(path)
        array[...] = np.broadcast_to(_as_numpy(value.to(_torch_dtype(array))), array.shape)

    def write_rows(self, path: Path, plan: RowPlan, value: torch.Tensor) -> None:
        array = self._array(path)
        data = _as_numpy(value)
        if plan.kind != "rows":
            array[plan.index] = data
            return
        positions = plan.last_positions()  # the last repeat of a row wins
        flat = data.reshape(-1, *data.shape[len(plan.shape) :])
        array.oindex[plan.rows.numpy()] = flat if positions is None else flat[positions.numpy()]

    def alloc(self, path: Path, shape: torch.Size, dtype: torch.dtype) -> None:
        self._create(path, tuple(shape), dtype)  # (unwritten chunks read as the fill value, 0)

    def _create(self, path: Path, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
        attributes = {}
        stored = BITS.get(dtype)
        if stored is not None:
            attributes[DTYPE_ATTR] = str(dtype).removeprefix("torch.")
            dtype = stored
        check_dtype(path, dtype)
        options = dict(self.array_options)
        options.setdefault("compressors", None)
        chunks = options.pop("chunks", None)
        if shape:  # one chunk per leaf, or ``chunks`` over the leading dims and the others whole
            lead = () if chunks is None else ((chunks,) if isinstance(chunks, int) else tuple(chunks))[: len(shape)]
            options["chunks"] = tuple(max(1, int(c)) for c in (*lead, *shape[len(lead) :]))
        array = self._node(path[:-1]).create_array(
            path[-1], shape=shape, dtype=NUMPY_OF[dtype].name, fill_value=0, attributes=attributes, **options
        )
        self._serials[path] = next(self._count)
        self._created(path, array)
        return array

    def _created(self, path: Path, array: Any) -> None:
        self._arrays[path] = array
        self._structure_changed()

    def leaf_id(self, path: Path) -> int:
        self._array(path)
        return self._serials.setdefault(path, next(self._count))  # (numbered when created or first seen)

    # ------------------------------------------------------------------ non-tensor leaves
    def read_object(self, path: Path, batch_size: torch.Size) -> Any:
        from .._nontensor import NonTensorData, NonTensorStack

        array = self._array(path)
        attrs = array.attrs
        marker = attrs.get(NON_TENSOR_ATTR)
        if marker is not None:
            value = self._decode(path, np.asarray(array[...]).tobytes(), marker)
        else:  # a string array (a stack's), or a foreign array of a type torch has none for
            value = np.asarray(array[...]).tolist()
        shape = attrs.get(STACK_ATTR)
        if shape is None:
            return NonTensorData(value, batch_size=batch_size)
        if not shape:
            return NonTensorData(value, batch_size=())
        return NonTensorStack.from_list(value, depth=len(shape))

    def _decode(self, path: Path, payload: bytes, marker: Any) -> Any:
        encoding = marker.get("encoding") if isinstance(marker, dict) else None
        if encoding == "json":
            return json.loads(payload.decode("utf-8"))
        if encoding != "pickle":
            raise ValueError(f"{self.describe(path)}: unknown non-tensor encoding {encoding!r}")
        if not self.allow_pickle:
            raise PermissionError(
                f"{self.describe(path)} holds a pickled value: unpickling runs code, so it is read "
                "only when the store is opened with allow_pickle=True (trusted data only)"
            )
        return pickle.loads(payload)  # (the caller's opt-in above)

    def object_shape(self, path: Path, batch_size: torch.Size) -> torch.Size:
        shape = self._array(path).attrs.get(STACK_ATTR)
        return batch_size if shape is None else torch.Size(int(n) for n in shape)

    def write_object(self, path: Path, value: Any) -> None:
        from .._nontensor import NonTensorStack

        parent, name = self._node(path[:-1]), path[-1]
        attributes: dict[str, Any] = {}
        if isinstance(value, NonTensorStack):
            data = value.tolist()
            attributes[STACK_ATTR] = list(value.batch_size)
            flat = np.array(data, dtype=object).ravel().tolist() if value.batch_size else [data]
            if all(type(v) is str for v in flat):
                strings = np.array(data, dtype=str)
                options = {"chunks": strings.shape or None, "compressors": None}
                array = parent.create_array(name, shape=strings.shape, dtype=str, attributes=attributes, **options)
                array[...] = strings
                self._created(path, array)
                return
        else:
            data = value.data
        try:
            text = json.dumps(data)
            payload, encoding = (text.encode("utf-8"), "json") if json.loads(text) == data else (None, "")
        except (TypeError, ValueError):
            payload, encoding = None, ""
        if payload is None:
            payload, encoding = pickle.dumps(data), "pickle"
        attributes[NON_TENSOR_ATTR] = {"encoding": encoding}
        raw = np.frombuffer(payload, dtype=np.uint8)
        array = parent.create_array(
            name, shape=raw.shape, dtype="uint8", attributes=attributes, chunks=(max(1, raw.size),), compressors=None
        )
        array[...] = raw
        self._created(path, array)

    # ------------------------------------------------------------------ life
    @contextlib.contextmanager
    def transaction(self, operation: str = "writing") -> Iterator[None]:
        """Writes grouped: consolidated metadata (when the store keeps it) is refreshed once, at the end."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._changed:
                self._changed = False
                self.consolidate()

    def _structure_changed(self) -> None:
        """Keep the store's consolidated metadata (if it has any) true after a change of its layout."""
        if self._consolidated is None:
            try:
                probe = zarr_module().open_group(self.root.store, mode="r")
                self._consolidated = probe.metadata.consolidated_metadata is not None
            except Exception:  # (a store that cannot say: treated as without)
                self._consolidated = False
        if self._consolidated:
            if self._depth:
                self._changed = True
            else:
                self.consolidate()

    def flush(self) -> None:
        """Nothing to do: every write reached the store when it returned."""

    def close(self) -> None:
        close = getattr(self.root.store, "close", None)
        if close is not None:
            close()

    def consolidate(self) -> None:
        """Write the hierarchy's metadata into the root: readers then list it in one read.

        What tensordict does after writing a whole TensorDict. Skipped for stores that cannot rewrite an entry (a zip).
        """
        if getattr(self.root.store, "supports_deletes", True):
            self._consolidated = True
            with warnings.catch_warnings():  # ("not part of the zarr 3 specification": tensordict's layout has it)
                warnings.simplefilter("ignore", UserWarning)
                zarr_module().consolidate_metadata(self.root.store)


def check_dtype(path: Path, dtype: torch.dtype) -> None:
    """TypeError naming ``path`` when zarr has no type for ``dtype`` (nor for its bits)."""
    if BITS.get(dtype, dtype) not in NUMPY_OF:
        raise TypeError(f"cannot store {'/'.join(path)!r} of dtype {dtype} in zarr: no zarr type for it")


def _facts(batch_size: torch.Size, names: tuple[Any, ...] | None) -> dict[str, Any]:
    facts: dict[str, Any] = {"batch_size": list(batch_size), "version": 1}
    if names is not None and any(n is not None for n in names):
        facts["names"] = list(names)
    return facts


def _numpy_dtype(array: Any) -> bool:
    try:
        np.dtype(array.dtype)
    except TypeError:
        return False
    return True


def _torch_dtype(array: Any) -> torch.dtype:
    named = array.attrs.get(DTYPE_ATTR)
    return BY_NAME[named] if named in BY_NAME else TORCH_OF[np.dtype(array.dtype)]


def _as_tensor(data: Any, array: Any) -> torch.Tensor:
    out = torch.from_numpy(np.array(data, copy=None, order="C"))
    named = array.attrs.get(DTYPE_ATTR)
    return out.view(BY_NAME[named]) if named in BY_NAME else out


def _as_numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach().cpu().resolve_conj().resolve_neg()
    bits = BITS.get(value.dtype)
    return (value.view(bits) if bits is not None else value).numpy()


def from_zarr(
    zarr_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    non_tensor_as_stack: bool = False,
    allow_pickle: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StoredTensorDict:
    """Open a zarr group (a path, an fsspec URL or a zarr store) as a TensorDict read on access.

    Batch sizes are those ``to_zarr`` recorded (tensordict's layout); a group that records none gets the
    longest leading shape its entries share (at most ``batch_dims`` dims; ``auto_batch_size=True`` ignores the
    recorded sizes). ``batch_size`` is checked and taken without writing. Rows are read on indexing, one read per
    leaf; ``mode="r+"`` or ``"a"`` writes through. Pickled non-tensor values are read only with
    ``allow_pickle=True`` (tensordict reads them with a warning: pickle runs code). ``storage_options`` go to
    fsspec (credentials, endpoints). ``non_tensor_as_stack`` is accepted for tensordict's signature: string
    columns are stacks already.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict, from_zarr
        >>> path = os.path.join(tempfile.mkdtemp(), "data.zarr")
        >>> _ = TensorDict({"a": torch.arange(6).view(3, 2), "n": {"b": torch.ones(3)}}, [3]).to_zarr(path)
        >>> with from_zarr(path) as data:
        ...     print(data.batch_size, data[1:]["a"].tolist(), data["n", "b"])
        torch.Size([3]) [[2, 3], [4, 5]] tensor([1., 1., 1.])
    """
    dialect = ZarrDialect(zarr_file, mode, storage_options=storage_options, allow_pickle=bool(allow_pickle))
    return StoredTensorDict(dialect, batch_size=batch_size, batch_dims=batch_dims, auto_batch_size=auto_batch_size)


def to_zarr(
    self: TensorDictBase,
    filename: Any,
    *,
    allow_pickle: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> StoredTensorDict:
    """Write this TensorDict to a new zarr group (replacing what is there) and return it open read-write.

    The layout is tensordict 0.15.3's (each library reads the other's). ``kwargs`` go to
    ``zarr.Group.create_array``: by default a leaf is one uncompressed chunk; ``chunks=(16,)`` chunks every
    leaf's first dim by 16 (the others stay whole), ``compressors=...`` compresses. ``filename`` is a path, an
    fsspec URL (``storage_options`` for its filesystem) or a zarr store. ``allow_pickle=False`` refuses to read
    back the pickled non-tensor values this call writes.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensorbatch import TensorDict
        >>> stored = TensorDict({"a": torch.arange(3)}, [3]).to_zarr(os.path.join(tempfile.mkdtemp(), "d.zarr"))
        >>> stored["a"], stored.batch_size
        (tensor([0, 1, 2]), torch.Size([3]))
    """
    for key, value in self.items(include_nested=True, leaves_only=True):  # every dtype checked before a write
        if isinstance(value, torch.Tensor):
            check_dtype(key if isinstance(key, tuple) else (key,), value.dtype)
    dialect = ZarrDialect(
        filename, "w", storage_options=storage_options, allow_pickle=allow_pickle is not False, array_options=kwargs
    )
    out = StoredTensorDict(dialect)
    write_all(out, self, False, "to_zarr")
    dialect.consolidate()
    return out


def from_schema(
    schema: Mapping[Any, tuple[Any, torch.dtype]],
    filename: str | os.PathLike[str] | None = None,
    *,
    batch_size: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> StoredTensorDict:
    """Zero-filled leaves in a new zarr group, written without data (unwritten chunks read as 0)."""
    if filename is None:
        raise TypeError("from_schema(storage='zarr') needs filename= (a path or a URL)")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"a zarr TensorDict lives on the CPU, not {device}")
    storage_options = kwargs.pop("storage_options", None)
    out = StoredTensorDict(ZarrDialect(filename, "w", storage_options=storage_options, array_options=kwargs))
    allocate(out, schema, torch.Size(() if batch_size is None else batch_size))
    return out


register_storage("zarr", to=to_zarr, opener=from_zarr, schema=from_schema, where="filename")
