"""scatter across 2 and 3 real gloo processes: each rank gets its own TensorDict from the source rank."""

from __future__ import annotations

import pytest
import torch

from tensorbatch import TensorDict


def make(rank: int) -> TensorDict:
    return TensorDict({"a": torch.full((2, 3), float(rank)), "n": {"i": torch.arange(2) + rank}}, batch_size=[2])


def job_scatter(rank, world, src):
    mine = TensorDict()  # unused on the receivers: the structure comes from src
    tds = [make(r) for r in range(world)] if rank == src else None
    out = mine.scatter(src, tds)
    if rank == src:
        assert out is tds[src]
    assert out.batch_size == torch.Size([2])
    return out["a"][0, 0].item(), out["n", "i"].tolist()


def job_scatter_wrong_count(rank, world):
    if rank != 0:
        return None
    try:
        TensorDict().scatter(0, [make(0)])
    except ValueError as err:
        return str(err)
    return "no error"


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("src", [0, 1])
def test_scatter(groups, world, src):
    values = groups(world).run(job_scatter, src)
    assert values == [(float(r), [r, r + 1]) for r in range(world)]


def test_scatter_wrong_count_raises_before_sending(groups):
    values = groups(2).run(job_scatter_wrong_count)
    assert "needs one TensorDict per rank (2), got 1" in values[0]
