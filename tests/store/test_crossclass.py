"""The cross-class page's Redis rows (shared/seeds/crossclass-compatibility.txt): TensorClass (``MyTC``) and
TypedTensorDict (``State``) over a TensorDictStore: Build, Read, Write, Index, Clone, Stack, Iter, Update."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

pytest.importorskip("redis", reason="redis (the redis extra) is not installed")  # (tensorbatch.store needs it)

from tensorbatch import TensorClass, TensorDict, TypedTensorDict
from tensorbatch.store import TensorDictStore


class MyTC(TensorClass):
    a: Tensor
    b: Tensor


class State(TypedTensorDict):
    a: Tensor
    b: Tensor


def _data() -> TensorDict:
    return TensorDict(a=torch.arange(12.0).view(4, 3), b=torch.arange(20.0).view(4, 5), batch_size=[4])


@pytest.fixture(params=[MyTC, State], ids=["tensorclass", "typed"])
def wrapped(request, server):
    store = TensorDictStore.from_tensordict(_data(), **server.kwargs())
    yield request.param.from_tensordict(store), store
    store.clear_redis()


def test_build(wrapped):
    obj, _store = wrapped
    assert obj.batch_size == torch.Size([4]) and type(obj) in (MyTC, State)


def test_read(wrapped):
    obj, _ = wrapped
    assert torch.equal(obj.a, _data()["a"]) and obj.b.shape == torch.Size([4, 5])


def test_write(wrapped):
    obj, store = wrapped
    obj.a = torch.zeros(4, 3)
    assert store["a"].sum() == 0  # live: written to the server


def test_index(wrapped):
    obj, store = wrapped
    row = obj[2]
    assert type(row) is type(obj) and torch.equal(row.b, _data()["b"][2])
    obj[1:3] = type(obj)(a=torch.ones(2, 3), b=torch.ones(2, 5), batch_size=[2])
    assert store["a"][:, 0].tolist() == [0.0, 1.0, 1.0, 9.0]


def test_clone(wrapped):
    obj, store = wrapped
    copy = obj.clone()
    copy.a += 1
    assert torch.equal(store["a"], _data()["a"]) and torch.equal(copy.a, _data()["a"] + 1)


def test_stack(wrapped):
    obj, _ = wrapped
    stacked = torch.stack([obj, obj], 0)
    assert stacked.batch_size == torch.Size([2, 4]) and torch.equal(stacked.a[1], _data()["a"])


def test_iter(wrapped):
    obj, _ = wrapped
    rows = list(obj)
    assert len(rows) == 4 and torch.equal(rows[3].a, _data()["a"][3])


def test_update(wrapped):
    obj, store = wrapped
    obj.update({"b": torch.full((4, 5), 7.0)})
    assert (store["b"] == 7).all()
