"""torch.export of functions taking and returning TensorDicts, TensorClasses and TypedTensorDicts (issue 31).

Strict and non-strict, static and dynamic batch dims (one and two) on the inputs and on the outputs: the exported
program's module gives eager's values, on another batch size when the dims are dynamic. Strict export traces
with dynamo, which makes the output tree spec a constant: the context of a node traced there is a plain tuple
without sizes (the leaves tell them), and a dynamic input dim is not compared with the example's size (that
would specialise it: ``Constraints violated``). Also: ``compile(vmap(to_module))`` over TensorDictParams.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from _compile_cases import Pair, State, assert_same
from torch.export import Dim, ShapesCollection, export
from torch.utils._pytree import tree_leaves

from tensorbatch import TensorDict, lazy_stack
from tensorbatch.nn import TensorDictParams


def make_td(*shape: int) -> TensorDict:
    g = torch.Generator().manual_seed(sum(shape))
    return TensorDict(
        {"a": torch.randn(*shape, 3, generator=g), "nested": {"b": torch.randn(*shape, generator=g)}},
        batch_size=list(shape),
    )


def make_pair(*shape: int) -> Pair:
    g = torch.Generator().manual_seed(sum(shape))
    return Pair(
        obs=torch.randn(*shape, 3, generator=g), reward=torch.randn(*shape, generator=g), batch_size=list(shape)
    )


def make_state(*shape: int) -> State:
    g = torch.Generator().manual_seed(sum(shape))
    return State(
        obs=torch.randn(*shape, 3, generator=g), reward=torch.randn(*shape, generator=g), batch_size=list(shape)
    )


KINDS: dict[str, Callable[..., Any]] = {"tensordict": make_td, "tensorclass": make_pair, "typed": make_state}


class Step(torch.nn.Module):
    """Arithmetic and a slice of the batch: the output's batch size depends on the input's."""

    def forward(self, t: Any) -> Any:
        return (t * 2 + 1)[1:]


def _dynamic(example: Any, nd: int) -> ShapesCollection:
    """Every batch dim of every leaf dynamic (min 3: a slice [1:] of size 2 would be specialised to 1)."""
    dims = [Dim(f"batch{i}", min=3, max=64) for i in range(nd)]
    shapes = ShapesCollection()
    for leaf in tree_leaves(example):
        shapes[leaf] = {i: dims[i] for i in range(nd)}
    return shapes


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non_strict"])
@pytest.mark.parametrize("shape", [(4,), (4, 5)], ids=["one_dim", "two_dims"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_export_static_batch(kind: str, shape: tuple[int, ...], strict: bool) -> None:
    make = KINDS[kind]
    ep = export(Step(), (make(*shape),), strict=strict)
    got = ep.module()(make(*shape))
    assert type(got) is type(make(*shape))
    assert got.batch_size == torch.Size((shape[0] - 1, *shape[1:]))
    assert_same(got, Step()(make(*shape)))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non_strict"])
@pytest.mark.parametrize(("shape", "other"), [((4,), (7,)), ((4, 5), (6, 3))], ids=["one_dim", "two_dims"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_export_dynamic_batch(kind: str, shape: tuple[int, ...], other: tuple[int, ...], strict: bool) -> None:
    # the dynamic input dims stay symbolic (no 'Constraints violated'), and the output's batch size follows
    make = KINDS[kind]
    example = make(*shape)
    ep = export(Step(), (example,), strict=strict, dynamic_shapes=_dynamic(example, len(shape)))
    for size in (shape, other):
        got = ep.module()(make(*size))
        assert type(got) is type(example)
        assert got.batch_size == torch.Size((size[0] - 1, *size[1:]))
        assert_same(got, Step()(make(*size)))


class Build(torch.nn.Module):
    """A TensorDict built from a plain tensor, its batch size one SymInt under a dynamic export."""

    def forward(self, x: torch.Tensor) -> TensorDict:
        return TensorDict({"y": x * 2, "s": {"z": x.sum(-1)}}, batch_size=x.shape[0])


class BuildPair(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Pair:
        return Pair(obs=x + 1, reward=x.sum(-1), batch_size=x.shape[0])


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non_strict"])
@pytest.mark.parametrize("module", [Build(), BuildPair()], ids=["tensordict", "tensorclass"])
def test_export_dynamic_batch_on_the_output(module: torch.nn.Module, strict: bool) -> None:
    ep = export(module, (torch.randn(4, 3),), strict=strict, dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    for n in (4, 9):
        x = torch.randn(n, 3)
        got = ep.module()(x)
        assert got.batch_size == torch.Size([n])
        assert_same(got, module(x))


def test_export_nested_list_dynamic_shapes_and_names() -> None:
    # our own form of dynamic_shapes (a TensorDict is one node: its leaves in order), and dim names kept
    class Named(torch.nn.Module):
        def forward(self, td: TensorDict) -> TensorDict:
            return TensorDict({"x": td["a"] * 2, "s": {"y": td["nested", "b"]}}, batch_size=td.batch_size, names=["n"])

    dim = Dim("n", min=2, max=64)
    ep = export(Named(), (make_td(4),), strict=True, dynamic_shapes=([{0: dim}, {0: dim}],))
    got = ep.module()(make_td(6))
    assert got.batch_size == torch.Size([6])
    assert got.names == ["n"]
    assert got["s"].names == ["n"]
    assert_same(got, Named()(make_td(6)))


def test_strict_export_saved_and_loaded() -> None:
    # the output spec (a context without sizes) goes through torch.export's JSON form and back
    example = make_td(4)
    ep = export(Step(), (example,), strict=True, dynamic_shapes=_dynamic(example, 1))
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    assert_same(loaded.module()(make_td(8)), Step()(make_td(8)))


def test_strict_export_returning_a_lazy_stack() -> None:
    class Stack(torch.nn.Module):
        def forward(self, td: TensorDict) -> Any:
            return lazy_stack([td, td + 1])

    example = make_td(4)
    ep = export(Stack(), (example,), strict=True, dynamic_shapes=_dynamic(example, 1))
    got, want = ep.module()(make_td(6)), Stack()(make_td(6))
    assert type(got) is type(want)
    assert got.batch_size == torch.Size([2, 6])
    assert_same(got, want)


def test_vmap_inside_strict_export_names_the_limit() -> None:
    # the trace keeps no sizes: which dim vmap removed cannot be told, and it says so rather than guess
    class Mapped(torch.nn.Module):
        def forward(self, td: TensorDict) -> Any:
            return torch.vmap(lambda t: t * 2)(td)

    with pytest.raises(RuntimeError, match=r"strict=False"):
        export(Mapped(), (make_td(4, 5),), strict=True)
    ep = export(Mapped(), (make_td(4, 5),), strict=False)
    assert_same(ep.module()(make_td(4, 5)), Mapped()(make_td(4, 5)))


# ------------------------------------------------------------------------------ compile(vmap(to_module))
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_vmap_over_to_module(backend: str) -> None:
    # TensorDictParams' unflatten gives its TensorDict under dynamo (no nn.Module built in a compiled region:
    # dynamo wraps nn.Module.__init__ once anything was compiled, and cannot trace the wrapper)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 5))
    td = TensorDict.from_module(module)
    params = TensorDictParams(td.data.expand(10).clone())
    params.apply_(lambda p: p.normal_())

    def call(x: torch.Tensor, p: Any) -> torch.Tensor:
        with p.to_module(module):
            return module(x)

    vmapped = torch.vmap(call, (None, 0))
    x = torch.randn(2, 3)
    want = vmapped(x, params)
    torch._dynamo.reset()
    compiled = torch.compile(vmapped, backend=backend, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, params), want)
    assert (TensorDict.from_module(module) == td).all()  # the module's own parameters are back
    assert want.shape == (10, 2, 5)
