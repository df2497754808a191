"""Collectives of TensorDicts over torch.distributed: reduce, all_reduce, broadcast, all_gather, gather_and_stack.

Every rank of the group calls the same method. Reductions run one collective per leaf (or per
bucket of leaves), in place, in the sorted-key order of :mod:`.wire`, after checking that every rank
holds the same structure (one small ``all_gather`` of a digest; a mismatch raises on every rank,
naming the first differing key path). The others move consolidated TensorDicts: one buffer plus its
JSON layout (nothing is pickled).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .._errors import fmt_path
from . import consolidate as _consolidate
from . import wire

_U8 = torch.uint8


def comm_device(group: Any) -> torch.device:
    """Where control tensors go: the current CUDA device for an nccl group, else the CPU."""
    try:
        backend = dist.get_backend(group)
    except (RuntimeError, ValueError):  # a standalone group
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def payload(td: Any, device: Any = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """``(buffer, layout)`` of ``td`` consolidated (unless it is); the layout must be JSON (checked here)."""
    found = _consolidate.state(td)
    if found is None:
        found = _consolidate.state(td.consolidate(device=device))
    buffer, layout = found  # type: ignore[misc]
    try:
        json.dumps(layout)
    except TypeError:
        for path, value in _consolidate._non_tensor_values(layout, ()):
            try:
                json.dumps(value)
            except TypeError:
                raise TypeError(
                    f"cannot send the non-tensor value at key {fmt_path(path)} (a "
                    f"{type(value).__name__}): only JSON values travel (nothing is pickled)"
                ) from None
        raise
    return buffer, layout


def _rebuilt(dense_cls: Any, buffer: torch.Tensor, layout: dict[str, Any]) -> Any:
    """The consolidated TensorDict over a received buffer, on the buffer's device (if it had one)."""
    device = None if layout["device"] is None else buffer.device
    return _consolidate.restore(dense_cls, buffer, layout, device=device)


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.cpu().numpy().tobytes()


def _group_index(group: Any, rank: int) -> int:
    """The position of global ``rank`` in ``group`` (lists that collectives fill are in group order)."""
    return rank if group is None else dist.get_group_rank(group, rank)


def _packed(td: Any, device: torch.device) -> tuple[torch.Tensor, list[int], Exception | None]:
    """``td``'s buffer then its JSON layout in one byte tensor, with ``[status, buffer bytes, JSON bytes]``.

    A TensorDict that cannot be sent gives status 1 and its error message instead, so that the other
    ranks learn of it through the collective instead of waiting.
    """
    try:
        buffer, layout = payload(td)
        raw, status, failed = json.dumps(layout).encode(), 0, None
    except Exception as err:
        buffer, raw, status, failed = torch.empty(0, dtype=_U8), f"{type(err).__name__}: {err}".encode(), 1, err
    out = torch.empty(buffer.numel() + len(raw), dtype=_U8, device=device)
    out[: buffer.numel()] = buffer
    if raw:
        out[buffer.numel() :] = torch.frombuffer(bytearray(raw), dtype=_U8)
    return out, [status, buffer.numel(), len(raw)], failed


def _sizes(sizes: list[int], group: Any, device: torch.device, what: str) -> list[list[int]]:
    """Every rank's ``[status, buffer bytes, JSON bytes]``.

    A JSON layout over ``wire.MAX_HEADER`` raises on every rank, before anything is allocated for it.
    """
    mine = torch.tensor(sizes, dtype=torch.int64, device=device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    table = [row.tolist() for row in every]
    for rank, (status, n, m) in enumerate(table):
        if status not in (0, 1) or n < 0 or not 0 <= m <= wire.MAX_HEADER:
            raise RuntimeError(
                f"{what}: rank {rank} declared a layout of {m} bytes (at most {wire.MAX_HEADER}) and "
                f"a buffer of {n} bytes: refused on every rank before allocating"
            )
    return table


def _padded(packed: torch.Tensor, width: int) -> torch.Tensor:
    out = torch.zeros(width, dtype=_U8, device=packed.device)  # zeros, not stale memory, in the padding
    out[: packed.numel()] = packed
    return out


# ---------------------------------------------------------------------------------------------- checks
def check_same(entries: list[Any], group: Any, what: str) -> None:
    """Raise on every rank when the ranks' leaf entries differ, naming the first differing key path.

    One ``all_gather`` of a 40-byte digest when they agree; the entries themselves only when not.
    """
    device = comm_device(group)
    raw = json.dumps(entries).encode()
    digest = torch.frombuffer(bytearray(len(raw).to_bytes(8, "little") + hashlib.sha256(raw).digest()), dtype=_U8)
    digest = digest.to(device)
    every = [torch.empty_like(digest) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, digest, group=group)
    if all(torch.equal(every[0], d) for d in every):
        return
    width = max(int.from_bytes(_bytes(d[:8]), "little") for d in every)
    if width > wire.MAX_HEADER:  # (every rank sees the same digests: every rank raises)
        raise RuntimeError(
            f"{what}: a rank declared a structure of {width} bytes, more than {wire.MAX_HEADER}: "
            "refused before allocating"
        )
    mine = _padded(torch.frombuffer(bytearray(raw), dtype=_U8).to(device), width)
    gathered = [torch.empty_like(mine) for _ in every]
    dist.all_gather(gathered, mine, group=group)
    lengths = [int.from_bytes(_bytes(d[:8]), "little") for d in every]
    tables = [json.loads(_bytes(g[:n])) for g, n in zip(gathered, lengths, strict=True)]
    first = [(tuple(p), dt, tuple(s)) for p, dt, s in tables[0]]
    for k, table in enumerate(tables[1:], 1):
        message = wire.difference(first, [(tuple(p), dt, tuple(s)) for p, dt, s in table], "rank 0", f"rank {k}")
        if message is not None:
            raise wire.StructureMismatch(f"{what}: the ranks hold different structures, nothing ran: {message}")


# ---------------------------------------------------------------------------------------------- reductions
def _reduce_all(
    td: Any,
    collective: Callable[[torch.Tensor], Any],
    async_op: bool,
    bucket_bytes: int | None,
    write: bool,
    check: bool,
    what: str,
    group: Any,
) -> list[Any]:
    """Run ``collective`` on every leaf (or bucket of leaves) in place; ``write``: results land in the leaves.

    Returns the Works (``async_op``); each copies its results back into the leaves when waited on.
    """
    if bucket_bytes is not None and bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be a positive number of bytes, got {bucket_bytes}.")
    leaves = wire.wire_leaves(td)
    if check:
        check_same([[list(p), d, list(s)] for p, d, s in wire.entries_of(leaves)], group, what)
    targets, finishes = [], []
    for path, node, key, value in leaves:
        target, finish = wire.landing(path, node, key, value, filled=True)
        targets.append(target)
        finishes.append(finish if write else None)
    works = []
    for bucket in _buckets(targets, bucket_bytes):
        if len(bucket) == 1:
            flat, copies = targets[bucket[0]], []
        else:
            with torch.no_grad():
                flat = torch.cat([targets[i].reshape(-1) for i in bucket])
            copies = [targets[i] for i in bucket] if write else []
        follow: list[Callable[[], Any]] = [f for f in (finishes[i] for i in bucket) if f is not None]
        work = collective(flat)
        done = _finisher(flat, copies, follow) if copies or follow else None
        if async_op:
            works.append(work if done is None else wire.Then(work, done))
        elif done is not None:
            done()
    return works


def _buckets(targets: list[torch.Tensor], bucket_bytes: int | None) -> list[list[int]]:
    """Indices of the leaves reduced together: each alone, or packed per (device, dtype) up to ``bucket_bytes``."""
    if bucket_bytes is None:
        return [[i] for i in range(len(targets))]
    groups: dict[Any, list[list[int]]] = {}
    sizes: dict[Any, int] = {}
    for i, t in enumerate(targets):
        kind = (t.device, t.dtype)
        nbytes = t.numel() * t.element_size()
        if kind not in groups or sizes[kind] + nbytes > bucket_bytes:
            groups.setdefault(kind, []).append([])
            sizes[kind] = 0
        groups[kind][-1].append(i)
        sizes[kind] += nbytes
    return [bucket for buckets in groups.values() for bucket in buckets if bucket]


def _finisher(flat: torch.Tensor, copies: list[torch.Tensor], follow: list[Callable[[], Any]]) -> Callable[[], None]:
    def done() -> None:
        if copies:
            with torch.no_grad():
                chunks = torch.split(flat, [t.numel() for t in copies])
                for target, chunk in zip(copies, chunks, strict=True):
                    target.copy_(chunk.view(target.shape))
        for fn in follow:
            fn()

    return done


class Collectives:
    """The methods; ``distributed.install`` copies them onto TensorDictBase."""

    def reduce(
        self: Any,
        dst: int,
        op: Any = None,
        async_op: bool = False,
        return_premature: bool = False,
        group: Any = None,
        *,
        bucket_bytes: int | None = None,
        check_structure: bool = True,
    ) -> Any:
        """Reduce every leaf over the group into rank ``dst``'s TensorDict, in place.

        Every rank calls it with the same structure (checked first: a mismatch raises on every rank,
        naming the first differing key path). Other ranks' values are undefined afterwards.

        Args:
            dst: the rank that receives the result.
            op: a ``torch.distributed.ReduceOp`` (default: SUM).
            async_op: run the reductions at once (waited for unless ``return_premature``).
            return_premature: with ``async_op``, return the Works without waiting.
            group: the process group.
            bucket_bytes: pack the leaves of each dtype into buckets of up to this many bytes (one
                reduction per bucket; faster for many small leaves).
            check_structure: check that every rank holds the same keys, shapes and dtypes first.
        """
        op = dist.ReduceOp.SUM if op is None else op
        works = _reduce_all(
            self,
            lambda t: dist.reduce(t, dst=dst, op=op, group=group, async_op=async_op),
            async_op,
            bucket_bytes,
            dist.get_rank() == dst,
            check_structure,
            "reduce",
            group,
        )
        if async_op and return_premature:
            return works
        wire.wait_all(works)
        return None

    def all_reduce(
        self: Any,
        op: Any = None,
        *,
        group: Any = None,
        async_op: bool = False,
        bucket_bytes: int | None = None,
        check_structure: bool = True,
    ) -> Any:
        """Reduce every leaf over the group, in place, on every rank (arguments as in :meth:`reduce`).

        Returns:
            The Works with ``async_op=True`` (wait on each before reading), else None.
        """
        op = dist.ReduceOp.SUM if op is None else op
        works = _reduce_all(
            self,
            lambda t: dist.all_reduce(t, op=op, group=group, async_op=async_op),
            async_op,
            bucket_bytes,
            True,
            check_structure,
            "all_reduce",
            group,
        )
        return works if async_op else None

    def broadcast(self: Any, src: int, *, group: Any = None, device: Any = None) -> Any:
        """Send rank ``src``'s TensorDict to every rank of the group; every rank gets it back.

        The other ranks need not know the structure (call it on an empty TensorDict). Rank ``src``
        consolidates (unless it is) and sends its JSON layout, then its buffer as one tensor.

        Args:
            src: the sending rank (global).
            group: the process group.
            device: on ``src``, the device to consolidate onto; elsewhere, the device of the result
                (default: the sender's buffer's).

        Returns:
            The consolidated TensorDict: on ``src`` itself when consolidated already, else its copy;
            elsewhere a new TensorDict.
        """
        cdev = comm_device(group)
        if dist.get_rank() == src:
            failed = None
            try:
                consolidated = self if _consolidate.state(self) is not None else self.consolidate(device=device)
                buffer, layout = payload(consolidated)
                header = {
                    "mode": "broadcast",
                    "layout": layout,
                    "nbytes": buffer.numel(),
                    "leaves": [],
                    "device": str(buffer.device),
                }
            except Exception as err:
                failed, header = err, wire.error_header(f"{type(err).__name__}: {err}")
            messages = wire.encode(header, cdev)
            for message in messages:
                dist.broadcast(message, src, group=group)
            if failed is not None:
                raise failed
            dist.broadcast(buffer, src, group=group)
            return consolidated
        block = torch.empty(wire.BLOCK, dtype=_U8, device=cdev)
        dist.broadcast(block, src, group=group)
        length, raw = wire.read_block(block, f"rank {src}")
        if wire.rest_size(length):
            rest = torch.empty(wire.rest_size(length), dtype=_U8, device=cdev)
            dist.broadcast(rest, src, group=group)
            raw += _bytes(rest)
        got = wire.parse_header(raw, f"rank {src}")
        if got["mode"] == "error":
            raise RuntimeError(f"broadcast: rank {src} failed before sending: {got['message']}")
        end = wire.layout_end(got.get("layout"), f"rank {src}")
        if not end <= got["nbytes"] <= end + wire.LAYOUT_SLACK:
            raise RuntimeError(
                f"broadcast: rank {src} declared a buffer of {got['nbytes']} bytes for a layout of "
                f"{end} bytes: refused before allocating"
            )
        buffer = torch.empty(got["nbytes"], dtype=_U8, device=device if device is not None else got["device"])
        dist.broadcast(buffer, src, group=group)
        return _rebuilt(self._dense_cls, buffer, got["layout"])

    def scatter(
        self: Any, src: int, tensordicts: list[Any] | None = None, *, group: Any = None, device: Any = None
    ) -> Any:
        """Send ``tensordicts[r]`` from rank ``src`` to each rank ``r`` of the group; every rank gets its own.

        Each one goes as :meth:`init_remote` sends it (JSON layout, then one consolidated buffer), so the
        receiving ranks need not know the structure (the TensorDict called on is not used).

        Args:
            src: the sending rank (global).
            tensordicts: on ``src``, one TensorDict per rank, in rank order (ignored elsewhere).
            group: the process group.
            device: on the receiving ranks, the device of the result (default: the CPU).

        Returns:
            ``tensordicts[src]`` on ``src``; elsewhere a new consolidated TensorDict.

        Raises:
            ValueError: on ``src``, when ``tensordicts`` does not hold one TensorDict per rank (raised
                before anything is sent: the other ranks wait until the group's timeout).
        """
        rank, world = dist.get_rank(), dist.get_world_size(group)
        if rank != src:
            return self._dense_cls.from_remote_init(src, group=group, device=device)
        if tensordicts is None or len(tensordicts) != world:
            raise ValueError(
                f"scatter: rank {src} needs one TensorDict per rank ({world}), got "
                f"{'None' if tensordicts is None else len(tensordicts)}"
            )
        for dst, td in enumerate(tensordicts):
            if dst != src:
                td.init_remote(dst=dst, group=group)
        return tensordicts[src]

    def all_gather(self: Any, *, group: Any = None) -> list[Any]:
        """Every rank's TensorDict, on every rank (structures may differ between ranks).

        Returns:
            New consolidated TensorDicts, in rank order.
        """
        cdev = comm_device(group)
        packed, sizes, failed = _packed(self, cdev)
        table = _sizes(sizes, group, cdev, "all_gather")
        mine = _padded(packed, max(n + m for _, n, m in table))
        gathered = [torch.empty_like(mine) for _ in table]
        dist.all_gather(gathered, mine, group=group)
        pairs = list(zip(table, gathered, strict=True))
        errors = [(rank, _bytes(g[n : n + m]).decode()) for rank, ((status, n, m), g) in enumerate(pairs) if status]
        if failed is not None:
            raise failed
        if errors:
            raise RuntimeError(f"all_gather: rank {errors[0][0]} could not send its TensorDict: {errors[0][1]}")
        return [_rebuilt(self._dense_cls, g[:n], json.loads(_bytes(g[n : n + m]))) for (_, n, m), g in pairs]

    def gather_and_stack(self: Any, dst: int, group: Any = None) -> Any:
        """Stack the other ranks' TensorDicts into rank ``dst``'s, in place (its first dim: world size - 1).

        Every rank calls it. Rank ``dst`` checks each arrival against a row of its TensorDict before
        writing anything; a mismatch (or any failure) raises on every rank.

        Returns:
            This TensorDict on rank ``dst``, None elsewhere.
        """
        cdev = comm_device(group)
        me = dist.get_rank()
        if me == dst:
            packed, sizes, failed = torch.empty(0, dtype=_U8, device=cdev), [0, 0, 0], None
        else:
            packed, sizes, failed = _packed(self, cdev)
        table = _sizes(sizes, group, cdev, "gather_and_stack")
        mine = _padded(packed, max(n + m for _, n, m in table))
        gathered = [torch.empty_like(mine) for _ in table] if me == dst else None
        dist.gather(mine, gathered, dst=dst, group=group)
        message = None
        if me == dst:
            try:
                message = _stack_into(self, table, gathered, _group_index(group, dst))  # type: ignore[arg-type]
            except Exception as err:
                failed, message = err, f"{type(err).__name__}: {err}"
        status = wire.ack_message(message, cdev)
        dist.broadcast(status, dst, group=group)
        if failed is not None:
            raise failed
        message = wire.ack_text(status)
        if message is not None:
            raise wire.StructureMismatch(f"gather_and_stack into rank {dst} failed, nothing was written: {message}")
        return self if me == dst else None


def _stack_into(td: Any, table: list[list[int]], gathered: list[torch.Tensor], index: int) -> str | None:
    """On the destination: check every arrival against a row of ``td``, then write their stack (or a message)."""
    others = [i for i in range(len(table)) if i != index]
    for i in others:
        if table[i][0]:
            _, n, m = table[i]
            return f"rank {i} could not send its TensorDict: {_bytes(gathered[i][n : n + m]).decode()}"
    if td.batch_size[:1] != torch.Size([len(others)]):
        return (
            f"the destination's TensorDict must have one row per other rank: batch size starting with "
            f"{len(others)}, got {list(td.batch_size)}"
        )
    parts = [
        _rebuilt(td._dense_cls, gathered[i][:n], json.loads(_bytes(gathered[i][n : n + m])))
        for i, (_, n, m) in enumerate(table)
        if i != index
    ]
    if not parts:
        return None
    row = wire.entries_of(wire.wire_leaves(td[0]))
    for i, part in zip(others, parts, strict=True):
        message = wire.difference(wire.entries_of(wire.wire_leaves(part)), row, f"rank {i}", "a row of the destination")
        if message is not None:
            return message
    td.update_(torch.stack(parts, 0))
    return None
