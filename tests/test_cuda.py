"""CUDA paths: device moves, non_blocking, a set device. Skipped cleanly without a GPU."""

from __future__ import annotations

import pytest
import torch

from tensorbatch import TensorDict

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _td() -> TensorDict:
    return TensorDict({"a": torch.arange(12.0).view(3, 4), "n": {"b": torch.ones(3, dtype=torch.int64)}}, [3])


@pytest.mark.parametrize("non_blocking", [False, True])
def test_to_cuda_moves_every_leaf(non_blocking: bool) -> None:
    td = _td()
    out = td.to("cuda", non_blocking=non_blocking)
    torch.cuda.synchronize()
    assert out.device == torch.device("cuda", 0) or out.device.type == "cuda"
    assert out["a"].device.type == "cuda"
    assert out["n", "b"].device.type == "cuda"
    assert out["n"].device.type == "cuda"
    torch.testing.assert_close(out["a"].cpu(), td["a"])
    back = out.cpu()
    assert back.device == torch.device("cpu")
    torch.testing.assert_close(back["n", "b"], td["n", "b"])


def test_cuda_method_and_device_index() -> None:
    out = _td().cuda(0)
    assert out["a"].device == torch.device("cuda", 0)


def test_set_device_moves_new_values() -> None:
    td = TensorDict(batch_size=[3], device="cuda")
    td["x"] = torch.zeros(3)
    assert td["x"].device.type == "cuda"


def test_arithmetic_on_cuda_uses_foreach_and_matches_cpu() -> None:
    td = _td().float()
    gpu = td.to("cuda")
    torch.testing.assert_close(((gpu * 2) + gpu)["a"].cpu(), ((td * 2) + td)["a"])
    gpu.add_(1)
    torch.testing.assert_close(gpu["a"].cpu(), td["a"] + 1)


@pytest.mark.parametrize("num_threads", [None, 2])
def test_to_cuda_pinned(num_threads) -> None:
    td = _td()
    out = td.to("cuda", non_blocking_pin=True, num_threads=num_threads)
    torch.cuda.synchronize()
    assert out.device.type == "cuda" and out["n", "b"].device.type == "cuda"
    torch.testing.assert_close(out["a"].cpu(), td["a"])
    assert not td["a"].is_pinned()  # the source is left as it was


def test_to_cuda_inplace_and_record_stream() -> None:
    td = _td()
    a = td["a"]
    assert td.to("cuda", inplace=True) is td
    assert td.device.type == "cuda" and td["a"].device.type == "cuda" and td["n"].device.type == "cuda"
    torch.testing.assert_close(td["a"].cpu(), a)
    stream = torch.cuda.Stream()
    assert td.record_stream(stream) is td
    assert (td.is_cuda, td.is_cpu) == (True, False)
