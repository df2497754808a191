"""Differential tests, TensorDict modules: TensorDictModule, TensorDictSequential, dispatch and the helpers.

Each case builds the same modules for both libraries (``nn`` is ``tensordict.nn`` or ``tensorbatch.nn``) and
compares a summary of what a call returns: per leaf its key, shape, dtype and values, or the error type.
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from typing import Any

import pytest
import torch
from torch import nn as tnn

pytestmark = [
    pytest.mark.differential,
    pytest.mark.filterwarnings("ignore:This module is instantiated on a machine without CUDA"),
]


def summary(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), value.detach().tolist())
    if hasattr(value, "batch_size") and hasattr(value, "items"):
        leaves = sorted((str(k), summary(v)) for k, v in value.items(True, True))
        return (type(value).__name__, tuple(value.batch_size), leaves)
    if isinstance(value, (list, tuple)):
        return [summary(v) for v in value]
    if isinstance(value, dict):
        return {k: summary(v) for k, v in value.items()}
    return value


def run(lib: Any, fn: Any) -> Any:
    nn = importlib.import_module(f"{lib.__name__}.nn")
    torch.manual_seed(0)
    try:
        return summary(fn(lib, nn))
    except Exception as e:  # the error type is part of the behaviour
        return ("raises", type(e).__name__)


def _td(lib: Any) -> Any:
    g = torch.Generator().manual_seed(1)
    return lib.TensorDict(
        {"x": torch.randn(4, 3, generator=g), "n": {"y": torch.randn(4, 3, generator=g)}}, batch_size=[4]
    )


def _add(x: Any, y: Any) -> Any:
    return x + y


def _pair(x: Any) -> Any:
    return x + 1, x * 2


CASES: dict[str, Any] = {
    "module_basic": lambda lib, nn: nn.TensorDictModule(_add, ["x", ("n", "y")], ["z"])(_td(lib)),
    "module_nested_out": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], [("a", "b"), "c"])(_td(lib)),
    "module_str_keys": lambda lib, nn: nn.TensorDictModule(torch.tanh, "x", "t")(_td(lib)),
    "module_drop_output": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["_", "c"])(_td(lib)),
    "module_inplace_false": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "c"], inplace=False)(_td(lib)),
    "module_inplace_empty": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "c"], inplace="empty")(_td(lib)),
    "module_inplace_bad": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a"], inplace="no"),
    "module_dict_in": lambda lib, nn: nn.TensorDictModule(_add, {"x": "x", "y": ("n", "y")}, ["z"])(_td(lib)),
    "module_dict_in_reversed": lambda lib, nn: nn.TensorDictModule(
        _add, {"x": "x", ("n", "y"): "y"}, ["z"], out_to_in_map=False
    )(_td(lib)),
    "module_out_td": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "b"])(
        _td(lib), tensordict_out=lib.TensorDict(batch_size=[4])
    ),
    "module_too_many_outputs": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a"])(_td(lib)),
    "module_too_few_outputs": lambda lib, nn: nn.TensorDictModule(torch.tanh, ["x"], ["a", "b"])(_td(lib)),
    "module_missing_input": lambda lib, nn: nn.TensorDictModule(torch.tanh, ["nope"], ["a"])(_td(lib)),
    "module_missing_input_strict": lambda lib, nn: nn.TensorDictModule(torch.tanh, ["nope"], ["a"], strict=True)(
        _td(lib)
    ),
    "module_returns_dict": lambda lib, nn: nn.TensorDictModule(lambda x: {"b": x, "a": -x}, ["x"], ["a", "b"])(
        _td(lib)
    ),
    "module_bad_in_keys": lambda lib, nn: nn.TensorDictModule(torch.tanh, 3, ["a"]),
    "module_not_callable": lambda lib, nn: nn.TensorDictModule(3, ["x"], ["a"]),
    "module_extra_args": lambda lib, nn: nn.TensorDictModule(torch.tanh, ["x"], ["a"])(_td(lib), 1),
    "module_method": lambda lib, nn: nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["a"], method="forward")(_td(lib)),
    "module_method_kwargs": lambda lib, nn: nn.TensorDictModule(torch.softmax, ["x"], ["a"], method_kwargs={"dim": -1})(
        _td(lib)
    ),
    "module_non_tensor_input": lambda lib, nn: nn.TensorDictModule(lambda s: torch.tensor(len(s)), ["s"], ["n"])(
        lib.TensorDict(s="abc")
    ),
    "dispatch_positional": lambda lib, nn: nn.TensorDictModule(_add, ["x", ("n", "y")], ["z"])(
        torch.ones(2), torch.ones(2)
    ),
    "dispatch_keywords": lambda lib, nn: nn.TensorDictModule(_add, ["x", ("n", "y")], ["z"])(
        x=torch.ones(2), n_y=torch.ones(2)
    ),
    "dispatch_two_outputs": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "b"])(torch.ones(2)),
    "dispatch_duplicate": lambda lib, nn: nn.TensorDictModule(_add, ["x", "y"], ["z"])(torch.ones(2), x=torch.ones(2)),
    "dispatch_tensordict_kw": lambda lib, nn: nn.TensorDictModule(torch.tanh, ["x"], ["t"])(tensordict=_td(lib)),
    "select_out_keys": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", ("n", "b")]).select_out_keys("a")(
        _td(lib)
    ),
    "select_out_keys_nested_prune": lambda lib, nn: nn.TensorDictModule(
        _pair, ["x"], ["a", ("m", "b")]
    ).select_out_keys("a")(_td(lib)),
    "select_out_keys_attrs": lambda lib, nn: (lambda m: [m.out_keys, m.out_keys_source])(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]).select_out_keys("b")
    ),
    "select_out_keys_dispatch": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "b"]).select_out_keys("b")(
        torch.ones(2)
    ),
    "select_out_keys_missing": lambda lib, nn: nn.TensorDictModule(_pair, ["x"], ["a", "b"]).select_out_keys("q"),
    "reset_out_keys": lambda lib, nn: (
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]).select_out_keys("b").reset_out_keys()(_td(lib))
    ),
    "sequence_keys": lambda lib, nn: (lambda s: [s.in_keys, s.out_keys])(
        nn.TensorDictSequential(
            nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "q"], ["b"])
        )
    ),
    "sequence_call": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "b"], ["c"])
    )(_td(lib)),
    "sequence_list": lambda lib, nn: nn.TensorDictSequential(
        [nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "b"], ["c"])]
    )(_td(lib)),
    "sequence_dict": lambda lib, nn: (lambda s: [s(_td(lib)), list(s.module.keys())])(
        nn.TensorDictSequential(
            OrderedDict(
                first=nn.TensorDictModule(_pair, ["x"], ["a", "b"]), second=nn.TensorDictModule(_add, ["a", "b"], ["c"])
            )
        )
    ),
    "sequence_callable": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), lambda td: td.set("w", td["a"] * 0)
    )(_td(lib)),
    "sequence_dispatch": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "b"], ["c"])
    )(torch.ones(2)),
    "sequence_selected": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]),
        nn.TensorDictModule(_add, ["a", "b"], ["c"]),
        selected_out_keys=["c"],
    )(_td(lib)),
    "sequence_select_out_keys": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "b"], ["c"])
    ).select_out_keys("a")(_td(lib)),
    "sequence_select_bad": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"])
    ).select_out_keys("zz"),
    "sequence_inplace_false": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), nn.TensorDictModule(_add, ["a", "b"], ["c"]), inplace=False
    )(_td(lib)),
    "sequence_inplace_empty": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(_pair, ["x"], ["a", "b"]), inplace="empty"
    )(_td(lib)),
    "sequence_tensordict_out": lambda lib, nn: nn.TensorDictSequential(nn.TensorDictModule(_pair, ["x"], ["a", "b"]))(
        _td(lib), tensordict_out=lib.TensorDict(batch_size=[4])
    ),
    "sequence_kwargs": lambda lib, nn: nn.TensorDictSequential(nn.TensorDictModule(_pair, ["x"], ["a", "b"]))(
        _td(lib), foo=1
    ),
    "sequence_failing_module": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(torch.tanh, ["x"], ["a"]), nn.TensorDictModule(torch.tanh, ["q"], ["b"], strict=True)
    )(_td(lib)),
    "sequence_subsequence_in": lambda lib, nn: (lambda s: [s.in_keys, s.out_keys, len(s)])(
        nn.TensorDictSequential(
            nn.TensorDictModule(torch.tanh, ["x"], ["a"]),
            nn.TensorDictModule(torch.tanh, ["y"], ["b"]),
            nn.TensorDictModule(_add, ["a", "b"], ["c"]),
        ).select_subsequence(in_keys=["y", "a"])
    ),
    "sequence_subsequence_out": lambda lib, nn: (lambda s: [s.in_keys, s.out_keys, len(s)])(
        nn.TensorDictSequential(
            nn.TensorDictModule(torch.tanh, ["x"], ["a"]),
            nn.TensorDictModule(torch.tanh, ["y"], ["b"]),
            nn.TensorDictModule(_add, ["a", "b"], ["c"]),
        ).select_subsequence(out_keys=["b"])
    ),
    "sequence_subsequence_empty": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(torch.tanh, ["x"], ["a"])
    ).select_subsequence(out_keys=["q"]),
    "sequence_getitem": lambda lib, nn: (lambda s: [type(s[0]).__name__, type(s[:1]).__name__, s[:1].out_keys])(
        nn.TensorDictSequential(
            nn.TensorDictModule(torch.tanh, ["x"], ["a"]), nn.TensorDictModule(torch.tanh, ["a"], ["b"])
        )
    ),
    "sequence_setitem": lambda lib, nn: (
        lambda s: (
            s.__setitem__(1, nn.TensorDictModule(torch.exp, ["x"], ["e"])),
            [s.in_keys, s.out_keys, s(_td(lib))],
        )[1]
    )(
        nn.TensorDictSequential(
            nn.TensorDictModule(torch.tanh, ["x"], ["a"]), nn.TensorDictModule(torch.tanh, ["a"], ["b"])
        )
    ),
    "sequence_delitem": lambda lib, nn: (lambda s: (s.__delitem__(0), [s.in_keys, s.out_keys])[1])(
        nn.TensorDictSequential(
            nn.TensorDictModule(torch.tanh, ["x"], ["a"]), nn.TensorDictModule(torch.tanh, ["a"], ["b"])
        )
    ),
    "sequence_partial_tolerant": lambda lib, nn: nn.TensorDictSequential(
        nn.TensorDictModule(torch.tanh, ["x"], ["a"]),
        nn.TensorDictModule(torch.tanh, ["q"], ["b"]),
        partial_tolerant=True,
    )(_td(lib)),
    "sequence_partial_tolerant_lazy": lambda lib, nn: (
        nn.TensorDictSequential(nn.TensorDictModule(torch.tanh, ["q"], ["b"]), partial_tolerant=True)(
            lib.lazy_stack([lib.TensorDict(q=torch.ones(2)), lib.TensorDict(x=torch.ones(2))])
        ).tensordicts
    ),
    "wrap_module": lambda lib, nn: nn.WrapModule(lambda td: td.set("w", td["x"] + 1), in_keys=["x"], out_keys=["w"])(
        _td(lib)
    ),
    "wrap_module_inplace": lambda lib, nn: nn.WrapModule(
        lambda td: lib.TensorDict(w=td["x"] + 1, batch_size=[4]), inplace=True
    )(_td(lib)),
    "wrap_module_keys": lambda lib, nn: (lambda m: [m.in_keys, m.out_keys])(nn.WrapModule(lambda td: td)),
    "wrapper_call": lambda lib, nn: nn.TensorDictModuleWrapper(nn.TensorDictModule(torch.tanh, ["x"], ["a"]))(_td(lib)),
    "wrapper_attrs": lambda lib, nn: (lambda w: [w.in_keys, w.out_keys, w.out_keys_source, w.strict])(
        nn.TensorDictModuleWrapper(nn.TensorDictModule(torch.tanh, ["x"], ["a"]))
    ),
    "module_getattr": lambda lib, nn: nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["a"]).out_features,
    "as_tensordict_module": lambda lib, nn: nn.as_tensordict_module(in_keys=["x", ("n", "y")], out_keys=["z"])(_add)(
        _td(lib)
    ),
    "skip_existing": lambda lib, nn: _skip(lib, nn, True),
    "skip_existing_list": lambda lib, nn: _skip(lib, nn, ["a"]),
    "skip_existing_other_list": lambda lib, nn: _skip(lib, nn, ["b"]),
    "skip_existing_mode": lambda lib, nn: [nn.skip_existing(), _skip_mode(nn)],
    "repr_module": lambda lib, nn: repr(nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["a"])),
    "repr_sequence": lambda lib, nn: repr(nn.TensorDictSequential(nn.TensorDictModule(tnn.Tanh(), ["x"], ["a"]))),
    "reset_parameters": lambda lib, nn: _reset(lib, nn),
}


def _skip(lib: Any, nn: Any, mode: Any) -> Any:
    td = _td(lib).set("a", torch.zeros(4, 3))
    with nn.set_skip_existing(mode):
        return nn.TensorDictModule(torch.tanh, ["x"], ["a"])(td)


def _skip_mode(nn: Any) -> Any:
    with nn.set_skip_existing(["a", ("b", "c")]):
        return nn.skip_existing()


def _reset(lib: Any, nn: Any) -> Any:
    module = nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["a"])
    params = lib.TensorDict.from_module(module)
    new = module.reset_parameters_recursive(params)
    return [new.batch_size, sorted(new.keys(True, True)), new["module", "weight"].requires_grad]


def test_module_on_tensorclass(ref: Any, tb: Any) -> None:
    def fn(lib: Any, nn: Any) -> Any:
        class Obs(lib.TensorClass):
            x: torch.Tensor
            y: Any = None

        module = nn.TensorDictModule(torch.tanh, ["x"], ["y"])
        out = module(Obs(x=torch.ones(3), batch_size=[3]))
        return [type(out).__name__, out.y]

    assert run(tb, fn) == run(ref, fn)


def _ensemble(lib: Any, nn: Any, expand_input: bool) -> Any:
    module = nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["y"])
    ensemble = nn.EnsembleModule(module, num_copies=3, expand_input=expand_input)
    td = lib.TensorDict(x=torch.randn(3 if not expand_input else 5, 3), batch_size=[3 if not expand_input else 5])
    out = ensemble(td)
    return [out, type(ensemble.params_td).__name__, ensemble.params_td.batch_size, ensemble.in_keys, ensemble.out_keys]


def _tensorclass_module(lib: Any, nn: Any) -> Any:
    class In(lib.TensorClass):
        x: torch.Tensor

    class Out(lib.TensorClass):
        y: torch.Tensor

    class Double(nn.TensorClassModuleBase[In, Out]):
        def forward(self, x: Any) -> Any:
            return Out(y=x.x * 2, batch_size=x.batch_size)

    module = Double().as_td_module()
    out = module(lib.TensorDict(x=torch.ones(2), z=torch.zeros(2), batch_size=[2]))
    return [module.in_keys, module.out_keys, out, Double.input_type.__name__]


def _cudagraph_cpu(lib: Any, nn: Any) -> Any:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = nn.CudaGraphModule(nn.TensorDictModule(lambda x: x + 1, ["x"], ["y"]), warmup=2)
    td = lib.TensorDict(x=torch.zeros(2))
    first = td["x"]
    outs = [graphed(td) for _ in range(3)]
    function = nn.CudaGraphModule(lambda a, b: a + b)
    return [
        [str(w.category.__name__) for w in caught],
        outs[-1],
        outs[-1] is td,
        td["x"] is first,
        graphed.counter,
        graphed(x=torch.ones(2)),
        function(torch.ones(1), torch.ones(1)),
        function.in_keys,
        graphed.in_keys,
        graphed.out_keys,
        repr(graphed).replace(hex(id(graphed.module.module)), ""),
    ]


def _cudagraph_grad(lib: Any, nn: Any) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphed = nn.CudaGraphModule(nn.TensorDictModule(lambda x: x + 1, ["x"], ["y"]), warmup=0 + 1)
    return graphed(lib.TensorDict(x=torch.zeros(2, requires_grad=True)))


CASES.update(
    {
        "ensemble_expand": lambda lib, nn: _ensemble(lib, nn, True),
        "ensemble_split": lambda lib, nn: _ensemble(lib, nn, False),
        "ensemble_reset_none": lambda lib, nn: nn.EnsembleModule(
            nn.TensorDictModule(tnn.Linear(3, 2), ["x"], ["y"]), 2
        ).reset_parameters_recursive(),
        "tensorclass_module": _tensorclass_module,
        "cudagraph_cpu": _cudagraph_cpu,
        "cudagraph_grad": _cudagraph_grad,
        "cudagraph_bad_warmup": lambda lib, nn: nn.CudaGraphModule(lambda x: x, warmup=0),
    }
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_modules_match(ref: Any, tb: Any, case: str) -> None:
    fn = CASES[case]
    assert run(tb, fn) == run(ref, fn)
