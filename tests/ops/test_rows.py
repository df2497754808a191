"""The row planner (``tensorbatch/_ops/rows.py``): every dim-0 index form against plain torch indexing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tensorbatch import TensorDict
from tensorbatch._ops.index import normalize
from tensorbatch._ops.rows import RowPlan, check_fits, plan_rows, split_index

T = torch.tensor
SIZE = 6
X = torch.arange(SIZE * 2).reshape(SIZE, 2)  # row i holds [2i, 2i + 1]

# id -> (index given to the planner, the same index for torch)
FORMS = {
    "int": (2, 2),
    "neg_int": (-1, -1),
    "np_int": (np.int64(3), 3),
    "zero_d_tensor": (T(4), 4),
    "slice": (slice(1, 4), slice(1, 4)),
    "slice_step": (slice(None, None, 2), slice(None, None, 2)),
    "slice_neg": (slice(-3, -1), slice(-3, -1)),
    "slice_past_end": (slice(4, 100), slice(4, 100)),
    "slice_empty": (slice(3, 3), slice(3, 3)),
    "slice_reversed_bounds": (slice(5, 1), slice(5, 1)),
    "list_sorted": ([0, 2, 5], [0, 2, 5]),
    "list_unsorted": ([4, 1, 3], [4, 1, 3]),
    "list_repeats": ([2, 2, 0, 2], [2, 2, 0, 2]),
    "list_negative": ([-1, 0, -6], [-1, 0, -6]),
    "list_empty": ([], T([], dtype=torch.int64)),
    "tuple_of_ints": ((3, 1), [3, 1]),
    "range": (range(1, 5, 2), [1, 3]),
    "ndarray": (np.array([5, 0, 5]), [5, 0, 5]),
    "long_tensor": (T([3, 0, 1]), T([3, 0, 1])),
    "int32_tensor": (T([1, 4, 1], dtype=torch.int32), T([1, 4, 1])),
    "tensor_2d": (T([[0, 5], [5, 2]]), T([[0, 5], [5, 2]])),
    "tensor_one_row": (T([4]), T([4])),
    "mask": (T([True, False, True, False, False, True]), T([True, False, True, False, False, True])),
    "mask_none": (torch.zeros(SIZE, dtype=torch.bool), torch.zeros(SIZE, dtype=torch.bool)),
    "mask_list": ([True, True, False, False, False, True], T([True, True, False, False, False, True])),
    "mask_ndarray": (np.array([False] * 5 + [True]), T([False] * 5 + [True])),
}


@pytest.mark.parametrize("case", FORMS, ids=list(FORMS))
def test_plan_reads_what_torch_reads(case):
    index, torch_index = FORMS[case]
    plan = plan_rows(index, SIZE)
    want = X[torch_index]
    assert torch.equal(X[plan.index], want)
    assert plan.target_shape(X.shape) == want.shape
    assert plan.size == SIZE


@pytest.mark.parametrize("case", FORMS, ids=list(FORMS))
def test_rows_are_sorted_unique_and_inverse_gives_the_order(case):
    index, torch_index = FORMS[case]
    plan = plan_rows(index, SIZE)
    rows = plan.rows
    assert rows.dtype == torch.int64
    assert rows.ndim == 1
    assert torch.equal(rows, torch.unique(rows)), "rows must be sorted and unique"
    assert bool((rows >= 0).all())
    assert bool((rows < SIZE).all())
    read = X[rows]  # what a backend reads: each distinct row once, in storage order
    if plan.kind == "rows":
        got = read if plan.inverse is None else read[plan.inverse]
        assert torch.equal(got, X[torch_index])  # order, repeats and shape reproduced
        assert plan.count == len(rows)
    else:  # an int or a slice: the rows are the ones it covers
        assert torch.equal(rows, torch.arange(SIZE)[torch_index].reshape(-1))


def test_kinds():
    assert plan_rows(-2, 5).kind == "int"
    assert plan_rows(-2, 5).index == 3
    assert plan_rows(slice(None), 5).kind == "slice"
    assert plan_rows([1, 2], 5).kind == "rows"
    assert plan_rows(T([True, False]), 2).kind == "rows"
    assert plan_rows(T(1), 5).kind == "int"


def test_sorted_unique_request_has_no_inverse():
    plan = plan_rows([0, 3, 4], SIZE)
    assert plan.inverse is None
    assert plan.last_positions() is None
    assert plan.rows.tolist() == [0, 3, 4]


def test_inverse_of_repeats_and_order():
    plan = plan_rows([4, 1, 4, -2], SIZE)  # -2 is row 4 too
    assert plan.rows.tolist() == [1, 4]
    assert plan.inverse.tolist() == [1, 0, 1, 1]
    assert plan.shape == torch.Size([4])


def test_inverse_keeps_the_index_shape():
    plan = plan_rows(T([[3, 1], [1, 1]]), SIZE)
    assert plan.rows.tolist() == [1, 3]
    assert plan.inverse.tolist() == [[1, 0], [0, 0]]
    assert plan.shape == torch.Size([2, 2])


def test_slice_is_normalised():
    assert plan_rows(slice(-2, None), 5).index == slice(3, 5, 1)
    assert plan_rows(slice(None, None, 2), 5).index == slice(0, 6, 2)
    assert plan_rows(slice(1, 100, 3), 5).index == slice(1, 7, 3)
    assert plan_rows(slice(4, 1), 5).index == slice(4, 4, 1)  # empty: start == stop
    assert plan_rows(slice(1, 4), 5).count == 3


def test_last_positions_pick_the_last_repeat():
    plan = plan_rows([2, 0, 2, 5, 0], SIZE)
    assert plan.rows.tolist() == [0, 2, 5]
    assert plan.last_positions().tolist() == [4, 2, 3]
    # writing values in request order at the unique rows, last repeat winning, is a sequential write
    values = torch.tensor([10, 20, 30, 40, 50])
    out = torch.zeros(SIZE, dtype=torch.int64)
    out[plan.rows] = values[plan.last_positions()]
    expected = torch.zeros(SIZE, dtype=torch.int64)
    for row, value in zip([2, 0, 2, 5, 0], values.tolist(), strict=True):
        expected[row] = value
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    ("index", "bad"),
    [(6, 6), (-7, -7), ([0, 6], 6), ([-7, 1], -7), (T([2, 9]), 9), (np.int64(10), 10), (T(-8), -8)],
    ids=["int", "neg_int", "list", "list_neg", "tensor", "np_int", "zero_d"],
)
def test_out_of_bounds_is_an_index_error_naming_the_row(index, bad):
    with pytest.raises(IndexError, match=rf"index {bad} is out of bounds for dimension 0 with size 6"):
        plan_rows(index, SIZE)
    with pytest.raises(IndexError):  # torch agrees that it is out of bounds
        X[torch.as_tensor(index) if isinstance(index, list) else index]


@pytest.mark.parametrize(
    "mask",
    [torch.ones(5, dtype=torch.bool), torch.ones(7, dtype=torch.bool), torch.ones(6, 2, dtype=torch.bool)],
    ids=["short", "long", "2d"],
)
def test_mask_of_the_wrong_shape_is_an_index_error(mask):
    with pytest.raises(IndexError, match="a row mask must be 1-d with one entry per row"):
        plan_rows(mask, SIZE)


def test_bad_index_types():
    with pytest.raises(IndexError, match="must be integers or bools"):
        plan_rows(T([0.0, 1.0]), SIZE)
    with pytest.raises(IndexError, match="is not a row index"):
        plan_rows(True, SIZE)
    with pytest.raises(IndexError, match="unsupported row index type"):
        plan_rows("a", SIZE)
    with pytest.raises(IndexError, match="invalid row index"):
        plan_rows([[0, 1], [2]], SIZE)
    with pytest.raises(ValueError, match="step must be greater than zero"):
        plan_rows(slice(None, None, -1), SIZE)


def test_repr():
    assert repr(plan_rows([3, 1], 5)) == "RowPlan(rows=[1, 3], inverse=[1, 0])"
    assert repr(plan_rows(2, 5)) == "RowPlan(int=2, size=5)"


def test_check_fits():
    check_fits(("a",), torch.Size([4]), torch.Size([2, 4]))  # broadcasts
    with pytest.raises(
        RuntimeError,
        match=r"cannot write a value of shape \[3\] into \('n', 'x'\) at an index "
        r"selecting shape \[2, 4\]",
    ):
        check_fits(("n", "x"), torch.Size([3]), torch.Size([2, 4]))


# id -> a batch index (what a user writes) on a batch [6, 4] tensor
SPLITS = {
    "int": 2,
    "int_int": (2, 3),
    "int_slice": (1, slice(1, 3)),
    "int_tensor": (1, T([3, 0])),
    "slice": slice(1, 5, 2),
    "slice_int": (slice(1, 4), 2),
    "slice_tensor": (slice(None, 3), T([0, 0, 3])),
    "slice_full_rest": (slice(2, 4), slice(None)),
    "tensor": T([5, 1, 5]),
    "tensor_full_rest": (T([5, 1, 5]), slice(None)),
    "tensor_2d": T([[1, 0], [0, 4]]),
    "mask": T([True, False, False, True, True, False]),
    "list": [3, 3, 0],
    "two_tensors": (T([0, 2]), T([1, 3])),
    "tensor_then_int": (T([4, 1]), 2),
    "mask_2d": torch.arange(24).reshape(6, 4) % 3 == 0,
    "ellipsis": (..., 1),
    "none": (None, 2),
    "neg_int": -1,
}


@pytest.mark.parametrize("case", SPLITS, ids=list(SPLITS))
def test_split_index_reads_rows_then_the_rest(case):
    """Reading the planned rows then applying the rest gives exactly ``x[index]``."""
    x = torch.arange(6 * 4 * 2).reshape(6, 4, 2)
    td = TensorDict({"x": x}, batch_size=[6, 4])
    index = SPLITS[case]
    idx, _, _ = normalize(td, index)
    plan, rest = split_index(idx, td.batch_size)
    rows = x[plan.rows]
    read = (
        rows[plan.inverse]
        if plan.kind == "rows" and plan.inverse is not None
        else (x[plan.index] if plan.kind != "rows" else rows)
    )
    got = read if rest is None else read[rest]
    assert torch.equal(got, x[idx])  # idx: the index on the batch dims (Ellipsis expanded over them)


def test_split_index_reads_few_rows_when_it_can():
    bs = torch.Size([6, 4])
    assert split_index((2, slice(1, 3)), bs)[0].count == 1
    assert split_index((slice(1, 3),), bs)[0].count == 2
    assert split_index((T([5, 5, 1]),), bs)[0].rows.tolist() == [1, 5]
    plan, rest = split_index((T([0, 2]), T([1, 3])), bs)  # two index tensors broadcast: read every row
    assert plan.count == 6
    assert rest is not None
    plan, rest = split_index((), bs)
    assert plan.count == 6
    assert rest is None


def test_plan_class_is_exported_for_backends():
    plan = plan_rows([1], 3)
    assert isinstance(plan, RowPlan)
    assert plan.target_shape(torch.Size([3, 7])) == torch.Size([1, 7])
