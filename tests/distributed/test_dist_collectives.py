"""reduce/all_reduce/broadcast/all_gather/gather_and_stack across 2 and 3 real gloo processes."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tensorbatch import LazyStackedTensorDict, NonTensorData, TensorClass, TensorDict
from tensorbatch._io import wire


def make(scale: float) -> TensorDict:
    return TensorDict(
        {
            "a": torch.full((2, 3), scale),
            "i": torch.full((2,), int(scale), dtype=torch.int64),
            "n": {"b": torch.full((2, 1), 2 * scale, dtype=torch.float64), "t": torch.full((2, 4), scale).t()[:2].t()},
        },
        batch_size=[2],
    )


class Point(TensorClass):
    x: torch.Tensor


def total(world: int) -> float:
    return float(sum(r + 1 for r in range(world)))


# ------------------------------------------------------------------------------------------------ jobs
def job_all_reduce(rank, world, mode):
    td = make(rank + 1.0)
    if mode == "sync":
        assert td.all_reduce() is None
    elif mode == "async":
        works = td.all_reduce(async_op=True)
        wire.wait_all(works)
    elif mode == "bucket":
        assert td.all_reduce(bucket_bytes=1 << 20) is None
    elif mode == "bucket_async":
        wire.wait_all(td.all_reduce(async_op=True, bucket_bytes=24))
    elif mode == "max":
        td.all_reduce(op=dist.ReduceOp.MAX)
        assert torch.equal(td["a"], torch.full((2, 3), float(world)))
        return None
    expected = make(total(world))
    assert all(torch.equal(td[k], expected[k]) for k in expected.keys(True, True)), td.to_dict()
    assert not td["n", "t"].is_contiguous()  # the non-contiguous leaf was written back in place
    return None


def job_reduce(rank, world, async_op):
    td = make(rank + 1.0)
    lazy = LazyStackedTensorDict(*(make(rank + 1.0) for _ in range(2)), stack_dim=0)
    works = td.reduce(dst=1, async_op=async_op, return_premature=async_op)
    if async_op:
        wire.wait_all(works)
    lazy.reduce(dst=1)
    if rank == 1:
        expected = make(total(world))
        assert all(torch.equal(td[k], expected[k]) for k in expected.keys(True, True))
        assert torch.equal(lazy.tensordicts[1]["n", "b"], expected["n", "b"])
    return None


def job_broadcast(rank, world):
    if rank == 1:
        td = make(7.0)
        td["label"] = NonTensorData("seven", batch_size=[2])
        out = td.broadcast(src=1)
        assert out.is_consolidated()
    else:
        out = TensorDict().broadcast(src=1)
    assert torch.equal(out["n", "b"], make(7.0)["n", "b"])
    assert out["label"] == "seven"
    point = Point(x=torch.arange(3.0), batch_size=[3]) if rank == 0 else Point(x=torch.zeros(3), batch_size=[3])
    got = point.broadcast(src=0)
    assert type(got) is Point
    assert torch.equal(got.x, torch.arange(3.0))
    built = Point.from_remote_init(src=0, use_broadcast=True) if rank else None
    if rank == 0:
        point.init_remote(use_broadcast=True)
    else:
        assert type(built) is Point
        assert torch.equal(built.x, torch.arange(3.0))
    return sorted(out.keys())


def job_all_gather(rank, world):
    td = TensorDict({"r": torch.full((rank + 1,), float(rank))}, batch_size=[rank + 1])  # shapes differ per rank
    if rank == 2:
        td["extra"] = {"x": torch.ones(3, 2)}
    out = td.all_gather()
    assert [t.batch_size for t in out] == [torch.Size([r + 1]) for r in range(world)]
    assert [t["r"][0].item() for t in out] == [float(r) for r in range(world)]
    assert "extra" in out[2]
    assert "extra" not in out[1]
    return None


def job_gather_and_stack(rank, world, folder):
    if rank == 0:
        out = make(0.0).expand(world - 1, 2).clone().memmap(folder)
        assert out.gather_and_stack(dst=0) is out
        assert torch.equal(out["a"][:, 0, 0], torch.tensor([2.0, 3.0][: world - 1]))
        reread = TensorDict.load_memmap(folder)
        assert torch.equal(reread["n", "b"][:, 0, 0], torch.tensor([4.0, 6.0][: world - 1], dtype=torch.float64))
        return None
    assert make(rank + 1.0).gather_and_stack(dst=0) is None
    return None


def job_collective_mismatch(rank, world, what):
    td = make(1.0)
    if rank == 2:
        td["n", "b"] = torch.zeros(2, 5, dtype=torch.float64)
    before = td.clone()
    try:
        if what == "all_reduce":
            td.all_reduce()
        elif what == "reduce":
            td.reduce(dst=0)
        else:
            out = make(0.0).expand(world - 1, 2).clone() if rank == 0 else td
            out.gather_and_stack(dst=0)
    except RuntimeError as err:
        assert all(torch.equal(td[k], before[k]) for k in before.keys(True, True))
        return str(err)
    return None


def job_broadcast_failure(rank, world):
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    if rank == 0:
        td["obj"] = NonTensorData({1, 2}, batch_size=[2])  # a set: not JSON
    return td.broadcast(src=0)


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("mode", ["sync", "async", "bucket", "bucket_async", "max"])
def test_all_reduce(groups, world, mode):
    groups(world).run(job_all_reduce, mode)


@pytest.mark.parametrize("async_op", [False, True])
def test_reduce_into_dst_dense_and_lazy(groups, async_op):
    groups(3).run(job_reduce, async_op)


def test_broadcast_to_ranks_that_know_nothing(groups):
    assert groups(3).run(job_broadcast) == [["a", "i", "label", "n"]] * 3


def test_all_gather_different_structures(groups):
    groups(3).run(job_all_gather)


@pytest.mark.parametrize("world", [2, 3])
def test_gather_and_stack_into_memmap(groups, world, tmp_path):
    groups(world).run(job_gather_and_stack, str(tmp_path / "out"))


@pytest.mark.parametrize("what", ["all_reduce", "reduce", "gather_and_stack"])
def test_collective_structure_mismatch_raises_on_every_rank(groups, what):
    messages = groups(3).run(job_collective_mismatch, what)
    assert all(m is not None for m in messages), messages
    if what == "gather_and_stack":
        needle = (
            "structure mismatch at key ('n', 'b'): rank 2 has float64 [2, 5], a row of the destination has "
            "float64 [2, 1]"
        )
    else:
        needle = "structure mismatch at key ('n', 'b'): rank 0 has float64 [2, 1], rank 2 has float64 [2, 5]"
    assert all(needle in m for m in messages), messages


def test_broadcast_failure_reaches_every_rank(groups):
    outs = groups(3).outcomes(job_broadcast_failure)
    assert outs[0].kind == "TypeError"
    assert "cannot send the non-tensor value at key 'obj' (a set)" in outs[0].error
    for o in outs[1:]:
        assert o.kind == "RuntimeError"
        assert "broadcast: rank 0 failed before sending: TypeError" in o.error


def test_bucket_bytes_must_be_positive():
    with pytest.raises(ValueError, match="bucket_bytes must be a positive number of bytes, got 0"):
        make(1.0).all_reduce(bucket_bytes=0, check_structure=False)
