"""Making stores: from a dict or TensorDict, from a schema (allocated on the server), from a store's id.

The classmethods of ``TensorDictStore`` (``_node.py``, which imports this module: ``cls`` is the class here).
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Mapping
from typing import Any

import torch

from .._lazy import LazyStackedTensorDict
from .._ops.traverse import is_td
from ..stored._write import write_all
from . import _format as fmt
from ._conn import Connection, _connect
from ._lazy import LazyStackedTensorDictStore
from ._tree import load


def is_tensorclass(obj: Any) -> bool:
    from ..tensorclass import is_tensorclass as check

    return check(obj)


def defined_tensorclass(name: str) -> type | None:
    from ..tensorclass import defined_tensorclass as lookup

    return lookup(name)


def _as_td(value: Any) -> Any:
    """A TensorClass or TypedTensorDict gives its TensorDict; a TensorDict is itself."""
    inner = getattr(value, "_tensordict", None)
    return inner if inner is not None and is_td(inner) else value


def tensorclass_path(value: Any) -> str | None:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}" if is_tensorclass(cls) else None


def from_tensordict(cls: Any, /, td: Any, *, device: Any = None, progress: bool | None = None, **kwargs: Any) -> Any:
    """A new store holding a copy of ``td`` (a TensorDict, TensorClass or TypedTensorDict).

    Written in one atomic round trip. A TensorClass's class is recorded: :func:`from_store` gives it back.
    ``progress=True`` shows a tqdm bar counting the bytes prepared for that round trip (None: the switch
    :class:`~tensorbatch.set_progress`).
    """
    if isinstance(td, LazyStackedTensorDict) and not isinstance(td, LazyStackedTensorDictStore):
        return LazyStackedTensorDictStore.from_lazy_stack(td, device=device, **kwargs)
    tc = tensorclass_path(td)
    data = _as_td(td)
    if device is None:
        device = data.device
    store = cls(batch_size=data.batch_size, device=device, **kwargs)
    dialect, conn = store._redis, store._conn
    try:
        with dialect.transaction("from_tensordict"):  # one guarded script
            if tc is not None:
                dialect.send("from_tensordict", [("SET", [conn.key("__tensorclass__")], [tc])])
                conn.tensorclass = tc
            write_all(store, data, progress, "to_store")
    except BaseException:
        _forget(store)  # a new store whose data was refused (maxmemory...): no metadata left behind
        raise
    return store


def _forget(store: Any) -> None:
    """Delete every key of a store just created (best effort: the error being raised is the one to see)."""
    conn = store._conn
    with contextlib.suppress(Exception):
        keys = list(conn.client.scan_iter(match=conn.key("*").replace("[", "\\[").replace("?", "\\?")))
        if keys:
            conn.client.delete(*keys)


def from_dict(
    cls: Any,
    /,
    input_dict: Any,
    *,
    auto_batch_size: bool = False,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Any = None,
    **kwargs: Any,
) -> Any:
    """A new store holding the entries of a dict or TensorDict (batch size as ``TensorDict.from_dict``)."""
    from .._convert import from_dict as build

    if is_td(input_dict) and batch_size is None and not auto_batch_size and batch_dims is None:
        td = input_dict
    else:
        td = build(
            input_dict, auto_batch_size=auto_batch_size, batch_size=batch_size, batch_dims=batch_dims, names=names
        )
    return from_tensordict(cls, td, device=device, **kwargs)


def from_schema(
    cls: Any,
    /,
    schema: Mapping[Any, tuple[Any, torch.dtype]],
    *,
    batch_size: Any = None,
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """A new store with zero-filled leaves ``[*batch_size, *shape]`` from ``{key: (shape, dtype)}``.

    Allocated by the server (SETRANGE of each leaf's last byte): no tensor data goes through Python. The
    schema is checked before anything is written.
    """
    size = torch.Size(() if batch_size is None else batch_size)
    entries = []
    for key, (shape, dtype) in schema.items():
        path = (key,) if isinstance(key, str) else tuple(key)
        for i, part in enumerate(path):
            fmt.check_key(part, path[:i])
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"from_schema: the dtype of {path!r} must be a torch.dtype, got {dtype!r}")
        entries.append((path, torch.Size((*size, *shape)), dtype))
    store = cls(batch_size=size, device=device, **kwargs)
    dialect = store._redis
    with dialect.transaction("from_schema"):
        for path, shape, dtype in entries:
            dialect.alloc(path, shape, dtype)
    return store


def from_store(
    cls: Any,
    /,
    *,
    td_id: str,
    prefix: str = "tensordict",
    device: Any = None,
    tensorclass_cls: Any = None,
    allow_pickle: bool = False,
    **kwargs: Any,
) -> Any:
    """Connect to the store ``td_id`` that another handle (any process, any machine) wrote.

    Reads its batch size, device and layout. Returns the recorded TensorClass around it when there is one:
    ``tensorclass_cls`` (a class, or a ``"module.QualName"`` that is imported because the caller named it),
    else the class the server names, looked up among the TensorClasses already defined in this process
    (never imported: the server's data does not choose code to run).

    Args:
        cls: the class it is called on (a classmethod of :class:`TensorDictStore`).
        td_id: the store's identifier.
        prefix: the namespace of its keys.
        device: the device reads are cast to (default: the one recorded).
        tensorclass_cls: the TensorClass to wrap the store in (default: the recorded one, if defined here).
        allow_pickle: unpickle non-tensor values the server holds pickled (see :class:`TensorDictStore`).
        **kwargs: the server (``host``, ``port``, ``db``, ``client``...) and client options.

    Raises:
        KeyError: when the server has no such store.
        LookupError: when the server names a TensorClass that this process has not defined.
    """
    conn = _connect(prefix=prefix, td_id=td_id, allow_pickle=allow_pickle, **kwargs)
    epoch = conn.new_epoch()

    def fill(pipe: Any) -> None:
        for suffix in ("__type__", "__batch_size__", "__device__", "__tensorclass__"):
            pipe.get(conn.key(suffix))
        pipe.set(conn.key("__epoch__"), epoch, nx=True)  # a store tensordict wrote has none yet
        pipe.get(conn.key("__epoch__"))

    kind, raw_batch, raw_device, raw_tc, _, conn.epoch = conn.read("from_store", fill)
    if kind == b"lazy_stack":  # a lazy stack: its own class (as tensordict's from_store)
        return LazyStackedTensorDictStore.from_store(
            td_id=td_id, prefix=prefix, device=device, allow_pickle=allow_pickle, **kwargs
        )
    if raw_batch is None:
        conn.write("from_store", [("DEL", [conn.key("__epoch__")], [])]) if conn.epoch == epoch else None
        raise KeyError(f"no TensorDictStore with td_id={td_id!r} at {conn.address} db={conn.db} (prefix={prefix!r})")
    if device is None and raw_device:
        device = raw_device.decode()
    conn.device = None if device is None else torch.device(device)
    conn.tree = load(conn, "from_store") if conn.cache_metadata else None
    if conn.tree is not None:
        conn.tree.batch = torch.Size(json.loads(raw_batch))
    store = cls._over(conn, ())
    tc: Any
    if tensorclass_cls is not None:
        tc = _named_class(tensorclass_cls) if isinstance(tensorclass_cls, str) else tensorclass_cls
    elif raw_tc:
        tc = _recorded_class(raw_tc.decode(errors="replace"), conn)
    else:
        return store
    if not isinstance(tc, type) or not is_tensorclass(tc):
        raise TypeError(f"from_store: tensorclass_cls must be a TensorClass class, got {tc!r}")
    conn.tensorclass = f"{tc.__module__}.{tc.__qualname__}"
    return tc.from_tensordict(store)  # type: ignore[attr-defined]  # (a TensorClass: checked above)


def _named_class(name: str) -> Any:
    """The class the caller named as ``"module.QualName"``: already defined, else imported (the caller chose it)."""
    found = defined_tensorclass(name)
    if found is not None:
        return found
    module, _, qualname = name.rpartition(".")
    out: Any = importlib.import_module(module)
    for part in qualname.split("."):
        out = getattr(out, part)
    return out


def _recorded_class(name: str, conn: Connection) -> Any:
    """The TensorClass a store's ``__tensorclass__`` names, among those defined in this process (never imported)."""
    found = defined_tensorclass(name)
    if found is None:
        raise LookupError(
            f"{conn.where()} records the TensorClass {name!r}, which this process has not defined: "
            "import or define it before from_store, or pass tensorclass_cls=TheClass (the module "
            "the server names is never imported: that would run code the server's data chose)"
        )
    return found
