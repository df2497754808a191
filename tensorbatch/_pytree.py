"""Registration of the TensorDict types with ``torch.utils._pytree`` (for compile, export and vmap).

A TensorDict is ONE pytree node whose children are all its leaves (nested TensorDicts inlined, depth first),
the nested structure in the context: vmap flattens and unflattens its inputs and outputs about eight times
per call, and torch's per-node work (a TreeSpec each, the recursion) would be paid for every nested
TensorDict. A leaf's key path is its nested key (``[('nested', 'b')]``, one mapping key); export's
``dynamic_shapes`` for a TensorDict are a flat list in leaf order. Unflatten rebuilds the nested nodes first
and applies to each node what a per-node unflatten would.

The context of each node keeps each child's shape (a tensor) or batch size (a TensorDict), so ``unflatten`` can
rebuild the right batch size when a transform (``vmap``) added or removed a dim, and check that the
removed dim was a batch dim shared by every child (pytree applies ``in_dims`` to each tensor: a dim
beyond the batch dims raises instead of giving a TensorDict whose batch size lies). Non-tensor leaves
have no pytree leaves: their value is in the context, and they follow the batch size of their parent.
vmap unflattens with ints/None placeholders: such trees keep the original batch size. Leaves that still
start with their whole former shape keep the batch size (``jacrev`` appends dims to every leaf: batch as
tensordict, inside vmap too), but for vmap's own output (leaves it has just unwrapped from its level, each
with one more dim of its size: that dim is a batch dim). A lazy stack is flattened as the dense TensorDict of
its stacked leaves and rebuilt as a lazy stack when its stack dim is still there; inside another transform
(grad, vjp, jvp...) its children are its members.

The sizes in the context are hints, not structure: two contexts that differ only in sizes compare equal (as
two tensors of different shapes have one tree spec: an exported program takes another batch size), and
symbolic sizes (export's dynamic dims) are read off the leaves, never compared with the hints (that would
specialize them).

vmap's common cases cost little: on a plain tree (tensors and TensorDicts only) unflatten checks all the leaves
in one pass when each lost its first dim or gained one (``_fast``), a layout seen again gives the same context
object (``_RECENT``), and the tree of zeros that vmap unflattens from a spec and flattens again on every call is
built once per context and kept locked (a tree of ints only).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.utils import _pytree

from . import _compat
from ._lazy import LazyStackedTensorDict, lazy_stack
from ._nontensor import MetaData, NonTensorData, NonTensorStack
from ._ops.traverse import NON_TENSOR_TYPES
from ._td import TensorDict
from ._unbatched import UnbatchedTensor

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_new = object.__new__
_is_ = operator.is_
_shape = operator.attrgetter("shape")
_PLAIN = frozenset({_Tensor, _Parameter})
_dynamo_compiling = _compat.dynamo_compiling
_mapped_dim = _compat.mapped_dim
_tensor_level = _compat.tensor_level
_Size = torch.Size
_is_compiling = torch.compiler.is_compiling

IN_DIMS_MSG = (
    "vmap over a TensorDict of batch_size {bs}: the mapped dim is not one batch dim shared by every entry "
    "({why}). in_dims on a TensorDict must be a batch dim counted from the front (0 <= in_dims < batch_dims): "
    "pytree applies it to each tensor, so a negative in_dims counts from each tensor's last dim"
)


def _node(td: TensorDict, children: list[Any], olds: list[Any]) -> tuple[Any, bool, bool]:
    """The context of ``td`` as one node, its nested TensorDicts inlined; its pytree children go to ``children``.

    Returns the context, whether the node holds a tensor (in it or in a nested TensorDict) and whether it is
    plain (see ``_fast``). The context is ``(keys, batch_size, device, names, meta)`` with one ``meta`` entry
    per key: ``(feat, shape)`` for a pytree child, ``(feat, shape, context)`` for an inlined TensorDict.
    ``feat``: a tensor's feature dims ``n``, a collection's extra batch dims ``-1 - n`` (the kind tells
    jacobians apart); ``shape``: a tensor's shape or a collection's batch size. Both None for a child that
    tells nothing about the batch (a non-tensor leaf, vmap's placeholder); ``_UNBATCHED`` for an ``UnbatchedTensor``
    (no batch dims: it takes its parent's, whatever a transform made of it); the shape alone for a nested tensor
    and for a collection with no tensor (it follows its parent's: _fit). ``olds`` gets each child's shape.
    """
    d = td._tensordict
    nd = len(td._batch_size)
    meta: list[Any] = []
    has_tensor = False
    plain = td._names is None
    for v in d.values():  # (list.append called as a method: cheaper than bound methods for a few entries)
        t = type(v)
        if t is _Tensor or t is _Parameter:
            children.append(v)
            try:
                shape = v.shape
            except RuntimeError:  # a strided nested tensor: no sizes (a jagged one is of a subclass)
                meta.append((v.ndim - nd, None))
                olds.append(None)
                plain = False
            else:
                meta.append((len(shape) - nd, shape))
                olds.append(shape)
            has_tensor = True
        elif t is not TensorDict and isinstance(v, _Tensor):  # a subclass (jagged, fake, functional...)
            children.append(v)
            plain = False
            if isinstance(v, UnbatchedTensor):
                meta.append(_UNBATCHED)
                olds.append(None)
                continue
            if v.is_nested:
                meta.append((v.ndim - nd, None))
                olds.append(None)
            else:
                shape = v.shape
                meta.append((len(shape) - nd, shape))
                olds.append(shape)
            has_tensor = True
        elif t is TensorDict:  # inlined: its leaves are children of this node
            sub, sub_has, sub_plain = _node(v, children, olds)
            meta.append((nd - 1 - len(v._batch_size), v._batch_size if sub_has else None, sub))
            has_tensor = has_tensor or sub_has
            plain = plain and sub_plain
        else:  # another pytree node (lazy stack, non-tensor leaf, wrapper), or vmap's placeholder
            children.append(v)
            olds.append(None)
            plain = False
            if v is None or t is int or t in NON_TENSOR_TYPES or not hasattr(v, "batch_size"):
                meta.append(_NOTHING)
            else:
                meta.append((nd - 1 - len(v.batch_size), v.batch_size))
    return (tuple(d), td._batch_size, td._device, td._names, tuple(meta)), has_tensor, plain and has_tensor


_NOTHING = (None, None)
_UNBATCHED = ("unbatched", None)


class _Context(tuple):  # type: ignore[type-arg]
    """The context of a TensorDict node (see ``_node``), equal to another of the same structure whatever the sizes.

    torch compares tree specs by their contexts (``torch.export`` checks its inputs' spec against the traced
    one): the keys, device, names, number of batch dims and kinds of children are the structure; the sizes only
    help ``unflatten``. Two more items, not structure, None unless the tree is plain: the shape of each pytree
    child in order, and what is kept for vmap's common cases (``_Layout``).
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is _Context and _structure(self) == _structure(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self[0])


def _structure(context: Any) -> Any:
    keys, batch_size, device, names, meta = context[:5]
    return (
        keys,
        len(batch_size),
        device,
        names,
        tuple((m[0], m[1] is None, _structure(m[2]) if len(m) == 3 else None) for m in meta),
    )


# A layout seen again gives the same context object, with what vmap's common cases need built once for it
# (_Layout): vmap flattens its inputs and outputs, unflattens them and a tree of zeros from each spec and
# flattens that tree again (to broadcast in_dims/out_dims) on every call. Plain trees only (_node).
_RECENT: dict[Any, _Context] = {}  # a plain tree's context by its node (_node)
_PLACEHOLDERS_FLAT: dict[int, tuple[TensorDict, list[Any], Any]] = {}  # id(tree) -> tree, children, context
_RECENT_MAX = 64


class _Layout:
    """What is kept for a recent plain context, built on first use.

    Its locked tree of vmap placeholders (``dims``: values, tree) and, for ``_fast``, the leaves' expected
    shapes and a plan of the nodes to build (``removed``: when each leaf lost its first dim; ``added``: by the
    size of a first dim each gained).
    """

    __slots__ = ("added", "dims", "removed")

    def __init__(self) -> None:
        self.dims: tuple[list[Any], TensorDict] | None = None
        self.removed: tuple[list[Any], tuple[int, ...], Any] | None = None
        self.added: dict[int, tuple[list[Any], Any]] = {}

    def __reduce__(self) -> Any:  # a copied or pickled tree spec starts afresh
        return _Layout, ()


def _forget() -> None:
    _RECENT.clear()
    _PLACEHOLDERS_FLAT.clear()


def _flatten(td: TensorDict) -> tuple[list[Any], Any]:
    if td._is_locked:  # a kept placeholder tree? (locked: its entries are the cached ones)
        known = _PLACEHOLDERS_FLAT.get(id(td))
        if known is not None and known[0] is td:
            return list(known[1]), known[2]
    children: list[Any] = []
    olds: list[Any] = []
    node, _, plain = _node(td, children, olds)
    if _dynamo_compiling():
        return children, _traced(node)
    if not plain:
        return children, _Context((*node, None, None))
    context = _RECENT.get(node)  # (the leaves' shapes are in the node: the plain tuple is the key)
    if context is None:
        if len(_RECENT) >= _RECENT_MAX:
            _forget()
        context = _RECENT[node] = _Context((*node, tuple(olds), _Layout()))
    return children, context


def _traced(node: Any) -> Any:
    """The context of ``node`` flattened while dynamo traces: a plain tuple, without sizes under strict export.

    dynamo turns an exported program's output spec into a constant: a class of ours (``_Context``) or a symbolic
    size in it cannot be one, and dynamo tells no symbolic size from an int (``type(s)`` is ``int``). Under
    export each size becomes None (the number of dims stays: it is structure; ``_unflatten_node`` reads the
    sizes off the leaves); ``torch.compile`` keeps them (vmap inside a compiled function compares them).
    """
    if _compat.exporting():
        node = _unsized(node)
    return (*node, None, None)


def _unsized(node: Any) -> Any:
    keys, batch_size, device, names, meta = node
    return (
        keys,
        _hint(batch_size),
        device,
        names,
        tuple((m[0], _hint(m[1]), _unsized(m[2])) if len(m) == 3 else (m[0], _hint(m[1])) for m in meta),
    )


def _hint(size: Any) -> Any:
    """``size`` as a tuple of as many Nones (None stays None): a size without its values."""
    return None if size is None else (None,) * len(size)


def _key_entries(context: Any, prefix: tuple[str, ...]) -> Any:
    for key, m in zip(context[0], context[4], strict=True):
        if len(m) == 3:
            yield from _key_entries(m[2], (*prefix, key))
        else:  # a nested leaf: one mapping key holding the nested key, shown as such (export's guards name the
            # leaf ``L['td'][('nested', 'b')]`` and find its input by the key path's str: they must agree)
            yield _compat.mapping_key((*prefix, key) if prefix else key)


def _flatten_with_keys(td: TensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    children, context = _flatten(td)
    return list(zip(_key_entries(context, ()), children, strict=True)), context


def _prefixed(pairs: list[tuple[Any, Any]]) -> bool:
    """True when one same shape was put in front of every child's former shape (vmap's out_dims=0)."""
    prefix = None
    for old, new in pairs:
        k = len(new) - len(old)
        if k <= 0 or new[k:] != old or (prefix is not None and new[:k] != prefix):
            return False
        prefix = new[:k]
    return prefix is not None


def _removed_dim(values: list[Any], pairs: list[tuple[Any, Any]], batch_size: torch.Size) -> set[int]:
    """The batch dims whose removal gives every child's new shape (vmap's mapped dim); raises if none."""
    nd = len(batch_size)
    if nd == 1:  # the common case, without building shapes
        dims = {0} if all(old[1:] == new for old, new in pairs) else set()
    else:
        dims = set(range(nd))
        for old, new in pairs:
            dims = {d for d in dims if old[:d] + old[d + 1 :] == new}
    if not dims:
        why = "the entries lost different dims, or a dim beyond the batch dims"
        raise ValueError(IN_DIMS_MSG.format(bs=list(batch_size), why=why))
    if not _is_compiling():  # the exact mapped dim of a batched tensor (not traceable: eager only)
        leaf = next((v for v in values if isinstance(v, _Tensor) and _compat.is_batched(v)), None)
        if leaf is not None:
            bdim, physical = _compat.batched_dim(leaf)
            # only when vmap has just mapped it (its physical shape is the former one, but for a smaller mapped
            # dim under chunk_size: vmap maps chunks of the inputs it flattened whole), not for a tensor batched
            # by an enclosing vmap that lost a dim otherwise (tree_map inside the function)
            if not any(_just_mapped(old, physical, bdim) for old, _ in pairs):
                return dims
            if bdim not in dims:
                why = f"dim {bdim} of a tensor is mapped"
                raise ValueError(IN_DIMS_MSG.format(bs=list(batch_size), why=why))
            dims = {bdim}
    return dims


def _just_mapped(old: torch.Size, physical: torch.Size, bdim: int) -> bool:
    """True when ``physical`` is ``old`` mapped along ``bdim`` whole or in a chunk (``vmap(chunk_size=...)``)."""
    return old == physical or (
        len(old) == len(physical)
        and physical[bdim] < old[bdim]
        and old[:bdim] == physical[:bdim]
        and old[bdim + 1 :] == physical[bdim + 1 :]
    )


def _vmap_output(values: list[Any], meta: tuple[Any, ...], shapes: list[Any]) -> int | None:
    """The batch size of the innermost vmap when this is vmap unflattening its function's output, else None.

    Each tensor gained one dim of that size or none. vmap has just unwrapped the leaves from its level; a
    transform inside vmap (jacrev, jacfwd) that puts the jacobian's dims in front of the leaves gives leaves of
    that level (those that depend on the mapped inputs). ``shapes``: each tensor child's new shape (None for
    other children: a nested node was rebuilt by its own).
    """
    vmap = _compat.vmap_level()
    if vmap is None:
        return None
    level, size = vmap
    for m, new in zip(meta, shapes, strict=True):
        old = m[1]
        if (
            new is not None
            and new != old
            and not (
                len(new) == len(old) + 1
                and any(new[k] == size and new[:k] + new[k + 1 :] == old for k in range(len(new)))
            )
        ):
            return None
    return None if any(isinstance(v, _Tensor) and _tensor_level(v) == level for v in values) else size


def _names_after(names: Any, batch_size: torch.Size, new_bs: torch.Size, removed: set[int] | None) -> Any:
    """Names for the new batch size: the mapped dim's name dropped, a new dim unnamed; None if ambiguous."""
    if names is None:
        return None
    if removed is not None:
        options = {names[:d] + names[d + 1 :] for d in removed}
    elif len(new_bs) == len(batch_size) + 1:
        options = {
            (*names[:p], None, *names[p:]) for p in range(len(new_bs)) if new_bs[:p] + new_bs[p + 1 :] == batch_size
        }
    else:
        return None
    return options.pop() if len(options) == 1 else None


def _fit(key: str, value: Any, old: Any, new_bs: torch.Size, nd: int) -> Any:
    """``value`` as an entry of a node of batch size ``new_bs`` (was ``nd`` dims): it must lead with it.

    Non-tensor data (and a TensorDict of it only) and an ``UnbatchedTensor`` follow the new batch size. An
    in-memory TensorDict whose leaves all lead with ``new_bs`` takes it (its own unflatten cannot tell a dim put
    in front from one put at the end when its leaves had no batch dims).
    """
    if type(value) in NON_TENSOR_TYPES:
        target = _Size((*new_bs, *value.batch_size[nd:]))
        return value if value.batch_size == target else value._follow(target)
    if isinstance(value, UnbatchedTensor):
        return value if value.batch_size == new_bs else value._with_batch_size(new_bs)
    n = len(new_bs)
    if isinstance(value, _Tensor):
        shape = value.shape if not value.is_nested else None
    else:
        shape = getattr(value, "batch_size", None)
    if shape is None or (shape[:n] == new_bs and old is not None):
        return value
    if type(value) is TensorDict:
        extra = old[nd:] if old is not None else value.batch_size[nd:]
        fitted = _refit(value, _Size((*new_bs, *extra)))
        if fitted is not None:
            return fitted
    raise RuntimeError(
        f"pytree unflatten: entry {key!r} of shape {list(shape)} does not start with the rebuilt batch size "
        f"{list(new_bs)} (a transform, e.g. vmap with out_dims other than 0, moved dims differently in the "
        "entries)"
    )


def _refit(td: TensorDict, batch_size: torch.Size) -> TensorDict | None:
    """``td`` rebuilt with ``batch_size`` (its nested nodes likewise), or None when a leaf does not lead with it."""
    n, nd = len(batch_size), len(td._batch_size)
    entries = {}
    for key, value in td._tensordict.items():
        if isinstance(value, UnbatchedTensor):
            value = value._with_batch_size(batch_size)
        elif isinstance(value, _Tensor):
            if not value.is_nested and value.shape[:n] != batch_size:
                return None
        elif type(value) in NON_TENSOR_TYPES:
            value = value._follow(_Size((*batch_size, *value.batch_size[nd:])))
        elif type(value) is TensorDict:
            value = _refit(value, _Size((*batch_size, *value._batch_size[nd:])))
            if value is None:
                return None
        elif getattr(value, "batch_size", batch_size)[:n] != batch_size:
            return None
        entries[key] = value
    return TensorDict._new_unsafe(entries, batch_size, td._device, None)


def _unflatten(values: Any, context: Any) -> Any:
    if type(values) is not list:  # (torch passes a list of its own)
        values = list(values)
    if values:
        first = values[0]
        if first is None or type(first) is int:  # the tree of in_dims/out_dims vmap builds
            tree = _dims_tree(values, context)
            return (tree,) if not _dynamo_compiling() and _compat.broadcasting_one_tuple() else tree
        layout = context[6]
        if layout is not None and _PLAIN.issuperset(map(type, values)):
            node = _fast(values, context, layout)
            if node is not None:
                return node
    return _rebuild(iter(values), context)


def _fast(values: list[Any], context: Any, layout: _Layout) -> TensorDict | None:
    """The tree in vmap's two common cases on a plain tree of plain tensors (``_unflatten_node``'s rule, at once).

    When every leaf lost its first dim (vmap mapped dim 0: each node loses its first batch dim) or, inside
    vmap, gained one same first dim (out_dims=0: each node gains it), the tree with those batch sizes; None
    for anything else (``_unflatten_node`` decides, and raises where it must).
    """
    if _dynamo_compiling():  # (dynamo does not trace an attrgetter; _unflatten_node's rule compares the same
        return None  # shapes: symbolic sizes under export specialize there too)
    shapes = list(map(_shape, values))
    olds = context[5]
    n = len(shapes[0]) - len(olds[0])
    if n == -1:  # vmap's in_dims=0
        removed = layout.removed
        if removed is None:
            removed = layout.removed = ([old[1:] for old in olds], _ambiguous(olds), _plan(context, {}, None))
        expected, ambiguous, plan = removed
        if shapes != expected:
            return None
        for i in ambiguous:  # a leaf whose dims 0 and 1 have one size: mapped along dim 1 (beyond the batch
            if _mapped_dim(values[i]) > 0:  # dims, or not shared by every leaf) it would look the same
                return None
        return _build(iter(values), plan)
    if n == 1:  # vmap's out_dims=0
        vmap = _compat.vmap_level()
        k = shapes[0][0]
        # not vmap's output (a dim of its size, in leaves it has just unwrapped): outside vmap, or a transform
        # inside it (jacrev), a leading dim is the jacobian's: the batch size is kept (_unflatten_node)
        if vmap is None or k != vmap[1] or _tensor_level(values[0]) == vmap[0]:
            return None
        added = layout.added.get(k)
        if added is None:
            if len(layout.added) >= 8:
                layout.added.clear()
            added = layout.added[k] = ([_Size((k, *old)) for old in olds], _plan(context, {}, k))
        if shapes != added[0]:
            return None
        return _build(iter(values), added[1])
    return None


def _ambiguous(olds: tuple[Any, ...]) -> tuple[int, ...]:
    """The leaves that would lose the same shape when mapped along dim 1 as along dim 0 (see ``_fast``)."""
    return tuple(i for i, old in enumerate(olds) if len(old) > 1 and old[0] == old[1])


def _plan(context: Any, sizes: dict[Any, Any], k: int | None) -> Any:
    """The nodes ``_build`` makes: ``(keys, batch_size, device, subs)``, ``subs`` None when all are leaves.

    Each batch size without its first dim (``k`` None) or with ``k`` in front.
    """
    keys, batch_size, device, _, meta = context[:5]
    new_bs = sizes.get(batch_size)
    if new_bs is None:
        new_bs = sizes[batch_size] = batch_size[1:] if k is None else _Size((k, *batch_size))
    if all(len(m) == 2 for m in meta):
        return keys, new_bs, device, None
    return keys, new_bs, device, tuple(None if len(m) == 2 else _plan(m[2], sizes, k) for m in meta)


def _build(children: Any, plan: Any) -> TensorDict:
    keys, batch_size, device, subs = plan
    if subs is None:  # zip asks keys first: it takes exactly len(keys) children
        entries = dict(zip(keys, children))  # noqa: B905  (a keyword argument costs a third more here)
    else:
        entries = {}
        for key, sub in zip(keys, subs):  # noqa: B905  (one plan: same lengths)
            entries[key] = next(children) if sub is None else _build(children, sub)
    node = _new(TensorDict)
    node._tensordict = entries
    node._batch_size = batch_size
    node._device = device
    node._names = None
    node._is_locked = False
    return node


def _dims_tree(values: list[Any], context: Any) -> TensorDict:
    """The tree of ints/None that vmap unflattens from a spec; a recent context's tree of ints is kept, locked."""
    layout: _Layout | None = context[6]
    if layout is None or _dynamo_compiling():
        return _placeholders_tree(iter(values), context)
    kept = layout.dims
    if (
        kept is not None and len(kept[0]) == len(values) and all(map(_is_, kept[0], values)) and kept[1]._is_locked
    ):  # (small ints are one object each)
        return kept[1]
    tree = _placeholders_tree(iter(values), context)
    if all(type(v) is int for v in values):  # (not a tree of Nones: tree_map(lambda x: None) gives a new one)
        if kept is not None:
            _PLACEHOLDERS_FLAT.pop(id(kept[1]), None)
        tree.lock_()
        children: list[Any] = []
        node = _node(tree, children, [])[0]
        layout.dims = (list(values), tree)
        _PLACEHOLDERS_FLAT[id(tree)] = (tree, children, _Context((*node, None, None)))
    return tree


def _placeholders_tree(children: Any, context: Any) -> TensorDict:
    keys, batch_size, device, names, meta = context[:5]
    values = [next(children) if len(m) == 2 else _placeholders_tree(children, m[2]) for m in meta]
    node = _new(TensorDict)
    node._tensordict = dict(zip(keys, values, strict=True))
    node._batch_size = batch_size
    node._device = device
    node._names = names
    node._is_locked = False
    return node


def _rebuild(children: Any, context: Any) -> TensorDict:
    """The node of ``context`` from its pytree children, its nested nodes first (as per-node pytree would)."""
    values = [next(children) if len(m) == 2 else _rebuild(children, m[2]) for m in context[4]]
    return _unflatten_node(values, context)


def _unflatten_node(values: list[Any], context: Any) -> TensorDict:
    keys, batch_size, device, names, meta = context[:5]
    # one pass: the (former, new) shape of each child that tells its shape (a tensor that became a collection,
    # jacfwd's per-input jacobians, tells nothing), and the new batch size from the first child that tells it
    pairs = []
    shapes: list[Any] = [None] * len(values)  # the shape of each child in pairs that is a tensor (asked once)
    new_bs = first = None
    unbatched = False  # an UnbatchedTensor's slot holds a tensor: it takes the batch size (_stamped)
    for i, (value, m) in enumerate(zip(values, meta, strict=True)):
        feat, old = m[0], m[1]
        if isinstance(value, _Tensor):
            if type(feat) is not int:  # tells nothing (None), or an UnbatchedTensor's slot
                unbatched = unbatched or feat is not None
                continue
            if value.is_nested:  # its shape may not be asked (strided layout): it tells only when first
                if new_bs is None:
                    new_bs = _nested_lead(value, value.ndim - (feat if feat >= 0 else -1 - feat))
                continue
            shape = value.shape
            if new_bs is None:
                new_bs = shape[: len(shape) - (feat if feat >= 0 else -1 - feat)]
            if old is not None and feat >= 0:
                pairs.append((old, shape))
                shapes[i] = shape
        elif hasattr(value, "batch_size"):
            if type(feat) is not int or type(value) in NON_TENSOR_TYPES:
                continue
            if feat >= 0:  # a tensor became a collection: its leading dims only when nothing else tells
                first = value.batch_size if first is None else first
            else:
                if new_bs is None:
                    new_bs = value.batch_size[: len(value.batch_size) + 1 + feat]
                if old is not None:
                    pairs.append((old, value.batch_size))
        elif value is None or type(value) is int:  # placeholders: the tree of in_dims/out_dims that vmap builds
            return TensorDict._new_unsafe(dict(zip(keys, values, strict=True)), batch_size, device, names)
    if new_bs is None:  # as tensordict: the leading dims of such collections, as many as there were
        new_bs = batch_size if first is None else first[: len(batch_size)]
        if type(new_bs) is tuple:  # sizes dropped under strict export (_traced), and no entry to tell them
            raise _unsized_error(keys, "has no tensor to tell its batch size: give it a tensor entry")
    same = len(new_bs) == len(batch_size) if _symbolic(new_bs, batch_size) else new_bs == batch_size
    if not same and type(batch_size) is tuple:
        raise _unsized_error(keys, f"went from {len(batch_size)} to {len(new_bs)} batch dims (a transform: vmap)")
    if same:
        entries = dict(zip(keys, values, strict=True))
        return TensorDict._new_unsafe(_stamped(entries, meta, new_bs) if unbatched else entries, new_bs, device, names)
    nd = len(batch_size)
    removed = None
    # vmap's batch size when this is its output (leaves that gained one dim: a batch size one longer)
    vmap_size = None if _is_compiling() or len(new_bs) != nd + 1 else _vmap_output(values, meta, shapes)
    if len(new_bs) == nd - 1:
        removed = _removed_dim(values, pairs, batch_size)
    elif all(new[:nd] == batch_size for _, new in pairs) and not (
        _prefixed(pairs) if _is_compiling() else vmap_size is not None
    ):
        # every child still starts with the batch size (tree_map changing feature dims, jacrev/jacfwd
        # appending the input's dims, as tensordict, inside vmap too): it stays; not for vmap's output, where
        # the mapped dim in front may have the size of the batch (under compile, where that cannot be asked:
        # when one shape was put in front of every child; and a parent node refits a nested node: _fit)
        entries = dict(zip(keys, values, strict=True))
        return TensorDict._new_unsafe(
            _stamped(entries, meta, batch_size) if unbatched else entries, batch_size, device, names
        )
    names = _names_after(names, batch_size, new_bs, removed)
    n = len(new_bs)
    entries = {}
    for key, value, m, shape in zip(keys, values, meta, shapes, strict=True):
        # the common cases without a call: a tensor or an in-memory TensorDict that leads with the batch size
        if shape is not None and (not n or shape[:n] == new_bs):  # noqa: SIM114  (two cases, each read alone)
            entries[key] = value
        elif type(value) is TensorDict and m[1] is not None and value._batch_size[:n] == new_bs:
            entries[key] = value
        elif m == _UNBATCHED and isinstance(value, _Tensor):
            entries[key] = _stamped({key: value}, (m,), new_bs)[key]
        else:
            entries[key] = _fit(key, value, m[1], new_bs, nd)
    if vmap_size is not None:
        _check_vmap_dim(keys, meta, shapes, batch_size, vmap_size)
    return TensorDict._new_unsafe(entries, new_bs if type(new_bs) is _Size else _Size(new_bs), device, names)


def _symbolic(new_bs: Any, batch_size: Any) -> bool:
    """True when the sizes are not to be compared, only their number: the leaves tell the batch size.

    A symbolic size here or there (a sum that is no int: cheap to ask): export's dynamic dims in the leaves
    (comparing them with the hints would specialize them), hints recorded while tracing (an exported program's
    output spec, called on another size), or no hints (a plain tuple: ``_traced``). dynamo tells no symbolic
    size from an int: under strict export, always.
    """
    return (
        type(batch_size) is not _Size
        or type(sum(new_bs, sum(batch_size))) is not int
        or (_dynamo_compiling() and _compat.exporting())
    )


def _unsized_error(keys: tuple[str, ...], what: str) -> RuntimeError:
    return RuntimeError(
        f"pytree unflatten: the TensorDict with keys {list(keys)} {what}, inside torch.export(strict=True), whose "
        "trace keeps no sizes in tree specs (dynamo cannot tell a dynamic size from an int): export with "
        "strict=False"
    )


def _check_vmap_dim(
    keys: tuple[str, ...], meta: tuple[Any, ...], shapes: list[Any], batch_size: torch.Size, size: int
) -> None:
    """The dim (of ``size``) vmap's output gained must be one of the batch dims (``out_dims`` 0 to ``nd``).

    With leaves of one shape, a dim put after the batch dims would otherwise read as a batch dim in front.
    """
    nd = len(batch_size)
    for key, m, new in zip(keys, meta, shapes, strict=True):
        old = m[1]
        if new is None or old is None or len(new) != len(old) + 1:
            continue
        if not any(new[p] == size and new[:p] + new[p + 1 :] == old for p in range(nd + 1)):
            raise RuntimeError(
                f"pytree unflatten: entry {key!r} of shape {list(new)} has vmap's dim (size {size}) after the batch "
                f"dims {list(batch_size)}: out_dims on a TensorDict must be a batch dim (0 to {nd})"
            )


def _stamped(entries: dict[str, Any], meta: tuple[Any, ...], batch_size: torch.Size) -> dict[str, Any]:
    """``entries`` with the tensor in each UnbatchedTensor's slot stamped with ``batch_size``.

    Wrapped again where a transform gave a plain tensor there (``grad`` does).
    """
    for (key, value), m in zip(entries.items(), meta, strict=True):
        if (
            m == _UNBATCHED
            and isinstance(value, _Tensor)
            and not (isinstance(value, UnbatchedTensor) and value.batch_size == batch_size)
        ):
            entries[key] = UnbatchedTensor(value, batch_size)
    return entries


def _nested_lead(value: torch.Tensor, n: int) -> Any:
    """The first ``n`` sizes of a nested tensor (None when one is ragged: it tells nothing about the batch).

    A strided nested tensor has no ``shape``, only the sizes of its regular dims.
    """
    try:
        return value.shape[:n]
    except RuntimeError:
        try:
            return _Size([value.size(d) for d in range(n)])
        except RuntimeError:
            return None


def _to_dumpable(context: Any) -> Any:
    keys, batch_size, device, names, meta = context[:5]
    return [
        list(keys),
        list(batch_size),
        None if device is None else str(device),
        None if names is None else list(names),
        [[m[0], None if m[1] is None else list(m[1]), *[_to_dumpable(sub) for sub in m[2:]]] for m in meta],
    ]


def _from_dumpable(dumped: Any) -> Any:
    keys, batch_size, device, names, meta = dumped
    return (
        tuple(keys),
        _size(batch_size),
        None if device is None else torch.device(device),
        None if names is None else tuple(names),
        tuple((m[0], _size(m[1]), *[_from_dumpable(sub) for sub in m[2:]]) for m in meta),
    )


def _size(dumped: Any) -> Any:
    """A dumped size back: a ``torch.Size``, or a tuple with None for the symbolic sizes (``_hint``)."""
    if dumped is None:
        return None
    return tuple(dumped) if None in dumped else _Size(dumped)


def _context_from_dumpable(dumped: Any) -> Any:
    return _Context((*_from_dumpable(dumped), None, None))


_compat.register_pytree_node(TensorDict, _flatten, _unflatten, _flatten_with_keys, _to_dumpable, _context_from_dumpable)


# ----------------------------------------------------------------------------------- non-tensor leaves
def _flatten_non_tensor(leaf: Any) -> tuple[list[Any], Any]:
    return [], leaf  # no pytree leaf: the value rides in the context


def _flatten_non_tensor_with_keys(leaf: Any) -> tuple[list[tuple[Any, Any]], Any]:
    return [], leaf


def _unflatten_non_tensor(values: Any, context: Any) -> Any:
    return context  # immutable for our purposes: its parent makes it follow a new batch size (_fit)


for _cls in (NonTensorData, MetaData, NonTensorStack):
    _compat.register_pytree_node(
        _cls, _flatten_non_tensor, _unflatten_non_tensor, _flatten_non_tensor_with_keys, None, None
    )


# ----------------------------------------------------------------------------------- lazy stacks
_MEMBERS = "members"  # a lazy stack's context when its children are its members (_flatten_lazy)


def _flatten_lazy(td: LazyStackedTensorDict) -> tuple[list[Any], Any]:
    # Inside grad, vjp, jvp... (a transform other than vmap, innermost: it flattens its inputs at its own level)
    # the children are the members themselves: a stack of their leaves would be a new tensor at each flatten,
    # and the transform makes differentiable (and differentiates against) the tensors of one flatten while the
    # function reads the members of another (functorch's level assertion). vmap flattens its inputs outside
    # its level and maps a dim of every leaf: there (and outside any transform) the stacked leaves.
    if not _dynamo_compiling() and _compat.in_other_transform():  # (dynamo cannot trace the interpreter stack)
        return list(td.tensordicts), (td.stack_dim, td.batch_size, _MEMBERS)
    try:
        dense = td._map(lambda x: x, "flattening a lazy stack for pytree")  # each leaf stacked (autograd kept)
    except Exception as err:
        raise RuntimeError(
            "pytree (vmap, compile) sees a lazy stack through its stacked leaves: this one's members differ in "
            f"keys or shapes ({err}); densify it or vmap over its members"
        ) from err
    if _dynamo_compiling() and _compat.exporting():  # no sizes in an exported spec (_traced)
        return [dense], (td.stack_dim, _hint(td.batch_size))
    return [dense], (td.stack_dim, td.batch_size)


def _flatten_lazy_with_keys(td: LazyStackedTensorDict) -> tuple[list[tuple[Any, Any]], Any]:
    values, context = _flatten_lazy(td)
    if len(context) == 3:  # the members
        return [(_pytree.SequenceKey(i), member) for i, member in enumerate(values)], context
    return [(_pytree.GetAttrKey("tensordicts"), values[0])], context


def _placeholders(td: Any) -> bool:
    for value in td._tensordict.values():
        return _placeholders(value) if type(value) is TensorDict else value is None or type(value) is int
    return False


def _unflatten_lazy(values: Any, context: Any) -> Any:
    if len(context) == 3:  # the members (_flatten_lazy): stacked again, as they come back
        return lazy_stack(list(values), context[0])
    (dense,) = values
    stack_dim, batch_size = context
    if not hasattr(dense, "batch_size") or _placeholders(dense):  # vmap's in_dims/out_dims tree
        return (dense,) if not _dynamo_compiling() and _compat.broadcasting_one_tuple() else dense
    new_bs = dense.batch_size
    if new_bs == batch_size or (
        len(new_bs) == len(batch_size) and (new_bs[stack_dim] == batch_size[stack_dim] or batch_size[stack_dim] is None)
    ):  # (None: _flatten_lazy)
        dim: int | None = stack_dim
    elif len(new_bs) == len(batch_size) - 1:  # vmap removed a dim: the stack dim (a member per call) or another
        gone = [d for d in range(len(batch_size)) if batch_size[:d] + batch_size[d + 1 :] == new_bs]
        # the stack dim possibly gone (or no telling which): dense, always a faithful form
        dim = None if stack_dim in gone or not gone else stack_dim - (gone[0] < stack_dim)
    elif len(new_bs) == len(batch_size) + 1:  # a dim was added (vmap's out_dims)
        added = [p for p in range(len(new_bs)) if new_bs[:p] + new_bs[p + 1 :] == batch_size]
        dim = stack_dim + (added[0] <= stack_dim) if added else None
    else:
        dim = None
    if dim is None:
        return dense
    return lazy_stack(list(dense.unbind(dim)), dim)


_compat.register_pytree_node(LazyStackedTensorDict, _flatten_lazy, _unflatten_lazy, _flatten_lazy_with_keys, None, None)
