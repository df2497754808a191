"""send/isend/recv/irecv/init_remote/from_remote_init between real gloo processes on 127.0.0.1.

Each job below runs on every rank of a module-wide process group (``_dist_group.py``); asserts inside
a job come back as failures with the worker's traceback. Every call is bounded by a timeout.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tensorbatch import LazyStackedTensorDict, NonTensorData, TensorClass, TensorDict, TypedTensorDict
from tensorbatch._io import wire


def make(scale: float = 1.0) -> TensorDict:
    """Nested, several dtypes, keys not in sorted order."""
    return TensorDict(
        {
            "obs": torch.arange(12.0).reshape(3, 4) * scale,
            "reward": torch.full((3, 1), 2.0 * scale, dtype=torch.float64),
            "done": torch.tensor([True, False, True]) if scale else torch.zeros(3, dtype=torch.bool),
            "count": (torch.arange(3, dtype=torch.int32) + 1) * int(scale),
            "half": torch.ones(3, 2, dtype=torch.bfloat16) * scale,
            "next": {
                "obs": torch.ones(3, 4) * 5 * scale,
                "deep": {"u8": torch.full((3,), 7 * int(scale), dtype=torch.uint8)},
            },
        },
        batch_size=[3],
    )


def same(a, b) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a.keys(include_nested=True, leaves_only=True))


class Pair(TensorClass):
    x: torch.Tensor
    y: torch.Tensor


class State(TypedTensorDict):
    x: torch.Tensor
    n: TensorDict


# ------------------------------------------------------------------------------------------------ jobs
def job_send_recv(rank, world, consolidated_send, receiver):
    if rank == 0:
        td = make()
        td.send(dst=1, consolidated=consolidated_send)
        return None
    from tensorbatch._io import consolidate

    td = make(0.0)
    if receiver == "consolidated":
        td = td.consolidate()
        buffer = consolidate.state(td)[0]
    last = td.recv(src=0, consolidated=consolidated_send)
    assert same(td, make()), td.to_dict()
    if receiver == "consolidated":  # the data landed in the existing buffer: no allocation, leaves are views
        assert consolidate.state(td)[0] is buffer
        assert td["next", "obs"].untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    return last


def job_isend_irecv(rank, world):
    if rank == 0:
        works = make().isend(dst=1, return_early=True, init_tag=3)
        for work in works:
            work.wait()
        return len(works)
    td = make(0.0)
    works = td.irecv(src=0, return_premature=True, init_tag=3)
    for work in works:
        work.wait()
    assert same(td, make())
    return len(works)


def job_tags(rank, world, pseudo_rand):
    if rank == 0:
        return make().isend(dst=1, init_tag=11, pseudo_rand=pseudo_rand)
    td = make(0.0)
    last = td.recv(src=0, init_tag=11, pseudo_rand=pseudo_rand)
    assert same(td, make())
    return last


def job_memmap(rank, world, folder):
    if rank == 0:
        make().send(dst=1)
        make(2.0).send(dst=1, consolidated=True)
        return None
    td = make(0.0).memmap(folder)
    assert td.is_locked
    td.recv(src=0)
    reread = TensorDict.load_memmap(folder)
    assert same(reread, make()), "the data did not land in the files"
    td.recv(src=0, consolidated=True)  # aside, then copied into the memory-mapped leaves
    assert same(TensorDict.load_memmap(folder), make(2.0))
    return type(td["obs"]).__name__


def job_lazy(rank, world):
    def stack(scale):
        return LazyStackedTensorDict(*(make(scale * (i + 1))[0] for i in range(11)), stack_dim=0)

    if rank == 0:
        TensorDict(s=stack(1.0), top=torch.ones(11), batch_size=[11]).send(dst=1)
        return None
    td = TensorDict(s=stack(0.0), top=torch.zeros(11), batch_size=[11])
    members = td["s"].tensordicts
    td.recv(src=0)
    assert td["s"].tensordicts[10] is members[10]  # written into the members, in place
    assert same(td["s"].tensordicts[10], make(11.0)[0])
    assert same(td["s"].tensordicts[1], make(2.0)[0])
    assert torch.equal(td["top"], torch.ones(11))
    return None


def job_tensorclass(rank, world):
    if rank == 0:
        pair = Pair(x=torch.arange(4.0), y=torch.ones(4, 2, dtype=torch.int64), batch_size=[4])
        pair.send(dst=1)
        pair.init_remote(dst=1)
        pair.x += 1
        pair.send(dst=1, consolidated=True)
        return None
    pair = Pair(x=torch.zeros(4), y=torch.zeros(4, 2, dtype=torch.int64), batch_size=[4])
    pair.recv(src=0)
    assert torch.equal(pair.x, torch.arange(4.0))
    assert torch.equal(pair.y, torch.ones(4, 2, dtype=torch.int64))
    built = Pair.from_remote_init(src=0)
    assert type(built) is Pair
    assert built.is_consolidated()
    assert torch.equal(built.x, torch.arange(4.0))
    built.recv(src=0, consolidated=True)
    assert torch.equal(built.x, torch.arange(4.0) + 1)
    return type(built).__name__


def job_typed(rank, world):
    def state(scale):
        return State(
            x=torch.full((2, 3), scale), n=TensorDict(v=torch.full((2,), 2 * scale), batch_size=[2]), batch_size=[2]
        )

    if rank == 0:
        state(1.0).send(dst=1)
        state(3.0).init_remote(dst=1)
        return None
    got = state(0.0)
    got.recv(src=0)
    assert torch.equal(got.x, torch.ones(2, 3))
    assert torch.equal(got["n", "v"], torch.full((2,), 2.0))
    built = State.from_remote_init(src=0)
    assert type(built) is State
    assert torch.equal(built.x, torch.full((2, 3), 3.0))
    return None


def job_init_remote(rank, world):
    if rank == 0:
        td = make()
        td["name"] = NonTensorData("hello", batch_size=[3])
        td["next", "info"] = NonTensorData({"level": 2}, batch_size=[3])
        td.init_remote(dst=1)
        td["obs"] += 100
        td.send(dst=1, consolidated=True)
        return None
    td = TensorDict.from_remote_init(src=0)
    assert td.is_consolidated()
    assert td.batch_size == torch.Size([3])
    assert same(td.exclude("name", ("next", "info")), make())
    assert td["name"] == "hello"
    assert td["next", "info"] == {"level": 2}
    td.recv(src=0, consolidated=True)
    assert torch.equal(td["obs"], make()["obs"] + 100)
    return sorted(td.keys())


def job_mismatch(rank, world, change, consolidated):
    """Rank 1's TensorDict differs (``change``): both ranks raise, rank 1 is unchanged, the group still works."""
    error = None
    if rank == 0:
        try:
            make().send(dst=1, consolidated=consolidated == "both")
        except RuntimeError as err:
            error = str(err)
        make().send(dst=1)  # the next transfer is unaffected
        return error
    td = make(0.0)
    if change == "shape":
        td["next", "obs"] = torch.zeros(3, 5)
    elif change == "dtype":
        td["reward"] = torch.zeros(3, 1, dtype=torch.float32)
    elif change == "missing":
        del td["next", "deep", "u8"]
    elif change == "extra":
        td["zz"] = torch.zeros(3)
    before = td.clone()
    try:
        td.recv(src=0, consolidated=consolidated != "none")
    except RuntimeError as err:
        error = str(err)
    assert same(td, before), "a refused transfer wrote into the receiver"
    good = make(0.0)
    good.recv(src=0)
    assert same(good, make())
    return error


def job_isend_mismatch(rank, world):
    if rank == 0:
        works = make().isend(dst=1, return_early=True)
        try:
            wire.wait_all(works)
        except RuntimeError as err:
            return str(err)
        return None
    td = make(0.0)
    td["obs"] = torch.zeros(3, 4, dtype=torch.float16)
    try:
        td.irecv(src=0, return_premature=True)
    except RuntimeError as err:
        return str(err)
    return None


def job_sender_fails(rank, world, what):
    if rank == 0:
        td = make()
        if what == "init_remote":
            td["obj"] = NonTensorData(object(), batch_size=[3])
            td.init_remote(dst=1)
        else:
            td.set("nested", torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3), torch.zeros(1)]))
            td.send(dst=1)
        return None
    if what == "init_remote":
        TensorDict.from_remote_init(src=0)
    else:
        make(0.0).recv(src=0)
    return None


def job_group_peer(rank, world):
    group = dist.new_group([0, 1])
    if rank == 0:
        make().send(group=group, group_dst=1, init_tag=5)
        return None
    td = make(0.0)
    td.recv(group=group, group_src=0, init_tag=5)
    assert same(td, make())
    return None


def job_ring(rank, world):
    """Each rank sends to the next and receives from the previous one, isend before irecv (3 ranks)."""
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    works = make(rank + 1.0).isend(dst=nxt, return_early=True)
    td = make(0.0)
    td.irecv(src=prev)
    wire.wait_all(works)
    assert same(td, make(prev + 1.0))
    return None


def job_two_senders(rank, world):
    """Ranks 1 and 2 send to rank 0 at the same time, on tag ranges that do not overlap."""
    if rank == 0:
        a, b = make(0.0), make(0.0)
        works = b.irecv(src=2, init_tag=100, return_premature=True)
        a.recv(src=1, init_tag=0)
        wire.wait_all(works)
        assert same(a, make(1.0))
        assert same(b, make(2.0))
        return None
    make(float(rank)).send(dst=0, init_tag=0 if rank == 1 else 100)
    return None


def job_h5_receiver(rank, world, path):
    if rank == 0:
        make().send(dst=1)
        return None
    from tensorbatch import PersistentTensorDict

    h5 = PersistentTensorDict.from_dict(make(0.0), filename=path)
    h5.recv(src=0)
    h5.close()
    assert same(PersistentTensorDict.from_h5(path).to_tensordict(), make())
    return None


def job_vs_tensordict(rank, world, direction, pseudo_rand):
    """The wire format without the header is tensordict's: either library sends to the other."""
    import tensordict

    ref = tensordict.TensorDict(make().to_dict(), batch_size=[3])
    if (rank == 0) == (direction == "td_to_tb"):
        ref = ref.zero_() if rank == 1 else ref
    if rank == 0:
        if direction == "td_to_tb":
            ref.send(dst=1, init_tag=2, pseudo_rand=pseudo_rand)
        else:
            make().send(dst=1, init_tag=2, pseudo_rand=pseudo_rand, check_structure=False)
        return None
    if direction == "td_to_tb":
        td = make(0.0)
        last = td.recv(src=0, init_tag=2, pseudo_rand=pseudo_rand, check_structure=False)
        assert same(td, make())
        return last
    ref = ref.zero_()
    last = ref.recv(src=0, init_tag=2, pseudo_rand=pseudo_rand)
    assert all(torch.equal(ref[k], make()[k]) for k in make().keys(True, True))
    return last


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize(
    ("consolidated_send", "receiver"),
    [
        (False, "plain"),
        (True, "consolidated"),
        (True, "plain"),
    ],
)
def test_send_recv_nested_dtypes(groups, consolidated_send, receiver):
    _, last = groups(2).run(job_send_recv, consolidated_send, receiver)
    assert last == (None if consolidated_send else 6)  # 7 leaves: tags 0..6


def test_isend_irecv_return_early(groups):
    sent, received = groups(2).run(job_isend_irecv)
    assert sent == 1 + 7 + 1  # the header block, 7 leaves, the ack check
    assert received == 1 + 7  # the ack, 7 leaves


@pytest.mark.parametrize("pseudo_rand", [False, True])
def test_tags(groups, pseudo_rand):
    sent_last, received_last = groups(2).run(job_tags, pseudo_rand)
    assert sent_last == received_last == wire.data_tags(11, pseudo_rand, 7)[-1]
    if not pseudo_rand:
        assert received_last == 17


def test_memmap_receiver_writes_the_files(groups, tmp_path):
    _, kind = groups(2).run(job_memmap, str(tmp_path / "mm"))
    assert kind == "MemoryMappedTensor"


def test_lazy_stack_members_in_place(groups):
    groups(2).run(job_lazy)


def test_tensorclass_send_and_from_remote_init(groups):
    assert groups(2).run(job_tensorclass)[1] == "Pair"


def test_typed_tensordict_send_and_from_remote_init(groups):
    groups(2).run(job_typed)


def test_init_remote_carries_non_tensor_leaves(groups):
    assert groups(2).run(job_init_remote)[1] == ["count", "done", "half", "name", "next", "obs", "reward"]


@pytest.mark.parametrize(
    ("change", "consolidated", "key", "shapes"),
    [
        ("shape", "none", "('next', 'obs')", ("float32 [3, 4]", "float32 [3, 5]")),
        ("dtype", "none", "'reward'", ("float64 [3, 1]", "float32 [3, 1]")),
        ("missing", "none", "('next', 'deep', 'u8')", ("uint8 [3]", "has no such leaf")),
        ("extra", "none", "'zz'", ("float32 [3]", "does not")),
        ("shape", "both", "('next', 'obs')", ("float32 [3, 4]", "float32 [3, 5]")),
    ],
)
def test_structure_mismatch_raises_on_both_sides(groups, change, consolidated, key, shapes):
    sender, receiver = groups(2).run(job_mismatch, change, consolidated)
    for message in (sender, receiver):
        assert message is not None
        assert f"structure mismatch at key {key}" in message, message
        assert shapes[0] in message
    assert sender.startswith("send to rank 1 failed, the receiver wrote nothing")
    assert receiver.startswith("recv from rank 0 failed, nothing was written")
    if change in ("shape", "dtype"):
        assert shapes[1] in receiver
        assert shapes[1] in sender


def test_consolidated_mode_mismatch(groups):
    sender, receiver = groups(2).run(job_mismatch, "same", "receiver")
    for message in (sender, receiver):
        assert "sends leaf by leaf (consolidated=False) but this side receives one consolidated buffer" in message


def test_isend_mismatch_surfaces_in_the_works(groups):
    sender, receiver = groups(2).run(job_isend_mismatch)
    assert "structure mismatch at key 'obs': the sender (rank 0) has float32 [3, 4]" in receiver
    assert "this receiver has float16 [3, 4]" in sender


@pytest.mark.parametrize(
    ("what", "kind", "needle"),
    [
        ("init_remote", "TypeError", "cannot send the non-tensor value at key 'obj' (a object)"),
        ("send", "TypeError", "cannot send the nested tensor leaf at key 'nested'"),
    ],
)
def test_sender_failure_reaches_the_receiver(groups, what, kind, needle):
    sender, receiver = groups(2).outcomes(job_sender_fails, what)
    assert not sender.ok
    assert sender.kind == kind
    assert needle in sender.error
    assert not receiver.ok
    assert receiver.kind == "RuntimeError"
    assert needle in receiver.error
    assert "failed before sending" in receiver.error


def test_group_peer_ranks(groups):
    groups(2).run(job_group_peer)


def test_three_process_ring(groups):
    groups(3).run(job_ring)


def test_three_process_concurrent_senders(groups):
    groups(3).run(job_two_senders)


def test_h5_receiver_writes_the_file(groups, tmp_path):
    pytest.importorskip("h5py")
    groups(2).run(job_h5_receiver, str(tmp_path / "f.h5"))


@pytest.mark.differential
@pytest.mark.parametrize("direction", ["td_to_tb", "tb_to_td"])
@pytest.mark.parametrize("pseudo_rand", [False, True])
def test_wire_format_is_tensordicts(groups, direction, pseudo_rand):
    pytest.importorskip("tensordict")
    _, last = groups(2).run(job_vs_tensordict, direction, pseudo_rand)
    assert last == wire.data_tags(2, pseudo_rand, 7)[-1]


# ------------------------------------------------------------------------------------------------ local
def test_peer_arguments_are_checked_before_any_traffic():
    td = make()
    with pytest.raises(ValueError, match="Exactly one of `dst` and `group_dst` must be provided"):
        td.send()
    with pytest.raises(ValueError, match="`group_src` requires `group` to be passed"):
        td.recv(group_src=1)
    with pytest.raises(ValueError, match="`src` and `group_src` are mutually exclusive"):
        td.irecv(src=0, group=object(), group_src=1)


def test_wire_order_is_sorted_keys_then_members():
    td = make()
    assert [p for p, *_ in wire.wire_leaves(td)] == [
        ("count",),
        ("done",),
        ("half",),
        ("next", "deep", "u8"),
        ("next", "obs"),
        ("obs",),
        ("reward",),
    ]


def test_difference_messages():
    a = [(("a",), "float32", (3,)), (("b",), "int64", (3, 2))]
    assert wire.difference(a, a, "x", "y") is None
    assert wire.difference(a, [a[0]], "x", "y") == (
        "structure mismatch at key 'b': x has it (int64 [3, 2]), y has no such leaf"
    )
    assert wire.difference(a, [a[1], a[0]], "x", "y") == (
        "structure mismatch at position 0: x has key 'a' where y has key 'b' (a consolidated buffer needs the "
        "same key insertion order on both sides)"
    )
