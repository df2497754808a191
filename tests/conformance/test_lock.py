"""Lock semantics: a locked TensorDict refuses new/removed keys (RuntimeError, nothing changed) and
allows in-place writes into existing leaves."""

from __future__ import annotations

import pytest
import torch
from _flavours import BATCH, assert_leaves, assert_same_content, leaf_ids, requires, snapshot


@pytest.fixture
def locked(flavour, tdf):
    requires(flavour, "lock")
    return tdf.lock_()


def test_lock_and_unlock_reach_nested(flavour, tdf):
    requires(flavour, "lock")
    assert not tdf.is_locked
    assert tdf.lock_() is tdf
    assert tdf.is_locked
    assert tdf.get("nested").is_locked
    assert tdf.get(("nested", "deep")).is_locked
    assert tdf.unlock_() is tdf
    assert not tdf.is_locked
    assert not tdf.get("nested").is_locked
    assert not tdf.get(("nested", "deep")).is_locked


Z = torch.zeros(3, 4)
REJECTED = {
    "set_new": lambda td: td.set("z", Z),
    "setitem_new": lambda td: td.__setitem__("z", Z),
    "setitem_new_nested": lambda td: td.__setitem__(("nested", "z"), Z),
    "setitem_new_level": lambda td: td.__setitem__(("x", "y"), Z),
    "set_on_nested_node": lambda td: td.get("nested").set("z", Z),
    "setitem_existing": lambda td: td.__setitem__("b", torch.zeros(3, 4, dtype=torch.int64)),
    "set_existing": lambda td: td.set(("nested", "d"), torch.zeros(3, 4, 2)),
    "del": lambda td: td.__delitem__("a"),
    "del_nested": lambda td: td.__delitem__(("nested", "deep", "e")),
    "del_": lambda td: td.del_("b"),
    "pop": lambda td: td.pop("a"),
    "pop_nested": lambda td: td.pop(("nested", "d")),
    "popitem": lambda td: td.popitem(),
    "rename_key_": lambda td: td.rename_key_("a", "a2"),
    "update_new_key": lambda td: td.update({"z": Z}),
    "update_existing": lambda td: td.update({"b": torch.zeros(3, 4, dtype=torch.int64)}),
    "update_nested_new": lambda td: td.update({"nested": {"z": Z}}),
    "clear": lambda td: td.clear(),
    "setdefault_new": lambda td: td.setdefault("z", Z),
    "select_inplace": lambda td: td.select("a", inplace=True),
    "exclude_inplace": lambda td: td.exclude("a", inplace=True),
    "flatten_keys_inplace": lambda td: td.flatten_keys(inplace=True),
    "setitem_index_new_key": lambda td: td.__setitem__(0, {"z": torch.zeros(4)}),
}
# the capability a case needs beyond lock (a TensorClass refuses new top-level keys and string keys in [])
REJECTED_NEEDS = {
    "set_new": "new_keys",
    "setitem_new": "str_keys",
    "setitem_new_nested": "str_keys",
    "setitem_new_level": "str_keys",
    "setitem_existing": "str_keys",
}


@pytest.mark.parametrize("case", REJECTED, ids=list(REJECTED))
def test_locked_rejects_key_changes(flavour, locked, case):
    if case in REJECTED_NEEDS:
        requires(flavour, REJECTED_NEEDS[case])
    with pytest.raises(RuntimeError):
        REJECTED[case](locked)
    assert_same_content(locked)
    assert set(locked.keys(True)) == {
        "a",
        "b",
        "c",
        "nested",
        ("nested", "d"),
        ("nested", "deep"),
        ("nested", "deep", "e"),
    }
    assert locked.is_locked


def _fill(value):
    def fn(x):
        return torch.full_like(x, value)

    return fn


def _at(index, value):
    def fn(x):
        x = x.clone()
        x[index] = value
        return x

    return fn


# id -> (in-place write on the locked TensorDict, the same write expressed on a leaf copy)
ALLOWED = {
    "set_": (lambda td: td.set_(("nested", "d"), torch.full((3, 4, 2), 5.0)), {("nested", "d"): _fill(5.0)}),
    "set_inplace": (lambda td: td.set("a", torch.full((3, 4, 5), 2.0), inplace=True), {("a",): _fill(2.0)}),
    "update_": (
        lambda td: td.update_(
            {"b": torch.full((3, 4), 7), "nested": {"deep": {"e": torch.zeros(3, 4, dtype=torch.float64)}}}
        ),
        {("b",): _fill(7), ("nested", "deep", "e"): _fill(0)},
    ),
    "update_inplace": (lambda td: td.update({"b": torch.full((3, 4), 7)}, inplace=True), {("b",): _fill(7)}),
    "setitem_index_number": (lambda td: td.__setitem__(1, 0), "all", _at(1, 0)),
    "setitem_index_dict": (
        lambda td: td.__setitem__((slice(None), 0), {"a": torch.ones(3, 5)}),
        {("a",): _at((slice(None), 0), 1.0)},
    ),
    "zero_": (lambda td: td.zero_(), "all", _fill(0)),
    "fill_": (lambda td: td.fill_(("nested", "d"), 3.0), {("nested", "d"): _fill(3.0)}),
    "masked_fill_": (
        lambda td: td.masked_fill_(torch.tensor([True, False, True]), 1),
        "all",
        _at(torch.tensor([True, False, True]), 1),
    ),
    "apply_": (lambda td: td.apply_(lambda x: x * 0), "all", _fill(0)),
    "set_at_": (lambda td: td.set_at_("a", torch.zeros(4, 5), 2), {("a",): _at(2, 0.0)}),
    "leaf_mutation": (lambda td: td.get("a").mul_(2), {("a",): lambda x: x * 2}),
}


# these write into a leaf object read from the TensorDict
LEAF_WRITES = {"leaf_mutation"}


@pytest.mark.parametrize("case", ALLOWED, ids=list(ALLOWED))
def test_locked_allows_inplace_writes(flavour, locked, case):
    requires(flavour, "inplace")
    if case in LEAF_WRITES:
        requires(flavour, "stored_leaves")
    op, *spec = ALLOWED[case]
    before = snapshot(locked)
    ids = leaf_ids(flavour, locked)
    op(locked)
    changes = {p: spec[1] for p in before} if spec[0] == "all" else spec[0]

    def expected(path, x):
        return changes[path](x) if path in changes else x

    assert_leaves({p: expected(p, x) for p, x in before.items()}, lambda x: x, locked)
    assert leaf_ids(flavour, locked) == ids
    assert locked.is_locked


def test_unlocked_after_unlock_accepts_changes(flavour, locked):
    requires(flavour, "mapping_mutation")
    locked.unlock_()
    new_top = {"z"} if "new_keys" in flavour.caps else set()  # a TensorClass holds its fields only
    if new_top:
        locked.set("z", Z)
    locked.set(("nested", "z"), Z)
    del locked["a"]
    assert set(locked.keys()) == {"b", "c", "nested", *new_top}
    assert ("nested", "z") in locked


def test_relock_after_changes(flavour, tdf):
    requires(flavour, "lock")
    requires(flavour, "mapping_mutation")
    tdf.lock_().unlock_()
    tdf.set(("nested", "z"), Z)
    tdf.lock_()
    assert tdf.get("nested").is_locked
    with pytest.raises(RuntimeError):
        tdf.get("nested")["w"] = Z


def _change_keys(flavour, out, locked):
    """Change the keys of ``out`` (what a lock refuses): it takes them, ``locked`` is untouched."""
    if "new_keys" in flavour.caps:  # add a key
        out.set("z", torch.zeros(out.batch_size))
        assert "z" not in locked
    key = sorted(out.keys())[0]  # delete one (a TensorClass takes no new top-level key)
    del out[key]
    assert key not in out
    assert key in locked


# tensordict 0.15.3 hands these results back unlocked
UNLOCKED_RESULTS = {
    "clone": lambda td: td.clone(),
    "index": lambda td: td[0],
    "slice": lambda td: td[:2],
    "select": lambda td: td.select("a"),
    "exclude": lambda td: td.exclude("a"),
    "apply": lambda td: td.apply(lambda x: x),
    "stack": lambda td: torch.stack([td, td], 0),
    "unbind": lambda td: td.unbind(0)[0],
    "sum": lambda td: td.float().sum(0),
}


# a lazy stack indexed (or unbound) along its stack dim hands back its members, which share its lock
NODE_RESULTS = {"index", "slice", "unbind"}


@pytest.mark.parametrize("case", UNLOCKED_RESULTS, ids=list(UNLOCKED_RESULTS))
def test_new_results_are_unlocked(flavour, locked, case):
    if case in NODE_RESULTS:
        requires(flavour, "fresh_index_nodes")
    out = UNLOCKED_RESULTS[case](locked)
    assert not out.is_locked
    _change_keys(flavour, out, locked)


# tensordict 0.15.3 locks these results of a locked TensorDict (pointwise math, casts, moves, shape views): the
# table is tensorbatch/_base/locks.py, checked op by op against tensordict in
# tests/differential/test_vs_tensordict_locks.py
LOCKED_RESULTS = {
    "reshape": lambda td: td.reshape(12),
    "view": lambda td: td.view(-1) if td.is_contiguous() else td.reshape(-1),
    "permute": lambda td: td.permute(1, 0),
    "unsqueeze": lambda td: td.unsqueeze(0),
    "float": lambda td: td.float(),
    "to_dtype": lambda td: td.to(torch.float64),
    "add": lambda td: td.float() + 1,
}


LAZY_MEMBER_RESULTS = {"permute", "reshape", "view"}


def _unlock(td):
    """Unlock ``td``: None, or the message of the RuntimeError that refused it."""
    try:
        td.unlock_()
    except RuntimeError as err:
        return str(err)
    return None


@pytest.mark.parametrize("case", list(LOCKED_RESULTS))
def test_results_keep_the_lock(flavour, locked, case):
    out = LOCKED_RESULTS[case](locked)
    assert out.is_locked
    key = sorted(out.keys())[0]
    with pytest.raises(RuntimeError, match="locked"):
        del out[key]
    assert key in out
    refused = _unlock(out)
    if refused is not None:
        # a lazy stack's result made of its own members (permute keeping the members' dims, reshape of a
        # stack of stacks) shares its lock, as tensordict's: unlocking it would unlock the source's members
        assert "lazy" in flavour.caps and case in LAZY_MEMBER_RESULTS
        assert "locked graph" in refused
        return
    _change_keys(flavour, out, locked)


def test_apply_propagate_lock(locked):
    assert locked.apply(lambda x: x, propagate_lock=True).is_locked
    assert not locked.apply(lambda x: x).is_locked


def test_locked_content_readable(locked):
    assert_same_content(locked)
    assert locked[0].batch_size == BATCH[1:]
    assert_leaves(locked, lambda x: x[1:], locked[1:])


def test_lock_and_unlock_as_context_managers(flavour, tdf):
    requires(flavour, "lock")
    with tdf.lock_() as entered:
        assert entered is tdf
        assert tdf.is_locked and tdf.get("nested").is_locked
        with tdf.unlock_():
            assert not tdf.is_locked
        assert tdf.is_locked
    assert not tdf.is_locked and not tdf.get("nested").is_locked
    tdf.lock_()
    with tdf.lock_():  # locked already: nothing to undo
        pass
    assert tdf.is_locked
    with pytest.raises(ValueError, match="inside"), tdf.unlock_():
        raise ValueError("inside")
    assert tdf.is_locked  # undone on the way out of the error
    tdf.unlock_()


def test_clear_refs_for_compile_forgets_the_last_op(flavour, tdf):
    requires(flavour, "lock")
    assert tdf.lock_().clear_refs_for_compile_() is tdf
    with tdf:
        pass
    assert tdf.is_locked
