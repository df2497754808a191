"""Differential tests, issue 16: the TensorDict methods and keyword arguments added to close the API gap.

Each case runs against tensordict 0.15.3 and tensorbatch on the same data and compares values, shapes,
dtypes, batch sizes, names, result types and error types (``_diff.run_both``); the input is compared
after the call too, which checks the in-place forms. Deliberate differences are listed in
``conftest.DIFFERENCES`` (ids ``[api16_...]``).
"""

from __future__ import annotations

import pytest
import torch

from ._diff import case, other_td

pytestmark = pytest.mark.differential

B2 = (4, 5)


def _lazy(lib, td):
    """A lazy stack (stack dim 0) of ``td``'s rows: the same content, as members."""
    return lib.LazyStackedTensorDict(*td.unbind(0), stack_dim=0)


# --------------------------------------------------------------------------------------------------
# tensor-like batch-dim maps (flip, roll, movedim, narrow, tile, tensor_split, rot90, pad, ...)
# --------------------------------------------------------------------------------------------------
SHAPE = [
    case("flip0", lambda lib, td: td.flip(0)),
    case("flip_tuple", lambda lib, td: td.flip((0, 1))),
    case("flip_list_neg", lambda lib, td: td.flip([-1])),
    case("flip_out_of_range", lambda lib, td: td.flip(2), raises=IndexError),
    case("fliplr", lambda lib, td: td.fliplr()),
    case("flipud", lambda lib, td: td.flipud()),
    case("fliplr_1d", lambda lib, td: td[0].fliplr(), raises=RuntimeError),
    case("flipud_0d", lambda lib, td: td[0, 0].flipud(), raises=RuntimeError),
    case("roll_flat", lambda lib, td: td.roll(3)),
    case("roll_dim", lambda lib, td: td.roll(1, 1)),
    case("roll_neg_dim", lambda lib, td: td.roll(-2, -1)),
    case("roll_tuple", lambda lib, td: td.roll((1, 2), (0, 1))),
    case("roll_out_of_range", lambda lib, td: td.roll(1, 2), raises=IndexError),
    case("movedim", lambda lib, td: td.movedim(0, 1)),
    case("movedim_tuple", lambda lib, td: td.movedim((0, 1), (1, 0))),
    case("movedim_3d", lambda lib, td: td.unsqueeze(-1).movedim(0, -1)),
    case("movedim_out_of_range", lambda lib, td: td.movedim(0, 2), raises=IndexError),
    case("moveaxis", lambda lib, td: td.moveaxis(-1, 0)),
    case("swapaxes", lambda lib, td: td.swapaxes(0, 1)),
    case("swapdims", lambda lib, td: td.swapdims(1, 0)),
    case("swapaxes_out_of_range", lambda lib, td: td.swapaxes(0, 2), raises=ValueError),
    case("narrow", lambda lib, td: td.narrow(1, 1, 3)),
    case("narrow_neg_dim", lambda lib, td: td.narrow(-2, 2, 2)),
    case("narrow_too_long", lambda lib, td: td.narrow(1, 2, 5), raises=RuntimeError),
    case("narrow_out_of_range", lambda lib, td: td.narrow(2, 0, 1), raises=IndexError),
    case("tile_short", lambda lib, td: td.tile((2,))),
    case("tile_full", lambda lib, td: td.tile((2, 3))),
    case("tile_long", lambda lib, td: td.tile((2, 1, 1))),
    case("tensor_split_sections", lambda lib, td: td.tensor_split(3, 1)),
    case("tensor_split_indices", lambda lib, td: td.tensor_split([1, 3], 0)),
    case("tensor_split_tensor", lambda lib, td: td.tensor_split(torch.tensor([2]), 1)),
    case("tensor_split_out_of_range", lambda lib, td: td.tensor_split(2, 2), raises=IndexError),
    case("rot90", lambda lib, td: td.rot90()),
    case("rot90_k2", lambda lib, td: td.rot90(2)),
    case("rot90_k3", lambda lib, td: td.rot90(3, (1, 0))),
    case("rot90_out_of_range", lambda lib, td: td.rot90(1, (0, 2)), raises=IndexError),
    case("broadcast_to", lambda lib, td: td.broadcast_to((3, 4, 5))),
    case("broadcast_to_bad", lambda lib, td: td.broadcast_to((4, 6)), raises=RuntimeError),
    case("atleast_1d", lambda lib, td: td[0, 0].atleast_1d()),
    case("atleast_2d", lambda lib, td: td[0].atleast_2d()),
    case("atleast_3d", lambda lib, td: td.atleast_3d()),
    case("atleast_noop", lambda lib, td: td.atleast_2d() is td),
    case("pad", lambda lib, td: td.pad([0, 1, 2, 0])),
    case("pad_first_dim", lambda lib, td: td.pad([1, 1], value=-1.0)),
    case("pad_inplace", lambda lib, td: td.pad([1, 0], inplace=True) is td),
    case("named_flip", lambda lib, td: td.flip(1), names=["x", "y"]),
    case("named_movedim", lambda lib, td: td.movedim(0, 1), names=["x", "y"]),
    case("named_narrow", lambda lib, td: td.narrow(0, 0, 2), names=["x", "y"]),
]


@pytest.mark.parametrize(("fn", "kw"), SHAPE)
def test_shape(run_both, fn, kw):
    run_both(fn, batch_size=B2, **kw)


TORCH = [
    case("torch_flip", lambda lib, td: torch.flip(td, (0,))),
    case("torch_flip_kw", lambda lib, td: torch.flip(td, dims=(1,))),
    case("torch_fliplr", lambda lib, td: torch.fliplr(td)),
    case("torch_flipud", lambda lib, td: torch.flipud(td)),
    case("torch_roll", lambda lib, td: torch.roll(td, 1, 0)),
    case("torch_movedim", lambda lib, td: torch.movedim(td, 0, 1)),
    case("torch_moveaxis", lambda lib, td: torch.moveaxis(td, 1, 0)),
    case("torch_swapaxes", lambda lib, td: torch.swapaxes(td, 0, 1)),
    case("torch_swapdims", lambda lib, td: torch.swapdims(td, 0, 1)),
    case("torch_narrow", lambda lib, td: torch.narrow(td, 0, 1, 2)),
    case("torch_tile", lambda lib, td: torch.tile(td, (2,))),
    case("torch_tensor_split", lambda lib, td: torch.tensor_split(td, 2, 1)),
    case("torch_rot90", lambda lib, td: torch.rot90(td)),
    case("torch_broadcast_to", lambda lib, td: torch.broadcast_to(td, (2, 4, 5))),
    case("torch_atleast_3d", lambda lib, td: torch.atleast_3d(td)),
    case("torch_rsub", lambda lib, td: torch.rsub(td, 2)),
]


@pytest.mark.parametrize(("fn", "kw"), TORCH)
def test_torch_function(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# reductions and scans: logsumexp, softmax, cummax/cummin, quantile
# --------------------------------------------------------------------------------------------------
REDUCE = [
    case("logsumexp", lambda lib, td: td.logsumexp()),
    case("logsumexp_dim", lambda lib, td: td.logsumexp(0)),
    case("logsumexp_tuple", lambda lib, td: td.logsumexp((0, 1))),
    case("logsumexp_keepdim", lambda lib, td: td.logsumexp(-1, keepdim=True)),
    case("logsumexp_all_keepdim", lambda lib, td: td.logsumexp(keepdim=True)),
    case("logsumexp_out_of_range", lambda lib, td: td.logsumexp(2), raises=ValueError),
    case("softmax", lambda lib, td: td.softmax(0)),
    case("softmax_neg", lambda lib, td: td.softmax(-1)),
    case("softmax_dtype", lambda lib, td: td.softmax(1, torch.float64)),
    case("softmax_int", lambda lib, td: td.softmax(0), data="int", raises=RuntimeError),
    case("softmax_out_of_range", lambda lib, td: td.softmax(2), raises=IndexError),
    case("cummax", lambda lib, td: td.cummax(0)),
    case("cummax_fields", lambda lib, td: (td.cummax(1).values, td.cummax(1).indices)),
    case("cummax_no_indices", lambda lib, td: td.cummax(1, return_indices=False)),
    case("cummin", lambda lib, td: td.cummin(-1)),
    case("cummin_out_of_range", lambda lib, td: td.cummin(2), raises=IndexError),
    case("cummax_reduce", lambda lib, td: td.select("b").cummax(1, reduce=True)),
    case("quantile_all", lambda lib, td: td.quantile(0.3)),
    case("quantile_dim", lambda lib, td: td.quantile(0.5, 0)),
    case("quantile_q_tensor", lambda lib, td: td.quantile(torch.tensor([0.2, 0.8]), 1)),
    case("quantile_q_tensor_all", lambda lib, td: td.quantile(torch.tensor([0.2, 0.8]))),
    case("quantile_keepdim", lambda lib, td: td.quantile(0.5, 1, keepdim=True)),
    case("quantile_lower", lambda lib, td: td.quantile(0.4, 0, interpolation="lower")),
    case("quantile_feature", lambda lib, td: td.quantile(0.5, "feature")),
    case("quantile_reduce", lambda lib, td: td.quantile(0.5, reduce=True)),
    case("quantile_reduce_dim", lambda lib, td: td.select("b").quantile(0.5, 1, reduce=True)),
    case("quantile_key_transform", lambda lib, td: td.quantile(0.5, key_transform=lambda k: k + "_q")),
    case("quantile_int", lambda lib, td: td.quantile(0.5, 0), data="int", raises=RuntimeError),
    case("quantile_out_of_range", lambda lib, td: td.quantile(0.5, 2), raises=IndexError),
]


@pytest.mark.parametrize(("fn", "kw"), REDUCE)
def test_reduce(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# pointwise table additions: mod, rsub, dtype casts, type
# --------------------------------------------------------------------------------------------------
CASTS = ["complex64", "complex128", "uint16", "uint32", "uint64"]
POINTWISE = [
    case("mod", lambda lib, td: td.mod(0.7)),
    case("mod_td", lambda lib, td: td.mod(other_td(lib, "float", 2.0).abs() + 0.5)),
    case("rsub", lambda lib, td: td.rsub(1.5)),
    case("rsub_alpha", lambda lib, td: td.rsub(2, alpha=3)),
    case("rsub_td", lambda lib, td: td.rsub(other_td(lib))),
    case("rsub_int", lambda lib, td: td.rsub(10), data="int"),
    *(case(name, lambda lib, td, name=name: getattr(td, name)(), data="mixed") for name in CASTS),
    case("complex32", lambda lib, td: td.complex32().apply(lambda x: x.to(torch.complex64))),
    case("cast_filter", lambda lib, td: td.double(cast_filter=lambda key, x: key[0] == "nested")),
    case("type", lambda lib, td: td.type(torch.float64)),
    case("type_filter", lambda lib, td: td.type(torch.int64, cast_filter=lambda key, x: key == ("a",))),
]


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize(("fn", "kw"), POINTWISE)
def test_pointwise(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# keys and structure: rename_keys, separates, create_nested, filter_empty_, cat/stack tensors
# --------------------------------------------------------------------------------------------------
KEYS = [
    case("rename_keys", lambda lib, td: td.rename_keys({"a": "x", ("nested", "c"): ("n2", "c")})),
    case("rename_keys_swap", lambda lib, td: td.rename_keys({"a": "b", "b": "a"})),
    case("rename_keys_taken", lambda lib, td: td.rename_keys({"a": "b"}), raises=ValueError),
    case("rename_keys_missing", lambda lib, td: td.rename_keys({"zz": "x"}), raises=KeyError),
    case("rename_keys_missing_lax", lambda lib, td: td.rename_keys({"zz": "x"}, strict=False)),
    case("separates", lambda lib, td: td.separates("a", ("nested", "deep", "d"))),
    case("separates_keep_empty", lambda lib, td: td.separates(("nested", "deep", "d"), filter_empty=False)),
    case("separates_missing", lambda lib, td: td.separates("zz"), raises=KeyError),
    case("separates_missing_default", lambda lib, td: td.separates("zz", default=torch.zeros(4, 5))),
    case("api16_separates_missing_none", lambda lib, td: td.separates("a", "zz", default=None)),
    case("api16_separates_missing_lax", lambda lib, td: td.separates("zz", strict=False)),
    case("separates_missing_lax_input", lambda lib, td: (td.separates("a", "zz", strict=False), td)[1]),
    case("create_nested", lambda lib, td: td.create_nested(("x", "y")) is td),
    case("create_nested_replaces", lambda lib, td: td.create_nested("a")),
    case("filter_empty_", lambda lib, td: td.create_nested(("x", "y")).filter_empty_()),
    case("cat_tensors", lambda lib, td: td.cat_tensors("a", ("nested", "c"), out_key="z", dim=-1)),
    case(
        "cat_tensors_batch_dim",
        lambda lib, td: td.cat_tensors("b", ("nested", "deep", "d"), out_key="z", dim=1),
        raises=RuntimeError,
    ),
    case(
        "cat_tensors_keep",
        lambda lib, td: td.cat_tensors("a", ("nested", "c"), out_key=("n", "z"), dim=-1, keep_entries=True),
    ),
    case("cat_tensors_mismatch", lambda lib, td: td.cat_tensors("a", "b", out_key="z"), raises=RuntimeError),
    case(
        "cat_tensors_bad_batch",
        lambda lib, td: td.cat_tensors("a", ("nested", "c"), out_key="z", dim=0, keep_entries=True),
        raises=RuntimeError,
    ),
    case("stack_tensors", lambda lib, td: td.stack_tensors("b", ("nested", "deep", "d"), out_key="z", dim=-1)),
    case("stack_tensors_keep", lambda lib, td: td.stack_tensors("b", "b", out_key="z", dim=2, keep_entries=True)),
    case("cat_from_tensordict", lambda lib, td: td.exclude("a", ("nested", "c")).cat_from_tensordict(1)),
    case(
        "cat_from_tensordict_sorted",
        lambda lib, td: td.select("a", ("nested", "c")).cat_from_tensordict(-1, sorted=[("nested", "c"), "a"]),
    ),
    case("cat_from_tensordict_bad", lambda lib, td: td.cat_from_tensordict(-1), raises=RuntimeError),
    case("stack_from_tensordict", lambda lib, td: td.exclude("a", ("nested", "c")).stack_from_tensordict(2)),
    case(
        "stack_from_tensordict_sorted",
        lambda lib, td: td.exclude("a", ("nested", "c")).stack_from_tensordict(sorted=True),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), KEYS)
def test_keys(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# leaf facts and conversions
# --------------------------------------------------------------------------------------------------
FACTS = [
    case("bytes", lambda lib, td: td.bytes()),
    case("bytes_duplicates", lambda lib, td: td.set("z", td["a"]).bytes(count_duplicates=False)),
    case("param_count", lambda lib, td: td.param_count()),
    case("param_count_duplicates", lambda lib, td: td.set("z", td["b"]).param_count(count_duplicates=False)),
    case("data_ptr_keys", lambda lib, td: sorted(td.data_ptr().keys(True, True), key=str)),
    case("data_ptr_values", lambda lib, td: td.data_ptr()["a"] == td["a"].data_ptr()),
    case("data_ptr_storage", lambda lib, td: td[1:].data_ptr(storage=True)["a"] == td["a"].data_ptr()),
    case("is_floating_point", lambda lib, td: (td.is_floating_point(), td.int().is_floating_point())),
    case("is_floating_point_empty", lambda lib, td: td.empty().is_floating_point()),
    case("is_cpu", lambda lib, td: (td.is_cpu, td.is_cuda, td.is_meta)),
    case("is_cpu_device", lambda lib, td: (td.is_cpu, td.is_cuda, td.is_meta), device="cpu"),
    case("numpy", lambda lib, td: {k: v.shape for k, v in td.numpy().items() if k != "nested"}),
    case("numpy_values", lambda lib, td: torch.as_tensor(td.numpy()["nested"]["c"])),
    case("as_tensor", lambda lib, td: td.as_tensor()),
    case("auto_device_", lambda lib, td: td.auto_device_().device),
    case("densify", lambda lib, td: td.densify() is td),
    case("to_lazystack", lambda lib, td: td.to_lazystack(1)),
    case("to_lazystack_stack_dim", lambda lib, td: td.to_lazystack(-1).stack_dim),
    case("to_lazystack_out_of_range", lambda lib, td: td.to_lazystack(2), raises=IndexError),
    case("backward", lambda lib, td: _grad_after_backward(td)),
]


def _grad_after_backward(td):
    x = torch.ones(4, 5, requires_grad=True)
    y = td.apply(lambda leaf: leaf * x.reshape(*x.shape, *([1] * (leaf.ndim - 2))))
    y.sum(dim=(0, 1)).apply(lambda leaf: leaf.sum()).backward()
    return x.grad


@pytest.mark.parametrize(("fn", "kw"), FACTS)
def test_facts(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# stacking constructors
# --------------------------------------------------------------------------------------------------
ROWS = [{"a": torch.arange(3.0) + i, "n": {"b": torch.tensor(i)}} for i in range(2)]
STACKING = [
    case("from_list", lambda lib, _: lib.TensorDict.from_list(ROWS)),
    case("from_list_auto", lambda lib, _: lib.TensorDict.from_list(ROWS, auto_batch_size=True)),
    case("from_list_batch_dims", lambda lib, _: lib.TensorDict.from_list([{"a": torch.zeros(3, 2)}] * 2, batch_dims=2)),
    case("from_list_batch_size", lambda lib, _: lib.TensorDict.from_list(ROWS, batch_size=[2])),
    case("from_list_names", lambda lib, _: lib.TensorDict.from_list(ROWS, names=["i"])),
    case("from_list_lazy", lambda lib, _: lib.TensorDict.from_list(ROWS, lazy=True)),
    case("from_list_lazy_class", lambda lib, _: lib.LazyStackedTensorDict.from_list(ROWS)),
    case("from_list_numbers", lambda lib, _: lib.TensorDict.from_list([{"a": 1}, {"a": 2}])),
    case("lazy_stack", lambda lib, td: lib.LazyStackedTensorDict.lazy_stack([td, td.clone()])),
    case("lazy_stack_dim", lambda lib, td: lib.LazyStackedTensorDict.lazy_stack([td, td.clone()], 1).stack_dim),
    case(
        "lazy_stack_name", lambda lib, td: lib.LazyStackedTensorDict.lazy_stack([td, td], 2, stack_dim_name="s").names
    ),
    case(
        "lazy_stack_strict",
        lambda lib, td: lib.LazyStackedTensorDict.lazy_stack([td, td[:, :2]], strict_shape=True),
        raises=RuntimeError,
    ),
    case("lazy_stack_tensors", lambda lib, _: lib.LazyStackedTensorDict.lazy_stack([torch.zeros(2), torch.ones(2)])),
    case("lazy_stack_on_td", lambda lib, td: lib.TensorDict.lazy_stack([td, td])),
    case("maybe_dense_same", lambda lib, td: lib.TensorDict.maybe_dense_stack([td, td.clone()])),
    case("maybe_dense_differ", lambda lib, td: lib.LazyStackedTensorDict.maybe_dense_stack([td, td.exclude("a")])),
    case("to_lazystack_of_lazy", lambda lib, td: (lambda s: s.to_lazystack(0) is s)(_lazy(lib, td))),
]


@pytest.mark.parametrize(("fn", "kw"), STACKING)
def test_stacking(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# lazy stacks: which op returns what (member-wise where tensordict is, dense otherwise)
# --------------------------------------------------------------------------------------------------
LAZY = [
    case("api16_lz_flip", lambda lib, td: _lazy(lib, td).flip(1)),
    case("api16_lz_roll", lambda lib, td: _lazy(lib, td).roll(1, 0)),
    case("api16_lz_narrow", lambda lib, td: _lazy(lib, td).narrow(1, 0, 2)),
    case("api16_lz_tile", lambda lib, td: _lazy(lib, td).tile((1, 2))),
    case("api16_lz_pad", lambda lib, td: _lazy(lib, td).pad([0, 1])),
    case("api16_lz_rot90", lambda lib, td: _lazy(lib, td).rot90()),
    case("api16_lz_broadcast_to", lambda lib, td: _lazy(lib, td).broadcast_to((2, 4, 5))),
    case("api16_lz_softmax", lambda lib, td: _lazy(lib, td).softmax(1)),
    case("api16_lz_softmax_stack_dim", lambda lib, td: _lazy(lib, td).softmax(0)),
    case("api16_lz_logsumexp", lambda lib, td: _lazy(lib, td).logsumexp(0)),
    case("api16_lz_cummax", lambda lib, td: _lazy(lib, td).cummax(1)),
    case("api16_lz_quantile", lambda lib, td: _lazy(lib, td).quantile(0.5, 0)),
    case("api16_lz_mod", lambda lib, td: _lazy(lib, td).mod(0.5)),
    case("api16_lz_cast", lambda lib, td: _lazy(lib, td).complex64()),
    case("api16_lz_type", lambda lib, td: _lazy(lib, td).type(torch.float64)),
    case("api16_lz_as_tensor", lambda lib, td: _lazy(lib, td).as_tensor()),
    case("api16_lz_rename_keys", lambda lib, td: _lazy(lib, td).rename_keys({"a": "x"})),
    case("api16_lz_separates", lambda lib, td: (lambda s: (s.separates("a"), s))(_lazy(lib, td))),
    case("api16_lz_densify", lambda lib, td: _lazy(lib, td).densify()),
    case("api16_lz_to_lazystack", lambda lib, td: _lazy(lib, td).to_lazystack(1)),
    case("api16_lz_data_ptr", lambda lib, td: sorted(_lazy(lib, td).data_ptr().keys(True, True), key=str)),
    case("api16_lz_bytes", lambda lib, td: (_lazy(lib, td).bytes(), _lazy(lib, td).param_count())),
    case("api16_lz_numpy", lambda lib, td: torch.as_tensor(_lazy(lib, td).numpy()["a"])),
    case("api16_lz_roll_inplace", lambda lib, td: (lambda s: (s.roll(1, 1, inplace=True) is s, s))(_lazy(lib, td))),
    case("api16_lz_reshape_inplace", lambda lib, td: _lazy(lib, td).reshape(-1, inplace=True), raises=RuntimeError),
    # shape ops that tensordict answers with a lazy stack: a lazy stack here too
    case("api16_lz_movedim", lambda lib, td: _lazy(lib, td).movedim(0, 1)),
    case("api16_lz_swapaxes", lambda lib, td: _lazy(lib, td).swapaxes(0, 1)),
    case("api16_lz_tensor_split", lambda lib, td: _lazy(lib, td).tensor_split(2, 1)),
    case("api16_lz_atleast_3d", lambda lib, td: _lazy(lib, td).atleast_3d()),
    case("api16_lz_moveaxis_sd_last", lambda lib, td: _lazy(lib, td).moveaxis(0, -1)),
    case("api16_lz_swapdims", lambda lib, td: _lazy(lib, td).swapdims(1, 0)),
    case("api16_lz_tensor_split_stack_dim", lambda lib, td: _lazy(lib, td).tensor_split([1, 3], 0)),
    case("api16_lz_atleast_1d", lambda lib, td: _lazy(lib, td).atleast_1d()),
    case("api16_lz_movedim_values", lambda lib, td: _lazy(lib, td).movedim(0, 1).to_tensordict()),
    case(
        "api16_lz_tensor_split_values",
        lambda lib, td: tuple(t.to_tensordict() for t in _lazy(lib, td).tensor_split(2, 1)),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), LAZY)
def test_lazy(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# item 2: inplace=, to(non_blocking_pin=, num_threads=), copy_at_(fast=), tolist(convert_nodes=)
# --------------------------------------------------------------------------------------------------
INDEX = torch.tensor([[0, 1], [2, 2], [4, 0], [1, 3]])


def _in_place(call):
    """``call(td)`` with ``inplace=True``: the result is the input, and the nested node keeps its identity."""

    def fn(lib, td):
        nested = td["nested"]
        out = call(td)
        return out is td, td["nested"] is nested, td

    return fn


MASK = torch.tensor([[True, False, True, False, False]] * 2 + [[False] * 5] * 2)


def _numpy_dict(td):
    return td[0, :2].to_dict(convert_tensors="numpy")


def _cast_filter_keys(lib, td):
    """The keys ``to``'s cast_filter is called with (tuples of str), sorted."""
    seen = []
    td.to(torch.float64, cast_filter=lambda key, x: seen.append(key) is None)
    return sorted(seen)


INPLACE = [
    case("reshape", _in_place(lambda td: td.reshape(-1, inplace=True))),
    case("reshape_shape", _in_place(lambda td: td.reshape(2, 10, inplace=True))),
    case("flatten", _in_place(lambda td: td.flatten(inplace=True))),
    case("flatten_dims", _in_place(lambda td: td.flatten(0, 1, inplace=True))),
    case("unflatten", _in_place(lambda td: td.unflatten(1, (5, 1), inplace=True))),
    case("repeat", _in_place(lambda td: td.repeat(2, 1, inplace=True))),
    case("repeat_interleave", _in_place(lambda td: td.repeat_interleave(2, 1, inplace=True))),
    case("roll", _in_place(lambda td: td.roll(1, 0, inplace=True))),
    case("roll_flat", _in_place(lambda td: td.roll(2, inplace=True))),
    case("gather", _in_place(lambda td: td.gather(1, INDEX, inplace=True))),
    case("contiguous", _in_place(lambda td: td.contiguous(inplace=True))),
    case(
        "contiguous_permuted",
        lambda lib, td: (lambda p: (p.contiguous(inplace=True) is p, p.is_contiguous(), p))(td.permute(1, 0)),
    ),
    case("to_dtype", _in_place(lambda td: td.to(torch.float64, inplace=True))),
    case("to_device", _in_place(lambda td: td.to("cpu", inplace=True))),
    case("ip_locked_reshape", lambda lib, td: td.lock_().reshape(-1, inplace=True), raises=RuntimeError),
    case("ip_locked_roll", lambda lib, td: td.lock_().roll(1, inplace=True), raises=RuntimeError),
    case("ip_locked_to", lambda lib, td: td.lock_().to(torch.float64, inplace=True), raises=RuntimeError),
    case("ip_locked_gather", lambda lib, td: td.lock_().gather(1, INDEX, inplace=True), raises=RuntimeError),
    case("ip_locked_contiguous_noop", lambda lib, td: td.lock_().contiguous(inplace=True) is td),
    case("reshape_bad", lambda lib, td: td.reshape(7, inplace=True), raises=RuntimeError),
    case("to_pin_threads", lambda lib, td: td.to("cpu", non_blocking_pin=False, num_threads=2)),
    case("copy_at_fast", lambda lib, td: td.copy_at_(td[:2].clone().zero_(), slice(0, 2), fast=True)),
    case("copy_at_slow", lambda lib, td: td.copy_at_(td[1:2].clone().zero_(), slice(1, 2), fast=False)),
    case("tolist_nodes", lambda lib, td: [type(x).__name__ for x in td.tolist(convert_nodes=False)[0]]),
    case("tolist_nodes_values", lambda lib, td: td.tolist(convert_nodes=False)[2][3]),
    case("tolist", lambda lib, td: td[0].tolist()[1]["nested"]["c"]),
    # tolist_first, convert_tensors="numpy", masked_select(inplace=), to(cast_filter=) (tensordict's docstrings)
    case("tolist_first", lambda lib, td: td[:2].tolist(tolist_first=True, convert_tensors=True)),
    case("to_dict_tolist_first", lambda lib, td: td[0].to_dict(tolist_first=True)),
    case("to_dict_tolist_first_0d", lambda lib, td: td[0, 0].to_dict(tolist_first=True, convert_tensors=True)),
    case("to_dict_numpy", lambda lib, td: (lambda a: (type(a).__name__, a.tolist()))(_numpy_dict(td)["a"])),
    case(
        "tolist_tensors_no_nodes",
        lambda lib, td: td.tolist(convert_nodes=False, convert_tensors=True),
        raises=TypeError,
    ),
    case("masked_select_inplace", _in_place(lambda td: td.masked_select(MASK, inplace=True))),
    case("ip_locked_masked_select", lambda lib, td: td.lock_().masked_select(MASK, inplace=True), raises=RuntimeError),
    case("to_cast_filter", lambda lib, td: td.to(torch.float16, cast_filter=lambda key, x: key[0] == "nested")),
    case("to_cast_filter_keys", _cast_filter_keys),
    case("to_cast_filter_no_dtype", lambda lib, td: td.to("cpu", cast_filter=lambda key, x: False)),
    case(
        "to_cast_filter_is_inexact",
        lambda lib, td: td.set("i", torch.ones(4, 5, dtype=torch.long)).to(torch.bfloat16, cast_filter=lib.is_inexact),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), INPLACE)
def test_inplace_and_kwargs(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# MemoryMappedTensor: shape=/device= and the *_like constructors
# --------------------------------------------------------------------------------------------------
def _plain(m):
    """A memory-mapped tensor compared by class name and values (the two libraries' classes differ)."""
    return type(m).__name__, m.as_subclass(torch.Tensor).clone()


MEMMAP = [
    case("zeros_shape_kw", lambda lib, _: _plain(lib.MemoryMappedTensor.zeros(shape=(2, 3), device="cpu"))),
    case("ones_device", lambda lib, _: _plain(lib.MemoryMappedTensor.ones(2, 3, dtype=torch.int64, device="cpu"))),
    case(
        "full_device",
        lambda lib, _: _plain(lib.MemoryMappedTensor.full(2, 3, fill_value=4.0, device=torch.device("cpu"))),
    ),
    case("empty_shape_kw", lambda lib, _: lib.MemoryMappedTensor.empty(shape=[4], dtype=torch.float64).shape),
    case("zeros_cuda", lambda lib, _: lib.MemoryMappedTensor.zeros(2, device="cuda"), raises=RuntimeError),
    case("zeros_like", lambda lib, _: _plain(lib.MemoryMappedTensor.zeros_like(torch.ones(2, 3)))),
    case("ones_like", lambda lib, _: _plain(lib.MemoryMappedTensor.ones_like(torch.ones(2, dtype=torch.int8)))),
    case("full_like", lambda lib, _: _plain(lib.MemoryMappedTensor.full_like(torch.ones(2, 3, dtype=torch.int32), 5))),
    case(
        "empty_like",
        lambda lib, _: (lambda m: (m.shape, m.dtype))(
            lib.MemoryMappedTensor.empty_like(torch.ones(3, dtype=torch.float16))
        ),
    ),
    case("like_type", lambda lib, _: type(lib.MemoryMappedTensor.zeros_like(torch.ones(2))).__name__),
    case(
        "from_storage_device",
        lambda lib, _: _plain(
            lib.MemoryMappedTensor.from_storage(
                torch.arange(6.0).untyped_storage(), shape=(2, 3), dtype=torch.float32, device="cpu"
            )
        ),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), MEMMAP)
def test_memmap(run_both, fn, kw):
    run_both(fn, data=None, **kw)


def test_memmap_like_to_file(ref, tb, tmp_path):
    for i, lib in enumerate((ref, tb)):
        path = tmp_path / f"{i}.mm"
        m = lib.MemoryMappedTensor.full_like(torch.zeros(2, 2), 3.0, filename=path)
        assert m.filename == str(path)
        assert path.stat().st_size == 16
        torch.testing.assert_close(
            lib.MemoryMappedTensor.from_filename(path, torch.float32, (2, 2)), torch.full((2, 2), 3.0)
        )
