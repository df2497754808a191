"""Keys, get/set/delete, select/exclude, key flattening, update, state_dict and pickle, per flavour."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from _flavours import (
    BATCH,
    LEAF_KEYS,
    assert_leaves,
    assert_same_content,
    assert_same_leaf,
    leaf_ids,
    leaves,
    make_td,
    reference,
    requires,
    snapshot,
)

from tensorbatch import MemoryMappedTensor, TensorClass, TensorDict, TensorDictBase
from tensorbatch._delegation import storage_of

ALL_KEYS = {"a", "b", "c", "nested", ("nested", "d"), ("nested", "deep"), ("nested", "deep", "e")}
LEAVES = {"a", "b", "c", ("nested", "d"), ("nested", "deep", "e")}


def test_content_is_the_reference(flavour, tdf):
    assert_same_content(tdf)
    assert isinstance(tdf, TensorDictBase) is ("tensorclass" not in flavour.caps)
    assert isinstance(tdf, TensorClass) is ("tensorclass" in flavour.caps)
    assert tdf.batch_size == BATCH == tdf.shape
    assert (tdf.batch_dims, tdf.ndim, tdf.dim(), len(tdf), tdf.numel()) == (2, 2, 2, 3, 12)
    assert tdf.size(1) == 4
    assert tdf.get("nested").batch_size == BATCH
    assert tdf.get(("nested", "deep")).batch_size == BATCH
    assert tdf.depth == 2


def test_keys_top_level(tdf):
    assert set(tdf.keys()) == {"a", "b", "c", "nested"}
    assert sorted(tdf.keys()) == tdf.sorted_keys
    assert len(tdf.keys()) == 4


def test_key_membership_unravels(tdf):
    assert ("a",) in tdf.keys() and (("a",),) in tdf.keys()
    assert ("nested",) in tdf.keys() and ("nested", "x") not in tdf.keys()  # a nested key is no key of one level
    nested = next(k for k in tdf.keys(include_nested=True) if type(k) is tuple)
    assert nested in tdf.keys(True) and (nested[0], nested[1:]) in tdf.keys(True)
    with pytest.raises(TypeError, match="Membership checks"):
        ("a", 0) in tdf.keys()  # noqa: B015


def test_keys_include_nested(tdf):
    keys = list(tdf.keys(include_nested=True))
    assert set(keys) == ALL_KEYS
    assert len(keys) == len(ALL_KEYS)


def test_keys_leaves_only(tdf):
    assert set(tdf.keys(include_nested=True, leaves_only=True)) == LEAVES
    assert set(tdf.keys(leaves_only=True)) == {"a", "b", "c"}


def test_keys_sort(tdf):
    keys = list(tdf.keys(include_nested=True, sort=True))
    assert keys == sorted(ALL_KEYS, key=lambda k: k if isinstance(k, str) else ".".join(k))
    leaf_keys = list(tdf.keys(True, True, sort=True))
    assert leaf_keys == ["a", "b", "c", ("nested", "d"), ("nested", "deep", "e")]


def test_items_and_values_match_get(flavour, tdf):
    items = dict(tdf.items(include_nested=True, leaves_only=True))
    assert set(items) == LEAVES
    for key, value in items.items():
        assert_same_leaf(flavour, value, tdf.get(key))
    values = list(tdf.values(include_nested=True, leaves_only=True))
    assert len(values) == 5
    for value, item in zip(values, items.values(), strict=True):  # same order as items()
        assert_same_leaf(flavour, value, item)
    nested = dict(tdf.items())["nested"]
    assert isinstance(nested, TensorDictBase)
    assert_same_leaf(flavour, nested.get(("deep", "e")), tdf.get(("nested", "deep", "e")))


def test_plain_items_and_values(flavour, tdf):
    """The plain items()/values(): this level's entries in order, iterable more than once; an in-memory
    TensorDict hands out its live dict views (sized, as tensordict's), which refuse a key added while
    iterating, as a dict does. Other backends (lazy stacks, as tensordict's, storage backends) may give
    iterators."""
    items, values = tdf.items(), tdf.values()
    assert [k for k, _ in items] == ["a", "b", "c", "nested"]
    pairs = list(tdf.items())
    assert [k for k, _ in pairs] == ["a", "b", "c", "nested"]
    for key, value in pairs[:3]:
        assert_same_leaf(flavour, value, tdf.get(key))
    if "stored_leaves" in flavour.caps:
        assert all(v is w for (_, v), w in zip(pairs, tdf.values(), strict=True))
    if storage_of(tdf) is None:
        return
    assert (len(items), len(values)) == (4, 4)
    assert [k for k, _ in items] == ["a", "b", "c", "nested"]  # a view iterates again
    if {"mapping_mutation", "new_keys", "str_keys"} <= flavour.caps:
        with pytest.raises(RuntimeError, match="changed size during iteration"):  # noqa: PT012 (the loop is the case)
            for key, value in tdf.items():
                tdf[key + "2"] = value
        tdf.set("f", torch.zeros(3, 4))
        assert len(items) == 6 and len(values) == 6  # live: the views see the new keys ("a2" was added)


def test_contains_get_and_missing_keys(flavour, tdf):
    assert "a" in tdf
    assert ("nested", "deep", "e") in tdf
    assert ("nested", "deep") in tdf
    assert "missing" not in tdf
    assert ("nested", "missing") not in tdf
    assert tdf.get("missing") is None
    sentinel = torch.zeros(())
    assert tdf.get(("nested", "missing"), sentinel) is sentinel
    assert_same_leaf(flavour, tdf.get("nested").get("deep").get("e"), tdf.get(("nested", "deep", "e")))
    assert_same_leaf(flavour, tdf.get(("nested", "d")), tdf.get("nested").get("d"))


def test_string_keys_in_brackets(flavour, tdf):
    """``td[key]`` reads and ``td[key] = x`` writes a key; a TensorClass refuses string keys in [] (ValueError)."""
    if "str_keys" not in flavour.caps:  # as tensordict 0.15.3's tensorclass: keys go through get/set
        for key in ("a", ("nested", "d"), "nested"):
            with pytest.raises(ValueError, match="Invalid indexing arguments"):
                tdf[key]
            with pytest.raises(ValueError, match="Invalid indexing arguments"):
                tdf[key] = tdf.get(key)
        assert_same_content(tdf)
        return
    for key in ALL_KEYS:
        got = tdf[key]
        if isinstance(got, torch.Tensor):
            assert_same_leaf(flavour, got, tdf.get(key))
        else:
            assert_leaves(tdf.get(key), lambda x: x, got, batch_size=BATCH)
    assert_same_leaf(flavour, tdf["nested"]["deep"]["e"], tdf["nested", "deep", "e"])
    assert_same_leaf(flavour, tdf.get(("nested", "d")), tdf["nested", "d"])
    with pytest.raises(KeyError):
        tdf["missing"]
    with pytest.raises(KeyError):
        tdf["nested", "missing"]
    requires(flavour, "inplace")
    value = torch.full((3, 4, 2), -1.0)
    tdf["nested", "d"] = value
    assert torch.equal(tdf.get(("nested", "d")), value)


def test_fields_as_attributes(flavour, tdf):
    """A TensorClass reads and writes its fields as attributes, through to its backend."""
    requires(flavour, "tensorclass")
    for name in ("a", "b", "c"):
        assert_same_leaf(flavour, getattr(tdf, name), tdf.get(name))
    assert_leaves(tdf.get("nested"), lambda x: x, tdf.nested, batch_size=BATCH)
    value = torch.full((3, 4, 5), 3.0)
    tdf.a = value
    assert_same_leaf(flavour, tdf.get("a"), value)
    assert_same_leaf(flavour, tdf.a, value)
    del tdf.c
    assert tdf.c is None
    assert set(tdf.keys()) == {"a", "b", "nested"}
    rest = ["b", ("nested", "d"), ("nested", "deep", "e")]
    assert_leaves(reference(), lambda x: x, tdf.select(*rest), keys=rest)


def test_entry_class_and_item_shape(flavour, tdf):
    # a memory-mapped TensorDict stores MemoryMappedTensors (tensordict's entry_class says so too)
    assert tdf.entry_class("a") is (MemoryMappedTensor if "memmap" in flavour.caps else torch.Tensor)
    assert issubclass(tdf.entry_class("nested"), TensorDictBase)
    assert tdf.get_item_shape("a") == torch.Size([3, 4, 5])
    assert tdf.get_item_shape(("nested", "deep", "e")) == BATCH
    assert tdf.get_item_shape("nested") == BATCH


def test_select(flavour, tdf):
    out = tdf.select("a", ("nested", "deep", "e"))
    assert_leaves(tdf, lambda x: x, out, keys=["a", ("nested", "deep", "e")], batch_size=BATCH)
    assert_same_leaf(flavour, out.get("a"), tdf.get("a"))
    assert set(tdf.keys(True, True)) == LEAVES  # the source is untouched
    with pytest.raises(KeyError):
        tdf.select("a", "missing")
    assert set(tdf.select("a", "missing", strict=False).keys()) == {"a"}


def test_exclude(tdf):
    out = tdf.exclude("b", ("nested", "deep"))
    assert_leaves(tdf, lambda x: x, out, keys=["a", "c", ("nested", "d")])
    assert set(tdf.keys(True, True)) == LEAVES
    assert set(tdf.exclude("missing").keys(True, True)) == LEAVES


def test_flatten_and_unflatten_keys(flavour, tdf):
    if "new_keys" not in flavour.caps:  # flat keys are not fields: refused, as by tensordict 0.15.3's tensorclass
        with pytest.raises(ValueError, match=r"key\(s\) \['nested.d', 'nested.deep.e'\] are not fields of"):
            tdf.flatten_keys()
        assert_same_content(tdf)
        return
    flat = tdf.flatten_keys()
    assert set(flat.keys()) == {"a", "b", "c", "nested.d", "nested.deep.e"}
    assert_same_leaf(flavour, flat.get("nested.deep.e"), tdf.get(("nested", "deep", "e")))
    assert flat.batch_size == BATCH
    back = flat.unflatten_keys()
    assert_leaves(tdf, lambda x: x, back)
    assert back.get(("nested", "deep")).batch_size == BATCH
    slash = tdf.flatten_keys("/")
    assert "nested/deep/e" in slash
    assert_leaves(tdf, lambda x: x, slash.unflatten_keys("/"))


def test_set_new_keys(flavour, tdf):
    requires(flavour, "mapping_mutation")
    requires(flavour, "new_keys")
    requires(flavour, "str_keys")  # setitem with new keys
    value = torch.arange(12.0).reshape(3, 4, 1)
    tdf["f"] = value
    tdf.set(("nested", "g"), value * 2)
    tdf["x", "y", "z"] = value * 3
    assert_same_leaf(flavour, tdf["f"], value)
    assert torch.equal(tdf["nested", "g"], value * 2)
    assert torch.equal(tdf["x", "y", "z"], value * 3)
    assert tdf["x", "y"].batch_size == BATCH
    with pytest.raises(RuntimeError):  # a Python scalar is a 0-d tensor: it does not fit batch [3, 4]
        tdf["scalar"] = 1.5
    tdf["sub"] = {"q": torch.ones(3, 4)}
    assert isinstance(tdf["sub"], TensorDictBase)
    assert tdf["sub"].batch_size == BATCH
    assert_same_content(tdf.exclude("f", ("nested", "g"), "x", "sub"))


def test_new_top_level_keys_refused(flavour, tdf):
    """Without ``new_keys`` (a TensorClass holds its fields only), set with a new top-level key raises
    AttributeError naming it, as tensordict 0.15.3's tensorclass, and changes nothing."""
    if "new_keys" in flavour.caps:
        pytest.skip("the flavour takes new top-level keys (test_set_new_keys)")
    with pytest.raises(AttributeError, match=r"Cannot set the attribute 'f': .* has no such field"):
        tdf.set("f", torch.zeros(3, 4))
    with pytest.raises(AttributeError, match="object has no attribute or field 'x'"):
        tdf.set(("x", "y"), torch.zeros(3, 4))
    assert_same_content(tdf)


def test_set_new_nested_keys(flavour, tdf):
    requires(flavour, "mapping_mutation")
    value = torch.arange(12.0).reshape(3, 4, 1)
    assert tdf.set(("nested", "g"), value * 2) is tdf
    tdf.set(("nested", "x", "z"), value * 3)
    assert torch.equal(tdf.get(("nested", "g")), value * 2)
    assert torch.equal(tdf.get(("nested", "x", "z")), value * 3)
    assert tdf.get(("nested", "x")).batch_size == BATCH
    with pytest.raises(RuntimeError):  # a Python scalar is a 0-d tensor: it does not fit batch [3, 4]
        tdf.set(("nested", "scalar"), 1.5)
    tdf.set(("nested", "sub"), {"q": torch.ones(3, 4)})
    assert isinstance(tdf.get(("nested", "sub")), TensorDictBase)
    assert tdf.get(("nested", "sub")).batch_size == BATCH
    assert_same_content(tdf.exclude(("nested", "g"), ("nested", "x"), ("nested", "sub")))


def test_set_rejects_wrong_batch_shape(flavour, tdf):
    requires(flavour, "mapping_mutation")
    before = snapshot(tdf)
    if "new_keys" in flavour.caps:
        with pytest.raises(RuntimeError):
            tdf.set("f", torch.zeros(4, 3))
    with pytest.raises(RuntimeError):
        tdf.set("a", torch.zeros(4, 3))
    with pytest.raises(RuntimeError):
        tdf.set(("nested", "g"), torch.zeros(3))
    assert_leaves(before, lambda x: x, tdf)


def test_replace_existing_key(flavour, tdf):
    requires(flavour, "mapping_mutation")
    value = torch.full((3, 4, 7), 2.0)
    tdf.set("a", value)
    tdf.set(("nested", "d"), value)
    assert_same_leaf(flavour, tdf.get("a"), value)
    assert tdf.get(("nested", "d")).shape == (3, 4, 7)


def test_delete_and_pop(flavour, tdf):
    requires(flavour, "mapping_mutation")
    a = tdf.get("a")
    del tdf["b"]
    assert_same_leaf(flavour, tdf.pop("a"), a)
    d = tdf.get(("nested", "d"))
    assert_same_leaf(flavour, tdf.pop(("nested", "d")), d)
    del tdf["nested", "deep", "e"]
    assert tdf.pop("missing", None) is None
    with pytest.raises(KeyError):
        tdf.pop("missing")
    with pytest.raises(KeyError):
        del tdf["missing"]
    assert set(tdf.keys(True)) == {"c", "nested", ("nested", "deep")}


def test_rename_key(flavour, tdf):
    requires(flavour, "mapping_mutation")
    d = tdf.get(("nested", "d"))
    tdf.rename_key_(("nested", "d"), "d2")
    tdf.rename_key_("a", ("nested", "a2"))
    assert_same_leaf(flavour, tdf.get("d2"), d)
    assert ("nested", "d") not in tdf
    assert set(tdf.keys(True, True)) == {"b", "c", "d2", ("nested", "a2"), ("nested", "deep", "e")}
    with pytest.raises(KeyError):
        tdf.rename_key_("b", "c", safe=True)


def test_update_merges_nested(flavour, tdf):
    requires(flavour, "mapping_mutation")
    f, g = torch.ones(3, 4), torch.zeros(3, 4, 3)
    new_top = {"f": f} if "new_keys" in flavour.caps else {}  # a TensorClass holds its fields only
    out = tdf.update({**new_top, "nested": {"g": g, "deep": {"h": f * 2}}})
    assert out is tdf
    if new_top:
        assert_same_leaf(flavour, tdf.get("f"), f)
    assert_same_leaf(flavour, tdf.get(("nested", "g")), g)
    assert torch.equal(tdf.get(("nested", "deep", "h")), f * 2)
    assert_same_content(tdf.exclude(*new_top, ("nested", "g"), ("nested", "deep", "h")))


def test_update_with_tensordict_keeps_old_keys(flavour, tdf):
    requires(flavour, "mapping_mutation")
    other = flavour.factory(seed=1).select("a", ("nested", "d"))
    tdf.update(other)
    assert_same_leaf(flavour, tdf.get("a"), other.get("a"))
    assert_same_leaf(flavour, tdf.get(("nested", "d")), other.get(("nested", "d")))
    assert set(tdf.keys(True, True)) == LEAVES


def test_leaf_ids_see_a_replaced_leaf(flavour, tdf):
    """The check the in-place tests rely on: replacing a leaf changes exactly its stored tensors' ids
    (for a lazy stack, the leaf of every member)."""
    requires(flavour, "mapping_mutation")  # (a view of a file writes its rows instead: it replaces nothing)
    ids = leaf_ids(flavour, tdf)
    tdf.set(("nested", "d"), torch.zeros(3, 4, 2))  # not in place: new tensors are stored
    after = leaf_ids(flavour, tdf)
    assert after.keys() == ids.keys()
    changed = {path for path in ids if after[path] != ids[path]}
    assert changed == {path for path in ids if path[-2:] == ("nested", "d")}
    assert changed


def test_update_inplace_keeps_leaf_objects(flavour, tdf):
    requires(flavour, "inplace")
    ids = leaf_ids(flavour, tdf)
    other = flavour.factory(seed=1)
    tdf.update_(other)
    assert leaf_ids(flavour, tdf) == ids
    assert_same_content(tdf, seed=1)
    with pytest.raises(KeyError):
        tdf.update_({"missing": torch.zeros(3, 4)})


def test_set__copies_into_existing_leaves(flavour, tdf):
    """set_ keeps the stored leaves and copies values in: the leaf's own shape (the fast path), a value
    broadcast to it, another dtype, a nested key and a locked TensorDict; bad values change nothing."""
    requires(flavour, "inplace")
    ids = leaf_ids(flavour, tdf)
    assert tdf.set_("a", torch.full((3, 4, 5), 2.0)) is tdf
    tdf.set_(("nested", "d"), torch.full((3, 4, 1), 3.0))  # broadcast over the last dim
    tdf.set_("b", torch.full((3, 4), 4.5))  # float into an int64 leaf: copy_ casts
    tdf.set_(("nested", "deep", "e"), torch.full((3, 4), 5, dtype=torch.float32), non_blocking=False)
    assert leaf_ids(flavour, tdf) == ids
    assert torch.equal(tdf.get("a"), torch.full((3, 4, 5), 2.0))
    assert torch.equal(tdf.get(("nested", "d")), torch.full((3, 4, 2), 3.0))
    assert torch.equal(tdf.get("b"), torch.full((3, 4), 4, dtype=torch.int64))
    assert tdf.get(("nested", "deep", "e")).dtype == torch.float64
    assert torch.equal(tdf.get(("nested", "deep", "e")), torch.full((3, 4), 5.0, dtype=torch.float64))
    before = snapshot(tdf)
    with pytest.raises(KeyError, match='"missing"'):
        tdf.set_("missing", torch.zeros(3, 4))
    with pytest.raises(KeyError, match='"missing"'):
        tdf.set_(("nested", "missing"), torch.zeros(3, 4))
    with pytest.raises(RuntimeError, match="'a'"):  # the batch dims do not match
        tdf.set_("a", torch.zeros(4, 3, 5))
    with pytest.raises(RuntimeError, match="'a'"):  # the batch dims match, the feature dims do not fit
        tdf.set_("a", torch.zeros(3, 4, 7))
    assert_leaves(before, lambda x: x, tdf)
    if "lock" in flavour.caps:
        tdf.lock_()
        tdf.set_("a", torch.ones(3, 4, 5))
        assert torch.equal(tdf.get("a"), torch.ones(3, 4, 5))


def test_replace_copies_then_updates(flavour, tdf):
    a, g = torch.full((3, 4, 5), 7.0), torch.zeros(3, 4, 3)
    assert tdf.replace() is tdf
    assert tdf.replace({}) is tdf
    out = tdf.replace({"nested": {"g": g}}, a=a)
    assert out is not tdf
    assert_same_leaf(flavour, out.get("a"), a)
    assert_same_leaf(flavour, out.get(("nested", "g")), g)
    assert_same_leaf(flavour, out.get("b"), tdf.get("b"))  # a shallow copy: the other leaves are shared
    assert_same_content(tdf)  # the source is unchanged (its nested node too)
    assert_same_content(out.exclude("a", ("nested", "g")).update({"a": tdf.get("a")}))
    with pytest.raises(TypeError, match="at most one positional argument"):
        tdf.replace({}, {})


def test_to_dict(flavour, tdf):
    out = tdf.to_dict()
    assert type(out) is dict
    assert set(out) == {"a", "b", "c", "nested"}
    assert type(out["nested"]) is dict
    assert type(out["nested"]["deep"]) is dict
    assert_same_leaf(flavour, out["nested"]["deep"]["e"], tdf.get(("nested", "deep", "e")))


def test_state_dict_round_trip(flavour, tdf):
    requires(flavour, "state_dict")
    sd = tdf.state_dict()
    assert set(sd) == {"a", "b", "c", "nested.d", "nested.deep.e"}
    if "new_keys" in flavour.caps:
        back = tdf.empty().update(sd).unflatten_keys()
    else:  # a TensorClass refuses flat keys (not fields): unflatten a plain TensorDict, then wrap it
        back = type(tdf).from_tensordict(tdf.to_tensordict().empty().update(sd).unflatten_keys())
    assert_leaves(tdf, lambda x: x, back)
    target = flavour.factory(seed=1)
    target.load_state_dict(sd)
    assert_same_content(target)


def test_pickle_round_trip(flavour, tdf):
    requires(flavour, "pickle")
    back = pickle.loads(pickle.dumps(tdf))
    assert back.batch_size == tdf.batch_size
    assert back.device == tdf.device
    assert back.get(("nested", "deep")).batch_size == BATCH
    assert_same_content(back)


def test_copy_and_deepcopy(flavour, tdf):
    shallow = copy.copy(tdf)
    deep = copy.deepcopy(tdf)
    assert_same_leaf(flavour, shallow.get(("nested", "d")), tdf.get(("nested", "d")))
    assert shallow.get("nested") is not tdf.get("nested")
    assert deep.get(("nested", "d")) is not tdf.get(("nested", "d"))
    assert_same_content(shallow)
    assert_same_content(deep)


def test_empty_and_is_empty(tdf):
    empty = tdf.empty()
    assert empty.batch_size == BATCH
    assert empty.is_empty()
    assert not tdf.is_empty()
    assert list(empty.keys()) == []
    rec = tdf.empty(recurse=True)
    assert set(rec.keys(True)) == {"nested", ("nested", "deep")}
    assert rec.is_empty()


def test_leaf_keys_constant():
    assert {k[0] if len(k) == 1 else k for k in LEAF_KEYS} == LEAVES


def test_declared_facts_hold(flavour, tdf):
    """The fact-caps a flavour declares describe how it was built."""
    assert ("device" in flavour.caps) is (tdf.device is not None)
    assert ("noncontiguous" in flavour.caps) is (not tdf.is_contiguous())
    is_view = any(x.untyped_storage().nbytes() > x.numel() * x.element_size() for x in leaves(tdf).values())
    assert ("view" in flavour.caps) is is_view
    assert ("memmap" in flavour.caps) is tdf.is_memmap()
    assert ("tensorclass" in flavour.caps) is isinstance(tdf, TensorClass)


def test_assert_leaves_catches_differences():
    td = make_td()
    assert_leaves(td, lambda x: x, td)
    wrong = [
        (lambda x: x + 1 if x.dtype == torch.float64 else x, td),  # a value
        (lambda x: x.double() if x.dtype == torch.float32 else x, td),  # a dtype
        (lambda x: x[:2], td),  # a shape
        (lambda x: x, td.exclude("b")),  # a missing leaf
        (lambda x: None if x.dtype == torch.bool else x, td),  # an extra leaf
    ]
    for fn, result in wrong:
        with pytest.raises(AssertionError):
            assert_leaves(td, fn, result)


def test_load_state_dict_strict_missing_keys(flavour, tdf):
    requires(flavour, "state_dict")
    with pytest.raises(RuntimeError):
        tdf.load_state_dict({"a": torch.zeros(3, 4, 5)})
    assert_same_content(tdf)


def test_load_state_dict_takes_the_batch_sizes(flavour, tdf):
    requires(flavour, "state_dict")
    back = TensorDict().load_state_dict(tdf.state_dict(), strict=False)
    assert back.batch_size == tdf.batch_size
    assert back.get(("nested", "deep")).batch_size == tdf.get(("nested", "deep")).batch_size
    for key in LEAF_KEYS:
        torch.testing.assert_close(back.get(key), tdf.get(key))


def test_load_state_dict_not_strict(flavour, tdf):
    requires(flavour, "state_dict")
    requires(flavour, "inplace")
    tdf.load_state_dict({"a": torch.zeros(3, 4, 5), "nested": {"d": torch.ones(3, 4, 2)}}, strict=False)
    assert (tdf.get("a") == 0).all()
    assert (tdf.get(("nested", "d")) == 1).all()
    rest = ["b", "c", ("nested", "deep", "e")]
    assert_leaves(reference(), lambda x: x, tdf.select(*rest), keys=rest)


def test_unflatten_keys_over_a_leaf_names_it(flavour, tdf):
    requires(flavour, "new_keys")
    td = tdf.to_tensordict()
    td.set("a.x", torch.ones(*BATCH))
    with pytest.raises(KeyError, match=r"override the leaf 'a' \(Unflattening key\(s\) in tensordict will override"):
        td.unflatten_keys()
    assert "a.x" in td.keys()  # unchanged
