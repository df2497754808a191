"""TensorClass: instances held in fields annotated ``Any``, the deprecated ``fields()``, and dataclass subclasses
of in-place tensorclasses. ``tests/differential/test_vs_tensordict_tc_any.py`` and ``..._tc_dataclass.py`` check
the same against tensordict 0.15.3; these run without it.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorClass, TensorDict, from_dataclass, is_tensorclass


class Inner(TensorClass):
    x: torch.Tensor


class Other(TensorClass):
    z: torch.Tensor


class Holder(TensorClass):
    a: Any = None


def _holder() -> Holder:
    return Holder(a=Inner(x=torch.arange(3.0), batch_size=[3]), batch_size=[3])


def test_any_field_gives_back_the_instance_and_writes_through() -> None:
    h = _holder()
    held = h.a
    assert type(held) is Inner and held is h.a
    held.x = torch.full((3,), 7.0)
    assert h.get(("a", "x")).tolist() == [7.0, 7.0, 7.0]
    assert type(h[1].a) is Inner and h[1].a.x.item() == 7.0
    assert type(torch.stack([h, h]).a) is Inner and torch.stack([h, h]).a.batch_size == (2, 3)
    again = pickle.loads(pickle.dumps(h))
    assert type(again.a) is Inner and again.a.x.tolist() == [7.0, 7.0, 7.0]


def test_any_field_reassigned_reads_what_was_given() -> None:
    h = _holder()
    h.a = TensorDict(x=torch.ones(3), batch_size=[3])
    assert type(h.a) is TensorDict
    h.a = Other(z=torch.ones(3), batch_size=[3])
    assert type(h.a) is Other and h.a.z.tolist() == [1.0, 1.0, 1.0]


def test_to_tensordict_holds_no_tensorclass() -> None:
    h = _holder()
    td = h.to_tensordict()
    assert type(td) is TensorDict and type(td["a"]) is TensorDict
    td["a", "x"][0] = 9.0  # a copy
    assert h.a.x[0].item() == 0.0


def test_lazy_stack_reads_the_held_class() -> None:
    h = _holder()
    lazy = Holder.lazy_stack([h, h.clone()])
    assert type(lazy.a) is Inner and isinstance(lazy.a._tensordict, LazyStackedTensorDict)
    lazy.a.x = torch.full((2, 3), 4.0)
    assert h.a.x.tolist() == [4.0, 4.0, 4.0]
    mixed = Holder.lazy_stack([h, Holder(a=Other(z=torch.zeros(3), batch_size=[3]), batch_size=[3])])
    assert type(mixed.a) is LazyStackedTensorDict  # two classes: no one class to read it as


def test_fields_warns_that_it_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match=r"deprecated.*0\.17.*dataclasses\.fields\(cls\)"):
        names = [f.name for f in Inner.fields()]
    assert names == ["x"]


def test_dataclass_subclass_of_an_in_place_tensorclass_is_a_tensorclass() -> None:
    @dataclasses.dataclass
    class P:
        x: torch.Tensor

    from_dataclass(P, inplace=True)

    @dataclasses.dataclass
    class Q(P):
        y: torch.Tensor

    # the class-level API before any instance: built with Q's own field
    built = Q.from_tensordict(TensorDict(x=torch.zeros(2), y=torch.ones(2), batch_size=[2]))
    assert type(built).__name__ == "Q" and built.y.tolist() == [1.0, 1.0]
    q = Q(x=torch.zeros(2), y=torch.ones(2), batch_size=[2])
    assert isinstance(q, Q) and isinstance(q, P) and is_tensorclass(q)
    assert q.batch_size == (2,) and q[1].y.item() == 1.0
    assert torch.stack([q, q]).y.shape == (2, 2)
    assert type(q.clone()).__name__ == "Q" and q.clone().y.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="'y'"):
        Q(x=torch.zeros(2))
