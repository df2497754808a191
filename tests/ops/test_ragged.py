"""Nested (ragged) tensor leaves: ``tensorbatch/_ops/ragged.py`` and the batch operations that reach it
(indexing, split/chunk, cat, stack, construction and checks of strided nested tensors, which have no
``.shape``)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from _messages import batch_mismatch

from tensorbatch import TensorDict
from tensorbatch._ops import ragged

pytestmark = pytest.mark.filterwarnings("ignore")
LAYOUTS = [pytest.param(torch.jagged, id="jagged"), pytest.param(torch.strided, id="strided")]
LENGTHS = (2, 1, 3, 2)


def _comps(lengths=LENGTHS, width=2, dtype=torch.float32):
    out, start = [], 0
    for n in lengths:
        out.append(torch.arange(start, start + width * n, dtype=dtype).reshape(n, width))
        start += width * n
    return out


def _nt(layout, lengths=LENGTHS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor(_comps(lengths), layout=layout)


def _rows(t):
    return [c.tolist() for c in t.unbind(0)]


def _expected(rows):
    comps = _comps()
    return [comps[i].tolist() for i in rows]


# ------------------------------------------------------------------------------------------ the module
@pytest.mark.parametrize("layout", LAYOUTS)
def test_shape_has_minus_one_where_components_differ(layout):
    assert ragged.shape(_nt(layout)) == torch.Size([4, -1, 2])
    uniform = _nt(layout, (3, 3))
    assert ragged.shape(uniform)[0] == 2
    assert ragged.shape(uniform)[2] == 2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (slice(1, 3), [1, 2]),
        (slice(2, None), [2, 3]),
        (slice(None, None, 2), [0, 2]),
        (slice(3, 1), []),
        ([3, 0], [3, 0]),
        (torch.tensor([2, -4, 2]), [2, 0, 2]),
        (torch.tensor([True, False, True, True]), [0, 2, 3]),
        ((slice(1, None),), [1, 2, 3]),
    ],
    ids=["slice", "open", "step", "empty", "list", "tensor_neg_repeat", "mask", "tuple"],
)
def test_getitem_selects_components(layout, index, rows):
    out = ragged.getitem(_nt(layout), index)
    assert out.is_nested
    assert out.layout == layout
    assert _rows(out) == _expected(rows)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_getitem_int_gives_the_dense_component(layout):
    assert ragged.getitem(_nt(layout), -2).tolist() == _expected([2])[0]
    assert ragged.getitem(_nt(layout), torch.tensor(1)).tolist() == _expected([1])[0]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("index", "exc", "match"),
    [
        ([0, 4], IndexError, "index 4 is out of bounds for dimension 0 with size 4"),
        (torch.tensor([-5]), IndexError, "index -5 is out of bounds"),
        (torch.tensor([True, False]), IndexError, "a mask of shape [2] cannot index a nested tensor of 4 components"),
        (torch.tensor([0.5]), IndexError, "a nested tensor is indexed along its batch dim by an int"),
        (None, RuntimeError, "takes no None or Ellipsis"),
    ],
)
def test_getitem_refuses_bad_indices(layout, index, exc, match):
    with pytest.raises(exc, match=re.escape(match)):
        ragged.getitem(_nt(layout), index)


def test_jagged_slices_and_splits_are_views_of_the_values():
    nt = _nt(torch.jagged)
    ragged.getitem(nt, slice(1, 3)).values().fill_(-1.0)
    ragged.split(nt, [3, 1])[1].values().fill_(-2.0)
    assert [c.flatten().unique().tolist() for c in nt.unbind()[1:]] == [[-1.0], [-1.0], [-2.0]]


def test_non_contiguous_jagged_is_gathered():
    values = torch.arange(18.0).reshape(9, 2)
    holey = torch.nested.nested_tensor_from_jagged(values, torch.tensor([0, 3, 5, 9]), lengths=torch.tensor([2, 1, 3]))
    comps = [values[0:2].tolist(), values[3:4].tolist(), values[5:8].tolist()]
    assert _rows(ragged.getitem(holey, [2, 0])) == [comps[2], comps[0]]
    assert _rows(ragged.getitem(holey, slice(1, 3))) == comps[1:]
    assert _rows(ragged.cat([holey, holey])) == comps + comps
    data, sizes = ragged.to_flat(holey)
    assert sizes.tolist() == [[2, 2], [1, 2], [3, 2]]
    assert _rows(ragged.from_flat(data, sizes, torch.jagged)) == comps


@pytest.mark.parametrize("layout", LAYOUTS)
def test_split_and_cat(layout):
    pieces = ragged.split(_nt(layout), [1, 0, 3])
    assert [_rows(p) for p in pieces] == [_expected([0]), [], _expected([1, 2, 3])]
    joined = ragged.cat([pieces[2], pieces[0]])
    assert joined.layout == layout
    assert _rows(joined) == _expected([1, 2, 3, 0])


def test_cat_refuses_mixed_layouts():
    with pytest.raises(RuntimeError, match="nested tensors of the same layout"):
        ragged.cat([_nt(torch.jagged), _nt(torch.strided)])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("back", LAYOUTS)
def test_flat_round_trip_is_a_view(layout, back):
    data, sizes = ragged.to_flat(_nt(layout))
    assert data.tolist() == torch.cat([c.reshape(-1) for c in _comps()]).tolist()
    assert sizes.tolist() == [[n, 2] for n in LENGTHS]
    rebuilt = ragged.from_flat(data, sizes, back)
    assert rebuilt.layout == back
    assert _rows(rebuilt) == _expected(range(4))
    data[0] = 100.0
    assert rebuilt.unbind()[0][0, 0].item() == 100.0


def test_from_flat_offset_view_of_a_larger_buffer():
    buffer = torch.arange(40.0)
    data = buffer[4:20]  # the storage offset counts
    sizes = torch.tensor([[n, 2] for n in LENGTHS])
    for layout in (torch.jagged, torch.strided):
        assert _rows(ragged.from_flat(data, sizes, layout))[0] == [[4.0, 5.0], [6.0, 7.0]]


def test_from_flat_refuses_sizes_jagged_cannot_hold():
    with pytest.raises(RuntimeError, match="do not describe a jagged tensor"):
        ragged.from_flat(torch.zeros(10), torch.tensor([[1, 2], [2, 4]]), torch.jagged)


# ------------------------------------------------------------------------------------------ through TensorDicts
def _td(layout):
    return TensorDict({"nt": _nt(layout), "x": torch.arange(4.0), "n": {"nt2": _nt(layout)}}, batch_size=[4])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (slice(1, 3), [1, 2]),
        ([3, 0], [3, 0]),
        (torch.tensor([1, 1]), [1, 1]),
        (torch.tensor([False, True, False, True]), [1, 3]),
        (torch.arange(300) % 4, [i % 4 for i in range(300)]),
    ],
    ids=["slice", "list", "tensor", "mask", "many_rows"],
)
def test_td_index(layout, index, rows):
    out = _td(layout)[index]
    assert out.batch_size == torch.Size([len(rows)])
    assert _rows(out["nt"]) == _expected(rows)
    assert _rows(out["n", "nt2"]) == _expected(rows)
    assert out["x"].tolist() == [float(i) for i in rows]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_td_split_chunk_unbind_cat(layout):
    td = _td(layout)
    first, second = td.split([1, 3])
    assert _rows(second["n", "nt2"]) == _expected([1, 2, 3])
    assert [c.batch_size[0] for c in td.chunk(3)] == [2, 2]
    assert [u["nt"].tolist() for u in td.unbind(0)] == _expected(range(4))
    joined = torch.cat([second, first], 0)
    assert joined.batch_size == torch.Size([4])
    assert _rows(joined["nt"]) == _expected([1, 2, 3, 0])
    assert joined["x"].tolist() == [1.0, 2.0, 3.0, 0.0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_td_stack_is_refused_naming_the_leaf(layout):
    td = _td(layout)
    with pytest.raises(RuntimeError, match=r"Cannot stack the tensordicts: the leaf 'nt' is a nested tensor"):
        torch.stack([td, td], 0)


def test_strided_leaf_checks_use_its_sizes():
    nt = _nt(torch.strided)
    with pytest.raises(RuntimeError, match=batch_mismatch([3], "nt", [4, -1, 2])):
        TensorDict({"nt": nt}, batch_size=[3])
    td = TensorDict({"nt": nt, "x": torch.zeros(4)}, batch_size=[4])
    with pytest.raises(RuntimeError, match=batch_mismatch([2], "y", [4, -1, 2])):
        TensorDict({"x": torch.zeros(2)}, [2]).update({"y": nt})
    assert "Tensor(shape=[4, -1, 2], dtype=float32" in repr(td)
    assert _rows(TensorDict({}, [4]).update(td)["nt"]) == _expected(range(4))
    assert _rows(td.apply(lambda x: x * 0)["nt"]) == [[[0.0] * 2] * n for n in LENGTHS]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_td_zero_(layout):
    td = _td(layout).zero_()
    assert [c.abs().sum().item() for c in td["nt"].unbind()] == [0.0] * 4
    assert td["x"].tolist() == [0.0] * 4


def test_plain_leaf_errors_are_unchanged():
    td = TensorDict({"x": torch.zeros(4, 2)}, [4])
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        td[[0, 9]]
    with pytest.raises(RuntimeError, match="split"):
        td.split([1, 1])


def test_td_cat_of_a_nested_leaf_with_a_plain_one_names_the_key():
    plain = TensorDict({"nt": torch.zeros(4, 3, 2), "x": torch.arange(4.0), "n": {"nt2": _nt(torch.jagged)}}, [4])
    with pytest.raises(RuntimeError, match="same layout") as info:
        torch.cat([_td(torch.jagged), plain], 0)
    assert "while concatenating nested tensors at key 'nt'" in info.value.__notes__


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lazy_stack_of_nested_leaves_reads_them_as_a_list(layout):
    from tensorbatch import lazy_stack

    stack = lazy_stack([_td(layout), _td(layout)[1:3]])
    with pytest.raises(RuntimeError, match="cannot stack the members' leaves at key 'nt': they are nested tensors"):
        stack["nt"]
    assert [_rows(t) for t in stack.get("nt", as_list=True)] == [_expected(range(4)), _expected([1, 2])]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_td_inplace_writes_need_the_same_component_sizes(layout):
    td = _td(layout)
    td.set_("nt", _nt(layout) * 2)
    assert _rows(td["nt"])[1] == [[8.0, 10.0]]
    other = _nt(layout, (2, 1, 2, 3))  # same batch, other component sizes
    with pytest.raises(RuntimeError, match=re.escape("Failed to update 'nt'")) as info:
        td.update_({"x": torch.ones(4), "nt": other})
    assert "the components' sizes must match" in str(info.value)
    assert td["x"].tolist() == [0.0, 1.0, 2.0, 3.0]  # nothing written
    with pytest.raises(RuntimeError, match=re.escape("Failed to update 'nt'")):
        td.set_("nt", torch.zeros(4, 3, 2))


def test_td_reshape_to_its_own_batch_size_keeps_a_strided_leaf():
    td = _td(torch.strided)
    assert td.reshape(4)["nt"] is td["nt"]
    with pytest.raises(RuntimeError):
        td.reshape(2, 2)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_setitem_by_key_takes_a_nested_leaf_and_checks_its_rows(layout):
    # td[key] = nt: the fast path reads no shape of a strided nested tensor (it has none), the checked one does
    td = TensorDict({"x": torch.zeros(4, 1)}, [4])
    nt = _nt(layout)
    td["r"] = nt
    td["n", "r"] = nt
    assert td["r"] is nt
    assert _rows(td["n", "r"]) == _expected(range(4))
    with pytest.raises(RuntimeError, match=r"batch"):
        td["short"] = _nt(layout, (2, 1))
    assert "short" not in td.keys()
