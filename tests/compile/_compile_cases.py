"""Inputs, schema classes and the compile check shared by the fullgraph matrix and the dynamic-shape tests.

``check_fullgraph`` compiles with ``fullgraph=True`` (a graph break raises), then also asserts what the
issue asks to count: no entry in ``torch._dynamo.utils.counters["graph_break"]`` and exactly one frame
(one graph: ``CompileCounter.frame_count``) over two calls (the second one hits the cache), and values
equal to eager on fresh, equal inputs (in-place cases mutate their own copy).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend
from torch._dynamo.utils import counters

from tensorbatch import LazyStackedTensorDict, TensorClass, TensorDict, TypedTensorDict, is_tensor_collection

SKIP_INDUCTOR = pytest.mark.skipif(os.environ.get("TB_SKIP_INDUCTOR") == "1", reason="TB_SKIP_INDUCTOR=1")


class Pair(TensorClass):
    obs: torch.Tensor
    reward: torch.Tensor


class Labelled(TensorClass):
    obs: torch.Tensor
    label: str = "none"


class State(TypedTensorDict):
    obs: torch.Tensor
    reward: torch.Tensor


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_td(n: int = 4) -> TensorDict:
    g = _gen()
    return TensorDict(
        {"a": torch.randn(n, 3, generator=g), "nested": {"b": torch.randn(n, 2, generator=g)}}, batch_size=[n]
    )


def make_td2(n: int = 3) -> TensorDict:
    """Two batch dims ``[n, 4]``."""
    g = _gen(1)
    return TensorDict(
        {"a": torch.randn(n, 4, 3, generator=g), "nested": {"b": torch.randn(n, 4, generator=g)}}, batch_size=[n, 4]
    )


def make_pair(n: int = 4) -> Pair:
    g = _gen(2)
    return Pair(obs=torch.randn(n, 3, generator=g), reward=torch.randn(n, generator=g), batch_size=[n])


def make_state(n: int = 4) -> State:
    g = _gen(3)
    return State(obs=torch.randn(n, 3, generator=g), reward=torch.randn(n, generator=g), batch_size=[n])


def make_labelled(n: int = 4) -> Labelled:
    return Labelled(obs=torch.randn(n, 3, generator=_gen(4)), label="hi", batch_size=[n])


def make_lazy(n: int = 4) -> LazyStackedTensorDict:
    g = _gen(5)
    members = [
        TensorDict({"a": torch.randn(n, 3, generator=g), "nested": {"b": torch.randn(n, generator=g)}}, batch_size=[n])
        for _ in range(2)
    ]
    return LazyStackedTensorDict(*members, stack_dim=0)


def make_with_text(n: int = 4) -> TensorDict:
    return TensorDict({"a": torch.randn(n, 3, generator=_gen(6)), "text": "hello"}, batch_size=[n])


def assert_same(got: Any, want: Any) -> None:
    """Same type, batch size, keys and values (tensors closely; non-tensor values equal)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
    elif is_tensor_collection(want):
        assert got.batch_size == want.batch_size
        if isinstance(want, LazyStackedTensorDict):
            assert got.stack_dim == want.stack_dim
        keys = set(want.keys(True, True))
        assert set(got.keys(True, True)) == keys
        for key in keys:
            assert_same(got.get(key), want.get(key))
    else:
        assert got == want


def counter_for(backend: str) -> CompileCounter:
    return CompileCounter() if backend == "eager" else CompileCounterWithBackend(backend)


def check_fullgraph(fn: Callable[..., Any], make: Callable[[], Any], backend: str) -> None:
    """``fn(make())`` compiled with fullgraph: no graph break, one frame over two calls, eager's values."""
    torch._dynamo.reset()
    counters.clear()
    counter = counter_for(backend)
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    for _ in range(2):
        assert_same(compiled(make()), fn(make()))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counter.frame_count == 1, f"{counter.frame_count} frames: graph break or recompilation"
