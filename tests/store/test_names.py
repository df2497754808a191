"""Dim names and nested batch sizes are kept on the server in keys tensordict ignores (``__names__``,
``__nodes__``): read back by ``from_store``, and tensordict 0.15.3 still reads the store."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import TensorDict
from tensorbatch.store import TensorDictStore


def _named() -> TensorDict:
    inner = TensorDict({"y": torch.arange(24.0).view(2, 3, 4)}, [2, 3], names=["env", "agent"])
    return TensorDict({"x": torch.ones(2, 5), "m": inner}, [2], names=["env"])


@pytest.fixture
def store(server):
    out = TensorDictStore.from_tensordict(_named(), **server.kwargs())
    yield out
    out.clear_redis()
    out.close()


def test_names_and_nested_batch_sizes_read_back_by_from_store(store, server):
    fresh = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert fresh.names == ["env"]
    assert fresh["m"].batch_size == torch.Size([2, 3])
    assert fresh["m"].names == ["env", "agent"]
    local = fresh.to_tensordict()
    assert local.names == ["env"]
    assert local["m"].names == ["env", "agent"]
    assert local["m"].batch_size == torch.Size([2, 3])
    assert fresh[0:1]["m"].names == ["env", "agent"]  # rows read keep names as indexing in memory does
    assert fresh["m"][1].names == ["agent"]
    assert fresh[torch.tensor([[0, 1]])].names == [None, None]
    client = server.client()
    assert client.hgetall(store._conn.key("__names__")) == {b"": b'["env"]', b"m": b'["env", "agent"]'}
    assert client.hgetall(store._conn.key("__nodes__")) == {b"m": b"[2, 3]"}


def test_setting_names_and_batch_size_on_the_server(store, server):
    store["m"].names = [None, "agent2"]
    store.names = None
    fresh = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert fresh.names == [None]
    assert fresh["m"].names == [None, "agent2"]
    with pytest.raises(ValueError, match="one entry per batch dim"):
        fresh.names = ["a", "b"]
    assert fresh.names == [None]
    fresh["m"].batch_size = [2]  # fewer dims: the names no longer fit and go
    again = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert again["m"].batch_size == torch.Size([2])
    assert again["m"].names == [None]
    assert not server.client().hexists(store._conn.key("__names__"), "m")


def test_deleting_a_named_node_forgets_its_names(store, server):
    del store["m"]
    assert server.client().hgetall(store._conn.key("__names__")) == {b"": b'["env"]'}
    store["m"] = TensorDict({"z": torch.zeros(2, 3)}, [2, 3])
    assert store["m"].names == ["env", None]  # the root's name (as tensordict), not the deleted node's "agent"


def test_tensordict_reads_a_store_with_names(store, server):
    ts = pytest.importorskip("tensordict.store")
    theirs = ts.TensorDictStore.from_store(td_id=store._conn.td_id, host=server.host, port=server.port)
    try:
        assert theirs.batch_size == torch.Size([2])
        assert torch.equal(theirs["x"], torch.ones(2, 5))
        assert torch.equal(theirs["m", "y"], _named()["m", "y"])
        assert torch.equal(theirs[1]["m", "y"], _named()["m", "y"][1])
    finally:
        theirs.close()
