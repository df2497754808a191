"""Benchmark cases for TensorClass and TypedTensorDict, same protocol as ``cases.py``.

Run with ``benchmarks/run.py --suite typed``. The raw floor is a plain ``@dataclass`` holding the same
tensors: construction, attribute read and write, and indexing/stacking field by field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

CASES: dict[str, Callable[[Any], Callable[[], Any]]] = {}
UNCHECKED: set[str] = set()

B = 64
_gen = torch.Generator().manual_seed(5)
OBS, ACT, REW = torch.rand(B, 8, generator=_gen), torch.rand(B, 2, generator=_gen), torch.rand(B, generator=_gen)


@dataclasses.dataclass
class RawTransition:
    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor


def case(fn: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
    CASES[fn.__name__] = fn
    UNCHECKED.add(fn.__name__)
    return fn


_TC: dict[Any, type] = {}
_TTD: dict[Any, type] = {}


def _tc(lib: Any) -> type:
    if lib not in _TC:

        class Transition(lib.TensorClass):
            obs: torch.Tensor
            action: torch.Tensor
            reward: torch.Tensor

        _TC[lib] = Transition
    return _TC[lib]


def _ttd(lib: Any) -> type:
    if lib not in _TTD:

        class State(lib.TypedTensorDict):
            obs: torch.Tensor
            action: torch.Tensor
            reward: torch.Tensor

        _TTD[lib] = State
    return _TTD[lib]


def _make(lib: Any, kind: str) -> Any:
    if lib is None:
        return RawTransition(OBS.clone(), ACT.clone(), REW.clone())
    cls = _tc(lib) if kind == "tc" else _ttd(lib)
    return cls(obs=OBS.clone(), action=ACT.clone(), reward=REW.clone(), batch_size=[B])


def _raw_index(x: RawTransition, i: Any) -> RawTransition:
    return RawTransition(x.obs[i], x.action[i], x.reward[i])


def _raw_stack(xs: list[RawTransition]) -> RawTransition:
    return RawTransition(
        torch.stack([x.obs for x in xs]), torch.stack([x.action for x in xs]), torch.stack([x.reward for x in xs])
    )


for _kind in ("tc", "ttd"):

    def _construct(lib: Any, kind: str = _kind) -> Callable[[], Any]:
        if lib is None:
            return lambda: RawTransition(OBS, ACT, REW)
        cls = _tc(lib) if kind == "tc" else _ttd(lib)
        return lambda: cls(obs=OBS, action=ACT, reward=REW, batch_size=[B])

    def _get(lib: Any, kind: str = _kind) -> Callable[[], Any]:
        x = _make(lib, kind)
        return lambda: x.obs

    def _set(lib: Any, kind: str = _kind) -> Callable[[], Any]:
        x = _make(lib, kind)
        value = OBS.clone()

        def fn() -> None:
            x.obs = value

        return fn

    def _index(lib: Any, kind: str = _kind) -> Callable[[], Any]:
        x = _make(lib, kind)
        return (lambda: _raw_index(x, slice(2, 40))) if lib is None else (lambda: x[2:40])

    def _stack50(lib: Any, kind: str = _kind) -> Callable[[], Any]:
        xs = [_make(lib, kind)[0] if lib is not None else _raw_index(_make(None, kind), 0) for _ in range(50)]
        return (lambda: _raw_stack(xs)) if lib is None else (lambda: torch.stack(xs))

    for _name, _fn in (
        ("construct", _construct),
        ("attr_get", _get),
        ("attr_set", _set),
        ("index", _index),
        ("stack_50", _stack50),
    ):
        _fn.__name__ = f"{_kind}_{_name}"
        case(_fn)
