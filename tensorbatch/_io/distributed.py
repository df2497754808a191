"""torch.distributed for TensorDicts: point-to-point transfers (attached to TensorDictBase by :func:`install`).

``send``/``isend``/``recv``/``irecv`` move the tensor leaves into a preallocated TensorDict on the other
rank, in place; ``init_remote``/``from_remote_init`` send the structure too. The collectives
(``reduce``, ``all_reduce``, ``broadcast``, ``all_gather``, ``gather_and_stack``) are in
:mod:`.collectives`. What goes on the wire (leaf order, structure header, tags) is in :mod:`.wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..base import TensorDictBase
from . import collectives as _collectives
from . import consolidate as _consolidate
from . import wire

_Tensor = torch.Tensor
_INIT = (1 << 28) - 1  # the init_tag of init_remote's header (no user transfer starts there)


# ---------------------------------------------------------------------------------------------- sending
def post_send(
    td: Any, peer: wire.Peer, init_tag: int, pseudo_rand: bool, consolidated: bool, check: bool
) -> tuple[list[Any], int | None]:
    """Start sending ``td`` (header, data, and the receiver's ack); returns the Works and the last data tag."""
    try:
        if consolidated:
            found = _consolidate.state(td) or _consolidate.state(td.consolidate())
            buffer, layout = found  # type: ignore[misc]
            tensors, tags, last = [buffer], [init_tag], None
            header = wire.leaves_header("consolidated", wire.layout_entries(layout), buffer.numel())
        else:
            leaves = wire.wire_leaves(td)
            tensors = [
                wire.plain(value if isinstance(value, _Tensor) else node._get_str(key), path).contiguous()
                for path, node, key, value in leaves
            ]
            tags = wire.data_tags(init_tag, pseudo_rand, len(tensors))
            last = tags[-1] if tags else init_tag - 1
            header = wire.leaves_header("leaves", wire.entries_of(leaves))
    except Exception as err:
        if check:  # tell the receiver, which waits for a header, instead of leaving it hanging
            wire.wait_all(wire.send_header(peer, wire.error_header(f"{type(err).__name__}: {err}"), init_tag, "cpu"))
        raise
    device = tensors[0].device if tensors else torch.device("cpu")
    works: list[Any] = []
    if check:
        works += wire.send_header(peer, header, init_tag, device)
        ack = torch.zeros(wire.ACK, dtype=torch.uint8, device=device)
        ack_work = peer.irecv(ack, wire.header_tag(init_tag, 2))
    works += [peer.isend(t, tag) for t, tag in zip(tensors, tags, strict=True)]
    if check:
        works.append(wire.Then(ack_work, lambda: _check_ack(ack, peer)))
    return works, last


def _check_ack(ack: torch.Tensor, peer: wire.Peer) -> None:
    message = wire.ack_text(ack)
    if message is not None:
        raise wire.StructureMismatch(f"send to rank {peer.rank} failed, the receiver wrote nothing: {message}")


# ---------------------------------------------------------------------------------------------- receiving
def post_recv(
    td: Any,
    peer: wire.Peer,
    init_tag: int,
    pseudo_rand: bool,
    consolidated: bool,
    check: bool,
    max_header_size: int = wire.MAX_HEADER,
) -> tuple[list[Any], int | None]:
    """Check the sender's header, then start receiving into ``td``; returns the Works and the last data tag.

    On a structure mismatch nothing is written: the sender's data is drained (when it declares at most
    ``wire.DRAIN_SLACK`` bytes more than ``td`` holds) and the error raised.
    """
    finishes: list[Callable[[], None] | None]
    if consolidated:
        found = _consolidate.state(td)
        if found is not None:  # the buffer its leaves view: one message updates every leaf
            buffer, layout = found
            finishes = [None]
        else:  # received aside, then copied into the leaves
            layout, total = _consolidate.plan(td)
            buffer = torch.empty(total, dtype=torch.uint8, device=td.device or "cpu")
            finishes = [lambda: td.update_(_consolidate.restore(td._dense_cls, buffer, layout))]
        targets, tags, last = [buffer], [init_tag], None
        entries = wire.layout_entries(layout)
    else:
        leaves = wire.wire_leaves(td)
        targets, finishes = [], []
        for path, node, key, value in leaves:
            target, finish = wire.landing(path, node, key, value)
            targets.append(target)
            finishes.append(finish)
        tags = wire.data_tags(init_tag, pseudo_rand, len(targets))
        last = tags[-1] if tags else init_tag - 1
        entries = wire.entries_of(leaves)
    device = targets[0].device if targets else torch.device("cpu")
    works: list[Any] = []
    if check:
        header = wire.recv_header(peer, init_tag, device, max_header_size)
        sender = f"the sender (rank {peer.rank})"
        if header["mode"] == "error":
            raise RuntimeError(f"recv from rank {peer.rank}: the sender failed before sending: {header['message']}")
        mode = "consolidated" if consolidated else "leaves"
        own = sum(t.numel() * t.element_size() for t in targets)
        message = wire.mode_difference(header["mode"], mode, sender) or wire.difference(
            wire.header_entries(header), entries, sender, "this receiver"
        )
        if message is None and consolidated and header["nbytes"] != own:
            message = (
                f"{sender} declares a consolidated buffer of {header['nbytes']} bytes, this receiver's is {own} bytes"
            )
        ack_work = peer.isend(wire.ack_message(message, device), wire.header_tag(init_tag, 2))
        if message is not None:
            declared = wire.declared_bytes(header)
            drained = declared <= own + wire.DRAIN_SLACK
            if drained:
                wire.drain(peer, header, init_tag, pseudo_rand, device)
            else:
                message += (
                    f"; the sender declares {declared} bytes of data, far more than this receiver's {own}: "
                    "not received (the sender waits until its process-group timeout)"
                )
            ack_work.wait()
            raise wire.StructureMismatch(f"recv from rank {peer.rank} failed, nothing was written: {message}")
        works.append(ack_work)
    for target, tag, finish in zip(targets, tags, finishes, strict=True):
        work = peer.irecv(target, tag)
        works.append(work if finish is None else wire.Then(work, finish))
    return works, last


class _P2P:
    """The methods; :func:`install` copies them onto TensorDictBase."""

    def send(
        self: Any,
        dst: int | None = None,
        *,
        group: Any = None,
        group_dst: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
        check_structure: bool = True,
    ) -> None:
        """Send the tensor leaves to rank ``dst``, whose :meth:`recv` writes them into its TensorDict in place.

        The leaves go in sorted-key order, one message each, tagged ``init_tag``, ``init_tag + 1``, ...
        (or pseudo-random tags seeded by ``init_tag``); ``consolidated=True`` sends one buffer instead
        (the TensorDict is consolidated first unless it is). First a small structure header goes to the
        receiver, which checks it against its TensorDict: on a mismatch both sides raise a
        ``RuntimeError`` naming the first differing key path and the two shapes (nothing is written).

        Args:
            dst: the receiver's global rank (exclusive with ``group_dst``).
            group: the process group (default: the default group).
            group_dst: the receiver's rank in ``group`` (needs ``group``; messages go through its backend).
            init_tag: the first tag; the receiver passes the same.
            pseudo_rand: pseudo-random tags seeded by ``init_tag`` (the receiver passes the same).
            consolidated: send one consolidated buffer (the receiver passes ``consolidated=True`` too).
            check_structure: send the structure header (False: the reference's messages exactly, for a
                tensordict receiver; a mismatch then hangs or fails in torch).

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> TensorDict(a=torch.zeros(3), batch_size=[3]).send(dst=1, group_dst=0)
            Traceback (most recent call last):
            ...
            ValueError: `group_dst` requires `group` to be passed.
        """
        peer = wire.Peer(dst, group_dst, group, ("dst", "group_dst"))
        works, _ = post_send(self, peer, init_tag, pseudo_rand, consolidated, check_structure)
        wire.wait_all(works)

    def isend(
        self: Any,
        dst: int | None = None,
        *,
        group: Any = None,
        group_dst: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        return_early: bool = False,
        consolidated: bool = False,
        check_structure: bool = True,
    ) -> Any:
        """Like :meth:`send`, with every leaf's transfer running at once.

        Returns the Works with ``return_early=True`` (wait on each before changing the TensorDict; the
        last one raises if the receiver found another structure), else the last leaf's tag (None when
        consolidated). The receiver may call :meth:`irecv` or :meth:`recv`.
        """
        peer = wire.Peer(dst, group_dst, group, ("dst", "group_dst"))
        works, last = post_send(self, peer, init_tag, pseudo_rand, consolidated, check_structure)
        if return_early:
            return works
        wire.wait_all(works)
        return last

    def recv(
        self: Any,
        src: int | None = None,
        *,
        group: Any = None,
        group_src: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
        check_structure: bool = True,
        max_header_size: int = wire.MAX_HEADER,
    ) -> int | None:
        """Receive what :meth:`send` sends into this TensorDict, in place (memory-mapped leaves included).

        The sender's structure header is checked first: a different key, shape or dtype raises a
        ``RuntimeError`` naming the first differing key path and both shapes, on both sides, and nothing
        is written. With ``consolidated=True`` one buffer arrives: straight into a consolidated
        TensorDict's buffer, else aside and then copied into the leaves. Arguments as in :meth:`send`;
        ``max_header_size``: the longest structure header accepted (default 16 MiB; a longer one raises,
        naming the sender, before it is received). Nothing is allocated from the sizes the sender declares
        (see :mod:`tensorbatch._io.wire`).

        Returns:
            The tag of the last leaf received (None with ``consolidated=True``).
        """
        peer = wire.Peer(src, group_src, group, ("src", "group_src"))
        works, last = post_recv(self, peer, init_tag, pseudo_rand, consolidated, check_structure, max_header_size)
        wire.wait_all(works)
        return last

    def irecv(
        self: Any,
        src: int | None = None,
        *,
        group: Any = None,
        group_src: int | None = None,
        return_premature: bool = False,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
        check_structure: bool = True,
        max_header_size: int = wire.MAX_HEADER,
    ) -> Any:
        """Like :meth:`recv`, with every leaf's transfer running at once.

        The structure header is received and checked before this returns (a symmetric exchange must
        post its ``isend`` before its ``irecv``). With ``return_premature=True`` returns the Works:
        wait on each before reading the TensorDict. Otherwise returns None.
        """
        peer = wire.Peer(src, group_src, group, ("src", "group_src"))
        works, _ = post_recv(self, peer, init_tag, pseudo_rand, consolidated, check_structure, max_header_size)
        if return_premature:
            return works
        wire.wait_all(works)
        return None

    def init_remote(
        self: Any, dst: int | None = None, group: Any = None, device: Any = None, use_broadcast: bool = False
    ) -> None:
        """Send this TensorDict, structure and data, to rank ``dst``, whose :meth:`from_remote_init` builds it.

        The TensorDict is consolidated; its layout (keys, shapes, dtypes, batch sizes, non-tensor values)
        goes as JSON, then its buffer as one message. Send the next batches with
        ``send(dst, consolidated=True)`` into the TensorDict the receiver built. Non-tensor values must
        be JSON values (nothing is pickled). ``use_broadcast=True`` broadcasts to the whole group instead
        (:meth:`broadcast`).

        Args:
            dst: the receiver's rank (ignored with ``use_broadcast``).
            group: the process group.
            device: the device the header goes through (a CUDA device with nccl); with
                ``use_broadcast``, the device of the consolidated buffer.
            use_broadcast: broadcast to every rank of the group.
        """
        if use_broadcast:
            self.broadcast(dist.get_rank(group), group=group, device=device)
            return
        peer = wire.Peer(dst, None, group, ("dst", "group_dst"))
        head_device = torch.device(device) if device is not None else torch.device("cpu")
        try:
            buffer, layout = _collectives.payload(self)
        except Exception as err:
            wire.wait_all(wire.send_header(peer, wire.error_header(f"{type(err).__name__}: {err}"), _INIT, head_device))
            raise
        header = {"mode": "init", "layout": layout, "nbytes": buffer.numel(), "leaves": []}
        data = peer.isend(buffer, wire.header_tag(_INIT, 2))
        wire.wait_all([*wire.send_header(peer, header, _INIT, head_device), data])

    @classmethod
    def from_remote_init(
        cls: Any,
        src: int,
        group: Any = None,
        device: Any = None,
        use_broadcast: bool = False,
        max_header_size: int = wire.MAX_HEADER,
    ) -> Any:
        """Receive what :meth:`init_remote` sends: a new consolidated TensorDict (of this class for TensorClass).

        Receive the next batches into it with ``recv(src, consolidated=True)``: they land in its buffer,
        allocating nothing.

        Args:
            src: the sender's rank.
            group: the process group.
            device: the device of the result (default: the CPU; with ``use_broadcast``, the sender's).
            use_broadcast: receive with :meth:`broadcast` (as the sender chose).
            max_header_size: the longest JSON header (layout) accepted, in bytes (default 16 MiB). The
                buffer's declared size must be the one its layout needs.
        """
        if use_broadcast:
            return cls._dense_cls({}).broadcast(src, group=group, device=device)
        peer = wire.Peer(src, None, group, ("src", "group_src"))
        where = torch.device(device) if device is not None else torch.device("cpu")
        header = wire.recv_header(peer, _INIT, where, max_header_size)
        if header["mode"] == "error":
            raise RuntimeError(f"from_remote_init: rank {src} failed before sending: {header['message']}")
        end = wire.layout_end(header.get("layout"), f"rank {src}")
        if not end <= header["nbytes"] <= end + wire.LAYOUT_SLACK:
            raise RuntimeError(
                f"from_remote_init: rank {src} declared a buffer of {header['nbytes']} bytes for a "
                f"layout of {end} bytes: refused before allocating"
            )
        buffer = torch.empty(header["nbytes"], dtype=torch.uint8, device=where)
        peer.irecv(buffer, wire.header_tag(_INIT, 2)).wait()
        layout = header["layout"]
        return _consolidate.restore(cls._dense_cls, buffer, layout, device=None if layout["device"] is None else where)


def install(cls: type) -> None:
    """Attach the point-to-point methods and the collectives to ``cls``."""
    for source in (_P2P, _collectives.Collectives):
        for name, value in vars(source).items():
            if not name.startswith("__"):
                setattr(cls, name, value)


install(TensorDictBase)  # the methods attach themselves: base.py imports no feature
