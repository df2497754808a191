"""Benchmark cases for TensorDict modules, same protocol as ``cases.py``: ``run.py --suite nn``.

A small MLP (16 -> 64 -> 64 -> 4, tanh) called through ``TensorDictModule``, a two-module
``TensorDictSequential`` and a probabilistic actor (``ProbabilisticTensorDictSequential`` of the MLP, a
``NormalParamExtractor`` and a ``Normal``), at batch 64 and 4096, eager and compiled (``torch.compile``,
default options). The raw floor is the same ``nn.Module`` objects called on plain tensors (one ``nn.Module``
holding them, so that the compiled floor is a compiled module too), returning every output the modules write
(a sequence keeps its intermediate outputs; for the probabilistic case: the MLP, the
extractor, then ``Normal(loc, scale)`` and a sample, as the modules do).
The eager overhead of a module is its time minus raw's: the closing lines of the suite compare
tensorbatch's overhead with tensordict's (target: at most 0.6x) and the compiled calls with the compiled
plain module (target: within 1.05x). The compiled cases run under ``torch.no_grad()`` (a policy's inference
step, as in a collector), for every implementation: on torch 2.13 (CPU), a compiled plain function that
returns an intermediate requiring grad with a value computed from it (``h = mlp(x); return h, head(h)``)
corrupts the heap within a few hundred calls ("corrupted size vs. prev_size"), so the raw floor cannot run
with grad; the TensorDict modules do not hit it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Setup = Callable[[Any], Callable[[], Any]]

CASES: dict[str, Setup] = {}
#: Modules return TensorDicts, raw returns tensors: nothing to compare structurally.
UNCHECKED: set[str] = set()


def _mlp(out: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))


def _nn(lib: Any) -> Any:
    return importlib.import_module(f"{lib.__name__}.nn")


def _data(lib: Any, batch: int) -> Any:
    x = torch.randn(batch, 16, generator=torch.Generator().manual_seed(1))
    return x if lib is None else lib.TensorDict(obs=x, batch_size=[batch])


def _module(lib: Any, batch: int, compiled: bool) -> Callable[[], Any]:
    mlp = _mlp()
    data = _data(lib, batch)
    fn: Any = mlp if lib is None else _nn(lib).TensorDictModule(mlp, in_keys=["obs"], out_keys=["action"])
    return _call(fn, data, compiled)


class _RawSequence(nn.Module):
    """The sequence's work on plain tensors, as one module (compiled as the TensorDict modules are)."""

    def __init__(self, mlp: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.mlp, self.head = mlp, head

    def forward(self, x: torch.Tensor) -> Any:
        hidden = self.mlp(x)
        return hidden, self.head(hidden)  # (the sequence keeps both outputs too)


class _RawProbabilistic(nn.Module):
    """The probabilistic actor's work on plain tensors: parameters, ``Normal``, a sample."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        from tensorbatch.nn.distributions import NormalParamExtractor  # (the same module for every library)

        self.mlp, self.extract = mlp, NormalParamExtractor()

    def forward(self, x: torch.Tensor) -> Any:
        params = self.mlp(x)
        loc, scale = self.extract(params)
        return params, loc, scale, torch.distributions.Normal(loc, scale).sample()


def _sequence(lib: Any, batch: int, compiled: bool) -> Callable[[], Any]:
    mlp, head = _mlp(8), nn.Linear(8, 4)
    data = _data(lib, batch)
    if lib is None:
        fn: Any = _RawSequence(mlp, head)
    else:
        tdnn = _nn(lib)
        fn = tdnn.TensorDictSequential(
            tdnn.TensorDictModule(mlp, in_keys=["obs"], out_keys=["hidden"]),
            tdnn.TensorDictModule(head, in_keys=["hidden"], out_keys=["action"]),
        )
    return _call(fn, data, compiled)


def _probabilistic(lib: Any, batch: int, compiled: bool) -> Callable[[], Any]:
    mlp = _mlp(8)
    data = _data(lib, batch)
    if lib is None:
        fn: Any = _RawProbabilistic(mlp)
    else:
        tdnn = _nn(lib)
        fn = tdnn.ProbabilisticTensorDictSequential(
            tdnn.TensorDictModule(mlp, in_keys=["obs"], out_keys=["params"]),
            tdnn.TensorDictModule(tdnn.NormalParamExtractor(), in_keys=["params"], out_keys=["loc", "scale"]),
            tdnn.ProbabilisticTensorDictModule(
                in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal
            ),
        )
    return _call(fn, data, compiled)


def _call(fn: Any, data: Any, compiled: bool) -> Callable[[], Any]:
    if not compiled:
        return lambda: fn(data)
    # every case compiles afresh: the modules of all cases share a few forward functions, and dynamo keeps at
    # most 8 compiled variants of one function (recompile_limit), then runs it eagerly
    torch._dynamo.reset()
    fn = torch.compile(fn)

    def call() -> Any:
        with torch.no_grad():
            return fn(data)

    return call


for _batch in (64, 4096):
    for _kind, _setup in (("module", _module), ("sequence", _sequence), ("probabilistic", _probabilistic)):
        for _compiled in (False, True):
            _name = f"{_kind}_{_batch}" + ("_compiled" if _compiled else "")

            def _make(lib: Any, setup: Any = _setup, batch: int = _batch, compiled: bool = _compiled) -> Any:
                return setup(lib, batch, compiled)

            _make.__name__ = _name
            CASES[_name] = _make
            UNCHECKED.add(_name)


def check_targets(results: list[dict[str, Any]]) -> None:
    """Print the issue's targets: eager overhead over raw at most 0.6x tensordict's; compiled within 1.05x raw."""
    for res in results:
        us = res["us"]
        if not all(i in us for i in ("tb", "td", "raw")):
            continue
        if res["case"].endswith("_compiled"):
            r = us["tb"] / us["raw"]
            print(f"target {res['case']}: compiled tb/raw {r:.3f} (<= 1.05: {'ok' if r <= 1.05 else 'MISSED'})")
        else:
            tb, td = us["tb"] - us["raw"], us["td"] - us["raw"]
            r = tb / td if td > 0 else float("nan")
            print(
                f"target {res['case']}: overhead tb {tb:.1f} us, td {td:.1f} us, tb/td {r:.2f} "
                f"(<= 0.6: {'ok' if r <= 0.6 else 'MISSED'})"
            )
