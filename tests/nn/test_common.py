"""TensorDict modules beyond the differential cases: compile, vmap, ensembles, lazy stacks, TensorClasses, pickling."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from torch import nn

from tensorbatch import TensorClass, TensorDict, lazy_stack
from tensorbatch.nn import (
    CudaGraphModule,
    TensorDictModule,
    TensorDictSequential,
    dispatch,
    set_skip_existing,
    skip_existing,
)
from tensorbatch.nn.utils import _dispatch_td_nn_modules, _set_dispatch_td_nn_modules


def _policy() -> TensorDictSequential:
    torch.manual_seed(0)
    return TensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=[("hidden", "h")]),
        TensorDictModule(nn.Tanh(), in_keys=[("hidden", "h")], out_keys=["action"]),
    )


def test_forward_values_and_keys():
    policy = _policy()
    obs = torch.randn(5, 3)
    out = policy(TensorDict(obs=obs, batch_size=[5]))
    expected = torch.tanh(policy[0].module(obs))
    torch.testing.assert_close(out["action"], expected)
    assert out["hidden", "h"].shape == (5, 4)
    assert policy.in_keys == ["obs"] and policy.out_keys == [("hidden", "h"), "action"]


@pytest.mark.slow
def test_compiled_fullgraph_matches_eager():
    policy = _policy()
    td = TensorDict(obs=torch.randn(5, 3), batch_size=[5])
    compiled = torch.compile(policy, fullgraph=True)
    torch.testing.assert_close(compiled(td.clone())["action"], policy(td.clone())["action"])
    by_tensor = torch.compile(lambda obs: policy(obs=obs), fullgraph=True)
    torch.testing.assert_close(by_tensor(td["obs"])[1], policy(td.clone())["action"])


def test_vmap_over_stacked_parameters():
    torch.manual_seed(0)
    modules = [TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"]) for _ in range(3)]
    params = TensorDict.from_modules(*modules)
    base = TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"])
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])

    def call(p, data):
        with p.to_module(base):
            return base(data)

    out = torch.vmap(call, (0, None))(params, td)
    assert out.batch_size == (3, 5)
    for i, module in enumerate(modules):
        torch.testing.assert_close(out["y"][i], module.module(td["x"]))


def test_vmap_over_batch():
    module = TensorDictModule(lambda x: x.sum(-1), in_keys=["x"], out_keys=["s"])
    td = TensorDict(x=torch.arange(6.0).view(2, 3), batch_size=[2])
    out = torch.vmap(module)(td)
    assert out["s"].tolist() == [3.0, 12.0]


def test_lazy_stack_input_keeps_members():
    module = TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["y"])
    stack = lazy_stack([TensorDict(x=torch.ones(2)), TensorDict(x=torch.zeros(2))])
    out = module(stack)
    assert out is stack
    assert out["y"].tolist() == [[2.0, 2.0], [0.0, 0.0]]
    assert out.tensordicts[0]["y"].tolist() == [2.0, 2.0]


def test_ragged_lazy_stack_with_get_kwargs():
    module = TensorDictModule(lambda x: x.sum(-1), in_keys=["x"], out_keys=["s"], get_kwargs={"as_padded_tensor": True})
    stack = lazy_stack([TensorDict(x=torch.ones(2)), TensorDict(x=torch.ones(3))])
    assert module(stack)["s"].tolist() == [2.0, 3.0]


def test_tensorclass_input_is_written():
    class Obs(TensorClass):
        x: torch.Tensor
        y: torch.Tensor | None = None

    obs = Obs(x=torch.ones(3), batch_size=[3])
    out = TensorDictModule(torch.neg, in_keys=["x"], out_keys=["y"])(obs)
    assert out is obs and obs.y.tolist() == [-1.0, -1.0, -1.0]


def test_error_gains_module_note():
    module = TensorDictModule(lambda x: x @ x, in_keys=["x"], out_keys=["y"])
    with pytest.raises(RuntimeError) as info:
        module(TensorDict(x=torch.ones(2, 3)))
    assert any(
        "TensorDictModule failed with operation" in note and "in_keys=['x']" in note for note in info.value.__notes__
    )


def test_missing_input_names_the_key():
    module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    with pytest.raises(KeyError, match=r"the following inputs are None: \{'x'\}"):
        module(TensorDict(z=torch.ones(1)))


def test_pickle_round_trip_with_lambda():
    pytest.importorskip("cloudpickle")
    module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    again = pickle.loads(pickle.dumps(module))
    assert again(TensorDict(x=torch.zeros(1)))["y"].tolist() == [1.0]
    assert again.in_keys == ["x"] and again.out_keys == ["y"]


def test_skip_existing_modes_restore():
    assert skip_existing() is False
    with set_skip_existing(["a"]):
        assert skip_existing() == ["a"]
        with set_skip_existing(False):
            assert skip_existing() is False
        assert skip_existing() == ["a"]
    assert skip_existing() is False
    with pytest.raises(RuntimeError, match="context manager with ``None`` input"), set_skip_existing(None):
        pass


def test_dispatch_switch_and_function_form():
    @dispatch(source=["a", "b"], dest=["c"])
    def add(tensordict):
        return tensordict.set("c", tensordict["a"] + tensordict["b"])

    assert add(torch.ones(1), b=torch.ones(1)).tolist() == [2.0]
    with _set_dispatch_td_nn_modules(False):
        assert not _dispatch_td_nn_modules()
    assert _dispatch_td_nn_modules()
    with pytest.raises(RuntimeError, match="must be named 'tensordict'"):
        dispatch(lambda x: x)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cudagraph_capture_and_replay():
    module = TensorDictModule(lambda x: x * 2 + 1, in_keys=["x"], out_keys=["y"])
    graphed = CudaGraphModule(module, warmup=2)
    for i in range(5):
        td = TensorDict(x=torch.full((4,), float(i), device="cuda"), batch_size=[4], device="cuda")
        out = graphed(td)
        assert out["y"].tolist() == [2.0 * i + 1] * 4
    assert graphed.counter == 2  # one eager warmup call, then the capture; replays do not count
    with pytest.raises(ValueError, match="CUDA graphs replay fixed shapes"):
        graphed(TensorDict(x=torch.zeros(5, device="cuda"), batch_size=[5], device="cuda"))
    function = CudaGraphModule(lambda a: a + 1, warmup=1)
    for i in range(3):
        assert function(torch.full((2,), float(i), device="cuda")).tolist() == [i + 1.0] * 2


def test_cudagraph_without_cuda_runs_the_module():
    if torch.cuda.is_available():
        pytest.skip("checks the path without CUDA")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphed = CudaGraphModule(TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"]))
    for _ in range(4):
        assert graphed(TensorDict(x=torch.zeros(1)))["y"].tolist() == [1.0]
    assert graphed.counter == 0


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_hooks_fire_through_the_module_call(compiled):
    """A module's own hooks, the global ones and ``module.compile()`` still run: ``__call__`` skips them only when
    none is registered."""
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=["action"])
    seen = []
    module.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    module.register_forward_hook(lambda mod, args, out: out.set("hooked", out["action"] + 1))
    call = torch.compile(module, backend="eager") if compiled else module
    out = call(TensorDict(obs=torch.ones(2, 3), batch_size=[2]))
    assert seen == ["pre"]
    torch.testing.assert_close(out["hooked"], out["action"] + 1)

    plain = TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=["action"])
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out.set("global", torch.zeros(2)) if mod is plain else None
    )
    try:
        out = plain(TensorDict(obs=torch.ones(2, 3), batch_size=[2]))
    finally:
        handle.remove()
    assert (out["global"] == 0).all()
    assert "global" not in plain(TensorDict(obs=torch.ones(2, 3), batch_size=[2])).keys()

    plain.compile(backend="eager")
    assert plain._compiled_call_impl is not None
    torch.testing.assert_close(
        plain(TensorDict(obs=torch.ones(2, 3), batch_size=[2]))["action"], plain.module(torch.ones(2, 3))
    )
