"""Redis stores against a hostile server: no code runs because of what the server holds, and a client's
credentials survive copies without being shown (docs/security.md, "Redis stores").

A real server: the run's shared one (``tests/_redis_server.py``), or a private one for the ACL tests. Each test
uses its own store ids and checks that nothing outside the probe changed (no marker folder, the server's keys).
"""

from __future__ import annotations

import os
import pickle
import sys
import uuid
from pathlib import Path

import pytest
import torch
from _flavours import RefSample
from _redis_server import Server, shared_server, start_server

redis = pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import NonTensorData, NonTensorStack, TensorClass, TensorDict  # noqa: E402
from tensorbatch.store import LazyStackedTensorDictStore, StoreConnectionError, TensorDictStore  # noqa: E402
from tensorbatch.store._conn import client_options  # noqa: E402


class _Pair(TensorClass):
    x: torch.Tensor
    label: str


@pytest.fixture(scope="module")
def server() -> Server:
    return shared_server()


@pytest.fixture
def store(server):
    out = TensorDictStore.from_dict(
        {"x": torch.arange(4.0), "label": "plain"}, batch_size=[4], prefix="tb-hostile", **server.kwargs()
    )
    yield out
    out.clear_redis()
    out.close()


class _Marker:
    """Unpickling makes the folder ``path``: proof that code from the server ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def _plant_pickle(server, store, key: str, payload: object) -> None:
    """Another client rewrites a non-tensor leaf as a pickle (what any writer of the server can do)."""
    client = server.client()
    client.set(store._conn.data_key(key), pickle.dumps(payload))
    client.hset(store._conn.meta_key(key), "encoding", "pickle")


def _server_keys(server, store) -> dict[bytes, bytes | None]:
    client = server.client()
    keys = sorted(client.keys(f"tb-hostile:{{{store._conn.td_id}}}:*"))
    return {k: client.dump(k) for k in keys}


# ------------------------------------------------------------------------------------------ pickled values
def test_a_value_rewritten_as_pickle_is_not_unpickled(server, store, tmp_path):
    marker = tmp_path / "ran"
    _plant_pickle(server, store, "label", _Marker(marker))
    before = _server_keys(server, store)
    where = f"127.0.0.1:{server.port}/0"

    def fresh():
        return TensorDictStore.from_store(td_id=store._conn.td_id, prefix="tb-hostile", **server.kwargs())

    readers = {
        "get": lambda: fresh()["label"],
        "rows": lambda: fresh()[1:3],
        "to_tensordict": lambda: fresh().to_tensordict(),
        "copy": lambda: pickle.loads(pickle.dumps(fresh()))["label"],
        "no cached layout": lambda: TensorDictStore(
            td_id=store._conn.td_id, prefix="tb-hostile", batch_size=[4], cache_metadata=False, **server.kwargs()
        )["label"],
    }
    for name, read in readers.items():
        with pytest.raises(RuntimeError, match="allow_pickle=True") as info:
            read()
        message = str(info.value)
        for part in (where, "'tb-hostile'", "('label',)"):
            assert part in message, (name, message)
        assert not marker.exists(), f"{name}: the server's pickle ran"
    with pytest.raises(ValueError, match="not JSON"):  # a handle that read the layout before: no unpickling either
        store["label"]
    store = fresh()
    with pytest.raises(RuntimeError, match="allow_pickle"):  # an element write reads the value first
        store[0] = TensorDict(x=torch.tensor(9.0), label="y", batch_size=[])
    assert not marker.exists()
    assert _server_keys(server, store) == before  # refused writes left the server as it was
    assert store["x"].tolist() == [0.0, 1.0, 2.0, 3.0]  # tensor leaves still read


def test_opting_in_unpickles(server, store):
    _plant_pickle(server, store, "label", {1, 2})
    trusted = TensorDictStore.from_store(
        td_id=store._conn.td_id, prefix="tb-hostile", allow_pickle=True, **server.kwargs()
    )
    assert trusted["label"] == {1, 2}
    assert pickle.loads(pickle.dumps(trusted))["label"] == {1, 2}  # copies keep the opt-in


def test_non_json_values_need_the_opt_in_to_be_written(server, store):
    before = _server_keys(server, store)
    with pytest.raises(TypeError, match=r"\('s',\).*not a JSON value; pass allow_pickle=True"):
        store.set_non_tensor("s", {1, 2})
    with pytest.raises(TypeError, match="allow_pickle=True"):
        store["stack"] = NonTensorStack((1, 2), (3, 4), (5, 6), (7, 8))
    assert "s" not in store
    assert "stack" not in store
    assert _server_keys(server, store) == before
    with TensorDictStore(batch_size=[2], prefix="tb-hostile", allow_pickle=True, **server.kwargs()) as mine:
        mine.set_non_tensor("s", {1, 2})
        assert mine["s"] == {1, 2}
        with pytest.raises(RuntimeError, match="allow_pickle=True"):
            TensorDictStore.from_store(td_id=mine._conn.td_id, prefix="tb-hostile", **server.kwargs())["s"]
        mine.clear_redis()


def test_json_values_need_no_opt_in(server):
    td = TensorDict(a=torch.zeros(2, 2), batch_size=[2, 2])
    td["d"] = NonTensorData({"k": [1, None, "s"]}, batch_size=[2, 2])
    td["grid"] = NonTensorStack(NonTensorStack("a", "b"), NonTensorStack("c", "d"))
    with TensorDictStore.from_tensordict(td, prefix="tb-hostile", **server.kwargs()) as out:
        client = server.client()
        assert client.hget(out._conn.meta_key("grid"), "encoding") == b"json"  # a 2-d stack: no pickle either
        fresh = TensorDictStore.from_store(td_id=out._conn.td_id, prefix="tb-hostile", **server.kwargs())
        assert fresh["d"] == {"k": [1, None, "s"]}
        assert fresh["grid"] == [["a", "b"], ["c", "d"]]
        assert fresh[1, 0]["grid"] == "c"
        out.clear_redis()


# ------------------------------------------------------------------------------------------ class names
def test_from_store_never_imports_the_module_the_server_names(server, store, tmp_path, monkeypatch):
    module = f"tb_evil_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"import os\nos.mkdir({str(marker)!r})\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    server.client().set(store._conn.key("__tensorclass__"), f"{module}.Thing")
    with pytest.raises(LookupError, match=rf"records the TensorClass '{module}.Thing'.*tensorclass_cls=") as info:
        TensorDictStore.from_store(td_id=store._conn.td_id, prefix="tb-hostile", **server.kwargs())
    assert f"127.0.0.1:{server.port}/0" in str(info.value)
    assert not marker.exists()
    assert module not in sys.modules
    # a class of this process: found by its name; or given by the caller, whatever the server says
    server.client().set(store._conn.key("__tensorclass__"), f"{RefSample.__module__}.{RefSample.__qualname__}")
    with pytest.raises(ValueError, match="not fields of RefSample"):  # found by name: its own check of the keys
        TensorDictStore.from_store(td_id=store._conn.td_id, prefix="tb-hostile", **server.kwargs())
    plain = TensorDictStore.from_store(
        td_id=store._conn.td_id, prefix="tb-hostile", tensorclass_cls=_Pair, **server.kwargs()
    )
    assert type(plain) is _Pair
    assert plain.x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not marker.exists()


def test_a_recorded_tensorclass_defined_here_comes_back(server):
    sample = _Pair(x=torch.ones(3), label="a", batch_size=[3])
    with TensorDictStore.from_tensordict(sample, prefix="tb-hostile", **server.kwargs()) as out:
        back = TensorDictStore.from_store(td_id=out._conn.td_id, prefix="tb-hostile", **server.kwargs())
        assert type(back) is _Pair
        assert back.label == "a"
        out.clear_redis()


# ------------------------------------------------------------------------------------------ credentials
@pytest.fixture
def acl_server():
    """A private server whose only user is bob (password ``pw``): a connection without them fails."""
    srv = start_server()
    admin = srv.client()
    admin.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "~*", "+@all")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    yield srv
    srv.close()


def test_a_clients_credentials_survive_copies_and_are_never_shown(acl_server):
    url = f"redis://bob:pw@127.0.0.1:{acl_server.port}/0"
    client = redis.Redis.from_url(url, socket_timeout=5)
    store = TensorDictStore(client=client, batch_size=[3])
    store["a"] = torch.arange(3.0)
    copy = pickle.loads(pickle.dumps(store))
    assert copy["a"].tolist() == [0.0, 1.0, 2.0]
    copy["a"] += 1
    assert store["a"].tolist() == [1.0, 2.0, 3.0]
    lazy = LazyStackedTensorDictStore.from_lazy_stack(
        torch.stack([TensorDict(y=torch.zeros(2)), TensorDict(y=torch.ones(2))]).to_lazystack(), client=client
    )
    assert pickle.loads(pickle.dumps(lazy))[1]["y"].tolist() == [1.0, 1.0]
    for text in (repr(store), str(store), repr(copy), repr(lazy), repr(store["a"])):
        assert "pw" not in text
    with pytest.raises(StoreConnectionError) as info:  # no credentials: refused, and the error shows none
        TensorDictStore.from_store(
            td_id=store._conn.td_id, host="127.0.0.1", port=acl_server.port, password="wrong-pw", socket_timeout=5
        )
    assert "pw" not in str(info.value)
    assert f"127.0.0.1:{acl_server.port}/0" in str(info.value)
    store.clear_redis()
    lazy.clear_redis()


def test_tls_settings_are_carried():
    client = redis.Redis.from_url("rediss://bob:pw@localhost:6390/2?ssl_cert_reqs=required")
    options = client_options(client.connection_pool.connection_kwargs, client.connection_pool.connection_class)
    assert options["ssl"] is True
    assert options["ssl_cert_reqs"] == "required"
    assert options["username"] == "bob"
    assert options["password"] == "pw"
    assert all(name in ("ssl", "username", "password") or name.startswith("ssl_") for name in options)
    plain = redis.Redis(host="localhost", port=6390)
    assert client_options(plain.connection_pool.connection_kwargs, plain.connection_pool.connection_class) == {}
