"""Every entry of the pointwise table (``tensorbatch._ops.pointwise``) is a working method.

The test parameters come from the table itself, so a new entry is checked without editing this file:
the method exists on ``TensorDict``, has a docstring, and computes what torch computes on each leaf of a
2-leaf nested TensorDict. In-place twins return ``self`` and write into the same tensors. Each entry is
also checked through everything the table feeds: the torch function (``torch.expm1(td)``, ``HANDLED``),
the operators, the aliases, a lazy stack's per-member methods and the typed wrappers' delegation list.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorDict, TensorDictBase, lazy_stack
from tensorbatch._delegation import FORWARD_RETURNS_WRAPPED
from tensorbatch._ops.pointwise import (
    ALIASES,
    BINARY,
    CASTS,
    EXTRA,
    INPLACE,
    METHODS,
    NAMES,
    OPERATORS,
    REFLECTED,
    TORCH_FUNCTIONS,
    UNARY,
)
from tensorbatch._ops.torch_function import HANDLED

BATCH = (3,)
PATHS = (("a",), ("nested", "b"))  # leaf shapes: (3, 4) and (3, 2, 5)


# ------------------------------------------------------------------------------------------ inputs
def _leaf(shape: tuple[int, ...], kind: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "int":
        return torch.randint(1, 9, shape, generator=g)
    if kind == "bool":
        return torch.rand(shape, generator=g) > 0.5
    if kind == "positive":  # log, sqrt, pow base, divisors
        return torch.rand(shape, generator=g) * 2 + 0.25
    if kind == "special":  # finite values plus inf, -inf, nan and -0.0 for the is* predicates
        x = torch.randn(shape, generator=g)
        flat = x.view(-1)
        flat[0], flat[1], flat[2], flat[3] = float("inf"), float("-inf"), float("nan"), -0.0
        return x
    # "unit": inside (-1, 1), valid for asin/acos/atanh-like domains and everything unrestricted
    return torch.rand(shape, generator=g) * 1.8 - 0.9


def make_td(kind: str = "unit", seed: int = 0) -> TensorDict:
    return TensorDict(
        {"a": _leaf((*BATCH, 4), kind, seed), "nested": {"b": _leaf((*BATCH, 2, 5), kind, seed + 1)}},
        batch_size=BATCH,
    )


def leaves(td: Any) -> list[torch.Tensor]:
    return [td[p] for p in PATHS]


def assert_leafwise(result: Any, expected: list[torch.Tensor], batch_size: tuple[int, ...] = BATCH) -> None:
    assert isinstance(result, TensorDict), type(result)
    assert result.batch_size == torch.Size(batch_size)
    assert set(result.keys(True, True)) == {"a", ("nested", "b")}
    for path, want in zip(PATHS, expected, strict=True):
        got = result[path]
        assert got.dtype == want.dtype, (path, got.dtype, want.dtype)
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-6, rtol=1e-5, msg=f"at {path}")


# ------------------------------------------------------------------------------------------ unary
def _unary_kind(name: str) -> str:
    if name == "bitwise_not":
        return "int"
    if name == "logical_not":
        return "bool"
    if name.startswith("is") or name == "signbit":
        return "special"
    if name in ("log", "log10", "log2", "sqrt", "reciprocal", "lgamma"):
        return "positive"
    return "unit"


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    method = getattr(TensorDict, name)
    assert method.__doc__, f"{name} has no docstring"
    td = make_td(_unary_kind(name))
    before = [x.clone() for x in leaves(td)]
    out = getattr(td, name)()
    op = getattr(torch, name)
    assert_leafwise(out, [op(x) for x in before])
    assert out is not td
    for x, b in zip(leaves(td), before, strict=True):  # not in place
        torch.testing.assert_close(x, b, equal_nan=True)


@pytest.mark.parametrize("name", sorted(n for n, inplace in UNARY.items() if inplace))
def test_unary_inplace(name: str) -> None:
    method = getattr(TensorDict, f"{name}_")
    assert method.__doc__, f"{name}_ has no docstring"
    td = make_td(_unary_kind(name))
    tensors = leaves(td)
    ptrs = [x.data_ptr() for x in tensors]
    expected = [getattr(torch, name)(x.clone()) for x in tensors]
    assert getattr(td, f"{name}_")() is td
    for x, t, p in zip(leaves(td), tensors, ptrs, strict=True):
        assert x is t
        assert x.data_ptr() == p
    assert_leafwise(td, expected)


@pytest.mark.parametrize("name", sorted(n for n, inplace in UNARY.items() if not inplace))
def test_unary_without_inplace_twin(name: str) -> None:
    assert not hasattr(TensorDict, f"{name}_")


# ------------------------------------------------------------------------------------------ binary
def _binary_kind(name: str) -> str:
    if name.startswith("bitwise"):
        return "int"
    if name.startswith("logical"):
        return "bool"
    if name in ("pow", "div", "floor_divide", "remainder"):
        return "positive"
    return "unit"


def _number(kind: str) -> Any:
    return {"int": 3, "bool": True, "positive": 1.5}.get(kind, 0.25)


_TENSOR_ONLY = {"maximum", "minimum", "logical_and", "logical_or", "logical_xor"}  # torch takes no scalars


def _operands(name: str) -> list[tuple[str, Any, Callable[[torch.Tensor, int], Any]]]:
    """(id, operand, leaf-operand for the leaf at index i of the left TensorDict)."""
    kind = _binary_kind(name)
    other_td = make_td(kind, seed=10)
    aligned = _leaf(BATCH, kind, seed=20)  # shape == batch_size; leaves have extra feature dims
    number = _number(kind)

    def per_leaf_number(x: torch.Tensor, i: int) -> Any:
        return torch.as_tensor(number, dtype=x.dtype) if name in _TENSOR_ONLY else number

    def per_leaf_aligned(x: torch.Tensor, i: int) -> Any:
        return aligned.reshape(*aligned.shape, *[1] * (x.ndim - aligned.ndim))

    return [
        ("td", other_td, lambda x, i: leaves(other_td)[i]),
        ("batch_tensor", aligned, per_leaf_aligned),
        ("number", number, per_leaf_number),
        ("numpy_number", _numpy_number(kind), per_leaf_number),  # taken as the Python number it holds
    ]


def _numpy_number(kind: str) -> Any:
    number = _number(kind)
    return {"int": np.int64, "bool": np.bool_}.get(kind, np.float32)(number)


BINARY_CASES = [(n, which) for n in sorted(BINARY) for which in ("td", "batch_tensor", "number", "numpy_number")]


@pytest.mark.parametrize(("name", "which"), BINARY_CASES)
def test_binary(name: str, which: str) -> None:
    torch_name, _ = BINARY[name]
    assert getattr(TensorDict, name).__doc__, f"{name} has no docstring"
    _, other, rhs = next(c for c in _operands(name) if c[0] == which)
    td = make_td(_binary_kind(name))
    op = getattr(torch, torch_name)
    expected = [op(x, rhs(x, i)) for i, x in enumerate(leaves(td))]
    assert_leafwise(getattr(td, name)(other), expected)


@pytest.mark.parametrize(("name", "which"), [(n, w) for n, w in BINARY_CASES if BINARY[n][1]])
def test_binary_inplace(name: str, which: str) -> None:
    torch_name, _ = BINARY[name]
    assert getattr(TensorDict, f"{name}_").__doc__, f"{name}_ has no docstring"
    _, other, rhs = next(c for c in _operands(name) if c[0] == which)
    td = make_td(_binary_kind(name))
    tensors = leaves(td)
    ptrs = [x.data_ptr() for x in tensors]
    op = getattr(torch, torch_name)
    expected = [op(x.clone(), rhs(x, i)) for i, x in enumerate(tensors)]
    assert getattr(td, f"{name}_")(other) is td
    for x, t, p in zip(leaves(td), tensors, ptrs, strict=True):
        assert x is t
        assert x.data_ptr() == p
    assert_leafwise(td, expected)


@pytest.mark.parametrize("name", sorted(n for n, (_, inplace) in BINARY.items() if not inplace))
def test_binary_without_inplace_twin(name: str) -> None:
    assert not hasattr(TensorDict, f"{name}_")


@pytest.mark.parametrize("name", ["add", "sub"])
def test_binary_alpha(name: str) -> None:
    td, other = make_td(), make_td(seed=10)
    op = getattr(torch, name)
    expected = [op(x, y, alpha=2.0) for x, y in zip(leaves(td), leaves(other), strict=True)]
    assert_leafwise(getattr(td, name)(other, alpha=2.0), expected)
    assert getattr(td, f"{name}_")(other, alpha=2.0) is td
    assert_leafwise(td, expected)


def test_binary_batch_tensor_broadcasts_batch_size() -> None:
    td = TensorDict({"a": torch.ones(1, 4), "nested": {"b": torch.ones(1, 2, 5)}}, batch_size=[1])
    out = td + torch.arange(3.0)
    assert out.batch_size == torch.Size([3])
    assert out["a"].shape == (3, 4)
    assert out["nested", "b"].shape == (3, 2, 5)
    torch.testing.assert_close(out["nested", "b"][:, 1, 2], torch.arange(3.0) + 1)


# ------------------------------------------------------------------------------------------ casts
@pytest.mark.parametrize("name", sorted(CASTS))
def test_cast(name: str) -> None:
    assert getattr(TensorDict, name).__doc__, f"{name} has no docstring"
    td = make_td("positive")
    out = getattr(td, name)()
    assert_leafwise(out, [x.to(CASTS[name]) for x in leaves(td)])
    assert out.dtype == CASTS[name]


# ------------------------------------------------------------------------------------------ operators
_INPLACE_DUNDER = {
    "__iadd__": operator.iadd,
    "__isub__": operator.isub,
    "__imul__": operator.imul,
    "__itruediv__": operator.itruediv,
    "__ipow__": operator.ipow,
    "__ifloordiv__": operator.ifloordiv,
    "__imod__": operator.imod,
    "__iand__": operator.iand,
    "__ior__": operator.ior,
    "__ixor__": operator.ixor,
}
_UNARY_DUNDER = {"__neg__": operator.neg, "__abs__": operator.abs, "__invert__": operator.invert}


def _python_operator(dunder: str) -> Callable[..., Any]:
    if dunder in _INPLACE_DUNDER:
        return _INPLACE_DUNDER[dunder]
    if dunder in _UNARY_DUNDER:
        return _UNARY_DUNDER[dunder]
    return getattr(operator, dunder)


def _method_kind(method: str) -> str:
    base = method.rstrip("_")
    return _unary_kind(base) if base in UNARY else _binary_kind(base)


@pytest.mark.parametrize("dunder", sorted(OPERATORS))
def test_operator(dunder: str) -> None:
    method = OPERATORS[dunder]
    assert getattr(TensorDict, dunder).__doc__, f"{dunder} has no docstring"
    pyop = _python_operator(dunder)
    kind = _method_kind(method)
    if dunder in _UNARY_DUNDER:
        td = make_td(kind)
        assert_leafwise(pyop(td), leaves(getattr(make_td(kind), method)()))
        return
    for which in ("td", "number"):
        td, expected_td = make_td(kind), make_td(kind)
        other = make_td(kind, seed=10) if which == "td" else _number(kind)
        expected = getattr(expected_td, method)(other)
        tensors = leaves(td)
        out = pyop(td, other)
        if dunder in _INPLACE_DUNDER:
            assert out is td
            assert all(x is t for x, t in zip(leaves(td), tensors, strict=True))
        assert_leafwise(out, leaves(expected))


def test_operators_unknown_operand() -> None:
    td = make_td()
    assert (td == "x") is False  # NotImplemented on both sides: Python falls back to identity
    assert (td != "x") is True
    with pytest.raises(TypeError):
        td + "x"
    with pytest.raises(TypeError):
        "x" + td


_REFLECTED_CALL = {
    "__radd__": operator.add,
    "__rsub__": operator.sub,
    "__rmul__": operator.mul,
    "__rtruediv__": operator.truediv,
    "__rpow__": operator.pow,
    "__rfloordiv__": operator.floordiv,
    "__rmod__": operator.mod,
    "__rand__": operator.and_,
    "__ror__": operator.or_,
    "__rxor__": operator.xor,
}


def test_reflected_table_covered() -> None:
    assert set(_REFLECTED_CALL) == set(REFLECTED)


@pytest.mark.parametrize("dunder", sorted(REFLECTED))
def test_reflected_number(dunder: str) -> None:
    torch_name = REFLECTED[dunder]
    kind = _binary_kind(torch_name)
    td = make_td(kind)
    number = _number(kind)
    op = getattr(torch, torch_name)
    expected = [op(torch.as_tensor(number), x) for x in leaves(td)]
    assert_leafwise(_REFLECTED_CALL[dunder](number, td), expected)


@pytest.mark.parametrize("dunder", sorted(REFLECTED))
def test_reflected_numpy_number(dunder: str) -> None:
    # NumPy defers to the TensorDict (__array_ufunc__ = None) instead of making an array of it
    torch_name = REFLECTED[dunder]
    kind = _binary_kind(torch_name)
    td = make_td(kind)
    op = getattr(torch, torch_name)
    expected = [op(torch.as_tensor(_number(kind)), x) for x in leaves(td)]
    assert_leafwise(_REFLECTED_CALL[dunder](_numpy_number(kind), td), expected)


def test_numpy_ufunc_on_a_tensordict_is_refused() -> None:
    with pytest.raises(TypeError, match="does not support ufuncs"):
        np.add(make_td(), 1)


def test_unsupported_operand_of_an_inplace_op_names_it() -> None:
    td = make_td()
    before = [x.clone() for x in leaves(td)]
    with pytest.raises(TypeError, match=r"add_: unsupported operand of type dict"):
        td.add_({"a": torch.ones(3, 4)})
    with pytest.raises(TypeError, match=r"mul_: unsupported operand of type str"):
        td.mul_("x")
    for x, b in zip(leaves(td), before, strict=True):
        torch.testing.assert_close(x, b)


@pytest.mark.parametrize("dunder", sorted(REFLECTED))
def test_reflected_batch_tensor(dunder: str) -> None:
    torch_name = REFLECTED[dunder]
    kind = _binary_kind(torch_name)
    td = make_td(kind)
    aligned = _leaf(BATCH, kind, seed=20)
    op = getattr(torch, torch_name)
    expected = [op(aligned.reshape(*aligned.shape, *[1] * (x.ndim - 1)), x) for x in leaves(td)]
    assert_leafwise(_REFLECTED_CALL[dunder](aligned, td), expected)


# ------------------------------------------------------------------------------------------ extra
def _extra_expected(name: str, td: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    op = getattr(torch, name.rstrip("_"))
    out = []
    for i, x in enumerate(leaves(td)):
        leaf_args = [leaves(a)[i] if isinstance(a, TensorDict) else a for a in args]
        out.append(op(x.clone(), *leaf_args, **kwargs))
    return out


_EXTRA_ARGS: dict[str, list[tuple[str, Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]]]] = {
    "lerp": [
        ("td_number", lambda: ((make_td(seed=10), 0.3), {})),
        ("td_td", lambda: ((make_td(seed=10), make_td("positive", seed=11)), {})),
    ],
    "addcmul": [
        ("td_td", lambda: ((make_td(seed=10), make_td(seed=11)), {})),
        ("value", lambda: ((make_td(seed=10), make_td(seed=11)), {"value": 0.5})),
    ],
    "addcdiv": [
        ("td_td", lambda: ((make_td(seed=10), make_td("positive", seed=11)), {})),
        ("value", lambda: ((make_td(seed=10), make_td("positive", seed=11)), {"value": 0.5})),
    ],
    "clamp": [
        ("numbers", lambda: ((-0.5, 0.5), {})),
        ("min_only", lambda: ((), {"min": 0.0})),
        ("max_only", lambda: ((), {"max": 0.0})),
        ("tds", lambda: ((make_td(seed=10) - 0.5, make_td(seed=10) + 0.5), {})),
    ],
}


def test_extra_args_cover_table() -> None:
    assert {n.rstrip("_") for n in EXTRA} == set(_EXTRA_ARGS)


@pytest.mark.parametrize(
    ("name", "args_fn"),
    [pytest.param(n, fn, id=f"{n}-{cid}") for n in sorted(EXTRA) for cid, fn in _EXTRA_ARGS[n.rstrip("_")]],
)
def test_extra(name: str, args_fn: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
    assert getattr(TensorDict, name).__doc__, f"{name} has no docstring"
    args, kwargs = args_fn()
    td = make_td()
    expected = _extra_expected(name, td, args, kwargs)
    if name.endswith("_"):
        tensors = leaves(td)
        ptrs = [x.data_ptr() for x in tensors]
        assert getattr(td, name)(*args, **kwargs) is td
        for x, t, p in zip(leaves(td), tensors, ptrs, strict=True):
            assert x is t
            assert x.data_ptr() == p
        assert_leafwise(td, expected)
    else:
        before = [x.clone() for x in leaves(td)]
        assert_leafwise(getattr(td, name)(*args, **kwargs), expected)
        for x, b in zip(leaves(td), before, strict=True):
            torch.testing.assert_close(x, b)


def test_extra_batch_tensor_operand() -> None:
    td = make_td()
    end = _leaf(BATCH, "unit", seed=20)
    expected = [torch.lerp(x, end.reshape(*BATCH, *[1] * (x.ndim - 1)), 0.5) for x in leaves(td)]
    assert_leafwise(td.lerp(end, 0.5), expected)


# ------------------------------------------------------------------ the torch functions (HANDLED)
def test_handled_has_every_table_function() -> None:
    expected = {getattr(torch, n) for n in METHODS if n not in CASTS and hasattr(torch, n)}
    assert set(TORCH_FUNCTIONS) == expected
    missing = sorted(fn.__name__ for fn in expected if fn not in HANDLED)
    assert not missing, f"table entries torch cannot dispatch to: {missing}"


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_torch_function(name: str) -> None:
    td = make_td(_unary_kind(name))
    fn = getattr(torch, name)
    assert_leafwise(fn(td), [fn(x) for x in leaves(td)])


@pytest.mark.parametrize(("name", "which"), BINARY_CASES)
def test_binary_torch_function(name: str, which: str) -> None:
    torch_name, _ = BINARY[name]
    _, other, rhs = next(c for c in _operands(name) if c[0] == which)
    td = make_td(_binary_kind(name))
    fn = getattr(torch, torch_name)
    if which in ("number", "numpy_number") and name in _TENSOR_ONLY:  # torch's argument parser refuses them
        with pytest.raises(TypeError, match="must be Tensor"):
            fn(td, other)
        return
    assert_leafwise(fn(td, other), [fn(x, rhs(x, i)) for i, x in enumerate(leaves(td))])


@pytest.mark.parametrize(
    ("name", "args_fn"),
    [pytest.param(n, fn, id=f"{n}-{cid}") for n in sorted(EXTRA) if not n.endswith("_") for cid, fn in _EXTRA_ARGS[n]],
)
def test_extra_torch_function(name: str, args_fn: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
    args, kwargs = args_fn()
    td = make_td()
    assert_leafwise(getattr(torch, name)(td, *args, **kwargs), _extra_expected(name, td, args, kwargs))


# ------------------------------------------------------------------------------------------ aliases
@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_alias(alias: str) -> None:
    target = ALIASES[alias]
    assert getattr(TensorDictBase, alias) is getattr(TensorDictBase, target)
    td, other = make_td("positive"), make_td("positive", seed=10)
    fn = getattr(torch, alias, None)  # "mod" is a tensordict alias (of remainder) torch lacks
    expected = [(fn or getattr(torch, target))(x, y) for x, y in zip(leaves(td), leaves(other), strict=True)]
    assert_leafwise(getattr(td, alias)(other), expected)
    if fn is not None:
        assert_leafwise(fn(td, other), expected)
    stacked = lazy_stack([td, td.clone()])
    out = getattr(stacked, alias)(lazy_stack([other, other.clone()]))
    assert isinstance(out, LazyStackedTensorDict)  # per member, as the method it names
    assert_leafwise(out[0], expected)


# ------------------------------------------------------------------------------------ other consumers
def test_every_table_name_is_installed_and_delegated() -> None:
    installed = set(vars(TensorDictBase))
    assert not NAMES - installed, sorted(NAMES - installed)
    assert not NAMES - FORWARD_RETURNS_WRAPPED, sorted(NAMES - FORWARD_RETURNS_WRAPPED)
    assert set(INPLACE.values()) <= set(METHODS)


@pytest.mark.parametrize("name", sorted({*METHODS, *INPLACE}))
def test_lazy_stack_runs_table_method_per_member(name: str) -> None:
    """The lazy stack gets its own (per-member) method for every table method and in-place twin."""
    assert getattr(LazyStackedTensorDict, name) is not getattr(TensorDictBase, name)
    assert getattr(LazyStackedTensorDict, name).__name__ == name


@pytest.mark.parametrize("name", sorted(UNARY))
def test_lazy_stack_unary(name: str) -> None:
    parts = [make_td(_unary_kind(name), seed=s) for s in (0, 5)]
    stacked = lazy_stack([p.clone() for p in parts], 1)
    op = getattr(torch, name)
    out = getattr(stacked, name)()
    assert isinstance(out, LazyStackedTensorDict)
    assert out.batch_size == torch.Size([*BATCH, 2])
    for i, part in enumerate(parts):
        assert_leafwise(out[:, i], [op(x) for x in leaves(part)])
    if UNARY[name]:
        assert getattr(stacked, f"{name}_")() is stacked
        for i, part in enumerate(parts):
            assert_leafwise(stacked[:, i], [op(x) for x in leaves(part)])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_lazy_stack_binary(name: str) -> None:
    torch_name, inplace = BINARY[name]
    kind = _binary_kind(name)
    parts = [make_td(kind, seed=s) for s in (0, 5)]
    others = [make_td(kind, seed=s) for s in (10, 15)]
    stacked = lazy_stack([p.clone() for p in parts])
    op = getattr(torch, torch_name)
    expected = [
        [op(x, y) for x, y in zip(leaves(p), leaves(o), strict=True)] for p, o in zip(parts, others, strict=True)
    ]
    out = getattr(stacked, name)(lazy_stack(others))
    for i in range(2):
        assert_leafwise(out[i], expected[i])
    if inplace:
        assert getattr(stacked, f"{name}_")(lazy_stack(others)) is stacked
        for i in range(2):
            assert_leafwise(stacked[i], expected[i])
