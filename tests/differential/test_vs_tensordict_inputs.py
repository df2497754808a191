"""Differential tests: inputs tensordict 0.15.3 accepts (keyword forms, setters, torch functions, custom inits)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ._diff import build, case, other_td

pytestmark = pytest.mark.differential

MASK = torch.tensor([True, False, True, False])


def _lock_setter(lib: Any, td: Any) -> Any:
    seen = []
    td.is_locked = True
    seen.append((td.is_locked, td["nested"].is_locked))
    td.is_locked = False
    seen.append((td.is_locked, td["nested"].is_locked))
    td["new"] = torch.zeros(4, 5)  # unlocked again: a new key is accepted
    return seen


def _set_locked_then_write(lib: Any, td: Any) -> Any:
    td.is_locked = True
    td["new"] = torch.zeros(4, 5)


def _where_pad(condition: torch.Tensor, pad: Any, flip: bool = False, part: Any = None) -> Any:
    def fn(lib: Any, td: Any) -> Any:
        other = td.empty() if part is None else td.select(*part)
        return other.where(condition, td, pad=pad) if flip else td.where(condition, other, pad=pad)

    return fn


def _grads(lib: Any, td: Any, **kwargs: Any) -> Any:
    x = td.clone().requires_grad_()
    y = x * x + 1
    return torch.autograd.grad(y, x, y.detach(), **kwargs)


def _grad_unused(lib: Any, td: Any) -> Any:
    x = td.clone().requires_grad_()
    y = x.exclude("b") * 3
    return torch.autograd.grad(y, x, torch.ones_like(y), allow_unused=True)


def _grad_tuples(lib: Any, td: Any) -> Any:
    x = td.clone().requires_grad_()
    y = x * 2
    return torch.autograd.grad((y,), (x,), (torch.ones_like(y),))


def _grad_two_outputs(lib: Any, td: Any) -> Any:
    x = td.clone().requires_grad_()
    return torch.autograd.grad((x * 2, x * 3), x)


def _loss(fn: Any, **kwargs: Any) -> Any:
    return lambda lib, td: fn(td, other_td(lib), **kwargs)


def _consolidate_future(lib: Any, td: Any) -> Any:
    future = td.consolidate(return_early=True, num_threads=2)
    # the values (tensordict also locks a consolidated result; tensorbatch keeps the source's lock)
    return future.result().to_dict()


def _mask(n: int = 4) -> torch.Tensor:
    return MASK[:n]


INPUTS = [
    # is_locked is a setter
    case("is_locked_setter", _lock_setter),
    case("is_locked_set_refuses_new_key", _set_locked_then_write, raises=RuntimeError),
    # update(**kwargs)
    case("update_kwargs", lambda lib, td: td.update(c=torch.ones(4, 5))),
    case("update_dict_and_kwargs", lambda lib, td: td.update({"b": torch.zeros(4, 5)}, c=torch.ones(4, 5))),
    case("update_kwargs_override", lambda lib, td: td.update({"c": torch.zeros(4, 5)}, c=torch.ones(4, 5))),
    case("update_no_args", lambda lib, td: td.update()),
    case("update_kwargs_nested", lambda lib, td: td.update(nested={"e": torch.ones(4, 5)})),
    case("update_kwargs_bad_shape", lambda lib, td: td.update(c=torch.ones(3)), raises=RuntimeError),
    # keyword forms of methods
    case("select_as_tensordict", lambda lib, td: td.select("a", ("nested", "c"), as_tensordict=True)),
    case("permute_dims_kw", lambda lib, td: td.permute(dims=(1, 0))),
    case("permute_dims_kw_list", lambda lib, td: td.permute(dims=[1, 0])),
    case("permute_dims_and_args", lambda lib, td: td.permute(1, dims=(1, 0)), raises=TypeError),
    case("contiguous_canonical", lambda lib, td: td.contiguous(canonical=True)),
    case("contiguous_inplace", lambda lib, td: td.transpose(0, 1).contiguous(inplace=True)),
    case("new_empty_empty_lazy", lambda lib, td: td.new_empty((2,), empty_lazy=True).shape),
    case("new_zeros_dtype", lambda lib, td: td.new_zeros(2, 3, dtype=torch.float64, empty_lazy=False)),
    case("new_ones_requires_grad", lambda lib, td: td.new_ones([2], requires_grad=True)["a"].requires_grad),
    case("new_full_device", lambda lib, td: td.new_full((2,), 3.0, device="cpu")),
    case("consolidate_return_early_threads", _consolidate_future),
    # where with pad: the missing side padded
    case("where_pad_empty_self", _where_pad(~_mask(), 1, flip=True), batch_size=(4,), data="mixed"),
    case("where_pad_empty_other", _where_pad(_mask(), -1), batch_size=(4,), data="mixed"),
    case("where_pad_part_other", _where_pad(_mask(), 0, part=("x",)), batch_size=(4,), data="mixed"),
    case("where_pad_part_self", _where_pad(_mask(), 2, flip=True, part=("x", "nested")), batch_size=(4,), data="mixed"),
    case("where_no_pad_missing", _where_pad(_mask(), None, flip=True), batch_size=(4,), data="mixed", raises=KeyError),
    # torch.nn.functional losses
    *[
        case(f"{fn.__name__}_{reduction}", _loss(fn, reduction=reduction))
        for fn in (F.l1_loss, F.mse_loss, F.smooth_l1_loss)
        for reduction in ("none", "mean", "sum")
    ],
    case("l1_loss_default", _loss(F.l1_loss)),
    case("mse_loss_bad_reduction", _loss(F.mse_loss, reduction="max"), raises=ValueError),
    case("smooth_l1_loss_beta", _loss(F.smooth_l1_loss, reduction="none", beta=0.01)),
    # torch.autograd.grad
    case("autograd_grad", _grads),
    case("autograd_grad_tuples", _grad_tuples),
    case("autograd_grad_unused", _grad_unused),
    case("autograd_grad_two_outputs", _grad_two_outputs, raises=ValueError),
]


@pytest.mark.parametrize(("fn", "kw"), INPUTS)
def test_inputs(run_both, fn, kw):
    run_both(fn, **kw)


def _tensorclasses(lib: Any) -> Any:
    class Custom(lib.TensorClass):
        a: torch.Tensor
        b: torch.Tensor = None
        c: int = 7

        def __init__(self, a):
            self.a = a * 2

    class CustomBatch(Custom):
        d: torch.Tensor = None

        def __init__(self, a, d, batch_size=None):
            super().__init__(a)
            self.d = d
            self.batch_size = batch_size

    @lib.tensorclass
    class Decorated:
        a: torch.Tensor

        def __init__(self, a, batch_size=None):
            self.a = a
            self.batch_size = batch_size

    return Custom, CustomBatch, Decorated


def _tc_case(make: Any) -> Any:
    def fn(lib: Any, td: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = make(*_tensorclasses(lib), td)
        if not hasattr(obj, "to_tensordict"):
            return obj
        return type(obj).__name__, obj.to_tensordict(), obj.c if hasattr(obj, "c") else None, obj.is_locked

    return fn


TENSORCLASS_INIT = [
    case("custom_init_batch_kw", _tc_case(lambda C, CB, D, td: C(td["b"], batch_size=[4, 5]))),
    case("custom_init_batch_int", _tc_case(lambda C, CB, D, td: C(td["b"], batch_size=4))),
    case(
        "custom_init_device_names",
        _tc_case(lambda C, CB, D, td: C(td["b"], batch_size=[4, 5], device="cpu", names=["x", "y"]).names),
    ),
    case("custom_init_lock", _tc_case(lambda C, CB, D, td: C(td["b"], batch_size=[4], lock=True))),
    case("custom_init_empty_batch", _tc_case(lambda C, CB, D, td: D(td["a"], ()))),
    case("custom_init_declares_batch", _tc_case(lambda C, CB, D, td: CB(td["b"], td["a"], [4, 5]))),
    case("custom_init_declares_batch_kw", _tc_case(lambda C, CB, D, td: CB(td["b"], td["a"], batch_size=[4]))),
    case("decorated_custom_init", _tc_case(lambda C, CB, D, td: D(td["a"], [4, 5]))),
    case("custom_init_bad_batch", _tc_case(lambda C, CB, D, td: C(td["b"], batch_size=[3])), raises=RuntimeError),
]


@pytest.mark.parametrize(("fn", "kw"), TENSORCLASS_INIT)
def test_tensorclass_init(run_both, fn, kw):
    run_both(fn, **kw)


def test_select_as_tensordict_on_tensorclass(ref, tb):
    """A TensorClass's ``select(..., as_tensordict=True)`` is the plain TensorDict (as the reference's)."""
    results = []
    for lib in (ref, tb):

        class TC(lib.TensorClass):
            a: torch.Tensor
            b: torch.Tensor

        tc = TC(a=torch.zeros(3, 2), b=torch.ones(3), batch_size=[3])
        plain, typed = tc.select("a", as_tensordict=True), tc.select("a")
        results.append(
            (type(plain).__name__, sorted(plain.keys()), type(typed).__name__, isinstance(plain, lib.TensorDict))
        )
    assert results[0] == results[1] == [("TensorDict", ["a"], "TC", True)][0]


def test_is_locked_setter_on_lazy_stacks(ref, tb):
    for lib in (ref, tb):
        lazy = lib.LazyStackedTensorDict(*[build(lib, "float", (5,)) for _ in range(2)], stack_dim=0)
        lazy.is_locked = True
        assert lazy.is_locked, lib.__name__
        assert lazy.tensordicts[0].is_locked, lib.__name__
        lazy.is_locked = False
        assert not lazy.is_locked, lib.__name__
        assert not lazy.tensordicts[1].is_locked, lib.__name__
