"""Differential tests, lazy stacks: construction, reads, indexing, writes and operations.

Every case builds its own stacks from the library it is given (``data=None``). A heterogeneous
stack cannot be compared as a TensorDict (reading a leaf whose shapes differ raises), so such
results are compared through :func:`_m`: class name, batch size, stack dim and the members.

Deliberate differences are listed in ``DIFFERENCES`` (conftest.py, ids ``[lz_...]``); bugs are
strict xfails marked here (only when the subject is tensorbatch, so the self-check against
tensordict stays green).
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV

pytestmark = pytest.mark.differential

_IS_TB = os.environ.get(SUBJECT_ENV, "tensorbatch") == "tensorbatch"


def bug(reason: str) -> Any:
    """A strict xfail for a tensorbatch bug (inactive when the suite runs against another subject)."""
    return pytest.mark.xfail(_IS_TB, strict=True, reason=f"bug: {reason}")


def case(case_id: str, fn: Any, **kwargs: Any) -> Any:
    """A ``pytest.param`` of (fn, run_both keyword arguments); the stacks are built inside ``fn``."""
    return pytest.param(fn, {"data": None, **kwargs}, id=case_id)


def bug_case(case_id: str, fn: Any, reason: str, **kwargs: Any) -> Any:
    return pytest.param(fn, {"data": None, **kwargs}, id=case_id, marks=bug(reason))


# --------------------------------------------------------------------------------------------------
# Builders (one fresh set of members per library)
# --------------------------------------------------------------------------------------------------
def _member(lib: Any, i: int, n: int = 3) -> Any:
    base = 100 * i
    return lib.TensorDict(
        {
            "x": torch.arange(2.0 * n).reshape(n, 2) + base,
            "i": torch.arange(n) + base,
            "n": {"z": torch.arange(float(n)) + base + 50},
        },
        [n],
    )


def _members(lib: Any, k: int = 3, n: int = 3) -> list[Any]:
    return [_member(lib, i, n) for i in range(k)]


def _homo(lib: Any, stack_dim: int = 0, n: int = 3) -> Any:
    """Three members of batch [n] with the same keys and leaf shapes."""
    return lib.LazyStackedTensorDict(*_members(lib, 3, n), stack_dim=stack_dim)


def _het(lib: Any, stack_dim: int = 0) -> Any:
    """Two members of batch [3]: ``x`` is [3, 2] in one, [3, 4] in the other; ``oa``/``ob`` are exclusive."""
    a = lib.TensorDict({"x": torch.zeros(3, 2), "n": {"y": torch.arange(3.0)}, "oa": torch.ones(3)}, [3])
    b = lib.TensorDict({"x": torch.ones(3, 4), "n": {"y": torch.arange(3.0) + 3}, "ob": torch.ones(3)}, [3])
    return lib.LazyStackedTensorDict(a, b, stack_dim=stack_dim)


def _het_mixed(lib: Any) -> Any:
    """Two members of batch [3] with float and int leaves, ``x`` heterogeneous."""
    a = lib.TensorDict({"x": torch.arange(6.0).reshape(3, 2), "i": torch.arange(3)}, [3])
    b = lib.TensorDict({"x": torch.arange(12.0).reshape(3, 4), "i": torch.arange(3) + 5}, [3])
    return lib.LazyStackedTensorDict(a, b)


def _m(out: Any) -> Any:
    """A lazy stack as (class name, batch size, stack dim, members); anything else unchanged."""
    if type(out).__name__ == "LazyStackedTensorDict":
        return type(out).__name__, out.batch_size, out.stack_dim, list(out.tensordicts)
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        return type(out)(_m(o) for o in out)
    return out


def _ragged_holders(lib: Any, how: str, dim: int) -> Any:
    """Two TensorDicts (batch [2]) each holding a lazy stack of members of different shapes and keys, stacked."""
    ragged = lib.lazy_stack([lib.TensorDict(a=torch.zeros(3)), lib.TensorDict(a=torch.ones(4), b=torch.ones(2))])
    holders = [lib.TensorDict(lazy=ragged, x=torch.arange(2.0), batch_size=[2]) for _ in range(2)]
    holders[1] = holders[1].clone()
    if how == "lazy":
        out = lib.dense_stack_tds(lib.lazy_stack(holders, dim))
    elif how == "list":
        out = lib.dense_stack_tds(holders, dim)
    elif how == "torch":
        out = torch.stack(holders, dim)
    else:
        out = lib.maybe_dense_stack(holders, dim)
    inner = out["lazy"]
    return (
        type(out).__name__,
        out.batch_size,
        out["x"],
        _m(inner),
        [m["a"] for m in inner.tensordicts],
    )


def _written(write: Any, stack: Any = _homo) -> Any:
    """Build a stack, run ``write(lib, s)``, return the stack as members (where the values landed)."""

    def fn(lib: Any, _: Any) -> Any:
        s = stack(lib)
        write(lib, s)
        return _m(s)

    return fn


def _named(s: Any) -> Any:
    """Name a stack, then read the names back from it, its members, its parts and its renamed copies."""
    s.refine_names("x", "y")
    out = [s.names, [td.names for td in s.tensordicts], s[0].names, s[:, 0].names, s[:, :2].names, s["n"].names]
    out += [s.rename(x="p").names, s.names]
    s.names = None
    return [*out, s.names, [td.names for td in s.tensordicts]]


MASK2D = torch.tensor([[True, False, True], [False, False, True], [True, True, False]])


# --------------------------------------------------------------------------------------------------
# Construction and keys
# --------------------------------------------------------------------------------------------------
CONSTRUCT = [
    case("lz_ctor_sd0", lambda lib, _: _homo(lib)),
    case("lz_ctor_sd1", lambda lib, _: (lambda s: (s, s.stack_dim, s.batch_size))(_homo(lib, 1, n=4))),
    case("lz_ctor_sd_neg1", lambda lib, _: (lambda s: (s.stack_dim, s.batch_size))(_homo(lib, -1, n=4))),
    case(
        "lz_ctor_members",
        lambda lib, _: (
            lambda tds: [m is td for m, td in zip(lib.LazyStackedTensorDict(*tds).tensordicts, tds, strict=True)]
        )(_members(lib)),
    ),
    case("lz_lazy_stack_dim1", lambda lib, _: _m(lib.lazy_stack(_members(lib, 2, 4), 1))),
    case("lz_lazy_stack_dim_neg1", lambda lib, _: _m(lib.lazy_stack(_members(lib, 2, 4), -1))),
    case("lz_lazy_stack_empty", lambda lib, _: lib.lazy_stack([]), raises=RuntimeError),
    case(
        "lz_ctor_non_td",
        lambda lib, _: lib.LazyStackedTensorDict(_member(lib, 0), torch.zeros(3)),
        raises=TypeError,
    ),
    case(
        "lz_ctor_bad_stack_dim",
        lambda lib, _: lib.LazyStackedTensorDict(*_members(lib), stack_dim=3),
        raises=RuntimeError,
    ),
    case("lz_ctor_ragged", lambda lib, _: _m(lib.LazyStackedTensorDict(_member(lib, 0, 3), _member(lib, 1, 4)))),
    case(
        "lz_ctor_ragged_sd1",
        lambda lib, _: lib.LazyStackedTensorDict(_member(lib, 0, 3), _member(lib, 1, 4), stack_dim=1).batch_size,
    ),
    case(
        "lz_ctor_batch_dims_differ",
        lambda lib, _: lib.LazyStackedTensorDict(_member(lib, 0), _member(lib, 1).unsqueeze(-1)),
        raises=RuntimeError,
    ),
    case("lz_het_shape", lambda lib, _: (lambda s: (s.batch_size, s.batch_dims, len(s), s.numel()))(_het(lib))),
    case(
        "lz_het_keys",
        lambda lib, _: (
            lambda s: (
                list(s.keys()),
                list(s.keys(True, True)),
                sorted(s.keys(True), key=str),
                "oa" in s.keys(),  # (the keys view is under test)
                ("n", "y") in s.keys(True),
            )
        )(_het(lib)),
    ),
    case("lz_het_nested_lazy", lambda lib, _: _m(_het(lib)["n"])),
    case("lz_homo_nested_lazy_sd1", lambda lib, _: _m(_homo(lib, 1)["n"])),
    case("lz_het_exclusive_in_members", lambda lib, _: [list(td.keys()) for td in _het(lib).tensordicts]),
    case("lz_names", lambda lib, _: _named(_homo(lib, 1))),
    case(
        "lz_stack_dim_name_densified",
        lambda lib, _: (lambda s: (s.names, s.to_tensordict().names, s.contiguous().names, s.densify().names))(
            lib.lazy_stack([lib.TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)], stack_dim_name="s")
        ),
    ),
    case(
        "lz_names_clone",
        lambda lib, _: (lambda s: (s.clone().names, (s + 1).names, s.to_tensordict().names))(
            _homo(lib).refine_names("x", "y")
        ),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), CONSTRUCT)
def test_lazy_construct(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------
def _nested_parts(lib: Any, s: Any, **kwargs: Any) -> Any:
    nt = s.get("x", as_nested_tensor=True, **kwargs)
    return nt.is_nested, nt.layout, list(nt.unbind())


READ = [
    case("lz_getitem_sd0", lambda lib, _: (_homo(lib)["x"], _homo(lib)["i"], _homo(lib)["n", "z"])),
    case("lz_getitem_sd1", lambda lib, _: (_homo(lib, 1)["x"], _homo(lib, 1)["n", "z"])),
    case("lz_getitem_het_common", lambda lib, _: _het(lib)["n", "y"]),
    case("lz_getitem_het_raises", lambda lib, _: _het(lib)["x"], raises=RuntimeError),
    case("lz_get_het_raises", lambda lib, _: _het(lib).get("x"), raises=RuntimeError),
    case("lz_getitem_exclusive", lambda lib, _: _het(lib)["oa"], raises=KeyError),
    case("lz_getitem_missing_nested", lambda lib, _: _het(lib)["n", "zz"], raises=KeyError),
    case(
        "lz_get_exclusive_default",
        lambda lib, _: (_het(lib).get("oa"), _het(lib).get("oa", "D"), _het(lib).get(("n", "zz"), 0)),
    ),
    case("lz_get_padded", lambda lib, _: _het(lib).get("x", as_padded_tensor=True)),
    case(
        "lz_get_padded_value_left",
        lambda lib, _: _het(lib).get("x", as_padded_tensor=True, padding_value=-1.0, padding_side="left"),
    ),
    case("lz_get_padded_value_right", lambda lib, _: _het(lib).get("x", as_padded_tensor=True, padding_value=7)),
    case(
        "lz_get_padded_three",
        lambda lib, _: lib.LazyStackedTensorDict(*[lib.TensorDict({"v": torch.arange(k)}, []) for k in (1, 3, 2)]).get(
            "v", as_padded_tensor=True, padding_value=-1
        ),
    ),
    case("lz_get_padded_homo", lambda lib, _: _homo(lib).get("x", as_padded_tensor=True)),
    case("lz_get_padded_sd1", lambda lib, _: _het(lib, 1).get("x", as_padded_tensor=True)),
    case("lz_get_padded_missing", lambda lib, _: _het(lib).get("oa", "D", as_padded_tensor=True)),
    case("lz_get_as_list", lambda lib, _: _het(lib).get("x", as_list=True)),
    case("lz_get_as_list_nested", lambda lib, _: _het(lib).get(("n", "y"), as_list=True)),
    case("lz_get_nested_strided", lambda lib, _: _nested_parts(lib, _het(lib), layout=torch.strided)),
    case("lz_get_nested_jagged", lambda lib, _: _nested_parts(lib, _het(lib), layout=torch.jagged)),
    case(
        "lz_get_nested_default_layout",
        lambda lib, _: _nested_parts(lib, _het(lib)),
    ),
    case("lz_get_nested_sd1", lambda lib, _: _nested_parts(lib, _het(lib, 1), layout=torch.jagged)),
    case(
        "lz_ragged_get_raises",
        lambda lib, _: lib.LazyStackedTensorDict(_member(lib, 0, 3), _member(lib, 1, 4))["x"],
        raises=RuntimeError,
    ),
    case(
        "lz_ragged_padded",
        lambda lib, _: lib.LazyStackedTensorDict(_member(lib, 0, 3), _member(lib, 1, 4)).get(
            "x", as_padded_tensor=True
        ),
    ),
    case("lz_items_homo", lambda lib, _: [(k, _m(v)) for k, v in _homo(lib).items()]),
    case("lz_to_dict", lambda lib, _: _homo(lib, 1).to_dict()),
    case("lz_tolist", lambda lib, _: _homo(lib).tolist()),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns that strided nested tensors are a prototype
@pytest.mark.parametrize(("fn", "kw"), READ)
def test_lazy_read(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Indexing
# --------------------------------------------------------------------------------------------------
def _is_member(s_index: Any, pos: int, stack_dim: int = 0) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        s = _homo(lib, stack_dim)
        out = s[s_index]
        return out is s.tensordicts[pos], _m(out)

    return fn


def _members_picked(index: Any, stack_dim: int = 0, stack: Any = _homo) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        s = stack(lib, stack_dim)
        out = s[index]
        ids = [next(j for j, t in enumerate(s.tensordicts) if t is m) for m in out.tensordicts]
        return ids, _m(out)

    return fn


def _index(index: Any, stack_dim: int = 0, stack: Any = _homo) -> Any:
    return lambda lib, _: _m(stack(lib, stack_dim)[index])


INDEX = [
    case("lz_index_int", _is_member(1, 1)),
    case("lz_index_neg", _is_member(-1, 2)),
    case("lz_index_ellipsis_int", _is_member((Ellipsis, 0, slice(None)), 0)),
    case("lz_index_sd1_int", _is_member((slice(None), 1), 1, 1)),
    case("lz_index_sd1_ellipsis", _is_member((Ellipsis, -1), 2, 1)),
    case("lz_index_het_int", lambda lib, _: (lambda s: s[1] is s.tensordicts[1])(_het(lib))),
    case("lz_index_slice", _members_picked(slice(0, 2))),
    case("lz_index_step", _members_picked(slice(None, None, 2))),
    case("lz_index_list", _members_picked([2, 0])),
    case("lz_index_long", _members_picked(torch.tensor([2, 0, 2]))),
    case("lz_index_mask", _members_picked(torch.tensor([True, False, True]))),
    case("lz_index_sd1_slice", _members_picked((slice(None), slice(1, 3)), 1)),
    case("lz_index_sd1_long", _members_picked((slice(None), torch.tensor([2, 0])), 1)),
    case("lz_index_sd1_mask", _members_picked((Ellipsis, torch.tensor([False, True, True])), 1)),
    case("lz_index_het_slice", _members_picked([1, 0], stack=_het)),
    case("lz_index_other_dim", _index((slice(None), 1))),
    case("lz_index_other_slice", _index((slice(None), slice(1, 3)))),
    case("lz_index_ellipsis_last", _index((Ellipsis, 2))),
    case("lz_index_ellipsis_only", _index(Ellipsis)),
    case("lz_index_int_slice", _index((1, slice(0, 2)))),
    case("lz_index_slice_int", _index((slice(1, None), 2))),
    case("lz_index_neg_neg", _index((-1, -1))),
    case("lz_index_sd1_first_dim", _index(2, 1)),
    case("lz_index_sd1_slice_step", _index((slice(1, 3), slice(None, None, 2)), 1)),
    case("lz_index_sd1_int_int", _index((2, 1), 1)),
    case("lz_index_het_other_dim", _index((slice(None), 0), stack=_het)),
    case("lz_index_empty_mask", _index(torch.zeros(3, dtype=torch.bool))),
    case("lz_index_oob", _index(3), raises=IndexError),
    case("lz_index_sd1_oob", _index((slice(None), 3), 1), raises=IndexError),
    case("lz_index_none", _index(None)),
    case("lz_index_mask2d", _index(MASK2D)),
    case("lz_index_long_before_stack", _index(torch.tensor([2, 0]), 1)),
    case("lz_index_long2d", _index(torch.tensor([[0, 2], [-1, 0]]))),
    case("lz_index_long2d_sd1", _index((slice(None), torch.tensor([[0, 2], [1, 0]])), 1)),
    case("lz_index_long2d_off_stack", _index((slice(None), torch.tensor([[0, 2], [1, 0]])))),
    case("lz_index_long2d_oob", _index(torch.tensor([[0, 5]])), raises=IndexError),
]


@pytest.mark.parametrize(("fn", "kw"), INDEX)
def test_lazy_index(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------
def _td(lib: Any, batch: Any, **leaves: Any) -> Any:
    return lib.TensorDict(leaves, batch)


def _lock_new_key(lib: Any, _: Any) -> Any:
    s = _homo(lib)
    s.lock_()
    locked = (s.is_locked, [td.is_locked for td in s.tensordicts])
    try:
        s.set("new", torch.zeros(3, 3))
    except RuntimeError as err:
        return locked, "locked" in str(err).lower(), _m(s)
    return locked, None, _m(s)


WRITE = [
    case("lz_setitem_key", _written(lambda lib, s: s.__setitem__("w", torch.arange(9.0).reshape(3, 3)))),
    case(
        "lz_setitem_key_sd1",
        _written(lambda lib, s: s.__setitem__("w", torch.arange(12.0).reshape(4, 3)), lambda lib: _homo(lib, 1, 4)),
    ),
    case("lz_setitem_key_het", _written(lambda lib, s: s.__setitem__("w", torch.ones(2, 3, 5)), _het)),
    case("lz_set_nested_new", _written(lambda lib, s: s.set(("new", "deep"), torch.ones(3, 3, 2)))),
    case("lz_set_nested_existing", _written(lambda lib, s: s.set(("n", "w"), torch.ones(3, 3)))),
    case("lz_set_via_sub", _written(lambda lib, s: s["n"].set("w", torch.ones(3, 3)))),
    case("lz_set_bad_batch", _written(lambda lib, s: s.set("q", torch.zeros(3))), raises=RuntimeError),
    case("lz_setitem_int_td", _written(lambda lib, s: s.__setitem__(1, _td(lib, [3], x=torch.full((3, 2), 5.0))))),
    case("lz_setitem_int_dict", _written(lambda lib, s: s.__setitem__(-1, {"n": {"z": torch.zeros(3)}}))),
    case("lz_setitem_int_number", _written(lambda lib, s: s.__setitem__(0, 7))),
    case("lz_setitem_slice_number", _written(lambda lib, s: s.__setitem__(slice(0, 2), -1.0))),
    case(
        "lz_setitem_slice_td",
        _written(lambda lib, s: s.__setitem__(slice(1, 3), _td(lib, [2, 3], i=torch.zeros(2, 3, dtype=torch.int64)))),
    ),
    case(
        "lz_setitem_long_td",
        _written(
            lambda lib, s: s.__setitem__(torch.tensor([2, 0]), _td(lib, [2, 3], x=torch.arange(12.0).reshape(2, 3, 2)))
        ),
    ),
    case(
        "lz_setitem_mask_dict",
        _written(lambda lib, s: s.__setitem__(torch.tensor([True, False, True]), {"i": torch.zeros(2, 3).long()})),
    ),
    case("lz_setitem_other_dim_number", _written(lambda lib, s: s.__setitem__((slice(None), 1), 0))),
    case(
        "lz_setitem_other_dim_td",
        _written(lambda lib, s: s.__setitem__((slice(None), 2), _td(lib, [3], i=torch.tensor([7, 8, 9])))),
    ),
    case("lz_setitem_mask2d_number", _written(lambda lib, s: s.__setitem__(MASK2D, -5))),
    case(
        "lz_setitem_mask2d_td",
        _written(lambda lib, s: s.__setitem__(MASK2D, _td(lib, [5], n={"z": torch.arange(5.0)}))),
    ),
    case(
        "lz_setitem_sd1_int_td",
        _written(
            lambda lib, s: s.__setitem__((slice(None), 1), _td(lib, [3], i=torch.tensor([7, 8, 9]))),
            lambda lib: _homo(lib, 1),
        ),
    ),
    case(
        "lz_setitem_sd1_first_dim",
        _written(lambda lib, s: s.__setitem__(1, _td(lib, [3], i=torch.tensor([7, 8, 9]))), lambda lib: _homo(lib, 1)),
    ),
    case(
        "lz_setitem_het_number",
        _written(lambda lib, s: s.__setitem__((slice(None), 1), 9.0), lambda lib: _het(lib).exclude("oa", "ob")),
    ),
    case(
        "lz_setitem_number_exclusive_keys",
        _written(lambda lib, s: s.__setitem__((slice(None), 1), 9.0), _het),
    ),
    case(
        "lz_setitem_int_number_exclusive_keys",
        _written(lambda lib, s: s.__setitem__(0, 9.0), _het),
    ),
    case(
        "lz_set_at_other_dim",
        _written(lambda lib, s: s.set_at_(("n", "z"), torch.tensor([1.0, 2.0, 3.0]), (slice(None), 2))),
    ),
    case("lz_set_at_int", _written(lambda lib, s: s.set_at_("i", torch.tensor([7, 8, 9]), 1))),
    case("lz_set_at_mask2d", _written(lambda lib, s: s.set_at_("i", torch.arange(5), MASK2D))),
    case(
        "lz_update_at",
        _written(lambda lib, s: s.update_at_({("n", "z"): torch.tensor([1.0, 2.0, 3.0])}, (slice(None), 0))),
    ),
    case(
        "lz_update",
        _written(lambda lib, s: s.update({"w": torch.arange(9.0).reshape(3, 3), "n": {"z": torch.ones(3, 3)}})),
    ),
    case("lz_update_het", _written(lambda lib, s: s.update({"n": {"y": torch.ones(2, 3)}}), _het)),
    case("lz_update_", _written(lambda lib, s: s.update_({"n": {"z": torch.zeros(3, 3)}}))),
    case("lz_update_missing", _written(lambda lib, s: s.update_({"zz": torch.zeros(3, 3)})), raises=KeyError),
    case("lz_set_", _written(lambda lib, s: s.set_("x", torch.full((3, 3, 2), 4.0)))),
    case("lz_set_missing", _written(lambda lib, s: s.set_("zz", torch.zeros(3, 3))), raises=KeyError),
    case("lz_del", _written(lambda lib, s: s.__delitem__(("n", "z")))),
    case("lz_del_missing", _written(lambda lib, s: s.__delitem__("zzz")), raises=KeyError),
    case("lz_del_exclusive", _written(lambda lib, s: s.__delitem__("oa"), _het)),
    case("lz_pop", lambda lib, _: (lambda s: (s.pop("i"), _m(s)))(_homo(lib))),
    case("lz_lock_new_key", _lock_new_key),
    case("lz_insert", _written(lambda lib, s: s.insert(1, _member(lib, 7)))),
    case("lz_append", _written(lambda lib, s: s.append(_member(lib, 7)))),
    case("lz_extend", _written(lambda lib, s: s.extend([_member(lib, 7), _member(lib, 8)]))),
    case("lz_append_sd1", _written(lambda lib, s: s.append(_member(lib, 7)), lambda lib: _homo(lib, 1))),
    case(
        "lz_append_ragged",
        _written(lambda lib, s: s.append(_member(lib, 7, 4))),
        raises=ValueError,
    ),
    case(
        "lz_append_batch_dims_differ",
        _written(lambda lib, s: s.append(_member(lib, 7).unsqueeze(-1))),
        raises=ValueError,
    ),
    case("lz_batch_size_setter", _written(lambda lib, s: setattr(s, "batch_size", [3])), raises=RuntimeError),
    # a key whose leaf shapes differ across members: tensordict checks existence without stacking
    case(
        "lz_het_contains",
        lambda lib, _: (lambda s: ("x" in s, ("n", "y") in s, "oa" in s))(_het(lib)),
    ),
    case(
        "lz_het_setitem_key",
        _written(lambda lib, s: s.__setitem__("x", torch.zeros(2, 3, 7)), _het),
    ),
    case(
        "lz_het_update_key",
        _written(lambda lib, s: s.update({"x": torch.zeros(2, 3, 7)}), _het),
    ),
    case(
        "lz_het_del_key",
        _written(lambda lib, s: s.__delitem__("x"), _het),
    ),
    case(
        "lz_het_rename_key",
        _written(lambda lib, s: s.rename_key_("x", "w"), _het),
    ),
    case(
        "lz_het_is_empty",
        lambda lib, _: _het(lib).is_empty(),
    ),
    case(
        "lz_het_lock",
        lambda lib, _: (lambda s: (s.lock_() is s, s.is_locked, [td.is_locked for td in s.tensordicts]))(_het(lib)),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), WRITE)
def test_lazy_write(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------------
MASK2D_23 = torch.tensor([[True, False, True], [False, True, False]])


def _same_ndim(lib: Any) -> Any:
    """Members of batch [3] whose leaves all have 2 dims: a tensor ``other`` of 3 dims spans every leaf."""
    return lib.lazy_stack(
        [lib.TensorDict(a=torch.zeros(3, 2) + i, b=torch.ones(3, 4) * i, batch_size=[3]) for i in range(2)]
    )


def _unbatched_members(lib: Any) -> Any:
    """Members without batch dims: a [2, 3] condition reaches past the stack's batch size [2]."""
    return lib.lazy_stack([lib.TensorDict(a=torch.zeros(3, 2) + i) for i in range(2)])


def _op(fn: Any, stack: Any = _homo) -> Any:
    return lambda lib, _: _m(fn(lib, stack(lib)))


def _inplace(fn: Any, stack: Any = _homo) -> Any:
    def run(lib: Any, _: Any) -> Any:
        s = stack(lib)
        leaves = [td["x"] for td in s.tensordicts]
        out = fn(lib, s)
        return out is s, [td["x"] is leaf for td, leaf in zip(s.tensordicts, leaves, strict=True)], _m(s)

    return run


def _inplace_fails(lib: Any, _: Any) -> Any:
    s = _homo(lib)
    s.mul_(1.5)
    return _m(s)


def _stacked_nontensor(lib: Any, values: tuple[Any, Any], dim: int = 0) -> Any:
    tds = [lib.TensorDict({"x": torch.zeros(3), "s": v}, [3]) for v in values]
    out = lib.lazy_stack(tds, dim).get("s")
    return type(out).__name__, out.batch_size, out.tolist()


OPS = [
    case("lz_add_scalar", _op(lambda lib, s: s + 1)),
    case("lz_sub_tensor", _op(lambda lib, s: s - torch.arange(9.0).reshape(3, 3))),
    case("lz_mul_lazy", _op(lambda lib, s: s * s)),
    case("lz_div_dense", _op(lambda lib, s: s / (torch.stack(_members(lib)) + 1))),
    case("lz_rsub", _op(lambda lib, s: 1 - s)),
    case("lz_neg", _op(lambda lib, s: -s)),
    case("lz_pow", _op(lambda lib, s: s.exclude("i") ** 2)),
    case("lz_add_sd1", _op(lambda lib, s: s + 1, lambda lib: _homo(lib, 1))),
    case("lz_add_lazy_sd1_to_sd0", _op(lambda lib, s: s + lib.LazyStackedTensorDict(*s.unbind(1), stack_dim=1))),
    case("lz_het_add", _op(lambda lib, s: s * 2 + 1, _het)),
    case("lz_het_mul_lazy", _op(lambda lib, s: s * s, _het)),
    case("lz_add_", _inplace(lambda lib, s: s.add_(1))),
    case("lz_mul_tensor_", _inplace(lambda lib, s: s.mul_(torch.full((3, 3), 2)))),
    case("lz_iadd", _inplace(lambda lib, s: s.__iadd__(2))),
    case("lz_het_add_", _inplace(lambda lib, s: s.add_(1), _het)),
    case("lz_zero_", _inplace(lambda lib, s: s.zero_(), _het)),
    case("lz_apply_", _inplace(lambda lib, s: s.apply_(lambda x: x + 1), _het)),
    case("lz_mul_float_on_int_raises", _inplace_fails, raises=RuntimeError),
    case("lz_eq", _op(lambda lib, s: s == s.clone())),
    case("lz_gt", _op(lambda lib, s: s > 100)),
    case("lz_het_eq", _op(lambda lib, s: s == s.clone(), _het)),
    case("lz_float", _op(lambda lib, s: s.float())),
    case("lz_to_int32", _op(lambda lib, s: s.to(torch.int32))),
    case("lz_het_double", _op(lambda lib, s: s.double(), _het_mixed)),
    case("lz_het_bool", _op(lambda lib, s: s.bool(), _het_mixed)),
    case("lz_abs", _op(lambda lib, s: (-s).abs())),
    case("lz_clamp", _op(lambda lib, s: s.clamp(0, 101))),
    case("lz_apply", _op(lambda lib, s: s.apply(lambda x: x * 3))),
    case("lz_het_apply", _op(lambda lib, s: s.apply(lambda x: x.sum(-1, keepdim=True) if x.ndim > 1 else x), _het)),
    case("lz_apply_batch_size", _op(lambda lib, s: s.apply(lambda x: x.sum(0), batch_size=[3]))),
    case("lz_apply_none", _op(lambda lib, s: s.apply(lambda x: None))),
    case("lz_named_apply", _op(lambda lib, s: s.named_apply(lambda k, x: x * 0 if k == "x" else x, nested_keys=True))),
    case(
        "lz_clone", lambda lib, _: (lambda s: (_m(s.clone()), s.clone().tensordicts[0] is s.tensordicts[0]))(_het(lib))
    ),
    case("lz_select", _op(lambda lib, s: s.select("x", ("n", "y")), _het)),
    case("lz_exclude", _op(lambda lib, s: s.exclude("x"), _het)),
    case("lz_select_exclusive", _op(lambda lib, s: s.select("oa"), _het), raises=KeyError),
    case("lz_sum", _op(lambda lib, s: s.sum())),
    case("lz_sum0", _op(lambda lib, s: s.sum(0))),
    case("lz_mean1", _op(lambda lib, s: s.float().mean(1))),
    case("lz_max_dim", _op(lambda lib, s: s.exclude("i").max(dim=0))),
    case("lz_sum_common_keys", _op(lambda lib, s: s.select(("n", "y")).sum(1), _het)),
    case("lz_all_any", lambda lib, _: (lambda s: (s.all(), s.any(), (s == s.clone()).all()))(_homo(lib))),
    case(
        "lz_het_all",
        lambda lib, _: (lambda s: (s == s.clone()).all())(_het(lib)),
    ),
    case(
        "lz_unbind_stack_dim",
        lambda lib, _: (lambda s: [a is b for a, b in zip(s.unbind(0), s.tensordicts, strict=True)])(_het(lib)),
    ),
    case(
        "lz_unbind_sd1",
        lambda lib, _: (lambda s: [a is b for a, b in zip(s.unbind(1), s.tensordicts, strict=True)])(_homo(lib, 1)),
    ),
    case("lz_iter", lambda lib, _: (lambda s: [a is b for a, b in zip(s, s.tensordicts, strict=True)])(_homo(lib))),
    case("lz_torch_stack_members", lambda lib, _: torch.stack(_members(lib), 1)),
    case(
        "lz_torch_stack_mismatch",
        lambda lib, _: torch.stack([m.exclude("oa", "ob") for m in _het(lib).tensordicts]),
        raises=RuntimeError,
    ),
    case("lz_maybe_dense_homo", lambda lib, _: lib.maybe_dense_stack(_members(lib), 1)),
    case("lz_maybe_dense_het", lambda lib, _: _m(lib.maybe_dense_stack(_het(lib).tensordicts))),
    case(
        "lz_maybe_dense_keys_differ",
        lambda lib, _: _m(lib.maybe_dense_stack([_member(lib, 0), _member(lib, 1).exclude("i")])),
    ),
    case(
        "lz_maybe_dense_nested_shapes",
        lambda lib, _: (lambda out: (type(out).__name__, _m(out["n"])))(
            lib.maybe_dense_stack(
                [
                    lib.TensorDict({"n": {"y": torch.zeros(3)}}, [3]),
                    lib.TensorDict({"n": {"y": torch.zeros(3, 2)}}, [3]),
                ]
            )
        ),
    ),
    case("lz_dense_stack_tds_lazy", lambda lib, _: lib.dense_stack_tds(_homo(lib, 1))),
    case("lz_dense_stack_tds_list", lambda lib, _: lib.dense_stack_tds(_members(lib), 1)),
    # TensorDicts holding lazy stacks of ragged members stack densely at the top, the lazy stacks stay lazy
    *(
        case(f"lz_dense_stack_tds_ragged_{how}_{d}", lambda lib, _, how=how, d=d: _ragged_holders(lib, how, d))
        for how in ("lazy", "list", "torch", "maybe")
        for d in (0, 1)
    ),
    case("lz_dense_stack_tds_lazy_dim_ignored", lambda lib, _: lib.dense_stack_tds(_homo(lib, 1), 0).batch_size),
    case("lz_dense_stack_tds_het", lambda lib, _: _m(lib.dense_stack_tds(_het(lib).tensordicts, 0))),
    case("lz_dense_stack_tds_td", lambda lib, _: (lambda td: lib.dense_stack_tds(td) is td)(_member(lib, 0))),
    case("lz_dense_stack_tds_no_dim", lambda lib, _: lib.dense_stack_tds(_members(lib)), raises=ValueError),
    case("lz_to_tensordict", lambda lib, _: _homo(lib, 1).to_tensordict()),
    case(
        "lz_to_tensordict_common",
        lambda lib, _: lib.lazy_stack(
            [_member(lib, 0).set("oa", torch.zeros(3)), _member(lib, 1).set("ob", torch.zeros(3))]
        ).to_tensordict(),
    ),
    case("lz_to_tensordict_het", lambda lib, _: _het(lib).to_tensordict(), raises=RuntimeError),
    case("lz_contiguous", lambda lib, _: _homo(lib).contiguous()),
    case("lz_pickle", lambda lib, _: _m(pickle.loads(pickle.dumps(_het(lib, 1))))),
    case("lz_empty", _op(lambda lib, s: s.empty())),
    case("lz_nontensor_diff", lambda lib, _: _stacked_nontensor(lib, ("hello", "world"))),
    case("lz_nontensor_diff_sd1", lambda lib, _: _stacked_nontensor(lib, ("a", "b"), 1)),
    case("lz_nontensor_member_stack", lambda lib, _: _stacked_nontensor(lib, ("a", ["p", "q", "r"]))),
    case("lz_nontensor_same", lambda lib, _: _stacked_nontensor(lib, ("hello", "hello"))),
    case(
        "lz_nontensor_index",
        lambda lib, _: (lambda s: (s[1]["s"], s[1, 0]["s"]))(
            lib.lazy_stack([lib.TensorDict({"x": torch.zeros(3), "s": v}, [3]) for v in ("hello", "world")])
        ),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), OPS)
def test_lazy_op(run_both, fn, kw):
    run_both(fn, **kw)


# Shape operations give lazy stacks (their stack dim and members are compared). Three cases keep a dense
# result (DIFFERENCES): a view that neither merges nor splits dims, a cat of different stack dims (tensordict
# raises for both) and where with a tensor ``other``. ``_dense`` compares values only.
def _dense(out: Any) -> Any:
    if type(out).__name__ == "LazyStackedTensorDict":
        return out.to_tensordict()
    if isinstance(out, (list, tuple)):
        return type(out)(_dense(o) for o in out)
    return out


_SHAPE_OPS = {  # names and locks of their results are compared
    "reshape": lambda lib, s: s.reshape(9),
    "permute": lambda lib, s: s.permute(1, 0),
    "unflatten": lambda lib, s: s.unflatten(1, (3, 1)),
    "split": lambda lib, s: s.split([1, 2], 1)[1],
    "unbind": lambda lib, s: s.unbind(1)[0],
    "cat": lambda lib, s: torch.cat([s, s], 1),
    "stack": lambda lib, s: torch.stack([s, s], 1),
    "expand": lambda lib, s: s.expand(2, 3, 3),
    "masked_fill": lambda lib, s: s.masked_fill(MASK2D, 0),
    "where": lambda lib, s: s.where(MASK2D, 0),
    "index_none": lambda lib, s: s[:, None],
    "index_mask2d": lambda lib, s: s[MASK2D],
    "index_long2d": lambda lib, s: s[torch.tensor([[0, 1], [2, 0]])],
    "index_long2d_off": lambda lib, s: s[:, torch.tensor([[0, 1], [2, 0]])],
}


def _results_facts(stack_dim: int) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        named = _homo(lib, stack_dim).refine_names("p", "q")
        locked = _homo(lib, stack_dim).lock_()
        # (a lazy stack's index results are unlocked here, as a TensorDict's: tensordict locks them)
        return [
            (name, op(lib, named).names, None if name.startswith("index") else op(lib, locked).is_locked)
            for name, op in _SHAPE_OPS.items()
        ]

    return fn


SHAPE = [
    case("lz_results_names_locks_sd0", _results_facts(0)),
    case("lz_results_names_locks_sd1", _results_facts(1)),
    case("lz_reshape", _op(lambda lib, s: s.reshape(9))),
    case("lz_view", _op(lambda lib, s: s.view(9))),
    case("lz_permute", _op(lambda lib, s: s.permute(1, 0))),
    case("lz_transpose", _op(lambda lib, s: s.transpose(0, 1))),
    case("lz_unsqueeze", _op(lambda lib, s: s.unsqueeze(0))),
    case("lz_squeeze", _op(lambda lib, s: s[:, :1].squeeze(1))),
    case("lz_flatten", _op(lambda lib, s: s.flatten(0, 1))),
    case("lz_split", _op(lambda lib, s: s.split(1, 1))),
    case("lz_chunk", _op(lambda lib, s: s.chunk(2, 1))),
    case("lz_unbind_other", _op(lambda lib, s: s.unbind(1))),
    case("lz_cat", _op(lambda lib, s: torch.cat([s, s.clone()], 0))),
    case("lz_torch_stack_lazy", _op(lambda lib, s: torch.stack([s, s.clone()], 0))),
    case("lz_masked_fill", _op(lambda lib, s: s.masked_fill(MASK2D, -1))),
    case("lz_where", _op(lambda lib, s: s.where(MASK2D, 0))),
    case("lz_het_reshape", _op(lambda lib, s: s.reshape(6), _het)),
    case("lz_het_permute", _op(lambda lib, s: s.permute(1, 0), _het)),
    case("lz_het_split", _op(lambda lib, s: s.split([1, 2], 1), _het)),
    case("lz_expand_type", _op(lambda lib, s: s.expand(2, 3, 3), lambda lib: _homo(lib, 1))),
    case("lz_het_expand", _op(lambda lib, s: s.expand(4, 2, 3), _het)),
    case("lz_expand_one_member", _op(lambda lib, s: lib.lazy_stack(_members(lib, 1)).expand(2, 3))),
    case("lz_view_no_regroup", _op(lambda lib, s: s.view(1, 9)), raises=RuntimeError),
    case(
        "lz_cat_stack_dims_differ",
        _op(lambda lib, s: torch.cat([s, lib.LazyStackedTensorDict(*_members(lib), stack_dim=1)], 0)),
        raises=RuntimeError,
    ),
    pytest.param(  # (tensordict warns that 0.17 aligns the tensor as TensorDict.where does)
        _op(lambda lib, s: s.exclude("i").where(MASK2D, torch.full((3, 3, 1), -1.0))),
        {"data": None},
        id="lz_where_tensor_other",
        marks=pytest.mark.filterwarnings("ignore:LazyStackedTensorDict.where splits:FutureWarning"),
    ),
    case("lz_reshape_unflatten", _op(lambda lib, s: lib.lazy_stack(_members(lib, 4)).reshape(2, 2, 3))),
    case("lz_reshape_sd1", _op(lambda lib, s: s.reshape(9), lambda lib: _homo(lib, 1))),
    case("lz_reshape_dense_fallback", _op(lambda lib, s: s.reshape(1, 9))),
    case(
        "lz_flatten_off_stack", _op(lambda lib, s: lib.lazy_stack(_members(lib, 2, 4), 0).unsqueeze(-1).flatten(1, 2))
    ),
    case("lz_unflatten", _op(lambda lib, s: s.unflatten(1, (3, 1)))),
    case("lz_split_stack_dim", _op(lambda lib, s: s.split([2, 1], 0))),
    case("lz_unbind_sd1_other", _op(lambda lib, s: s.unbind(0), lambda lib: _homo(lib, 1))),
    case("lz_cat_other_dim", _op(lambda lib, s: torch.cat([s, s.clone()], 1))),
    case("lz_cat_lazy_dense", _op(lambda lib, s: torch.cat([s, s.to_tensordict()], 0))),
    case("lz_torch_stack_lazy_dense", _op(lambda lib, s: torch.stack([s, s.to_tensordict()], 0))),
    case("lz_torch_stack_lazy_sd1", _op(lambda lib, s: torch.stack([s, s.clone()], 2), lambda lib: _homo(lib, 1))),
    case("lz_where_td", _op(lambda lib, s: s.where(MASK2D, s.clone() * 0))),
    case("lz_where_tensor_spanning", _op(lambda lib, s: s.where(MASK2D_23, torch.full((2, 3, 1), 7.0)), _same_ndim)),
    case("lz_where_condition_beyond", _op(lambda lib, s: s.where(MASK2D_23, 9.0), _unbatched_members)),
    case("lz_index_none_mid", _index((slice(None), None, slice(1, None)), 1)),
    case("lz_index_mask2d_sd1", _index(MASK2D, 1)),
    # the same shape operations with values only: these agree
    case("lz_reshape_values", lambda lib, _: _dense(_homo(lib).reshape(9))),
    case("lz_permute_values", lambda lib, _: _dense(_homo(lib, 1).permute(1, 0))),
    case("lz_unsqueeze_values", lambda lib, _: _dense(_homo(lib).unsqueeze(-1))),
    case("lz_expand", lambda lib, _: _dense(_homo(lib).expand(2, 3, 3))),
    case("lz_split_values", lambda lib, _: _dense(_homo(lib).split([2, 1], 1))),
    case("lz_unbind_other_values", lambda lib, _: _dense(_homo(lib, 1).unbind(0))),
    case("lz_cat_values", lambda lib, _: _dense(torch.cat([_homo(lib), _homo(lib)], 1))),
    case("lz_masked_fill_values", lambda lib, _: _dense(_homo(lib).masked_fill(MASK2D, -1))),
    case("lz_gather", lambda lib, _: _homo(lib).gather(1, torch.tensor([[0], [2], [1]]))),
]


@pytest.mark.parametrize(("fn", "kw"), SHAPE)
def test_lazy_shape_op(run_both, fn, kw):
    run_both(fn, **kw)
