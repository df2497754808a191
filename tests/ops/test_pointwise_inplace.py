"""In-place ops check every leaf before writing any: a refused op leaves the container unchanged.

Each case has a float leaf walked before the leaf that cannot take the result (an integer leaf, at a
nested key), so an op that wrote while it checked would have changed the float leaf already. The error
names the op and the key path, on a TensorDict and on a lazy stack (whose members are all computed
before any is written).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack
from tensorbatch._errors import fmt_path

BAD = ("nested", "n")  # the leaf that cannot take the result


def make_td(int_dtype: torch.dtype = torch.int64) -> TensorDict:
    return TensorDict(
        {"a": torch.linspace(-1, 1, 6).reshape(3, 2), "nested": {"n": torch.arange(3, dtype=int_dtype)}},
        batch_size=[3],
    )


def make_lazy(int_dtype: torch.dtype = torch.int64) -> LazyStackedTensorDict:
    return lazy_stack([make_td(int_dtype), make_td(int_dtype) * 2])


def floats_like(td: Any) -> Any:
    """Operands of the same keys, every leaf floating (so the integer leaf cannot take the result)."""
    return td.float() + 0.5


def message(err: BaseException) -> str:
    return "\n".join([str(err), *getattr(err, "__notes__", [])])


# name -> (int dtype of the bad leaf, the failing call); every call would succeed on the float leaf
CASES: dict[str, tuple[torch.dtype, Callable[[Any], Any]]] = {
    "clamp_": (torch.int64, lambda td: td.clamp_(-0.5, 0.5)),
    "clamp_-td-bounds": (torch.int64, lambda td: td.clamp_(floats_like(td) - 1, floats_like(td))),
    "lerp_": (torch.int64, lambda td: td.lerp_(floats_like(td), 0.5)),
    "lerp_-int-end": (torch.int64, lambda td: td.lerp_(td.clone(), 0.5)),
    "addcmul_": (torch.int64, lambda td: td.addcmul_(floats_like(td), floats_like(td))),
    "addcdiv_": (torch.int64, lambda td: td.addcdiv_(floats_like(td), floats_like(td))),
    "addcdiv_-int-operands": (torch.int64, lambda td: td.addcdiv_(td.clone(), td.clone() + 1)),
    "masked_fill_": (torch.uint8, lambda td: td.masked_fill_(torch.ones(td.batch_size[:1], dtype=torch.bool), 300)),
    "mul_": (torch.int64, lambda td: td.mul_(0.5)),
    "div_": (torch.int64, lambda td: td.div_(floats_like(td))),
    "exp_": (torch.int64, lambda td: td.exp_()),
}


def _op(case: str) -> str:
    return case.split("-")[0]


def _run(td: Any, case: str) -> None:
    int_dtype, call = CASES[case]
    before = td.clone()
    with pytest.raises((RuntimeError, NotImplementedError)) as info:
        call(td)
    text = message(info.value)
    assert _op(case) in text, text
    assert fmt_path(BAD) in text, text
    assert (td == before).all(), f"{case} wrote before it failed"
    assert td["nested", "n"].dtype == int_dtype


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_inplace_op_leaves_tensordict_unchanged(case: str) -> None:
    _run(make_td(CASES[case][0]), case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_inplace_op_leaves_lazy_stack_unchanged(case: str) -> None:
    _run(make_lazy(CASES[case][0]), case)


def test_error_names_the_op_not_a_helper() -> None:
    with pytest.raises(
        RuntimeError,
        match=r"^addcdiv_: result type torch.float32 cannot be written in place into "
        r"leaf \('nested', 'n'\) of dtype torch.int64: nothing was modified$",
    ):
        make_td().addcdiv_(floats_like(make_td()), floats_like(make_td()))


def test_masked_fill_value_checked_once_per_dtype() -> None:
    """A value that fits every leaf is written; one that overflows only a later leaf changes nothing."""
    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(3, dtype=torch.int8)}, [3])
    mask = torch.tensor([True, False, True])
    assert td.masked_fill_(mask, 100) is td
    assert td["a"].tolist() == [100.0, 0.0, 100.0]
    assert td["b"].tolist() == [100, 0, 100]
    with pytest.raises(RuntimeError, match="overflow") as info:
        td.masked_fill_(~mask, 200)
    assert "while masked_fill_ at key 'b'" in message(info.value)
    assert td["a"].tolist() == [100.0, 0.0, 100.0]


def test_masked_fill_lazy_checks_the_whole_mask() -> None:
    """A mask that fits a member but not the stack is refused (members see only their slice)."""
    stacked = lazy_stack([make_td(), make_td()])  # batch (2, 3)
    with pytest.raises(RuntimeError, match="does not match batch_size"):
        stacked.masked_fill_(torch.tensor([True, False, True]), 1)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    assert stacked.masked_fill_(mask, 7) is stacked
    assert stacked["nested", "n"].tolist() == [[7, 1, 7], [0, 1, 7]]
    assert stacked.masked_fill_(torch.tensor([False, True]), 5) is stacked  # over the stack dim only
    assert stacked["nested", "n"].tolist() == [[7, 1, 7], [5, 5, 5]]
    assert stacked.tensordicts[1]["a"].eq(5).all()
    across = lazy_stack([make_td(), make_td()], 1)  # batch (3, 2): a mask over dim 0 spans every member
    across.masked_fill_(torch.tensor([False, True, False]), 9)
    assert across["nested", "n"].tolist() == [[0, 0], [9, 9], [2, 2]]


def test_inplace_that_fits_still_writes_every_leaf() -> None:
    td = make_td()
    a, n = td["a"], td["nested", "n"]
    assert td.clamp_(0, 1) is td
    assert td["a"] is a
    assert td["nested", "n"] is n
    torch.testing.assert_close(a, torch.tensor([[0.0, 0.0], [0.0, 0.2], [0.6, 1.0]]))
    assert n.tolist() == [0, 1, 1]
    assert td.addcmul_(td.clone(), td.clone(), value=2)["nested", "n"].tolist() == [0, 3, 3]
