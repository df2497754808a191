"""Differential tests, shapes and indexing: getitem/setitem, masks, shape ops, torch.* functions."""

from __future__ import annotations

import pytest
import torch

from ._diff import case, other_td

pytestmark = pytest.mark.differential

B2 = (4, 5)
B3 = (3, 4, 5)

# --------------------------------------------------------------------------------------------------
# __getitem__ on batch dims
# --------------------------------------------------------------------------------------------------
INDEX_2D = {
    "int": 1,
    "neg_int": -1,
    "slice": slice(1, 3),
    "slice_step": slice(None, None, 2),
    "slice_neg_step_start": slice(-3, None, 2),
    "slice_empty": slice(3, 1),
    "none": None,
    "ellipsis": Ellipsis,
    "ellipsis_int": (Ellipsis, 0),
    "int_slice": (0, slice(1, 4)),
    "slice_negint": (slice(None), -2),
    "none_int": (None, 0),
    "int_none_slice": (0, None, slice(None, 2)),
    "bool_mask_dim0": torch.tensor([True, False, True, True]),
    "bool_mask_full": (torch.arange(20).reshape(4, 5) % 3 == 0),
    "bool_mask_dim1": (slice(None), torch.tensor([True, False, False, True, True])),
    "long_tensor": torch.tensor([0, 2]),
    "long_tensor_2d": torch.tensor([[0, 1], [3, 3]]),
    "long_tensor_repeat": torch.tensor([3, 3, 0]),
    "list": [0, 2],
    "list_pair": ([0, 1], [2, 4]),
    "tuple_of_ints": ((0, 2),),
    "tuple_pair": ((0, 2), (1, 3)),
    "tuple_slice": ((0, 3), slice(None, 2)),
    "slice_tensor": (slice(1, None), torch.tensor([0, 4])),
    "tensor_int": (torch.tensor([0, 3]), 1),
    "empty_tuple": (),
    "bool_scalar_true": True,
    "int_tensor_0d": torch.tensor(2),
}

INDEX_3D = {
    "int": 2,
    "int_int": (0, 1),
    "int_ellipsis_int": (0, Ellipsis, 1),
    "ellipsis_slice": (Ellipsis, slice(1, 3)),
    "none_mid": (slice(None), None, 0),
    "slice_none_slice_int": (slice(0, 2), None, slice(None), 0),
    "adv_nonadjacent": (torch.tensor([0, 2]), slice(None), torch.tensor([1, 4])),
    "adv_adjacent": (slice(None), torch.tensor([0, 3]), torch.tensor([1, 4])),
    "bool_mask_2d": (torch.arange(12).reshape(3, 4) % 2 == 0),
    "bool_mask_after_int": (1, torch.tensor([True, False, True, False])),
    "list_list": ([0, 2], [1, 3]),
    "steps": (slice(None, None, 2), slice(1, None, 2), slice(None, None, 3)),
}


@pytest.mark.parametrize("idx", list(INDEX_2D.values()), ids=list(INDEX_2D))
def test_getitem_2d(run_both, idx):
    run_both(lambda lib, td: td[idx], batch_size=B2)


@pytest.mark.parametrize("idx", list(INDEX_3D.values()), ids=list(INDEX_3D))
def test_getitem_3d(run_both, idx):
    run_both(lambda lib, td: td[idx], batch_size=B3)


BAD_INDEX = [
    case("out_of_range", lambda lib, td: td[4], raises=IndexError),
    case("neg_out_of_range", lambda lib, td: td[-5], raises=IndexError),
    case("second_dim_out_of_range", lambda lib, td: td[:, 5], raises=IndexError),
    case("too_many_indices", lambda lib, td: td[0, 0, 0], raises=IndexError),
    case("long_tensor_oob", lambda lib, td: td[torch.tensor([0, 9])], raises=IndexError),
    case("mask_wrong_shape", lambda lib, td: td[torch.tensor([True, False])], raises=IndexError),
    case("float_index", lambda lib, td: td[1.5], raises=IndexError),
    case("index_unbatched", lambda lib, td: lib.TensorDict({"a": torch.zeros(3)})[0], raises=RuntimeError),
    case("names_after_int", lambda lib, td: td[0].names, names=["x", "y"]),
    case("names_after_none", lambda lib, td: td[None].names, names=["x", "y"]),
    case("names_after_mask", lambda lib, td: td[torch.ones(4, 5, dtype=torch.bool)].names, names=["x", "y"]),
]

# index -> the names after td[index] on a [3, 4, 5] TensorDict named x, y, z
_T = torch.tensor
NAMED_INDEX = {
    "list_dim0": [0, 1],
    "tensor_dim1": (slice(None), _T([0, 1])),
    "mask_dim0": _T([True, False, True]),
    "mask_dim1": (slice(None), _T([True, False, True, True])),
    "mask_2d": torch.ones(3, 4, dtype=torch.bool),
    "tensor_2d": _T([[0, 1], [1, 2]]),
    "two_lists": ([0, 1], [1, 2]),
    "tensors_apart": (_T([0, 1]), slice(None), _T([1, 2])),
    "tensors_adjacent_last": (slice(None), _T([0, 1]), _T([1, 2])),
    "tensor_then_int": (_T([0, 1]), 0),
    "tensor_slice_int": (_T([0, 1]), slice(None), 0),
    "tensor_none_tensor": (_T([0, 1]), None, _T([1, 2])),
    "none_tensor": (None, _T([0, 1])),
    "bool_true": True,
    "ellipsis_tensor": (Ellipsis, _T([0, 1])),
    "many_rows": _T([0, 1, 2] * 100),  # the index_select path
}


@pytest.mark.parametrize("idx", list(NAMED_INDEX.values()), ids=list(NAMED_INDEX))
def test_names_after_index(run_both, idx):
    run_both(lambda lib, td: (td[idx].batch_size, td[idx].names), batch_size=B3, names=["x", "y", "z"])


@pytest.mark.parametrize("op", ["unbind0", "unbind1", "split1", "chunk2"])
def test_names_after_split(run_both, op):
    ops = {
        "unbind0": lambda td: td.unbind(0),
        "unbind1": lambda td: td.unbind(1),
        "split1": lambda td: td.split(1, 1),
        "chunk2": lambda td: td.chunk(2, 2),
    }
    run_both(lambda lib, td: [part.names for part in ops[op](td)], batch_size=B3, names=["x", "y", "z"])


@pytest.mark.parametrize(("fn", "kw"), BAD_INDEX)
def test_getitem_edge(run_both, fn, kw):
    run_both(fn, **kw)


def _write_through(op):
    def fn(lib, td):
        op(td)
        return td

    return fn


VIEWS = [
    case("int_view_writes_through", _write_through(lambda td: td[0]["a"].zero_())),
    case("slice_view_writes_through", _write_through(lambda td: td[1:3].zero_())),
    case("subtd_of_index_set_", _write_through(lambda td: td[1].set_("b", torch.full((5,), 7.0)))),
    case("mask_copy_no_write", _write_through(lambda td: td[torch.tensor([True, False, True, False])].zero_())),
    case("long_copy_no_write", _write_through(lambda td: td[torch.tensor([0, 1])].zero_())),
    case("nested_of_index", _write_through(lambda td: td[2]["nested", "deep"].apply_(lambda x: x.fill_(3)))),
]


@pytest.mark.parametrize(("fn", "kw"), VIEWS)
def test_index_view_semantics(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# __setitem__ with an index
# --------------------------------------------------------------------------------------------------
def _setidx(idx, value):
    def fn(lib, td):
        td[idx] = value(lib, td)
        return td

    return fn


SETITEM = [
    case("int_td", _setidx(0, lambda lib, td: other_td(lib)[3])),
    case("slice_td", _setidx(slice(1, 3), lambda lib, td: other_td(lib)[:2])),
    case(
        "int_dict",
        _setidx(
            1,
            lambda lib, td: {
                "a": torch.ones(5, 3),
                "b": torch.ones(5),
                "nested": {"c": torch.ones(5, 2), "deep": {"d": torch.ones(5)}},
            },
        ),
    ),
    case("int_dict_partial", _setidx(1, lambda lib, td: {"a": torch.ones(5, 3)})),
    case("number", _setidx(slice(None, 2), lambda lib, td: 0.0)),
    case("number_int_index", _setidx((0, 1), lambda lib, td: -1)),
    case("tensor_broadcast", _setidx(0, lambda lib, td: torch.tensor(5.0))),
    case("mask_number", _setidx(torch.tensor([True, False, True, False]), lambda lib, td: 2.0)),
    case("mask_td", _setidx(torch.tensor([True, False, True, False]), lambda lib, td: other_td(lib)[:2])),
    case("long_td", _setidx(torch.tensor([3, 0]), lambda lib, td: other_td(lib)[:2])),
    case("tuple_slices", _setidx((slice(None), slice(1, 3)), lambda lib, td: other_td(lib)[:, :2])),
    case("ellipsis", _setidx(Ellipsis, lambda lib, td: other_td(lib))),
    case("td_missing_keys", _setidx(0, lambda lib, td: other_td(lib)[0].exclude("a"))),
    case("td_extra_keys", _setidx(0, lambda lib, td: other_td(lib)[0].set("zz", torch.ones(5)))),
    case("td_wrong_batch", _setidx(0, lambda lib, td: other_td(lib)[0, :3]), raises=RuntimeError),
    case("tensor_wrong_shape", _setidx(0, lambda lib, td: torch.ones(7)), raises=RuntimeError),
    case("index_out_of_range", _setidx(9, lambda lib, td: 0.0), raises=IndexError),
]


@pytest.mark.parametrize(("fn", "kw"), SETITEM)
def test_setitem_index(run_both, fn, kw):
    run_both(fn, **kw)


MASK = torch.arange(20).reshape(4, 5) % 4 == 1

AT = [
    case("get_at", lambda lib, td: td.get_at("a", 0)),
    case("get_at_nested_slice", lambda lib, td: td.get_at(("nested", "c"), slice(1, 3))),
    case("get_at_tuple_idx", lambda lib, td: td.get_at("b", (slice(None), 2))),
    case("get_at_missing", lambda lib, td: td.get_at("zz", 0)),
    case("get_at_default", lambda lib, td: td.get_at("zz", 0, default=None)),
    case("set_at_", lambda lib, td: td.set_at_("a", torch.ones(5, 3), 0)),
    case("set_at_nested_mask", lambda lib, td: td.set_at_(("nested", "c"), 0.5, MASK)),
    case("set_at_missing", lambda lib, td: td.set_at_("zz", torch.ones(5), 0), raises=KeyError),
    case(
        "update_at_",
        lambda lib, td: td.update_at_({"a": torch.ones(5, 3), ("nested", "c"): torch.zeros(5, 2)}, 1),
    ),
    case("update_at_td", lambda lib, td: td.update_at_(other_td(lib)[:2], slice(2, 4))),
    case("update_at_missing", lambda lib, td: td.update_at_({"zz": torch.ones(5)}, 0), raises=KeyError),
    case("masked_fill", lambda lib, td: td.masked_fill(MASK, 0.0)),
    case("masked_fill_", lambda lib, td: td.masked_fill_(MASK, -1.0)),
    case("masked_fill_dim0", lambda lib, td: td.masked_fill(torch.tensor([True, False, False, True]), 2.0)),
    case("masked_fill_bool_data", lambda lib, td: td.masked_fill(MASK, True), data="bool"),
    case("masked_select", lambda lib, td: td.masked_select(MASK)),
    case("masked_select_dim0", lambda lib, td: td.masked_select(torch.tensor([True, False, True, True]))),
    case("masked_select_bad", lambda lib, td: td.masked_select(torch.ones(3, dtype=torch.bool)), raises=IndexError),
    case("where_td", lambda lib, td: td.where(MASK, other_td(lib))),
    case("where_number", lambda lib, td: td.where(MASK, 0.0)),
    case("where_tensor", lambda lib, td: td.where(MASK, torch.tensor(-1.0))),
    case("torch_where_td_td", lambda lib, td: torch.where(MASK, td, other_td(lib))),
    case("torch_where_td_number", lambda lib, td: torch.where(MASK, td, 0.0)),
    case("torch_where_number_td", lambda lib, td: torch.where(MASK, 1.0, td)),
    case("where_bad_cond", lambda lib, td: td.where(torch.ones(3, 3, dtype=torch.bool), 0.0), raises=RuntimeError),
    case("iter_dim0", lambda lib, td: list(td)),
    case("iter_len", lambda lib, td: [x.batch_size for x in td]),
    case("iter_unbatched", lambda lib, td: list(lib.TensorDict({"a": torch.zeros(3)})), raises=TypeError),
]


@pytest.mark.parametrize(("fn", "kw"), AT)
def test_at_mask_where_iter(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Shape ops
# --------------------------------------------------------------------------------------------------
SHAPE = [
    case("view_flat", lambda lib, td: td.view(-1)),
    case("view_20", lambda lib, td: td.view(20)),
    case("view_2_10", lambda lib, td: td.view(2, 10)),
    case("view_size", lambda lib, td: td.view(torch.Size([10, 2]))),
    case("view_bad", lambda lib, td: td.view(7), raises=RuntimeError),
    case("view_shares", lambda lib, td: td.view(-1)["a"].data_ptr() == td["a"].data_ptr()),
    case("reshape", lambda lib, td: td.reshape(-1)),
    case("reshape_tuple", lambda lib, td: td.reshape((5, 4))),
    case("reshape_args", lambda lib, td: td.reshape(2, -1)),
    case("reshape_bad", lambda lib, td: td.reshape(3, -1), raises=RuntimeError),
    case("permute", lambda lib, td: td.permute(1, 0)),
    case("permute_list", lambda lib, td: td.permute([1, 0])),
    case("permute_neg", lambda lib, td: td.permute(-1, 0)),
    case("permute_3d", lambda lib, td: td.permute(2, 0, 1), batch_size=B3),
    case("permute_names", lambda lib, td: td.permute(1, 0).names, names=["x", "y"]),
    case("permute_bad", lambda lib, td: td.permute(0, 0), raises=ValueError),
    case("permute_wrong_len", lambda lib, td: td.permute(0)),
    case("transpose", lambda lib, td: td.transpose(0, 1)),
    case("transpose_neg", lambda lib, td: td.transpose(-1, -3), batch_size=B3),
    case("transpose_same", lambda lib, td: td.transpose(1, 1)),
    case("transpose_oob", lambda lib, td: td.transpose(0, 2), raises=ValueError),
    case("unsqueeze0", lambda lib, td: td.unsqueeze(0)),
    case("unsqueeze_neg", lambda lib, td: td.unsqueeze(-1)),
    case("unsqueeze_end", lambda lib, td: td.unsqueeze(2)),
    case("unsqueeze_names", lambda lib, td: td.unsqueeze(1).names, names=["x", "y"]),
    case("unsqueeze_oob", lambda lib, td: td.unsqueeze(4), raises=RuntimeError),
    case("squeeze_all", lambda lib, td: td.unsqueeze(0).unsqueeze(-1).squeeze()),
    case("squeeze_dim", lambda lib, td: td.unsqueeze(1).squeeze(1)),
    case("squeeze_dim_neg", lambda lib, td: td.unsqueeze(-1).squeeze(-1)),
    case("squeeze_non_one", lambda lib, td: td.squeeze(0)),
    case("squeeze_nothing", lambda lib, td: td.squeeze()),
    case("flatten", lambda lib, td: td.flatten()),
    case("flatten_01", lambda lib, td: td.flatten(0, 1), batch_size=B3),
    case("flatten_12", lambda lib, td: td.flatten(1, 2), batch_size=B3),
    case("flatten_neg", lambda lib, td: td.flatten(-2, -1), batch_size=B3),
    case("unflatten", lambda lib, td: td.unflatten(0, (2, 2))),
    case("unflatten_neg", lambda lib, td: td.unflatten(-1, (5, 1))),
    case("unflatten_bad", lambda lib, td: td.unflatten(0, (3, 2)), raises=RuntimeError),
    case("expand_new_dim", lambda lib, td: td.expand(2, 4, 5)),
    case("expand_size", lambda lib, td: td.expand(torch.Size([3, 4, 5]))),
    case("expand_singleton", lambda lib, td: td[:, :1].expand(4, 5)),
    case("expand_tuple", lambda lib, td: td.expand((2, 4, 5))),
    case("expand_bad", lambda lib, td: td.expand(3, 5), raises=RuntimeError),
    case("expand_as_tensor", lambda lib, td: td.expand_as(torch.zeros(2, 4, 5))),
    case("expand_as_td", lambda lib, td: td[:1].expand_as(td)),
    case("unbind0", lambda lib, td: td.unbind(0)),
    case("unbind1", lambda lib, td: td.unbind(1)),
    case("unbind_neg", lambda lib, td: td.unbind(-1)),
    case("unbind_oob", lambda lib, td: td.unbind(2), raises=IndexError),
    case("split_int", lambda lib, td: td.split(3)),
    case("split_list", lambda lib, td: td.split([1, 3])),
    case("split_dim1", lambda lib, td: td.split(2, dim=1)),
    case("split_bad_list", lambda lib, td: td.split([1, 1]), raises=RuntimeError),
    case("chunk", lambda lib, td: td.chunk(2)),
    case("chunk_uneven", lambda lib, td: td.chunk(3, dim=1)),
    case("repeat", lambda lib, td: td.repeat(2, 1)),
    case("repeat_3", lambda lib, td: td.repeat(1, 2, 3), raises=ValueError),
    case("repeat_interleave", lambda lib, td: td.repeat_interleave(2, dim=0)),
    case("repeat_interleave_tensor", lambda lib, td: td.repeat_interleave(torch.tensor([1, 0, 2, 1, 1]), dim=1)),
    case("gather", lambda lib, td: td.gather(1, torch.tensor([[0, 4], [1, 1], [2, 0], [3, 3]]))),
    case("gather_dim0", lambda lib, td: td.gather(0, torch.tensor([[3, 2, 1, 0, 0]]))),
    case("shape_after_chain", lambda lib, td: td.permute(1, 0).reshape(-1).unsqueeze(0).batch_size),
]


@pytest.mark.parametrize(("fn", "kw"), SHAPE)
def test_shape_ops(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# torch.* functions and module-level stack / cat
# --------------------------------------------------------------------------------------------------
TORCH = [
    case("torch_stack0", lambda lib, td: torch.stack([td, other_td(lib)], 0)),
    case("torch_stack1", lambda lib, td: torch.stack([td, other_td(lib), td], dim=1)),
    case("torch_stack_neg", lambda lib, td: torch.stack([td, other_td(lib)], -1)),
    case("torch_stack_mismatch_batch", lambda lib, td: torch.stack([td, td[:2]], 0), raises=RuntimeError),
    case("torch_stack_mismatch_keys", lambda lib, td: torch.stack([td, td.exclude("a")], 0), raises=RuntimeError),
    case("torch_stack_empty_list", lambda lib, td: torch.stack([], 0), raises=RuntimeError),
    case("torch_cat0", lambda lib, td: torch.cat([td, other_td(lib)], 0)),
    case("torch_cat1", lambda lib, td: torch.cat([td, td[:, :2]], dim=1)),
    case("torch_cat_mismatch", lambda lib, td: torch.cat([td, td[:, :2]], 0), raises=RuntimeError),
    case("torch_cat_mismatch_keys", lambda lib, td: torch.cat([td, td.exclude("b")], 0), raises=KeyError),
    case(
        "torch_cat_batch_dims_differ",
        lambda lib, td: torch.cat(
            [lib.TensorDict({"a": torch.ones(3, 2)}, [3]), lib.TensorDict({"a": torch.ones(3, 2)}, [3, 2])]
        ),
    ),
    case("torch_unbind", lambda lib, td: torch.unbind(td, 1)),
    case("torch_split", lambda lib, td: torch.split(td, 2)),
    case("torch_split_list_dim", lambda lib, td: torch.split(td, [2, 3], dim=1)),
    case("torch_chunk", lambda lib, td: torch.chunk(td, 2, 0)),
    case("torch_zeros_like", lambda lib, td: torch.zeros_like(td)),
    case("torch_ones_like", lambda lib, td: torch.ones_like(td)),
    case("torch_ones_like_dtype", lambda lib, td: torch.ones_like(td, dtype=torch.int64)),
    case(
        "torch_empty_like_shape",
        lambda lib, td: [(k, v.shape, v.dtype) for k, v in torch.empty_like(td).items(True, True)],
    ),
    case("torch_full_like", lambda lib, td: torch.full_like(td, 3.0)),
    case("torch_clone", lambda lib, td: torch.clone(td)),
    case("torch_unsqueeze", lambda lib, td: torch.unsqueeze(td, 0)),
    case("torch_squeeze", lambda lib, td: torch.squeeze(td[:1], 0)),
    case("torch_permute", lambda lib, td: torch.permute(td, (1, 0))),
    case("torch_flatten", lambda lib, td: torch.flatten(td)),
    case("torch_reshape", lambda lib, td: torch.reshape(td, (-1,))),
    case("torch_gather", lambda lib, td: torch.gather(td, 1, torch.zeros(4, 2, dtype=torch.long))),
    case("torch_masked_select", lambda lib, td: torch.masked_select(td, MASK)),
    case("torch_add", lambda lib, td: torch.add(td, other_td(lib))),
    case("torch_mul_scalar", lambda lib, td: torch.mul(td, 2.0)),
    case("torch_exp", lambda lib, td: torch.exp(td)),
    case("torch_sum", lambda lib, td: torch.sum(td)),
    case("torch_mean_dim", lambda lib, td: torch.mean(td, 0)),
    case("lib_stack", lambda lib, td: lib.stack([td, other_td(lib)], 0)),
    case("lib_stack_dim1", lambda lib, td: lib.stack([td, other_td(lib)], dim=1)),
    case("lib_stack_default_dim", lambda lib, td: lib.stack([td[0], td[1]])),
    case("lib_cat", lambda lib, td: lib.cat([td, other_td(lib)], 0)),
    case("lib_cat_dim1", lambda lib, td: lib.cat([td, td], dim=1)),
    case("lib_cat_default_dim", lambda lib, td: lib.cat([td, td[:1]])),
    case("lib_stack_out", lambda lib, td: _stack_out(lib, td)),
    case("stack_unbind_roundtrip", lambda lib, td: torch.stack(td.unbind(1), 1)),
    case("stack_names", lambda lib, td: torch.stack([td, td], 0).names, names=["x", "y"]),
    case("cat_locked_result", lambda lib, td: torch.cat([td.lock_(), td], 0)),
]


def _stack_out(lib, td):
    out = lib.TensorDict(
        {
            "a": torch.zeros(2, 4, 5, 3),
            "b": torch.zeros(2, 4, 5),
            "nested": {"c": torch.zeros(2, 4, 5, 2), "deep": {"d": torch.zeros(2, 4, 5)}},
        },
        batch_size=[2, 4, 5],
    )
    res = torch.stack([td, other_td(lib)], 0, out=out)
    return res is out, out


@pytest.mark.parametrize(("fn", "kw"), TORCH)
def test_torch_functions(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# shape operations that change nothing give the TensorDict itself (identity, as tensordict)
# --------------------------------------------------------------------------------------------------
NO_OPS = {
    "reshape_same": lambda t: t.reshape(4, 5),
    "reshape_infer": lambda t: t.reshape(-1, 5),
    "reshape_size": lambda t: t.reshape(torch.Size([4, 5])),
    "view_same": lambda t: t.view(4, 5),
    "squeeze_nothing": lambda t: t.squeeze(),
    "expand_same": lambda t: t.expand(4, 5),
    "index_ellipsis": lambda t: t[...],
    "to_same_device": lambda t: t.to("cpu"),
}


@pytest.mark.parametrize("name", list(NO_OPS))
def test_no_op_shape_ops_return_self(run_both, name):
    def fn(lib, td):
        for make in (lambda: td, lambda: lib.lazy_stack([td[0], td[1], td[2], td[3]])):
            t = make()
            yield NO_OPS[name](t) is t

    run_both(lambda lib, td: list(fn(lib, td)))
