"""Export and presentation: to_dict/state_dict, pickling, repr, non-tensor helpers, dim names.

Functions here are TensorDictBase methods: ``base.py`` attaches them to the class.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch

from .. import _errors, _options
from .._keys import NestedKey
from .._ops.meta import LeafMeta
from .._ops.traverse import (
    NO_DEFAULT,
    apply_leaves,
    flat_leaves,
    is_non_tensor_type,
    is_td,
    leaf_shape,
    named_entries,
    named_leaves,
    named_nodes,
    plain_value_of,
    source_leaves,
    value_of,
)
from .._ops.traverse import (
    is_non_tensor as _is_nt,
)
from .._unbatched import UnbatchedTensor
from . import values as _values

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor
_Size = torch.Size


def set_non_tensor(self: TensorDictBase, key: NestedKey, value: Any) -> TensorDictBase:
    """Store any Python object (even a dict or a number) as a non-tensor leaf at ``key``.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(batch_size=[2]).set_non_tensor("cfg", {"lr": 0.1})
        >>> td["cfg"]
        {'lr': 0.1}
    """
    if _is_nt(value):
        if not hasattr(value, "data"):  # a NonTensorStack already holds one value per position
            return self.set(key, value)
        while _is_nt(value) and hasattr(value, "data"):  # store the value, not its wrapper
            value = value.data
    return self.set(key, self._non_tensor_cls._new(value, self.batch_size, self.device))


def get_non_tensor(self: TensorDictBase, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
    """The value of the non-tensor leaf at ``key`` (other leaves are returned as they are)."""
    return value_of(self._get(key, default))


def is_non_tensor(self: TensorDictBase, key: NestedKey) -> bool:
    """True when the leaf at ``key`` is a non-tensor leaf."""
    return _is_nt(self._get(key))


def non_tensor_items(self: TensorDictBase, include_nested: bool = False) -> tuple[tuple[NestedKey, Any], ...]:
    """``(key, leaf)`` for each non-tensor leaf (nested ones with tuple keys when asked), as a tuple.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> [key for key, _ in TensorDict(a=torch.zeros(2), s="x", n={"t": "y"}, batch_size=[2]).non_tensor_items(True)]
        ['s', ('n', 't')]
    """
    return tuple(
        ((path if len(path) > 1 else path[0]), value)
        for path, value in named_leaves(self, include_nested=include_nested, is_leaf=is_non_tensor_type)
        if _is_nt(value)
    )


def filter_non_tensor_data(self: TensorDictBase) -> TensorDictBase:
    """A shallow copy without the non-tensor leaves (nested nodes are kept, possibly empty)."""
    return apply_leaves(self, _unless_non_tensor, is_leaf=is_non_tensor_type, what="filtering non-tensor data")


def _unless_non_tensor(leaf: Any) -> Any:
    return None if _is_nt(leaf) else leaf


def tolist(
    self: TensorDictBase,
    *,
    convert_nodes: bool = True,
    convert_tensors: bool | Literal["numpy"] = False,
    tolist_first: bool = False,
    as_linked_list: bool = False,
) -> Any:
    """Nested lists over the batch dims of per-element dicts (``td[i, j].to_dict()``).

    ``convert_nodes=False`` keeps the elements as TensorDicts (``td[i, j]``). ``convert_tensors`` and
    ``tolist_first`` are passed to each element's :func:`to_dict`. ``as_linked_list=True`` makes the outer
    list a ``LinkedList``: ``values[i] = {...}`` writes into ``td[i]`` too.

    Raises:
        TypeError: ``convert_tensors`` with ``convert_nodes=False``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.arange(2), n=TensorDict(c=torch.zeros(2, 2), batch_size=[2, 2]), batch_size=[2])
        >>> td.tolist(convert_tensors=True, tolist_first=True)[0]
        {'a': 0, 'n': [{'c': 0.0}, {'c': 0.0}]}
    """
    if convert_tensors and not convert_nodes:
        raise TypeError("tolist(convert_tensors=...) needs convert_nodes=True: the elements are kept as TensorDicts")
    if not self.batch_dims:
        return self.to_dict(convert_tensors=convert_tensors, tolist_first=tolist_first) if convert_nodes else self
    out = [
        td.tolist(convert_nodes=convert_nodes, convert_tensors=convert_tensors, tolist_first=tolist_first)
        for td in self.unbind(0)
    ]
    return self._linked_list_cls(out, td=self) if as_linked_list else out


def to_padded_tensor(self: TensorDictBase, padding: float = 0.0, mask_key: NestedKey | None = None) -> TensorDictBase:
    """Nested-tensor leaves become padded tensors (:func:`torch.nested.to_padded_tensor`).

    A ragged batch dim (``-1``, from ``densify(layout=torch.jagged)``) takes the padded length.

    Args:
        padding: the fill value.
        mask_key: where to write a bool mask of the valid batch elements (needs a ragged batch dim).
    """
    nested = next((x for x in flat_leaves(self) if isinstance(x, _Tensor) and x.is_nested), None)
    bs = self.batch_size
    if nested is not None and -1 in bs:
        padded_shape = torch.nested.to_padded_tensor(nested, padding).shape
        bs = _Size([padded_shape[i] if n == -1 else n for i, n in enumerate(bs)])
    out = self._map(
        lambda x: torch.nested.to_padded_tensor(x, padding) if x.is_nested else x,
        "padding nested tensors",
        batch_size=bs,
    )
    if mask_key is not None:
        if nested is None or -1 not in self.batch_size:
            raise RuntimeError("to_padded_tensor(mask_key=...) needs a ragged batch dim (-1) and a nested leaf")
        lengths = nested.offsets().diff()  # type: ignore[attr-defined]  # a jagged nested tensor
        out.set(mask_key, torch.arange(bs[1], device=lengths.device) < lengths[:, None])
    return out


def to_dict(
    self: TensorDictBase,
    *,
    retain_none: bool = True,
    convert_tensors: bool | Literal["numpy"] = False,
    tolist_first: bool = False,
) -> dict[str, Any]:
    """A plain nested ``dict`` of the leaves (non-tensor leaves give their values).

    Args:
        retain_none: accepted for tensordict's sake (a ``None`` value is kept either way).
        convert_tensors: ``True`` turns tensors into (nested) Python lists, ``"numpy"`` into NumPy arrays.
        tolist_first: a nested TensorDict (or non-tensor leaf) is converted with its ``tolist``: one with
            batch dims becomes (nested) lists of dicts, one per element.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.arange(2), n=TensorDict(c=torch.zeros(2), batch_size=[2]), batch_size=[2])
        >>> td.to_dict(convert_tensors=True)
        {'a': [0, 1], 'n': {'c': [0.0, 0.0]}}
        >>> td.to_dict(convert_tensors=True, tolist_first=True)
        {'a': [0, 1], 'n': [{'c': 0.0}, {'c': 0.0}]}
    """
    out: dict[str, Any] = {}
    dicts: dict[tuple[str, ...], dict[str, Any]] = {(): out}  # the dict built for each node, by path
    for path, value in named_entries(self, is_leaf=is_non_tensor_type):  # a node before its entries
        parent = dicts.get(path[:-1])
        if parent is None:  # inside a node that tolist_first converted whole
            continue
        if type(value) is _Tensor:
            parent[path[-1]] = _converted(value, convert_tensors)
        elif tolist_first and (is_td(value) or _is_nt(value)):
            parent[path[-1]] = value.tolist(convert_tensors=convert_tensors)
        elif _is_nt(value):
            parent[path[-1]] = plain_value_of(value)
        elif is_td(value):
            parent[path[-1]] = dicts[path] = {}
        else:
            parent[path[-1]] = value
    return out


def _converted(tensor: _Tensor, convert_tensors: bool | str) -> Any:
    if convert_tensors == "numpy":
        return tensor.numpy()
    return tensor.tolist() if convert_tensors else tensor


def to_tensordict(self: TensorDictBase, *, retain_none: bool | None = None) -> TensorDictBase:
    """An in-memory TensorDict copy of this one (a stored TensorDict reads every row in one batched call).

    Tensors are copied; non-tensor values are shared (``clone`` deep-copies them, as tensordict).
    """
    return _values.clone_tensors(self)


def state_dict(
    self: TensorDictBase, destination: Any = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
) -> dict[str, Any]:
    """The leaves as a dict: flat ``"a.b"`` keys by default, nested dicts with ``flatten=False``.

    As :meth:`torch.nn.Module.state_dict`, the result has a ``_metadata`` attribute: the batch size and
    device of each level, under its ``"."``-joined key (``""`` for the root); with ``flatten=False`` each
    nested dict has its own. :meth:`load_state_dict` reads them back.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> sd = TensorDict(a=torch.zeros(3, 2), batch_size=[3]).state_dict()
        >>> list(sd), sd._metadata[""]["batch_size"]
        (['a'], torch.Size([3]))
        >>> TensorDict().load_state_dict(sd, strict=False).batch_size
        torch.Size([3])
    """
    out: Any = collections.OrderedDict() if destination is None else destination
    if destination is None or not hasattr(destination, "_metadata"):
        out._metadata = collections.OrderedDict()  # (a plain dict refuses the attribute, as in tensordict)
    held: list[tuple[Any, Any]] = []  # the TensorClasses held below the root, labelled last (label_levels)
    if flatten or destination is not None or prefix:
        root = prefix[:-1] if prefix.endswith(".") else prefix
        for path, node in named_nodes(self):
            out._metadata[prefix + ".".join(path) if path else root] = _level_meta(node)
            if path and getattr(type(node), "_state_dict_meta", None) is not None:
                held.append((node, prefix + ".".join(path) + "."))
        for node, at in held:
            label_levels(node, out, at, nested=False)
        for path, leaf in named_leaves(self):
            out[prefix + ".".join(path)] = leaf if keep_vars else leaf.detach()
        return out  # type: ignore[no-any-return]  # the caller's mapping or a new OrderedDict
    out._metadata[""] = _level_meta(self)
    dicts: dict[tuple[str, ...], Any] = {(): out}
    for path, value in named_entries(self):  # (in the TensorDict's order: nodes where they stand)
        if isinstance(value, _Tensor):
            dicts[path[:-1]][path[-1]] = value if keep_vars else value.detach()
        elif is_td(value) and not _is_nt(value):
            level: Any = collections.OrderedDict()
            level._metadata = collections.OrderedDict({"": _level_meta(value)})
            dicts[path] = dicts[path[:-1]][path[-1]] = level
            if getattr(type(value), "_state_dict_meta", None) is not None:
                held.append((value, level))
    for value, level in held:
        label_levels(value, level, "", nested=True)
    return out  # type: ignore[no-any-return]


def _level_meta(node: Any) -> dict[str, Any]:
    meta = {"batch_size": node.batch_size, "device": node.device}
    extra = getattr(type(node), "_state_dict_meta", None)  # a TensorClass: its class and non-tensor fields
    return meta if extra is None else {**meta, **extra(node)}


def _wrapper_levels(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, wrapper)`` for ``obj`` (a TensorClass) and the TensorClasses its fields hold, depth first."""
    out = [(path, obj)]
    for name in type(obj)._field_specs:
        value = getattr(obj, name)
        if getattr(type(value), "_state_dict_meta", None) is not None:
            out += _wrapper_levels(value, (*path, name))
    return out


def label_levels(obj: Any, state_dict: Any, prefix: str, nested: bool) -> None:
    """Add to ``state_dict``'s ``_metadata`` the class and non-tensor fields of each TensorClass level of ``obj``.

    ``nested``: the state dict is made of nested dicts (``flatten=False``), each with its own ``_metadata``.
    """
    root = prefix[:-1] if prefix.endswith(".") else prefix
    for path, wrapper in _wrapper_levels(obj):
        if nested:
            level = state_dict
            for part in path:
                level = level[part]
            level._metadata[""].update(wrapper._state_dict_meta())
        else:
            key = prefix + ".".join(path) if path else root
            state_dict._metadata.setdefault(key, {}).update(wrapper._state_dict_meta())


def restore_fields(root: Any, state_dict: Mapping[str, Any]) -> None:
    """Set back the non-tensor fields of the TensorClass levels that ``state_dict``'s ``_metadata`` records."""
    levels: dict[tuple[str, ...], Any] = {}
    _levels(state_dict, (), levels)
    for path, facts in levels.items():
        fields = facts.get("_non_tensor")
        if not isinstance(fields, Mapping) or facts.get("_type") == "NonTensorData":
            continue
        node = root
        for part in path:
            specs = getattr(type(node), "_field_specs", None)
            node = getattr(node, part) if specs is not None and part in specs else node.get(part, None)
        specs = getattr(type(node), "_field_specs", None) or {}
        for name, value in fields.items():
            if name in specs:
                setattr(node, name, value)


_LEGACY = ("__batch_size", "__device")  # the keys tensordict's earlier state dicts held the root's facts in


def _levels(state_dict: Any, path: tuple[str, ...], out: dict[tuple[str, ...], Any]) -> None:
    """Collect the batch size and device of each level a state dict records, by path."""
    meta = getattr(state_dict, "_metadata", None)
    if isinstance(meta, Mapping):
        for key, facts in meta.items():
            if isinstance(facts, Mapping) and "batch_size" in facts:  # (a module's entries hold a version)
                out[(*path, *key.split(".")) if key else path] = facts
    if "__batch_size" in state_dict:
        out[path] = {"batch_size": state_dict["__batch_size"], "device": state_dict.get("__device")}
    for key, value in state_dict.items():
        if isinstance(value, Mapping) and not is_td(value):
            _levels(value, (*path, key), out)


def load_state_dict(
    self: TensorDictBase,
    state_dict: Mapping[str, Any],
    strict: bool = True,
    assign: bool = False,
    from_flatten: bool = False,
) -> TensorDictBase:
    """Load a dict produced by :meth:`state_dict` (copies into existing leaves, adds new ones).

    The batch sizes the state dict records (its ``_metadata``) become those of the levels loaded.

    Raises:
        RuntimeError: with ``strict=True``, when the leaves differ from the state dict's; when the
            state dict was saved on another device.
    """
    levels: dict[tuple[str, ...], Any] = {}
    _levels(state_dict, (), levels)
    device = levels.get((), {}).get("device")
    if device is not None and self.device is not None and torch.device(device) != self.device:
        raise RuntimeError(
            f"load_state_dict: the state dict was saved on {device}, this TensorDict is on "
            f"{self.device}: loading from another device is not supported"
        )
    entries = {k: v for k, v in state_dict.items() if k not in _LEGACY}
    flat = {".".join(p): v for p, v in source_leaves(entries, "update_")}
    root_size = _Size(levels[()]["batch_size"]) if () in levels else self.batch_size
    source = self._dense_cls._new_unsafe(flat, root_size, None, None).unflatten_keys(".")
    if strict:
        mine = {p for p, _ in named_leaves(self)}
        theirs = {p for p, _ in named_leaves(source)}
        if mine != theirs:  # tensordict raises RuntimeError here
            err = _errors.key_sets_differ((), [".".join(p) for p in mine], [".".join(p) for p in theirs])
            raise RuntimeError(f"load_state_dict(strict=True): {err.args[0]}")
    deepest_first = sorted((p for p in levels if p), key=len, reverse=True)
    for path in deepest_first:  # the nested levels' batch sizes (a level without leaves is made)
        node = source._get(path, None)
        if node is None:
            source.set(path, self._dense_cls._new_unsafe({}, _Size(levels[path]["batch_size"]), None, None))
        elif is_td(node):
            node.batch_size = levels[path]["batch_size"]
    self.update(source, inplace=not assign)
    for path in (*deepest_first, ()):
        if path in levels:
            node = self._get(path, None) if path else self
            if is_td(node) and not _is_nt(node):
                node.batch_size = levels[path]["batch_size"]
    restore_fields(self, state_dict)  # the TensorClasses held: their non-tensor fields
    return self


def __reduce__(self: TensorDictBase) -> Any:
    """Pickle as the in-memory TensorDict of this one (its names and lock kept); backends with state override it.

    The dense TensorDict's reduce names only module-level rebuild functions, so ``torch.load(weights_only=True)``
    reads it back.
    """
    dense = self.to_tensordict()
    if self.is_locked:
        dense.lock_()
    return dense.__reduce_ex__(2)


def __repr__(self: TensorDictBase) -> str:
    lines = [f"{type(self).__name__}({node_facts(self, root=True)})"]
    tree_lines(self, "", lines)
    return "\n".join(lines)


def node_facts(td: Any, root: bool = False, stack_dim: int | None = None) -> str:
    """A node's facts for its repr line, as the print options say (``set_printoptions``).

    A lazy stack's ``stack_dim`` follows its batch size.
    """
    opts = _options.REPR
    parts = [f"batch_size={list(td.batch_size)}"] if opts["show_batch_size"] else []
    if stack_dim is not None:
        parts.append(f"stack_dim={stack_dim}")
    if root and opts["show_device"]:
        parts.append(f"device={td.device}")
    if not opts["compact"] and opts["show_is_shared"]:
        parts.append(f"is_shared={td.is_shared()}")
    return ", ".join(parts)


def refine_names(self: TensorDictBase, *names: Any) -> TensorDictBase:
    """Name the batch dims in place (``...`` keeps existing names)."""
    current = self.names
    if len(names) == 1 and names[0] is Ellipsis:
        return self
    new = list(current)
    if Ellipsis in names:
        i = names.index(Ellipsis)
        head, tail = names[:i], names[i + 1 :]
        new[: len(head)] = head
        if tail:
            new[-len(tail) :] = tail
    else:
        new = list(names)
    self.names = new
    return self


def rename(self: TensorDictBase, *names: Any, **rename_map: Any) -> TensorDictBase:
    """A shallow copy with renamed batch dims."""
    out = self.clone(False)
    return out.rename_(*names, **rename_map)


def rename_(self: TensorDictBase, *names: Any, **rename_map: Any) -> TensorDictBase:
    """Rename batch dims in place, positionally or by ``old=new``; ``rename_(None)`` clears every name.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> TensorDict(batch_size=[1, 2], names=["a", "b"]).rename(None).names
        [None, None]
    """
    if names == (None,):
        names = (None,) * self.batch_dims
    if names:
        self.names = list(names)
    else:
        self.names = [rename_map.get(n, n) if n is not None else None for n in self.names]
    return self


def leaf_repr(value: Any, device: Any = None) -> str:
    """One line for a leaf in a tree repr: the facts the print options ask for (shape, dtype, device...).

    A stored leaf, unread, is given as its metadata, on its node's ``device``.
    """
    if _is_nt(value):  # (a stack's own repr spans lines, as tensordict's: one line in the tree)
        return " ".join(line.strip() for line in repr(value).splitlines()).replace("( ", "(")
    dtype: Any
    if isinstance(value, _Tensor):
        shape, dtype, device = leaf_shape(value), value.dtype, value.device
    elif type(value) is LeafMeta:
        shape, dtype, value = value.shape, value.dtype, None
    else:
        return repr(value)
    opts = _options.REPR
    parts = [f"shape={list(shape)}"] if opts["show_shape"] else []
    if opts["show_dtype"]:
        parts.append(f"dtype={str(dtype).removeprefix('torch.')}")
    if opts["show_field_device"]:
        parts.append(f"device={device}")
    if value is not None and not opts["compact"]:
        parts.extend(_detailed_facts(value, opts))
    return f"{'UnbatchedTensor' if isinstance(value, UnbatchedTensor) else 'Tensor'}({', '.join(parts)})"


def _detailed_facts(value: torch.Tensor, opts: dict[str, Any]) -> list[str]:
    """The facts only ``compact=False`` shows (they read the tensor, ``plain`` its values)."""
    parts = []
    if opts["show_field_is_shared"]:
        parts.append(f"is_shared={value.is_shared()}")  # type: ignore[no-untyped-call]
    if opts["show_grad"]:
        parts.append(f"requires_grad={value.requires_grad}")
    if opts["show_is_contiguous"]:
        parts.append(f"is_contiguous={value.is_contiguous()}")
    if opts["show_is_view"]:
        parts.append(f"is_view={value._base is not None}")
    if opts["show_storage_size"]:
        parts.append(f"storage_size={value.untyped_storage().nbytes()}")
    if opts["plain"]:
        parts.append(_summary(value))
    return parts


def _summary(value: torch.Tensor) -> str:
    """``plain``'s value summary: mean and std of floats (in double), min and max of other dtypes."""
    if value.is_nested:
        value = torch.cat([t.reshape(-1) for t in value.unbind()])
    if not value.numel():
        return "[]"
    value = value.detach()
    if value.is_floating_point() or value.is_complex():
        value = value.to(torch.complex128 if value.is_complex() else torch.float64)
        std = value.std().item() if value.numel() > 1 else float("nan")
        return f"mean={value.mean().item():.4g}, std={std:.4g}"
    return f"min={value.min().item()}, max={value.max().item()}"


def tree_lines(td: TensorDictBase, indent: str, lines: list[str]) -> None:
    """Append the repr lines of ``td``'s entries (one per key, nested nodes indented) to ``lines``.

    Leaves are never read (``_meta_items`` gives a stored tensor leaf as its metadata) unless the print
    options ask for their values. Entries are in the print options' ``sort_keys`` order.
    """
    entries = list(named_entries(td, is_leaf=is_non_tensor_type, meta=True))  # a node before its entries
    order = _options.REPR["sort_keys"]
    if order == "alphabetical":  # sorting the paths keeps each node before its entries
        entries.sort(key=lambda entry: entry[0])
    elif callable(order):
        entries.sort(key=lambda entry: tuple(map(order, entry[0])))
    last = {path[:-1]: path[-1] for path, _ in entries}  # by node path: its last key, drawn with a corner
    indents: dict[tuple[str, ...], str] = {(): indent}  # by node path: its entries' indent
    nodes: dict[tuple[str, ...], Any] = {(): td}
    for path, value in entries:
        parent = path[:-1]
        branch, extend = ("`-- ", "    ") if path[-1] == last[parent] else ("|-- ", "|   ")
        if is_td(value) and not _is_nt(value):
            lines.append(f"{indents[parent]}{branch}{path[-1]}: {type(value).__name__}({node_facts(value)})")
            indents[path] = indents[parent] + extend
            nodes[path] = value
        else:  # the node's device is read only for a stored leaf (a property read per leaf costs)
            device = nodes[parent].device if type(value) is LeafMeta else None
            lines.append(f"{indents[parent]}{branch}{path[-1]}: {leaf_repr(value, device)}")
