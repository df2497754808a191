"""TensorClass and TypedTensorDict instances (and their backends) in compiled functions: results as eager."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tensorbatch import TensorClass

pytestmark = pytest.mark.slow


class Labelled(TensorClass):
    a: torch.Tensor
    b: torch.Tensor
    label: str = "hi"


def labelled() -> Labelled:
    g = torch.Generator().manual_seed(0)
    return Labelled(a=torch.randn(4, 3, generator=g), b=torch.randn(4, generator=g), batch_size=[4])


def test_slice_assignment_with_a_non_tensor_field_in_a_full_graph():
    """Writing rows that carry the same non-tensor value reads no positions (``torch.unique`` broke the graph)."""

    def write(t):
        t[0:2] = t[2:4]
        return t

    torch._dynamo.reset()
    got, want = torch.compile(write, backend="eager", fullgraph=True)(labelled()), write(labelled())
    assert type(got) is Labelled
    assert got.batch_size == want.batch_size
    assert got.label == want.label == "hi"
    torch.testing.assert_close(got.a, want.a)
    torch.testing.assert_close(got.b, want.b)
