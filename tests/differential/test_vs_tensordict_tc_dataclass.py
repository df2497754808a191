"""Differential tests: ``TensorClass.fields()`` and dataclass subclasses of in-place tensorclasses, against 0.15.3.

``fields()`` is deprecated in tensordict 0.15.3 (``DeprecationWarning``, pointing to ``dataclasses.fields``).

A ``@dataclasses.dataclass`` subclass ``Q`` of a class made a tensorclass by ``from_dataclass(P, inplace=True)``
takes its own fields: ``Q(x=..., y=...)`` works in both libraries. tensordict leaves ``Q`` half-built (its
``__init__`` refuses ``batch_size`` and its instances lack a TensorDict, so ``batch_size``, indexing, stacking,
``clone`` and pickling raise ``AttributeError``); here ``Q`` is a full tensorclass (README, Differences).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV

pytestmark = pytest.mark.differential

_SUBJECT_IS_TB = os.environ.get(SUBJECT_ENV, "tensorbatch") == "tensorbatch"


def _fields_call(lib: Any, on_instance: bool) -> Any:
    cls = type("A", (lib.TensorClass,), {"__module__": __name__, "__annotations__": {"x": torch.Tensor, "n": int}})
    target = cls(x=torch.zeros(2), n=1, batch_size=[2]) if on_instance else cls
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        names = [f.name for f in target.fields()]
    found = [(w.category.__name__, os.path.basename(w.filename)) for w in record]
    text = " ".join(str(w.message) for w in record)
    return names, found, [word in text for word in ("deprecated", "0.17", "dataclasses.fields(cls)")]


@pytest.mark.parametrize("on_instance", [False, True], ids=["class", "instance"])
def test_fields_is_deprecated(ref: Any, tb: Any, on_instance: bool) -> None:
    expected = _fields_call(ref, on_instance)
    assert expected == (["x", "n"], [("DeprecationWarning", os.path.basename(__file__))], [True, True, True])
    assert _fields_call(tb, on_instance) == expected


def _in_place_family(lib: Any) -> tuple[type, type, type]:
    """``P`` made a tensorclass in place, its dataclass subclass ``Q`` (adds ``y``) and ``R`` (adds ``z=None``)."""

    @dataclasses.dataclass
    class P:
        x: torch.Tensor

    lib.from_dataclass(P, inplace=True)

    @dataclasses.dataclass
    class Q(P):
        y: torch.Tensor

    @dataclasses.dataclass
    class R(Q):
        z: Any = None

    return P, Q, R


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as err:
        return ("raises", type(err).__name__, str(err).split("() ", 1)[-1] if isinstance(err, TypeError) else "")


def _subclass_summary(lib: Any) -> Any:
    P, Q, R = _in_place_family(lib)

    def built() -> Any:
        q = Q(x=torch.zeros(2), y=torch.ones(2))
        q.y = torch.full((2,), 3.0)
        return type(q).__name__, isinstance(q, P), lib.is_tensorclass(q), q.x.tolist(), q.y.tolist()

    def asdict() -> Any:
        return {k: v.tolist() for k, v in dataclasses.asdict(Q(x=torch.zeros(2), y=torch.ones(2))).items()}

    def chain() -> Any:
        r = R(torch.zeros(2), torch.ones(2))
        return type(r).__name__, isinstance(r, Q), r.y.tolist(), r.z

    return (
        [lib.is_tensorclass(k) for k in (P, Q, R)],
        [[f.name for f in dataclasses.fields(k)] for k in (Q, R)],
        list(inspect.signature(Q.__init__).parameters),
        _outcome(built),
        _outcome(lambda: Q(torch.zeros(2), torch.ones(2)).y.tolist()),
        _outcome(lambda: Q(x=torch.zeros(2))),
        _outcome(asdict),
        _outcome(chain),
    )


def test_dataclass_subclass_of_an_in_place_tensorclass(ref: Any, tb: Any) -> None:
    expected = _subclass_summary(ref)
    assert expected[3] == ("Q", True, True, [0.0, 0.0], [3.0, 3.0])
    assert expected[5] == ("raises", "TypeError", "missing 1 required positional argument: 'y'")
    assert _subclass_summary(tb) == expected


@pytest.mark.xfail(
    _SUBJECT_IS_TB,
    strict=True,
    reason="deliberate difference: a dataclass subclass of an in-place tensorclass is a full tensorclass, its "
    "__init__ takes batch_size (tensordict's refuses it and its instances lack a TensorDict)",
)
def test_dataclass_subclass_takes_no_batch_size(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> Any:
        _, Q, _ = _in_place_family(lib)
        return _outcome(lambda: Q(x=torch.zeros(2), y=torch.ones(2), batch_size=[2]))

    assert run(ref) == ("raises", "TypeError", "got an unexpected keyword argument 'batch_size'")
    assert run(tb) == run(ref)


@pytest.mark.xfail(
    _SUBJECT_IS_TB,
    strict=True,
    reason="deliberate difference: the instances of a dataclass subclass of an in-place tensorclass hold a "
    "TensorDict (tensordict's raise AttributeError from batch_size, indexing, stacking, clone and pickling)",
)
def test_dataclass_subclass_instances_lack_a_tensordict(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> Any:
        _, Q, _ = _in_place_family(lib)
        q = Q(x=torch.zeros(2), y=torch.ones(2))
        return [_outcome(f) for f in (lambda: q.batch_size, lambda: torch.stack([q, q]), q.clone)]

    assert run(ref) == [("raises", "AttributeError", "")] * 3
    assert run(tb) == run(ref)
