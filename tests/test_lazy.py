"""LazyStackedTensorDict: construction, reads, indexing, writes, operations and helpers.

Homogeneous stacks are checked against a dense oracle: ``torch.stack(members, stack_dim)`` holds the
same values, so any read or write on the lazy stack must agree with the same read or write on the
dense one (and writes must land in the members). Heterogeneous stacks (exclusive keys, leaves whose
shapes differ across members) are checked member by member.

Deliberate behaviour asserted here (README.md, "Differences from tensordict"): value operations run
per member and give a lazy stack; shape operations and reductions give a dense TensorDict; in-place
operations compute every member's result before writing any.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from _messages import batch_mismatch

from tensorbatch import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    dense_stack_tds,
    lazy_stack,
    maybe_dense_stack,
    set_capture_non_tensor_stack,
    set_printoptions,
)


def bug(reason: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"bug: {reason}")


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------
MASK2D = torch.tensor([[True, False, True], [False, False, True], [True, True, False]])  # over a [3, 3] batch


def member(i: int, n: int = 3) -> TensorDict:
    """Batch [n]: float ``x`` [n, 2], int64 ``i`` [n], nested ``("n", "z")`` [n]; values distinct per member."""
    base = 100 * i
    return TensorDict(
        {
            "x": torch.arange(2.0 * n).reshape(n, 2) + base,
            "i": torch.arange(n) + base,
            "n": {"z": torch.arange(float(n)) + base + 50},
        },
        [n],
    )


def members(k: int = 3, n: int = 3) -> list[TensorDict]:
    return [member(i, n) for i in range(k)]


def homo(stack_dim: int = 0, k: int = 3, n: int = 3) -> tuple[LazyStackedTensorDict, list[TensorDict]]:
    tds = members(k, n)
    return LazyStackedTensorDict(*tds, stack_dim=stack_dim), tds


def hetero(stack_dim: int = 0) -> tuple[LazyStackedTensorDict, TensorDict, TensorDict]:
    """Two members, batch [3]: ``x`` is [3, 2] in one and [3, 4] in the other; ``oa``/``ob`` are exclusive."""
    a = TensorDict(
        {"x": torch.zeros(3, 2), "n": {"y": torch.arange(3.0), "h": torch.zeros(3, 1)}, "oa": torch.ones(3)}, [3]
    )
    b = TensorDict(
        {"x": torch.ones(3, 4), "n": {"y": torch.arange(3.0) + 3, "h": torch.ones(3, 5)}, "ob": torch.ones(3)}, [3]
    )
    return LazyStackedTensorDict(a, b, stack_dim=stack_dim), a, b


def dense_of(tds: list[TensorDict], stack_dim: int) -> TensorDict:
    return torch.stack([td.clone() for td in tds], stack_dim)


def assert_td_equal(actual: Any, expected: Any) -> None:
    """Same batch size, same leaf keys, equal leaves (shapes and dtypes included)."""
    assert actual.batch_size == expected.batch_size
    ka = set(actual.keys(include_nested=True, leaves_only=True))
    ke = set(expected.keys(include_nested=True, leaves_only=True))
    assert ka == ke
    for key in ke:
        a, e = actual.get(key), expected.get(key)
        assert a.shape == e.shape, key
        assert a.dtype == e.dtype, key
        torch.testing.assert_close(a, e, msg=lambda m, key=key: f"{key}: {m}")


def dense_view(x: Any) -> Any:
    return x.to_tensordict() if isinstance(x, LazyStackedTensorDict) else x


# --------------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("stack_dim", "expected_dim", "shape"), [(0, 0, [3, 4]), (1, 1, [4, 3]), (-1, 1, [4, 3])])
def test_construct_stack_dim(stack_dim, expected_dim, shape):
    tds = members(3, 4)
    s = LazyStackedTensorDict(*tds, stack_dim=stack_dim)
    assert s.stack_dim == expected_dim
    assert s.batch_size == torch.Size(shape)
    assert isinstance(s.batch_size, torch.Size)
    assert len(s.tensordicts) == 3
    assert all(m is td for m, td in zip(s.tensordicts, tds, strict=True))
    assert s.batch_dims == 2
    assert s.numel() == 12


@pytest.mark.parametrize(("dim", "expected"), [(0, 0), (1, 1), (-1, 1), (-2, 0)])
def test_lazy_stack_function(dim, expected):
    tds = members(2, 4)
    s = lazy_stack(tds, dim)
    assert type(s) is LazyStackedTensorDict
    assert s.stack_dim == expected
    assert s.tensordicts[0] is tds[0]
    assert s.tensordicts[1] is tds[1]
    expected_size = [2, 4] if expected == 0 else [4, 2]
    assert list(s.batch_size) == expected_size


def test_lazy_stack_default_dim_is_zero():
    assert lazy_stack(members(2, 4)).stack_dim == 0


def test_construct_member_batch_dims_mismatch():
    with pytest.raises(RuntimeError, match=r"member 1 has batch_size \[3, 1\] but member 0 has \[3\]"):
        LazyStackedTensorDict(member(0, 3), member(1, 3).unsqueeze(-1))


@pytest.mark.parametrize(("stack_dim", "shape"), [(0, [2, -1]), (1, [-1, 2])])
def test_construct_ragged_batch(stack_dim, shape):
    a, b = member(0, 3), member(1, 4)
    s = LazyStackedTensorDict(a, b, stack_dim=stack_dim)
    assert s.batch_size == torch.Size(shape)
    assert s.tensordicts[1] is b
    with pytest.raises(RuntimeError, match=r"key 'i'.*\[\[3\], \[4\]\]"):
        s["i"]
    padded = s.get("i", as_padded_tensor=True, padding_value=-1)  # the members first, whatever the stack dim
    torch.testing.assert_close(padded, torch.tensor([[0, 1, 2, -1], [100, 101, 102, 103]]))


def test_lazy_stack_empty():
    with pytest.raises(RuntimeError, match="non-empty"):
        lazy_stack([])


def test_construct_non_td():
    with pytest.raises(TypeError, match="expects TensorDicts, got a Tensor"):
        LazyStackedTensorDict(member(0), torch.zeros(3))


@pytest.mark.parametrize("stack_dim", [2, -3])
def test_construct_stack_dim_out_of_range(stack_dim):
    with pytest.raises(IndexError, match="out of range"):
        LazyStackedTensorDict(member(0), member(1), stack_dim=stack_dim)


def test_construct_batch_size_kwarg():
    s = LazyStackedTensorDict(member(0), member(1), batch_size=[2, 3])
    assert s.batch_size == torch.Size([2, 3])
    with pytest.raises(RuntimeError, match="does not match"):
        LazyStackedTensorDict(member(0), member(1), batch_size=[3, 2])


def test_construct_empty_with_batch_size():
    s = LazyStackedTensorDict(batch_size=[0, 3])
    assert s.batch_size == torch.Size([0, 3])
    assert s.tensordicts == []
    assert list(s.keys()) == []
    with pytest.raises(RuntimeError, match="needs members or a batch_size"):
        LazyStackedTensorDict()


def test_exclusive_keys_not_visible():
    s, a, b = hetero()
    assert list(s.keys()) == ["x", "n"]
    assert set(s.keys(True, True)) == {"x", ("n", "y"), ("n", "h")}
    assert set(s.keys(True)) == {"x", "n", ("n", "y"), ("n", "h")}
    keys = s.keys()
    assert "oa" not in keys
    assert "ob" not in keys
    assert "oa" not in s
    # the members keep them
    assert "oa" in a
    assert "ob" in b


def test_keys_sorted_and_first_member_order():
    a = TensorDict({"b": torch.zeros(2), "a": torch.zeros(2), "c": torch.zeros(2)}, [2])
    b = TensorDict({"c": torch.zeros(2), "a": torch.zeros(2), "d": torch.zeros(2)}, [2])
    s = LazyStackedTensorDict(a, b)
    assert list(s.keys()) == ["a", "c"]
    assert list(s.keys(sort=True)) == ["a", "c"]
    a2 = TensorDict({"c": torch.zeros(2), "a": torch.zeros(2)}, [2])
    assert list(LazyStackedTensorDict(a2, b).keys()) == ["c", "a"]


def test_heterogeneous_shapes_kept_in_members():
    s, _a, _b = hetero()
    assert s.batch_size == torch.Size([2, 3])
    assert s.tensordicts[0]["x"].shape == torch.Size([3, 2])
    assert s.tensordicts[1]["x"].shape == torch.Size([3, 4])


@pytest.mark.parametrize("stack_dim", [0, 1])
def test_nested_stays_lazy(stack_dim):
    s, tds = homo(stack_dim)
    sub = s["n"]
    assert type(sub) is LazyStackedTensorDict
    assert sub.stack_dim == stack_dim
    assert sub.batch_size == s.batch_size
    assert all(m is td["n"] for m, td in zip(sub.tensordicts, tds, strict=True))
    assert type(s.get("n")) is LazyStackedTensorDict


def test_nested_hetero_stays_lazy():
    s, a, b = hetero()
    sub = s["n"]
    assert type(sub) is LazyStackedTensorDict
    assert sub.tensordicts[0] is a["n"]
    assert sub.tensordicts[1] is b["n"]
    torch.testing.assert_close(sub["y"], torch.stack([a["n", "y"], b["n", "y"]]))


def test_facts():
    s, _ = homo(1)
    assert s.device is None
    assert s.names == [None, None]
    assert len(s) == 3
    assert s.shape == s.batch_size


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("key", ["x", "i", ("n", "z")])
def test_getitem_stacks(stack_dim, key):
    s, tds = homo(stack_dim, n=4)
    expected = torch.stack([td[key] for td in tds], stack_dim)
    out = s[key]
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(s.get(key), expected)


def test_getitem_nested_via_sub():
    s, _tds = homo()
    torch.testing.assert_close(s["n"]["z"], s["n", "z"])


def test_getitem_hetero_raises():
    s, _, _ = hetero()
    with pytest.raises(RuntimeError, match=r"key 'x'.*\[\[3, 2\], \[3, 4\]\]") as info:
        s["x"]
    assert "as_padded_tensor" in str(info.value)
    with pytest.raises(RuntimeError, match=r"key 'h'.*\[\[3, 1\], \[3, 5\]\]"):
        s["n", "h"]
    with pytest.raises(RuntimeError, match="key 'x'"):
        s.get("x")


def test_getitem_hetero_common_key_ok():
    s, a, b = hetero()
    torch.testing.assert_close(s["n", "y"], torch.stack([a["n", "y"], b["n", "y"]]))


@pytest.mark.parametrize("key", ["oa", "ob"])
def test_getitem_exclusive_key_raises(key):
    s, _, _ = hetero()
    with pytest.raises(KeyError, match=key):
        s[key]
    assert s.get(key) is None
    assert s.get(key, "D") == "D"
    assert s.get(key, "D", as_padded_tensor=True) == "D"
    assert s.get(key, as_list=True) is None


def test_getitem_missing_nested_key():
    s, _, _ = hetero()
    with pytest.raises(KeyError, match="zz"):
        s["n", "zz"]
    assert s.get(("n", "zz"), 0) == 0


def test_get_padded_right():
    s, a, b = hetero()
    p = s.get("x", as_padded_tensor=True)
    assert p.shape == torch.Size([2, 3, 4])
    torch.testing.assert_close(p[0, :, :2], a["x"])
    torch.testing.assert_close(p[0, :, 2:], torch.zeros(3, 2))
    torch.testing.assert_close(p[1], b["x"])


def test_get_padded_value_and_left():
    s, a, b = hetero()
    p = s.get("x", as_padded_tensor=True, padding_value=-1.0, padding_side="left")
    torch.testing.assert_close(p[0, :, :2], torch.full((3, 2), -1.0))
    torch.testing.assert_close(p[0, :, 2:], a["x"])
    torch.testing.assert_close(p[1], b["x"])
    p = s.get("x", as_padded_tensor=True, padding_value=-1.0)
    torch.testing.assert_close(p[0, :, 2:], torch.full((3, 2), -1.0))


def test_get_padded_every_dim():
    s = lazy_stack([TensorDict({"x": torch.ones(k, 4 - k)}, []) for k in (1, 3)])
    p = s.get("x", as_padded_tensor=True, padding_value=-1.0)
    assert p.shape == torch.Size([2, 3, 3])
    expected0 = torch.full((3, 3), -1.0)
    expected0[0] = 1.0
    expected1 = torch.full((3, 3), -1.0)
    expected1[:, 0] = 1.0
    torch.testing.assert_close(p[0], expected0)
    torch.testing.assert_close(p[1], expected1)


def test_get_padded_keeps_dtype_and_homo_equals_stack():
    s = lazy_stack([TensorDict({"x": torch.ones(k, dtype=torch.int64)}, []) for k in (1, 3)])
    assert s.get("x", as_padded_tensor=True).dtype == torch.int64
    h, _ = homo()
    torch.testing.assert_close(h.get("x", as_padded_tensor=True), h["x"])


def test_get_padded_stack_dim_1():
    s, a, b = hetero(stack_dim=1)
    p = s.get("x", as_padded_tensor=True)
    assert p.shape == torch.Size([2, 3, 4])  # the members first (as tensordict), not the batch's order
    torch.testing.assert_close(p[1], b["x"])
    torch.testing.assert_close(p[0, :, :2], a["x"])


def test_get_padded_different_ndim_raises():
    s = lazy_stack([TensorDict({"x": torch.ones(*[2] * k)}, []) for k in (1, 2)])
    with pytest.raises(RuntimeError, match="different numbers of dims"):
        s.get("x", as_padded_tensor=True)


def test_get_as_list():
    s, a, b = hetero()
    out = s.get("x", as_list=True)
    assert type(out) is list
    assert len(out) == 2
    assert out[0] is a["x"]
    assert out[1] is b["x"]
    nested = s.get(("n", "h"), as_list=True)
    assert [t.shape for t in nested] == [torch.Size([3, 1]), torch.Size([3, 5])]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_get_as_nested_tensor(layout):
    s, a, b = hetero()
    nt = s.get("x", as_nested_tensor=True, layout=layout)
    assert nt.is_nested
    assert nt.layout == layout
    parts = nt.unbind()
    torch.testing.assert_close(parts[0], a["x"])
    torch.testing.assert_close(parts[1], b["x"])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_get_as_nested_tensor_default_layout_is_jagged():
    s, _, _ = hetero()
    assert s.get("x", as_nested_tensor=True).layout == torch.jagged


def test_get_as_nested_tensor_stack_dim_1_members_first():
    s, a, b = hetero(stack_dim=1)
    parts = s.get("x", as_nested_tensor=True).unbind()
    torch.testing.assert_close(parts[0], a["x"])
    torch.testing.assert_close(parts[1], b["x"])


# --------------------------------------------------------------------------------------------------
# Indexing
# --------------------------------------------------------------------------------------------------
def test_index_int_returns_member():
    s, tds = homo()
    assert s[0] is tds[0]
    assert s[2] is tds[2]
    assert s[-1] is tds[2]
    assert s[-3] is tds[0]
    assert s[..., 1, :] is tds[1]


def test_index_int_stack_dim_1_returns_member():
    s, tds = homo(1, n=4)
    assert s[:, 1] is tds[1]
    assert s[:, -1] is tds[2]
    assert s[..., 0] is tds[0]


@pytest.mark.parametrize(
    ("index", "picked"),
    [
        (slice(0, 2), [0, 1]),
        (slice(None, None, 2), [0, 2]),
        (slice(1, None), [1, 2]),
        ([2, 0], [2, 0]),
        ([1, 1], [1, 1]),
        (torch.tensor([2, 0]), [2, 0]),
        (torch.tensor([True, False, True]), [0, 2]),
    ],
    ids=["slice", "step", "tail", "list", "repeat", "long", "mask"],
)
def test_index_stack_dim_gives_lazy_of_members(index, picked):
    s, tds = homo(n=4)
    out = s[index]
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == 0
    assert out.batch_size == torch.Size([len(picked), 4])
    assert [id(m) for m in out.tensordicts] == [id(tds[i]) for i in picked]


@pytest.mark.parametrize(
    ("index", "picked"),
    [
        ((slice(None), slice(0, 2)), [0, 1]),
        ((slice(None), [2, 0]), [2, 0]),
        ((slice(None), torch.tensor([2, 0])), [2, 0]),
        ((Ellipsis, torch.tensor([False, True, True])), [1, 2]),
    ],
    ids=["slice", "list", "long", "mask"],
)
def test_index_stack_dim_1_gives_lazy_of_members(index, picked):
    s, tds = homo(1, n=4)
    out = s[index]
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == 1
    assert out.batch_size == torch.Size([4, len(picked)])
    assert [id(m) for m in out.tensordicts] == [id(tds[i]) for i in picked]


def test_index_other_dim_indexes_members():
    s, tds = homo(n=4)
    out = s[:, 1]
    assert type(out) is LazyStackedTensorDict
    assert out.batch_size == torch.Size([3])
    for m, td in zip(out.tensordicts, tds, strict=True):
        assert_td_equal(m, td[1])
    out = s[:, 1:3]
    assert out.batch_size == torch.Size([3, 2])
    assert out.stack_dim == 0
    for m, td in zip(out.tensordicts, tds, strict=True):
        assert_td_equal(m, td[1:3])


def test_index_stack_dim_1_other_dim():
    s, tds = homo(1, n=4)
    out = s[2]
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == 0
    assert out.batch_size == torch.Size([3])
    for m, td in zip(out.tensordicts, tds, strict=True):
        assert_td_equal(m, td[2])


def test_index_mixed():
    s, tds = homo(n=4)
    out = s[1, 2:]
    assert type(out) is TensorDict
    assert_td_equal(out, tds[1][2:])
    out = s[1:, 2]
    assert type(out) is LazyStackedTensorDict
    assert out.batch_size == torch.Size([2])
    assert_td_equal(out.tensordicts[0], tds[1][2])
    assert_td_equal(out.tensordicts[1], tds[2][2])
    out = s[-1, -1]
    assert_td_equal(out, tds[2][-1])


def test_index_hetero_members():
    s, _a, b = hetero()
    assert s[1] is b
    out = s[:, 0]
    assert out.tensordicts[0]["x"].shape == torch.Size([2])
    assert out.tensordicts[1]["x"].shape == torch.Size([4])
    assert list(out.keys()) == ["x", "n"]


INDICES = [
    0,
    -1,
    slice(1, 3),
    (slice(None), 1),
    (1, slice(0, 2)),
    (slice(0, 2), -1),
    Ellipsis,
    (Ellipsis, 2),
    [2, 0],
    torch.tensor([2, 0, 2]),
    torch.tensor([True, False, True]),
    (slice(None), torch.tensor([1, 0])),
    (slice(None), torch.tensor([False, True, True])),
    MASK2D,
    None,
    (torch.tensor([0, 2]), torch.tensor([1, 1])),
    (torch.tensor([0, 2]), slice(1, None)),
    torch.tensor(1),
]
INDEX_IDS = [
    "int",
    "neg",
    "slice",
    "all-int",
    "int-slice",
    "slice-neg",
    "ellipsis",
    "ellipsis-int",
    "list",
    "long",
    "mask",
    "all-long",
    "all-mask",
    "mask2d",
    "none",
    "long-long",
    "long-slice",
    "0d-tensor",
]


@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("index", INDICES, ids=INDEX_IDS)
def test_index_matches_dense(stack_dim, index):
    s, tds = homo(stack_dim)
    dense = dense_of(tds, stack_dim)
    assert_td_equal(dense_view(s[index]), dense[index])


def test_index_out_of_range():
    s, _ = homo()
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(IndexError):
        s[-4]
    s1, _ = homo(1)
    with pytest.raises(IndexError):
        s1[:, 3]


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_setitem_key_splits_into_members(stack_dim):
    s, tds = homo(stack_dim, n=4)
    value = torch.arange(12.0).reshape(s.batch_size)
    s["new"] = value
    for i, td in enumerate(tds):
        torch.testing.assert_close(td["new"], value.select(stack_dim, i))
    torch.testing.assert_close(s["new"], value)
    # an existing key is replaced in every member
    s["x"] = torch.zeros(*s.batch_size, 5)
    assert all(td["x"].shape == torch.Size([4, 5]) for td in tds)


def test_set_creates_nested_levels():
    s, tds = homo()
    value = torch.arange(9.0).reshape(3, 3)
    assert s.set(("new", "deep", "v"), value) is s
    for i, td in enumerate(tds):
        sub = td["new"]
        assert type(sub) is TensorDict
        assert sub.batch_size == torch.Size([3])
        torch.testing.assert_close(td["new", "deep", "v"], value[i])
    assert type(s["new"]) is LazyStackedTensorDict
    torch.testing.assert_close(s["new", "deep", "v"], value)


def test_set_in_existing_nested_node():
    s, tds = homo()
    s.set(("n", "w"), torch.ones(3, 3))
    assert all(td["n", "w"].shape == torch.Size([3]) for td in tds)
    s["n"].set("u", torch.full((3, 3), 2.0))
    assert all(bool((td["n", "u"] == 2).all()) for td in tds)


def test_set_wrong_batch_raises():
    s, tds = homo()
    with pytest.raises(RuntimeError, match=batch_mismatch([3, 3], "q", [3])):
        s.set("q", torch.zeros(3))
    assert all("q" not in td for td in tds)


SET_INDICES = [
    1,
    -1,
    slice(0, 2),
    (slice(None), 1),
    (1, slice(1, 3)),
    torch.tensor([2, 0]),
    torch.tensor([True, False, True]),
    (slice(None), torch.tensor([2, 0])),
    (Ellipsis, torch.tensor([True, True, False])),
    MASK2D,
    (torch.tensor([0, 2]), torch.tensor([1, 1])),
]
SET_IDS = [
    "int",
    "neg",
    "slice",
    "all-int",
    "int-slice",
    "long",
    "mask",
    "all-long",
    "all-mask",
    "mask2d",
    "long-long",
]


def _value(kind: str, dense: TensorDict, index: Any) -> Any:
    target = dense[index]
    if kind == "number":
        return -7.0
    if kind == "td":
        return (-target - 1).exclude("i")
    return {"x": -target["x"] - 1, "n": {"z": -target["n", "z"] - 1}}


@pytest.mark.parametrize("kind", ["td", "dict", "number"])
@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("index", SET_INDICES, ids=SET_IDS)
def test_setitem_index_matches_dense(stack_dim, index, kind):
    s, tds = homo(stack_dim)
    dense = dense_of(tds, stack_dim)
    value = _value(kind, dense, index)
    dense[index] = value
    s[index] = _value(kind, dense_of(tds, stack_dim), index)
    # the values landed in the members
    assert_td_equal(torch.stack(tds, stack_dim), dense)
    assert all(type(m) is TensorDict for m in s.tensordicts)


def test_setitem_int_member():
    s, tds = homo()
    other = [td.clone() for td in tds]
    s[1] = TensorDict({"x": torch.full((3, 2), 5.0)}, [3])
    torch.testing.assert_close(tds[1]["x"], torch.full((3, 2), 5.0))
    assert_td_equal(tds[0], other[0])
    assert_td_equal(tds[2], other[2])


def test_setitem_hetero_number():
    s, a, b = hetero()
    s[(slice(None), 1)] = 9.0
    torch.testing.assert_close(a["x"][1], torch.full((2,), 9.0))
    torch.testing.assert_close(b["x"][1], torch.full((4,), 9.0))
    torch.testing.assert_close(a["x"][0], torch.zeros(2))
    torch.testing.assert_close(b["n", "h"][1], torch.full((5,), 9.0))


@pytest.mark.parametrize("index", [0, (slice(None), 1), slice(None), MASK2D[:2]], ids=["int", "other", "all", "mask"])
def test_setitem_number_skips_exclusive_keys(index):
    s, a, b = hetero()
    s[index] = 9.0
    torch.testing.assert_close(a["oa"], torch.ones(3))
    torch.testing.assert_close(b["ob"], torch.ones(3))


def test_setitem_bad_value_shape():
    s, tds = homo()
    with pytest.raises(RuntimeError, match=r"batch_size \[4\] cannot be expanded to \[5\]"):
        s[MASK2D] = TensorDict({"x": torch.zeros(4, 2)}, [4])
    with pytest.raises(RuntimeError, match=r"value of shape \[4\] at an index selecting shape \[5\]"):
        s.set_at_("i", torch.zeros(4, dtype=torch.int64), MASK2D)
    with pytest.raises(RuntimeError, match=r"value of shape \[2, 3\] into 3 members"):
        s[:, 1] = TensorDict({"i": torch.zeros(2, 3, dtype=torch.int64)}, [2, 3])
    for i, td in enumerate(tds):
        assert_td_equal(td, member(i))


@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize(
    "index",
    [1, (slice(None), 2), slice(0, 2), MASK2D],
    ids=["int", "all-int", "slice", "mask2d"],
)
def test_set_at_matches_dense(stack_dim, index):
    s, tds = homo(stack_dim)
    dense = dense_of(tds, stack_dim)
    value = -dense[index]["n", "z"] - 1
    dense.set_at_(("n", "z"), value, index)
    assert s.set_at_(("n", "z"), value.clone(), index) is s
    assert_td_equal(torch.stack(tds, stack_dim), dense)


@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize(
    "index",
    [0, (slice(None), 0), torch.tensor([[True, False, False], [False, True, True], [False, False, False]])],
    ids=["int", "all-int", "mask2d"],
)
def test_update_at_matches_dense(stack_dim, index):
    s, tds = homo(stack_dim)
    dense = dense_of(tds, stack_dim)
    target = dense[index]
    update = {"x": -target["x"], ("n", "z"): -target["n", "z"]}
    dense.update_at_({k: v.clone() for k, v in update.items()}, index)
    assert s.update_at_(update, index) is s
    assert_td_equal(torch.stack(tds, stack_dim), dense)


def test_update_new_and_existing_keys():
    s, tds = homo()
    out = s.update({"w": torch.arange(9.0).reshape(3, 3), "n": {"z": torch.ones(3, 3)}})
    assert out is s
    for i, td in enumerate(tds):
        torch.testing.assert_close(td["w"], torch.arange(3.0) + 3 * i)
        torch.testing.assert_close(td["n", "z"], torch.ones(3))


def test_update_from_lazy():
    s, tds = homo()
    other = lazy_stack([TensorDict({"w": torch.full((3,), float(i))}, [3]) for i in range(3)])
    s.update(other)
    for i, td in enumerate(tds):
        torch.testing.assert_close(td["w"], torch.full((3,), float(i)))


def test_update_inplace_writes_through():
    s, tds = homo()
    before = [td["n", "z"] for td in tds]
    out = s.update_(TensorDict({"n": {"z": torch.zeros(3, 3)}}, [3, 3]))
    assert out is s
    for td, old in zip(tds, before, strict=True):
        assert td["n", "z"] is old  # written in place
        torch.testing.assert_close(old, torch.zeros(3))


def test_update_inplace_missing_key():
    s, _ = homo()
    with pytest.raises(KeyError, match="zz"):
        s.update_({"zz": torch.zeros(3, 3)})


def test_set_inplace():
    s, tds = homo()
    old = tds[0]["x"]
    assert s.set_("x", torch.full((3, 3, 2), 4.0)) is s
    assert tds[0]["x"] is old
    assert all(bool((td["x"] == 4).all()) for td in tds)
    with pytest.raises(KeyError, match="zz"):
        s.set_("zz", torch.zeros(3, 3))


def test_del_key():
    s, tds = homo()
    del s["x"]
    assert all("x" not in td for td in tds)
    del s["n", "z"]
    assert all(list(td["n"].keys()) == [] for td in tds)
    with pytest.raises(KeyError, match="zzz"):
        del s["zzz"]


def test_del_hetero_exclusive_key_from_its_holders():
    s, a, b = hetero()
    assert "oa" in a and "oa" not in b
    del s["oa"]
    assert "oa" not in a and "oa" not in b
    with pytest.raises(KeyError, match="oa"):  # no member holds it now
        del s["oa"]


def test_pop():
    s, tds = homo()
    value = s.pop(("n", "z"))
    torch.testing.assert_close(value, torch.stack([member(i)["n", "z"] for i in range(3)]))
    assert all("z" not in td["n"] for td in tds)


def test_lock_locks_members_and_rejects_new_keys():
    s, tds = homo()
    assert s.lock_() is s
    assert s.is_locked
    assert all(td.is_locked for td in tds)
    assert s["n"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        s.set("new", torch.zeros(3, 3))
    with pytest.raises(RuntimeError, match="locked"):
        del s["x"]
    with pytest.raises(RuntimeError, match="locked"):
        s.append(member(3))
    assert all("new" not in td for td in tds)
    s.set_("x", torch.zeros(3, 3, 2))  # in place is allowed
    assert s.unlock_() is s
    assert not s.is_locked
    assert not any(td.is_locked for td in tds)


def test_locked_member_locks_stack():
    s, tds = homo()
    tds[1].lock_()
    assert s.is_locked


def test_lock_hetero():
    s, a, b = hetero()
    s.lock_()
    assert s.is_locked
    assert a.is_locked
    assert b.is_locked


def test_contains_hetero_key():
    s, _, _ = hetero()
    assert "x" in s
    assert ("n", "h") in s


def test_set_replaces_hetero_key():
    s, a, b = hetero()
    s["x"] = torch.zeros(2, 3, 7)
    assert a["x"].shape == torch.Size([3, 7])
    assert b["x"].shape == torch.Size([3, 7])


def test_update_hetero_key():
    s, a, b = hetero()
    s.update({"x": torch.zeros(2, 3, 7)})
    assert a["x"].shape == torch.Size([3, 7])
    assert b["x"].shape == torch.Size([3, 7])


def test_del_hetero_key():
    s, a, b = hetero()
    del s["x"]
    assert "x" not in a
    assert "x" not in b


def test_rename_hetero_key():
    s, a, b = hetero()
    s.rename_key_("x", "w")
    assert a["w"].shape == torch.Size([3, 2])
    assert b["w"].shape == torch.Size([3, 4])


def test_is_empty_hetero():
    s, _, _ = hetero()
    assert not s.is_empty()


def test_all_any_hetero():
    s, _, _ = hetero()
    assert (s == s.clone()).all()
    assert s.any()


def test_insert_append_extend():
    s, tds = homo()
    new = member(7)
    s.insert(1, new)
    assert s.batch_size == torch.Size([4, 3])
    assert s.tensordicts[1] is new
    assert s[1] is new
    torch.testing.assert_close(s["i"][1], new["i"])
    extra = member(8)
    s.append(extra)
    assert s.batch_size == torch.Size([5, 3])
    assert s[-1] is extra
    s.extend([member(9), member(10)])
    assert s.batch_size == torch.Size([7, 3])
    assert len(s.tensordicts) == 7
    assert s[0] is tds[0]


def test_append_stack_dim_1():
    s, _ = homo(1, n=4)
    extra = member(5, 4)
    s.append(extra)
    assert s.batch_size == torch.Size([4, 4])
    assert s[:, 3] is extra


# append / insert / extend: each adds the member ``td`` to the stack ``s``
EACH_INSERT = pytest.mark.parametrize(
    "call",
    [
        lambda s, td: s.append(td),
        lambda s, td: s.insert(0, td),
        lambda s, td: s.extend([member(5), td]),
    ],
    ids=["append", "insert", "extend"],
)


@EACH_INSERT
def test_insert_batch_dims_mismatch(call):
    s, _ = homo()
    with pytest.raises(ValueError, match=r"new member has batch_size \[3, 1\] but the members have \[3\]"):
        call(s, member(9).unsqueeze(-1))  # (ValueError, as tensordict, also when the number of dims differs)
    assert s.batch_size == torch.Size([3, 3])
    assert len(s.tensordicts) == 3


@EACH_INSERT
def test_insert_batch_size_mismatch(call):
    s, _ = homo()
    with pytest.raises(ValueError, match=r"\[4\].*\[3\]"):  # ValueError, as tensordict
        call(s, member(9, 4))
    assert s.batch_size == torch.Size([3, 3])
    assert len(s.tensordicts) == 3


def test_batch_size_setter():
    s, tds = homo(n=1)
    s.batch_size = [3]
    assert s.batch_size == torch.Size([3])
    assert all(td.batch_size == torch.Size([]) for td in tds)
    with pytest.raises(RuntimeError, match="cannot set batch_size"):
        s.batch_size = [4]


# --------------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------------
def _members_of(out: Any) -> list[Any]:
    assert type(out) is LazyStackedTensorDict
    return out.tensordicts


@pytest.mark.parametrize(
    ("op", "member_op"),
    [
        (lambda s: s + 1, lambda td, i: td + 1),
        (lambda s: s - 2.5, lambda td, i: td - 2.5),
        (lambda s: s * 3, lambda td, i: td * 3),
        (lambda s: s / 4, lambda td, i: td / 4),
        (lambda s: 1 - s, lambda td, i: 1 - td),
        (lambda s: 2 * s, lambda td, i: 2 * td),
        (lambda s: -s, lambda td, i: -td),
        (lambda s: s * s, lambda td, i: td * td),
        (lambda s: s + torch.arange(3.0).reshape(3, 1), lambda td, i: td + float(i)),
        (lambda s: s - torch.stack([member(j) for j in range(3)]), lambda td, i: td - member(i)),
        (lambda s: s / (lazy_stack(members()) + 1), lambda td, i: td / (member(i) + 1)),
        (lambda s: s > 100, lambda td, i: td > 100),
        (lambda s: s == s.clone(), lambda td, i: td == td),
        (lambda s: s != 0, lambda td, i: td != 0),
        (lambda s: s.float(), lambda td, i: td.float()),
        (lambda s: s.double(), lambda td, i: td.double()),
        (lambda s: s.to(torch.int32), lambda td, i: td.to(torch.int32)),
        (lambda s: s.bool(), lambda td, i: td.bool()),
        (lambda s: s.abs(), lambda td, i: td.abs()),
        (lambda s: s.clamp(0, 101), lambda td, i: td.clamp(0, 101)),
        (lambda s: s.apply(lambda x: x * 2), lambda td, i: td * 2),
        (lambda s: s.clone(), lambda td, i: td),
        (lambda s: s.select("x"), lambda td, i: td.select("x")),
        (lambda s: s.exclude("x", ("n", "z")), lambda td, i: td.exclude("x", ("n", "z"))),
    ],
    ids=[
        "add",
        "sub",
        "mul",
        "div",
        "rsub",
        "rmul",
        "neg",
        "mul-lazy",
        "add-tensor",
        "sub-dense",
        "div-lazy",
        "gt",
        "eq",
        "ne",
        "float",
        "double",
        "to",
        "bool",
        "abs",
        "clamp",
        "apply",
        "clone",
        "select",
        "exclude",
    ],
)
def test_value_op_per_member(op, member_op):
    s, tds = homo()
    out = op(s)
    result = _members_of(out)
    assert out.stack_dim == 0
    assert out.batch_size == s.batch_size
    for i, (m, td) in enumerate(zip(result, tds, strict=True)):
        assert m is not td
        assert_td_equal(m, member_op(member(i), i))
    for i, td in enumerate(tds):  # inputs untouched
        assert_td_equal(td, member(i))


def test_value_op_stack_dim_1():
    s, _tds = homo(1, n=4)
    out = s + torch.arange(3.0).expand(4, 3)  # a batch-shaped operand is split along the stack dim
    assert out.stack_dim == 1
    for i, m in enumerate(out.tensordicts):
        assert_td_equal(m, member(i, 4) + float(i))


def test_value_op_hetero():
    s, a, b = hetero()
    out = s * 2 + 1
    assert type(out) is LazyStackedTensorDict
    assert_td_equal(out.tensordicts[0], a * 2 + 1)
    assert_td_equal(out.tensordicts[1], b * 2 + 1)
    assert "oa" in out.tensordicts[0]
    assert "ob" in out.tensordicts[1]
    assert list(out.keys()) == ["x", "n"]
    c = s.clone()
    assert c.tensordicts[0] is not a
    assert c.tensordicts[0]["x"] is not a["x"]
    assert_td_equal(c.tensordicts[1], b)
    ap = s.apply(lambda x: x.sum(-1, keepdim=True) if x.ndim > 1 else x)
    assert ap.tensordicts[1]["x"].shape == torch.Size([3, 1])


def test_clone_shallow_shares_leaves():
    s, tds = homo()
    c = s.clone(False)
    assert c.tensordicts[0] is not tds[0]
    assert c.tensordicts[0]["x"] is tds[0]["x"]


@pytest.mark.parametrize(
    ("op", "member_op"),
    [
        (lambda s: s.add_(1), lambda td: td + 1),
        (lambda s: s.mul_(2), lambda td: td * 2),
        (lambda s: s.sub_(torch.ones(3, 3, dtype=torch.int64)), lambda td: td - 1),
        (lambda s: s.clamp_(0, 101), lambda td: td.clamp(0, 101)),
        (lambda s: s.zero_(), lambda td: td * 0),
        (lambda s: s.apply_(lambda x: x + 3), lambda td: td + 3),
        (lambda s: s.__iadd__(5), lambda td: td + 5),
        (lambda s: s.__imul__(lazy_stack(members())), lambda td: td * td),
    ],
    ids=["add_", "mul_", "sub_", "clamp_", "zero_", "apply_", "iadd", "imul-lazy"],
)
def test_inplace_op_writes_members(op, member_op):
    s, tds = homo()
    leaves = [td["x"] for td in tds]
    out = op(s)
    assert out is s
    for i, (td, leaf) in enumerate(zip(tds, leaves, strict=True)):
        assert td["x"] is leaf  # same storage: written in place
        assert_td_equal(td, member_op(member(i)))


def test_inplace_hetero():
    s, a, b = hetero()
    s.add_(1)
    torch.testing.assert_close(a["x"], torch.ones(3, 2))
    torch.testing.assert_close(b["x"], torch.full((3, 4), 2.0))
    torch.testing.assert_close(a["oa"], torch.full((3,), 2.0))


def test_failing_inplace_leaves_members_unchanged():
    s, tds = homo()
    with pytest.raises(RuntimeError, match=r"(?s)can't be cast.*key 'i' of member 0.*nothing was modified"):
        s.mul_(1.5)
    for i, td in enumerate(tds):
        assert_td_equal(td, member(i))


def test_failing_inplace_later_member():
    a = TensorDict({"x": torch.ones(2)}, [2])
    b = TensorDict({"x": torch.ones(2, dtype=torch.int64)}, [2])
    s = lazy_stack([a, b])
    with pytest.raises(RuntimeError, match="member 1"):
        s.mul_(1.5)
    torch.testing.assert_close(a["x"], torch.ones(2))  # member 0 was not written either


def test_apply_with_batch_size_is_dense():
    s, tds = homo()
    out = s.apply(lambda x: x.sum(0), batch_size=[3])
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size([3])
    torch.testing.assert_close(out["x"], sum(td["x"] for td in tds))


def test_apply_others_and_none():
    s, tds = homo()
    out = s.apply(lambda x, y: x + y, s)
    assert type(out) is LazyStackedTensorDict
    assert_td_equal(out.tensordicts[2], tds[2] * 2)
    assert s.apply(lambda x: None) is None


def test_named_apply_per_member():
    s, _ = homo()
    out = s.named_apply(lambda k, x: x * 0 if k == "x" else x, nested_keys=True)
    assert type(out) is LazyStackedTensorDict
    assert bool((out["x"] == 0).all())
    torch.testing.assert_close(out["i"], s["i"])


@pytest.mark.parametrize(
    ("op", "dense_op"),
    [
        (lambda s: s.sum(), lambda d: d.sum()),
        (lambda s: s.sum(0), lambda d: d.sum(0)),
        (lambda s: s.float().mean(1), lambda d: d.float().mean(1)),
        (lambda s: s.amax(-1), lambda d: d.amax(-1)),
        (lambda s: s.float().std(dim=0), lambda d: d.float().std(dim=0)),
        (lambda s: s.prod(1), lambda d: d.prod(1)),
    ],
    ids=["sum", "sum0", "mean1", "amax", "std0", "prod1"],
)
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_reduction_dense(op, dense_op, stack_dim):
    s, tds = homo(stack_dim)
    out = op(s)
    assert type(out) is TensorDict
    assert_td_equal(out, dense_op(dense_of(tds, stack_dim)))


def test_all_any_homo():
    s, _ = homo()
    assert (s == s.clone()).all()
    assert not (s != s.clone()).any()
    assert s.any()
    assert not s.all()  # member 0 holds zeros


@pytest.mark.parametrize(
    ("op", "stack_dim_after"),
    [
        (lambda t, d: t.unsqueeze(0), lambda d: d + 1),
        (lambda t, d: t.unsqueeze(-1), lambda d: d),
        (lambda t, d: t[:, :1].squeeze(1) if d == 0 else t[:1].squeeze(0), lambda d: 0),  # a dim off the stack
    ],
    ids=["unsqueeze0", "unsqueeze-1", "squeeze"],
)
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_shape_op_per_member(op, stack_dim_after, stack_dim):
    s, tds = homo(stack_dim)
    out = op(s, stack_dim)
    assert type(out) is LazyStackedTensorDict and out.stack_dim == stack_dim_after(stack_dim)
    assert_td_equal(out.to_tensordict(), op(dense_of(tds, stack_dim), stack_dim))


def test_ragged_members_stay_apart_through_index_and_expand():
    s = LazyStackedTensorDict(
        TensorDict(a=torch.rand(5, 4, 8), batch_size=[5]),
        TensorDict(a=torch.rand(5, 3, 8), batch_size=[5]),
        stack_dim=1,
    )
    out = s[0].expand(6, 2)
    assert type(out) is LazyStackedTensorDict and out.batch_size == (6, 2) and out.stack_dim == 1
    assert [tuple(m["a"].shape) for m in out.tensordicts] == [(6, 4, 8), (6, 3, 8)]
    assert torch.equal(out.tensordicts[1]["a"][5], s.tensordicts[1]["a"][0])
    picked = s[torch.tensor([0, 2])]  # an index tensor before the stack dim: each member takes it
    assert [tuple(m["a"].shape) for m in picked.tensordicts] == [(2, 4, 8), (2, 3, 8)]
    assert s.unsqueeze(0).squeeze(0).batch_size == (5, 2)


@pytest.mark.parametrize("stack_dim", [0, 1])
def test_unbind_stack_dim_gives_members(stack_dim):
    s, tds = homo(stack_dim)
    out = s.unbind(stack_dim)
    assert type(out) is tuple
    assert all(o is td for o, td in zip(out, tds, strict=True))
    assert all(o is td for o, td in zip(s.unbind(stack_dim - 2), tds, strict=True))
    with pytest.raises(IndexError, match="out of range"):
        s.unbind(2)


def test_unbind_hetero():
    s, a, b = hetero()
    out = s.unbind(0)
    assert out[0] is a
    assert out[1] is b


def test_iter_gives_members():
    s, tds = homo()
    assert [id(m) for m in s] == [id(td) for td in tds]


def test_torch_stack_dense_members_is_dense():
    tds = members()
    out = torch.stack(tds, 1)
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size([3, 3])
    torch.testing.assert_close(out["x"][:, 2], tds[2]["x"])


def test_torch_stack_mismatched_shapes():
    _, a, b = hetero()
    with pytest.raises(RuntimeError, match="equal size") as info:
        torch.stack([a.exclude("oa"), b.exclude("ob")])
    assert any("'x'" in note for note in getattr(info.value, "__notes__", []))
    with pytest.raises(RuntimeError, match="different keys"):
        torch.stack([a.exclude("oa"), b])


def test_maybe_dense_stack():
    tds = members()
    out = maybe_dense_stack(tds)
    assert type(out) is TensorDict
    assert_td_equal(out, torch.stack(members()))
    out = maybe_dense_stack(tds, 1)
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size([3, 3])
    torch.testing.assert_close(out["i"][:, 1], tds[1]["i"])
    _, a, b = hetero()
    out = maybe_dense_stack([a, b])
    assert type(out) is LazyStackedTensorDict
    assert out.tensordicts[0] is a
    # different key sets, same shapes: lazy too
    c, d = member(0), member(1).exclude("i")
    out = maybe_dense_stack([c, d], 1)
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == 1
    assert list(out.keys()) == ["x", "n"]


def test_dense_stack_tds():
    s, tds = homo(1)
    out = dense_stack_tds(s)
    assert type(out) is TensorDict
    assert_td_equal(out, dense_of(tds, 1))
    out = dense_stack_tds(tds, 0)
    assert_td_equal(out, dense_of(tds, 0))
    assert_td_equal(dense_stack_tds(s, 0), dense_of(tds, 1))  # a lazy stack's own stack_dim is used
    _, a, b = hetero()
    out = dense_stack_tds([a, b], 0)  # keys and shapes differ: a lazy stack, as maybe_dense_stack
    assert type(out) is LazyStackedTensorDict and out.tensordicts[0] is a
    assert dense_stack_tds(a) is a
    with pytest.raises(ValueError, match="needs dim="):
        dense_stack_tds(tds)


@pytest.mark.parametrize("dim", [0, 1])
def test_dense_stack_keeps_nested_ragged_lazy_stacks(dim):
    ragged = lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(4), b=torch.ones(2))])
    holders = [TensorDict(lazy=ragged, x=torch.arange(2.0), batch_size=[2]) for _ in range(2)]
    for out in (torch.stack(holders, dim), dense_stack_tds(holders, dim), dense_stack_tds(lazy_stack(holders, dim))):
        assert type(out) is TensorDict and out.batch_size == (2, 2)
        inner = out["lazy"]
        assert type(inner) is LazyStackedTensorDict and inner.stack_dim == (1 if dim == 0 else 0)
        assert [m.batch_size for m in inner.tensordicts] == [torch.Size([2])] * 2
        assert inner.tensordicts[1]["b"].shape == (2, 2)
        assert torch.equal(inner.tensordicts[1]["a"], torch.ones(2, 4))


@pytest.mark.parametrize("method", ["to_tensordict", "contiguous"])
@pytest.mark.parametrize("stack_dim", [0, 1])
def test_to_tensordict(method, stack_dim):
    s, tds = homo(stack_dim)
    out = getattr(s, method)()
    assert type(out) is TensorDict
    assert type(out["n"]) is TensorDict
    assert_td_equal(out, dense_of(tds, stack_dim))
    out["x"] += 1  # a copy: the members are untouched
    assert_td_equal(tds[0], member(0))


def test_to_tensordict_common_keys_only():
    a = member(0).set("oa", torch.zeros(3))
    b = member(1).set("ob", torch.zeros(3))
    out = lazy_stack([a, b]).to_tensordict()
    assert set(out.keys()) == {"x", "i", "n"}
    torch.testing.assert_close(out["i"], torch.stack([a["i"], b["i"]]))


def test_to_tensordict_hetero_raises():
    s, _, _ = hetero()
    with pytest.raises(RuntimeError, match="key 'x'"):
        s.to_tensordict()


@pytest.mark.parametrize("stack_dim", [0, 1])
def test_pickle_round_trip(stack_dim):
    s, tds = homo(stack_dim)
    out = pickle.loads(pickle.dumps(s))
    assert type(out) is LazyStackedTensorDict
    assert out.stack_dim == stack_dim
    assert out.batch_size == s.batch_size
    for m, td in zip(out.tensordicts, tds, strict=True):
        assert m is not td
        assert_td_equal(m, td)


def test_pickle_hetero():
    s, a, b = hetero(1)
    out = pickle.loads(pickle.dumps(s))
    assert out.stack_dim == 1
    assert_td_equal(out.tensordicts[0], a)
    assert_td_equal(out.tensordicts[1], b)
    assert "oa" in out.tensordicts[0]


def test_repr():
    s, _, _ = hetero()
    text = repr(s)
    assert text.splitlines()[0] == "LazyStackedTensorDict(batch_size=[2, 3], stack_dim=0, device=None)"
    assert "|-- n: LazyStackedTensorDict(batch_size=[2, 3])" in text
    assert "|   |-- h: Tensor(shape=[2, 3, -1], dtype=float32, device=None)" in text  # members differ: -1
    assert "`-- x: Tensor(shape=[2, 3, -1], dtype=float32, device=None)" in text
    assert text.splitlines()[-2:] == ["(only in member 0: ['oa'])", "(only in member 1: ['ob'])"]
    h, _ = homo(stack_dim=1)
    text = repr(h)
    assert "only in member" not in text
    # the same tree as the dense stack's (the nested node is a lazy stack too)
    assert text.replace("LazyStackedTensorDict", "TensorDict").replace(", stack_dim=1", "") == repr(h.to_tensordict())


def test_repr_follows_the_print_options():
    h, _ = homo()
    with set_printoptions(show_dtype=False, show_device=False, show_field_device=False):
        assert repr(h).splitlines()[:2] == [
            "LazyStackedTensorDict(batch_size=[3, 3], stack_dim=0)",
            "|-- i: Tensor(shape=[3, 3])",
        ]
    with set_printoptions(show_grad=True, show_is_contiguous=True):  # detailed: the leaves are really stacked
        line = next(x for x in repr(h).splitlines() if "-- x:" in x)
        assert "requires_grad=False" in line and "is_contiguous=True" in line
    with set_printoptions(sort_keys=False):
        assert [x.split(":")[0] for x in repr(h).splitlines()[1:]] == [
            x.split(":")[0] for x in repr(h.to_tensordict()).splitlines()[1:]
        ]


def test_empty():
    s, _ = homo()
    out = s.empty()
    assert type(out) is LazyStackedTensorDict
    assert out.batch_size == s.batch_size
    assert list(out.keys()) == []
    dense = s.empty(batch_size=[4])
    assert type(dense) is TensorDict
    assert dense.batch_size == torch.Size([4])


def test_grad_and_requires_grad():
    s = lazy_stack([TensorDict({"x": torch.ones(2)}, [2]) for _ in range(2)])
    assert s.requires_grad_() is s
    assert all(td["x"].requires_grad for td in s.tensordicts)
    (s["x"] * torch.tensor([[1.0], [2.0]])).sum().backward()
    grad = s.grad
    assert type(grad) is LazyStackedTensorDict
    torch.testing.assert_close(grad["x"], torch.tensor([[1.0, 1.0], [2.0, 2.0]]))
    s.zero_grad()
    assert s.tensordicts[0]["x"].grad is None
    assert not s.detach()["x"].requires_grad


def test_fill_():
    s, a, b = hetero()
    assert s.fill_("x", 3.0) is s
    assert bool((a["x"] == 3).all())
    assert bool((b["x"] == 3).all())


# --------------------------------------------------------------------------------------------------
# Non-tensor leaves in members
# --------------------------------------------------------------------------------------------------
def _nt(value: Any) -> TensorDict:
    return TensorDict({"x": torch.zeros(3), "s": value}, [3])


def test_non_tensor_different_values_stack():
    s = lazy_stack([_nt("hello"), _nt("world")])
    out = s.get("s")
    assert type(out) is NonTensorStack
    assert out.batch_size == torch.Size([2, 3])
    assert out.tolist() == [["hello"] * 3, ["world"] * 3]
    assert s[1]["s"] == "world"
    assert s[1, 0]["s"] == "world"


def test_non_tensor_same_values_stay_a_stack_by_default():
    out = lazy_stack([_nt("hello"), _nt("hello")]).get("s")
    assert type(out) is NonTensorStack and out.tolist() == [["hello"] * 3] * 2


@set_capture_non_tensor_stack(True)
def test_non_tensor_same_values_collapse_under_the_capture_option():
    out = lazy_stack([_nt("hello"), _nt("hello")]).get("s")
    assert type(out) is NonTensorData
    assert out.batch_size == torch.Size([2, 3])
    assert out.data == "hello"


def test_non_tensor_stack_dim_1():
    out = lazy_stack([_nt("a"), _nt("b")], 1).get("s")
    assert type(out) is NonTensorStack
    assert out.tolist() == [["a", "b"]] * 3


def test_non_tensor_member_stack():
    out = lazy_stack([_nt("a"), _nt(["p", "q", "r"])]).get("s")
    assert type(out) is NonTensorStack
    assert out.tolist() == [["a", "a", "a"], ["p", "q", "r"]]


def test_non_tensor_set_splits():
    s = lazy_stack([_nt("a"), _nt("b")])
    s.set("t", "v")
    assert all(type(td.get("t")) is NonTensorData for td in s.tensordicts)
    assert all(td["t"] == "v" for td in s.tensordicts)
    s["t"] = [["p"] * 3, ["q"] * 3]
    assert s.tensordicts[1].get("t").tolist() == ["q"] * 3
    assert s.tensordicts[0].get("t").tolist() == ["p"] * 3


def test_non_tensor_mixed_with_tensor_raises():
    a = _nt("a")
    b = TensorDict({"x": torch.zeros(3), "s": torch.zeros(3)}, [3])
    with pytest.raises(RuntimeError, match="key 's'"):
        lazy_stack([a, b]).get("s")


# ---------------------------------------------------------------------------- jagged densify, to_padded_tensor
def _ragged_pair():
    return lazy_stack(
        [
            TensorDict(a=torch.zeros(3), n={"b": torch.zeros(3, 2)}, batch_size=[3]),
            TensorDict(a=torch.ones(4), n={"b": torch.ones(4, 2)}, batch_size=[4]),
        ]
    )


def test_densify_jagged_gives_nested_leaves_and_ragged_batch():
    td = _ragged_pair().densify(layout=torch.jagged)
    assert type(td) is TensorDict
    assert td.batch_size == torch.Size([2, -1])
    assert td["a"].is_nested
    assert td["n", "b"].is_nested
    assert td["n"].batch_size == torch.Size([2, -1])
    assert [x.tolist() for x in td["a"].unbind()] == [[0.0] * 3, [1.0] * 4]


def test_densify_strided_is_to_tensordict_and_bad_layout_raises():
    s = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3]), TensorDict(a=torch.ones(3), batch_size=[3])])
    assert torch.equal(s.densify()["a"], torch.stack([torch.zeros(3), torch.ones(3)]))
    with pytest.raises(ValueError, match="layout"):
        s.densify(layout=torch.sparse_coo)
    same = lazy_stack(list(s.tensordicts), 1).densify(layout=torch.jagged)  # one shape: stacked (as tensordict)
    assert torch.equal(same["a"], torch.stack([torch.zeros(3), torch.ones(3)], 1))
    members = [TensorDict(a=torch.zeros(2, 3), batch_size=[2]), TensorDict(a=torch.ones(2, 4), batch_size=[2])]
    ragged = lazy_stack(members, 1)
    with pytest.raises(NotImplementedError, match="stack dim 0"):
        ragged.densify(layout=torch.jagged)


def test_to_padded_tensor_pads_and_masks():
    padded = _ragged_pair().densify(layout=torch.jagged).to_padded_tensor(padding=-1.0, mask_key="mask")
    assert padded.batch_size == torch.Size([2, 4])
    assert padded["a"].tolist() == [[0.0, 0.0, 0.0, -1.0], [1.0, 1.0, 1.0, 1.0]]
    assert padded["n", "b"].shape == torch.Size([2, 4, 2])
    assert padded["n", "b"][0, 3].tolist() == [-1.0, -1.0]
    assert padded["mask"].tolist() == [[True, True, True, False], [True, True, True, True]]


def test_to_padded_tensor_without_nested_leaves():
    td = TensorDict(a=torch.arange(3.0), batch_size=[3])
    assert torch.equal(td.to_padded_tensor()["a"], td["a"])
    with pytest.raises(RuntimeError, match="ragged batch dim"):
        td.to_padded_tensor(mask_key="m")


def test_index_with_tuples_of_ints_is_a_batch_index():  # not a key (tensordict 0.15.3 raises TypeError)
    s = lazy_stack([TensorDict(a=torch.arange(4.0) + 10 * i, batch_size=[4]) for i in range(3)])
    assert type(s[(0, 2),]) is LazyStackedTensorDict
    torch.testing.assert_close(s[(0, 2),]["a"], torch.tensor([[0.0, 1.0, 2.0, 3.0], [20.0, 21.0, 22.0, 23.0]]))
    torch.testing.assert_close(s[(0, 2), (1, 3)]["a"], torch.tensor([1.0, 23.0]))
