"""What travels over torch.distributed: the leaf order, the structure header, the tags, the peer.

**Leaf order.** Point-to-point transfers and reductions send the tensor leaves in *sorted-key* order:
depth first, the keys of each node sorted, the members of a lazy stack in stack order. That is the
order tensordict 0.15.3 uses, so with ``check_structure=False`` the messages are the reference's.
Non-tensor leaves do not travel leaf by leaf (as in the reference); they travel in the layout of
consolidated transfers (``init_remote``, ``broadcast``, ``all_gather``, ``gather_and_stack``).

**Structure header.** Before the data of a ``send``/``isend``, the sender sends a header: the mode
(``"leaves"`` or ``"consolidated"``) and every leaf's key path, dtype and shape (JSON). The receiver
compares it with its own TensorDict and answers with an ack: empty, or the message naming the first
differing key path. On a mismatch the receiver drains the sender's data into scratch buffers (so the
sender never hangs), leaves its TensorDict unchanged and raises; the sender raises the same message.

**Declared sizes.** A receiver allocates nothing from what a peer declares before checking it: a header
longer than ``max_header_size`` (default :data:`MAX_HEADER`, 16 MiB) is refused before its second message
is received; a header's entries must be well formed (key paths of strings, known dtypes, non-negative
shapes); a receive into an existing TensorDict accepts only its own leaves' shapes and dtypes, and drains a
mismatching sender's data only when it declares at most :data:`DRAIN_SLACK` bytes more than the receiver
holds (more is refused undrained: that sender waits until its process-group timeout).

**Tags.** Data messages use the reference's tags (``init_tag``, ``init_tag + 1``, ..., or the
pseudo-random chain); the header and the ack use ``HEADER_TAG + 3 * init_tag + (0, 1, 2)``
(``HEADER_TAG`` is ``2**30``), far above the data tags.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._errors import fmt_path, fmt_shape
from .._ops.traverse import named_nodes, stacked_members
from ._shared import DTYPES

HEADER_TAG = 1 << 30
"""The first tag of the structure header; data tags stay below it."""

BLOCK = 4096
"""Bytes of the first header message: a 16-byte prefix (magic, length) then the JSON; longer headers
continue in a second message."""

ACK = 1024
"""Bytes of the receiver's ack: empty (all zeros) when the structures agree, else the error message."""

MAX_HEADER = 16 << 20
"""The default ``max_header_size``: the longest structure header a receiver accepts (bytes of JSON)."""

DRAIN_SLACK = 16 << 20
"""Bytes a mismatching sender may declare beyond the receiver's own for its data to be drained."""

_MAGIC = 0x54424853_54525543  # "TBHSTRUC": a header, not stray data
_Tensor = torch.Tensor
_Entry = tuple[tuple[str, ...], str, tuple[int, ...]]  # (key path, dtype name, shape)


class StructureMismatch(RuntimeError):
    """The two sides of a transfer hold TensorDicts of different structures (raised on both sides)."""


# ------------------------------------------------------------------------------------------ leaf order
def wire_leaves(td: Any) -> list[tuple[tuple[str, ...], Any, str, Any]]:
    """``(path, node, key, value)`` for every tensor leaf of ``td``, in the order they travel.

    ``value`` is the leaf itself for in-memory nodes and its ``LeafMeta`` (shape, dtype) for storage
    nodes (HDF5, Redis), which are read only when sent. Lazy stacks contribute their members' leaves
    under ``(*path, "0")``, ``(*path, "1")``...

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"b": torch.zeros(1), "a": {"y": torch.zeros(1), "x": torch.zeros(1)}}, [1])
        >>> [path for path, *_ in wire_leaves(td)]
        [('a', 'x'), ('a', 'y'), ('b',)]
    """
    nodes = named_nodes(td, members=True)
    stacks = {path for path, node in nodes if stacked_members(node) is not None}
    out = []
    for path, node in nodes:
        if path in stacks:
            continue
        for key, value in node._meta_items():
            if type(value) is _Tensor or isinstance(value, _Tensor) or getattr(value, "kind", None) == "tensor":
                out.append(((*path, key), node, key, value))

    def order(item: Any) -> tuple[Any, ...]:
        # members sort by number (10 after 9); a position holds members or keys, never both
        path = item[0]
        return tuple(int(name) if path[:i] in stacks else name for i, name in enumerate(path))

    out.sort(key=order if stacks else _first)
    return out


def _first(item: Any) -> Any:
    return item[0]


def entries_of(leaves: list[tuple[tuple[str, ...], Any, str, Any]]) -> list[_Entry]:
    """The header entries of :func:`wire_leaves`' result."""
    return [(path, _dtype_name(value.dtype), tuple(value.shape)) for path, _, _, value in leaves]


def layout_entries(layout: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[_Entry]:
    """The header entries of a consolidated layout, in buffer order (a walk over the plain JSON layout)."""
    out: list[_Entry] = []
    for key, entry in layout["entries"].items():
        if "entries" in entry:
            out.extend(layout_entries(entry, (*prefix, key)))
        elif "offset" in entry:
            out.append(((*prefix, key), entry["dtype"].removeprefix("torch."), tuple(entry["shape"])))
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_of(name: str) -> torch.dtype:
    """The dtype named in a header (``"float32"``)."""
    return DTYPES[f"torch.{name}"]


# ------------------------------------------------------------------------------------------ tags
def data_tags(init_tag: int, pseudo_rand: bool, count: int) -> list[int]:
    """The tags of ``count`` leaf messages: ``init_tag, init_tag + 1, ...`` or the pseudo-random chain.

    The chain is tensordict's (each tag seeds numpy's default generator with the previous tag + 1 and
    keeps the first 8 bytes modulo 10,000), so both libraries agree on the wire.

    Examples:
        >>> data_tags(5, False, 3)
        [5, 6, 7]
    """
    if not pseudo_rand:
        return list(range(init_tag, init_tag + count))
    return list(_chain(init_tag, count))


@functools.lru_cache(maxsize=64)
def _chain(init_tag: int, count: int) -> tuple[int, ...]:
    # cached: a generator per tag costs ~20 us, and a training loop repeats the same transfer
    tags = []
    tag = init_tag - 1
    for _ in range(count):
        tag = int.from_bytes(np.random.default_rng(tag + 1).bytes(8), "big") % 10_000
        tags.append(tag)
    return tuple(tags)


def header_tag(init_tag: int, k: int) -> int:
    """Tag ``k`` (0: header, 1: its continuation, 2: the ack) of the transfer that starts at ``init_tag``."""
    return HEADER_TAG + 3 * (init_tag % (1 << 28)) + k


# ------------------------------------------------------------------------------------------ the peer
class Peer:
    """The other side of a point-to-point transfer: a global rank, or a rank of ``group`` used directly.

    With ``group_peer`` the messages go through the group's backend (``group.send``), so a standalone
    ProcessGroup that ``init_process_group`` never registered works, as in the reference.
    """

    __slots__ = ("group", "group_peer", "peer")

    def __init__(self, peer: int | None, group_peer: int | None, group: Any, names: tuple[str, str]) -> None:
        if group_peer is not None:
            if group is None:
                raise ValueError(f"`{names[1]}` requires `group` to be passed.")
            if peer is not None:
                raise ValueError(f"`{names[0]}` and `{names[1]}` are mutually exclusive.")
        elif peer is None:
            raise ValueError(f"Exactly one of `{names[0]}` and `{names[1]}` must be provided.")
        self.peer, self.group_peer, self.group = peer, group_peer, group

    @property
    def rank(self) -> int:
        """The peer's rank, as the user named it."""
        return self.peer if self.group_peer is None else self.group_peer  # type: ignore[return-value]

    def isend(self, tensor: torch.Tensor, tag: int) -> Any:
        """Start sending ``tensor`` (plain, contiguous); returns the Work."""
        if self.group_peer is not None:
            return self.group.send([tensor], self.group_peer, tag)
        return dist.isend(tensor, dst=self.peer, group=self.group, tag=tag)

    def irecv(self, tensor: torch.Tensor, tag: int) -> Any:
        """Start receiving into ``tensor`` (plain, contiguous); returns the Work."""
        if self.group_peer is not None:
            return self.group.recv([tensor], self.group_peer, tag)
        return dist.irecv(tensor, src=self.peer, group=self.group, tag=tag)


# ------------------------------------------------------------------------------------------ header
def encode(header: dict[str, Any], device: Any) -> list[torch.Tensor]:
    """The header as its one or two messages: a :data:`BLOCK`-byte block, then the rest if longer."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    head = min(len(raw), BLOCK - 16)
    block = bytearray(BLOCK)  # built as bytes: a few small torch ops would cost more than the JSON
    struct.pack_into("<qq", block, 0, _MAGIC, len(raw))
    block[16 : 16 + head] = raw[:head]
    messages = [torch.frombuffer(block, dtype=torch.uint8)]
    if len(raw) > head:
        messages.append(torch.frombuffer(bytearray(raw[head:]), dtype=torch.uint8))
    return messages if torch.device(device).type == "cpu" else [m.to(device) for m in messages]


def send_header(peer: Peer, header: dict[str, Any], init_tag: int, device: Any) -> list[Any]:
    """Start sending ``header``; returns the Works."""
    return [peer.isend(m, header_tag(init_tag, k)) for k, m in enumerate(encode(header, device))]


def recv_header(peer: Peer, init_tag: int, device: Any, max_header_size: int = MAX_HEADER) -> dict[str, Any]:
    """Receive a header sent by :func:`send_header` (blocks until it arrives), checked (:func:`parse_header`)."""
    block = torch.empty(BLOCK, dtype=torch.uint8, device=device)
    peer.irecv(block, header_tag(init_tag, 0)).wait()
    sender = f"rank {peer.rank}"
    length, raw = read_block(block, sender, max_header_size)
    if rest_size(length):
        rest = torch.empty(rest_size(length), dtype=torch.uint8, device=device)
        peer.irecv(rest, header_tag(init_tag, 1)).wait()
        raw += rest.cpu().numpy().tobytes()
    return parse_header(raw, sender)


def read_block(block: torch.Tensor, sender: str, max_header_size: int = MAX_HEADER) -> tuple[int, bytes]:
    """``(length of the JSON, its first bytes)`` from a header's first message.

    A length over ``max_header_size`` raises before anything more is received or allocated.
    """
    raw = block.cpu().numpy().tobytes()
    magic, length = struct.unpack_from("<qq", raw)
    if magic != _MAGIC:
        raise RuntimeError(
            f"{sender} sent no structure header: does it send with check_structure=False, or is it "
            "tensordict? Then receive with check_structure=False"
        )
    if not 0 <= length <= max_header_size:
        raise RuntimeError(
            f"{sender} declared a structure header of {length} bytes, more than max_header_size="
            f"{max_header_size}: refused before receiving it (pass a larger max_header_size= for "
            "a structure that large)"
        )
    return length, raw[16 : 16 + min(length, BLOCK - 16)]


def parse_header(raw: bytes, sender: str) -> dict[str, Any]:
    """The header in ``raw``, checked: a mode, well-formed leaf entries and sizes (else naming the sender and key).

    Examples:
        >>> parse_header(b'{"mode": "leaves", "leaves": [[["a"], "float32", [3, -1]]], "nbytes": 0}', "rank 0")
        Traceback (most recent call last):
        ...
        RuntimeError: rank 0 sent a malformed structure header: at key 'a': bad dtype or shape ('float32', [3, -1])
    """

    def bad(what: str) -> RuntimeError:
        return RuntimeError(f"{sender} sent a malformed structure header: {what}")

    try:
        header = json.loads(raw)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("mode"), str):
        raise bad("no mode")
    nbytes, leaves = header.get("nbytes", 0), header.get("leaves", [])
    if type(nbytes) is not int or nbytes < 0:
        raise bad(f"nbytes {str(nbytes)[:100]}")
    if not isinstance(leaves, list):
        raise bad("its leaves are not a list")
    for entry in leaves:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], list)
            and all(type(p) is str for p in entry[0])
        ):
            raise bad(f"entry {str(entry)[:200]}")
        path, dtype, shape = entry
        if (
            f"torch.{dtype}" not in DTYPES
            or not isinstance(shape, list)
            or not all(type(s) is int and s >= 0 for s in shape)
        ):
            raise bad(f"at key {fmt_path(tuple(path))}: bad dtype or shape {(dtype, shape)!r}")
    return header


def layout_end(layout: Any, sender: str, prefix: tuple[str, ...] = ()) -> int:
    """The end (in bytes) of the last leaf of a consolidated layout a peer sent (its leaves checked)."""
    end = 0
    entries = layout.get("entries") if isinstance(layout, dict) else None
    if not isinstance(entries, dict):
        raise RuntimeError(f"{sender} sent a malformed layout at {fmt_path(prefix) if prefix else 'the root'}")
    for key, entry in entries.items():
        at = (*prefix, key)
        if isinstance(entry, dict) and "entries" in entry:
            end = max(end, layout_end(entry, sender, at))
        elif isinstance(entry, dict) and "offset" in entry:
            offset, shape, dtype = entry["offset"], entry.get("shape"), DTYPES.get(str(entry.get("dtype")))
            if (
                dtype is None
                or type(offset) is not int
                or offset < 0
                or not isinstance(shape, list)
                or not all(type(s) is int and s >= 0 for s in shape)
            ):
                raise RuntimeError(f"{sender} sent a malformed layout entry at key {fmt_path(at)}")
            end = max(end, offset + dtype.itemsize * math.prod(shape))
    return end


LAYOUT_SLACK = 4096
"""Bytes a consolidated buffer may hold past its last leaf (alignment padding)."""


def declared_bytes(header: dict[str, Any]) -> int:
    """Bytes of the data a (checked) header announces."""
    if header["mode"] == "consolidated":
        return int(header["nbytes"])
    return sum(dtype_of(d).itemsize * math.prod(s) for _, d, s in header_entries(header))


def rest_size(length: int) -> int:
    """Bytes of a header's second message (0: the JSON fits in the first)."""
    return max(0, length - (BLOCK - 16))


def leaves_header(mode: str, entries: list[_Entry], nbytes: int = 0) -> dict[str, Any]:
    """The header of a transfer: its mode and leaves (``nbytes``: the consolidated buffer's size)."""
    return {"mode": mode, "leaves": [[list(p), d, list(s)] for p, d, s in entries], "nbytes": nbytes}


def error_header(message: str) -> dict[str, Any]:
    """A header that tells the receiver the sender failed before sending anything."""
    return {"mode": "error", "message": message, "leaves": [], "nbytes": 0}


def header_entries(header: dict[str, Any]) -> list[_Entry]:
    """The entries of a received header."""
    return [(tuple(p), d, tuple(s)) for p, d, s in header["leaves"]]


_MODES = {"leaves": "leaf by leaf (consolidated=False)", "consolidated": "one consolidated buffer (consolidated=True)"}


def mode_difference(sent: str, mine: str, sender: str) -> str | None:
    """The message when the sender's mode is not this side's (None when they agree)."""
    if sent == mine:
        return None
    return (
        f"{sender} sends {_MODES.get(sent, sent)} but this side receives {_MODES[mine]}: "
        "pass the same consolidated= on both sides"
    )


def difference(a: list[_Entry], b: list[_Entry], a_name: str, b_name: str) -> str | None:
    """The first difference between two sides' entries, naming the key path and both shapes (None: they agree).

    Examples:
        >>> print(difference([(("n", "b"), "float32", (3, 2))], [(("n", "b"), "float32", (3, 4))], "rank 0", "rank 1"))
        structure mismatch at key ('n', 'b'): rank 0 has float32 [3, 2], rank 1 has float32 [3, 4]
    """
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == y:
            continue
        if x is not None and y is not None and x[0] == y[0]:
            return (
                f"structure mismatch at key {fmt_path(x[0])}: {a_name} has {x[1]} {fmt_shape(x[2])}, "
                f"{b_name} has {y[1]} {fmt_shape(y[2])}"
            )
        for first, second, one, other in ((x, b, a_name, b_name), (y, a, b_name, a_name)):
            if first is not None and first[0] not in {e[0] for e in second}:
                return (
                    f"structure mismatch at key {fmt_path(first[0])}: {one} has it ({first[1]} "
                    f"{fmt_shape(first[2])}), {other} has no such leaf"
                )
        return (
            f"structure mismatch at position {i}: {a_name} has key {fmt_path(x[0])} where {b_name} has key "  # type: ignore[index]
            f"{fmt_path(y[0])} (a consolidated buffer needs the same key insertion order on both sides)"  # type: ignore[index]
        )
    return None


def drain(peer: Peer, header: dict[str, Any], init_tag: int, pseudo_rand: bool, device: Any) -> None:
    """Receive (and drop) the data the sender posted after its header, so that it never hangs."""
    if header["mode"] == "consolidated":
        buffers = [(torch.empty(header["nbytes"], dtype=torch.uint8, device=device), init_tag)]
    else:
        entries = header_entries(header)
        tags = data_tags(init_tag, pseudo_rand, len(entries))
        buffers = [
            (torch.empty(s, dtype=dtype_of(d), device=device), t) for (_, d, s), t in zip(entries, tags, strict=True)
        ]
    for work in [peer.irecv(b, t) for b, t in buffers]:
        work.wait()


def ack_message(message: str | None, device: Any) -> torch.Tensor:
    """The receiver's ack: zeros, or the (truncated) error message."""
    ack = bytearray(ACK)
    if message:
        raw = message.encode()[:ACK]
        ack[: len(raw)] = raw
    out = torch.frombuffer(ack, dtype=torch.uint8)
    return out if torch.device(device).type == "cpu" else out.to(device)


def ack_text(ack: torch.Tensor) -> str | None:
    """The message an ack carries (None: the structures agree)."""
    raw = ack.cpu().numpy().tobytes().rstrip(b"\0")
    return raw.decode(errors="replace") or None


# ------------------------------------------------------------------------------------------ works
class Then:
    """A Work whose ``wait()`` also runs a follow-up: copy a received buffer into its leaf, check an ack."""

    __slots__ = ("then", "work")

    def __init__(self, work: Any, then: Callable[[], None]) -> None:
        self.work, self.then = work, then

    def wait(self, timeout: Any = None) -> bool:
        """Wait for the transfer, then run the follow-up (which may raise)."""
        if self.work is not None:
            self.work.wait() if timeout is None else self.work.wait(timeout)
        then, self.then = self.then, _nothing
        then()
        return True

    def is_completed(self) -> bool:
        """Whether the transfer is done."""
        return self.work is None or bool(self.work.is_completed())

    def __repr__(self) -> str:
        return f"Then({self.work!r})"


def _nothing() -> None:
    return None


def wait_all(works: list[Any]) -> None:
    """Wait for every Work, then raise the first error (stopping early would leave transfers running)."""
    error = None
    for work in works:
        try:
            work.wait()
        except Exception as err:  # every transfer must be waited for
            error = error or err
    if error is not None:
        raise error


def plain(value: torch.Tensor, path: tuple[str, ...]) -> torch.Tensor:
    """The leaf as a plain tensor torch.distributed accepts, sharing its memory (no grad, no subclass)."""
    if value.is_nested:
        raise TypeError(
            f"cannot send the nested tensor leaf at key {fmt_path(path)} with torch.distributed: "
            "use consolidated=True (one buffer), or exclude the key"
        )
    out = value.detach()
    return out if type(out) is _Tensor else out.as_subclass(_Tensor)


def landing(path: tuple[str, ...], node: Any, key: str, value: Any, filled: bool = False) -> tuple[torch.Tensor, Any]:
    """Where a leaf is received or reduced: the leaf itself, or a buffer written back into it afterwards.

    ``filled``: the buffer starts with the leaf's values (a reduction's input), else it is empty.
    """
    if isinstance(value, _Tensor):
        leaf = plain(value, path)
        if leaf.is_contiguous():
            return leaf, None
        buffer = (
            leaf.clone(memory_format=torch.contiguous_format)
            if filled
            else torch.empty(leaf.shape, dtype=leaf.dtype, device=leaf.device)
        )
        return buffer, lambda: leaf.copy_(buffer)
    # a storage backend's leaf (HDF5, Redis): handled in memory, then written into the storage
    buffer = plain(node._get_str(key), path).contiguous() if filled else torch.empty(value.shape, dtype=value.dtype)
    return buffer, lambda: node._set_str(key, buffer, inplace=True, validated=True)
