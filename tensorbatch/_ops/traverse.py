"""The one walk over a TensorDict tree: its nodes, its entries, its leaves, and the one mapping engine.

Every leaf-wise and node-wise job goes through these functions. They are written by hand over the
backends' ``_items_str`` (no pytree flatten on the hot path). Exceptions raised by the leaf
function keep their type and gain the key path as a note.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from .. import _options
from .._errors import add_path_note, batch_mismatch, key_sets_differ, missing_key, not_a_mapping
from .._keys import key_tuple
from .._unbatched import UnbatchedTensor
from . import ragged

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor


class _Sentinel(enum.Enum):
    """Markers for 'no value'. Enum members, so torch.compile can treat them as constants."""

    NO_DEFAULT = "NO_DEFAULT"  # "no default given": lookups raise KeyError
    MISSING = "MISSING"  # returned by lookups called with default=MISSING for an absent key
    GET_DEFAULT = "GET_DEFAULT"  # get() called without a default: None, or KeyError (set_get_defaults_to_none)

    def __repr__(self) -> str:
        return self.value


NO_DEFAULT: Any = _Sentinel.NO_DEFAULT
MISSING: Any = _Sentinel.MISSING
GET_DEFAULT: Any = _Sentinel.GET_DEFAULT


def unset_default() -> Any:
    """What ``get`` without a default gives for a missing key: None, or ``NO_DEFAULT`` (raise) when off."""
    return None if _options.GET_DEFAULTS_TO_NONE else NO_DEFAULT


COLLECTION_TYPES: set[type] = set()
"""Every tensor-collection class (TensorDictBase subclasses and typed wrappers register here)."""

REWRAP_TYPES: set[type] = set()
"""Typed wrappers (TensorClass, TypedTensorDict subclasses): a nested one is rebuilt as its own class."""

NON_TENSOR_TYPES: set[type] = set()
"""Non-tensor leaf classes (``_nontensor.py``): collections without keys that carry Python values.

Value operations walk past them (they have no leaves) and rebuild them with ``_follow``; batch
operations (``follow=True``) apply the leaf function to their ``_positions()`` tensor and rebuild
them with ``_from_positions``.
"""

NON_TENSOR_FOLLOW = {
    "expand": "stack",
    "unsqueeze": "stack",
    "view": "regroup",
    "reshape": "regroup",
    "flatten": "regroup",
    "unflatten": "regroup",
}
"""How a non-tensor leaf follows the batch operations that do not just move its positions (``_follow_op``).

``"stack"``: tensordict's ``NonTensorData.expand`` and ``unsqueeze`` stack copies of the leaf, so new dims
make a ``NonTensorData`` a ``NonTensorStack`` (see ``_nontensor.py``). ``"regroup"``: the elements are
regrouped, so a stack's elements stop being grouped by the members it was stacked from.
"""


def is_td(value: Any) -> bool:
    """True for tensor collections (TensorDictBase and its wrappers): a set lookup, no isinstance."""
    return type(value) in COLLECTION_TYPES


def vmap_placeholders(td: Any) -> bool:
    """True for the tree of ints/None that vmap unflattens from a spec (its in_dims/out_dims), not a tensor's.

    Its first leaf tells: a pytree unflatten gives every leaf one kind.
    """
    entries = getattr(td, "_tensordict", None)
    if type(entries) is not dict:
        return False
    for value in entries.values():
        return vmap_placeholders(value) if type(value) in COLLECTION_TYPES else value is None or type(value) is int
    return False


def is_node(value: Any) -> bool:
    """True for a tensor collection with keys: a TensorDict or wrapper, not a non-tensor leaf."""
    return type(value) in COLLECTION_TYPES and type(value) not in NON_TENSOR_TYPES


def is_non_tensor(data: Any) -> bool:
    """True for non-tensor leaves (``NonTensorData``, ``NonTensorStack``)."""
    return type(data) in NON_TENSOR_TYPES


def is_non_tensor_type(cls: type) -> bool:
    """True for the non-tensor leaf classes (an ``is_leaf`` predicate)."""
    return cls in NON_TENSOR_TYPES


def value_of(leaf: Any) -> Any:
    """What a lookup returns: the value of a non-tensor leaf (a stack's as a linked list), anything else unchanged."""
    return leaf._value() if type(leaf) in NON_TENSOR_TYPES else leaf


def plain_value_of(leaf: Any) -> Any:
    """What an export (``to_dict``) gives: a non-tensor leaf's value(s) as plain objects, anything else unchanged."""
    return leaf._plain_value() if type(leaf) in NON_TENSOR_TYPES else leaf


def leaf_shape(value: torch.Tensor) -> torch.Size:
    """``value.shape``, also for a strided nested tensor (which has none): -1 where its components differ."""
    try:
        return value.shape
    except RuntimeError:
        return ragged.shape(value)


def unfit_keys(source: dict[Any, Any], batch_size: torch.Size, device: torch.device | None) -> list[Any] | None:
    """The keys of ``source`` whose values need validation, or None when a key is not a string.

    The TensorDict constructor's batch-fit check (TypedTensorDict and TensorClass make the same test
    inline while they gather their fields: a call here costs them +5-10%): a plain tensor whose shape
    starts with ``batch_size`` (on ``device`` when one is set) is stored as it is; every other value
    is listed for full validation, which converts it or names the key in its error.
    """
    unfit = []
    n = len(batch_size)
    try:
        if n == 1 and device is None:  # the usual call: its own loop, without the per-key branches
            b0 = batch_size[0]  # (shape[0] == b0 is cheaper than shape[:1] == batch_size)
            for key, value in source.items():
                if type(key) is not str:
                    return None
                if type(value) is not _Tensor or not (shape := value.shape) or shape[0] != b0:
                    unfit.append(key)
        else:
            for key, value in source.items():
                if type(key) is not str:
                    return None
                if (
                    type(value) is not _Tensor
                    or (device is not None and value.device != device)
                    or (value.shape[:n] != batch_size)
                ):
                    unfit.append(key)
    except RuntimeError:  # a strided nested tensor has no .shape: validate every entry (no cost without one)
        return list(source) if all(type(key) is str for key in source) else None
    return unfit


def tensors_only(td: Any) -> dict[str, Any] | None:
    """The storage dict of an in-memory TensorDict whose values are all plain tensors, else None.

    Binary leaf maps run one comprehension over two of them. (The test costs ~0.25 us: for unary
    maps over a few leaves the plain loop is as fast, measured.)
    """
    if type(td) is not td._dense_cls:
        return None
    data: dict[str, Any] = td._tensordict
    return data if list(map(type, data.values())).count(_Tensor) == len(data) else None


def source_items(source: Any, what: str) -> Any:
    """The first-level ``(key, value)`` pairs of a mapping or TensorDict; anything else is refused.

    None counts as an empty mapping, as tensordict's ``update(None)`` does nothing.
    """
    if is_td(source):
        return source._items_str()
    if source is None:
        return ()
    try:
        return source.items()
    except AttributeError:
        raise not_a_mapping(what, source) from None


def named_nodes(
    td: TensorDictBase,
    *,
    post_order: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    members: bool = False,
) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, node)`` for ``td`` (path ``()``) and every TensorDict node below it, depth first.

    Args:
        td: the root.
        post_order: list a node after the nodes below it (else before them).
        is_leaf: predicate on a value's type: True makes a nested collection a leaf (not a node).
        members: walk what is stored: a node holding a stack of member TensorDicts (a lazy stack,
            ``_stacked_members()``) is listed, then its members under ``(*path, "0")``, ``(*path, "1")``...
            instead of its stacked entries.

    Non-tensor leaves are leaves, not nodes.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "n": {"m": {"b": torch.zeros(1)}}}, batch_size=[1])
        >>> [path for path, _ in named_nodes(td)]
        [(), ('n',), ('n', 'm')]
        >>> [path for path, _ in named_nodes(td, post_order=True)]
        [('n', 'm'), ('n',), ()]
    """
    out: list[tuple[tuple[str, ...], Any]] = []
    _nodes(td, (), post_order, is_leaf, members, out)
    return out


def _nodes(
    td: Any,
    prefix: tuple[str, ...],
    post_order: bool,
    is_leaf: Any,
    members: bool,
    out: list[tuple[tuple[str, ...], Any]],
) -> None:
    # one list, filled by a plain recursion: nested generators cost ~0.5 us a level (lock_ is hot)
    if not post_order:
        out.append((prefix, td))
    stacked = stacked_members(td) if members else None
    if stacked is not None:
        for i, member in enumerate(stacked[1]):
            _nodes(member, (*prefix, str(i)), post_order, is_leaf, members, out)
    else:
        for key, value in td._items_str():
            if type(value) is not _Tensor and is_node(value) and (is_leaf is None or not is_leaf(type(value))):
                _nodes(value, (*prefix, key), post_order, is_leaf, members, out)
    if post_order:
        out.append((prefix, td))


def stacked_members(node: Any) -> tuple[int, list[Any]] | None:
    """``(stack_dim, members)`` of a node that stores a stack of TensorDicts (a lazy stack), else None.

    Read from the backend's ``_stacked_members()`` hook: walks over what is stored (saving,
    consolidating, sharing memory) visit the members instead of stacked copies.
    """
    hook = getattr(node, "_stacked_members", None)
    return None if hook is None else hook()


def named_entries(
    td: TensorDictBase,
    *,
    include_nested: bool = True,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    post_order: bool = False,
    meta: bool = False,
) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, value)`` for every entry below ``td``, leaves and nodes, depth first.

    The walk behind ``keys``/``items``/``values``; arguments as there.

    Args:
        td: the root (not listed itself).
        include_nested: enter nested nodes (else only the first level).
        leaves_only: skip the nodes (non-tensor leaves count as nodes here, as in tensordict's keys).
        is_leaf: predicate on a value's type: True makes a nested collection a leaf.
        post_order: list a node after its entries (``keys()`` order) instead of before (``items()``).
        meta: read no leaf: a stored tensor leaf comes as its metadata (``_meta_items``; an in-memory
            one as itself), for jobs that need only shapes and dtypes (repr).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"n": {"b": torch.zeros(1)}, "a": torch.zeros(1)}, batch_size=[1])
        >>> [path for path, _ in named_entries(td)]
        [('n',), ('n', 'b'), ('a',)]
        >>> [path for path, _ in named_entries(td, leaves_only=True)]
        [('n', 'b'), ('a',)]
    """
    out: list[tuple[tuple[str, ...], Any]] = []
    _entries(td, (), include_nested, leaves_only, is_leaf, post_order, out, meta)
    return out


def _entries(
    td: Any,
    prefix: tuple[str, ...],
    include_nested: bool,
    leaves_only: bool,
    is_leaf: Any,
    post_order: bool,
    out: list[tuple[tuple[str, ...], Any]],
    meta: bool = False,
) -> None:
    for key, value in td._meta_items() if meta else td._items_str():
        path = (*prefix, key)
        if type(value) is _Tensor or not is_td(value) or (is_leaf is not None and is_leaf(type(value))):
            out.append((path, value))
            continue
        if not (post_order or leaves_only):
            out.append((path, value))
        if include_nested:
            _entries(value, path, True, leaves_only, is_leaf, post_order, out, meta)
        if post_order and not leaves_only:
            out.append((path, value))


def entry_keys(
    td: TensorDictBase,
    include_nested: bool = True,
    leaves_only: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
) -> list[Any]:
    """``keys(include_nested, leaves_only, is_leaf)``: :func:`named_entries` in post order, as keys.

    First-level keys are strings, deeper ones tuples (no path tuple is built for them: this is the
    hot path of ``keys(include_nested=True)``). Reads no leaf: it walks ``_meta_items``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"n": {"b": torch.zeros(1)}, "a": torch.zeros(1)}, batch_size=[1])
        >>> entry_keys(td)
        [('n', 'b'), 'n', 'a']
    """
    out: list[Any] = []
    _keys(td, (), include_nested, leaves_only, is_leaf, out)
    return out


def _keys(
    td: Any, prefix: tuple[str, ...], include_nested: bool, leaves_only: bool, is_leaf: Any, out: list[Any]
) -> None:
    for key, value in td._meta_items():  # no leaf read (a TensorDict's _meta_items is its _items_str)
        if type(value) is _Tensor:
            out.append((*prefix, key) if prefix else key)
            continue
        node = is_td(value) and (is_leaf is None or not is_leaf(type(value)))
        if node and include_nested:
            _keys(value, (*prefix, key), True, leaves_only, is_leaf, out)
        if not (node and leaves_only):
            out.append((*prefix, key) if prefix else key)


def flat_into(td: Any, prefix: str, separator: str, is_leaf: Any, out: dict[str, Any]) -> int:
    """Write ``td``'s leaves into ``out`` under joined keys starting with ``prefix``; return how many.

    The body of ``flatten_keys`` (non-tensor leaves and ``is_leaf`` types count as leaves).

    Fewer keys in ``out`` than the count returned means two leaves met on one joined key
    (:func:`raise_collision` names it). Joined keys grow as strings (no path tuples) and the node test
    is inline: ``flatten_keys`` is on the hot path. The count is per node (len of each level), not per leaf.
    """
    items = td._items_str()
    try:
        written = len(items)
    except TypeError:  # a generator of pairs (lazy stacks, storage backends)
        items = list(items)
        written = len(items)
    for key, value in items:
        if (
            type(value) is _Tensor
            or (cls := type(value)) not in COLLECTION_TYPES
            or cls in NON_TENSOR_TYPES
            or (is_leaf is not None and is_leaf(cls))
        ):
            out[prefix + key] = value
        else:
            written += flat_into(value, prefix + key + separator, separator, is_leaf, out) - 1
    return written


def raise_collision(td: Any, separator: str, is_leaf: Any) -> None:
    """Raise the KeyError naming the first joined key two leaves of ``td`` share (see :func:`flat_into`)."""
    seen: set[str] = set()
    for flat in _flat_keys(td, "", separator, is_leaf):
        if flat in seen:
            raise KeyError(
                f"Flattening keys in tensordict causes keys [{flat!r}] to collide: "
                f"two leaves become {flat!r} with separator {separator!r}"
            )
        seen.add(flat)


def _flat_keys(td: Any, prefix: str, separator: str, is_leaf: Any) -> Iterator[str]:
    """The joined keys of ``flat_into`` in its order, repeats included (to name a collision)."""
    for key, value in td._items_str():
        if type(value) is _Tensor or not is_node(value) or (is_leaf is not None and is_leaf(type(value))):
            yield prefix + key
        else:
            yield from _flat_keys(value, prefix + key + separator, separator, is_leaf)


def copy_nodes(td: TensorDictBase, values: bool = False) -> TensorDictBase:
    """New in-memory node objects at every level over the same leaves (``clone(recurse=False)``).

    ``values``: non-tensor leaves hold their values in new ``dict``/``list``/``tuple`` containers (as
    tensordict's ``clone(recurse=False)``); else they share them.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"n": {"b": torch.zeros(1)}}, batch_size=[1])
        >>> copy = copy_nodes(td)
        >>> copy["n"] is td["n"], copy["n", "b"] is td["n", "b"]
        (False, True)
    """
    out = {}
    for key, value in td._items_str():
        if type(value) is _Tensor or not is_td(value):
            out[key] = value
        elif type(value) in NON_TENSOR_TYPES:
            out[key] = value._copy_tree(values)
        elif type(value) in REWRAP_TYPES:  # a TensorClass held in the tree stays one (as tensordict's copy)
            out[key] = value._wrap_like(copy_nodes(unwrapped(value), values))
        else:
            out[key] = copy_nodes(value, values)
    return _result(td, out, None, NO_DEFAULT, NO_DEFAULT)  # type: ignore[no-any-return]  # built with _dense_cls


def source_leaves(
    source: Any, what: str, enter: Callable[[tuple[str, ...], Any], bool] | None = None, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, value)`` for the leaves of a source: a TensorDict or a mapping (``update``'s argument).

    Args:
        source: a TensorDict, a (nested) mapping whose keys may be nested tuple keys, or None.
        what: the operation, for the error on a source that is not a mapping.
        enter: called with ``(path, value)`` for each nested mapping or TensorDict: False lists it
            as a value instead of walking into it (default: walk into every one).
        prefix: the path of ``source``.

    A plain user mapping is walked here too: it is on its way into a TensorDict.
    """
    out: list[tuple[tuple[str, ...], Any]] = []
    _source(source, what, enter, prefix, out)
    return out


def _source(
    source: Any, what: str, enter: Any, prefix: tuple[str, ...], out: list[tuple[tuple[str, ...], Any]]
) -> None:
    for key, value in source_items(source, what):
        path = (*prefix, key) if type(key) is str else (*prefix, *key_tuple(key))
        nested = (is_td(value) and type(value) not in NON_TENSOR_TYPES) or isinstance(value, Mapping)
        if nested and (enter is None or enter(path, value)):  # a non-tensor leaf is a leaf, never walked into
            _source(value, what, enter, path, out)
        else:
            out.append((path, value))


def paired_leaves(target: Any, source: Any, what: str) -> list[tuple[tuple[str, ...], str, Any, Any, Any]]:
    """``(prefix, key, entry, value, source_node)`` for every leaf of ``source``, with ``target``'s entry there.

    The two trees are walked in step (writes of a source into a target: ``td[idx] = source``).

    Args:
        target: the tree written into.
        source: a TensorDict or a nested mapping (keys of this level: strings).
        what: the operation, for the error on a source that is not a mapping.

    ``entry`` is MISSING where ``target`` has no such key (or the node above is missing). A nested
    source node is walked into when the target has a node there or nothing; where the target has a
    leaf, the source node is listed as the ``value`` (the caller refuses or handles it).
    ``source_node`` is the source node holding ``value``.
    """
    out: list[tuple[tuple[str, ...], str, Any, Any, Any]] = []
    _paired(target, source, what, (), out)
    return out


def _paired(target: Any, source: Any, what: str, prefix: tuple[str, ...], out: list[Any]) -> None:
    for key, value in source_items(source, what):
        entry = MISSING if target is None else target._get_str(key, MISSING)
        if (
            type(value) is not _Tensor
            and (is_node(value) or isinstance(value, Mapping))
            and (entry is MISSING or (type(entry) is not _Tensor and is_node(entry)))
        ):
            _paired(None if entry is MISSING else entry, value, what, (*prefix, key), out)
        else:
            out.append((prefix, key, entry, value, source))


def named_leaves(
    td: TensorDictBase,
    *,
    include_nested: bool = True,
    is_leaf: Callable[[type], bool] | None = None,
) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, leaf)`` for every leaf, depth first, in insertion order.

    Nested collections count as leaves when ``include_nested`` is False or ``is_leaf`` says so;
    non-tensor leaves are skipped unless ``is_leaf`` says so (:func:`named_entries` with
    ``leaves_only``).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "n": {"b": torch.zeros(1)}}, batch_size=[1])
        >>> [path for path, _ in named_leaves(td)]
        [('a',), ('n', 'b')]
    """
    out: list[tuple[tuple[str, ...], Any]] = []
    _entries(td, (), include_nested, include_nested, is_leaf, False, out)
    return out


def leaf_metas(td: TensorDictBase, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, meta)`` for every leaf (tensor or non-tensor), without reading tensor data.

    ``meta`` is what the backend's ``_meta_items`` gives: the leaf itself when it is in memory (a tensor
    carries its shape and dtype), else its ``LeafMeta`` (see ``_ops/meta.py``).
    """
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in td._meta_items():
        if is_node(value):
            out.extend(leaf_metas(value, (*prefix, key)))
        else:
            out.append(((*prefix, key), value))
    return out


def flat_leaves(td: TensorDictBase, out: list[Any] | None = None, follow: bool = False) -> list[Any]:
    """All leaves in walk order (the order :func:`from_leaves` consumes).

    With ``follow`` (batch operations), each non-tensor leaf and each ``UnbatchedTensor`` contributes
    its positions tensor.
    """
    if out is None:
        out = []
        if follow and type(td) in NON_TENSOR_TYPES:  # a non-tensor leaf on its own
            out.append(td._positions())  # type: ignore[attr-defined]  # a non-tensor leaf
            return out
    for value in td._values_str():
        if type(value) is _Tensor:
            out.append(value)
        elif not is_td(value):
            out.append(value._positions() if follow and isinstance(value, UnbatchedTensor) else value)
        elif follow and type(value) in NON_TENSOR_TYPES:
            out.append(value._positions())
        else:
            flat_leaves(value, out, follow)
    return out


def write_back(td: TensorDictBase, leaves: list[Any]) -> None:
    """Store ``leaves`` (``flat_leaves(td)``, modified in place) back into ``td``'s storage.

    For a backend whose reads are copies (HDF5, Redis): an in-place op on the leaves it read changed
    copies only. The in-place engines (``map_inplace``, ``map_dense_``, ``zero_``) call the hook
    ``td._write_back(leaves)`` after writing, which the stored layer (``CopyOnRead``) answers with this;
    nodes are walked by their metadata, so nothing is read again.
    """
    _write_back(td, iter(leaves))


def _write_back(td: Any, it: Iterator[Any]) -> None:
    for key, value in td._meta_items():
        if is_td(value):
            if type(value) not in NON_TENSOR_TYPES:  # (non-tensor leaves give no leaf to flat_leaves)
                _write_back(value, it)
            continue
        leaf = next(it)
        if isinstance(leaf, _Tensor):
            td._set_str(key, leaf, inplace=True, validated=True)


def flat_leaves_like(
    other: TensorDictBase,
    like: TensorDictBase,
    out: list[Any] | None = None,
    prefix: tuple[str, ...] = (),
    nodes: bool = False,
) -> list[Any]:
    """Leaves of ``other`` in the walk order of ``like``; key sets must match exactly.

    With ``nodes``, non-tensor leaves are included as they are (for stack and cat).
    """
    if out is None:
        out = []
    if len(other._keys_str()) != len(like._keys_str()):
        raise key_sets_differ(prefix, like._keys_str(), other._keys_str())
    for key, value in like._items_str():
        theirs = other._get_str(key, MISSING)
        if theirs is MISSING:
            raise key_sets_differ(prefix, like._keys_str(), other._keys_str())
        if is_td(value):
            if not is_td(theirs):
                raise key_sets_differ((*prefix, key), value._keys_str(), ())
            if nodes and type(value) in NON_TENSOR_TYPES:
                if type(theirs) not in NON_TENSOR_TYPES:
                    raise key_sets_differ((*prefix, key), (), theirs._keys_str())
                out.append(theirs)
                continue
            flat_leaves_like(theirs, value, out, (*prefix, key), nodes)
        elif is_node(theirs):  # a leaf here, a node there
            raise key_sets_differ((*prefix, key), (), theirs._keys_str())
        else:
            out.append(theirs)
    return out


def index_dense(td: Any, index: Any, batch_size: torch.Size) -> Any:
    """``leaf[index]`` per leaf of a tree of in-memory nodes (no dim names) and plain tensors, or None.

    The lean walk behind ``td[index]``'s fast path: no key notes, no checks; None as soon as an entry
    is anything else (the caller then takes the general path). ``batch_size`` is the root's new batch
    size; nested nodes keep their dims past the root's.
    """
    dense = type(td)
    out: dict[str, Any] = {}
    for key, value in td._tensordict.items():  # a loop, not a comprehension: cheaper for a few leaves
        if type(value) is _Tensor:
            out[key] = value[index]
        elif type(value) is dense and value._names is None:
            vbs = value._batch_size  # (the common case, the same batch size, builds no Size)
            sub = index_dense(
                value, index, batch_size if vbs == td._batch_size else batch_size + vbs[len(td._batch_size) :]
            )
            if sub is None:
                return None
            out[key] = sub
        else:
            return None
    return dense._new_unsafe(out, batch_size, td._device)


def dense_columns(dicts: list[dict[str, Any]], dense: type) -> list[list[Any]] | None:
    """The leaves of several in-memory trees grouped by key path, in the first one's walk order.

    ``dicts`` are the trees' storage dicts (``_tensordict``); ``dense`` is the in-memory class. The
    fast path of stack and cat: None as soon as an entry is neither a tensor nor a ``dense`` node
    (the caller then takes :func:`flat_leaves_like`).

    Raises:
        KeyError: when the trees' key sets differ (naming the key path).
    """
    cols: list[list[Any]] = []
    return cols if _columns(dicts, dense, cols, ()) else None


def _columns(dicts: list[dict[str, Any]], dense: type, cols: list[list[Any]], prefix: tuple[str, ...]) -> bool:
    first = dicts[0]
    if sum(map(len, dicts)) != len(first) * len(dicts):  # with every key of the first found below: equal sets
        raise _differ(dicts, prefix)
    for key, value in first.items():
        try:
            col = [d[key] for d in dicts]
        except KeyError:
            raise _differ(dicts, prefix) from None
        if type(value) is _Tensor:
            cols.append(col)
        elif type(value) is dense:
            subs = [v._tensordict for v in col if type(v) is dense]
            if len(subs) != len(col) or not _columns(subs, dense, cols, (*prefix, key)):
                return False
        else:
            return False
    return True


def _differ(dicts: list[dict[str, Any]], prefix: tuple[str, ...]) -> KeyError:
    other = next(d for d in dicts if d.keys() != dicts[0].keys())
    return key_sets_differ(prefix, dicts[0].keys(), other.keys())


def from_leaves(
    spec: TensorDictBase,
    leaves: Any,
    batch_size: torch.Size | None = None,
    device: Any = NO_DEFAULT,
    names: Any = None,
    follow: bool = False,
    copy_values: bool = False,
    keep_non_tensor: bool = False,
) -> TensorDictBase:
    """Rebuild an in-memory TensorDict shaped like ``spec`` from leaves in walk order.

    Args:
        spec: the tree whose structure (keys, nesting, batch sizes) the result takes.
        leaves: an iterable of new leaves, in :func:`flat_leaves` order.
        batch_size: the new batch size of the root (nested nodes keep their extra dims).
        device: the result's device; defaults to ``spec.device``.
        names: the root's dim names when ``batch_size`` is given (else ``spec``'s are kept).
        follow: the leaves came from ``flat_leaves(..., follow=True)`` (non-tensor positions included).
        copy_values: non-tensor leaves hold deep copies of their values (``clone()``).
        keep_non_tensor: the non-tensor leaves of in-memory nodes are ``spec``'s own leaf objects
            (``to_tensordict``, as tensordict's), and the typed wrappers held in them give their TensorDicts
            (rebuilt as TensorDicts all the way down); a lazy stack's are built as without it.
    """
    return _rebuild(  # type: ignore[no-any-return]  # _dense_cls
        spec,
        iter(leaves),
        batch_size,
        device,
        follow,
        NO_DEFAULT if names is None else tuple(names),
        copy_values,
        keep_non_tensor and type(spec) is spec._dense_cls,
    )


def _rebuild(
    spec: Any,
    it: Iterator[Any],
    batch_size: Any,
    device: Any,
    follow: bool,
    names: Any = NO_DEFAULT,
    copy: bool = False,
    keep: bool = False,
) -> Any:
    if type(spec) in NON_TENSOR_TYPES:
        if follow:
            leaf = next(it, None)
            if leaf is not None:
                out = leaf if type(leaf) in NON_TENSOR_TYPES else spec._from_positions(leaf)
                return out._named(_moved_names(spec, out, names))
        return (
            spec._follow(batch_size, device, names)._copied(True) if copy else spec._follow(batch_size, device, names)
        )
    out = {}
    nd = spec.batch_dims
    for key, value in spec._items_str():
        if type(value) is _Tensor:
            out[key] = next(it)
        elif is_td(value):
            if follow and type(value) in NON_TENSOR_TYPES:
                leaf = next(it)  # positions, or an already built non-tensor leaf (stack, cat)
                moved = leaf if type(leaf) in NON_TENSOR_TYPES else value._from_positions(leaf)
                out[key] = moved._named(_moved_names(value, moved, sub_names(names, batch_size, value, nd)))
                continue
            if keep and type(value) in NON_TENSOR_TYPES:  # the leaf itself (to_tensordict), named as its node
                out[key] = _kept_leaf(value, spec._maybe_names(), nd)
                continue
            if keep and type(value) in REWRAP_TYPES:  # to_tensordict: a wrapper gives its TensorDict, as tensordict
                value = unwrapped(value)
            sub_bs = None if batch_size is None else torch.Size(batch_size + value.batch_size[nd:])
            sub_keep = keep and type(value) is value._dense_cls
            node = _rebuild(value, it, sub_bs, device, follow, sub_names(names, batch_size, value, nd), copy, sub_keep)
            out[key] = value._wrap_like(node) if type(value) in REWRAP_TYPES else node
        elif follow and isinstance(value, UnbatchedTensor):  # positions, or the leaf itself (stack, cat)
            leaf = next(it)
            out[key] = leaf if isinstance(leaf, UnbatchedTensor) else value._from_positions(leaf)
        else:
            out[key] = next(it)
    return spec._dense_cls._new_unsafe(
        out,
        spec.batch_size if batch_size is None else batch_size,
        spec.device if device is NO_DEFAULT else device,
        spec._maybe_names() if batch_size is None else None if names is NO_DEFAULT else names,
    )


def _result(td: Any, out: dict[str, Any], batch_size: Any, names: Any, device: Any) -> Any:
    """The in-memory node for ``out``: names kept only when the batch size is."""
    if batch_size is None and names is NO_DEFAULT and device is NO_DEFAULT and type(td) is td._dense_cls:
        return td._new_node(out)  # the in-memory node's own copy of its batch facts (no property reads)
    if type(td) in NON_TENSOR_TYPES:
        return td._follow(batch_size, device, names)
    if batch_size is None:
        batch_size = td.batch_size
        if names is NO_DEFAULT:
            names = td._maybe_names()
    elif names is NO_DEFAULT:
        names = None
    return td._dense_cls._new_unsafe(out, batch_size, td.device if device is NO_DEFAULT else device, names)


def sub_names(names: Any, batch_size: Any, value: Any, nd: int) -> Any:
    """A nested node's names when its parent's batch changes: the parent's new names, then its own extra dims'.

    ``names`` is the parent's new names (NO_DEFAULT or None: unnamed; then so is the node).
    """
    if names is NO_DEFAULT or names is None or batch_size is None:
        return NO_DEFAULT
    own = value._maybe_names()
    extra = len(value.batch_size) - nd
    return (*names, *(own[nd:] if own is not None else (None,) * extra))


def check_leaves(td: TensorDictBase, prefix: tuple[str, ...] = ()) -> None:
    """Raise if a leaf does not start with its node's batch size (results of user functions)."""
    bs = td.batch_size
    n = len(bs)
    for key, value in td._items_str():
        if type(value) is _Tensor:  # the common case first
            try:
                shape = value.shape
            except RuntimeError:  # a strided nested tensor
                shape = ragged.shape(value)
            if shape[:n] != bs:
                raise batch_mismatch(bs, (*prefix, key), shape)
            continue
        _check_one(value, bs, (*prefix, key))


def first_leaf(td: TensorDictBase) -> Any:
    """The first leaf in walk order, or None for a tree without leaves."""
    for value in td._values_str():
        if type(value) is _Tensor or not is_td(value):
            return value
        found = first_leaf(value)
        if found is not None:
            return found
    return None


def apply_leaves(
    td: TensorDictBase,
    fn: Callable[..., Any],
    *others: TensorDictBase,
    batch_size: Any = None,
    names: Any = NO_DEFAULT,
    device: Any = NO_DEFAULT,
    inplace: bool = False,
    is_leaf: Callable[[type], bool] | None = None,
    filter_empty: bool = False,
    default: Any = NO_DEFAULT,
    what: str = "applying a function",
    check: bool = False,
    follow: bool = False,
    exact: bool = False,
    named: Callable[[tuple[str, ...]], Any] | None = None,
    call_on_unbatched: bool = False,
) -> TensorDictBase:
    """Map ``fn(leaf, *other_leaves)`` over every leaf and build the result (:func:`map_leaves`, keyed).

    Args:
        td: the source tree.
        fn: called on each leaf with the matching leaves of ``others``; ``None`` drops the key.
        *others: trees providing extra arguments, matched by key.
        batch_size: batch size of the result root; nested nodes keep the dims past the root's.
        names: dim names of the result (default: kept when ``batch_size`` is unchanged).
        device: device of the result (default: the source's).
        inplace: write each result back into ``td`` (``copy_`` into the existing leaf).
        is_leaf: predicate on a value's type: True makes a nested collection a leaf.
        filter_empty: drop nested nodes that end up with no keys.
        default: value passed for keys missing from ``others`` (else KeyError).
        what: text used in the error note (``while <what> at key <path>``).
        check: refuse results whose leading dims differ from their node's batch size (user functions).
        follow: a batch operation: non-tensor leaves follow ``fn`` (applied to their positions).
        exact: ``others`` must hold exactly ``td``'s keys (library ops): their non-tensor leaves meet
            through ``_binary``, and two in-memory trees of tensors take the fast branch, one
            comprehension (``fn`` runs again if it raised there, which only pure functions may).
        named: turns a leaf's path into a key passed first to ``fn`` (``fn(key, leaf, *other_leaves)``).
        call_on_unbatched: with a new ``batch_size``, call ``fn`` on ``UnbatchedTensor`` leaves too (else
            they keep their data and take the new batch size).

    Returns:
        the new tree, or ``td`` itself when ``inplace``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> apply_leaves(td, lambda x, y: x + y, td)["a"]
        tensor([2., 2.])
    """
    if batch_size is not None and type(batch_size) is not torch.Size:
        batch_size = torch.Size(batch_size)
    out: TensorDictBase = map_leaves(
        td,
        fn,
        NO_DEFAULT,
        what,
        batch_size,
        names,
        device,
        follow,
        others,
        inplace,
        is_leaf,
        filter_empty,
        default,
        check,
        exact,
        (),
        named,
        call_on_unbatched,
    )
    return out


def map_leaves(
    td: Any,
    fn: Callable[..., Any],
    other: Any = NO_DEFAULT,
    what: str = "mapping",
    batch_size: torch.Size | None = None,
    names: Any = NO_DEFAULT,
    device: Any = NO_DEFAULT,
    follow: bool = False,
    others: Any = (),
    inplace: bool = False,
    is_leaf: Any = None,
    filter_empty: bool = False,
    default: Any = NO_DEFAULT,
    check: bool = False,
    exact: bool = True,
    prefix: tuple[str, ...] = (),
    named: Any = None,
    call_on_unbatched: bool = False,
) -> TensorDictBase:
    """THE mapping engine: ``fn(leaf, *other_leaves)`` per leaf; library ops call it with one ``other``.

    :func:`apply_leaves` (its keyed form) describes every argument. Tensor leaves of unary maps and
    of binary library ops stay in the loop here; the rest goes through ``_entry``.
    """
    if other is not NO_DEFAULT:
        others = (other,)
    if follow and type(td) in NON_TENSOR_TYPES:  # a batch op moves a non-tensor leaf's positions
        return _moved_non_tensor(td, fn, what, names)  # type: ignore[no-any-return]  # a non-tensor leaf
    one = None  # a binary library op (add_td...): its tensor leaves skip the general branch's lists
    if others and exact:
        if len(others) == 1 and not inplace and not check:
            one = others[0]
            data = tensors_only(td)
            if data is not None and type(one) is type(td) and one._tensordict.keys() == data.keys():
                one_data = one._tensordict
                try:  # the fast branch: no per-key method calls (a unary map gains nothing from it)
                    out = {key: fn(value, one_data[key]) for key, value in data.items()}
                except Exception:  # fn runs again below, which raises with the key path
                    pass
                else:
                    if batch_size is None and names is NO_DEFAULT and device is NO_DEFAULT:
                        return td._new_node(out)  # type: ignore[no-any-return]  # an in-memory TensorDict
                    return _result(td, out, batch_size, names, device)  # type: ignore[no-any-return]
        _same_key_count(td, others, prefix)
    out = {}
    bs: Any = None
    b0 = nd = -1
    if check:
        bs = td.batch_size if batch_size is None else batch_size
        nd = len(bs)
        b0 = bs[0] if nd == 1 else -1  # shape[0] == b0 stands for shape[:1] == bs (cheaper)
    lean = len(others) == 0 and not inplace and named is None  # (len: compile cannot trace "not" on a tuple)
    for key, value in td._items_str():
        if lean and type(value) is _Tensor:  # the common case, kept lean
            try:
                result = fn(value)
            except Exception as err:
                add_path_note(err, what, (*prefix, key))
                raise
            if result is not None:
                try:  # (a strided nested tensor has no .shape: _check_one reads its sizes)
                    fits = not check or (
                        type(result) is _Tensor
                        and (shape[0] == b0 if b0 >= 0 and (shape := result.shape) else result.shape[:nd] == bs)
                    )
                except RuntimeError:
                    fits = False
                if not fits:
                    _check_one(result, bs, (*prefix, key))
                out[key] = result
            continue
        if one is not None:
            theirs = one._get_str(key, MISSING)
            if theirs is MISSING:
                raise key_sets_differ(prefix, td._keys_str(), one._keys_str())
            if type(value) is _Tensor:
                if type(theirs) is not _Tensor and is_node(theirs):  # a leaf here, a node there
                    raise key_sets_differ((*prefix, key), (), theirs._keys_str())
                try:
                    result = fn(value, theirs)
                except Exception as err:
                    add_path_note(err, what, (*prefix, key))
                    raise
                if result is not None:
                    out[key] = result
                continue
            subs: Any = (theirs,)
        else:
            subs = [_other_entry(o, td, key, default, prefix, exact) for o in others] if others else ()
        result = _entry(
            td,
            key,
            value,
            subs,
            fn,
            what,
            batch_size,
            names,
            device,
            follow,
            inplace,
            is_leaf,
            filter_empty,
            default,
            check,
            exact,
            prefix,
            named,
            call_on_unbatched,
        )
        if result is not _DROP:
            out[key] = result
    if inplace:
        return td  # type: ignore[no-any-return]  # the source itself
    return _result(td, out, batch_size, names, device)  # type: ignore[no-any-return]  # built with _dense_cls


def _moved_non_tensor(leaf: Any, fn: Callable[..., Any], what: str, names: Any) -> Any:
    """A non-tensor leaf after the batch op ``what`` (``fn`` applied to its positions; see NON_TENSOR_FOLLOW).

    ``names``: its new dim names (NO_DEFAULT: kept when its batch size is).
    """
    how = NON_TENSOR_FOLLOW.get(what)
    positions = fn(leaf._positions())
    out = leaf._from_positions(positions) if how is None else leaf._follow_op(positions, how)
    return out._named(_moved_names(leaf, out, names))


def unwrapped(value: Any) -> Any:
    """The backend of a typed wrapper (TensorClass, TypedTensorDict), through wrappers of wrappers."""
    while type(value) in REWRAP_TYPES:
        value = getattr(value, value._wrapped_attr)
    return value


def _kept_leaf(leaf: Any, names: Any, nd: int) -> Any:
    """``leaf`` as ``to_tensordict`` keeps it: itself, or a copy named as its node when it is not (as tensordict)."""
    if names is None:
        return leaf
    own = leaf._maybe_names()
    wanted = (*names, *(own[nd:] if own is not None else (None,) * (leaf.batch_dims - nd)))
    return leaf if own == wanted else leaf._follow(None, NO_DEFAULT, wanted)


def _moved_names(leaf: Any, out: Any, names: Any) -> Any:
    """The names of ``out``, ``leaf`` after a batch op: ``names``, or (NO_DEFAULT) the leaf's if its batch is kept.

    An unnamed leaf stays unnamed (a stack made of a list in a named TensorDict, as tensordict's).
    """
    own = leaf._maybe_names()
    if names is not NO_DEFAULT:
        return names if own is not None else None
    return own if out.batch_size == leaf.batch_size else None


def _same_key_count(td: Any, others: Any, prefix: tuple[str, ...]) -> None:
    """Exact maps: each other tree is a node with as many keys (which keys: checked per key)."""
    keys = td._keys_str()
    for tree in others:
        if not is_td(tree):  # a node here, a leaf there
            raise key_sets_differ(prefix, keys, ())
        if len(tree._keys_str()) != len(keys):
            raise key_sets_differ(prefix, keys, tree._keys_str())


_DROP: Any = object()  # ``_entry``'s "no key in the result"


def _entry(
    td: Any,
    key: str,
    value: Any,
    subs: Any,
    fn: Any,
    what: str,
    batch_size: Any,
    names: Any,
    device: Any,
    follow: bool,
    inplace: bool,
    is_leaf: Any,
    filter_empty: bool,
    default: Any,
    check: bool,
    exact: bool,
    prefix: tuple[str, ...],
    named: Any,
    call_on_unbatched: bool,
) -> Any:
    """One entry of :func:`map_leaves` off its lean paths: a node, another leaf type, others, in place."""
    result: Any
    if type(value) is not _Tensor and is_td(value) and (is_leaf is None or not is_leaf(type(value))):
        if exact and subs and type(value) in NON_TENSOR_TYPES:  # comparisons compare values; others keep them
            return value._binary(fn, *subs)
        if batch_size is None:  # the common case (apply, arithmetic): every node keeps its batch facts
            sub_bs, sub = None, NO_DEFAULT
        else:
            nd = td.batch_dims
            sub_bs = torch.Size(batch_size + value.batch_size[nd:])
            sub = sub_names(names, batch_size, value, nd)
        stacked = stacked_members(value) if batch_size is None and not follow else None
        if stacked is not None and value._ragged():  # a lazy stack whose leaves cannot stack: member by member
            dim, members = stacked
            split = [_member_args(o, dim, len(members), default) for o in subs]
            result = value._restack(
                [
                    map_leaves(
                        m,
                        fn,
                        NO_DEFAULT,
                        what,
                        None,
                        NO_DEFAULT,
                        device,
                        follow,
                        [s[i] for s in split],
                        inplace,
                        is_leaf,
                        filter_empty,
                        default,
                        check,
                        exact,
                        (*prefix, key),
                        named,
                        call_on_unbatched,
                    )
                    for i, m in enumerate(members)
                ]
            )
        else:
            result = map_leaves(
                value,
                fn,
                NO_DEFAULT,
                what,
                sub_bs,
                sub,
                device,
                follow,
                subs,
                inplace,
                is_leaf,
                filter_empty,
                default,
                check,
                exact,
                (*prefix, key),
                named,
                call_on_unbatched,
            )
        if filter_empty and not inplace and not len(result._keys_str()) and len(value._keys_str()):
            return _DROP
        if not inplace and type(value) in REWRAP_TYPES:
            result = value._wrap_like(result)
    else:
        for sub in subs:  # a leaf here, a node in another tree: a key mismatch, said as one
            if is_node(sub) and (is_leaf is None or not is_leaf(type(sub))):
                raise key_sets_differ((*prefix, key), (), sub._keys_str())
        try:
            if (follow or batch_size is not None) and isinstance(value, UnbatchedTensor) and not call_on_unbatched:
                # a batch op (or a map that changes the batch size: a reduction) leaves its data alone
                result = (
                    value._from_positions(fn(value._positions(), *subs))
                    if follow
                    else value._with_batch_size(batch_size)
                )
            elif named is not None:
                result = fn(named((*prefix, key)), value, *subs)
            else:
                result = fn(value, *subs)
        except Exception as err:
            add_path_note(err, what, (*prefix, key))
            raise
        if result is None:
            return _DROP
        if call_on_unbatched and batch_size is not None and isinstance(result, UnbatchedTensor):
            result = result._with_batch_size(batch_size)
        if check:
            _check_one(result, td.batch_size if batch_size is None else batch_size, (*prefix, key))
        if inplace:
            if result is not value:
                td._set_str(key, result, inplace=True, validated=True)
            else:  # (a storage hook: the leaf may be a copy read from storage)
                td._write_back_leaf(key, result)
            return _DROP
    return result


def _member_args(other: Any, dim: int, n: int, default: Any) -> list[Any]:
    """Another tree's entry split like a lazy stack's members (its own members, or its slices along ``dim``)."""
    if other is default or not is_td(other):
        return [other] * n
    stacked = stacked_members(other)
    if stacked is not None and stacked[0] == dim and len(stacked[1]) == n:
        return list(stacked[1])
    return list(other.unbind(dim))


def _check_one(result: Any, bs: torch.Size, path: tuple[str, ...]) -> None:
    """A user function's result must start with its node's batch size (an unbatched one need not)."""
    if isinstance(result, UnbatchedTensor):
        return
    shape = result.batch_size if is_td(result) else leaf_shape(result) if isinstance(result, _Tensor) else None
    if shape is not None and shape[: len(bs)] != bs:
        raise batch_mismatch(bs, path, shape)
    if is_td(result):
        check_leaves(result, path)


def _other_entry(other: Any, td: Any, key: str, default: Any, prefix: tuple[str, ...], exact: bool) -> Any:
    if other is default:
        return default
    if not is_td(other):  # a leaf in the other tree where this one has a node
        raise key_sets_differ(prefix, (key,), ())
    value = other._get_str(key, MISSING)
    if value is MISSING:
        if exact:
            raise key_sets_differ(prefix, td._keys_str(), other._keys_str())
        if default is NO_DEFAULT:
            raise missing_key((*prefix, key), other._keys_str())
        return default
    return value
