"""Differential tests, ops: pointwise, arithmetic, operators, reductions, dtype/clone, apply."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch

from ._diff import case, other_td

pytestmark = pytest.mark.differential


# --------------------------------------------------------------------------------------------------
# Unary pointwise (out-of-place and in-place twins)
# --------------------------------------------------------------------------------------------------
UNARY = {
    "abs": "float",
    "exp": "float",
    "log": "pos",
    "sqrt": "pos",
    "sigmoid": "float",
    "neg": "float",
    "ceil": "float",
    "floor": "float",
    "round": "float",
    "sign": "float",
    "trunc": "float",
    "reciprocal": "pos",
    "sin": "float",
    "cos": "float",
    "tanh": "float",
    "frac": "float",
    "expm1": "float",
    "log1p": "unit",
    "erf": "float",
    "lgamma": "pos",
}


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(run_both, name, inplace):
    method = name + "_" if inplace else name
    run_both(lambda lib, td: getattr(td, method)(), data=UNARY[name])


def test_unary_on_int_leaves(run_both):
    # mixed dtypes: float ops on int/bool leaves follow torch's promotion rules (or raise)
    run_both(lambda lib, td: td.exclude("flag").exp(), data="mixed")


def test_unary_inplace_on_int_raises(run_both):
    run_both(lambda lib, td: td.sqrt_(), data="int", raises=RuntimeError)


# --------------------------------------------------------------------------------------------------
# Binary methods with TD / tensor / number operands
# --------------------------------------------------------------------------------------------------
OPERANDS = {
    "td": lambda lib: other_td(lib, "pos"),
    "tensor0d": lambda lib: torch.tensor(1.5),
    "tensor_batch": lambda lib: torch.linspace(0.5, 2.0, 5).expand(4, 5).clone(),
    "number": lambda lib: 1.5,
    "numpy_number": lambda lib: np.float32(1.5),
}

BINARY = ["add", "sub", "mul", "div", "pow", "clamp_min", "clamp_max", "maximum", "minimum"]


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("operand", sorted(OPERANDS))
@pytest.mark.parametrize("name", BINARY)
def test_binary(run_both, name, operand, inplace):
    method = name + "_" if inplace else name
    run_both(lambda lib, td: getattr(td, method)(OPERANDS[operand](lib)), data="pos")


@pytest.mark.parametrize("name", ["add", "sub", "add_", "sub_"])
@pytest.mark.parametrize("operand", ["td", "tensor0d"])
def test_add_sub_alpha(run_both, name, operand):
    run_both(lambda lib, td: getattr(td, name)(OPERANDS[operand](lib), alpha=0.5), data="pos")


TERNARY = [
    case("lerp_td_number", lambda lib, td: td.lerp(other_td(lib, "pos"), 0.25)),
    case("lerp_td_td", lambda lib, td: td.lerp(other_td(lib, "pos"), other_td(lib, "pos", 0.1))),
    case("lerp_tensor_tensor", lambda lib, td: td.lerp(torch.tensor(2.0), torch.tensor(0.5))),
    case("lerp_", lambda lib, td: td.lerp_(other_td(lib, "pos"), 0.75)),
    case("addcmul", lambda lib, td: td.addcmul(other_td(lib, "pos"), other_td(lib, "pos", 2.0))),
    case("addcmul_value", lambda lib, td: td.addcmul(other_td(lib, "pos"), other_td(lib, "pos"), value=0.5)),
    case("addcmul_tensor", lambda lib, td: td.addcmul(torch.tensor(2.0), torch.tensor(3.0)), raises=TypeError),
    case("addcmul_", lambda lib, td: td.addcmul_(other_td(lib, "pos"), other_td(lib, "pos"), value=-1)),
    case("addcdiv", lambda lib, td: td.addcdiv(other_td(lib, "pos"), other_td(lib, "pos", 2.0))),
    case("addcdiv_value", lambda lib, td: td.addcdiv(other_td(lib, "pos"), other_td(lib, "pos"), value=2)),
    case("addcdiv_", lambda lib, td: td.addcdiv_(other_td(lib, "pos"), other_td(lib, "pos"), value=0.5)),
    case("mismatched_keys", lambda lib, td: td.add(td.exclude("a")), raises=KeyError),
    case("mismatched_keys_op", lambda lib, td: td + td.exclude(("nested", "c")), raises=KeyError),
    case("extra_keys_other", lambda lib, td: td.exclude("a") + td, raises=KeyError),
    case("bad_tensor_broadcast", lambda lib, td: td + torch.ones(3, 7), raises=RuntimeError),
]


@pytest.mark.parametrize(("fn", "kw"), TERNARY)
def test_ternary_and_mismatch(run_both, fn, kw):
    kw = {"data": "pos", **kw}
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Python operators
# --------------------------------------------------------------------------------------------------
ARITH = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}
CMP = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
BITWISE = {"&": operator.and_, "|": operator.or_, "^": operator.xor}
INPLACE = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "//=": operator.ifloordiv,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
}


@pytest.mark.parametrize("rhs", ["td", "number", "numpy_number", "tensor0d"])
@pytest.mark.parametrize("sym", list(ARITH))
def test_arith_operator(run_both, sym, rhs):
    run_both(lambda lib, td: ARITH[sym](td, OPERANDS[rhs](lib)), data="pos", raises=REF_RAISES.get(sym))


@pytest.mark.parametrize("sym", list(ARITH))
def test_arith_operator_int(run_both, sym):
    run_both(lambda lib, td: ARITH[sym](td, 3), data="int", raises=REF_RAISES.get(sym))


# what tensordict 0.15.3 raises for an operator it lacks (the tests xfail: see conftest.DIFFERENCES)
REF_RAISES: dict[str, type[Exception]] = {"//": TypeError, "//=": TypeError}
REF_RAISES_REFLECTED: dict[str, type[Exception]] = {"//": TypeError, "%": TypeError, "**": NotImplementedError}


@pytest.mark.parametrize("sym", list(ARITH) + list(BITWISE))
def test_reflected_operator(run_both, sym):
    op = {**ARITH, **BITWISE}[sym]
    run_both(lambda lib, td: op(2, td), data="int" if sym in BITWISE else "pos", raises=REF_RAISES_REFLECTED.get(sym))


@pytest.mark.parametrize("sym", ["+", "-", "*", "/"])
def test_numpy_scalar_on_the_left(run_both, sym):
    # tensordict: TypeError (NumPy makes a sequence of the TensorDict); a deliberate difference here
    run_both(lambda lib, td: ARITH[sym](np.float32(2), td), data="pos", raises=TypeError)


@pytest.mark.parametrize("rhs", ["td", "number", "numpy_number"])
@pytest.mark.parametrize("sym", list(CMP))
def test_compare_operator(run_both, sym, rhs):
    run_both(lambda lib, td: CMP[sym](td, OPERANDS[rhs](lib)), data="pos")


@pytest.mark.parametrize("data", ["bool", "int"])
@pytest.mark.parametrize("sym", list(BITWISE))
def test_bitwise_operator(run_both, sym, data):
    def fn(lib, td):
        other = td.apply(lambda x: ~x if x.dtype == torch.bool else x + 1)
        return BITWISE[sym](td, other), BITWISE[sym](td, True if data == "bool" else 6)

    run_both(fn, data=data)


@pytest.mark.parametrize("data", ["bool", "int"])
def test_invert(run_both, data):
    run_both(lambda lib, td: ~td, data=data)


@pytest.mark.parametrize("data", ["float", "int"])
def test_neg_abs(run_both, data):
    run_both(lambda lib, td: (-td, abs(td)), data=data)


@pytest.mark.parametrize("sym", list(INPLACE))
def test_inplace_operator(run_both, sym):
    data = "int" if sym in ("&=", "|=", "^=", "//=") else "pos"
    run_both(lambda lib, td: INPLACE[sym](td, 2), data=data, raises=REF_RAISES.get(sym))


def test_inplace_operator_td(run_both):
    run_both(lambda lib, td: operator.iadd(td, other_td(lib, "pos")), data="pos")


def test_eq_ne_return_td(run_both):
    def fn(lib, td):
        other = td.clone()
        other["a"][0, 0, 0] = 100.0
        return td == other, td != other, type(td == other).__name__

    run_both(fn)


def test_eq_non_td_object(run_both):
    run_both(lambda lib, td: td == "x")


# --------------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------------
REDUCE_KW = {
    "default": {},
    "dim0": {"dim": 0},
    "dim_neg": {"dim": -1},
    "dim_tuple": {"dim": (0, 1)},
    "keepdim": {"dim": 1, "keepdim": True},
    "reduce": {"reduce": True},
}
REDUCTIONS = ["sum", "mean", "nansum", "nanmean", "prod", "std", "var", "max", "min", "amax", "amin"]


# 0.15.3 warns that a tuple dim for max/min/prod/amax/amin reduces only its first dim (changes in 0.17);
# the "-dim_tuple" ids of those five pin that 0.15.3 behaviour.
@pytest.mark.filterwarnings("ignore:Passing a tuple as the dim:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:.*reduces only the first dim:FutureWarning")
@pytest.mark.parametrize("kw", list(REDUCE_KW))
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction(run_both, name, kw):
    data = "nan" if name.startswith("nan") else "float"
    run_both(lambda lib, td: getattr(td, name)(**REDUCE_KW[kw]), data=data)


REDUCE_EXTRA = [
    case("sum_dim_out_of_batch", lambda lib, td: td.sum(dim=2), raises=IndexError),
    case("sum_reduce_dim", lambda lib, td: td.sum(dim=0, reduce=True), raises=RuntimeError),
    case("sum_dtype", lambda lib, td: td.sum(dtype=torch.float64)),
    case("sum_int_leaves", lambda lib, td: td.sum(dim=0), data="int"),
    case("mean_feature", lambda lib, td: td.mean(dim="feature")),
    case("std_correction0", lambda lib, td: td.std(dim=0, correction=0)),
    case("var_keepdim_tuple", lambda lib, td: td.var(dim=(0, 1), keepdim=True)),
    case("max_no_indices", lambda lib, td: td.max(dim=0, return_indices=False)),
    case("min_keepdim", lambda lib, td: td.min(dim=1, keepdim=True)),
    case("max_feature", lambda lib, td: td.max(dim="feature"), raises=RuntimeError),
    case("norm", lambda lib, td: td.norm()),
    case("norm_dtype", lambda lib, td: td.norm(dtype=torch.float64)),
    case("all", lambda lib, td: (td > -10).all()),
    case("all_false", lambda lib, td: (td > 0).all()),
    case("any", lambda lib, td: (td > 0).any()),
    case("any_false", lambda lib, td: (td > 100).any()),
    case("all_dim", lambda lib, td: (td > 0).all(dim=1)),
    case("any_dim_neg", lambda lib, td: (td > 0).any(dim=-1)),
    case("all_dim_out_of_batch", lambda lib, td: (td > 0).all(dim=2), raises=RuntimeError),
    case("all_float_leaves", lambda lib, td: td.all()),
    case("all_bool_data", lambda lib, td: (td.all(), td.any()), data="bool"),
    case("all_empty", lambda lib, td: td.empty().all()),
]


@pytest.mark.parametrize(("fn", "kw"), REDUCE_EXTRA)
def test_reduction_extra(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# dtype, device, clone, copy, grad, new_*
# --------------------------------------------------------------------------------------------------
def _leaves_share(a, b) -> list[bool]:
    return [
        a.get(k).untyped_storage().data_ptr() == b.get(k).untyped_storage().data_ptr()
        for k in a.keys(include_nested=True, leaves_only=True)
    ]


CONVERT = [
    case("to_float64", lambda lib, td: td.to(torch.float64)),
    case("to_dtype_kw", lambda lib, td: td.to(dtype=torch.float16)),
    case("to_cpu", lambda lib, td: td.to("cpu")),
    case("to_device_kw", lambda lib, td: td.to(device="cpu")),
    case("to_same_dtype_is_self", lambda lib, td: td.to(torch.float32) is td),
    case("to_mixed", lambda lib, td: td.to(torch.float64), data="mixed"),
    case("float", lambda lib, td: td.float(), data="mixed"),
    case("double", lambda lib, td: td.double(), data="mixed"),
    case("half", lambda lib, td: td.half(), data="mixed"),
    case("bfloat16", lambda lib, td: td.bfloat16(), data="mixed"),
    case("int", lambda lib, td: td.int(), data="mixed"),
    case("bool", lambda lib, td: td.bool(), data="mixed"),
    case("clone", lambda lib, td: td.clone()),
    case("clone_no_share", lambda lib, td: _leaves_share(td, td.clone())),
    case("clone_recurse_false", lambda lib, td: td.clone(recurse=False)),
    case("clone_recurse_false_share", lambda lib, td: _leaves_share(td, td.clone(False))),
    case("clone_recurse_false_subtd_copy", lambda lib, td: td.clone(False)["nested"] is td["nested"]),
    case("copy_", lambda lib, td: td.copy_(other_td(lib, "float", 3.0))),
    case("copy_keeps_storage", lambda lib, td: _leaves_share(td, td.copy_(other_td(lib, "float")))),
    case("copy_missing_key", lambda lib, td: td.copy_(other_td(lib, "float").exclude("a"))),
    case("detach", lambda lib, td: td.detach()),
    case("requires_grad_", lambda lib, td: [v.requires_grad for v in td.requires_grad_().values(True, True)]),
    case("requires_grad_false", lambda lib, td: td.requires_grad_(False)),
    case(
        "detach_after_grad",
        lambda lib, td: [v.requires_grad for v in td.requires_grad_().detach().values(True, True)],
    ),
    case("zero_", lambda lib, td: td.zero_()),
    case("contiguous", lambda lib, td: td.contiguous()),
    case("contiguous_permuted", lambda lib, td: td.permute(1, 0).contiguous()),
    case("is_contiguous", lambda lib, td: (td.is_contiguous(), td.permute(1, 0).is_contiguous())),
    case("new_zeros", lambda lib, td: td.new_zeros(2, 3)),
    case("new_zeros_tuple", lambda lib, td: td.new_zeros((2,))),
    case("new_ones", lambda lib, td: td.new_ones(2)),
    case("new_ones_dtype", lambda lib, td: td.new_ones(2, dtype=torch.int64), data="mixed"),
    case(
        "new_empty_shape",
        lambda lib, td: [(k, v.shape, v.dtype) for k, v in td.new_empty(2, 3).items(True, True)],
    ),
    case("new_full", lambda lib, td: td.new_full((2, 3), 1.5)),
    case("new_full_mixed", lambda lib, td: td.new_full((2,), 7), data="mixed"),
    case("new_tensor", lambda lib, td: td.new_tensor(torch.ones(2))),
    case("new_tensor_list", lambda lib, td: td.new_tensor([1.0, 2.0, 3.0])),
]


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor:UserWarning")
@pytest.mark.parametrize(("fn", "kw"), CONVERT)
def test_convert(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# apply / apply_ / named_apply
# --------------------------------------------------------------------------------------------------
def _drop_b(x):
    return None if x.ndim == 2 else x


APPLY = [
    case("apply", lambda lib, td: td.apply(lambda x: x * 2)),
    case("apply_dtype_change", lambda lib, td: td.apply(lambda x: x.to(torch.int32))),
    case("apply_others", lambda lib, td: td.apply(lambda x, y: x + y, other_td(lib, "float"))),
    case(
        "apply_two_others",
        lambda lib, td: td.apply(lambda x, y, z: x * y - z, other_td(lib, "float"), other_td(lib, "float", 2.0)),
    ),
    case(
        "apply_others_missing_key",
        lambda lib, td: td.apply(lambda x, y: x + y, td.exclude("a")),
        raises=KeyError,
    ),
    case("apply_others_default", lambda lib, td: td.apply(lambda x, y: x + y, td.exclude("a"), default=0.0)),
    case("apply_batch_size", lambda lib, td: td.apply(lambda x: x[0], batch_size=[5])),
    case("apply_batch_size_empty", lambda lib, td: td.apply(lambda x: x.sum(), batch_size=[])),
    case("apply_bad_batch_size", lambda lib, td: td.apply(lambda x: x[0], batch_size=[4]), raises=RuntimeError),
    case("apply_drop_none", lambda lib, td: td.apply(_drop_b)),
    case("apply_all_none", lambda lib, td: td.apply(lambda x: None)),
    case("apply_all_none_keep_empty", lambda lib, td: td.apply(lambda x: None, filter_empty=False)),
    case("apply_filter_empty_true", lambda lib, td: td.apply(_drop_b, filter_empty=True)),
    case("apply_filter_empty_false", lambda lib, td: td.apply(_drop_b, filter_empty=False)),
    case("apply_inplace_kw", lambda lib, td: td.apply(lambda x: x + 1, inplace=True)),
    case("apply_", lambda lib, td: td.apply_(lambda x: x + 1)),
    case("apply__others", lambda lib, td: td.apply_(lambda x, y: x * y, other_td(lib, "float"))),
    case(
        "apply_call_on_nested",
        lambda lib, td: td.apply(
            lambda x: x.exclude("c") if isinstance(x, lib.TensorDictBase) else x, call_on_nested=True
        ),
    ),
    case("named_apply", lambda lib, td: td.named_apply(lambda k, x: x + len(k))),
    case(
        "named_apply_nested_keys",
        lambda lib, td: td.named_apply(lambda k, x: x * (2 if isinstance(k, tuple) else 3), nested_keys=True),
    ),
    case("named_apply_drop", lambda lib, td: td.named_apply(lambda k, x: x if k == "a" else None)),
    case("named_apply_keys_seen", lambda lib, td: _keys_seen(td)),
    case("named_apply_others", lambda lib, td: td.named_apply(lambda k, x, y: x - y, other_td(lib, "float"))),
    case("named_apply_batch_size", lambda lib, td: td.named_apply(lambda k, x: x[:, 0], batch_size=[4])),
]


def _keys_seen(td):
    seen = []
    td.named_apply(lambda k, x: seen.append(k), nested_keys=True)
    return sorted(map(str, seen))


@pytest.mark.parametrize(("fn", "kw"), APPLY)
def test_apply(run_both, fn, kw):
    run_both(fn, **kw)
