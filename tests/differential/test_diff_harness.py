"""Checks of the differential harness itself: the comparator must catch the differences it claims to."""

from __future__ import annotations

import types

import pytest
import torch

from ._diff import assert_same, build, builtin_bases, run_both

pytestmark = pytest.mark.differential


def _fake(ref):
    """A second 'library' object that is tensordict under another identity, so fns can diverge on purpose."""
    return types.SimpleNamespace(TensorDict=ref.TensorDict, TensorDictBase=ref.TensorDictBase)


MUTATIONS = {
    "dtype": lambda td: td.set("a", td["a"].double()),
    "value": lambda td: td.set("b", td["b"] + 1),
    "missing_leaf": lambda td: td.exclude(("nested", "c")),
    "empty_subtd_dropped": lambda td: td.exclude(("nested", "deep", "d")).exclude(("nested", "deep")),
    "batch_size": lambda td: td.unsqueeze(0),
    "locked": lambda td: td.lock_(),
    "names": lambda td: td.refine_names("x", "y"),
    "class": lambda td: td.to_lazystack(0),
    "tensor_not_td": lambda td: td["a"],
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_assert_same_catches(ref, mutation):
    r = build(ref, "float")
    s = MUTATIONS[mutation](build(ref, "float"))
    if mutation == "empty_subtd_dropped":
        r = r.exclude(("nested", "deep", "d"))
    with pytest.raises(AssertionError):
        assert_same(r, s, ref, ref)


@pytest.mark.parametrize(
    ("r", "s"),
    [
        ((1, 2), [1, 2]),
        (True, torch.tensor(True)),
        (1, 1.0),
        (torch.Size([2]), (2,)),
        (torch.ones(2), torch.ones(2, 1)),
        (torch.ones(2), torch.ones(2, dtype=torch.float64)),
        (float("nan"), 0.0),
        ("a", "b"),
    ],
    ids=["tuple_vs_list", "bool_vs_tensor", "int_vs_float", "size_vs_tuple", "shape", "dtype", "nan", "str"],
)
def test_assert_same_catches_plain(ref, r, s):
    with pytest.raises(AssertionError):
        assert_same(r, s, ref, ref)


def test_assert_same_accepts_equal(ref):
    assert_same((build(ref), [1, "x"], None, float("nan")), (build(ref), [1, "x"], None, float("nan")), ref, ref)


def test_builtin_bases(ref):
    td = build(ref)
    with pytest.raises(RuntimeError, match="Failed to update") as info:
        td.set_("a", torch.zeros(4, 5, 2))
    assert builtin_bases(type(info.value)) == (ValueError, RuntimeError)  # tensordict's _InplaceWriteError
    assert builtin_bases(KeyError) == (KeyError,)
    assert builtin_bases(type("E", (ValueError, RuntimeError), {})) == (ValueError, RuntimeError)


def test_run_both_exception_type_mismatch(ref):
    sub = _fake(ref)

    def fn(lib, td):
        raise (KeyError if lib is ref else ValueError)("boom")

    with pytest.raises(AssertionError, match="builtin base KeyError"):
        run_both(ref, sub, fn, raises=KeyError)


def test_run_both_exception_subclass_ok(ref):
    sub = _fake(ref)

    def fn(lib, td):
        raise (KeyError if lib is ref else type("MyKeyError", (KeyError,), {}))("boom")

    run_both(ref, sub, fn, raises=KeyError)


def test_run_both_subject_must_raise(ref):
    sub = _fake(ref)

    def fn(lib, td):
        if lib is ref:
            raise RuntimeError("boom")
        return 1

    with pytest.raises(pytest.fail.Exception, match="subject returned 1"):
        run_both(ref, sub, fn, raises=RuntimeError)


def test_run_both_reference_error_needs_an_expectation(ref):
    """Both raising the same type is no pass unless the case says the reference raises."""
    with pytest.raises(AssertionError, match=r"reference raised KeyError .* does not expect it.*raises=KeyError"):
        run_both(ref, ref, lambda lib, td: td["zz"])
    run_both(ref, ref, lambda lib, td: td["zz"], raises=KeyError)
    with pytest.raises(AssertionError, match="test premise: reference raised KeyError, not"):
        run_both(ref, ref, lambda lib, td: td["zz"], raises=ValueError)


def test_run_both_premise(ref):
    with pytest.raises(AssertionError, match="test premise"):
        run_both(ref, ref, lambda lib, td: td["a"], raises=KeyError)


def test_run_both_identity(ref):
    sub = _fake(ref)
    with pytest.raises(AssertionError, match="identity"):
        run_both(ref, sub, lambda lib, td: td if lib is ref else td.clone())


def test_run_both_input_mutation(ref):
    sub = _fake(ref)

    def fn(lib, td):
        out = td.clone()
        if lib is not ref:
            td.zero_()
        return out

    with pytest.raises(AssertionError, match="input after fn"):
        run_both(ref, sub, fn)
