"""Differential tests, ``torch.save``/``torch.load``: the same containers round-trip alike in both libraries.

Each case builds a container with either library, saves it with ``torch.save`` and loads it back with
``weights_only`` True (torch's default) and False, then compares a summary of the result: class name, batch
size, names, lock, stack dim, and for every leaf its class name, dtype, shape and values. Where tensordict
0.15.3 fails (an ``UnbatchedTensor`` under ``weights_only=True``, a MemoryMappedTensor without a file), the
test says so and checks tensorbatch's result against tensordict's trusted load.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _save_load(obj: Any, weights_only: bool) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=weights_only)


def summary(lib: Any, value: Any) -> Any:
    """What is compared (iterating keys, not the batch dim)."""
    if isinstance(value, torch.Tensor):
        plain = value.as_subclass(torch.Tensor)
        return {
            "cls": type(value).__name__,
            "dtype": value.dtype,
            "shape": tuple(value.shape),
            "values": plain.tolist(),
        }
    if isinstance(value, (lib.NonTensorData, lib.NonTensorStack)):
        return {"cls": type(value).__name__, "batch_size": tuple(value.batch_size), "value": value.tolist()}
    if isinstance(value, lib.TensorDictBase) or lib.is_tensorclass(value):
        name = type(value).__name__.removesuffix(f"_{lib.__name__}")  # the user classes of _classes
        out: dict[str, Any] = {
            "cls": name,
            "batch_size": tuple(value.batch_size),
            "names": list(value.names),
            "locked": value.is_locked,
        }
        if isinstance(value, lib.LazyStackedTensorDict):
            out["stack_dim"] = value.stack_dim
            out["members"] = [summary(lib, td) for td in value.tensordicts]
            return out
        for key in sorted(value.keys()):  # (iterating a TensorDict walks its batch dim)
            out[key] = summary(lib, value.get(key))
        return out
    return value


def _nested(lib: Any) -> Any:
    return lib.TensorDict(
        {
            "a": torch.arange(6.0).view(3, 2),
            "i": torch.arange(3, dtype=torch.int16),
            "sub": lib.TensorDict(b=torch.zeros(3, 4, dtype=torch.float64), batch_size=[3, 4], names=["n", "m"]),
            "text": "hello",
        },
        batch_size=[3],
        names=["n"],
    )


def _lazy(lib: Any) -> Any:
    members = [lib.TensorDict(a=torch.full((2, k), float(k)), batch_size=[2]) for k in (1, 3)]
    return lib.LazyStackedTensorDict(*members, stack_dim=1)


CASES = {
    "nested": _nested,
    "locked": lambda lib: _nested(lib).lock_(),
    "consolidated": lambda lib: lib.TensorDict(
        a=torch.arange(4.0), sub={"b": torch.ones(4, 2)}, batch_size=[4]
    ).consolidate(),
    "sub_view": lambda lib: _nested(lib)[1:],
    "lazy": _lazy,
    "lazy_locked": lambda lib: _lazy(lib).lock_(),
    "non_tensor_data": lambda lib: lib.NonTensorData("value", batch_size=[2]),
    "non_tensor_stack": lambda lib: lib.NonTensorStack("a", "b", "c"),
    "non_tensor_in_td": lambda lib: lib.TensorDict(a=torch.ones(2), s="x", batch_size=[2]),
}


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_alike(ref: Any, tb: Any, case: str, weights_only: bool) -> None:
    want = summary(ref, _save_load(CASES[case](ref), weights_only))
    got = summary(tb, _save_load(CASES[case](tb), weights_only))
    assert got == want


_CLASSES: dict[str, tuple[type, type]] = {}


def _classes(lib: Any) -> tuple[type, type]:
    """A tensorclass and a TypedTensorDict of ``lib``, made module globals so that pickle finds them by name."""
    if lib.__name__ not in _CLASSES:

        @lib.tensorclass
        class Sample:
            obs: torch.Tensor
            label: str

        class Typed(lib.TypedTensorDict):
            x: torch.Tensor

        for cls in (Sample, Typed):
            cls.__qualname__ = cls.__name__ = f"{cls.__name__}_{lib.__name__}"
            globals()[cls.__name__] = cls
        _CLASSES[lib.__name__] = (Sample, Typed)
    return _CLASSES[lib.__name__]


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
def test_user_classes_round_trip_alike_once_allowlisted(ref: Any, tb: Any, weights_only: bool) -> None:
    results = []
    for lib in (ref, tb):
        sample_cls, typed_cls = _classes(lib)
        sample = sample_cls(obs=torch.arange(4.0).view(2, 2), label="x", batch_size=[2])
        typed = typed_cls(x=torch.arange(3.0), batch_size=[3])
        with torch.serialization.safe_globals([sample_cls, typed_cls]):
            back = _save_load(sample, weights_only), _save_load(typed, weights_only)
        results.append((summary(lib, back[0]) | {"label": back[0].label}, summary(lib, back[1])))
    assert results[0] == results[1]


def test_user_classes_refused_alike_without_allowlisting(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        sample_cls, typed_cls = _classes(lib)
        for obj in (
            sample_cls(obs=torch.ones(2), label="x", batch_size=[2]),
            typed_cls(x=torch.ones(3), batch_size=[3]),
        ):
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            buffer.seek(0)
            with pytest.raises(pickle.UnpicklingError, match=f"Unsupported global: GLOBAL .*{type(obj).__name__}"):
                torch.load(buffer)


def test_unbatched_leaf_loads_where_tensordict_refuses(ref: Any, tb: Any) -> None:
    """tensordict 0.15.3 does not allowlist UnbatchedTensor; tensorbatch does (its trusted load agrees)."""

    def build(lib: Any) -> Any:
        return lib.TensorDict(a=torch.ones(3), u=lib.UnbatchedTensor(torch.arange(5.0)), batch_size=[3])

    with pytest.raises(pickle.UnpicklingError, match="UnbatchedTensor"):
        _save_load(build(ref), True)
    want = summary(ref, _save_load(build(ref), False))
    assert summary(tb, _save_load(build(tb), True)) == want
    assert summary(tb, _save_load(build(tb), False)) == want
