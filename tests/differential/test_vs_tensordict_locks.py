"""Differential tests: which results keep the lock of the TensorDict an operation is called on.

tensordict 0.15.3 locks the results of its pointwise math, casts, moves and shape views when the input is locked,
and gives unlocked results for indexing, copies, comparisons, clamp, reductions (but ``norm``), apply,
select/exclude, stack/cat and ``new_*``: the same table here (``tensorbatch/_base/locks.py``). Each case
compares the result's ``is_locked`` (and its nested TensorDict's) with the reference, op by op.
"""

from __future__ import annotations

import pytest
import torch

from ._diff import case

pytestmark = pytest.mark.differential

_MASK = torch.tensor([True, False, True, True])
_ROWS = torch.ones(4, 5, dtype=torch.bool)


def _locks(op):
    """``op(lib, td)`` on ``td`` locked: the result's lock and its nested TensorDict's (or the first of a tuple)."""

    def fn(lib, td):
        out = op(lib, td.lock_())
        first = out[0] if isinstance(out, tuple | list) else out
        nested = first.get("nested", None) if hasattr(first, "get") else None
        return first.is_locked, None if nested is None else nested.is_locked

    return fn


OPS = {
    # pointwise math and operators: kept (clamp and comparisons: dropped)
    "add": lambda lib, td: td.add(td),
    "plus": lambda lib, td: td + 1,
    "radd": lambda lib, td: 1 + td,
    "minus_td": lambda lib, td: td - td,
    "rsub": lambda lib, td: 1 - td,
    "times": lambda lib, td: td * 2,
    "div": lambda lib, td: td / 2,
    "rdiv": lambda lib, td: 2 / (td + 1),
    "pow": lambda lib, td: td**2,
    "mod": lambda lib, td: td % 2,
    "neg": lambda lib, td: -td,
    "abs_fn": lambda lib, td: abs(td),
    "exp": lambda lib, td: td.exp(),
    "sigmoid": lambda lib, td: td.sigmoid(),
    "isnan": lambda lib, td: td.isnan(),
    "maximum": lambda lib, td: td.maximum(td),
    "clamp_min": lambda lib, td: td.clamp_min(0.5),
    "lerp": lambda lib, td: td.lerp(td, 0.5),
    "addcmul": lambda lib, td: td.addcmul(td, td),
    "clamp": lambda lib, td: td.clamp(0, 1),
    "eq_op": lambda lib, td: td == 0,
    "lt_op": lambda lib, td: td < 0,
    "and_op": lambda lib, td: td.bool() & td.bool(),
    "or_op": lambda lib, td: td.bool() | td.bool(),
    "invert": lambda lib, td: ~td.bool(),
    "torch_exp": lambda lib, td: torch.exp(td),
    "torch_add": lambda lib, td: torch.add(td, 1),
    "torch_clamp": lambda lib, td: torch.clamp(td, 0, 1),
    # casts and moves: kept
    "double": lambda lib, td: td.double(),
    "bool": lambda lib, td: td.bool(),
    "to_dtype": lambda lib, td: td.to(torch.float64),
    "to_device": lambda lib, td: td.to("cpu"),
    "cpu": lambda lib, td: td.cpu(),
    "detach": lambda lib, td: td.detach(),
    "data": lambda lib, td: td.data,
    "view_dtype": lambda lib, td: td.view(torch.int32),
    "type": lambda lib, td: td.type(torch.float64),
    # shape views: kept
    "view": lambda lib, td: td.view(-1),
    "reshape": lambda lib, td: td.reshape(-1),
    "torch_reshape": lambda lib, td: torch.reshape(td, (20,)),
    "permute": lambda lib, td: td.permute(1, 0),
    "transpose": lambda lib, td: td.transpose(0, 1),
    "unsqueeze": lambda lib, td: td.unsqueeze(0),
    "squeeze": lambda lib, td: td.unsqueeze(0).squeeze(0),
    "flatten": lambda lib, td: td.flatten(0, 1),
    "unflatten": lambda lib, td: td.unflatten(0, (2, 2)),
    "expand": lambda lib, td: td.expand(2, 4, 5),
    "split": lambda lib, td: td.split(2),
    "chunk": lambda lib, td: td.chunk(2),
    "torch_split": lambda lib, td: torch.split(td, 2),
    "tensor_split": lambda lib, td: td.tensor_split(2),
    "movedim": lambda lib, td: td.movedim(0, 1),
    "repeat": lambda lib, td: td.repeat(2, 1),
    "repeat_interleave": lambda lib, td: td.repeat_interleave(2, dim=0),
    "roll": lambda lib, td: td.roll(1, 0),
    "flip": lambda lib, td: td.flip(0),
    "narrow": lambda lib, td: td.narrow(0, 0, 2),
    "where": lambda lib, td: td.where(_ROWS, 0.0),
    "torch_where": lambda lib, td: torch.where(_ROWS, td, 0.0),
    "norm": lambda lib, td: td.norm(),
    "zeros_like": lambda lib, td: torch.zeros_like(td),
    "full_like": lambda lib, td: torch.full_like(td, 2.0),
    # dropped
    "index_int": lambda lib, td: td[0],
    "index_slice": lambda lib, td: td[:2],
    "index_mask": lambda lib, td: td[_MASK],
    "clone": lambda lib, td: td.clone(),
    "copy": lambda lib, td: td.copy(),
    "contiguous": lambda lib, td: td.contiguous(),
    "apply": lambda lib, td: td.apply(lambda x: x + 1),
    "select": lambda lib, td: td.select("a"),
    "masked_fill": lambda lib, td: td.masked_fill(_ROWS, 0.0),
    "sum": lambda lib, td: td.sum(),
    "mean_dim": lambda lib, td: td.mean(0),
    "amax_dim": lambda lib, td: td.amax(0),
    "softmax": lambda lib, td: td.softmax(0),
    "unbind": lambda lib, td: td.unbind(0),
    "stack": lambda lib, td: torch.stack([td, td]),
    "cat": lambda lib, td: torch.cat([td, td]),
    "new_zeros": lambda lib, td: td.new_zeros(2),
    "to_tensordict": lambda lib, td: td.to_tensordict(),
    "flatten_keys": lambda lib, td: td.flatten_keys(),
    "empty": lambda lib, td: td.empty(),
}
CASES = [case(name, _locks(op)) for name, op in OPS.items()]


@pytest.mark.parametrize(("fn", "kw"), CASES)
def test_result_lock(run_both, fn, kw):
    run_both(fn, **kw)


def test_lazy_stack_results_keep_the_lock_too():
    import tensorbatch as tb

    stack = tb.lazy_stack([tb.TensorDict(a=torch.ones(3), batch_size=[3]) for _ in range(2)]).lock_()
    assert (stack + 1).is_locked and stack.exp().is_locked and stack.unsqueeze(0).is_locked
    assert not stack.clone().is_locked
    out = stack.double()
    out_members = out.tensordicts
    assert all(member.is_locked for member in out_members)


def test_locked_result_refuses_new_keys_and_the_input_is_unchanged():
    import tensorbatch as tb

    td = tb.TensorDict(a=torch.ones(3), batch_size=[3]).lock_()
    out = td * 2
    with pytest.raises(RuntimeError, match="locked"):
        out["b"] = torch.zeros(3)
    assert list(out.keys()) == ["a"] and torch.equal(out["a"], torch.full((3,), 2.0))
    assert (td + 1).unlock_().set("b", torch.zeros(3))["b"].shape == (3,)


_LAZY_INDICES = {
    "member": 0,
    "members": slice(0, 1),
    "off_int": (slice(None), 1),
    "off_slice": (slice(None), slice(0, 2)),
    "off_list": (slice(None), [0, 2]),
    "mask": torch.tensor([True, False]),
}


@pytest.mark.parametrize("index", list(_LAZY_INDICES.values()), ids=list(_LAZY_INDICES))
def test_indexing_a_locked_lazy_stack_gives_locked_results(ref, tb, index):
    def locks(lib):
        a = lib.TensorDict(x=torch.zeros(3, 4), batch_size=[3, 4])
        out = lib.lazy_stack([a, a.clone()], 0).lock_()[index]
        return type(out).__name__, out.is_locked, [m.is_locked for m in getattr(out, "tensordicts", [])]

    expected = locks(ref)
    assert expected[1] is True  # the premise: tensordict locks every one of them
    assert locks(tb) == expected
