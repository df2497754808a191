"""Multi-key writes are one guarded script: update(), update_(), update_at_(), set_ of a node and td[idx] = other
land whole or not at all, on a failure found late (a bad value after good ones, a key missing, the server out of
memory)."""

from __future__ import annotations

import pytest
import torch

redis = pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import TensorClass, TensorDict, TypedTensorDict  # noqa: E402
from tensorbatch.store import TensorDictStore  # noqa: E402


def _server_state(srv, store):
    """Every key of the store with its value (strings) or its content (hashes, sets, sorted sets)."""
    client, out = srv.client(), {}
    for key in client.keys(f"*{store._conn.td_id}*"):
        kind = client.type(key)
        out[key] = {
            b"string": client.get,
            b"hash": client.hgetall,
            b"set": client.smembers,
            b"zset": lambda k: client.zrange(k, 0, -1),
        }[kind](key)
    return out


@pytest.fixture
def store(server):
    out = TensorDictStore.from_tensordict(
        TensorDict({"a": torch.zeros(4, 2), "n": {"b": torch.zeros(4, dtype=torch.int64)}}, [4]), **server.kwargs()
    )
    yield out
    out.clear_redis()
    out.close()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda s: s.update({"new": torch.ones(4), "a": torch.ones(4, 2), "bad": torch.ones(3)}),
            id="update-bad-batch-last",
        ),
        pytest.param(
            lambda s: s.update_({"a": torch.ones(4, 2), ("n", "b"): torch.ones(4), "missing": torch.ones(4)}),
            id="update_-missing-key-last",
        ),
        pytest.param(
            lambda s: s.update_at_({"a": torch.ones(2), ("n", "b"): torch.tensor(5), "zz": torch.ones(())}, 1),
            id="update_at_-missing-key-last",
        ),
        pytest.param(
            lambda s: s.set_("n", TensorDict({"b": torch.ones(4, dtype=torch.int64), "c": torch.ones(4)}, [4])),
            id="set_-node-with-a-new-key",
        ),
        pytest.param(
            lambda s: s.__setitem__(1, TensorDict({"new": torch.ones(3), "a.b": torch.ones(())}, [])),
            id="setitem-index-bad-new-key-last",
        ),
    ],
)
def test_a_late_failure_writes_nothing(store, server, write):
    before = _server_state(server, store)
    with pytest.raises((KeyError, RuntimeError, ValueError)):
        write(store)
    assert _server_state(server, store) == before
    assert set(store.keys(True, True)) == {"a", ("n", "b")}  # the cached layout went back too
    assert store["a"].sum() == 0


def test_multi_key_writes_land_together(store, server):
    store.update({"a": torch.ones(4, 2), "new": torch.arange(4.0), "m": {"x": torch.ones(4, 3)}})
    store[1:3] = TensorDict({"a": torch.full((2, 2), 7.0), "n": {"b": torch.tensor([5, 6])}}, [2])
    store.update_at_({"new": torch.tensor(9.0)}, 0)
    fresh = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert fresh["a"].tolist() == [[1, 1], [7, 7], [7, 7], [1, 1]]
    assert fresh["n", "b"].tolist() == [0, 5, 6, 0]
    assert fresh["new"].tolist() == [9, 1, 2, 3]
    assert fresh["m", "x"].shape == torch.Size([4, 3])


def test_update_over_maxmemory_writes_no_key(private_server):
    srv = private_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    store = TensorDictStore(batch_size=[1000], host=srv.host, port=srv.port)
    store["small"] = torch.ones(1000)
    before = _server_state(srv, store)
    with pytest.raises(redis.ResponseError, match="maxmemory"):  # 8 MB: over the limit, found at the last key
        store.update({"x": torch.ones(1000), "y": torch.ones(1000, 3), "z": torch.ones(1000, 2000)})
    assert _server_state(srv, store) == before
    assert set(store.keys()) == {"small"}


# ---------------------------------------------------------------------------- through TensorClass / TypedTensorDict
class _Typed(TypedTensorDict):
    small: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor


class _Sample(TensorClass):
    small: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor


_WRITES = {  # each fails at its last key, after writes that would succeed alone
    "update-over-maxmemory": (
        redis.ResponseError,
        "maxmemory",
        lambda w: w.update({"x": torch.ones(1000), "y": torch.ones(1000, 3), "z": torch.ones(1000, 2000)}),
    ),  # 8 MB: refused by the server
    "update_-missing-key-last": (KeyError, "zz", lambda w: w.update_({"x": torch.ones(1000), "zz": torch.ones(1000)})),
    "update_at_-missing-key-last": (
        KeyError,
        "zz",
        lambda w: w.update_at_({"x": torch.tensor(2.0), "y": torch.ones(3), "zz": torch.ones(())}, 5),
    ),
    "setitem-bad-new-key-last": (
        ValueError,
        r"a\.b",
        lambda w: w.__setitem__(
            7, TensorDict({"x": torch.tensor(3.0), "y": torch.ones(3), "new": torch.ones(2), "a.b": torch.ones(())}, [])
        ),
    ),
    "setitem-rows-bad-shape-last": (
        RuntimeError,
        "'y'",
        lambda w: w.__setitem__(
            torch.tensor([1, 9]), TensorDict({"x": torch.ones(2), "small": torch.zeros(2), "y": torch.ones(2, 4)}, [2])
        ),
    ),
}


@pytest.mark.parametrize("wrapper", [_Typed, _Sample], ids=["TypedTensorDict", "TensorClass"])
@pytest.mark.parametrize("name", list(_WRITES))
def test_wrapper_writes_are_one_script(private_server, wrapper, name):
    """Writes through a TensorClass or TypedTensorDict over a store reach the store's own multi-key writes
    (forwarded unwrapped): a failure at the last key, found here or by the server, leaves the server as it was."""
    error, match, write = _WRITES[name]
    srv = private_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    store = TensorDictStore(batch_size=[1000], host=srv.host, port=srv.port)
    store.update({"small": torch.ones(1000), "x": torch.zeros(1000), "y": torch.zeros(1000, 3)})
    wrapped = wrapper.from_tensordict(store, check=False)  # (z: a field not stored yet)
    before = _server_state(srv, store)
    with pytest.raises(error, match=match):
        write(wrapped)
    assert _server_state(srv, store) == before
    assert set(store.keys()) == {"small", "x", "y"}
    assert store["x"].sum() == 0 and store["y"].sum() == 0 and store["small"].sum() == 1000


@pytest.mark.parametrize("how", ["to_store", "from_dict"])
def test_a_new_store_whose_first_write_fails_leaves_no_key(private_server, how):
    srv = private_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    big = TensorDict({"a": torch.ones(1000), "z": torch.ones(1000, 2000)}, [1000])  # 8 MB: refused by the server
    assert srv.client().dbsize() == 0
    write = big.to_store if how == "to_store" else lambda **kw: TensorDictStore.from_dict(big, **kw)
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        write(host=srv.host, port=srv.port)
    assert srv.client().keys("*") == []  # no metadata, no staging key
