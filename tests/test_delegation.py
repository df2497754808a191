"""The one delegation list (tensorbatch/_delegation.py) covers TensorDictBase exactly (STYLE.md R7)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import Tensor

from tensorbatch import TensorClass, TensorDict, TensorDictBase, TypedTensorDict
from tensorbatch._delegation import (
    EXCLUDED,
    FORWARD,
    FORWARD_RETURNS_WRAPPED,
    PRIMITIVES,
    public_methods,
    rewrap,
)


class _TC(TensorClass):
    a: Tensor


class _TTD(TypedTensorDict):
    a: Tensor


def test_lists_cover_every_public_method_of_the_base():
    public = public_methods(TensorDictBase)
    declared = FORWARD | FORWARD_RETURNS_WRAPPED | set(EXCLUDED)
    assert public == declared, (
        f"add to tensorbatch/_delegation.py: {sorted(public - declared)}; "
        f"no longer on TensorDictBase: {sorted(declared - public)}"
    )


def test_lists_are_disjoint():
    assert not FORWARD & FORWARD_RETURNS_WRAPPED
    assert not (FORWARD | FORWARD_RETURNS_WRAPPED) & set(EXCLUDED)


def test_every_exclusion_has_a_reason():
    assert all(isinstance(reason, str) and reason for reason in EXCLUDED.values())


@pytest.mark.parametrize("cls", [_TC, _TTD], ids=["tensorclass", "typed"])
def test_every_listed_name_is_available_on_the_wrappers(cls):
    missing = sorted(
        n for n in FORWARD | FORWARD_RETURNS_WRAPPED | set(EXCLUDED) if inspect.getattr_static(cls, n, None) is None
    )
    assert not missing


@pytest.mark.parametrize("name", sorted(EXCLUDED))
def test_tensorclass_implements_every_excluded_name_itself(name):
    assert name in vars(TensorClass), f"TensorClass must define {name} (it is excluded from forwarding)"


def test_tensorclass_forwards_the_primitives():
    for name in PRIMITIVES:
        assert name in vars(TensorClass)
    tc = _TC(a=torch.zeros(2), batch_size=[2])
    assert list(tc._keys_str()) == ["a"]
    assert tc._get_str("a") is tc.a


def test_forwarders_keep_the_base_summary_line():
    assert TensorClass.clone.__doc__.splitlines()[0] == inspect.getdoc(TensorDictBase.clone).splitlines()[0]
    assert "Forwarded" in TensorClass.clone.__doc__


class TestRewrap:
    def test_backend_becomes_the_wrapper(self):
        tc = _TC(a=torch.zeros(2), batch_size=[2])
        assert rewrap(tc, tc._tensordict, tc._tensordict) is tc
        assert tc.zero_() is tc
        assert tc.lock_() is tc

    def test_tensordicts_tuples_and_named_tuples_are_wrapped(self):
        tc = _TC(a=torch.arange(6.0).reshape(2, 3), batch_size=[2, 3])
        assert type(tc.clone()) is _TC
        assert all(type(t) is _TC for t in tc.unbind(1))
        out = tc.max(dim=1)
        assert type(out).__name__ == "max"
        assert type(out.values) is _TC
        assert type(out.indices) is _TC

    def test_other_results_are_left_alone(self):
        tc = _TC(a=torch.zeros(2), batch_size=[2])
        assert tc.numel() == 2
        assert isinstance(tc.get("a"), Tensor)
        assert tc.is_empty() is False

    def test_wrapper_arguments_are_unwrapped_and_out_maps_back(self):
        tc = _TC(a=torch.ones(2), batch_size=[2])
        out = _TC(a=torch.zeros(2), batch_size=[2])
        assert tc.apply(lambda x: x * 3, out=out) is out
        assert torch.equal(out.a, torch.full((2,), 3.0))
        total = tc + _TC(a=torch.ones(2), batch_size=[2])
        assert type(total) is _TC
        assert torch.equal(total.a, torch.full((2,), 2.0))

    def test_properties_forward_assignment(self):
        ttd = _TTD(a=torch.zeros(2, 3), batch_size=[2, 3])
        ttd.names = ["x", "y"]
        assert ttd._source.names == ["x", "y"]
        tc = _TC(a=torch.zeros(2, 3), batch_size=[2, 3])
        tc.batch_size = [2]
        assert tc._tensordict.batch_size == torch.Size([2])

    def test_classmethods(self):
        stacked = _TC.stack([_TC(a=torch.zeros(2), batch_size=[2])] * 3)
        assert type(stacked) is _TC
        assert stacked.batch_size == torch.Size([3, 2])
        assert type(_TTD.cat([_TTD(a=torch.zeros(2), batch_size=[2])] * 2)) is _TTD
        assert type(_TC.from_tuple((1, 2))) is TensorDict
