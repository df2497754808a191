"""The walks of ``_ops/traverse.py``, tested directly: nodes, entries, leaves and the mapping engine."""

from __future__ import annotations

import pytest
import tensordict
import torch
from _messages import batch_size_refused

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack, set_printoptions, tensorclass
from tensorbatch._nontensor import NonTensorStack
from tensorbatch._ops.traverse import (
    NON_TENSOR_TYPES,
    apply_leaves,
    copy_nodes,
    entry_keys,
    flat_into,
    map_leaves,
    named_entries,
    named_leaves,
    named_nodes,
    raise_collision,
    source_leaves,
    stacked_members,
)


def _source() -> dict:
    return {
        "a": torch.zeros(2, 3),
        "n": {"b": torch.ones(2), "m": {"c": torch.arange(2.0)}, "s": "text"},
        "e": {},
        "z": torch.ones(2, dtype=torch.int64),
    }


def _tree(module=None) -> TensorDict:
    cls = TensorDict if module is None else module.TensorDict
    return cls(_source(), batch_size=[2])


def _paths(walk) -> list:
    return [path for path, _ in walk]


# ------------------------------------------------------------------------------------------ nodes
def test_named_nodes_pre_order_yields_the_root_then_each_node_before_the_ones_below() -> None:
    td = _tree()
    assert _paths(named_nodes(td)) == [(), ("n",), ("n", "m"), ("e",)]
    nodes = dict(named_nodes(td))
    assert nodes[()] is td
    assert nodes[("n", "m")] is td["n", "m"]


def test_named_nodes_post_order_yields_each_node_after_the_ones_below() -> None:
    assert _paths(named_nodes(_tree(), post_order=True)) == [("n", "m"), ("n",), ("e",), ()]


def test_named_nodes_skips_non_tensor_leaves_and_is_leaf_types() -> None:
    td = _tree()
    assert all(type(node) not in NON_TENSOR_TYPES for _, node in named_nodes(td))
    assert _paths(named_nodes(td, is_leaf=lambda cls: cls is TensorDict)) == [()]


def test_named_nodes_of_an_empty_tree_is_the_root_alone() -> None:
    td = TensorDict({}, batch_size=[3])
    assert list(named_nodes(td)) == [((), td)]


def test_named_nodes_walks_a_lazy_stack_through_its_stacked_view_or_its_members() -> None:
    members = [TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(3)}}, batch_size=[3]) for _ in range(2)]
    stack = lazy_stack(members)
    view = list(named_nodes(stack))
    assert _paths(view) == [(), ("n",)]
    assert isinstance(view[1][1], LazyStackedTensorDict)
    stored = list(named_nodes(stack, members=True))
    assert _paths(stored) == [(), ("0",), ("0", "n"), ("1",), ("1", "n")]
    assert stored[1][1] is members[0]
    assert stored[4][1] is members[1]["n"]


def test_stacked_members_reads_the_backend_hook() -> None:
    members = [TensorDict({"a": torch.zeros(3)}, batch_size=[3]) for _ in range(2)]
    dim, found = stacked_members(lazy_stack(members, dim=1))
    assert dim == 1
    assert found[0] is members[0]
    assert found[1] is members[1]
    assert stacked_members(members[0]) is None


# ---------------------------------------------------------------------------------------- entries
def test_named_entries_orders_match_tensordict_keys_and_items() -> None:
    ours, theirs = _tree(), _tree(tensordict)
    keys = [k if type(k) is tuple else (k,) for k in theirs.keys(include_nested=True)]
    assert _paths(named_entries(ours, post_order=True)) == keys
    items = [k if type(k) is tuple else (k,) for k, _ in theirs.items(include_nested=True)]
    assert _paths(named_entries(ours)) == items


@pytest.mark.parametrize("leaves_only", [False, True])
@pytest.mark.parametrize("include_nested", [False, True])
def test_entry_keys_equal_tensordict_keys(include_nested: bool, leaves_only: bool) -> None:
    expected = list(_tree(tensordict).keys(include_nested=include_nested, leaves_only=leaves_only))
    assert entry_keys(_tree(), include_nested, leaves_only) == expected


def test_named_entries_leaves_only_skips_nodes_and_non_tensor_leaves_as_keys_does() -> None:
    assert _paths(named_entries(_tree(), leaves_only=True)) == [("a",), ("n", "b"), ("n", "m", "c"), ("z",)]


def test_named_entries_without_include_nested_is_the_first_level() -> None:
    assert _paths(named_entries(_tree(), include_nested=False)) == [("a",), ("n",), ("e",), ("z",)]


def test_named_entries_is_leaf_makes_a_collection_a_leaf() -> None:
    walk = list(named_entries(_tree(), is_leaf=NON_TENSOR_TYPES.__contains__, leaves_only=True))
    assert _paths(walk) == [("a",), ("n", "b"), ("n", "m", "c"), ("n", "s"), ("z",)]
    assert walk[3][1].data == "text"


def test_named_entries_yields_an_empty_node_unless_leaves_only() -> None:
    td = TensorDict({"e": {}}, batch_size=[])
    assert _paths(named_entries(td)) == [("e",)]
    assert list(named_entries(td, leaves_only=True)) == []


# ----------------------------------------------------------------------------------------- leaves
def test_named_leaves_yields_tensors_in_walk_order() -> None:
    td = _tree()
    walk = list(named_leaves(td))
    assert _paths(walk) == [("a",), ("n", "b"), ("n", "m", "c"), ("z",)]
    assert walk[2][1] is td["n", "m", "c"]


def test_named_leaves_without_include_nested_gives_nodes_as_leaves() -> None:
    walk = dict(named_leaves(_tree(), include_nested=False))
    assert list(walk) == [("a",), ("n",), ("e",), ("z",)]
    assert isinstance(walk[("n",)], TensorDict)


def test_named_leaves_of_a_lazy_stack_are_stacked() -> None:
    stack = lazy_stack([TensorDict({"a": torch.full((3,), float(i))}, batch_size=[3]) for i in range(2)])
    ((path, leaf),) = list(named_leaves(stack))
    assert path == ("a",)
    assert torch.equal(leaf, torch.tensor([[0.0] * 3, [1.0] * 3]))


# ----------------------------------------------------------------------------------- the engine
def test_apply_leaves_maps_every_leaf_and_keeps_the_structure() -> None:
    out = apply_leaves(_tree(), lambda x: x + 1)
    assert torch.equal(out["n", "m", "c"], torch.tensor([1.0, 2.0]))
    assert out["z"].dtype == torch.int64
    assert out["n", "s"] == "text"
    assert list(out["e"].keys()) == []
    assert out.batch_size == torch.Size([2])


def test_apply_leaves_none_drops_the_key_and_filter_empty_drops_emptied_nodes() -> None:
    td = _tree()
    out = apply_leaves(td, lambda x: None if x.dtype == torch.float32 else x)
    assert out.keys(include_nested=True, leaves_only=True) == ["z"]
    assert list(out.keys()) == ["n", "e", "z"]  # "e" was empty from the start: kept
    filtered = apply_leaves(td, lambda x: None if x.dtype == torch.float32 else x, filter_empty=True)
    assert list(filtered.keys()) == ["n", "e", "z"]  # "n" keeps its non-tensor leaf
    assert list(filtered["n"].keys()) == ["s"]  # "m" was emptied: dropped


def test_apply_leaves_error_keeps_its_type_and_gains_the_key_path() -> None:
    def fail_on_ones(x):
        if x.sum() == 2 and x.dtype == torch.float32:
            raise ValueError("boom")
        return x

    with pytest.raises(ValueError, match="boom") as info:
        apply_leaves(_tree(), fail_on_ones, what="testing")
    assert info.value.__notes__ == ["while testing at key ('n', 'b')"]


def test_apply_leaves_with_others_matches_by_key_and_uses_default() -> None:
    td = _tree()
    other = TensorDict({"a": torch.ones(2, 3), "n": {"b": torch.ones(2)}}, batch_size=[2])
    with pytest.raises(KeyError, match=r'key "m" not found .*\(key path \("n", "m"\)\)'):
        apply_leaves(td, lambda x, y: x + y, other)
    out = apply_leaves(td, lambda x, y: x if y is None else x + y, other, default=None)
    assert torch.equal(out["a"], torch.ones(2, 3))
    assert torch.equal(out["n", "b"], torch.full((2,), 2.0))
    assert torch.equal(out["z"], torch.ones(2, dtype=torch.int64))


def test_exact_maps_refuse_different_key_sets_with_the_node_path() -> None:
    td = _tree()
    other = td.clone()
    del other["n", "m", "c"]
    with pytest.raises(KeyError, match=r"mismatch under \('n', 'm'\)\. The first TD has keys \{'c'\}"):
        map_leaves(td, torch.add, other)
    bigger = td.clone()
    bigger["n", "x"] = torch.zeros(2)
    with pytest.raises(
        KeyError,
        match=r"mismatch under 'n'\. The first TD has keys set\(\) that the second does not "
        r"have\. The second TD has keys \{'x'\}",
    ):
        map_leaves(td, torch.add, bigger)


def test_exact_map_fast_branch_and_loop_agree() -> None:
    flat = TensorDict({"a": torch.ones(2), "b": torch.arange(2.0)}, batch_size=[2])
    fast = map_leaves(flat, torch.add, flat.clone())
    mixed = TensorDict({"a": torch.ones(2), "n": {"b": torch.arange(2.0)}}, batch_size=[2])
    slow = map_leaves(mixed, torch.add, mixed.clone())
    assert torch.equal(fast["b"], slow["n", "b"])
    assert torch.equal(fast["a"], torch.full((2,), 2.0))


def test_exact_map_error_from_the_fast_branch_names_the_key() -> None:
    flat = TensorDict({"a": torch.ones(2), "b": torch.ones(2)}, batch_size=[2])
    other = TensorDict({"a": torch.ones(2), "b": torch.ones(3)}, batch_size=[])
    with pytest.raises(RuntimeError) as info:
        map_leaves(flat, torch.add, other, what="adding")
    assert info.value.__notes__ == ["while adding at key 'b'"]


def test_exact_map_compares_non_tensor_leaves_by_value() -> None:
    td = TensorDict({"a": torch.zeros(2), "s": "x"}, batch_size=[2])
    other = td.clone()
    assert torch.equal(map_leaves(td, torch.eq, other)["s"], torch.tensor([True, True]))
    other["s"] = "y"
    assert torch.equal(map_leaves(td, torch.eq, other)["s"], torch.tensor([False, False]))


def test_map_leaves_follow_moves_non_tensor_positions() -> None:
    td = TensorDict({"a": torch.arange(3.0), "s": NonTensorStack.from_list(["x", "y", "z"])}, batch_size=[3])
    followed = map_leaves(td, lambda x: x.flip(0), follow=True)
    assert followed["s"] == ["z", "y", "x"]
    assert torch.equal(followed["a"], torch.tensor([2.0, 1.0, 0.0]))
    assert map_leaves(td, lambda x: x.flip(0))["s"] == ["x", "y", "z"]


def test_apply_leaves_inplace_writes_into_the_tree() -> None:
    td = _tree()
    leaf = td["n", "b"]
    assert apply_leaves(td, lambda x: x * 3, inplace=True) is td
    assert td["n", "b"] is leaf
    assert torch.equal(leaf, torch.full((2,), 3.0))


def test_apply_leaves_new_batch_size_keeps_nested_extra_dims() -> None:
    td = TensorDict(
        {"a": torch.zeros(2, 3), "n": TensorDict({"b": torch.zeros(2, 3, 4)}, batch_size=[2, 3])}, batch_size=[2, 3]
    )
    out = apply_leaves(td, lambda x: x.sum(0), batch_size=[3])
    assert out.batch_size == torch.Size([3])
    assert out["n"].batch_size == torch.Size([3])
    assert out["n", "b"].shape == torch.Size([3, 4])


# ---------------------------------------------------------------------------- jobs on the node walk
def test_batch_size_change_is_checked_on_every_extended_node_before_any_write() -> None:
    td = TensorDict({"a": torch.zeros(2, 3), "n": {"m": {"c": torch.zeros(2, 4)}}}, batch_size=[2])
    with pytest.raises(RuntimeError, match=batch_size_refused(("n", "m", "c"), [2, 4], [2, 3])):
        td.batch_size = [2, 3]
    assert td.batch_size == torch.Size([2])
    assert td["n", "m"].batch_size == torch.Size([2])
    td["n", "m", "c"] = torch.zeros(2, 3)
    td.batch_size = [2, 3]
    assert td["n", "m"].batch_size == torch.Size([2, 3])


def test_clear_device_reaches_every_node_past_non_tensor_leaves_and_lazy_stacks() -> None:
    member = TensorDict({"x": torch.zeros(2)}, batch_size=[2], device="cpu")
    td = TensorDict(
        {
            "a": torch.zeros(2),
            "s": "text",
            "n": {"b": torch.zeros(2)},
            "l": lazy_stack([member, member.clone()], dim=1),
        },
        batch_size=[2],
        device="cpu",
    )
    td.clear_device_()
    assert td.device is None
    assert td["n"].device is None
    assert member.device is None


def test_names_reach_every_nested_node() -> None:
    td = TensorDict({"n": {"m": TensorDict({"c": torch.zeros(2, 3)}, batch_size=[2, 3])}}, batch_size=[2])
    td.names = ["batch"]
    assert td["n"].names == ["batch"]
    assert td["n", "m"].names == ["batch", None]


# ------------------------------------------------------------------------ walks behind base methods
def test_flat_into_joins_keys_and_keeps_non_tensor_leaves() -> None:
    td = _tree()
    flat: dict = {}
    assert flat_into(td, "", "/", None, flat) == 5
    assert list(flat) == ["a", "n/b", "n/m/c", "n/s", "z"]
    assert flat["n/m/c"] is td["n", "m", "c"]
    flat = {}
    assert flat_into(td, "p:", ".", lambda cls: cls is TensorDict, flat) == 4
    assert list(flat) == ["p:a", "p:n", "p:e", "p:z"]


def test_flat_into_counts_leaves_so_a_collision_shows_and_is_named() -> None:
    td = TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.ones(1)}}, batch_size=[1])
    flat: dict = {}
    assert flat_into(td, "", ".", None, flat) == 2
    assert list(flat) == ["a.b"]
    with pytest.raises(KeyError, match=r"keys \['a.b'\] to collide"):
        raise_collision(td, ".", None)


def test_copy_nodes_makes_new_nodes_over_the_same_leaves() -> None:
    td = _tree()
    copy = copy_nodes(td)
    assert copy is not td
    assert copy["n", "m"] is not td["n", "m"]
    assert copy["n", "m", "c"] is td["n", "m", "c"]
    assert copy["n", "s"] == "text"
    assert list(copy["e"].keys()) == []
    assert copy.batch_size == td.batch_size


def test_copy_nodes_reaches_into_a_nested_tensorclass() -> None:
    @tensorclass
    class Pair:
        x: torch.Tensor

    td = TensorDict({"p": Pair(x=torch.zeros(2), batch_size=[2])}, batch_size=[2])
    copy = copy_nodes(td)
    assert copy["p", "x"] is td["p", "x"]
    assert copy["p"] is not td["p"]
    assert entry_keys(td) == [("p", "x"), "p"]  # the key walk reads a TensorClass's metadata through it
    assert "x: Tensor(shape=[2]" in repr(td)


def test_source_leaves_walks_mappings_tensordicts_and_nested_keys() -> None:
    inner = TensorDict({"c": torch.zeros(2)}, batch_size=[2])
    source = {"a": 1, ("n", "b"): 2, "m": {"x": {"y": 3}, "t": inner}}
    assert [(p, v if not isinstance(v, torch.Tensor) else "T") for p, v in source_leaves(source, "update")] == [
        (("a",), 1),
        (("n", "b"), 2),
        (("m", "x", "y"), 3),
        (("m", "t", "c"), "T"),
    ]
    kept = source_leaves(source, "update", enter=lambda path, value: path != ("m", "x"))
    assert (("m", "x"), {"y": 3}) in kept


def test_source_leaves_refuses_a_source_that_is_not_a_mapping() -> None:
    with pytest.raises(TypeError, match="update"):
        source_leaves([1, 2], "update")


def test_lock_reaches_every_stored_node_and_unlock_releases_them() -> None:
    members = [TensorDict({"n": {"b": torch.zeros(3)}}, batch_size=[3]) for _ in range(2)]
    td = TensorDict({"l": lazy_stack(members), "m": {"c": torch.zeros(2, 3)}}, batch_size=[2])
    td.lock_()
    assert td["m"].is_locked
    assert members[1]["n"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        members[0]["n"]["x"] = torch.zeros(3)
    td.unlock_()
    assert not members[1]["n"].is_locked
    assert not td["l"].is_locked
    members[0]["n"]["x"] = torch.zeros(3)


def test_auto_batch_size_sets_the_nested_nodes_first() -> None:
    td = TensorDict({"n": TensorDict({"b": torch.zeros(2, 3, 4)}), "a": torch.zeros(2, 3)})
    td.auto_batch_size_()
    assert td["n"].batch_size == torch.Size([2, 3, 4])
    assert td.batch_size == torch.Size([2, 3])


def test_to_dict_and_repr_follow_the_tree() -> None:
    td = _tree()
    plain = td.to_dict()
    assert plain["n"]["s"] == "text"
    assert plain["n"]["m"]["c"] is td["n", "m", "c"]
    assert plain["e"] == {}
    with set_printoptions(sort_keys=None):  # insertion order (the default sorts the keys)
        lines = repr(td).splitlines()
    assert lines[1].startswith("|-- a: Tensor")
    assert lines[3] == "|   |-- b: Tensor(shape=[2], dtype=float32, device=cpu)"
    assert lines[5] == "|   |   `-- c: Tensor(shape=[2], dtype=float32, device=cpu)"
    assert lines[-1].startswith("`-- z: Tensor")


def test_apply_leaves_named_passes_the_key() -> None:
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
    seen = []
    out = apply_leaves(td, lambda key, x: seen.append(key) or x + 1, named=lambda path: path)
    assert seen == [("a",), ("n", "b")]
    assert out["n", "b"].tolist() == [2.0, 2.0]


def test_apply_named_keys_and_prefix() -> None:
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, batch_size=[2])
    keys = []
    td.apply(lambda key, x: keys.append(key), named=True)
    td.apply(lambda key, x: keys.append(key), named=True, nested_keys=True)
    td.apply(lambda key, x: keys.append(key), named=True, nested_keys=True, prefix=("p",))
    assert keys == ["a", "b", "a", ("n", "b"), ("p", "a"), ("p", "n", "b")]


def test_apply_refuses_unknown_keywords() -> None:
    td = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(TypeError, match="bogus"):
        td.apply(lambda x: x, bogus=True)
    with pytest.raises(TypeError, match="named"):
        td.named_apply(lambda k, x: x, named=True)
