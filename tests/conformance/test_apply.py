"""apply / apply_ / named_apply (incl. None results dropping keys), and vmap over a flavour."""

from __future__ import annotations

import pytest
import torch
from _flavours import (
    BATCH,
    assert_leaves,
    assert_same_content,
    assert_same_kind,
    float_part,
    leaf_ids,
    leaves,
    requires,
    snapshot,
)

from tensorbatch import TensorDictBase


def _double(x):
    return x * 2 if x.is_floating_point() else x


def test_apply(tdf):
    out = tdf.apply(_double)
    assert out is not tdf
    assert_leaves(tdf, _double, out, batch_size=BATCH)
    assert out.get("nested").batch_size == BATCH
    assert out.get(("nested", "deep")).batch_size == BATCH
    assert out.device == tdf.device
    assert_same_content(tdf)


def test_apply_with_other(flavour, tdf):
    other = flavour.factory(seed=1)
    theirs = leaves(other)
    out = tdf.apply(lambda x, y: x.float() - y.float(), other)
    assert_leaves({p: x.float() - theirs[p].float() for p, x in leaves(tdf).items()}, lambda x: x, out)


def test_apply_with_two_others(flavour, tdf):
    o1, o2 = flavour.factory(seed=1), flavour.factory(seed=2)
    l1, l2 = leaves(o1), leaves(o2)
    out = tdf.apply(lambda x, y, z: torch.where(z.bool(), x, y), o1, o2)
    expected = {p: torch.where(l2[p].bool(), x, l1[p]) for p, x in leaves(tdf).items()}
    assert_leaves(expected, lambda x: x, out)


def test_apply_other_missing_key(flavour, tdf):
    other = flavour.factory(seed=1).exclude("b", ("nested", "d"))
    with pytest.raises(KeyError):
        tdf.apply(lambda x, y: x, other)
    out = tdf.apply(lambda x, y: x.float() + y, other, default=torch.tensor(10.0))
    assert torch.equal(out.get("b"), tdf.get("b").float() + 10)
    assert torch.equal(out.get(("nested", "d")), tdf.get(("nested", "d")) + 10)


def test_apply_none_drops_leaf(tdf):
    out = tdf.apply(lambda x: None if x.dtype == torch.bool else x)
    assert_leaves(tdf, lambda x: None if x.dtype == torch.bool else x, out)
    assert "c" not in out


def test_apply_none_drops_empty_nested_node(tdf):
    out = tdf.apply(lambda x: None if x.dtype == torch.float64 else x)
    assert set(out.keys(True)) == {"a", "b", "c", "nested", ("nested", "d")}
    kept = tdf.apply(lambda x: None if x.dtype == torch.float64 else x, filter_empty=False)
    assert set(kept.keys(True)) == {"a", "b", "c", "nested", ("nested", "d"), ("nested", "deep")}
    assert kept.get(("nested", "deep")).is_empty()


def test_apply_all_none(tdf):
    assert tdf.apply(lambda x: None) is None
    kept = tdf.apply(lambda x: None, filter_empty=False)
    assert_same_kind(tdf, kept)
    assert kept.is_empty()
    assert set(kept.keys(True)) == {"nested", ("nested", "deep")}


def test_apply_all_none_filter_empty_true(tdf):
    assert tdf.apply(lambda x: None, filter_empty=True) is None


def test_apply_new_batch_size(tdf):
    out = tdf.apply(lambda x: x[:, 0], batch_size=[3])
    assert_leaves(tdf, lambda x: x[:, 0], out, batch_size=[3])
    assert out.get("nested").batch_size == torch.Size([3])
    assert out.get(("nested", "deep")).batch_size == torch.Size([3])


def test_apply_inconsistent_result_raises(flavour, tdf):
    requires(flavour, "batch_size_shrink")  # a stack of 0-d stacks hands fn leaves with no batch dims
    # x[:1] does not fit the batch size whether fn sees whole leaves or a lazy stack member's leaves
    with pytest.raises(RuntimeError):
        tdf.apply(lambda x: x[:1] if x.dtype == torch.bool else x)
    assert_same_content(tdf)


def test_apply_changes_feature_dims(tdf):
    out = tdf.apply(lambda x: x.unsqueeze(-1).expand(*x.shape, 2))
    assert_leaves(tdf, lambda x: x.unsqueeze(-1).expand(*x.shape, 2), out, batch_size=BATCH)


def test_apply_error_keeps_type_and_names_key(tdf):
    def boom(x):
        if x.dtype == torch.float64:
            raise ValueError("boom")
        return x

    with pytest.raises(ValueError, match="boom") as info:
        tdf.apply(boom)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "nested" in notes
    assert "deep" in notes
    assert "e" in notes


def test_apply_inplace(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    ids = leaf_ids(flavour, tdf)
    assert tdf.apply_(_double) is tdf
    assert leaf_ids(flavour, tdf) == ids
    assert_leaves(before, _double, tdf)
    out = tdf.apply(torch.zeros_like, inplace=True)
    assert out is tdf
    assert_leaves(before, torch.zeros_like, tdf)


def test_apply_inplace_with_other(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    other = flavour.factory(seed=1)
    theirs = leaves(other)
    sub, keys = float_part(flavour, tdf)
    sub.apply_(lambda x, y: x + y, float_part(flavour, other)[0])
    expected = {p: x + theirs[p] if p in keys else x for p, x in before.items()}
    assert_leaves(expected, lambda x: x, tdf)


def test_apply_out(flavour, tdf):
    requires(flavour, "inplace")
    target = flavour.factory(seed=1)
    ids = leaf_ids(flavour, target)
    assert tdf.apply(_double, out=target) is target
    assert leaf_ids(flavour, target) == ids
    assert_leaves(tdf, _double, target)


def test_named_apply(flavour, tdf):
    requires(flavour, "uniform_members")
    seen = []

    def fn(key, x):
        seen.append(key)
        return x + 1 if key in ("a", "e") else x

    out = tdf.named_apply(fn)
    assert sorted(set(seen)) == ["a", "b", "c", "d", "e"]
    if "whole_leaf_apply" in flavour.caps:  # else once per lazy stack member
        assert len(seen) == 5
    expected = {p: (x + 1 if p[-1] in ("a", "e") else x) for p, x in leaves(tdf).items()}
    assert_leaves(expected, lambda x: x, out, batch_size=BATCH)


def test_named_apply_nested_keys(flavour, tdf):
    requires(flavour, "uniform_members")
    seen = []
    out = tdf.named_apply(lambda key, x: seen.append(key) or x, nested_keys=True)
    assert sorted(set(seen), key=str) == sorted(["a", "b", "c", ("nested", "d"), ("nested", "deep", "e")], key=str)
    if "whole_leaf_apply" in flavour.caps:  # else once per lazy stack member
        assert len(seen) == 5
    assert_leaves(tdf, lambda x: x, out)


def test_named_apply_none_drops_and_others(flavour, tdf):
    other = flavour.factory(seed=1)
    theirs = leaves(other)
    out = tdf.named_apply(lambda key, x, y: None if key == "d" else x.float() * y.float(), other)
    expected = {p: x.float() * theirs[p].float() for p, x in leaves(tdf).items() if p[-1] != "d"}
    assert_leaves(expected, lambda x: x, out)
    assert ("nested", "d") not in out


def test_apply_call_on_nested(tdf):
    seen = []

    def fn(x):
        seen.append(type(x))
        return x

    out = tdf.apply(fn, call_on_nested=True)
    assert any(issubclass(t, TensorDictBase) for t in seen)
    assert_leaves(tdf, lambda x: x, out)


def test_vmap_over_dim0(flavour, tdf):
    requires(flavour, "pytree")
    out = torch.vmap(lambda td: td.float() * 2)(tdf)
    assert_leaves(tdf, lambda x: x.float() * 2, out, batch_size=BATCH)
    sums = torch.vmap(lambda td: td.get(("nested", "d")).sum())(tdf)
    torch.testing.assert_close(sums, tdf.get(("nested", "d")).sum(dim=(1, 2)))
