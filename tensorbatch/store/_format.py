"""The server layout of a store, compatible with tensordict 0.15.3's ``TensorDictStore``.

Every key of a store is ``{namespace}:{<td_id>}:<suffix>`` (the braces are literal: a Redis Cluster hash tag,
so all of a store's keys land on one shard):

- ``d:<path>``: a tensor leaf's raw bytes (C order, native little-endian) or a non-tensor value's encoding;
  ``path`` joins nested keys with ``"."`` (so a key holding ``"."`` is refused);
- ``m:<path>``: a hash: ``shape`` (JSON list, batch dims included) and ``dtype`` (``"torch.float32"``), or
  ``is_non_tensor="1"`` and ``encoding`` (``json``: one value for the whole batch; ``json_array``: one value per
  element of dim 0; ``pickle``: written and read only by a store opened with ``allow_pickle=True``, since
  unpickling runs code chosen by whoever wrote the server's data);
- ``__keys__``: the set of leaf paths; ``__batch_size__`` (JSON list), ``__device__`` (``""`` for none),
  ``__tensorclass__`` (``module.QualName`` of a TensorClass written with ``from_tensordict``).

tensordict ignores the keys this module adds: ``__epoch__`` (a token written when the store is made, checked by
every operation, so a server that lost its data is noticed), ``__nodes__`` (a hash: nested node path -> JSON
batch size, which keeps empty nodes and nested batch sizes), ``__names__`` (a hash: node path, ``""`` for the
root -> JSON list of dim names, for named nodes only) and ``__order__`` (a sorted set: entry path -> insertion
rank, so keys list in insertion order).
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import torch

SEP = "."
BIG = 1 << 14  # buffers at least this long go to the socket uncopied
GLOBAL_SUFFIXES = (
    "__batch_size__",
    "__device__",
    "__tensorclass__",
    "__epoch__",
    "__nodes__",
    "__order__",
    "__names__",
)


def server_key(namespace: str, td_id: str, suffix: str) -> str:
    return f"{namespace}:{{{td_id}}}:{suffix}"


def check_key(key: str, path: tuple[str, ...] = ()) -> None:
    """A key holding the path separator would become a nested key on the server: refused, naming it."""
    if SEP in key:
        raise ValueError(
            f"TensorDictStore keys cannot contain {SEP!r} (the server joins nested keys with it): got {(*path, key)!r}"
        )


def dtype_str(dtype: torch.dtype) -> str:
    return str(dtype)


def str_dtype(text: str) -> torch.dtype:
    dtype = getattr(torch, text.rsplit(".", 1)[-1], None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {text!r} in a store's metadata")
    return dtype


def item_size(dtype: torch.dtype) -> int:
    return dtype.itemsize


def to_bytes(tensor: torch.Tensor) -> Any:
    """The raw bytes of a tensor: a copy when small, else a buffer over its memory.

    A large contiguous CPU tensor is not copied. Any dtype: one numpy lacks (bfloat16) is viewed as bytes.
    """
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    try:
        array = tensor.numpy()
    except TypeError:
        array = tensor.view(-1).view(torch.uint8).numpy()
    return array.tobytes() if array.nbytes < BIG else memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # (numpy arrays are buffers)


def nbytes(data: Any) -> int:
    """The length of a bytes-like value (bytes, a buffer); 0 for a str or number (never a tensor's data)."""
    if type(data) is bytes:
        return len(data)
    return 0 if isinstance(data, (str, int, float)) else memoryview(data).nbytes


def from_bytes(data: bytes | bytearray | memoryview, shape: Any, dtype: torch.dtype) -> torch.Tensor:
    if not len(data):
        return torch.empty(tuple(shape), dtype=dtype)
    raw = torch.frombuffer(bytearray(data) if isinstance(data, bytes) else data, dtype=torch.uint8)
    return raw.view(dtype).reshape(tuple(shape))


def tensor_meta(shape: Any, dtype: torch.dtype) -> dict[str, str]:
    return {"shape": json.dumps([int(s) for s in shape]), "dtype": dtype_str(dtype)}


def decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()
    }


_JSON_SCALARS = (str, int, float, bool, type(None))


def _json_exact(value: Any) -> bool:
    """Whether JSON gives ``value`` back as it is (a tuple would come back a list, a float key a string)."""
    if type(value) in _JSON_SCALARS:
        return type(value) is not float or value == value  # NaN does not compare equal: pickled
    if type(value) is list:
        return all(_json_exact(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _json_exact(v) for k, v in value.items())
    return False


class PickleRefused(RuntimeError):
    """A pickled non-tensor value on the server, read by a store that was not opened with ``allow_pickle=True``."""


def _pickled(value: Any, allow_pickle: bool, where: str) -> bytes:
    if not allow_pickle:
        raise TypeError(
            f"{where}: the non-tensor value ({type(value).__name__}) is not a JSON value; pass "
            "allow_pickle=True to the store to keep it with pickle (reading it back will need "
            "allow_pickle=True too)"
        )
    return pickle.dumps(value)


def encode_non_tensor(value: Any, allow_pickle: bool = False, where: str = "") -> tuple[bytes, dict[str, str]]:
    """``(data, meta)`` of a non-tensor leaf.

    A ``NonTensorData``'s value, or a 1-d ``NonTensorStack``'s list (``json_array``, as tensordict writes
    per-element values); other stacks keep their shape (``tb_stack``). JSON when JSON gives the value back
    exactly; otherwise pickle, only with ``allow_pickle`` (else a ``TypeError`` naming ``where``).

    Examples:
        >>> encode_non_tensor({"a": [1, 2]})
        (b'{"a": [1, 2]}', {'is_non_tensor': '1', 'encoding': 'json'})
        >>> encode_non_tensor((1, 2), where="key 'x'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: key 'x': the non-tensor value (tuple) is not a JSON value; pass allow_pickle=True ...
    """
    meta = {"is_non_tensor": "1"}
    if type(value).__name__ == "NonTensorStack":
        items = value.tolist()
        exact = _json_exact(items)
        if value.batch_dims == 1 and exact:
            return json.dumps(items).encode(), {**meta, "encoding": "json_array"}
        meta["tb_stack"] = json.dumps(list(value.batch_size))
        if exact:  # (tensordict reads it as one JSON value: the nested lists)
            return json.dumps(items).encode(), {**meta, "encoding": "json"}
        return _pickled(items, allow_pickle, where), {**meta, "encoding": "pickle"}
    data = value.data if hasattr(value, "_value") else value
    if _json_exact(data):
        return json.dumps(data).encode(), {**meta, "encoding": "json"}
    return _pickled(data, allow_pickle, where), {**meta, "encoding": "pickle"}


def decode_non_tensor(
    data: bytes | None,
    meta: dict[str, str],
    batch_size: torch.Size,
    device: Any,
    allow_pickle: bool = False,
    where: str = "",
) -> Any:
    """The non-tensor leaf of ``data`` and its metadata hash.

    A ``pickle`` encoding is unpickled only with ``allow_pickle`` (else :class:`PickleRefused` naming
    ``where``): any client that can write to the server chooses what it holds.
    """
    from .._nontensor import NonTensorData, NonTensorStack

    encoding = meta.get("encoding", "json")
    if encoding == "pickle" and data is not None:
        if not allow_pickle:
            raise PickleRefused(
                f"{where} holds a pickled value (encoding=pickle); unpickling runs whatever code "
                "the writer of the server's data chose, so reading it needs allow_pickle=True "
                "(TensorDictStore(..., allow_pickle=True) or from_store(..., allow_pickle=True)); "
                "only for a server whose writers you trust"
            )
        value: Any = pickle.loads(data)  # allowed explicitly by the caller
    else:
        try:
            value = None if data is None else json.loads(data)
        except ValueError:  # (UnicodeDecodeError too)
            raise ValueError(
                f"{where} holds data that is not JSON (its metadata says encoding={encoding!r}): "
                "written by another client meanwhile?"
            ) from None
    if encoding == "json_array":
        out = NonTensorStack.from_list(value or [], device=device, depth=1) if value else NonTensorData(None, [0])
        return out if len(batch_size) <= 1 or out.batch_size == batch_size else out._follow(batch_size)
    if "tb_stack" in meta:
        return NonTensorStack.from_list(value, device=device, depth=len(json.loads(meta["tb_stack"])))
    return NonTensorData(value, batch_size=batch_size, device=device)
