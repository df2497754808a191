"""A memory-mapped TensorDict in a compiled function: results as eager, in-place writes reach the files."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tensorbatch import MemoryMappedTensor, TensorDict

pytestmark = pytest.mark.slow

OPS = {
    "mul": lambda t: t * 2,
    "index": lambda t: t[1:3],
    "apply": lambda t: t.apply(lambda x: x + 1),
    "stack": lambda t: torch.stack([t, t]),
    "reshape": lambda t: t.reshape(2, 2),
}


def mapped(tmp_path) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    td = TensorDict({"a": torch.randn(4, 3, generator=g), "n": {"b": torch.randn(4, generator=g)}}, batch_size=[4])
    return td.memmap_(tmp_path / "td")


@pytest.mark.parametrize("name", sorted(OPS))
def test_compiled_equals_eager_without_graph_breaks(name, tmp_path):
    td = mapped(tmp_path)
    fn = OPS[name]
    torch._dynamo.reset()
    assert torch._dynamo.explain(fn)(td).graph_break_count == 0
    got, want = torch.compile(fn, backend="eager", fullgraph=True)(td), fn(td)
    assert got.batch_size == want.batch_size
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"at {key}")


def test_compiled_in_place_writes_reach_the_files(tmp_path):
    td = mapped(tmp_path)
    before = td.to_tensordict()

    def update(t):
        t.add_(1)
        t["n", "b"].mul_(3)
        return t

    torch._dynamo.reset()
    torch.compile(update, backend="eager", fullgraph=True)(td)
    back = TensorDict.load_memmap(tmp_path / "td")
    torch.testing.assert_close(back["a"], before["a"] + 1)
    torch.testing.assert_close(back["n", "b"], (before["n", "b"] + 1) * 3)
    assert isinstance(td["a"], MemoryMappedTensor)


def test_base_of_a_view_is_not_rewrapped(tmp_path):
    """``t._base`` as torch gives it (rewrapping it gave a base that has a base, without end, to dynamo)."""
    m = MemoryMappedTensor.from_tensor(torch.arange(6.0), filename=tmp_path / "x.memmap")
    view = m[1:4]
    assert isinstance(view, MemoryMappedTensor)
    assert view.filename == m.filename
    assert type(view._base) is torch.Tensor
    assert view._base._base is None
    torch.testing.assert_close(view._base, torch.arange(6.0))
