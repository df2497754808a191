"""The seams of the base class: the one path resolver, the one batch-fit check, the backend hooks' defaults."""

from __future__ import annotations

import pytest
import torch
from _messages import batch_mismatch

from tensorbatch import LazyStackedTensorDict, NonTensorData, TensorClass, TensorDict, TypedTensorDict, lazy_stack
from tensorbatch._ops.traverse import MISSING, unfit_keys


@pytest.fixture
def td():
    return TensorDict({"a": torch.zeros(2), "n": {"m": {"x": torch.ones(2, 3)}}, "s": "text"}, [2])


def test_locate_reports_the_holder(td):
    node, walked, stop = td._locate(("n", "m", "x"))
    assert node is td["n", "m"]
    assert walked == 2
    assert stop is None


def test_locate_stops_at_a_missing_key(td):
    node, walked, stop = td._locate(("n", "zz", "x"))
    assert node is td["n"]
    assert walked == 1
    assert stop is MISSING


def test_locate_stops_at_a_leaf(td):
    node, walked, stop = td._locate(("a", "b"))
    assert node is td
    assert walked == 0
    assert torch.equal(stop, torch.zeros(2))


def test_locate_of_a_single_key_is_the_root(td):
    assert td._locate(("zz",)) == (td, 0, None)


def test_readers_and_writers_agree_on_stops(td):
    with pytest.raises(KeyError, match=r'key "zz" not found .*\(key path \("n", "zz"\)\)'):
        td.get(("n", "zz", "x"), default=None) or td._get(("n", "zz", "x"))
    assert td.get(("n", "zz", "x")) is None
    with pytest.raises(ValueError, match="'a'"):  # a key through a leaf is an error even with a default
        td.get(("a", "b"), None)
    with pytest.raises(KeyError, match="'a'"):  # writing through a leaf: KeyError, as tensordict
        td.set(("a", "b"), torch.zeros(2))
    assert ("n", "m", "x") in td
    assert ("n", "zz") not in td
    assert ("a", "b") not in td
    td.set(("n", "new", "deep"), torch.full((2,), 7.0))  # missing levels are created with the root's batch
    assert td["n", "new"].batch_size == torch.Size([2])
    assert td["n", "new", "deep"].tolist() == [7.0, 7.0]


def test_get_through_a_non_tensor_leaf(td):
    assert td.get(("s", "x")) is None  # a non-tensor leaf has no keys: missing, as in tensordict
    with pytest.raises(KeyError):
        td._get(("s", "x"))


@pytest.mark.parametrize(
    ("batch", "values", "unfit"),
    [
        ([3], {"a": torch.zeros(3), "b": torch.zeros(3, 2)}, []),
        ([3], {"a": torch.zeros(3), "b": torch.zeros(4)}, ["b"]),
        ([3], {"a": torch.zeros(()), "b": 1.0, "c": {"d": torch.zeros(3)}}, ["a", "b", "c"]),
        ([3, 2], {"a": torch.zeros(3, 2, 5), "b": torch.zeros(3, 3)}, ["b"]),
        ([], {"a": torch.zeros(()), "b": torch.zeros(4)}, []),
    ],
)
def test_unfit_keys_lists_what_needs_validation(batch, values, unfit):
    assert unfit_keys(values, torch.Size(batch), None) == unfit


def test_unfit_keys_checks_the_device_and_refuses_nested_keys():
    assert unfit_keys({"a": torch.zeros(3)}, torch.Size([3]), torch.device("meta")) == ["a"]
    assert unfit_keys({"a": torch.zeros(3, device="meta")}, torch.Size([3]), torch.device("meta")) == []
    assert unfit_keys({("a", "b"): torch.zeros(3)}, torch.Size([3]), None) is None


def test_constructors_share_the_check():
    class TC(TensorClass):
        a: torch.Tensor

    class TT(TypedTensorDict):
        a: torch.Tensor

    for build in (
        lambda v: TensorDict({"a": v}, [3]),
        lambda v: TC(a=v, batch_size=[3]),
        lambda v: TT(a=v, batch_size=[3]),
    ):
        assert build(torch.zeros(3, 2)).batch_size == torch.Size([3])
        with pytest.raises(RuntimeError, match=batch_mismatch([3], "a", [4])):
            build(torch.zeros(4))


def test_constructor_keeps_the_source_order_with_nested_keys():
    td = TensorDict({("x", "y"): torch.zeros(2), "b": torch.zeros(2), "a": {"c": torch.zeros(2)}}, [2])
    assert list(td.keys()) == ["x", "b", "a"]
    assert td["x"].batch_size == torch.Size([2])


def test_index_flat_hook(td):
    dense = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.arange(4)}}, [4])
    out = dense._index_flat(slice(1, 3))
    assert type(out) is TensorDict
    assert out["n", "b"].tolist() == [1, 2]
    assert out.batch_size == torch.Size([2])
    assert dense._index_flat(slice(None, None, -1)) is None  # left to the generic indexing
    assert td._index_flat(0) is None  # a non-tensor leaf: the generic path
    stacked = lazy_stack([dense, dense])
    assert stacked._index_flat(0) is None  # the base's default


def test_stacked_members_hook():
    a, b = TensorDict({"x": torch.zeros(2)}, [2]), TensorDict({"x": torch.ones(2)}, [2])
    stacked = LazyStackedTensorDict(a, b, stack_dim=1)
    dim, members = stacked._stacked_members()
    assert dim == 1
    assert members[0] is a
    assert members[1] is b
    assert a._stacked_members() is None
    assert NonTensorData("v", batch_size=[2])._stacked_members() is None
