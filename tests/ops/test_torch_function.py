"""Every entry of ``HANDLED`` (``tensorbatch._ops.torch_function``) works when called through torch.

``CASES`` holds one check per torch function; ``test_every_entry_has_a_case`` fails when an entry is added
to ``HANDLED`` without a case here (or a case outlives its entry). The pointwise table's functions
(``TORCH_FUNCTIONS``) are checked with the table, in ``test_pointwise_table.py``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tensorbatch import TensorDict
from tensorbatch._ops.pointwise import TORCH_FUNCTIONS
from tensorbatch._ops.torch_function import HANDLED, PYTHON_TENSOR_METHODS, TENSOR_METHODS

BATCH = (3, 4)
PATHS = (("a",), ("nested", "b"))  # leaf shapes (3, 4, 2) and (3, 4)


def make_td(seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "a": torch.rand(*BATCH, 2, generator=g) + 0.1,
            "nested": {"b": torch.rand(*BATCH, generator=g) + 0.1},
        },
        batch_size=BATCH,
    )


def leaves(td: Any) -> list[torch.Tensor]:
    return [td[p] for p in PATHS]


def expect(result: Any, fn: Callable[..., torch.Tensor], *tds: Any, batch_size: Any) -> None:
    """``result`` is a TensorDict of ``batch_size`` whose leaves equal ``fn(leaf, *other_leaves)``."""
    assert isinstance(result, TensorDict), type(result)
    assert result.batch_size == torch.Size(batch_size)
    assert set(result.keys(True, True)) == {"a", ("nested", "b")}
    for i, path in enumerate(PATHS):
        want = fn(*(leaves(td)[i] for td in tds))
        torch.testing.assert_close(result[path], want, equal_nan=True, msg=f"at {path}")


def _feat(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape[len(BATCH) :])


# ---------------------------------------------------------------------------------------- cases
def _stack(td: TensorDict) -> None:
    other = make_td(1)
    expect(torch.stack([td, other], 1), lambda x, y: torch.stack([x, y], 1), td, other, batch_size=(3, 2, 4))
    out = torch.stack([td, other]).zero_()
    assert torch.stack([td, other], out=out) is out
    expect(out, lambda x, y: torch.stack([x, y]), td, other, batch_size=(2, 3, 4))


def _cat_with(fn: Callable[..., Any]) -> Callable[[TensorDict], None]:
    def case(td: TensorDict) -> None:
        other = make_td(1)
        expect(fn([td, other], 1), lambda x, y: torch.cat([x, y], 1), td, other, batch_size=(3, 8))
        expect(fn([td, other]), lambda x, y: torch.cat([x, y]), td, other, batch_size=(6, 4))

    return case


def _unbind(td: TensorDict) -> None:
    parts = torch.unbind(td, 1)
    assert len(parts) == 4
    for i, part in enumerate(parts):
        expect(part, lambda x, i=i: x[:, i], td, batch_size=(3,))


def _split(td: TensorDict) -> None:
    parts = torch.split(td, [1, 3], 1)
    expect(parts[0], lambda x: x[:, :1], td, batch_size=(3, 1))
    expect(parts[1], lambda x: x[:, 1:], td, batch_size=(3, 3))


def _chunk(td: TensorDict) -> None:
    parts = torch.chunk(td, 3, 0)
    assert len(parts) == 3
    for i, part in enumerate(parts):
        expect(part, lambda x, i=i: x[i : i + 1], td, batch_size=(1, 4))


def _where(td: TensorDict) -> None:
    other = make_td(1)
    cond = td["nested", "b"] > 0.5

    def pick(x: torch.Tensor, y: Any) -> torch.Tensor:
        return torch.where(cond.reshape(*BATCH, *[1] * (x.ndim - 2)), x, y)

    expect(torch.where(cond, td, other), pick, td, other, batch_size=BATCH)
    expect(torch.where(cond, td, 0.0), lambda x: pick(x, torch.zeros(())), td, batch_size=BATCH)
    # TensorDict as the "other" operand: condition is flipped
    expect(
        torch.where(cond, 0.0, td),
        lambda x: torch.where(cond.reshape(*BATCH, *[1] * (x.ndim - 2)), torch.zeros(()), x),
        td,
        batch_size=BATCH,
    )


def _like(name: str, *args: Any, check_values: bool = True) -> Callable[[TensorDict], None]:
    def case(td: TensorDict) -> None:
        out = getattr(torch, name)(td, *args)
        assert isinstance(out, TensorDict)
        assert out.batch_size == td.batch_size
        for path, x in zip(PATHS, leaves(td), strict=True):
            assert out[path].shape == x.shape
            assert out[path].dtype == x.dtype
            assert out[path].data_ptr() != x.data_ptr()
        if check_values:
            expect(out, lambda x: getattr(torch, name)(x, *args), td, batch_size=BATCH)

    return case


def _random_like(name: str, *args: Any) -> Callable[[TensorDict], None]:
    def case(td: TensorDict) -> None:
        torch.manual_seed(0)
        out = getattr(torch, name)(td, *args)
        torch.manual_seed(0)
        expect(out, lambda x: getattr(torch, name)(x, *args), td, batch_size=BATCH)

    return case


def _reduction(name: str) -> Callable[[TensorDict], None]:
    fn = getattr(torch, name)

    def case(td: TensorDict) -> None:
        expect(fn(td, 0), lambda x: fn(x, 0), td, batch_size=(4,))
        expect(fn(td, 1, keepdim=True), lambda x: fn(x, 1, keepdim=True), td, batch_size=(3, 1))
        expect(fn(td), lambda x: fn(x), td, batch_size=())

    return case


def _bool_reduction(name: str) -> Callable[[TensorDict], None]:
    fn = getattr(torch, name)

    def case(td: TensorDict) -> None:
        mask = td > 0.5
        expect(fn(mask, 0), lambda x: fn(x, 0), mask, batch_size=(4,))
        result = fn(mask)
        assert result == bool(fn(torch.stack([fn(x) for x in leaves(mask)])))
        assert fn(td > 0.0) is True

    return case


def _shape_case(
    call: Callable[[Any], Any], per_leaf: Callable[[torch.Tensor], torch.Tensor], batch_size: tuple[int, ...]
) -> Callable[[TensorDict], None]:
    return lambda td: expect(call(td), per_leaf, td, batch_size=batch_size)


def _masked_select(td: TensorDict) -> None:
    mask = td["nested", "b"] > 0.5
    n = int(mask.sum())
    expect(torch.masked_select(td, mask), lambda x: x[mask], td, batch_size=(n,))


def _masked_fill(td: TensorDict) -> None:
    mask = td["nested", "b"] > 0.5
    expect(
        torch.masked_fill(td, mask, -1.0),
        lambda x: x.masked_fill(mask.reshape(*BATCH, *[1] * (x.ndim - 2)), -1.0),
        td,
        batch_size=BATCH,
    )


def _gather(td: TensorDict) -> None:
    index = torch.tensor([[2, 0, 1, 2], [0, 0, 0, 0]])

    def per_leaf(x: torch.Tensor) -> torch.Tensor:
        idx = index.reshape(*index.shape, *[1] * (x.ndim - 2)).expand(*index.shape, *_feat(x))
        return torch.gather(x, 0, idx)

    expect(torch.gather(td, 0, index), per_leaf, td, batch_size=(2, 4))


def _clone(td: TensorDict) -> None:
    out = torch.clone(td)
    expect(out, lambda x: x, td, batch_size=BATCH)
    assert all(o.data_ptr() != x.data_ptr() for o, x in zip(leaves(out), leaves(td), strict=True))


def _repeat_interleave(td: TensorDict) -> None:
    expect(
        torch.repeat_interleave(td, 2, dim=1),
        lambda x: torch.repeat_interleave(x, 2, dim=1),
        td,
        batch_size=(3, 8),
    )


def _loss(fn: Callable[..., torch.Tensor]) -> Callable[[TensorDict], None]:
    def case(td: TensorDict) -> None:
        target = make_td(1)
        expect(fn(td, target, reduction="none"), lambda x, y: fn(x, y, reduction="none"), td, target, batch_size=BATCH)
        expect(fn(td, target), lambda x, y: fn(x, y), td, target, batch_size=())  # mean, leaf by leaf
        expect(fn(td, target, reduction="sum"), lambda x, y: fn(x, y, reduction="sum"), td, target, batch_size=())
        with pytest.raises(ValueError, match="invalid reduction 'max'"):
            fn(td, target, reduction="max")
        with pytest.raises(TypeError, match="needs a TensorDict target"):
            fn(td, torch.zeros(3, 4))
        with pytest.raises(KeyError, match="The second TD has keys \\{'c'\\}"):
            fn(td, target.set("c", torch.zeros(BATCH)))

    return case


def _smooth_l1_beta(td: TensorDict) -> None:
    _loss(torch.nn.functional.smooth_l1_loss)(td)
    target = td * 1.5
    expect(
        torch.nn.functional.smooth_l1_loss(td, target, beta=0.01, reduction="none"),
        lambda x, y: torch.nn.functional.smooth_l1_loss(x, y, beta=0.01, reduction="none"),
        td,
        target,
        batch_size=BATCH,
    )


def _grad(td: TensorDict) -> None:
    x = td.clone().requires_grad_()
    y = x * x
    g = torch.autograd.grad(y, x, torch.ones_like(y), retain_graph=True)
    expect(g, lambda v: 2 * v, td, batch_size=BATCH)
    expect(torch.autograd.grad((y,), (x,), (y.detach(),)), lambda v: 2 * v * v * v, td, batch_size=BATCH)
    w = x.clone().set("c", torch.ones(BATCH, requires_grad=True))  # w["c"] is unused below
    v = w.select("a", "nested") * 3
    g = torch.autograd.grad(v, w, torch.ones_like(v), allow_unused=True)  # the unused leaf is left out
    expect(g, lambda t: torch.full_like(t, 3.0), td, batch_size=BATCH)
    with pytest.raises(ValueError, match="only supports a single output"):
        torch.autograd.grad((y, y), x)
    with pytest.raises(ValueError, match="only supports TensorDictBase as grad_output"):
        torch.autograd.grad(y, x, torch.ones(3, 4))


def _tensor_split(td: TensorDict) -> None:
    parts = torch.tensor_split(td, 3, 1)
    assert [p.batch_size for p in parts] == [torch.Size([3, 2]), torch.Size([3, 1]), torch.Size([3, 1])]
    expect(parts[0], lambda x: x[:, :2], td, batch_size=(3, 2))
    expect(torch.tensor_split(td, [1], 0)[1], lambda x: x[1:], td, batch_size=(2, 4))


def _scan(name: str) -> Callable[[TensorDict], None]:
    def case(td: TensorDict) -> None:
        out = getattr(torch, name)(td, 1)
        expect(out.values, lambda x: getattr(torch, name)(x, 1).values, td, batch_size=BATCH)
        expect(out.indices, lambda x: getattr(torch, name)(x, 1).indices, td, batch_size=BATCH)

    return case


def _cases_new() -> dict[Callable[..., Any], Callable[[TensorDict], None]]:
    """The tensor-like batch-dim maps, softmax and the scans/quantiles (issue 16)."""
    swap = (lambda x: x.transpose(0, 1), (4, 3))
    return {
        torch.flip: _shape_case(lambda td: torch.flip(td, (1,)), lambda x: x.flip(1), BATCH),
        torch.fliplr: _shape_case(torch.fliplr, lambda x: x.flip(1), BATCH),
        torch.flipud: _shape_case(torch.flipud, lambda x: x.flip(0), BATCH),
        torch.roll: _shape_case(lambda td: torch.roll(td, 1, 1), lambda x: x.roll(1, 1), BATCH),
        torch.movedim: _shape_case(lambda td: torch.movedim(td, 0, 1), *swap),
        torch.moveaxis: _shape_case(lambda td: torch.moveaxis(td, 1, 0), *swap),
        torch.swapaxes: _shape_case(lambda td: torch.swapaxes(td, 0, 1), *swap),
        torch.swapdims: _shape_case(lambda td: torch.swapdims(td, 1, 0), *swap),
        torch.narrow: _shape_case(lambda td: torch.narrow(td, 1, 1, 2), lambda x: x[:, 1:3], (3, 2)),
        torch.tile: _shape_case(
            lambda td: torch.tile(td, (2,)), lambda x: x.repeat(1, 2, *([1] * (x.ndim - 2))), (3, 8)
        ),
        torch.tensor_split: _tensor_split,
        torch.rot90: _shape_case(torch.rot90, lambda x: x.rot90(1, (0, 1)), (4, 3)),
        torch.broadcast_to: _shape_case(
            lambda td: torch.broadcast_to(td, (2, 3, 4)), lambda x: x.expand(2, *x.shape), (2, 3, 4)
        ),
        torch.atleast_1d: _shape_case(torch.atleast_1d, lambda x: x, BATCH),
        torch.atleast_2d: _shape_case(torch.atleast_2d, lambda x: x, BATCH),
        torch.atleast_3d: _shape_case(torch.atleast_3d, lambda x: x[None], (1, 3, 4)),
        torch.softmax: _shape_case(lambda td: torch.softmax(td, 0), lambda x: x.softmax(0), BATCH),
        torch.logsumexp: _shape_case(lambda td: torch.logsumexp(td, 1), lambda x: x.logsumexp(1), (3,)),
        torch.cummax: _scan("cummax"),
        torch.cummin: _scan("cummin"),
        torch.quantile: _shape_case(lambda td: torch.quantile(td, 0.25, 0), lambda x: x.quantile(0.25, 0), (4,)),
    }


_BITWISE = {
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    *(f"__{r}{op}__" for r in ("", "r") for op in ("and", "or", "xor")),
}


def _tensor_method(name: str) -> Callable[[TensorDict], None]:
    """``Tensor.<name>(tensor, td)`` (what ``tensor * td`` calls, and dynamo for ``td * tensor``): leaf-wise."""
    fn = getattr(torch.Tensor, name)

    def case(td: TensorDict) -> None:
        t = torch.tensor(0.7)
        if name in _BITWISE:
            td, t = td > 0.5, torch.tensor(True)
        expect(fn(t, td), lambda x: fn(t, x), td, batch_size=BATCH)
        if isinstance(fn, types.FunctionType):  # a Python method of Tensor also takes the TensorDict first
            expect(fn(td, t), lambda x: fn(x, t), td, batch_size=BATCH)

    return case


CASES: dict[Callable[..., Any], Callable[[TensorDict], None]] = {
    **_cases_new(),
    **{getattr(torch.Tensor, name): _tensor_method(name) for name in TENSOR_METHODS},
    torch.nn.functional.l1_loss: _loss(torch.nn.functional.l1_loss),
    torch.nn.functional.mse_loss: _loss(torch.nn.functional.mse_loss),
    torch.nn.functional.smooth_l1_loss: _smooth_l1_beta,
    torch.autograd.grad: _grad,
    torch.stack: _stack,
    torch.cat: _cat_with(torch.cat),
    torch.concat: _cat_with(torch.concat),
    torch.concatenate: _cat_with(torch.concatenate),
    torch.unbind: _unbind,
    torch.split: _split,
    torch.chunk: _chunk,
    torch.permute: _shape_case(
        lambda td: torch.permute(td, (1, 0)), lambda x: x.permute(1, 0, *range(2, x.ndim)), (4, 3)
    ),
    torch.reshape: _shape_case(lambda td: torch.reshape(td, (-1,)), lambda x: x.reshape(-1, *_feat(x)), (12,)),
    torch.squeeze: _shape_case(lambda td: torch.squeeze(td.unsqueeze(1), 1), lambda x: x, BATCH),
    torch.unsqueeze: _shape_case(lambda td: torch.unsqueeze(td, 1), lambda x: x.unsqueeze(1), (3, 1, 4)),
    torch.flatten: _shape_case(lambda td: torch.flatten(td, 0, 1), lambda x: x.flatten(0, 1), (12,)),
    torch.unflatten: _shape_case(
        lambda td: torch.unflatten(td, 1, (2, 2)), lambda x: x.unflatten(1, (2, 2)), (3, 2, 2)
    ),
    torch.transpose: _shape_case(lambda td: torch.transpose(td, 0, 1), lambda x: x.transpose(0, 1), (4, 3)),
    torch.gather: _gather,
    torch.clone: _clone,
    torch.masked_select: _masked_select,
    torch.masked_fill: _masked_fill,
    torch.where: _where,
    torch.repeat_interleave: _repeat_interleave,
    **{
        getattr(torch, n): _reduction(n)
        for n in ("sum", "mean", "nansum", "nanmean", "prod", "std", "var", "amax", "amin")
    },
    **{getattr(torch, n): _bool_reduction(n) for n in ("all", "any")},
    torch.zeros_like: _like("zeros_like"),
    torch.ones_like: _like("ones_like"),
    torch.empty_like: _like("empty_like", check_values=False),
    torch.full_like: _like("full_like", 7.0),
    torch.rand_like: _random_like("rand_like"),
    torch.randn_like: _random_like("randn_like"),
    torch.randint_like: _random_like("randint_like", 10),
}


def _id(fn: Any) -> str:
    return getattr(fn, "__name__", repr(fn))


# (the Python-level Tensor methods are found by identity, apart from the dict: torch_function.py says why)
NOT_TABLE = [fn for fn in HANDLED if fn not in TORCH_FUNCTIONS] + [fn for fn, _ in PYTHON_TENSOR_METHODS]


def test_every_entry_has_a_case() -> None:
    missing = sorted(map(_id, set(NOT_TABLE) - set(CASES)))
    stale = sorted(map(_id, set(CASES) - set(NOT_TABLE)))
    assert not missing, f"HANDLED entries without a case in CASES: {missing}"
    assert not stale, f"CASES for torch functions no longer in HANDLED: {stale}"


@pytest.mark.parametrize("torch_fn", NOT_TABLE, ids=_id)
def test_handled(torch_fn: Callable[..., Any]) -> None:
    case = CASES.get(torch_fn)
    if case is None:
        pytest.fail(f"no case for {_id(torch_fn)} (add one to CASES)")
    td = make_td()
    before = [x.clone() for x in leaves(td)]
    case(td)
    for x, b in zip(leaves(td), before, strict=True):  # no case mutates its input
        torch.testing.assert_close(x, b)


def test_unknown_torch_function_returns_not_implemented() -> None:
    td = make_td()
    assert torch.cumsum not in HANDLED
    assert td.__torch_function__(torch.cumsum, (type(td),), (td, 0)) is NotImplemented
    with pytest.raises(TypeError):
        torch.cumsum(td, 0)
    with pytest.raises(TypeError):
        torch.nn.functional.relu(td)


def test_tensor_first_operand_raises_type_error() -> None:
    # torch functions whose first argument is a tensor end in Tensor.<op>, which is not handled
    with pytest.raises(TypeError):
        torch.add(torch.ones(*BATCH), make_td())


def test_number_first_operand_raises_type_error() -> None:
    with pytest.raises(TypeError):
        torch.mul(2, make_td())
