"""torch.compile over TensorDict code: eager == compiled, and no graph break (R8, R11).

Each case compiles with ``fullgraph=True`` (a graph break raises) and counts frames with
``CompileCounter`` (one frame means one graph). Most cases use the eager backend (fast); two use
inductor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend

from tensorbatch import TensorDict

pytestmark = pytest.mark.slow


def make_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {"a": torch.randn(4, 3, generator=g), "nested": {"b": torch.randn(4, 2, generator=g)}}, batch_size=[4]
    )


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
        return
    assert got.batch_size == want.batch_size
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"at {key}")


def check_compiles(fn: Callable[[TensorDict], Any], counter: CompileCounter) -> None:
    """Eager and compiled agree, with one frame (no graph break); runs twice to hit the cache."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    for _ in range(2):
        assert_same(compiled(make_td()), fn(make_td()))
    assert counter.frame_count == 1, f"{counter.frame_count} frames: graph break or recompilation"


CASES: dict[str, Callable[[TensorDict], Any]] = {
    "getitem_add": lambda td: td["a"] + 1,
    "mul_scalar": lambda td: td * 2,
    "apply_relu": lambda td: td.apply(torch.relu),
    "index_0": lambda td: td[0],
    "slice": lambda td: td[1:3],
    "reshape_-1": lambda td: td.reshape(2, 2).reshape(-1),  # (reshape(-1) of a [4] batch is the TensorDict itself)
    "reshape_2_2": lambda td: td.reshape(2, 2),
    "view_-1": lambda td: td.view(2, 2).view(-1),
    "flatten": lambda td: td.flatten(0, -1),
    "unsqueeze_flatten": lambda td: td.unsqueeze(0).flatten(0, 1),
    "intermediate_apply": lambda td: (td * 2).apply(torch.relu),
    "index_then_apply": lambda td: td[0].apply(torch.relu),
    "nested_get": lambda td: td["nested", "b"] * 3,
    "nested_get_chain": lambda td: td.get(("nested", "b")) + td["nested"]["b"],
    "add_td": lambda td: td + td,
    "sub_method_tensor": lambda td: td.sub(td["a"][:, 0]),
    "sub_operator_tensor": lambda td: td - td["a"][:, 0],
    "truediv_operator_tensor": lambda td: td / (td["a"][:, 0].abs() + 1),
    "number_rsub": lambda td: 2 - td,
    "exp": lambda td: td.exp(),
    "sum_dim": lambda td: td.sum(0),
    "stack": lambda td: torch.stack([td, td], 1),
    "set": lambda td: td.clone().set("c", td["a"] + 1),
    "unbind": lambda td: td.unbind(0)[1],
    "construct": lambda td: TensorDict({"x": td["a"] * 2, "y": {"z": td["nested", "b"]}}, batch_size=[4]),
}


@pytest.mark.parametrize("fn", list(CASES.values()), ids=list(CASES))
def test_eager_backend_no_graph_break(fn: Callable[[TensorDict], Any]) -> None:
    check_compiles(fn, CompileCounter())


def test_inductor_pointwise_chain() -> None:
    def fn(td: TensorDict) -> TensorDict:
        out = (td * 2 + td.apply(torch.relu)).sub(td["nested", "b"].sum(-1))
        return out[1:]

    check_compiles(fn, CompileCounterWithBackend("inductor"))


def test_inductor_index_and_nested_get() -> None:
    def fn(td: TensorDict) -> torch.Tensor:
        row = td[0]
        return row["a"].sum() + row["nested", "b"].exp().sum() + td["a"][:, 0].mean()

    check_compiles(fn, CompileCounterWithBackend("inductor"))
