"""Results of user functions in ``apply`` must fit the batch size (as tensordict 0.15.3 checks)."""

from __future__ import annotations

import pytest
import torch

from tensorbatch import TensorDict


def test_apply_result_must_fit_batch_size() -> None:
    td = TensorDict({"a": torch.randn(5, 3, 2), "n": {"b": torch.randn(5, 3)}}, batch_size=[5, 3])
    with pytest.raises(RuntimeError):
        td.apply(lambda x: x.sum())


def test_apply_result_with_explicit_batch_size_is_checked() -> None:
    td = TensorDict({"a": torch.randn(5, 3, 2)}, batch_size=[5, 3])
    with pytest.raises(RuntimeError):
        td.apply(lambda x: x.sum(), batch_size=[5])
    out = td.apply(lambda x: x.sum(1), batch_size=[5])
    assert out.batch_size == torch.Size([5])
