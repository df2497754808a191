"""from_module / from_modules / to_module beyond the differential cases: errors, shared submodules, swaps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensorbatch import TensorDict
from tensorbatch.nn import TensorDictParams


def test_a_bad_key_names_its_path_and_leaves_the_module_unchanged():
    module = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    before = {k: v for k, v in module.state_dict(keep_vars=True).items()}
    params = TensorDict.from_module(module).detach().clone().zero_()
    params["1", "nope"] = torch.zeros(1)
    with pytest.raises(KeyError, match=r"\('1', 'nope'\).*Linear"):
        params.to_module(module)
    assert all(module.state_dict(keep_vars=True)[k] is v for k, v in before.items())
    with pytest.raises(KeyError, match=r"\('7',\) names no submodule of Sequential"):
        TensorDict({"7": {"w": torch.zeros(1)}}).to_module(module)


def test_a_shared_submodule_is_written_once_and_restored():
    shared = nn.Linear(2, 2)
    module = nn.Sequential(shared, nn.ReLU(), shared)
    params = TensorDict.from_module(module)
    assert set(params.keys()) == {"0", "2"} and params["0", "weight"] is params["2", "weight"]
    zeros = params.detach().clone().zero_()
    zeros["2"] = zeros["2"] + 1  # the second entry differs: the first entry wins, as in tensordict
    with zeros.to_module(module) as swap:
        assert (shared.weight == 0).all()
        assert swap["0", "weight"] is swap["2", "weight"]
    assert shared.weight is params["0", "weight"]


def test_nested_with_blocks_restore_in_order():
    module = nn.Linear(2, 2)
    w0 = module.weight
    ones, twos = (
        TensorDict.from_module(module).detach().clone().fill_(k, v) for k, v in (("weight", 1.0), ("weight", 2.0))
    )
    with ones.to_module(module):
        with twos.to_module(module):
            assert (module.weight == 2).all()
        assert (module.weight == 1).all()
    assert module.weight is w0 and type(module.weight) is nn.Parameter


def test_plain_leaves_become_parameters_unless_they_track_gradients():
    module = nn.Linear(2, 2)
    plain = TensorDict(weight=torch.zeros(2, 2), bias=torch.zeros(2, requires_grad=True))
    with plain.to_module(module):
        assert type(module.weight) is nn.Parameter and module.weight.requires_grad
        assert module.bias is plain["bias"]  # registered as it is: gradients reach the TensorDict
        assert set(module._parameters) == {"weight", "bias"}


def test_swap_dest_receives_the_old_values():
    module = nn.Linear(2, 2)
    w0 = module.weight
    dest = TensorDict(weight=torch.empty(2, 2), bias=torch.empty(2))
    out = TensorDict.from_module(module).detach().clone().to_module(module, swap_dest=dest)
    assert out is dest and dest["weight"] is w0


def test_from_modules_needs_modules_and_lazy_excludes_as_module():
    with pytest.raises(ValueError, match="at least one"):
        TensorDict.from_modules()
    with pytest.raises(RuntimeError, match="exclusive"):
        TensorDict.from_modules(nn.Linear(2, 2), as_module=True, lazy_stack=True)


def test_expand_identical_shares_the_tensor():
    m = nn.Linear(2, 3)
    params = TensorDict.from_modules(m, m, m, expand_identical=True)
    assert params["weight"].stride()[0] == 0 and params["weight"]._base is m.weight
    params["weight"].sum().backward()
    torch.testing.assert_close(m.weight.grad, torch.full((3, 2), 3.0))


def test_a_tensor_marked_as_parameter_keeps_its_registration():
    # torch counts a plain tensor with ``_is_param`` set as an nn.Parameter (isinstance): so does to_module
    module = nn.Linear(2, 2)
    marked = torch.ones(2, 2)
    marked._is_param = True  # type: ignore[attr-defined]
    plain = torch.zeros(2)
    params = TensorDict({"weight": marked, "bias": plain})
    with params.to_module(module, preserve_module_state=False):
        assert module._parameters["weight"] is marked
        assert "bias" not in module._parameters
        assert module.__dict__["bias"] is plain
    assert type(module._parameters["weight"]) is nn.Parameter
    assert type(module._parameters["bias"]) is nn.Parameter
    assert "bias" not in module.__dict__


def test_use_state_dict_writes_a_part_tracks_gradients_and_checks_keys_first():
    module = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    module[1].register_buffer("scratch", torch.ones(2), persistent=False)
    w0, b0 = module[0].weight, module[0].bias
    weight = torch.zeros(2, 2, requires_grad=True)
    values = TensorDict({"0": {"weight": weight}, "1": {"scratch": torch.zeros(2)}})
    with values.to_module(module, use_state_dict=True) as swap:
        assert module[0].weight is weight  # registered as it is: gradients reach it
        assert module[0].bias is b0
        module[0](torch.ones(1, 2)).sum().backward()
        assert list(swap.keys(True, True)) == [("0", "weight"), ("1", "scratch")]
        assert swap["0", "weight"] is w0
    torch.testing.assert_close(weight.grad, torch.ones(2, 2))
    assert module[0].weight is w0
    assert module[1].scratch.tolist() == [1.0, 1.0]
    bad = TensorDict({"0": {"weight": torch.zeros(2, 2), "nope": torch.zeros(1)}})
    with pytest.raises(KeyError, match=r"\('0', 'nope'\)"):
        bad.to_module(module, use_state_dict=True)
    assert module[0].weight is w0


def test_use_state_dict_runs_the_submodules_load_hooks_with_their_prefix():
    module = nn.Sequential(nn.Linear(2, 2))
    seen = []

    def rename(state, prefix, *args):
        seen.append((prefix, sorted(state)))
        if prefix + "w" in state:
            state[prefix + "weight"] = state.pop(prefix + "w")

    module[0]._register_load_state_dict_pre_hook(rename)
    b0 = module[0].bias
    swap = TensorDict({"0": {"w": torch.zeros(2, 2)}}).to_module(module, use_state_dict=True)
    assert seen == [("0.", ["0.w"])]
    assert type(module[0].weight) is nn.Parameter
    assert module[0].weight.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert list(swap.keys(True, True)) == [("0", "weight")]
    assert module[0].bias is b0


def test_a_parameter_written_to_a_buffer_goes_in_as_a_plain_tensor():
    # TensorDictParams turns float buffers into parameters: writing them back keeps BatchNorm's buffers buffers
    module = nn.BatchNorm1d(2)
    running_mean = module.running_mean
    params = TensorDictParams(TensorDict.from_module(nn.BatchNorm1d(2)))
    assert type(params["running_mean"]) is nn.Parameter
    with params.to_module(module):
        assert type(module._buffers["running_mean"]) is torch.Tensor
        assert module.running_mean.data_ptr() == params["running_mean"].data_ptr()
        assert [n for n, _ in module.named_parameters()] == ["weight", "bias"]
    assert module.running_mean is running_mean
    with params.to_module(module, preserve_module_state=False):
        assert module._buffers["running_mean"] is params["running_mean"]
    assert module.running_mean is running_mean


class _WithExtraState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.state = {"step": 3, "name": "a", "t": torch.ones(2)}

    def get_extra_state(self):
        return self.state

    def set_extra_state(self, state):
        self.state = state


def _plain(state):
    return {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def test_extra_state_goes_through_from_module_and_to_module():
    # the entry "_extra_state" of from_module(use_state_dict=True) keeps its objects (the int is no tensor)
    module = nn.Sequential(_WithExtraState())
    params = TensorDict.from_module(module, use_state_dict=True)
    assert _plain(params["0", "_extra_state"].to_dict()) == {"step": 3, "name": "a", "t": [1.0, 1.0]}
    module[0].state = {"step": 5, "name": "b", "t": torch.zeros(2)}
    for kwargs in ({}, {"use_state_dict": True}):
        with params.to_module(module, **kwargs) as swap:
            assert _plain(module[0].state) == {"step": 3, "name": "a", "t": [1.0, 1.0]}
            assert type(module[0].state["step"]) is int
            assert swap["0", "_extra_state", "name"] == "b"
        assert _plain(module[0].state) == {"step": 5, "name": "b", "t": [0.0, 0.0]}


def test_a_with_block_puts_frozen_parameters_back_as_they_were():
    module = nn.Linear(2, 2)
    module.bias.requires_grad_(False)
    bias = module.bias
    for value in (torch.zeros(2, requires_grad=True), nn.Parameter(torch.zeros(2))):
        with TensorDict(bias=value).to_module(module):
            assert module.bias is value  # tracks gradients: registered as it is
        assert module.bias is bias
        assert not module.bias.requires_grad
    outer, inner = torch.ones(2, requires_grad=True), torch.zeros(2)
    with TensorDict(bias=outer).to_module(module):
        with TensorDict(bias=inner).to_module(module):
            assert type(module.bias) is nn.Parameter
            assert module.bias.requires_grad  # the requires_grad of what it replaces
        assert module._parameters["bias"] is outer
    assert module.bias is bias


def test_a_with_block_restores_without_the_load_hooks():
    module = nn.Linear(2, 2)
    weight = module.weight

    def double(state, prefix, *args):
        state[prefix + "weight"] = state[prefix + "weight"] * 2

    module._register_load_state_dict_pre_hook(double)
    with TensorDict(weight=torch.ones(2, 2)).to_module(module, use_state_dict=True):
        assert module.weight.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert module.weight is weight


class _Scaled(nn.Module):
    """A module holding a TensorDictParams (as torchrl's losses do)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.extra = TensorDictParams(TensorDict({"scale": torch.randn(2), "n": torch.arange(2)}))

    def forward(self, x):
        return self.lin(x) * self.extra["scale"]


def test_to_module_writes_into_a_held_tensordictparams():
    torch.manual_seed(0)
    modules = [_Scaled() for _ in range(3)]
    params = TensorDict.from_modules(*modules)
    base = _Scaled()
    scale, n = base.extra["scale"], base.extra["n"]

    def call(p, x):
        with p.to_module(base):
            return base(x)

    x = torch.ones(2)
    y = torch.vmap(call, (0, None))(params, x)
    torch.testing.assert_close(y, torch.stack([m(x) for m in modules]))
    y.sum().backward()
    assert params["extra", "scale"].grad.shape == (3, 2)
    assert base.extra["scale"] is scale
    assert base.extra["n"] is n
    assert dict(base.extra.named_parameters())["scale"] is scale
    new = TensorDict({"extra": {"scale": torch.zeros(2)}})
    with new.to_module(base) as swap:  # the entry stays a registered parameter; the others are kept
        assert type(base.extra["scale"]) is nn.Parameter
        assert base.extra["scale"].tolist() == [0.0, 0.0]
        assert [name for name, _ in base.named_parameters()] == ["lin.weight", "lin.bias", "extra.scale"]
        assert base.extra["n"] is n
        assert swap["extra", "scale"] is scale
    assert base.extra["scale"] is scale
    with pytest.raises(KeyError, match=r"\('extra', 'nope'\) names no entry of TensorDictParams"):
        TensorDict({"extra": {"nope": torch.zeros(1)}}).to_module(base)
    with TensorDict({"scale": torch.ones(2)}).to_module(base.extra):  # the TensorDictParams as the module
        assert base.extra["scale"].tolist() == [1.0, 1.0]
    assert base.extra["scale"] is scale


class _Calls(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def test_an_in_place_write_without_swap_copies_nothing():
    module = nn.Linear(2, 2)
    weight = module.weight
    values = TensorDict(weight=torch.zeros(2, 2))
    with _Calls() as calls:
        assert values.to_module(module, inplace=True, return_swap=False) is None
    assert torch.Tensor.clone not in calls.seen  # (the old values are copied for a swap only)
    assert module.weight is weight
    assert weight.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with _Calls() as calls:
        swap = TensorDict(weight=torch.ones(2, 2)).to_module(module, inplace=True)
    assert torch.Tensor.clone in calls.seen
    assert swap["weight"].tolist() == [[0.0, 0.0], [0.0, 0.0]]
