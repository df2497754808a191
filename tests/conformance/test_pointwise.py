"""Pointwise methods and operators, each leaf checked against torch on the plain leaf.

Arithmetic runs on ``td.float()`` (or on the float leaves only) so bool/int leaves never hit
dtype errors; dedicated tests cover int and bool leaves.
"""

from __future__ import annotations

import operator

import pytest
import torch
from _flavours import (
    FLOAT_KEYS,
    assert_leaves,
    assert_op,
    assert_same_content,
    float_part,
    leaf_ids,
    leaves,
    requires,
    snapshot,
)

TOL = {"rtol": 1e-6, "atol": 1e-6}

UNARY = [
    "abs",
    "neg",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "sqrt",
    "reciprocal",
    "sigmoid",
    "tanh",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "sign",
    "erf",
    "atan",
]
UNARY_INPLACE = ["exp", "log", "sqrt", "neg", "abs", "sigmoid", "floor", "reciprocal"]
PREDICATES = ["isnan", "isfinite", "isinf", "signbit"]

OPERATORS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "**": operator.pow,
    "//": operator.floordiv,
    "%": operator.mod,
}
COMPARISONS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
INPLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv}


def _floats(td):
    """The float leaves only (a TensorDict sharing them with ``td``)."""
    return td.select(*FLOAT_KEYS)


@pytest.mark.parametrize("name", UNARY)
def test_unary(tdf, name):
    assert_op(tdf.float(), lambda td: getattr(td, name)(), getattr(torch, name), **TOL)


@pytest.mark.parametrize("name", UNARY_INPLACE)
def test_unary_inplace(flavour, tdf, name):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    sub, keys = float_part(flavour, tdf)
    assert getattr(sub, name + "_")() is sub
    fn = getattr(torch, name)
    assert_leaves({p: fn(x) if p in keys else x for p, x in before.items()}, lambda x: x, tdf, **TOL)


@pytest.mark.parametrize("name", PREDICATES)
def test_predicates(tdf, name):
    x = tdf.float()
    x.set("a", torch.where(x.get("a") > 1, x.get("a"), torch.tensor(float("nan"))))  # some NaNs to find
    assert_op(x, lambda td: getattr(td, name)(), getattr(torch, name))


def test_torch_functions_dispatch(tdf):
    x = tdf.float()
    assert_op(x, torch.exp, torch.exp, **TOL)
    assert_op(x, lambda td: torch.add(td, 2.0), lambda v: v + 2.0)
    assert_op(x, lambda td: torch.clamp(td, 0.7, 1.5), lambda v: v.clamp(0.7, 1.5))
    assert_op(x, lambda td: torch.maximum(td, -td), lambda v: torch.maximum(v, -v))


@pytest.mark.parametrize("op", OPERATORS, ids=list(OPERATORS))
@pytest.mark.parametrize("scalar", [2, 0.5])
def test_operator_with_scalar(tdf, op, scalar):
    fn = OPERATORS[op]
    assert_op(tdf.float(), lambda td: fn(td, scalar), lambda x: fn(x, scalar), **TOL)


@pytest.mark.parametrize("op", OPERATORS, ids=list(OPERATORS))
def test_reflected_operator(tdf, op):
    fn = OPERATORS[op]
    assert_op(tdf.float(), lambda td: fn(3.0, td), lambda x: fn(3.0, x), **TOL)


@pytest.mark.parametrize("op", OPERATORS, ids=list(OPERATORS))
def test_operator_with_tensordict(flavour, tdf, op):
    fn = OPERATORS[op]
    other = flavour.factory(seed=1).float()
    expected = {p: fn(x, leaves(other)[p]) for p, x in leaves(tdf.float()).items()}
    assert_leaves(expected, lambda x: x, fn(tdf.float(), other), **TOL)


def test_operator_with_batch_tensor(tdf):
    t = torch.arange(12.0).reshape(3, 4) + 1
    x = tdf.float()

    def aligned(v, tensor):  # a tensor operand lines up with the leading (batch) dims of each leaf
        return tensor.reshape(*tensor.shape, *([1] * (v.ndim - tensor.ndim)))

    assert_op(x, lambda td: td * t, lambda v: v * aligned(v, t), batch_size=[3, 4])
    assert_op(x, lambda td: td - t[:, :1], lambda v: v - aligned(v, t[:, :1]), batch_size=[3, 4])


@pytest.mark.parametrize("op", COMPARISONS, ids=list(COMPARISONS))
def test_comparison(flavour, tdf, op):
    fn = COMPARISONS[op]
    other = flavour.factory(seed=1)
    expected = {p: fn(x, leaves(other)[p]) for p, x in leaves(tdf).items()}
    out = fn(tdf, other)
    assert_leaves(expected, lambda x: x, out, batch_size=[3, 4])
    assert_op(tdf, lambda td: fn(td, 1), lambda x: fn(x, 1))


def test_equality_reductions(flavour, tdf):
    same = flavour.factory()
    assert (tdf == same).all()
    assert not (tdf != same).any()
    assert not (tdf == flavour.factory(seed=1)).all()
    with pytest.raises(RuntimeError):
        bool(tdf == same)


@pytest.mark.parametrize("op", INPLACE, ids=list(INPLACE))
def test_augmented_assignment_is_inplace(flavour, tdf, op):
    requires(flavour, "inplace")
    fn, plain = INPLACE[op], OPERATORS[op[:-1]]
    before = snapshot(tdf)
    sub, keys = float_part(flavour, tdf)
    ids = leaf_ids(flavour, tdf)
    out = fn(sub, 2.0)
    assert out is sub
    assert leaf_ids(flavour, tdf) == ids
    assert_leaves({p: plain(x, 2.0) if p in keys else x for p, x in before.items()}, lambda x: x, tdf, **TOL)


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_", "div_", "maximum_", "minimum_"])
def test_binary_inplace_with_tensordict(flavour, tdf, name):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    other = flavour.factory(seed=1)
    sub, keys = float_part(flavour, tdf)
    getattr(sub, name)(float_part(flavour, other)[0])
    fn = getattr(torch, name[:-1])
    theirs = leaves(other)
    assert_leaves({p: fn(x, theirs[p]) if p in keys else x for p, x in before.items()}, lambda x: x, tdf, **TOL)


def test_inplace_dtype_error_is_atomic(flavour, tdf):
    requires(flavour, "inplace")
    before = snapshot(tdf)
    with pytest.raises(RuntimeError):
        tdf.add_(0.5)  # int and bool leaves cannot hold a float result
    assert_leaves(before, lambda x: x, tdf)


def test_add_alpha_and_default(flavour, tdf):
    x, other = tdf.float(), flavour.factory(seed=1).float()
    theirs = leaves(other)
    expected = {p: torch.add(v, theirs[p], alpha=2) for p, v in leaves(x).items()}
    assert_leaves(expected, lambda v: v, x.add(other, alpha=2), **TOL)
    part = other.exclude("a")
    out = x.add(part, default=0.0)
    assert torch.equal(out.get("a"), x.get("a"))
    assert_leaves(x, lambda v: v * 2, x + x)


def test_clamp_and_friends(flavour, tdf):
    x = tdf.float()
    assert_op(x, lambda td: td.clamp(0.8, 1.2), lambda v: v.clamp(0.8, 1.2))
    assert_op(x, lambda td: td.clamp(min=1.0), lambda v: v.clamp(min=1.0))
    assert_op(x, lambda td: td.clamp_min(1.0), lambda v: v.clamp_min(1.0))
    assert_op(x, lambda td: td.clamp_max(1.0), lambda v: v.clamp_max(1.0))
    other = flavour.factory(seed=1).float()
    theirs = leaves(other)
    for name in ("maximum", "minimum", "pow"):
        fn = getattr(torch, name)
        expected = {p: fn(v, theirs[p]) for p, v in leaves(x).items()}
        assert_leaves(expected, lambda v: v, getattr(x, name)(other), **TOL)


def test_lerp_addcmul_addcdiv(flavour, tdf):
    x = _floats(tdf)
    o = _floats(flavour.factory(seed=1))
    mine, theirs = leaves(x), leaves(o)
    cases = {
        "lerp": (x.lerp(o, 0.25), lambda p: torch.lerp(mine[p], theirs[p], 0.25)),
        "addcmul": (
            x.addcmul(o, o, value=0.5),
            lambda p: torch.addcmul(mine[p], theirs[p], theirs[p], value=0.5),
        ),
        "addcdiv": (
            x.addcdiv(o, o, value=2),
            lambda p: torch.addcdiv(mine[p], theirs[p], theirs[p], value=2),
        ),
    }
    for result, fn in cases.values():
        assert_leaves({p: fn(p) for p in mine}, lambda v: v, result, **TOL)


def test_int_and_bool_leaves(tdf):
    ints = tdf.select("b")
    assert_op(ints, lambda td: td // 3, lambda v: v // 3)
    assert_op(ints, lambda td: td % 4, lambda v: v % 4)
    assert_op(ints, lambda td: td & 6, lambda v: v & 6)
    assert_op(ints, lambda td: td | 1, lambda v: v | 1)
    assert_op(ints, lambda td: ~td, lambda v: ~v)
    bools = tdf.select("c")
    assert_op(bools, lambda td: td.logical_not(), torch.logical_not)
    assert_op(bools, lambda td: ~td, lambda v: ~v)
    assert_op(bools, lambda td: td ^ True, lambda v: v ^ True)
    assert_op(bools, lambda td: td + 1, lambda v: v + 1)  # bool + int promotes, as in torch
    assert_op(tdf, lambda td: -td.exclude("c"), lambda v: None if v.dtype == torch.bool else -v)


def test_source_untouched_by_out_of_place_ops(tdf):
    _ = tdf.float() + 1
    _ = tdf.float().exp()
    _ = tdf == tdf
    assert_same_content(tdf)
