"""torch.distributed peers that declare hostile sizes: a receiver allocates nothing from them.

A real gloo group of two forked processes on 127.0.0.1 (``tests/distributed/_dist_group.py``); rank 0 sends
hand-made structure headers, rank 1 receives into its own TensorDict. Before the checks, each case allocated
the declared size and waited for data that never came (the harness's timeout: a hang). Each receiver
raises, naming the peer rank (and the key), its TensorDict unchanged, and the group still works afterwards
(docs/security.md, "torch.distributed peers").
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
import torch

from tensorbatch import TensorDict
from tensorbatch._io import distributed as p2p
from tensorbatch._io import wire

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))
from _dist_group import Groups

TIMEOUT = 30.0  # seconds per job: a receiver that waits for the declared data fails the test


@pytest.fixture(scope="module")
def groups():
    found = Groups()
    yield found
    found.close()


def _make(fill: float = 1.0) -> TensorDict:
    return TensorDict(
        obs=torch.full((3, 4), fill), n={"r": torch.full((3,), fill, dtype=torch.float64)}, batch_size=[3]
    )


def _then_honest(rank: int) -> bool:
    """An honest transfer after the hostile one: the group still works."""
    if rank == 0:
        _make().send(dst=1, init_tag=100)
        return True
    td = _make(0.0)
    td.recv(src=0, init_tag=100)
    return bool((td == _make()).all())


def _receive(td: TensorDict, **kwargs) -> str:
    before = td.clone()
    with pytest.raises(RuntimeError) as info:
        td.recv(src=0, **kwargs)
    assert (td == before).all(), "a refused transfer wrote into the receiver"
    return str(info.value)


def job_huge_header_length(rank, world):
    """Rank 0 declares an 8 GiB header and sends only its first block."""
    if rank == 0:
        block = bytearray(wire.BLOCK)
        struct.pack_into("<qq", block, 0, wire._MAGIC, 8 << 30)
        p2p.wire.Peer(1, None, None, ("dst", "group_dst")).isend(
            torch.frombuffer(block, dtype=torch.uint8), wire.header_tag(0, 0)
        ).wait()
        return None, _then_honest(rank)
    return _receive(_make(0.0)), _then_honest(rank)


def job_huge_leaf(rank, world, consolidated):
    """Rank 0 announces a float32 leaf of shape [2**31] (8 GiB) and sends no data: it waits for the ack."""
    peer = wire.Peer(1 if rank == 0 else 0, None, None, ("dst", "group_dst"))
    if rank == 0:
        if consolidated:
            header = wire.leaves_header("consolidated", [(("obs",), "float32", (1 << 31,))], 1 << 33)
        else:
            header = wire.leaves_header("leaves", [(("obs",), "float32", (1 << 31,))])
        works = wire.send_header(peer, header, 0, "cpu")
        ack = torch.zeros(wire.ACK, dtype=torch.uint8)
        peer.irecv(ack, wire.header_tag(0, 2)).wait()
        wire.wait_all(works)
        return wire.ack_text(ack), _then_honest(rank)
    td = TensorDict(obs=torch.zeros(3, 4), batch_size=[3])
    return _receive(td.consolidate() if consolidated else td, consolidated=consolidated), _then_honest(rank)


def job_malformed_header(rank, world, leaves):
    peer = wire.Peer(1 if rank == 0 else 0, None, None, ("dst", "group_dst"))
    if rank == 0:
        wire.wait_all(wire.send_header(peer, {"mode": "leaves", "leaves": leaves, "nbytes": 0}, 0, "cpu"))
        return None, _then_honest(rank)
    return _receive(_make(0.0)), _then_honest(rank)


def job_huge_init_buffer(rank, world):
    """from_remote_init: a layout of no leaves with an 8 GiB buffer."""
    peer = wire.Peer(1 if rank == 0 else 0, None, None, ("dst", "group_dst"))
    if rank == 0:
        layout = {"entries": {}, "batch_size": [], "device": None}
        header = {"mode": "init", "layout": layout, "nbytes": 8 << 30, "leaves": []}
        wire.wait_all(wire.send_header(peer, header, p2p._INIT, "cpu"))
        return None, _then_honest(rank)
    with pytest.raises(RuntimeError) as info:
        TensorDict.from_remote_init(0)
    return str(info.value), _then_honest(rank)


def test_a_header_longer_than_the_maximum_is_refused_before_it_is_received(groups):
    (_, ok0), (message, ok1) = groups(2).run(job_huge_header_length, timeout=TIMEOUT)
    assert "rank 0 declared a structure header of 8589934592 bytes, more than max_header_size=16777216" in message
    assert ok0
    assert ok1


@pytest.mark.parametrize("consolidated", [False, True])
def test_a_huge_declared_leaf_is_neither_allocated_nor_drained(groups, consolidated):
    (ack, ok0), (message, ok1) = groups(2).run(job_huge_leaf, consolidated, timeout=TIMEOUT)
    assert message.startswith("recv from rank 0 failed, nothing was written")
    assert (
        "structure mismatch at key 'obs': the sender (rank 0) has float32 [2147483648], this receiver has "
        "float32 [3, 4]"
    ) in message
    assert "the sender declares 8589934592 bytes of data, far more than this receiver's 48: not received" in message
    assert ack is not None
    assert ack in message  # the sender learns it too (its ack)
    assert ok0
    assert ok1


@pytest.mark.parametrize(
    ("leaves", "needle"),
    [
        ([[["obs"], "float32", [3, -4]]], "at key 'obs': bad dtype or shape"),
        ([[["obs"], "os.system", [3, 4]]], "at key 'obs': bad dtype or shape"),
        ([[["obs", 7], "float32", [3]]], "entry"),
        ("not a list", "its leaves are not a list"),
    ],
)
def test_a_malformed_header_is_refused_naming_the_rank(groups, leaves, needle):
    (_, ok0), (message, ok1) = groups(2).run(job_malformed_header, leaves, timeout=TIMEOUT)
    assert message.startswith("rank 0 sent a malformed structure header")
    assert needle in message
    assert ok0
    assert ok1


def test_from_remote_init_refuses_a_buffer_its_layout_does_not_need(groups):
    (_, ok0), (message, ok1) = groups(2).run(job_huge_init_buffer, timeout=TIMEOUT)
    assert "rank 0 declared a buffer of 8589934592 bytes for a layout of 0 bytes" in message
    assert ok0
    assert ok1
