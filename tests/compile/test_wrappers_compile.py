"""TensorClass and TypedTensorDict instances (and their backends) in compiled functions: results as eager."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tensorbatch import MemoryMappedTensor, TensorClass, TensorDict

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


def test_gradient_of_a_memory_mapped_parameter_set_in_a_compiled_function(tmp_path):
    """grad over memory-mapped parameters, compiled: a graph break inside it (to_module) runs the transform eagerly.

    Its flatten then read ``shape`` through a ``__torch_function__`` that dynamo had compiled as a frame of its
    own (guarded without the function it got): the ``is_nested`` read before it came back (TypeError).
    """
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(5, 3)
    params = TensorDict.from_module(net).detach().clone()
    params.memmap_(tmp_path / "params")

    def loss(p):
        with p.to_module(net):
            return net(x).pow(2).sum()

    torch._dynamo.reset()
    got = torch.compile(torch.func.grad(loss), backend="eager")(params)
    want = torch.func.grad(loss)(params.to_tensordict())
    assert got.batch_size == want.batch_size
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"at {key}")


def test_jacobian_of_a_memory_mapped_td_with_a_graph_break(tmp_path):
    """jacrev run eagerly in a compiled region reads ``primal.shape`` of the memory-mapped inputs (it was a dtype)."""
    g = torch.Generator().manual_seed(0)
    td = TensorDict({"a": torch.randn(4, 3, generator=g), "n": {"b": torch.randn(4, generator=g)}}, [4])
    td.memmap_(tmp_path / "td")

    def inner(u):
        torch._dynamo.graph_break()
        return u["a"].sum(-1) + u["n", "b"]

    def jac(t):
        return torch.func.jacrev(inner)(t)

    torch._dynamo.reset()
    got, want = torch.compile(jac, backend="eager")(td), jac(td.to_tensordict())
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"at {key}")


def test_attribute_reads_of_a_memory_mapped_tensor_in_a_compiled_torch_function(tmp_path):
    """Each attribute read gives its own value (dynamo compiled the override as a frame, one guard for all reads)."""
    mapped = MemoryMappedTensor.from_tensor(torch.randn(4, 3), filename=tmp_path / "x.memmap")
    override = torch.compile(MemoryMappedTensor.__torch_function__.__func__, backend="eager")
    torch._dynamo.reset()
    reads = [
        override(MemoryMappedTensor, getter.__get__, (MemoryMappedTensor,), (mapped,))
        for getter in (torch.Tensor.is_nested, torch.Tensor.shape, torch.Tensor.dtype)
    ]
    assert reads == [False, torch.Size([4, 3]), torch.float32]
