"""torch.vmap through pytree (no patching of torch): lazy stacks, non-tensor leaves, the checks on in_dims and
out_dims, dim names, foreach-free ops under vmap and compile, and the ensemble example of the seeds."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch import nn

from tensorbatch import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, lazy_stack


def make_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict({"a": torch.randn(5, 4, 3, generator=g), "n": {"b": torch.randn(5, 4, generator=g)}}, [5, 4])


# ---------------------------------------------------------------------------------------- lazy stacks
def test_vmap_over_the_stack_dim_gives_each_member() -> None:
    members = [TensorDict({"a": torch.full((3,), float(i)), "n": {"b": torch.ones(2) * i}}, []) for i in range(4)]
    stack = lazy_stack(members)
    seen = []

    def fn(td: Any) -> Any:
        seen.append((type(td).__name__, td.batch_size))
        return td * 2

    out = torch.vmap(fn)(stack)
    assert seen == [("TensorDict", torch.Size([]))]
    assert out.batch_size == torch.Size([4])
    torch.testing.assert_close(out["a"], torch.stack([m["a"] for m in members]) * 2)


def test_vmap_over_another_dim_keeps_a_lazy_stack_inside() -> None:
    stack = lazy_stack([TensorDict({"a": torch.randn(5, 3)}, [5]) for _ in range(4)], 1)  # batch [5, 4]
    seen = []

    def fn(td: Any) -> Any:
        seen.append((type(td).__name__, td.batch_size, td.stack_dim))
        return td + 1

    out = torch.vmap(fn)(stack)
    assert seen == [("LazyStackedTensorDict", torch.Size([4]), 0)]
    assert type(out) is LazyStackedTensorDict and out.batch_size == torch.Size([5, 4]) and out.stack_dim == 1
    torch.testing.assert_close(out["a"], stack["a"] + 1)


def _lazy(dim: int) -> LazyStackedTensorDict:
    g = torch.Generator().manual_seed(0)
    members = [
        TensorDict({"a": torch.randn(3, 2, generator=g), "n": {"b": torch.randn(3, generator=g)}}, [3])
        for _ in range(4)
    ]
    return lazy_stack(members, dim)


def _loss(t: Any) -> torch.Tensor:
    return (t["a"] ** 2).sum() + (t["n", "b"] * 3).sum()


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("transform", ["grad", "grad_and_value", "vjp", "jacrev", "jacfwd"])
def test_gradients_over_a_lazy_stack(dim: int, transform: str) -> None:
    """grad & co. see a lazy stack's members (its stacked leaves would be new tensors at each flatten)."""
    stack = _lazy(dim)
    func = torch.func
    got = {
        "grad": lambda: func.grad(_loss)(stack),
        "grad_and_value": lambda: func.grad_and_value(_loss)(stack)[0],
        "vjp": lambda: func.vjp(_loss, stack)[1](torch.tensor(1.0))[0],
        "jacrev": lambda: func.jacrev(_loss)(stack),
        "jacfwd": lambda: func.jacfwd(_loss)(stack),
    }[transform]()
    assert type(got) is LazyStackedTensorDict
    assert got.stack_dim == dim
    assert got.batch_size == stack.batch_size
    torch.testing.assert_close(got["a"], 2 * stack["a"])
    torch.testing.assert_close(got["n", "b"], torch.full_like(stack["n", "b"], 3.0))


def test_gradients_over_a_lazy_stack_inside_vmap_and_of_members_that_differ() -> None:
    stack = _lazy(0)  # batch [4, 3]; vmap over dim 1: the function gets lazy stacks of 4 members
    got = torch.vmap(torch.func.grad(_loss), in_dims=(1,))(stack)
    assert got.batch_size == torch.Size([3, 4])
    torch.testing.assert_close(got["a"], 2 * stack["a"].transpose(0, 1))
    ragged = lazy_stack([TensorDict({"a": torch.ones(2)}, []), TensorDict({"a": torch.ones(5)}, [])])
    grads = torch.func.grad(lambda t: sum((m["a"] * 2).sum() for m in t.tensordicts))(ragged)
    assert [m["a"].tolist() for m in grads.tensordicts] == [[2.0] * 2, [2.0] * 5]
    leaves, _ = torch.utils._pytree.tree_flatten(stack)  # outside a transform: the stacked leaves
    assert [tuple(x.shape) for x in leaves] == [(4, 3, 2), (4, 3)]


def test_vmap_over_a_heterogeneous_lazy_stack_raises() -> None:
    stack = lazy_stack([TensorDict({"a": torch.zeros(3)}, []), TensorDict({"a": torch.zeros(4)}, [])])
    with pytest.raises(RuntimeError, match="members differ in keys or shapes"):
        torch.vmap(lambda td: td)(stack)


# ---------------------------------------------------------------------------------------- non-tensor leaves
def test_non_tensor_leaves_follow_the_mapped_batch() -> None:
    td = TensorDict({"a": torch.arange(10.0).reshape(5, 2), "s": "hello", "n": {"t": "x"}}, [5])
    seen = []

    def fn(t: Any) -> Any:
        seen.append((t.batch_size, t.get("s").batch_size, t["n"].batch_size, t["s"], t["n", "t"]))
        return t * 2

    out = torch.vmap(fn)(td)
    assert seen == [(torch.Size([]), torch.Size([]), torch.Size([]), "hello", "x")]
    assert out.batch_size == torch.Size([5]) and out["s"] == "hello"
    assert type(out.get("s")) is NonTensorData and out.get("s").batch_size == torch.Size([5])
    assert out["n"].batch_size == torch.Size([5])
    torch.testing.assert_close(out["a"], td["a"] * 2)


def test_a_non_tensor_stack_of_different_values_cannot_be_mapped() -> None:
    td = TensorDict({"a": torch.zeros(3), "s": NonTensorStack("a", "b", "c")}, [3])
    with pytest.raises(RuntimeError, match="different values cannot follow"):
        torch.vmap(lambda t: t)(td)


# ---------------------------------------------------------------------------------------- checks
def test_out_dims_that_split_the_batch_raise() -> None:
    td = TensorDict({"a": torch.randn(5, 3), "n": {"b": torch.randn(5, 2)}}, [5])
    with pytest.raises(RuntimeError, match=r"entry 'b' of shape \[2, 5\] has vmap's dim \(size 5\) after the batch"):
        torch.vmap(lambda t: t, out_dims=-1)(td)


@pytest.mark.parametrize("keys", [("a",), ("a", "b")])
def test_out_dims_after_the_batch_dims_raise_with_leaves_of_one_shape(keys: tuple[str, ...]) -> None:
    """Leaves of one shape [4, 3] after out_dims=1: the dim in front is a feature dim, not a batch dim of 4."""
    td = TensorDict({k: torch.randn(3, 4) for k in keys}, [3])
    with pytest.raises(RuntimeError, match=r"entry 'a' of shape \[4, 3\] has vmap's dim \(size 3\) after the batch"):
        torch.vmap(lambda t: t * 2, out_dims=1)(td)
    deep = TensorDict({"a": torch.randn(3, 2, 4)}, [3, 2])  # out_dims=1 within the batch dims: batch [2, 3]
    out = torch.vmap(lambda t: t * 2, out_dims=1)(deep)
    assert out.batch_size == torch.Size([2, 3])
    torch.testing.assert_close(out["a"], deep["a"].transpose(0, 1) * 2)


def test_in_dims_beyond_the_batch_dims_raise() -> None:
    td = TensorDict({"a": torch.randn(5, 3)}, [5])
    with pytest.raises(ValueError, match=r"vmap over a TensorDict of batch_size \[5\]: the mapped dim is not"):
        torch.vmap(lambda t: t, in_dims=1)(td)


def test_negative_in_dims_landing_on_different_dims_raise() -> None:
    td = TensorDict({"a": torch.randn(5, 4, 4), "b": torch.randn(5, 4)}, [5, 4])
    with pytest.raises(ValueError, match=r"dim 2 of a tensor is mapped.*counts from each tensor's last dim"):
        torch.vmap(lambda t: t, in_dims=-1)(td)  # 'a' would map its feature dim, 'b' its batch dim 1


def test_in_dims_beyond_the_batch_dims_raise_under_chunk_size() -> None:
    # square leaves: losing dim 1 gives the shape that losing dim 0 gives; vmap maps chunks of the leaves
    td = TensorDict({"a": torch.arange(25.0).reshape(5, 5), "n": {"b": torch.arange(25.0).reshape(5, 5)}}, [5])
    with pytest.raises(ValueError, match="dim 1 of a tensor is mapped"):
        torch.vmap(lambda t: t * 2, in_dims=1, chunk_size=2)(td)
    out = torch.vmap(lambda t: t * 2, chunk_size=2)(td)
    torch.testing.assert_close(out["n", "b"], td["n", "b"] * 2)


def test_chunk_size_keeps_the_names_of_a_square_batch() -> None:
    td = TensorDict({"a": torch.arange(32.0).reshape(4, 4, 2)}, [4, 4], names=["x", "y"])
    seen = []
    torch.vmap(lambda t: (seen.append(t.names), t)[1], in_dims=1, chunk_size=3)(td)
    torch.vmap(lambda t: (seen.append(t.names), t)[1], in_dims=0, chunk_size=3)(td)
    assert seen == [["x"], ["x"], ["y"], ["y"]]


@pytest.mark.xfail(
    strict=True,
    reason="LIMITATION (README, Differences): pytree applies a negative in_dims to "
    "each tensor; tensordict counts it from the last batch dim. Undetectable when every leaf has "
    "the same number of feature dims",
)
def test_negative_in_dims_count_from_the_last_batch_dim() -> None:
    td = TensorDict({"a": torch.randn(5, 4, 3), "b": torch.randn(5, 4, 2)}, [5, 4])
    out = torch.vmap(lambda t: t.apply(lambda x: x.sum(0)), in_dims=-1)(td)  # -1: batch dim 1 in tensordict
    torch.testing.assert_close(out["a"], td["a"].sum(0))


def test_dim_names_follow_the_mapped_dim() -> None:
    td = TensorDict({"a": torch.randn(5, 4, 3)}, [5, 4], names=["b", "c"])
    seen = []
    out = torch.vmap(lambda t: (seen.append(t.names), t)[1])(td)
    assert seen == [["c"]]
    assert out.names == [None, "c"]
    torch.vmap(lambda t: (seen.append(t.names), t)[1], in_dims=1)(td)
    assert seen[-1] == ["b"]


# ---------------------------------------------------------------------------------------- compile
OPS = {
    "mul_scalar": lambda t: t * 2,
    "add_td": lambda t: t + t,
    "exp": lambda t: t.exp(),
    "exp_": lambda t: t.clone().exp_(),
    "zero_": lambda t: t.clone().zero_(),
    "clone": lambda t: t.clone(),
}


@pytest.mark.slow
@pytest.mark.parametrize("order", ["compile_of_vmap", "vmap_of_compile"])
@pytest.mark.parametrize("op", list(OPS))
def test_no_foreach_kernel_under_vmap_and_compile(op: str, order: str) -> None:
    torch._dynamo.reset()
    fn = OPS[op]
    td = make_td()
    if order == "compile_of_vmap":
        compiled = torch.compile(torch.vmap(fn), backend="eager", fullgraph=True)
    else:
        compiled = torch.vmap(torch.compile(fn, backend="eager", fullgraph=True))
    out, want = compiled(td), fn(td)
    assert out.batch_size == want.batch_size
    for key in want.keys(True, True):
        torch.testing.assert_close(out[key], want[key])


# ---------------------------------------------------------------------------------------- ensemble (seed)
def _ensemble(lazy: bool, compile_backend: str | None) -> None:
    torch.manual_seed(0)
    modules = [nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)) for _ in range(4)]
    empty = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).to("meta")
    params = TensorDict.from_modules(*modules, lazy_stack=lazy)

    def call(p: Any, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(empty):
            return empty(x)

    fn = torch.vmap(call, (0, None))
    if compile_backend is not None:
        torch._dynamo.reset()
        fn = torch.compile(fn, backend=compile_backend)
    x = torch.randn(6, 3)
    y = fn(params, x)
    torch.testing.assert_close(y, torch.stack([m(x) for m in modules]))
    y.sum().backward()
    if lazy:  # the lazy stack holds the modules' own parameters
        assert all(m[0].weight.grad is not None for m in modules)
    else:  # new stacked parameters: the modules' stay untouched
        assert params["0", "weight"].grad.shape == (4, 8, 3) and modules[0][0].weight.grad is None
        want = torch.autograd.grad(torch.stack([m(x) for m in modules]).sum(), modules[1][0].weight)[0]
        torch.testing.assert_close(params["0", "weight"].grad[1], want)
    assert empty[0].weight.device.type == "meta"  # restored after each call


@pytest.mark.parametrize("lazy", [False, True], ids=["dense", "lazy"])
def test_ensemble_example(lazy: bool) -> None:
    _ensemble(lazy, None)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TB_SKIP_INDUCTOR") == "1", reason="TB_SKIP_INDUCTOR=1")
@pytest.mark.parametrize("lazy", [False, True], ids=["dense", "lazy"])
def test_ensemble_example_compiled_on_inductor(lazy: bool) -> None:
    _ensemble(lazy, "inductor")


def test_compat_functorch_probes() -> None:
    from tensorbatch import _compat

    x = torch.zeros(3, 2)
    assert not _compat.is_batched(x) and not _compat.in_vmap()
    seen = []

    def probe(t: torch.Tensor) -> torch.Tensor:
        seen.append((bool(_compat.is_batched(t)), _compat.in_vmap(), _compat.batched_dim(t)))
        return t

    torch.vmap(probe, in_dims=1)(x)
    assert seen == [(True, True, (1, torch.Size([3, 2])))]


def test_a_tree_map_inside_vmap_may_drop_a_batch_dim() -> None:
    td = TensorDict({"a": torch.randn(4, 5, 3), "b": torch.randn(4, 5)}, [4, 5])
    inner = torch.utils._pytree.tree_map

    def fn(t: Any) -> Any:
        return inner(lambda x: x.sum(0), t)  # batched leaves lose their first logical dim

    out = torch.vmap(fn, in_dims=1)(td)
    assert out.batch_size == torch.Size([5])
    torch.testing.assert_close(out["a"], td["a"].sum(0))


def test_a_tree_map_inside_vmap_may_add_feature_dims() -> None:
    # the leaves still start with the batch size: it stays, inside vmap as outside (only vmap's own output
    # takes a new dim as a batch dim)
    td = TensorDict({"a": torch.randn(4, 3, 2), "b": torch.randn(4, 3)}, [4, 3])
    inner = torch.utils._pytree.tree_map
    seen = []

    def fn(t: Any) -> Any:
        out = inner(lambda x: x.unsqueeze(-1), t)
        seen.append(out.batch_size)
        return out

    out = torch.vmap(fn)(td)
    assert seen == [torch.Size([3])]
    assert out.batch_size == torch.Size([4, 3])
    torch.testing.assert_close(out["b"], td["b"].unsqueeze(-1))


# ---------------------------------------------------------------------------------------- out_dims=(0,)
def _write(t: Any) -> Any:
    t["r"] = t["a"].sum(-1)
    return t


@pytest.mark.parametrize("source", ["dense", "lazy"])
def test_out_dims_one_tuple_over_one_tensordict(source: str) -> None:
    # as over one tensor: torch broadcasts a 1-tuple out_dims only there; the root of the tree it broadcasts
    # over comes back as a 1-tuple (the frames above the unflatten tell; no patching of torch)
    members = [TensorDict({"a": torch.full((3,), float(i))}, []) for i in range(2)]
    for out_dims in (0, (0,)):
        td = lazy_stack(members) if source == "lazy" else torch.stack(members)
        out = torch.vmap(_write, (0,), out_dims)(td)
        assert out.batch_size == torch.Size([2])
        torch.testing.assert_close(out["r"], torch.tensor([0.0, 3.0]))


def test_out_dims_one_tuple_over_wrappers() -> None:
    from tensorbatch import TensorClass, TypedTensorDict

    class Pair(TensorClass):
        a: torch.Tensor
        r: torch.Tensor

    class State(TypedTensorDict):
        a: torch.Tensor
        r: torch.Tensor

    def write(t: Any) -> Any:
        t.r = t.a.sum(-1)
        return t

    for cls in (Pair, State):
        out = torch.vmap(write, (0,), (0,))(cls(a=torch.ones(2, 3), r=torch.zeros(2), batch_size=[2]))
        assert type(out) is cls
        assert out.batch_size == torch.Size([2])
        torch.testing.assert_close(out.r, torch.full((2,), 3.0))


def test_out_dims_one_tuple_leaves_other_trees_alone() -> None:
    td = make_td()
    # a tuple of outputs: its own 1-tuple; a tree map to ints: a TensorDict as before
    (out,) = torch.vmap(lambda t: (t * 2,), (0,), (0,))(td)
    assert out.batch_size == td.batch_size
    ints = torch.utils._pytree.tree_map(lambda x: 0, td)
    assert type(ints) is TensorDict
    assert ints["n", "b"] == 0
    with pytest.raises(ValueError, match="out_dims is not compatible"):
        torch.vmap(lambda t: t * 2, (0,), (0, 0))(td)
