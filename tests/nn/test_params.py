"""TensorDictParams as an nn.Module: registration, optimizers, state dicts, copies, pytree, vmap."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from tensorbatch import TensorDict
from tensorbatch.nn import TensorDictParams


def make() -> tuple[nn.Module, TensorDictParams]:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    return module, TensorDict.from_module(module, as_module=True)


def test_a_parent_module_sees_parameters_and_buffers():
    _, params = make()
    holder = nn.Module()
    holder.params = params
    assert [n for n, _ in holder.named_parameters()] == [
        "params.0.weight",
        "params.0.bias",
        "params.1.weight",
        "params.1.bias",
    ]
    assert [n for n, _ in holder.named_buffers()] == [
        "params.1.running_mean",
        "params.1.running_var",
        "params.1.num_batches_tracked",
    ]
    assert set(holder.state_dict()) == {f"params.{k}" for k in params.state_dict()}


def test_an_optimizer_trains_the_entries():
    module, params = make()
    weight = params["0", "weight"]
    assert weight is module[0].weight  # the module's own parameters, no copy
    opt = torch.optim.SGD(params.parameters(), lr=1.0)
    before = weight.detach().clone()
    with params.to_module(module):
        module.eval()(torch.ones(2, 3)).sum().backward()
    opt.step()
    assert not torch.equal(weight, before)
    torch.testing.assert_close(weight, before - weight.grad)


def test_writes_convert_and_register():
    params = TensorDictParams(TensorDict.from_module(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))))
    params["x"] = torch.ones(2)
    params.set(("0", "scale"), torch.ones(()))
    params["n"] = torch.arange(3)
    assert type(params["x"]) is nn.Parameter and type(params["0", "scale"]) is nn.Parameter
    assert type(params["n"]) is torch.Tensor
    names = dict(params.named_parameters())
    assert names["x"] is params["x"] and names["0.scale"] is params["0", "scale"]
    assert "n" in dict(params.named_buffers())
    del params["x"]
    assert "x" not in dict(params.named_parameters())
    with pytest.raises(ValueError, match="itself"):
        params["me"] = params


def test_no_convert_registers_buffers():
    params = TensorDictParams(TensorDict(a=torch.ones(2)), no_convert=True)
    assert list(params.parameters()) == [] and [n for n, _ in params.named_buffers()] == ["a"]


def test_lock_content_still_takes_writes_but_a_locked_params_refuses():
    params = TensorDictParams(TensorDict(a=torch.ones(2)), lock=True)
    params["b"] = torch.zeros(2)
    assert params._param_td.is_locked and set(params.keys()) == {"a", "b"}
    with params.lock_(), pytest.raises(RuntimeError, match="locked"):
        params["c"] = torch.zeros(2)
    params["c"] = torch.zeros(2)


def test_in_place_value_writes_go_to_data():
    _, params = make()
    params.zero_()  # a plain TensorDict of parameters refuses (leaf that requires grad)
    assert all((p == 0).all() for p in params.parameters())
    params.fill_(("0", "bias"), 2.0)
    assert (params["0", "bias"] == 2).all() and params["0", "bias"].requires_grad


def test_load_state_dict_and_module_to():
    module, params = make()
    state = {k: v.detach() + 1 for k, v in params.state_dict().items()}
    params.load_state_dict(state)
    torch.testing.assert_close(module[0].weight.detach(), state["0.weight"])
    with pytest.raises(RuntimeError, match="Unexpected key"):
        params.load_state_dict({**state, "zz": torch.zeros(1)})
    holder = nn.Module()
    holder.params = params
    holder.double()
    assert params["0", "weight"].dtype == torch.float64 and type(params["0", "weight"]) is nn.Parameter
    assert params["1", "running_mean"] is params._buffers["1.running_mean"]  # the TensorDict follows


def test_copies_are_params_of_new_tensors():
    _, params = make()
    for other in (params.clone(), copy.deepcopy(params), pickle.loads(pickle.dumps(params)), params.to(torch.float64)):
        assert type(other) is TensorDictParams
        assert type(other["0", "weight"]) is nn.Parameter and other["0", "weight"] is not params["0", "weight"]
        assert type(other["1", "running_mean"]) is torch.Tensor
        assert len(list(other.parameters())) == 4
    holder = nn.Module()
    holder.params = params
    twin = copy.deepcopy(holder)
    assert type(twin.params) is TensorDictParams and len(list(twin.parameters())) == 4


def test_forwarded_results_are_plain_tensordicts():
    _, params = make()
    assert type(params.detach()) is TensorDict and type(params["0"]) is TensorDict
    assert type(params.apply(lambda t: t.float() * 2)) is TensorDict
    assert type(torch.stack([params, params])) is TensorDict
    assert params.batch_size == torch.Size([]) and "0" in params.keys()


def test_pytree_and_vmap_see_through():
    modules = [nn.Linear(3, 4) for _ in range(3)]
    params = TensorDict.from_modules(*modules, as_module=True)
    leaves, spec = torch.utils._pytree.tree_flatten(params)
    assert len(leaves) == 2
    back = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert type(back) is TensorDictParams and back["weight"] is params["weight"]
    empty = nn.Linear(3, 4, device="meta")

    def call(p, x):
        with p.to_module(empty):
            return empty(x)

    x = torch.randn(3)
    y = torch.vmap(call, (0, None))(params, x)
    torch.testing.assert_close(y, torch.stack([m(x) for m in modules]))
    y.sum().backward()
    assert params["weight"].grad.shape == (3, 4, 3) and modules[0].weight.grad is None


def test_parameters_and_state_dict_follow_the_keys_order():
    # an optimizer's state is matched to parameters() by position: the order is the keys' (as tensordict)
    params = TensorDictParams(
        TensorDict(
            {
                "b": {"c": torch.ones(1)},
                "a": torch.ones(2),
                "n": torch.arange(2),
                "d": {"e": torch.ones(3), "m": torch.arange(1)},
            }
        )
    )
    assert [name for name, _ in params.named_parameters()] == ["b.c", "a", "d.e"]
    assert [name for name, _ in params.named_buffers()] == ["n", "d.m"]
    assert list(params.state_dict()) == ["b.c", "a", "n", "d.e", "d.m"]
    params["z"] = torch.ones(1)
    params.set(("b", "y"), torch.ones(1))
    assert [name for name, _ in params.named_parameters()] == ["b.c", "b.y", "a", "d.e", "z"]


def test_copies_keep_tied_parameters_tied():
    # a decoder sharing its encoder's weight: one parameter under two keys, in every copy too
    module = nn.ModuleDict({"enc": nn.Linear(2, 2), "dec": nn.Linear(2, 2)})
    module["dec"].weight = module["enc"].weight
    params = TensorDict.from_module(module, as_module=True)
    assert len(list(params.parameters())) == 3
    holder = nn.Module()
    holder.params = params
    for other in (
        params.clone(),
        copy.deepcopy(params),
        copy.deepcopy(holder).params,
        pickle.loads(pickle.dumps(params)),
        params.to(torch.float64),
    ):
        assert other["enc", "weight"] is other["dec", "weight"]
        assert other["enc", "weight"] is not params["enc", "weight"]
        assert type(other["enc", "weight"]) is nn.Parameter
        assert len(list(other.parameters())) == 3


def test_from_module_of_a_tensordictparams_is_itself():
    # its parameters are registered under dotted names: read as a module, they were flat keys "0.weight"
    params = TensorDict.from_module(nn.Sequential(nn.Linear(2, 2)), as_module=True)
    assert TensorDict.from_module(params) is params
    assert TensorDict.from_module(params, as_module=True) is params
    stacked = TensorDict.from_modules(params, params.clone())
    assert list(stacked.keys(True, True)) == [("0", "weight"), ("0", "bias")]
    assert stacked.batch_size == torch.Size([2])
    state = TensorDict.from_module(params, use_state_dict=True)
    assert list(state.keys(True, True)) == [("0", "weight"), ("0", "bias")]
    assert type(state["0", "weight"]) is torch.Tensor
    weight = params["0", "weight"]
    with TensorDict.from_module(params).detach().clone().zero_().to_module(params):
        assert params["0", "weight"].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert params["0", "weight"] is weight


def test_module_moves_update_the_device():
    # holder.to(device)/to_empty move the registered tensors: the TensorDict's device follows them (new
    # entries were moved to the old device)
    params = TensorDictParams(TensorDict({"a": torch.ones(2), "n": {"b": torch.ones(1)}}, device="meta"))
    holder = nn.Module()
    holder.params = params
    holder.to_empty(device="cpu")
    assert params.device == torch.device("cpu")
    assert params["n"].device == torch.device("cpu")
    assert params["a"].device.type == "cpu"
    params["x"] = torch.ones(1)
    assert params["x"].device.type == "cpu"
    no_device = TensorDictParams(TensorDict({"a": torch.ones(2)}))
    holder.other = no_device
    holder.to("meta")
    assert no_device.device is None
    assert params.device == torch.device("meta")
