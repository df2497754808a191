"""The lean walks dynamo traces (``_ops/traced.py``): compiled == eager, the generic engine only off plain trees.

Each case runs eagerly and compiled (eager backend, ``fullgraph=True`` where no error is expected) and
compares keys, batch sizes, names, devices and values. The lean walks must give exactly what the generic
engine gives, and hand it every tree or result they do not handle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo

from tensorbatch import NonTensorData, TensorDict, lazy_stack
from tensorbatch._ops import traverse

pytestmark = pytest.mark.slow


def make_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(4, 3, generator=g),
            "n": {"b": torch.randn(4, 2, generator=g), "m": {"c": torch.randn(4, 5, 1, generator=g)}},
            "d": torch.randn(4, generator=g),
        },
        batch_size=[4],
        names=["rows"],
    )


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
        return
    assert got.batch_size == want.batch_size and got.names == want.names and got.device == want.device
    assert list(got.keys(True, True)) == list(want.keys(True, True))
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"at {key}")
    assert not got.is_locked


def compiled(fn: Callable[..., Any], fullgraph: bool = True) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="eager", fullgraph=fullgraph)


CASES: dict[str, Callable[[TensorDict], Any]] = {
    "apply": lambda td: td.apply(lambda x: x * 2 + 1),
    "apply_other": lambda td: td.apply(lambda x, y: x - y, td * 3),
    "apply_feature_dims": lambda td: td.apply(lambda x: x.unsqueeze(-1) * 2),
    "mul_number": lambda td: td * 0.5,
    "add_int": lambda td: td + 2,
    "mul_0dim": lambda td: td.mul(td["d"].mean()),  # (td * tensor: see test_graph_breaks)
    "sub_td": lambda td: td - td.exp(),
    "rsub_chain": lambda td: (td - td * 0.1) / 2,
    "maximum_number": lambda td: td.maximum(0.0),  # no Python scalars for torch.maximum: the generic engine
    "sub_inplace_td": lambda td: td.clone().sub_(td * 0.1),
    "mul_inplace_number": lambda td: td.clone().mul_(0.9),
    "step": lambda td: td.clone().sub_(td.apply(lambda p: torch.tanh(p * td["a"].mean())) * 0.01),
}


@pytest.mark.parametrize("name", CASES)
def test_compiled_equals_eager(name: str) -> None:
    fn = CASES[name]
    assert_same(compiled(fn)(make_td()), fn(make_td()))


@pytest.mark.parametrize("name", ["apply", "apply_other", "mul_number", "sub_td", "sub_inplace_td"])
def test_plain_trees_skip_the_generic_engine(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """While dynamo traces, a plain tree never reaches the generic walks (their bytecodes are the cost)."""
    want = CASES[name](make_td())

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the generic engine was traced")

    fn = compiled(CASES[name])
    for walk in ("map_leaves", "flat_leaves", "flat_leaves_like", "apply_leaves"):
        monkeypatch.setattr(traverse, walk, refuse)
    import tensorbatch._base.values as values
    import tensorbatch._ops.pointwise as pointwise

    for module in (values, pointwise):
        for walk in ("map_leaves", "flat_leaves", "flat_leaves_like", "apply_leaves", "from_leaves"):
            if hasattr(module, walk):
                monkeypatch.setattr(module, walk, refuse)
    assert_same(fn(make_td()), want)


def test_apply_dropping_a_leaf_calls_fn_once_per_leaf() -> None:
    """A None result goes to the generic engine, which replays the results instead of calling fn again."""
    calls: list[tuple[int, ...]] = []

    def fn(x: torch.Tensor) -> torch.Tensor | None:
        calls.append(tuple(x.shape))
        return None if x.shape[-1] == 2 else x + 1

    eager = make_td().apply(fn)
    eager_calls = list(calls)
    calls.clear()
    got = compiled(lambda td: td.apply(fn), fullgraph=False)(make_td())
    assert_same(got, eager)
    assert "b" not in got["n"].keys()
    assert calls == eager_calls == [(4, 3), (4, 2), (4, 5, 1), (4,)]


def test_apply_result_not_fitting_the_batch_raises_as_eager() -> None:
    def bad(td: TensorDict) -> Any:
        return td.apply(lambda x: x[:2])

    with pytest.raises(RuntimeError, match="batch") as eager:
        bad(make_td())
    with pytest.raises(RuntimeError, match="batch") as got:
        compiled(bad, fullgraph=False)(make_td())
    assert str(got.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_apply_returning_tensordicts_matches_eager() -> None:
    def fn(td: TensorDict) -> Any:
        return td.apply(lambda x: TensorDict({"y": x}, batch_size=x.shape[:1]))

    assert_same(compiled(fn, fullgraph=False)(make_td()), fn(make_td()))


def test_key_sets_differ_raise_as_eager() -> None:
    def fn(td: TensorDict) -> Any:
        return td - td.exclude("d")

    with pytest.raises(KeyError) as eager:
        fn(make_td())
    with pytest.raises(KeyError) as got:
        compiled(fn, fullgraph=False)(make_td())
    assert str(got.value) == str(eager.value)


def test_trees_that_are_not_plain_take_the_generic_engine() -> None:
    """Non-tensor leaves, lazy stacks, Parameters: the same result as eager."""
    td = make_td()
    td["s"] = NonTensorData("x", batch_size=[4])
    for fn in (lambda t: t.apply(lambda x: x + 1), lambda t: t * 2, lambda t: t + t):
        assert_same(compiled(fn, fullgraph=False)(td), fn(td))
    stack = lazy_stack([make_td()[0], make_td()[1]])
    got = compiled(lambda t: t * 2, fullgraph=False)(stack)
    torch.testing.assert_close(got["n", "b"], stack["n", "b"] * 2)
    params = TensorDict({"w": torch.nn.Parameter(torch.ones(3))}, batch_size=[])
    assert_same(compiled(lambda t: t * 2, fullgraph=False)(params), params * 2)


@pytest.mark.parametrize("name", ["add", "mul_td", "clone", "exp", "zero_"])
def test_foreach_that_fails_is_not_traced(name: str) -> None:
    """An integer leaf beside a Parameter: the foreach kernel refuses the pair (autograd takes no integer dtype).

    Eager falls back leaf by leaf; dynamo cannot (the failure fails the trace), so no foreach is traced.
    """
    ops: dict[str, Callable[[TensorDict], Any]] = {
        "add": lambda t: t + 1,
        "mul_td": lambda t: t * t,
        "clone": lambda t: t.clone(),
        "exp": lambda t: t.exp(),
        "zero_": lambda t: t.clone().zero_(),
    }
    td = TensorDict({"i": torch.arange(4), "p": torch.nn.Parameter(torch.ones(4, 2))}, batch_size=[4])
    fn = ops[name]
    got, want = compiled(fn)(td), fn(td)
    assert_same(got, want)
    assert got["i"].dtype == want["i"].dtype and got["p"].requires_grad
