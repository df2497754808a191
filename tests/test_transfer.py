"""Device moves: every leaf copy is non-blocking, one synchronisation where the host reads (issue 28).

The CPU tests see the copies a move issues through a tensor subclass that records ``Tensor.to`` calls
(the leaves are real tensors; the subclass only listens); the CUDA tests check the results, the pinned
landing memory and the single synchronisation, and skip cleanly without a GPU.
"""

from __future__ import annotations

import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorDict, tensorclass
from tensorbatch._base.transfer import accelerators_of, settle

CALLS: list[tuple[str, object]] = []


class Listening(torch.Tensor):
    """A tensor that records each ``to``/``pin_memory`` call it receives (name, non_blocking)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("to", "pin_memory"):
            CALLS.append((name, kwargs.get("non_blocking")))
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return out


def _listening(n: int = 3) -> TensorDict:
    CALLS.clear()
    leaves = {f"x{i}": torch.full((4, 2), float(i)).as_subclass(Listening) for i in range(n)}
    return TensorDict({"top": torch.zeros(4).as_subclass(Listening), "n": leaves}, batch_size=[4])


@pytest.mark.parametrize("form", ["default", "non_blocking_false", "non_blocking_true", "device_kw", "threads"])
def test_every_leaf_copy_is_non_blocking(form: str) -> None:
    td = _listening()
    kwargs = {
        "default": {},
        "non_blocking_false": {"non_blocking": False},
        "non_blocking_true": {"non_blocking": True},
        "device_kw": {},
        "threads": {"num_threads": 3},
    }[form]
    out = td.to(device="meta", **kwargs) if form == "device_kw" else td.to("meta", **kwargs)
    assert CALLS == [("to", True)] * 4  # one non-blocking copy per leaf, never a blocking one
    assert out.device == torch.device("meta")
    assert out["n", "x2"].device.type == "meta"
    assert out["n", "x1"].shape == (4, 2)


def test_lazy_stack_and_tensorclass_moves_are_non_blocking() -> None:
    stack = LazyStackedTensorDict(_listening(2), _listening(2), stack_dim=0)
    CALLS.clear()
    moved = stack.to("meta")
    assert isinstance(moved, LazyStackedTensorDict)
    assert moved.batch_size == (2, 4)
    assert CALLS == [("to", True)] * 6

    @tensorclass
    class Pair:
        a: torch.Tensor
        b: torch.Tensor

    pair = Pair(a=torch.ones(3).as_subclass(Listening), b=torch.zeros(3, 2).as_subclass(Listening), batch_size=[3])
    CALLS.clear()
    out = pair.to("meta")
    assert type(out) is Pair
    assert out.a.device.type == "meta"
    assert out.b.shape == (3, 2)
    assert CALLS == [("to", True)] * 2


def test_same_device_returns_itself_as_tensordict() -> None:
    td = TensorDict({"a": torch.zeros(3)}, [3], device="cpu")
    assert td.to("cpu") is td
    assert td.cpu() is td
    assert td.to(torch.device("cpu")) is td
    undecided = TensorDict({"a": torch.zeros(3)}, [3])  # no device: a new TensorDict that has one
    out = undecided.to("cpu")
    assert out is not undecided
    assert out.device == torch.device("cpu")
    assert out["a"] is undecided["a"]
    cast = td.to("cpu", torch.float64)  # a cast is a new TensorDict even on the same device
    assert cast is not td
    assert cast["a"].dtype == torch.float64


def test_consolidated_move_is_one_buffer() -> None:
    td = TensorDict({"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.ones(3, dtype=torch.int64)}}, [3])
    moved = td.consolidate().to("meta")
    assert moved.is_consolidated()
    assert moved.device == torch.device("meta")
    assert moved["n", "b"].dtype == torch.int64
    assert moved["a"].shape == (3, 2)


def test_consolidate_packs_leaves_and_alignment_gaps() -> None:
    odd = {
        "a": torch.arange(3, dtype=torch.int8),
        "b": torch.arange(3.0),
        "c": torch.tensor([True, False, True]),
        "d": torch.arange(6.0).view(3, 2).t().contiguous().t(),
    }  # d: not contiguous
    td = TensorDict(odd, [3])
    out = td.consolidate()
    for key, value in odd.items():
        assert torch.equal(out[key], value)
        assert out[key].dtype == value.dtype
    buffer = out["a"].untyped_storage()
    assert all(out[k].untyped_storage().data_ptr() == buffer.data_ptr() for k in odd)


def test_accelerators_of_and_settle_on_the_host() -> None:
    td = TensorDict({"a": torch.zeros(2), "m": torch.zeros(2, device="meta")}, [2])
    assert accelerators_of(td) == ()
    assert accelerators_of(TensorDict({"a": torch.zeros(2)}, [2], device="cpu")) == ()
    settle(())  # nothing to wait for: returns


def test_pin_memory_threads_checked_and_pinning_needs_an_accelerator() -> None:
    td = TensorDict({"a": torch.zeros(2)}, [2])
    if torch.cuda.is_available():
        pytest.skip("this machine can pin")
    with pytest.raises(RuntimeError):  # torch's own refusal, from the leaf
        td.pin_memory(num_threads=2)


@tensorclass
class Holder:
    a: torch.Tensor


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _gpu_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict({"a": torch.randn(64, 256, generator=g), "n": {"b": torch.arange(64)}}, [64]).to("cuda")


@cuda
def test_d2h_default_is_readable_pinned_and_synchronises_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _gpu_td()
    waits: list[object] = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (waits.append(device), real(device)))
    back = gpu.to("cpu")
    assert len(waits) == 1  # one wait for every leaf
    assert back["a"].is_pinned()  # non-blocking copies land in pinned memory
    torch.testing.assert_close(back["a"], gpu["a"].cpu())
    assert torch.equal(back["n", "b"], torch.arange(64))
    waits.clear()
    gpu.to("cpu", non_blocking=True)
    assert waits == []  # the caller synchronises
    real()


@cuda
@pytest.mark.parametrize("form", ["lazy", "tensorclass", "consolidated", "cpu_method", "constructor"])
def test_d2h_forms_synchronise_once(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _gpu_td()
    waits: list[object] = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (waits.append(device), real(device)))
    if form == "lazy":
        back = LazyStackedTensorDict(gpu, gpu.clone(), stack_dim=0).to("cpu")[1]
    elif form == "tensorclass":
        back = Holder(a=gpu["a"], batch_size=[64]).to("cpu")
    elif form == "consolidated":
        back = gpu.consolidate().to("cpu")
    elif form == "cpu_method":
        back = gpu.cpu()
    else:
        back = TensorDict(gpu.to_dict(), [64], device="cpu")
    assert len(waits) == 1
    torch.testing.assert_close(back["a"], gpu["a"].cpu())


@cuda
@pytest.mark.parametrize("num_threads", [None, 4])
def test_h2d_pin_on_the_fly(num_threads: int | None) -> None:
    host = TensorDict({"a": torch.randn(64, 8), "n": {"b": torch.arange(64)}}, [64])
    out = host.to("cuda", non_blocking_pin=True, num_threads=num_threads)
    assert out["a"].is_cuda
    assert out.device.type == "cuda"
    torch.testing.assert_close(out["a"].cpu(), host["a"])
    pinned = host.pin_memory(num_threads=num_threads)
    assert pinned["a"].is_pinned()
    assert pinned["n", "b"].is_pinned()
