"""TensorDictStore on a real Valkey/Redis server: the API, the server layout (differential against tensordict
0.15.3 both ways), pickling and fork, row reads and writes."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest
import torch
from _flavours import RefSample

redis = pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import TensorDict, TypedTensorDict  # noqa: E402
from tensorbatch.store import TensorDictStore  # noqa: E402


def _td() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(24.0).view(6, 4),
            "n": {"b": torch.arange(6, dtype=torch.int16)},
            "h": torch.ones(6, 2, dtype=torch.bfloat16),
        },
        [6],
    )


@pytest.fixture
def store(server):
    out = TensorDictStore.from_tensordict(_td(), **server.kwargs())
    yield out
    out.clear_redis()
    out.close()


def test_reads_and_layout(store, server):
    assert store.batch_size == torch.Size([6])
    assert torch.equal(store["a"], _td()["a"])
    assert store["h"].dtype == torch.bfloat16 and store["n", "b"].dtype == torch.int16
    client, tid = server.client(), store._conn.td_id
    assert client.hgetall(f"tensordict:{{{tid}}}:m:n.b") == {b"shape": b"[6]", b"dtype": b"torch.int16"}
    assert client.get(f"tensordict:{{{tid}}}:d:a") == _td()["a"].numpy().tobytes()
    assert client.smembers(f"tensordict:{{{tid}}}:__keys__") == {b"a", b"n.b", b"h"}
    assert client.get(f"tensordict:{{{tid}}}:__batch_size__") == b"[6]"


@pytest.mark.parametrize(
    "index",
    [
        2,
        -1,
        slice(1, 4),
        slice(0, 6, 2),
        torch.tensor([5, 0, 5, 3]),
        torch.tensor([True, False, True, True, False, True]),
        [1, 2, 3, 0, 4, 5, 1],
    ],
)
def test_row_reads_and_writes(store, index):
    ref = _td()
    assert (store[index] == ref[index]).all()
    new = ref[index].apply(lambda x: x * 0 - 7)
    store[index] = new
    ref[index] = new
    assert (store.to_tensordict() == ref).all()


def test_row_writes_follow_a_leaf_replaced_with_another_shape_or_dtype(store):
    store[1] = {"a": torch.full((4,), 3.0)}  # the leaf's row layout is cached by this write
    store["a"] = torch.zeros(6, 8, dtype=torch.float64)  # replaced: 64-byte rows instead of 16
    store[2] = {"a": torch.arange(8.0)}
    assert store["a"].dtype == torch.float64
    assert store["a"][2].tolist() == list(range(8)) and store["a"][[1, 3]].sum() == 0
    del store["a"]
    with pytest.raises(KeyError, match='key "a" not found'):
        store.set_at_("a", torch.ones(8), 0)  # a row write never finds a deleted leaf in the cache
    store[0] = {"a": torch.ones(3)}  # a new leaf, as in memory: zeros but the row written
    assert store["a"].tolist() == [[1.0] * 3] + [[0.0] * 3] * 5
    store["n"] = TensorDict({"b": torch.zeros(6, 2, dtype=torch.int32)}, [6])  # the node replaced
    store[5] = {"n": {"b": torch.tensor([7, 8], dtype=torch.int32)}}
    assert store["n", "b"][5].tolist() == [7, 8] and store["n", "b"][:5].sum() == 0


def test_threads_write_rows_through_one_handle(store):
    import threading

    errors: list[BaseException] = []

    def write(row: int) -> None:
        try:
            for i in range(50):
                store[row] = {"a": torch.full((4,), float(i)), "n": {"b": torch.tensor(i, dtype=torch.int16)}}
        except BaseException as e:  # (reported by the test thread)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(row,)) for row in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert (store["a"] == 49).all() and (store["n", "b"] == 49).all()


def test_handles_of_a_process_share_connections(store, server):
    client = server.client()
    before = len(client.client_list())
    handles = [TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs()) for _ in range(20)]
    for handle in handles:
        handle[0] = {"a": torch.ones(4)}
        assert handle[0]["a"].tolist() == [1.0] * 4
        handle.close()
    assert len(client.client_list()) <= before + 2  # no new connection per handle


def test_keys_with_a_dot_are_refused(store):
    with pytest.raises(ValueError, match=r"'x\.y'"):
        store["x.y"] = torch.zeros(6)
    with pytest.raises(ValueError, match=r"\('n', 'c\.d'\)"):
        store["n"] = TensorDict({"c.d": torch.zeros(6)}, [6])
    assert set(store.keys()) == {"a", "n", "h"}


def test_from_schema_allocates_on_the_server(server):
    store = TensorDict.from_schema(
        {"obs": ([84, 84, 3], torch.uint8), ("n", "r"): ([], torch.float32)},
        batch_size=[100],
        storage="redis",
        **server.kwargs(),
    )
    assert store["obs"].shape == torch.Size([100, 84, 84, 3]) and store["obs"].sum() == 0
    assert server.client().strlen(store._conn.data_key("obs")) == 100 * 84 * 84 * 3
    store[3] = TensorDict(obs=torch.ones(84, 84, 3, dtype=torch.uint8), n={"r": torch.ones(())})
    assert store["n", "r"][:5].tolist() == [0, 0, 0, 1, 0] and store["obs"][3].sum() == 84 * 84 * 3
    with pytest.raises(ValueError, match=r"a\.b"):
        TensorDictStore.from_schema({"a.b": ([], torch.float32)}, batch_size=[2], **server.kwargs())
    store.clear_redis()


def test_from_store_pickle_and_tensorclass(server):
    sample = RefSample(
        a=torch.zeros(3, 4, 5),
        b=torch.ones(3, 4, dtype=torch.int64),
        c=torch.zeros(3, 4, 1) > 0,
        nested=TensorDict(d=torch.zeros(3, 4, 2), batch_size=[3, 4]),
        batch_size=[3, 4],
    )
    store = TensorDictStore.from_tensordict(sample, **server.kwargs())
    back = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert type(back) is RefSample and back.b.sum() == 12
    copy = pickle.loads(pickle.dumps(store))
    copy["b"] += 1
    assert store["b"].sum() == 24
    with pytest.raises(KeyError, match="no TensorDictStore"):
        TensorDictStore.from_store(td_id="missing", **server.kwargs())
    store.clear_redis()


def test_typed_fill_of_an_empty_store_with_a_2d_batch(server):
    class State(TypedTensorDict):
        x: torch.Tensor
        y: torch.Tensor

    with TensorDictStore(batch_size=[2, 3], **server.kwargs()) as store:
        state = State.from_tensordict(store, check=False)
        state[0, 1] = State(x=torch.ones(4), y=torch.tensor(2.0), batch_size=[])
        assert store["x"].shape == torch.Size([2, 3, 4]) and store["x"][0, 1].tolist() == [1, 1, 1, 1]
        assert store["y"].sum() == 2
        store.clear_redis()


def test_to_store_context_manager_and_close(server):
    with _td().to_store(**server.kwargs()) as store:
        assert store["n", "b"].tolist() == list(range(6))
        store.clear_redis()
    with pytest.raises(RuntimeError, match="closed"):
        store["a"]


def _child_sum(payload: bytes, out: multiprocessing.Queue) -> None:
    store = pickle.loads(payload)
    out.put(float(store["a"].sum()))


def test_fork_and_spawn_workers_reconnect(store):
    store["a"]  # the parent's connection is open when the child forks
    for method in ("fork", "spawn"):
        ctx = multiprocessing.get_context(method)
        queue = ctx.Queue()
        proc = ctx.Process(target=_child_sum, args=(pickle.dumps(store), queue))
        proc.start()
        assert queue.get(timeout=60) == float(_td()["a"].sum())
        proc.join(timeout=30)
        assert proc.exitcode == 0


class _Rows(torch.utils.data.Dataset):
    def __init__(self, store):
        self.store = store

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return self.store[i]["a"]


def test_dataloader_with_fork_workers(store):
    store[0] = {"a": torch.ones(4)}  # the parent's connection is open (and held) when the workers fork
    loader = torch.utils.data.DataLoader(
        _Rows(store), batch_size=2, num_workers=2, multiprocessing_context="fork", timeout=60
    )
    rows = torch.cat(list(loader))
    assert rows.tolist() == [[1.0] * 4, *_td()["a"][1:].tolist()]
    assert store[0]["a"].tolist() == [1.0] * 4  # the parent's connection still works


def test_server_down_fails_fast_naming_server_and_store(private_server):
    import time

    srv = private_server()
    store = TensorDictStore(batch_size=[2], host=srv.host, port=srv.port)
    store["a"] = torch.zeros(2)
    srv.stop()
    start = time.monotonic()
    with pytest.raises(redis.ConnectionError, match=rf"{srv.host}:{srv.port}.*reading 'a'") as info:
        store["a"]
    assert time.monotonic() - start < 2.0
    assert store._conn.td_id in str(info.value)


# ---------------------------------------------------------------------------- differential (tensordict 0.15.3)
def test_tensordict_reads_ours_and_we_read_theirs(server):
    ts = pytest.importorskip("tensordict.store")
    import tensordict

    ours = TensorDictStore.from_tensordict(_td(), **server.kwargs())
    theirs = ts.TensorDictStore.from_store(td_id=ours._conn.td_id, host=server.host, port=server.port)
    try:
        for key in ("a", ("n", "b"), "h"):
            assert torch.equal(theirs[key], _td()[key])
        assert theirs.batch_size == torch.Size([6])
        ref = tensordict.TensorDict(
            {"x": torch.arange(10.0).view(5, 2), "m": {"y": torch.ones(5, dtype=torch.int8)}, "s": "text"}, [5]
        )
        written = ts.TensorDictStore.from_tensordict(ref, host=server.host, port=server.port)
        back = TensorDictStore.from_store(td_id=written._td_id, **server.kwargs())
        assert torch.equal(back["x"], ref["x"]) and torch.equal(back["m", "y"], ref["m", "y"])
        assert back["s"] == "text" and back.batch_size == torch.Size([5])
        assert torch.equal(back[torch.tensor([4, 1])]["x"], ref["x"][[4, 1]])
        back[1] = {"x": torch.tensor([-1.0, -2.0])}
        assert written["x"][1].tolist() == [-1.0, -2.0]
        written.clear_redis()
    finally:
        theirs.close()
        ours.clear_redis()
