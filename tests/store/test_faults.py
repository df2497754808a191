"""Faults on private servers: hung (SIGSTOP), lost data (restart without persistence), out of memory mid-write,
two writers racing on one non-tensor list, several processes writing disjoint rows."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch

redis = pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import NonTensorStack, TensorDict  # noqa: E402
from tensorbatch.store import StoreLostError, StoreTimeoutError, TensorDictStore  # noqa: E402


def test_hung_server_is_bounded_by_the_timeout(private_server):
    srv = private_server()
    store = TensorDictStore(batch_size=[2], host=srv.host, port=srv.port, socket_timeout=0.5)
    store["a"] = torch.zeros(2)
    srv.pause()
    try:
        start = time.monotonic()
        with pytest.raises(StoreTimeoutError, match=rf"{srv.port}.*reading 'a'.*did not answer"):
            store["a"]
        assert 0.4 < time.monotonic() - start < 3.0
        with pytest.raises(redis.ConnectionError):  # still caught by redis-py's except clauses
            store[0]
    finally:
        srv.resume()


def test_lost_data_is_noticed_and_nothing_is_recreated(private_server):
    srv = private_server()
    store = TensorDictStore.from_schema({"obs": ([3], torch.float32)}, batch_size=[4], host=srv.host, port=srv.port)
    store[1] = {"obs": torch.ones(3)}
    srv.restart()  # no persistence: the server comes back empty
    for operation in (
        lambda: store["obs"],
        lambda: store[0],
        lambda: store.__setitem__(2, {"obs": torch.ones(3)}),
        lambda: store.set("new", torch.zeros(4)),
        lambda: store.set("big", torch.zeros(4, 50_000)),
    ):
        with pytest.raises(StoreLostError, match="data is gone"):
            operation()
    assert srv.client().dbsize() == 0  # the failed writes created nothing (the staged value of "big" is gone)


def test_a_write_over_maxmemory_leaves_no_half_written_store(private_server):
    srv = private_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    store = TensorDictStore(batch_size=[1000], host=srv.host, port=srv.port)
    store["small"] = torch.ones(1000)
    big = TensorDict({"x": torch.ones(1000), "y": torch.ones(1000, 2000)}, [1000])  # 8 MB: over the limit
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        store["n"] = big  # one node, two leaves: one script
    assert set(store.keys()) == {"small"}
    assert store["small"].sum() == 1000
    client = srv.client()
    assert client.smembers(store._conn.key("__keys__")) == {b"small"}  # nothing of "n" reached the server
    assert not client.exists(store._conn.data_key("n.x"))
    assert not client.hgetall(store._conn.key("__nodes__"))


def _write_elements(port: int, td_id: str, positions: list[int]) -> None:
    store = TensorDictStore.from_store(td_id=td_id, host="127.0.0.1", port=port)
    for i in positions:
        store[i] = {"label": f"w{i}"}


def test_two_writers_lose_no_non_tensor_element(private_server):
    srv = private_server()
    store = TensorDictStore(batch_size=[200], host=srv.host, port=srv.port)
    store["label"] = NonTensorStack(*(["-"] * 200))
    store["x"] = torch.zeros(200)
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_write_elements, args=(srv.port, store._conn.td_id, list(range(k, 200, 2)))) for k in (0, 1)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    fresh = TensorDictStore.from_store(td_id=store._conn.td_id, host=srv.host, port=srv.port)
    assert fresh.get("label").tolist() == [f"w{i}" for i in range(200)]  # 0 of 200 lost


def _write_rows(port: int, td_id: str, rows: range) -> None:
    store = TensorDictStore.from_store(td_id=td_id, host="127.0.0.1", port=port)
    for i in rows:
        store[i] = {"x": torch.full((3,), float(i)), "n": {"y": torch.tensor(i)}}


def test_processes_writing_disjoint_rows_lose_nothing(private_server):
    srv = private_server()
    store = TensorDictStore.from_schema(
        {"x": ([3], torch.float32), ("n", "y"): ([], torch.int64)}, batch_size=[120], host=srv.host, port=srv.port
    )
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_rows, args=(srv.port, store._conn.td_id, range(k, 120, 4))) for k in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    assert store["n", "y"].tolist() == list(range(120))
    assert torch.equal(store["x"], torch.arange(120.0)[:, None].expand(120, 3))


def test_a_staged_value_over_maxmemory_leaves_nothing(private_server):
    """A large value goes to the server first under a temporary key, renamed into place by the write's script;
    when that SET is refused (``maxmemory``) the script writes nothing: the store is unchanged."""
    srv = private_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    store = TensorDictStore(batch_size=[10], host=srv.host, port=srv.port)
    store["small"] = torch.ones(10)
    client = srv.client()
    before = set(client.keys("*"))
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        store["n"] = TensorDict({"x": torch.ones(10), "y": torch.ones(10, 90_000)}, [10])  # 3.6 MB staged
    assert set(client.keys("*")) == before  # neither "n" nor the staged value
    assert set(store.keys()) == {"small"}
    store["m"] = torch.ones(10, 2)  # the server is usable again
    assert store["m"].sum() == 20
