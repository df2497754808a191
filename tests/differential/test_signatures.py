"""Every keyword argument of tensordict 0.15.3's ``TensorDict`` methods is accepted here, or listed with a reason.

The comparison reads ``inspect.signature`` of each public method both libraries have. A parameter of the
reference's that our signature lacks must be in ``THROUGH_KWARGS`` (our method takes ``**kwargs`` and
passes it on: the call is checked below) or in ``NOT_ACCEPTED`` (with the reason). Entries that our
signature gains later must leave the tables (the stale check fails otherwise).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(
        os.environ.get(SUBJECT_ENV, "tensorbatch") != "tensorbatch",
        reason="compares tensorbatch's signatures with the reference's",
    ),
]

# method -> parameters our method takes through **kwargs (each is called in test_through_kwargs)
THROUGH_KWARGS: dict[str, set[str]] = {
    "mean": {"dtype"},
    "nanmean": {"dtype"},
    "nansum": {"dtype"},
    "prod": {"dtype"},
    "sum": {"dtype"},
    "norm": {"out", "dtype"},
    "std": {"correction"},
    "var": {"correction"},
    "max": {"return_indices"},
    "min": {"return_indices"},
    "new_empty": {"dtype", "device", "requires_grad", "layout", "pin_memory", "empty_lazy"},
    "new_full": {"dtype", "device", "requires_grad", "layout", "pin_memory", "empty_lazy"},
    "new_ones": {"dtype", "device", "requires_grad", "layout", "pin_memory", "empty_lazy"},
    "new_zeros": {"dtype", "device", "requires_grad", "layout", "pin_memory", "empty_lazy"},
    "new_tensor": {"dtype", "device", "requires_grad", "pin_memory"},
    "update": {"non_blocking", "keys_to_update", "is_leaf", "update_batch_size", "ignore_lock"},
}

_ATOMIC = "atomic= is accepted and ignored: saves are always atomic (written aside, then renamed into place)"

NOT_ACCEPTED: dict[str, dict[str, str]] = {
    "auto_batch_size_": {"keep_compliant_size": "keeping a batch size that already fits is not supported"},
    "set_at_": {"non_blocking": "set_at_ writes into an existing leaf on its device; there is no move to overlap"},
    "update_at_": {"idx": "the index is the second positional argument (index)"},
    "where": {"update_batch_size": "where keeps the batch size of its inputs"},
    **{
        name: {
            "_tensorclass_type": "a private argument of the reference (the class named by import path): "
            "TensorClass.from_remote_init builds the class on the receiving side"
        }
        for name in ("broadcast", "init_remote")
    },
}


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    return {
        n: p
        for n, p in inspect.signature(fn).parameters.items()
        if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _compared(ref: Any, tb: Any) -> list[str]:
    names = []
    for name in dir(ref.TensorDict):
        if name.startswith("_") or not hasattr(tb.TensorDict, name):
            continue
        static = inspect.getattr_static(ref.TensorDict, name)
        if isinstance(static, property) or not callable(getattr(ref.TensorDict, name)):
            continue
        try:
            inspect.signature(getattr(ref.TensorDict, name))
            inspect.signature(getattr(tb.TensorDict, name))
        except (TypeError, ValueError):
            continue
        names.append(name)
    return names


def test_every_reference_keyword_is_accepted_or_listed(ref, tb):
    unlisted, stale = [], []
    for name in _compared(ref, tb):
        theirs, ours = _params(getattr(ref.TensorDict, name)), _params(getattr(tb.TensorDict, name))
        missing = set(theirs) - set(ours)
        listed = THROUGH_KWARGS.get(name, set()) | set(NOT_ACCEPTED.get(name, {}))
        unlisted += [f"{name}({p}=)" for p in sorted(missing - listed)]
        stale += [f"{name}({p}=)" for p in sorted(listed & set(ours))]
    assert not unlisted, f"reference keywords neither accepted nor listed in NOT_ACCEPTED: {unlisted}"
    assert not stale, f"listed keywords our signature now takes (remove them from the tables): {stale}"


def _takes_any_keyword(fn: Any) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


_LOOSE_ARGS: dict[str, tuple] = {
    "new_full": ((2,), 1.0),
    "new_empty": (2,),
    "new_ones": (2,),
    "new_zeros": (2,),
    "new_tensor": (torch.zeros(2),),
}


def _h5_file(tb: Any, folder: Any) -> Any:
    pytest.importorskip("h5py")
    _td(tb).to_h5(folder / "file.h5").close()
    return folder / "file.h5"


def test_no_method_swallows_keywords_the_reference_refuses(ref, tb, tmp_path):
    """Where ours takes ``**kwargs`` and tensordict's does not, an unknown keyword still raises TypeError."""
    td = _td(tb)
    checked = []
    for name in _compared(ref, tb):
        if not _takes_any_keyword(getattr(tb.TensorDict, name)) or _takes_any_keyword(getattr(ref.TensorDict, name)):
            continue
        if name == "stack":
            call = lambda: tb.TensorDict.stack([td, td], bogus_kw=1)  # noqa: E731
        elif name == "from_h5":  # its other keywords are h5py create_dataset options
            call = lambda: tb.TensorDict.from_h5(_h5_file(tb, tmp_path), bogus_kw=1)  # noqa: E731
        else:
            call = lambda: getattr(td, name)(*_LOOSE_ARGS.get(name, ()), bogus_kw=1)  # noqa: B023, E731
        with pytest.raises(TypeError, match="bogus_kw"):
            call()
        checked.append(name)
    assert {"sum", "mean", "new_zeros", "stack"} <= set(checked)


def _td(tb: Any) -> Any:
    return tb.TensorDict({"a": torch.rand(4, 3), "n": {"b": torch.rand(4)}}, [4])


THROUGH_CALLS = {
    "mean": lambda td: td.mean(dtype=torch.float64),
    "nanmean": lambda td: td.nanmean(dtype=torch.float64),
    "nansum": lambda td: td.nansum(dtype=torch.float64),
    "prod": lambda td: td.prod(dtype=torch.float64),
    "sum": lambda td: td.sum(dtype=torch.float64),
    "norm": lambda td: td.norm(dtype=torch.float64),
    "std": lambda td: td.std(correction=0),
    "var": lambda td: td.var(dim=0, correction=0),
    "max": lambda td: td.max(dim=0, return_indices=False),
    "min": lambda td: td.min(dim=0, return_indices=False),
    "new_empty": lambda td: td.new_empty(
        2,
        dtype=torch.float64,
        device="cpu",
        requires_grad=True,
        layout=torch.strided,
        pin_memory=False,
        empty_lazy=True,
    ),
    "new_full": lambda td: td.new_full(
        (2,),
        1.0,
        dtype=torch.float64,
        device="cpu",
        requires_grad=True,
        layout=torch.strided,
        pin_memory=False,
        empty_lazy=True,
    ),
    "new_ones": lambda td: td.new_ones(
        2,
        dtype=torch.float64,
        device="cpu",
        requires_grad=True,
        layout=torch.strided,
        pin_memory=False,
        empty_lazy=True,
    ),
    "new_zeros": lambda td: td.new_zeros(
        2,
        dtype=torch.float64,
        device="cpu",
        requires_grad=True,
        layout=torch.strided,
        pin_memory=False,
        empty_lazy=True,
    ),
    "new_tensor": lambda td: td.new_tensor(
        [0.0, 1.0], dtype=torch.float64, device="cpu", requires_grad=False, pin_memory=False
    ),
    "update": lambda td: td.update(
        {"a": torch.zeros(4, 3)},
        non_blocking=False,
        keys_to_update=["a"],
        is_leaf=None,
        update_batch_size=False,
        ignore_lock=False,
    ),
}


@pytest.mark.parametrize("name", sorted(THROUGH_KWARGS))
def test_through_kwargs(tb, name):
    assert set(THROUGH_CALLS) == set(THROUGH_KWARGS)
    THROUGH_CALLS[name](_td(tb))  # accepted: no TypeError


def test_new_factories_honour_their_keywords(tb):
    td = _td(tb)
    out = td.new_zeros(2, dtype=torch.float64, requires_grad=True, empty_lazy=True)
    assert out.batch_size == torch.Size([2])
    assert out["a"].shape == (2, 3)
    assert out["a"].dtype == torch.float64
    assert out["a"].requires_grad
    assert out.new_empty(3, device="cpu").device == torch.device("cpu")


def test_set_non_blocking_and_clamp_out(ref, tb):
    for lib in (ref, tb):
        td = lib.TensorDict({"a": torch.arange(4.0)}, [4])
        assert td.set_("a", torch.ones(4), non_blocking=True) is td
        assert td["a"].tolist() == [1.0] * 4, lib.__name__
        out = td.clone().zero_()
        res = (td * 3).clamp(0, 2, out=out)
        assert res is out, lib.__name__
        assert out["a"].tolist() == [2.0] * 4, lib.__name__
