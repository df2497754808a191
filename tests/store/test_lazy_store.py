"""LazyStackedTensorDictStore on a real server: a lazy stack whose elements differ in shape, its layout shared
with tensordict 0.15.3 (differential both ways), element views, whole-leaf reads and writes, pickling."""

from __future__ import annotations

import pickle

import pytest
import torch

pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from _messages import batch_size_refused

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack
from tensorbatch.store import LazyStackedTensorDictStore, TensorDictStore


def _local() -> LazyStackedTensorDict:
    return lazy_stack(
        [
            TensorDict({"x": torch.arange(3.0), "n": {"y": torch.tensor([1, 2])}}, []),
            TensorDict({"x": torch.arange(5.0) + 10, "n": {"y": torch.tensor([3, 4])}}, []),
        ]
    )


@pytest.fixture
def store(server):
    out = TensorDictStore.from_tensordict(_local(), **server.kwargs())  # a lazy stack gives the lazy store
    yield out
    out.clear_redis()
    out.close()


def test_build_read_and_layout(store, server):
    assert type(store) is LazyStackedTensorDictStore
    assert store.batch_size == torch.Size([2])
    assert store[0]["x"].tolist() == [0, 1, 2]
    assert store[1]["x"].tolist() == [10, 11, 12, 13, 14]
    assert store.get(("n", "y")).tolist() == [[1, 2], [3, 4]]  # homogeneous: one tensor
    assert [t.tolist() for t in store.get("x", as_list=True)] == [[0, 1, 2], [10, 11, 12, 13, 14]]
    client, conn = server.client(), store._state.conn
    assert client.get(conn.key("__type__")) == b"lazy_stack"
    assert client.get(conn.key("__count__")) == b"2"
    assert client.smembers(conn.key("__keys__")) == {b"x", b"n.y"}
    meta = client.hgetall(conn.meta_key("x"))
    assert meta[b"homogeneous"] == b"0"
    assert meta[b"shapes"] == b"[[3], [5]]"
    assert client.get(conn.data_key("x:idx")) == torch.tensor([0, 12, 32]).numpy().astype("<i8").tobytes()
    assert client.hgetall(conn.meta_key("n.y"))[b"homogeneous"] == b"1"


def test_element_views_write_through(store):
    element = store[1]
    element["x"] = torch.ones(5)
    element.set_("x", torch.tensor([1.0, 1.0, 7.0, 7.0, 1.0]))
    assert store[1]["x"].tolist() == [1, 1, 7, 7, 1]
    store[0] = TensorDict({"x": torch.full((3,), -1.0), "n": {"y": torch.tensor([0, 0])}}, [])
    assert store[0]["x"].tolist() == [-1, -1, -1]
    assert store.get(("n", "y")).tolist() == [[0, 0], [3, 4]]
    store[1].set_(("n", "y"), torch.tensor([8, 9]))
    assert store.get(("n", "y")).tolist() == [[0, 0], [8, 9]]
    with pytest.raises(ValueError, match=r"shape \[4\] into \('x',\) of element 1"):
        store[1]["x"] = torch.ones(4)  # each element keeps its shape on the server
    assert store[1]["x"].tolist() == [1, 1, 7, 7, 1]


def test_stack_level_keys(store, server):
    store["z"] = torch.arange(4.0).view(2, 2)
    store.set("m", lazy_stack([TensorDict(w=torch.zeros(2)), TensorDict(w=torch.ones(3))]))  # heterogeneous
    assert store[1]["m", "w"].tolist() == [1, 1, 1]
    assert store[0]["z"].tolist() == [0, 1]
    store.rename_key_("z", "z2")
    del store["n"]
    fresh = LazyStackedTensorDictStore.from_store(td_id=store._state.conn.td_id, **server.kwargs())
    assert sorted(fresh.keys(True, True), key=str) == [("m", "w"), "x", "z2"]
    assert fresh.get("z2").tolist() == [[0, 1], [2, 3]]
    with pytest.raises(TypeError, match="tensors only"):
        store["s"] = "text"


def test_clone_to_tensordict_pickle(store, server):
    local = store.clone()  # in memory, one round trip
    assert store.to_lazystack(0) is store  # (the base method: a lazy stack along its stack dim is itself)
    assert type(local) is LazyStackedTensorDict
    assert local[1]["x"].tolist() == [10, 11, 12, 13, 14]
    with pytest.raises(RuntimeError):
        store.to_tensordict()  # elements of different shapes do not densify (as a lazy stack in memory)
    assert store["n"].to_tensordict()["y"].tolist() == [[1, 2], [3, 4]]
    back = pickle.loads(pickle.dumps(store))
    store[0]["x"] = torch.full((3,), 5.0)  # a write after pickling is seen: same data
    assert back[0]["x"].tolist() == [5, 5, 5]
    element = pickle.loads(pickle.dumps(store[1]))
    assert element["x"].tolist() == [10, 11, 12, 13, 14]


def test_stack_dim_one(server):
    local = lazy_stack([TensorDict({"a": torch.full((3, 2), float(i))}, [3]) for i in range(4)], 1)
    store = LazyStackedTensorDictStore.from_lazy_stack(local, **server.kwargs())
    try:
        assert store.batch_size == torch.Size([3, 4])
        assert torch.equal(store["a"], local["a"])
        assert store[:, 2]["a"].tolist() == [[2, 2]] * 3
        store[:, 1] = TensorDict({"a": torch.full((3, 2), 9.0)}, [3])
        fresh = TensorDictStore.from_store(td_id=store._state.conn.td_id, **server.kwargs())
        assert type(fresh) is LazyStackedTensorDictStore
        assert fresh.stack_dim == 1
        assert fresh["a"][:, 1].tolist() == [[9, 9]] * 3
    finally:
        store.clear_redis()


def test_bad_input(server):
    with pytest.raises(ValueError, match="keys"):
        LazyStackedTensorDictStore.from_lazy_stack(
            lazy_stack([TensorDict(a=torch.zeros(1)), TensorDict(b=torch.zeros(1))]), **server.kwargs()
        )
    with pytest.raises(TypeError, match="LazyStackedTensorDict"):
        LazyStackedTensorDictStore.from_lazy_stack(TensorDict(a=torch.zeros(1)), **server.kwargs())
    with pytest.raises(NotImplementedError, match="from_lazy_stack"):
        LazyStackedTensorDictStore.from_dict({"a": torch.zeros(2)})
    with pytest.raises(KeyError, match="no LazyStackedTensorDictStore"):
        LazyStackedTensorDictStore.from_store(td_id="nothing-here", **server.kwargs())


# ---------------------------------------------------------------------------- differential (tensordict 0.15.3)
def test_tensordict_reads_ours_and_we_read_theirs(store, server):
    ts = pytest.importorskip("tensordict.store")
    import tensordict

    theirs = ts.LazyStackedTensorDictStore.from_store(td_id=store._state.conn.td_id, host=server.host, port=server.port)
    try:
        assert theirs[0]["x"].tolist() == [0, 1, 2]
        assert theirs[1]["x"].tolist() == [10, 11, 12, 13, 14]
        assert theirs[1]["n", "y"].tolist() == [3, 4]
        store[1]["x"] = torch.zeros(5)
        assert theirs[1]["x"].tolist() == [0, 0, 0, 0, 0]
    finally:
        theirs.close()
    ref = tensordict.lazy_stack(
        [
            tensordict.TensorDict(a=torch.zeros(2, 3)),
            tensordict.TensorDict(a=torch.ones(2, 4)),
            tensordict.TensorDict(a=torch.full((2, 1), 2.0)),
        ],
        0,
    )
    written = ts.LazyStackedTensorDictStore.from_lazy_stack(ref, host=server.host, port=server.port)
    try:
        back = TensorDictStore.from_store(td_id=written._td_id, **server.kwargs())
        assert type(back) is LazyStackedTensorDictStore
        assert back.batch_size == torch.Size([3])
        for i in range(3):
            assert torch.equal(back[i]["a"], ref[i]["a"])
        back[2]["a"] = torch.full((2, 1), 5.0)
        assert written[2]["a"].tolist() == [[5.0], [5.0]]
    finally:
        written.clear_redis()
        written.close()


def test_a_failed_element_write_writes_nothing(store, server):
    client, conn = server.client(), store._state.conn
    before = client.smembers(conn.key("__keys__"))
    with pytest.raises(ValueError, match="cannot contain"):  # found at the second key: the first is not written
        store[0]["new"] = TensorDict({"ok": torch.zeros(2), "a.b": torch.zeros(1)}, [])
    assert client.smembers(conn.key("__keys__")) == before
    assert not client.exists(conn.data_key("new.ok"))
    assert sorted(store.keys(True, True), key=str) == [("n", "y"), "x"]  # the layout was read again


def test_elements_are_stored_nodes(store):
    """Each element is the stored layer over its element dialect: entries are the stack's, locks the element's."""
    from tensorbatch.stored import StoredTensorDict

    element = store[0]
    assert isinstance(element, StoredTensorDict)
    element["n"] = TensorDict({"y": torch.tensor([7, 7]), "z": torch.ones(2)}, [])  # merged: the stack's node
    assert store.get(("n", "y")).tolist() == [[7, 7], [3, 4]]
    assert store[1]["n", "z"].tolist() == [0, 0]  # a new leaf is every element's (zeros elsewhere)
    element.lock_()
    assert store["n"][0].is_locked and not store["n"][1].is_locked  # any handle on the stack sees it
    element.unlock_()
    with pytest.raises(RuntimeError, match="from one element"):
        del element["x"]
    element.names = None  # (nothing recorded: no names is accepted, a name refused)
    with element:  # a plain with-block leaves the stack's connection open
        pass
    assert store[0]["x"].tolist() == [0, 1, 2]
    copies = pickle.loads(pickle.dumps([store, store[1]]))
    assert copies[1]["x"].tolist() == [10, 11, 12, 13, 14]
    assert copies[1]._state is copies[0].tensordicts[1]._state  # pickled together: one layout state


def test_elements_record_no_dim_names(server):
    local = lazy_stack([TensorDict({"a": torch.zeros(3, 2)}, [3]), TensorDict({"a": torch.ones(3, 1)}, [3])])
    store = LazyStackedTensorDictStore.from_lazy_stack(local, **server.kwargs())
    try:
        with pytest.raises(RuntimeError, match="_StoreElement cannot name its batch dims"):
            store[0].names = ["t"]
        with pytest.raises(RuntimeError, match="cannot name its batch dims"):
            store.names = ["s", "t"]
        assert store.names == [None, None]
        store.batch_size = [2]  # the elements' batch size is one for all (the server records it)
        assert store[1].batch_size == torch.Size([]) and store.batch_size == torch.Size([2])
        with pytest.raises(RuntimeError, match=batch_size_refused("a", [3, 2], [4])):
            store[0].batch_size = [4]
    finally:
        store.clear_redis()
