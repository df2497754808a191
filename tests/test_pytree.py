"""TensorDict as a torch pytree node: flatten/unflatten, tree_map and torch.vmap (R8)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

from tensorbatch import TensorDict


def make_td(**kwargs: Any) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(5, 3, 2, generator=g),
            "nested": {
                "b": torch.randn(5, 3, generator=g),
                "deeper": {"c": torch.randn(5, 3, 4, 1, generator=g)},
            },
        },
        batch_size=[5, 3],
        **kwargs,
    )


PATHS = (("a",), ("nested", "b"), ("nested", "deeper", "c"))


def assert_same_tree(got: Any, want: TensorDict, *, names: bool = True) -> None:
    assert type(got) is type(want)
    assert got.batch_size == want.batch_size
    assert got.device == want.device
    if names:
        assert got.names == want.names
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True):
        if isinstance(want[key], TensorDict):
            assert got[key].batch_size == want[key].batch_size, key
            assert got[key].device == want[key].device, key
            if names:
                assert got[key].names == want[key].names, key
        else:
            torch.testing.assert_close(got[key], want[key], msg=f"at {key}")


# ---------------------------------------------------------------------------------------- flatten
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"names": ["x", "y"]}, {"device": "cpu"}, {"device": "cpu", "names": ["x", None]}],
    ids=repr,
)
def test_flatten_unflatten_roundtrip(kwargs: dict[str, Any]) -> None:
    td = make_td(**kwargs)
    leaves, spec = pytree.tree_flatten(td)
    assert len(leaves) == 3
    assert all(isinstance(x, torch.Tensor) for x in leaves)
    assert {id(x) for x in leaves} == {id(td[p]) for p in PATHS}  # no copies
    out = pytree.tree_unflatten(leaves, spec)
    assert out is not td
    assert_same_tree(out, td)


def test_flatten_with_path_names_keys() -> None:
    td = make_td()
    pairs, _ = pytree.tree_flatten_with_path(td)
    paths = {pytree.keystr(path) for path, _ in pairs}
    # a nested leaf's path is one mapping key holding the nested key (as export's input sources name it)
    assert paths == {"['a']", "[('nested', 'b')]", "[('nested', 'deeper', 'c')]"}


def test_one_node_whose_children_are_all_the_leaves() -> None:
    # nested TensorDicts are inlined: pytree pays its per-node work once per TensorDict, not per nested one
    td = make_td()
    leaves, spec = pytree.tree_flatten(td)
    assert spec.num_children == 3
    assert all(child.is_leaf() for child in spec.children_specs)
    assert [id(x) for x in leaves] == [id(td[p]) for p in PATHS]  # depth first, in key order


def test_key_paths_are_mapping_keys_that_find_their_leaf() -> None:
    # torch.export accepts mapping keys only (with sequence and attribute keys), and reads leaves through them
    td = make_td()
    pairs, _ = pytree.tree_flatten_with_path(td)
    for (key,), leaf in pairs:
        assert isinstance(key, pytree.MappingKey)
        assert key.get(td) is leaf
    assert [k.key for (k,), _ in pairs] == ["a", ("nested", "b"), ("nested", "deeper", "c")]


def test_export_reads_nested_leaves() -> None:
    td = make_td()

    class Module(torch.nn.Module):
        def forward(self, t: TensorDict) -> torch.Tensor:
            return t["a"].sum(-1) + t["nested", "b"] + t["nested", "deeper", "c"].sum((-2, -1))

    program = torch.export.export(Module(), (td,))
    assert len(program.graph_signature.user_inputs) == 3
    torch.testing.assert_close(program.module()(td), Module()(td))
    out = torch.export.export(_Double(), (td,)).module()(td)
    assert_same_tree(out, td * 2)


class _Double(torch.nn.Module):
    def forward(self, t: TensorDict) -> TensorDict:
        return t * 2


def test_flatten_inside_containers() -> None:
    td = make_td()
    tree = {"td": td, "list": [td["a"], td], "x": 3}
    leaves, spec = pytree.tree_flatten(tree)
    assert len(leaves) == 3 + 1 + 3 + 1
    out = pytree.tree_unflatten(leaves, spec)
    assert_same_tree(out["td"], td)
    assert_same_tree(out["list"][1], td)
    assert out["x"] == 3


def test_unflatten_with_placeholders_keeps_batch_size() -> None:
    # vmap unflattens in_dims with ints / None in place of the tensors
    td = make_td(names=["x", "y"])
    _, spec = pytree.tree_flatten(td)
    out = pytree.tree_unflatten([0, None, 1], spec)
    assert out.batch_size == td.batch_size
    assert out["nested"].batch_size == td.batch_size
    assert out["a"] == 0
    assert out["nested", "b"] is None
    assert out["nested", "deeper", "c"] == 1


def test_unflatten_reconciles_batch_size() -> None:
    td = make_td(names=["x", "y"])
    leaves, spec = pytree.tree_flatten(td)
    out = pytree.tree_unflatten([x[0] for x in leaves], spec)  # every leaf lost the first batch dim
    assert out.batch_size == torch.Size([3])
    assert out["nested", "deeper"].batch_size == torch.Size([3])
    assert out.names == ["y"]  # the removed dim's name goes with it
    out = pytree.tree_unflatten([x.unsqueeze(0) for x in leaves], spec)  # every leaf gained one
    assert out.batch_size == torch.Size([1, 5, 3])
    assert out["nested"].batch_size == torch.Size([1, 5, 3])


def test_empty_td_roundtrip() -> None:
    td = TensorDict({}, batch_size=[2, 3])
    leaves, spec = pytree.tree_flatten(td)
    assert leaves == []
    out = pytree.tree_unflatten(leaves, spec)
    assert out.batch_size == td.batch_size
    assert len(out.keys()) == 0


def test_empty_nested_td_roundtrip() -> None:
    td = TensorDict({"a": torch.zeros(2, 3), "empty": {}}, batch_size=[2])
    out = pytree.tree_unflatten(*pytree.tree_flatten(td))
    assert out["empty"].batch_size == torch.Size([2])
    assert out["empty"].is_empty()
    assert out["a"].shape == (2, 3)


def test_treespec_sizes_are_hints_not_structure() -> None:
    # as two tensors of different shapes: an exported program checks another batch size's spec against its own
    def spec(n: int, **kwargs: Any) -> Any:
        return pytree.tree_flatten(
            TensorDict({"a": torch.zeros(n, 2), "nested": {"b": torch.zeros(n)}}, [n], **kwargs)
        )[1]

    assert spec(4) == spec(7)
    assert not spec(4) != spec(7)  # noqa: SIM202 (__ne__ is under test)
    assert hash(spec(4).context) == hash(spec(7).context)
    assert (
        spec(4) != pytree.tree_flatten(TensorDict({"a": torch.zeros(4, 2), "nested": {"c": torch.zeros(4)}}, [4]))[1]
    )  # another key
    assert (
        spec(4) != pytree.tree_flatten(TensorDict({"a": torch.zeros(4, 2), "nested": {"b": torch.zeros(4)}}, []))[1]
    )  # another number of batch dims
    assert spec(4) != spec(4, names=["n"])
    assert (
        spec(4) != pytree.tree_flatten(TensorDict({"a": torch.zeros(4, 2, 1), "nested": {"b": torch.zeros(4)}}, [4]))[1]
    )  # another number of feature dims
    leaves, _ = pytree.tree_flatten(TensorDict({"a": torch.ones(6, 2), "nested": {"b": torch.ones(6)}}, [6]))
    out = pytree.tree_unflatten(leaves, spec(4))  # the leaves tell the batch size
    assert out.batch_size == torch.Size([6])
    assert out["nested"].batch_size == torch.Size([6])


@pytest.mark.parametrize("device", [None, "cpu"])
def test_treespec_serialization_roundtrip(device: Any) -> None:
    td = make_td(device=device, names=["x", "y"])
    leaves, spec = pytree.tree_flatten(td)
    spec2 = pytree.treespec_loads(pytree.treespec_dumps(spec))
    assert spec2 == spec
    assert_same_tree(pytree.tree_unflatten(leaves, spec2), td)


# ---------------------------------------------------------------------------------------- tree_map
def test_tree_map() -> None:
    td = make_td(device="cpu", names=["x", "y"])
    out = pytree.tree_map(lambda x: x * 2 + 1, td)
    assert_same_tree(out, td.apply(lambda x: x * 2 + 1))
    doubled = pytree.tree_map(lambda x: x.double(), {"td": td, "t": torch.ones(2)})
    assert doubled["td"].dtype == torch.float64
    assert doubled["td"].names == ["x", "y"]


def test_tree_map_two_trees() -> None:
    td, other = make_td(), make_td() + 1
    out = pytree.tree_map(torch.add, td, other)
    assert_same_tree(out, td + other)


def test_tree_map_reducing_leaves_changes_batch_size() -> None:
    # every leaf loses its first batch dim: the result's batch size follows
    out = pytree.tree_map(lambda x: x.sum(0), make_td())
    assert out.batch_size == torch.Size([3])
    assert out["nested", "deeper"].batch_size == torch.Size([3])


def test_tree_map_changing_feature_dims_keeps_batch_size() -> None:
    # every leaf still starts with the batch size: it is kept (with the names), as in tensordict
    td = make_td(names=["x", "y"])
    out = pytree.tree_map(lambda x: x.unsqueeze(-1), td)
    assert out.batch_size == torch.Size([5, 3])
    assert out.names == ["x", "y"]
    assert out["nested", "deeper"].batch_size == torch.Size([5, 3])
    assert out["a"].shape == (*td["a"].shape, 1)


def test_jacobian_leaves_keep_batch_size() -> None:
    # jacrev/jacfwd append the input's shape to every output leaf: the batch size stays the output's
    td = TensorDict({"a": torch.arange(6.0).reshape(2, 3), "b": torch.arange(8.0).reshape(2, 4)}, [2])
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        jac = transform(lambda t: t.apply(lambda x: x * 2))(td)
        assert jac.batch_size == torch.Size([2])
        assert jac["a"].batch_size == torch.Size([2])
        assert jac["b", "b"].shape == (2, 4, 2, 4)
        torch.testing.assert_close(jac["a", "a"].reshape(6, 6), 2 * torch.eye(6))
        torch.testing.assert_close(jac["a", "b"], torch.zeros(2, 3, 2, 4))


@pytest.mark.parametrize("size", [4, 3], ids=["batch_4_3", "square_3_3"])
def test_jacobians_inside_vmap_keep_batch_size(size: int) -> None:
    # inside vmap too, jacrev/jacfwd/hessian put the jacobian's dims in front of every leaf: the batch size stays
    g = torch.Generator().manual_seed(0)
    td = TensorDict({"a": torch.randn(size, 3, 2, generator=g), "b": torch.randn(size, 3, generator=g)}, [size, 3])
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        jac = torch.vmap(transform(lambda t: t.apply(lambda x: x**2)))(td)
        assert jac.batch_size == torch.Size([size, 3])
        assert jac["a"].batch_size == torch.Size([size, 3])
        assert jac["b"].batch_size == torch.Size([size, 3])
        assert jac["a", "b"].shape == (size, 3, 2, 3)
        torch.testing.assert_close(jac["b", "b"][1], torch.diag(2 * td["b"][1]))

    def loss(t: TensorDict) -> torch.Tensor:
        return (t["a"] ** 2).sum() + (t["b"] ** 3).sum()

    hess = torch.vmap(torch.func.hessian(loss))(td)
    assert hess["a"].batch_size == torch.Size([size, 3])
    assert hess["b", "b"].shape == (size, 3, 3)
    torch.testing.assert_close(hess["b", "b"][1], torch.func.hessian(loss)(td[1])["b", "b"])
    out = torch.vmap(lambda t: t + 1)(td)  # vmap's own output: the mapped dim is a batch dim
    assert out.batch_size == torch.Size([size, 3])


def test_vmap_mapped_size_equal_to_batch() -> None:
    # the mapped dim has the size of the remaining batch dim: leaves still "start with" the inner
    # batch size, yet under vmap the mapped dim is a batch dim
    td = TensorDict({"a": torch.arange(18.0).reshape(3, 3, 2)}, [3, 3])
    out = torch.vmap(lambda t: t + 1)(td)
    assert out.batch_size == torch.Size([3, 3])
    torch.testing.assert_close(out["a"], td["a"] + 1)


# ---------------------------------------------------------------------------------------- vmap
def test_vmap_in_dims_0() -> None:
    td = make_td()
    seen: list[torch.Size] = []

    def fn(t: TensorDict) -> TensorDict:
        seen.append(t.batch_size)
        seen.append(t["nested", "deeper"].batch_size)
        assert t["a"].shape == (3, 2)
        return t * 2 + t["nested", "b"].unsqueeze(-1).mean()

    out = torch.vmap(fn, in_dims=0)(td)
    assert seen == [torch.Size([3]), torch.Size([3])]  # the mapped dim is removed inside
    assert isinstance(out, TensorDict)
    assert out.batch_size == torch.Size([5, 3])
    assert out["nested", "deeper"].batch_size == torch.Size([5, 3])
    shift = td["nested", "b"].mean(1)
    for p in PATHS:
        want = td[p] * 2 + shift.reshape(5, *[1] * (td[p].ndim - 1))
        torch.testing.assert_close(out[p], want)


def test_vmap_in_dims_1() -> None:
    td = make_td()
    seen: list[torch.Size] = []

    def fn(t: TensorDict) -> TensorDict:
        seen.append(t.batch_size)
        assert t["a"].shape == (5, 2)
        return t + 1

    out = torch.vmap(fn, in_dims=1)(td)
    assert seen == [torch.Size([5])]
    assert out.batch_size == torch.Size([3, 5])  # out_dims=0: the mapped dim comes first
    assert out["nested"].batch_size == torch.Size([3, 5])
    for p in PATHS:
        torch.testing.assert_close(out[p], td[p].transpose(0, 1) + 1)
    back = torch.vmap(fn, in_dims=1, out_dims=1)(td)
    assert back.batch_size == torch.Size([5, 3])
    for p in PATHS:
        torch.testing.assert_close(back[p], td[p] + 1)


def test_vmap_returns_tensor_from_td() -> None:
    td = make_td()
    out = torch.vmap(lambda t: t["a"].sum(-1) + t["nested", "b"], in_dims=1)(td)
    torch.testing.assert_close(out, (td["a"].sum(-1) + td["nested", "b"]).T)


def test_vmap_with_td_and_tensor_arguments() -> None:
    td = make_td()
    x = torch.arange(5.0)
    out = torch.vmap(lambda t, s: t * s, in_dims=(0, 0))(td, x)
    assert out.batch_size == torch.Size([5, 3])
    torch.testing.assert_close(out["a"], td["a"] * x[:, None, None])


def test_vmap_nested() -> None:
    td = make_td()
    inner: list[torch.Size] = []

    def fn(t: TensorDict) -> TensorDict:
        inner.append(t.batch_size)
        return t.exp()

    out = torch.vmap(torch.vmap(fn))(td)
    assert inner == [torch.Size([])]
    assert out.batch_size == torch.Size([5, 3])
    assert_same_tree(out, td.exp())


def test_vmap_td_built_inside() -> None:
    x = torch.randn(4, 3)

    def fn(row: torch.Tensor) -> TensorDict:
        return TensorDict({"x": row, "sq": {"v": row**2}}, batch_size=[])

    out = torch.vmap(fn)(x)
    assert isinstance(out, TensorDict)
    assert out.batch_size == torch.Size([4])
    assert out["sq"].batch_size == torch.Size([4])
    torch.testing.assert_close(out["sq", "v"], x**2)


def test_vmap_over_grad() -> None:
    td = make_td()
    params = TensorDict({"w": torch.ones(2)}, batch_size=[])

    def loss(p: TensorDict, a: torch.Tensor) -> torch.Tensor:
        return (p["w"] * a).sum()

    grads = torch.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, td["a"][:, 0])
    assert isinstance(grads, TensorDict)
    assert grads.batch_size == torch.Size([5])
    torch.testing.assert_close(grads["w"], td["a"][:, 0])


# ------------------------------------------------------------------- recent layouts (vmap's work on every call)
def _two_leaves(n: int, fill: float = 0.0) -> TensorDict:
    return TensorDict({"a": torch.full((n, 2), fill), "n": {"b": torch.full((n,), fill)}}, [n])


def test_a_layout_seen_again_gives_the_same_context() -> None:
    spec = pytree.tree_flatten(_two_leaves(4))[1]
    assert pytree.tree_flatten(_two_leaves(4, 1.0))[1].context is spec.context  # other values, same layout
    other = pytree.tree_flatten(_two_leaves(5))[1]
    assert other.context is not spec.context
    assert other == spec  # (sizes are hints, not structure)
    assert pytree.tree_unflatten(pytree.tree_flatten(_two_leaves(5))[0], spec).batch_size == torch.Size([5])


def test_placeholder_tree_is_kept_locked_until_unlocked() -> None:
    _, spec = pytree.tree_flatten(_two_leaves(4))
    tree = pytree.tree_unflatten([0, 0], spec)  # vmap's tree of zeros, to broadcast in_dims/out_dims
    assert tree.is_locked
    assert tree["n"].is_locked
    assert pytree.tree_unflatten([0, 0], spec) is tree
    assert pytree.tree_flatten(tree)[0] == [0, 0]
    other = pytree.tree_unflatten([0, 1], spec)
    assert other["a"] == 0
    assert other["n", "b"] == 1
    other.unlock_()
    other["c"] = torch.zeros(4)
    leaves = pytree.tree_flatten(other)[0]
    assert leaves[:2] == [0, 1]  # its entries now, not the cached ones
    assert leaves[2].shape == (4,)
    again = pytree.tree_unflatten([0, 1], spec)
    assert again is not other
    assert again.is_locked
    assert "c" not in again


def test_tree_of_nones_is_a_new_unlocked_one() -> None:
    _, spec = pytree.tree_flatten(_two_leaves(4))
    nones = pytree.tree_map(lambda x: None, _two_leaves(4))  # (a tree of grads to fill, say)
    assert not nones.is_locked
    assert nones["n", "b"] is None
    assert pytree.tree_unflatten([None, None], spec) is not nones
    nones["a"] = torch.ones(4, 2)
    assert pytree.tree_flatten(nones)[0][1] is None


def test_vmap_in_dims_as_a_tensordict_prefix() -> None:
    td = _two_leaves(4)
    td["a"] += torch.arange(4.0)[:, None]
    _, spec = pytree.tree_flatten(td)
    seen = []
    dims = pytree.tree_unflatten([0, 0], spec)
    out = torch.vmap(lambda t: (seen.append(t.batch_size), t * 2)[1], in_dims=(dims,))(td)
    assert seen == [torch.Size([])]
    torch.testing.assert_close(out["a"], td["a"] * 2)
    with pytest.raises(ValueError, match="the entries lost different dims"):  # 'n.b' passed whole: not a batch
        torch.vmap(lambda t: t, in_dims=(pytree.tree_unflatten([0, None], spec),))(td)


def test_vmap_equal_sizes_mapped_beyond_the_batch_dims_raise() -> None:
    # every leaf's shape without its dim 1 is its shape without dim 0: the mapped dim tells them apart
    td = TensorDict({"a": torch.randn(5, 5), "n": {"b": torch.randn(5, 5)}}, [5])
    with pytest.raises(ValueError, match="dim 1 of a tensor is mapped"):
        torch.vmap(lambda t: t, in_dims=1)(td)
    out = torch.vmap(lambda t: t * 2)(td)
    assert out.batch_size == torch.Size([5])
    assert out["n"].batch_size == torch.Size([5])
    torch.testing.assert_close(out["n", "b"], td["n", "b"] * 2)


def test_vmap_over_parameters_keeps_them_plain() -> None:
    params = TensorDict({"w": torch.nn.Parameter(torch.ones(3, 2)), "n": {"b": torch.nn.Parameter(torch.ones(3))}}, [3])
    out = torch.vmap(lambda p: p.apply(lambda x: x * 2))(params)
    assert out.batch_size == torch.Size([3])
    assert out["n"].batch_size == torch.Size([3])
    out["w"].sum().backward()
    torch.testing.assert_close(params["w"].grad, torch.full((3, 2), 2.0))


def test_copied_and_pickled_specs_unflatten() -> None:
    td = _two_leaves(3)
    leaves, spec = pytree.tree_flatten(td)
    torch.vmap(lambda t: t)(td)  # fills what the layout keeps
    for other in (copy.deepcopy(spec), pickle.loads(pickle.dumps(spec))):
        assert other == spec
        assert_same_tree(pytree.tree_unflatten(leaves, other), td)
        assert pytree.tree_unflatten([0, 0], other)["n", "b"] == 0
        out = torch.vmap(lambda t: t * 2)(pytree.tree_unflatten(leaves, other))
        torch.testing.assert_close(out["a"], td["a"] * 2)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_strided_nested_tensor_first_entry_round_trips() -> None:
    # a strided nested tensor has no shape: the batch size is read off its regular leading dims
    parts = [torch.arange(6.0).reshape(2, 3), torch.arange(12.0).reshape(4, 3)]
    nt = torch.nested.nested_tensor(parts)
    td = TensorDict({"a": nt, "b": torch.ones(2, 5)}, batch_size=[2])
    leaves, spec = pytree.tree_flatten(td)
    back = pytree.tree_unflatten(leaves, spec)
    assert back.batch_size == torch.Size([2])
    assert back["a"] is nt
    mapped = pytree.tree_map(lambda x: x * 2, td)
    assert mapped.batch_size == torch.Size([2])
    for got, want in zip(mapped["a"].unbind(0), parts, strict=True):
        torch.testing.assert_close(got, want * 2)
    torch.testing.assert_close(mapped["b"], torch.full((2, 5), 2.0))


# ---------------------------------------------------------------------------------------- unbatched entries
def _with_unbatched() -> TensorDict:
    from tensorbatch import UnbatchedTensor

    return TensorDict(
        {"u": UnbatchedTensor(torch.arange(4.0)), "a": torch.ones(3, 2), "n": {"v": UnbatchedTensor(torch.ones(2))}},
        [3],
    )


def test_unbatched_entries_tell_nothing_about_the_batch() -> None:
    # an UnbatchedTensor has no batch dims: the first entry, it gave the batch size [4]; it takes its parent's
    from tensorbatch import UnbatchedTensor

    td = _with_unbatched()
    for out in (pytree.tree_unflatten(*pytree.tree_flatten(td)), pytree.tree_map(lambda x: x * 2, td)):
        assert out.batch_size == torch.Size([3])
        assert out["n"].batch_size == torch.Size([3])
        assert type(out.get("u")) is UnbatchedTensor
        assert out.get("u").batch_size == torch.Size([3])
        assert out["n"].get("v").batch_size == torch.Size([3])
    torch.testing.assert_close(out.get("u").as_subclass(torch.Tensor), torch.arange(4.0) * 2)
    out = pytree.tree_map(lambda x: x.unsqueeze(0), td)
    assert out.batch_size == torch.Size([1, 3])
    assert out.get("u").shape == (1, 4)
    assert out.get("u").batch_size == torch.Size([1, 3])


def test_grad_of_unbatched_entries() -> None:
    # grad hands plain tensors to the function and back: they are UnbatchedTensors again
    from tensorbatch import UnbatchedTensor

    td = _with_unbatched()
    seen = []

    def loss(t: TensorDict) -> torch.Tensor:
        seen.append((type(t.get("u")), t.get("u").batch_size))
        return t["a"].sum() + (t["u"] ** 2).sum() + t["n", "v"].sum()

    grads = torch.func.grad(loss)(td)
    assert seen == [(UnbatchedTensor, torch.Size([3]))]
    assert grads.batch_size == torch.Size([3])
    assert type(grads.get("u")) is UnbatchedTensor
    assert grads.get("u").batch_size == torch.Size([3])
    torch.testing.assert_close(grads.get("u").as_subclass(torch.Tensor), 2 * torch.arange(4.0))
    torch.testing.assert_close(grads["a"], torch.ones(3, 2))
