"""TensorDictStore is the stored layer over the Redis dialect: the dialect's transaction is one guarded script,
its layout is the layer's (no second cache to go stale), and store/ imports without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

redis = pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import NonTensorData, TensorDict  # noqa: E402
from tensorbatch.store import TensorDictStore  # noqa: E402
from tensorbatch.store._dialect import RedisDialect  # noqa: E402
from tensorbatch.stored import StoredTensorDict  # noqa: E402


@pytest.fixture
def store(server):
    out = TensorDictStore.from_tensordict(
        TensorDict({"a": torch.arange(8.0).reshape(4, 2), "n": {"b": torch.zeros(4, dtype=torch.int64)}}, [4]),
        **server.kwargs(),
    )
    yield out
    out.clear_redis()
    out.close()


def _data_keys(srv, store):
    return sorted(k.decode().rsplit(":", 1)[-1] for k in srv.client().keys(f"*{{{store._conn.td_id}}}:d:*"))


def test_a_store_is_a_stored_tensordict_over_the_redis_dialect(store):
    assert isinstance(store, StoredTensorDict)
    assert isinstance(store.dialect, RedisDialect) and store.dialect.name == "redis"
    nested = store["n"]
    assert type(nested) is TensorDictStore and nested.dialect is store.dialect  # (a view: one layout)
    assert nested.batch_size == (4,) and list(nested.keys()) == ["b"]
    assert store.dialect.describe(("n", "b")).endswith("key ('n', 'b'))")


def test_writes_of_a_transaction_reach_the_server_at_its_end(server, store):
    with store.dialect.transaction():
        store["c"] = torch.ones(4)
        store["n", "d"] = torch.full((4, 3), 2.0)
        assert _data_keys(server, store) == ["a", "n.b"]  # kept for one script
        assert store["n"].keys() >= {"d"}  # (the layout knows them already)
    assert _data_keys(server, store) == ["a", "c", "n.b", "n.d"]
    fresh = TensorDictStore.from_store(td_id=store._conn.td_id, **server.kwargs())
    assert torch.equal(fresh["n", "d"], torch.full((4, 3), 2.0))
    assert list(fresh.keys()) == ["a", "n", "c"]


def _write_then_fail(store):
    with store.dialect.transaction():
        store["c"] = torch.ones(4)
        del store["a"]
        raise ZeroDivisionError("late")


def test_a_failed_transaction_writes_nothing_and_forgets_its_entries(server, store):
    with pytest.raises(ZeroDivisionError, match="late"):
        _write_then_fail(store)
    assert _data_keys(server, store) == ["a", "n.b"]
    assert list(store.keys()) == ["a", "n"]  # the layout read again: as on the server
    assert torch.equal(store["a"], torch.arange(8.0).reshape(4, 2))


def test_a_refused_value_leaves_the_cached_layout(store):
    tree = store._conn.tree
    with pytest.raises(RuntimeError, match="batch"):
        store["c"] = torch.ones(3)  # batch size [4]: refused before any write
    assert store._conn.tree is tree and "c" not in store.keys()


def test_cache_metadata_false_sees_what_other_handles_write(server, store):
    live = TensorDictStore.from_store(td_id=store._conn.td_id, cache_metadata=False, **server.kwargs())
    store["n", "e"] = torch.ones(4)
    assert set(live["n"].keys()) == {"b", "e"}
    del store["n"]
    assert list(live.keys()) == ["a"]


@pytest.fixture
def trips(monkeypatch):
    """The number of round trips to the server so far (``Connection.run`` and ``Connection.read`` calls)."""
    from tensorbatch.store import _conn

    count = [0]
    for name in ("run", "read"):
        original = getattr(_conn.Connection, name)

        def counted(self, *args, _original=original, **kwargs):
            count[0] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(_conn.Connection, name, counted)
    return count


def test_rows_of_every_leaf_are_one_round_trip_and_one_script(store, trips):
    store["s"] = NonTensorData("hi", batch_size=[4])
    trips[0] = 0
    row = store[torch.tensor([3, 1])]  # tensor leaves' byte ranges and the non-tensor leaf: one request
    assert trips[0] == 1 and row["a"].tolist() == [[6.0, 7.0], [2.0, 3.0]] and row["s"] == "hi"
    store[1:3] = TensorDict({"a": torch.full((2, 2), -1.0), "n": {"b": torch.tensor([5, 6])}}, [2])
    store.update_at_({"a": torch.full((2,), 9.0), ("n", "b"): torch.tensor(7)}, 0)
    assert trips[0] == 3  # one script each
    assert store["a"][:3].tolist() == [[9.0, 9.0], [-1.0, -1.0], [-1.0, -1.0]]
    assert store["n", "b"].tolist() == [7, 5, 6, 0]


def test_cache_metadata_false_reads_the_layout_once_per_transaction(server, store, trips):
    live = TensorDictStore.from_store(td_id=store._conn.td_id, cache_metadata=False, **server.kwargs())
    trips[0] = 0
    live[2] = TensorDict({"a": torch.tensor([4.0, 5.0]), "n": {"b": torch.tensor(3)}}, [])
    assert trips[0] == 3  # the layout (2 round trips), then the script
    live.update({"x": torch.ones(4), "y": torch.zeros(4)})  # one transaction: sees the keys it adds
    assert set(store.keys()) == {"a", "n"} and set(live.keys()) == {"a", "n", "x", "y"}
    assert store["a"][2].tolist() == [4.0, 5.0] and store["n", "b"][2].item() == 3


def test_the_store_package_imports_without_a_cycle():
    """Every module of ``tensorbatch/store`` and the ones it imports (type-only imports too) form no cycle."""
    folder = Path(__file__).resolve().parents[2] / "tensorbatch" / "store"
    deps: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        found = deps.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found.update([node.module] if node.module else [a.name for a in node.names])

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for dep in deps.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    assert deps["_node"] >= {"_dialect", "_build"}
    assert [name for name in deps if name in reach(name)] == []
