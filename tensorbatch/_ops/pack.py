"""``td.pack()``: every leaf in one feature tensor, and the :class:`PackLayout` that rebuilds the TensorDict.

Leaves are flattened after the batch dims and concatenated in sorted key order (so the columns depend on
the set of keys only); the layout records each leaf's columns and feature shape, and the nested nodes'
batch shapes and classes, so :meth:`PackLayout.unpack` gives views of the packed tensor back.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from .._errors import fmt_path
from .._nontensor import is_non_tensor
from .._unbatched import UnbatchedTensor
from .traverse import is_td, stacked_members


@dataclasses.dataclass(frozen=True)
class PackLayout:
    """Where each leaf of a packed TensorDict lies in the packed tensor (``td.pack()``), to rebuild it.

    Frozen, hashable and compared by value: a module can cache it and ``torch.compile`` treat it as a constant.
    TensorClasses are rebuilt with their class; other TensorDict subclasses come back as TensorDicts.

    Attributes:
        keys: the leaf keys, in column order.
        shapes: each leaf's feature shape (after the packed TensorDict's batch dims).
        dim: the packed dim's position in the packed tensor, counted from the end (``td.pack(1)`` and
            ``td.pack(-1)`` give equal layouts for one batch dim, and ``flat`` may gain leading batch dims).
        nested: ``(key, batch_shape, cls)`` per nested node: its batch dims beyond the root's, and its
            TensorClass or None; parents before children.
        device: the packed TensorDict's device.
        cls: the packed TensorClass, or None.
        offsets: each leaf's first column.
        numel: the packed tensor's number of columns.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(p=torch.zeros(5), v=torch.ones(5, 3), batch_size=[5])
        >>> flat, layout = td.pack()
        >>> layout.keys, layout.offsets, layout.numel
        (('p', 'v'), (0, 1), 4)
        >>> layout.unpack(flat[:2])["v"].shape
        torch.Size([2, 3])
    """

    keys: tuple[Any, ...]
    shapes: tuple[torch.Size, ...]
    dim: int = -1
    nested: tuple[tuple[Any, torch.Size, type | None], ...] = ()
    device: torch.device | None = None
    cls: type | None = None
    offsets: tuple[int, ...] = dataclasses.field(init=False)
    numel: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        shapes = tuple(torch.Size(shape) for shape in self.shapes)
        sizes = [math.prod(shape) for shape in shapes]
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "nested", tuple((k, torch.Size(s), c) for k, s, c in self.nested))
        object.__setattr__(self, "offsets", tuple(sum(sizes[:i]) for i in range(len(sizes))))
        object.__setattr__(self, "numel", sum(sizes))

    def unpack(self, flat: torch.Tensor) -> Any:
        """The TensorDict packed in ``flat``: its leaves are views of ``flat``.

        The batch size is ``flat``'s shape without the packed dim, so ``flat`` may have other batch dims
        than the packed TensorDict (after an ``index_select``, say).

        Raises:
            IndexError: when ``flat`` has no dim :attr:`dim`.
            ValueError: when that dim does not have :attr:`numel` entries.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> flat, layout = TensorDict(p=torch.zeros(5), v=torch.ones(5, 3), batch_size=[5]).pack()
            >>> layout.unpack(flat)["p"].data_ptr() == flat.data_ptr()
            True
        """
        from .._td import TensorDict

        dim = self.dim + flat.ndim if self.dim < 0 else self.dim
        if not 0 <= dim < flat.ndim:
            raise IndexError(f"dim {self.dim} is out of range for a packed tensor with {flat.ndim} dims")
        if flat.shape[dim] != self.numel:
            raise ValueError(
                f"expected {self.numel} entries along dim {self.dim} of the packed tensor, got {flat.shape[dim]}"
            )
        flat = flat.movedim(dim, -1)
        batch = flat.shape[:-1]
        device = flat.device if self.device is not None else None
        out = TensorDict(batch_size=batch, device=device)
        for key, shape, _ in self.nested:
            out.set(key, TensorDict(batch_size=batch + shape, device=device))
        for key, shape, offset in zip(self.keys, self.shapes, self.offsets, strict=True):
            value = flat.narrow(-1, offset, math.prod(shape))
            out.set(key, value.reshape(*value.shape[:-1], *shape))  # splits (or drops) the last dim: a view
        for key, _, cls in reversed(self.nested):  # children first: a parent wraps its finished children
            if cls is not None:
                out.set(key, cls.from_tensordict(out.get(key)))
        return self.cls.from_tensordict(out) if self.cls is not None else out  # type: ignore[attr-defined]


def _different_keys(td: Any) -> bool:
    stacked = stacked_members(td)
    if stacked is None:
        return False
    first = sorted(map(str, stacked[1][0].keys(True, True))) if stacked[1] else []
    return any(sorted(map(str, m.keys(True, True))) != first for m in stacked[1])


def pack(self: Any, dim: int = -1, *, layout: PackLayout | None = None) -> tuple[torch.Tensor, PackLayout]:  # noqa: D417
    """All the leaves in one tensor of features, and the :class:`PackLayout` that unpacks it.

    Each leaf is flattened after the batch dims, and the leaves are concatenated (one copy) in the order
    of ``keys(True, True, sort=True)``; the result has shape ``(*batch_size, F)`` for ``dim=-1`` and is
    contiguous for any ``dim``. Leaves must share one dtype and one device; non-tensor leaves cannot be
    packed (drop them with :meth:`filter_non_tensor_data`). A lazy stack packs as its dense form when its
    members have the same keys.

    Args:
        dim: where the packed dim goes in the result, in ``[-(batch_dims + 1), batch_dims]``.
        layout: pack into this layout (its key order); a missing, extra or reshaped leaf raises.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(p=torch.zeros(5), v=torch.ones(5, 3), n={"s": torch.ones(5, 3, 3)}, batch_size=[5])
        >>> flat, layout = td.pack()
        >>> flat.shape, layout.keys
        (torch.Size([5, 13]), (('n', 's'), 'p', 'v'))
    """
    batch, ndim = self.batch_size, self.batch_dims
    if not -ndim - 1 <= dim <= ndim:
        raise IndexError(f"dim {dim} is out of range for packing a TensorDict with {ndim} batch dims")
    pos = dim + ndim + 1 if dim < 0 else dim
    if _different_keys(self):
        raise RuntimeError("cannot pack a lazy stack whose members have different keys")
    leaves: dict[Any, torch.Tensor] = {}
    nested = []
    for key, value in self.items(True, False, sort=True):
        if is_non_tensor(value):
            raise TypeError(
                f"cannot pack the non-tensor entry {fmt_path(key)}: drop the non-tensor entries "
                "with filter_non_tensor_data() first"
            )
        if isinstance(value, UnbatchedTensor):
            raise TypeError(
                f"cannot pack the UnbatchedTensor entry {fmt_path(key)}: it has no batch dims to pack "
                "along; exclude it first"
            )
        if is_td(value):
            if _different_keys(value):
                raise RuntimeError(f"cannot pack the lazy stack at {fmt_path(key)}: its members have different keys")
            nested.append((key, value.batch_size[ndim:], type(value) if hasattr(value, "_non_tensordict") else None))
        else:
            leaves[key] = value
    if layout is not None:
        if (layout.dim + ndim + 1 if layout.dim < 0 else layout.dim) != pos:
            raise ValueError(f"cannot pack along dim {dim} with a layout packed along dim {layout.dim}")
        if set(leaves) != set(layout.keys):
            raise KeyError(
                f"the leaves of the TensorDict differ from the layout's keys: {sorted(leaves, key=str)} "
                f"vs {sorted(layout.keys, key=str)}"
            )
        leaves = {key: leaves[key] for key in layout.keys}
    shapes = tuple(value.shape[ndim:] for value in leaves.values())
    if layout is not None and shapes != layout.shapes:
        raise ValueError(f"the leaves' feature shapes differ from the layout's: {shapes} vs {layout.shapes}")
    parts = []
    first: torch.Tensor | None = None
    for key, value in leaves.items():
        if first is None:
            first = value
        elif value.dtype != first.dtype:
            raise TypeError(
                f"cannot pack leaves of different dtypes: {first.dtype} and {value.dtype} at "
                f"{fmt_path(key)} (cast the TensorDict first, e.g. with float())"
            )
        elif value.device != first.device:
            raise RuntimeError(
                f"cannot pack leaves on different devices: {first.device} and {value.device} at {fmt_path(key)}"
            )
        value = value.as_subclass(torch.Tensor)
        value = value.flatten(ndim) if value.ndim > ndim else value.unsqueeze(-1)
        parts.append(value if pos == ndim else value.movedim(-1, pos))
    if parts:
        flat = torch.cat(parts, pos).contiguous()  # cat keeps channels-last inputs' strides: contiguous after
    else:
        flat = torch.empty((*batch[:pos], 0, *batch[pos:]), device=self.device)
    return flat, PackLayout(
        keys=tuple(leaves), shapes=shapes, dim=pos - ndim - 1, nested=tuple(nested), device=self.device
    )


def install(cls: type) -> None:
    """Attach :func:`pack` to ``cls`` (TensorDictBase)."""
    cls.pack = pack  # type: ignore[attr-defined]


def _install() -> None:
    from ..base import TensorDictBase

    install(TensorDictBase)


_install()  # the method attaches itself: base.py imports no feature
