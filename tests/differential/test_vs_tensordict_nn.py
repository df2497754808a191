"""Differential tests, parameters as TensorDicts: from_module, from_modules, to_module, TensorDictParams.

Each case builds the same modules (same seed) for both libraries and compares a summary of the result:
class name, batch size, and per leaf its key, tensor class (Parameter or not), shape, requires_grad and
values; for modules, which attributes are registered parameters and their values.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.differential


def _modules(n: int = 1) -> list[nn.Module]:
    torch.manual_seed(0)
    out = []
    for _ in range(n):
        m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4))
        m[0].bias.requires_grad_(False)
        out.append(m)
    return out


def summary(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (type(value).__name__, tuple(value.shape), value.requires_grad, value.detach().tolist())
    if isinstance(value, nn.Module) and not hasattr(value, "batch_size"):
        return (
            "module",
            sorted(value._parameters),
            sorted(value._buffers),
            {k: summary(v) for k, v in value.state_dict(keep_vars=True).items()},
        )
    if hasattr(value, "batch_size"):
        leaves = {k: summary(v) for k, v in value.items(True, True)}
        return (type(value).__name__, tuple(value.batch_size), bool(value.is_locked), leaves)
    if isinstance(value, (list, tuple)):
        return [summary(v) for v in value]
    return value


def run(lib: Any, fn: Any) -> Any:
    try:
        return summary(fn(lib))
    except Exception as e:  # the error type is part of the behaviour
        return ("raises", type(e).__name__)


def check(ref: Any, tb: Any, fn: Any) -> None:
    want, got = run(ref, fn), run(tb, fn)
    assert got == want


def _params_cls(lib: Any) -> Any:
    return __import__(f"{lib.__name__}.nn", fromlist=["TensorDictParams"]).TensorDictParams


def _swap_summary(lib: Any, **kwargs: Any) -> Any:
    (m,) = _modules()
    new = lib.TensorDict.from_module(m).detach().clone().apply(lambda t: t + 1)
    swap = new.to_module(m, **kwargs)
    return [swap, m, {k: type(v).__name__ for k, v in m[0]._parameters.items()}]


def _ctx(lib: Any) -> Any:
    (m,) = _modules()
    new = lib.TensorDict.from_module(m).detach().clone().zero_()
    with new.to_module(m):
        inside = m[0](torch.ones(1, 3))
    return [inside, m]


def _ctx_raises(lib: Any) -> Any:
    (m,) = _modules()
    new = lib.TensorDict.from_module(m).detach().clone().zero_()
    try:
        with new.to_module(m):
            raise ValueError
    except ValueError:
        pass
    return m


def _state_dict_part(lib: Any) -> Any:
    (m,) = _modules()
    m[2].register_buffer("scratch", torch.ones(4), persistent=False)
    new = lib.TensorDict({"0": {"weight": torch.zeros(4, 3)}, "2": {"scratch": torch.zeros(4)}})
    with new.to_module(m, use_state_dict=True) as swap:
        inside = summary(m)
    return [inside, swap, m]


def _state_dict_grads(lib: Any) -> Any:
    (m,) = _modules()
    new = lib.TensorDict.from_module(m).detach().clone().apply(lambda t: t.requires_grad_(t.is_floating_point()))
    with new.to_module(m, use_state_dict=True):
        m[0](torch.ones(1, 3)).sum().backward()
    return [new["0", "weight"].grad, new["0", "bias"].grad]


class _Extra(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.state: Any = {"step": 3, "t": torch.ones(2)}

    def get_extra_state(self) -> Any:
        return self.state

    def set_extra_state(self, state: Any) -> None:
        self.state = state


def _extra_state(lib: Any, use_state_dict: bool) -> Any:
    torch.manual_seed(0)
    m = nn.Sequential(_Extra())
    params = lib.TensorDict.from_module(m, use_state_dict=True)
    m[0].state = {"step": 5, "t": torch.zeros(2)}
    with params.to_module(m, use_state_dict=use_state_dict) as swap:
        inside = [sorted(m[0].state.items()), sorted(swap["0", "_extra_state"].to_dict().items())]
    return [inside, sorted(m[0].state.items()), sorted(params["0", "_extra_state"].to_dict().items())]


def _ensemble(lib: Any, lazy: bool) -> Any:
    torch.manual_seed(0)
    modules = [nn.Linear(3, 4) for _ in range(3)]
    empty = nn.Linear(3, 4, device="meta")
    params = lib.TensorDict.from_modules(*modules, lazy_stack=lazy)

    def call(p: Any, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(empty):
            return empty(x)

    y = torch.vmap(call, (0, None))(params, torch.ones(3))
    y.sum().backward()
    grads = [m.weight.grad for m in modules] if lazy else [params["weight"].grad, modules[0].weight.grad]
    return [y, grads]


def _ensemble_holding_params(lib: Any) -> Any:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.extra = _params_cls(lib)(lib.TensorDict({"scale": torch.randn(2)}))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.extra["scale"]

    torch.manual_seed(0)
    modules = [Scaled() for _ in range(3)]
    params = lib.TensorDict.from_modules(*modules)
    base = Scaled()
    scale = base.extra["scale"]

    def call(p: Any, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(base):
            return base(x)

    y = torch.vmap(call, (0, None))(params, torch.ones(3))
    y.sum().backward()
    return [y, params["extra", "scale"].grad, base.extra["scale"] is scale]


def _tied_copies(lib: Any) -> Any:
    torch.manual_seed(0)
    module = nn.ModuleDict({"enc": nn.Linear(2, 2), "dec": nn.Linear(2, 2)})
    module["dec"].weight = module["enc"].weight
    params = lib.TensorDict.from_module(module, as_module=True)
    copies = [params.clone(), copy.deepcopy(params), pickle.loads(pickle.dumps(params))]
    return [[c, c["enc", "weight"] is c["dec", "weight"], len(list(c.parameters()))] for c in copies]


def _tdp(lib: Any, fn: Any) -> Any:
    (m,) = _modules()
    return fn(_params_cls(lib)(lib.TensorDict.from_module(m)), lib)


def _vmap(lib: Any, in_dims: int = 0, out_dims: int = 0, names: bool = False, feat: int = 2) -> Any:
    g = torch.Generator().manual_seed(0)
    td = lib.TensorDict(
        {"a": torch.randn(5, 4, 3, generator=g), "b": torch.randn(5, 4, feat, generator=g)},
        [5, 4],
        names=["x", "y"] if names else None,
    )
    seen = []

    def fn(t: Any) -> Any:
        seen.append([tuple(t.batch_size), list(t.names) if names else None])
        return t.apply(lambda x: x * 2)

    out = torch.vmap(fn, in_dims=in_dims, out_dims=out_dims)(td)
    return [seen, out, list(out.names) if names else None]


def _vmap_non_tensor(lib: Any) -> Any:
    td = lib.TensorDict({"a": torch.arange(10.0).reshape(5, 2), "s": "hello"}, [5])
    out = torch.vmap(lambda t: t.apply(lambda x: x + 1))(td)
    return [tuple(out.batch_size), out["s"], out["a"]]


def _ctx_frozen(lib: Any) -> Any:
    """A frozen parameter replaced in a with block: after it, the same object, still frozen?"""
    m = nn.Linear(3, 2)
    m.bias.requires_grad_(False)
    old = m.bias
    with lib.TensorDict(bias=torch.zeros(2, requires_grad=True)).to_module(m):
        pass
    return [m.bias is old, m.bias.requires_grad]


def _partial_order(lib: Any) -> Any:
    m = nn.Linear(3, 2)
    lib.TensorDict(weight=torch.zeros(2, 3)).to_module(m)
    return list(m._parameters)


def _into_params_unknown_key(lib: Any) -> Any:
    holder = nn.Module()
    holder.p = _params_cls(lib)(lib.TensorDict({"w": torch.ones(2)}))
    lib.TensorDict({"p": {"nope": torch.zeros(2)}}).to_module(holder)
    return sorted(n for n, _ in holder.named_parameters())


def _vmap_locked(lib: Any) -> Any:
    td = lib.TensorDict({"a": torch.ones(3, 2)}, [3]).lock_()
    seen = []
    out = torch.vmap(lambda t: (seen.append(t.is_locked), t)[1])(td)
    return [seen, out.is_locked]


def _vmap_no_tensor_leaf(lib: Any) -> Any:
    seen = []
    torch.vmap(lambda t, x: (seen.append(tuple(t.batch_size)), x)[1], in_dims=(0, 0))(
        lib.TensorDict({}, [3]), torch.ones(3)
    )
    return seen


CASES = {
    "from_module": lambda lib: lib.TensorDict.from_module(_modules()[0]),
    "from_module_lock": lambda lib: lib.TensorDict.from_module(_modules()[0], lock=True),
    "from_module_keep_empty": lambda lib: sorted(lib.TensorDict.from_module(_modules()[0], filter_empty=False).keys()),
    "from_module_state_dict": lambda lib: lib.TensorDict.from_module(_modules()[0], use_state_dict=True),
    "from_module_as_module": lambda lib: lib.TensorDict.from_module(_modules()[0], as_module=True),
    "from_module_of_params": lambda lib: (lambda p: [lib.TensorDict.from_module(p) is p, p])(
        lib.TensorDict.from_module(_modules()[0], as_module=True)
    ),
    "from_modules_of_params": lambda lib: lib.TensorDict.from_modules(
        *(lib.TensorDict.from_module(m, as_module=True) for m in _modules(2))
    ),
    "from_module_identity": lambda lib: lib.TensorDict.from_module(m := _modules()[0])["0", "weight"] is m[0].weight,
    "from_modules": lambda lib: lib.TensorDict.from_modules(*_modules(3)),
    "from_modules_unlocked": lambda lib: lib.TensorDict.from_modules(*_modules(2), lock=False),
    "from_modules_as_module": lambda lib: lib.TensorDict.from_modules(*_modules(2), as_module=True),
    "from_modules_lazy": lambda lib: lib.TensorDict.from_modules(*_modules(2), lazy_stack=True).tensordicts,
    "from_modules_lazy_as_module": lambda lib: lib.TensorDict.from_modules(
        *_modules(2), lazy_stack=True, as_module=True
    ),
    "from_modules_expand": lambda lib: lib.TensorDict.from_modules(*(_modules() * 2), expand_identical=True),
    "from_modules_shapes_differ": lambda lib: lib.TensorDict.from_modules(nn.Linear(3, 4), nn.Linear(3, 5)),
    "from_modules_keys_differ": lambda lib: lib.TensorDict.from_modules(nn.Linear(3, 4), nn.Linear(3, 4, bias=False)),
    "to_module": lambda lib: _swap_summary(lib),
    "to_module_no_preserve": lambda lib: _swap_summary(lib, preserve_module_state=False),
    "to_module_inplace": lambda lib: _swap_summary(lib, inplace=True),
    "to_module_no_swap": lambda lib: _swap_summary(lib, return_swap=False),
    "to_module_state_dict": lambda lib: _swap_summary(lib, use_state_dict=True),
    "to_module_state_dict_inplace": lambda lib: _swap_summary(lib, use_state_dict=True, inplace=False),
    "to_module_memo": lambda lib: _swap_summary(lib, memo={}),
    "to_module_state_dict_part": lambda lib: _state_dict_part(lib),
    "to_module_state_dict_grads": lambda lib: _state_dict_grads(lib),
    "to_module_extra_state": lambda lib: _extra_state(lib, use_state_dict=False),
    "to_module_extra_state_state_dict": lambda lib: _extra_state(lib, use_state_dict=True),
    "to_module_ctx": _ctx,
    "to_module_ctx_raises": _ctx_raises,
    "to_module_missing_key": lambda lib: lib.TensorDict({"nope": torch.zeros(3)}).to_module(nn.Linear(3, 4)),
    "to_module_missing_module": lambda lib: lib.TensorDict({"n": {"w": torch.zeros(3)}}).to_module(nn.Linear(3, 4)),
    "ensemble_dense": lambda lib: _ensemble(lib, False),
    "ensemble_lazy": lambda lib: _ensemble(lib, True),
    "ensemble_holding_params": lambda lib: _ensemble_holding_params(lib),
    "params_keys": lambda lib: _tdp(
        lib, lambda p, lib: [sorted(n for n, _ in p.named_parameters()), sorted(n for n, _ in p.named_buffers())]
    ),
    "params_state_dict_keys": lambda lib: _tdp(lib, lambda p, lib: list(p.state_dict())),
    "params_set_converts": lambda lib: _tdp(lib, lambda p, lib: (p.set("x", torch.ones(2)), p)[1]),
    "params_set_int_buffer": lambda lib: _tdp(
        lib,
        lambda p, lib: (p.__setitem__("i", torch.ones(2, dtype=torch.long)), sorted(n for n, _ in p.named_buffers()))[
            1
        ],
    ),
    "params_no_convert": lambda lib: _params_cls(lib)(lib.TensorDict({"a": torch.ones(2)}), no_convert=True),
    "params_dict": lambda lib: _params_cls(lib)({"a": torch.ones(2), "b": {"c": torch.zeros(1)}}),
    "params_order": lambda lib: (lambda p: [[n for n, _ in p.named_parameters()], list(p.state_dict())])(
        _params_cls(lib)(
            {"b": {"c": torch.ones(1)}, "a": torch.ones(2), "n": torch.arange(2), "d": {"e": torch.ones(1)}}
        )
    ),
    "params_kwargs": lambda lib: _params_cls(lib)(a=torch.ones(2)),
    "params_clone": lambda lib: _tdp(lib, lambda p, lib: p.clone()),
    "params_tied_copies": lambda lib: _tied_copies(lib),
    "params_to": lambda lib: _tdp(lib, lambda p, lib: p.to(torch.float64)),
    "params_detach": lambda lib: _tdp(lib, lambda p, lib: p.detach()),
    "params_apply": lambda lib: _tdp(lib, lambda p, lib: p.select("0").apply(lambda t: t * 2)),
    "params_zero_": lambda lib: _tdp(lib, lambda p, lib: p.zero_()),
    "params_get": lambda lib: _tdp(lib, lambda p, lib: [p["0", "weight"], p.get(("2", "running_mean")), p["0"]]),
    "params_del": lambda lib: _tdp(lib, lambda p, lib: (p.del_("0"), sorted(n for n, _ in p.named_parameters()))),
    "params_lock": lambda lib: _params_cls(lib)(lib.TensorDict({"a": torch.ones(2)}), lock=True).set(
        "b", torch.ones(1)
    ),
    "params_locked_raises": lambda lib: _tdp(lib, lambda p, lib: p.lock_().set("b", torch.ones(1))),
    "params_lazy_raises": lambda lib: _params_cls(lib)(lib.lazy_stack([lib.TensorDict(a=torch.ones(2))] * 2)),
    "params_load_state_dict": lambda lib: _tdp(
        lib, lambda p, lib: (p.load_state_dict({k: v.detach() + 1 for k, v in p.state_dict().items()}), p)[1]
    ),
    "vmap_in_dims_0": lambda lib: _vmap(lib),
    "vmap_in_dims_1": lambda lib: _vmap(lib, in_dims=1),
    "vmap_names": lambda lib: _vmap(lib, names=True),
    "vmap_out_dims_1": lambda lib: _vmap(lib, out_dims=1),
    "vmap_in_dims_beyond_batch": lambda lib: _vmap(lib, in_dims=2, feat=3),
    "vmap_negative_in_dims": lambda lib: _vmap(lib, in_dims=-1),
    "vmap_non_tensor": _vmap_non_tensor,
    "params_module_to": lambda lib: _tdp(lib, lambda p, lib: (p.double(), p)[1]),
    "params_to_module_buffers": lambda lib: _tdp(lib, lambda p, lib: (lambda m: [p.to_module(m), m])(_modules()[0])),
    "to_module_ctx_frozen": _ctx_frozen,
    "to_module_partial_order": _partial_order,
    "to_module_into_params_unknown_key": _into_params_unknown_key,
    "vmap_locked": _vmap_locked,
    "vmap_no_tensor_leaf": _vmap_no_tensor_leaf,
}


@pytest.mark.parametrize("name", list(CASES))
def test_nn_vs_tensordict(ref: Any, tb: Any, name: str) -> None:
    check(ref, tb, CASES[name])


def test_tensorclass_from_modules(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        class TC(lib.TensorClass):
            weight: torch.Tensor
            bias: torch.Tensor

        modules = [nn.Linear(3, 4) for _ in range(2)]
        torch.manual_seed(0)
        for m in modules:
            m.reset_parameters()
        dense, lazy = TC.from_modules(*modules), TC.from_modules(*modules, lazy_stack=True)
        one = TC.from_module(modules[0])
        return [
            type(dense).__name__,
            dense.batch_size,
            type(dense.weight).__name__,
            dense.is_locked,
            type(lazy).__name__,
            type(one).__name__,
            type(one.to_module(modules[1])).__name__,
        ]

    assert fn(tb) == fn(ref)
