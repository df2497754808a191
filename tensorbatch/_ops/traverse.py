"""The one walk over a TensorDict tree.

Every leaf-wise feature goes through these functions. They are written by hand over the
backends' ``_items_str`` (no pytree flatten on the hot path). Exceptions raised by the leaf
function keep their type and gain the key path as a note.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from .._errors import add_path_note, batch_mismatch, key_sets_differ, missing_key, not_a_mapping

if TYPE_CHECKING:
    from ..base import TensorDictBase

_Tensor = torch.Tensor


class _Sentinel(enum.Enum):
    """Markers for 'no value'. Enum members, so torch.compile can treat them as constants."""

    NO_DEFAULT = "NO_DEFAULT"  # "no default given": lookups raise KeyError
    MISSING = "MISSING"  # returned by lookups called with default=MISSING for an absent key

    def __repr__(self) -> str:
        return self.value


NO_DEFAULT: Any = _Sentinel.NO_DEFAULT
MISSING: Any = _Sentinel.MISSING


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


def is_td(value: Any) -> bool:
    """True for tensor collections (TensorDictBase and its wrappers): a set lookup, no isinstance."""
    return type(value) in COLLECTION_TYPES


def is_node(value: Any) -> bool:
    """True for a tensor collection with keys: a TensorDict or wrapper, not a non-tensor leaf."""
    return type(value) in COLLECTION_TYPES and type(value) not in NON_TENSOR_TYPES


def is_non_tensor(value: Any) -> bool:
    """True for non-tensor leaves (``NonTensorData``, ``NonTensorStack``)."""
    return type(value) in NON_TENSOR_TYPES


def is_non_tensor_type(cls: type) -> bool:
    """True for the non-tensor leaf classes (an ``is_leaf`` predicate)."""
    return cls in NON_TENSOR_TYPES


def value_of(leaf: Any) -> Any:
    """What a lookup returns: the value of a non-tensor leaf, anything else unchanged."""
    return leaf._value() if type(leaf) in NON_TENSOR_TYPES else leaf


def unfit_keys(source: dict[Any, Any], batch_size: torch.Size, device: torch.device | None) -> list[Any] | None:
    """The keys of ``source`` whose values need validation, or None when a key is not a string.

    The one batch-fit check of the constructors (TensorDict, TypedTensorDict, TensorClass): a plain
    tensor whose shape starts with ``batch_size`` (on ``device`` when one is set) is stored as it is;
    every other value is listed for full validation, which converts it or names the key in its error.
    """
    unfit = []
    n = len(batch_size)
    b0 = batch_size[0] if n == 1 else -1
    for key, value in source.items():
        if type(key) is not str:
            return None
        if type(value) is not _Tensor or (device is not None and value.device != device) or (
                # shape[0] == b0 is cheaper than shape[:1] == batch_size, for the usual single batch dim
                (not (shape := value.shape) or shape[0] != b0) if n == 1 else value.shape[:n] != batch_size):
            unfit.append(key)
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


def named_leaves(
    td: TensorDictBase, *, include_nested: bool = True, is_leaf: Callable[[type], bool] | None = None,
    prefix: tuple[str, ...] = (),
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Yield ``(path, leaf)`` for every leaf, depth first, in insertion order.

    Nested collections count as leaves when ``include_nested`` is False or ``is_leaf`` says so.
    """
    for key, value in td._items_str():
        path = (*prefix, key)
        if is_td(value) and (is_leaf is None or not is_leaf(type(value))):
            if include_nested:
                yield from named_leaves(value, include_nested=True, is_leaf=is_leaf, prefix=path)
            else:
                yield path, value
        else:
            yield path, value


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

    With ``follow`` (batch operations), each non-tensor leaf contributes its positions tensor.
    """
    if out is None:
        out = []
        if follow and type(td) in NON_TENSOR_TYPES:  # a non-tensor leaf on its own
            out.append(td._positions())  # type: ignore[attr-defined]  # a non-tensor leaf
            return out
    for value in td._values_str():
        if type(value) is _Tensor or not is_td(value):
            out.append(value)
        elif follow and type(value) in NON_TENSOR_TYPES:
            out.append(value._positions())
        else:
            flat_leaves(value, out, follow)
    return out


def flat_leaves_like(other: TensorDictBase, like: TensorDictBase, out: list[Any] | None = None,
                     prefix: tuple[str, ...] = (), nodes: bool = False) -> list[Any]:
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


def from_leaves(spec: TensorDictBase, leaves: Any, batch_size: torch.Size | None = None,
                device: Any = NO_DEFAULT, names: Any = None, follow: bool = False) -> TensorDictBase:
    """Rebuild an in-memory TensorDict shaped like ``spec`` from leaves in walk order.

    Args:
        spec: the tree whose structure (keys, nesting, batch sizes) the result takes.
        leaves: an iterable of new leaves, in :func:`flat_leaves` order.
        batch_size: the new batch size of the root (nested nodes keep their extra dims).
        device: the result's device; defaults to ``spec.device``.
        names: the root's dim names when ``batch_size`` is given (else ``spec``'s are kept).
        follow: the leaves came from ``flat_leaves(..., follow=True)`` (non-tensor positions included).
    """
    out = _rebuild(spec, iter(leaves), batch_size, device, follow)
    if batch_size is not None and names is not None:
        out._names = names
    return out  # type: ignore[no-any-return]  # _rebuild builds with the untyped _dense_cls


def _rebuild(spec: Any, it: Iterator[Any], batch_size: Any, device: Any, follow: bool) -> Any:
    if type(spec) in NON_TENSOR_TYPES:
        if follow:
            leaf = next(it, None)
            if leaf is not None:
                return leaf if type(leaf) in NON_TENSOR_TYPES else spec._from_positions(leaf)
        return spec._follow(batch_size, device)
    out = {}
    nd = spec.batch_dims
    for key, value in spec._items_str():
        if type(value) is not _Tensor and is_td(value):
            if follow and type(value) in NON_TENSOR_TYPES:
                leaf = next(it)  # positions, or an already built non-tensor leaf (stack, cat)
                out[key] = leaf if type(leaf) in NON_TENSOR_TYPES else value._from_positions(leaf)
                continue
            sub_bs = None if batch_size is None else torch.Size(batch_size + value.batch_size[nd:])
            node = _rebuild(value, it, sub_bs, device, follow)
            out[key] = value._wrap_like(node) if type(value) in REWRAP_TYPES else node
        else:
            out[key] = next(it)
    return spec._dense_cls._new_unsafe(
        out,
        spec.batch_size if batch_size is None else batch_size,
        spec.device if device is NO_DEFAULT else device,
        spec._maybe_names() if batch_size is None else None,
    )


def map_leaves(td: TensorDictBase, fn: Callable[..., Any], other: Any = NO_DEFAULT, what: str = "mapping",
               batch_size: torch.Size | None = None, names: Any = NO_DEFAULT, device: Any = NO_DEFAULT,
               prefix: tuple[str, ...] = (), follow: bool = False) -> TensorDictBase:
    """New tree with ``fn(leaf)`` (or ``fn(leaf, other_leaf)``) per leaf: the lean twin of apply_leaves.

    Args:
        td: the source tree.
        fn: the leaf function (never returns None here).
        other: an optional tree with exactly the same keys, whose leaves are passed second.
        what: text for the error note.
        batch_size: the root's new batch size (nested nodes keep their dims past the root's).
        names: the root's new dim names (default: kept when the batch size is, else dropped).
        device: the result's device (default: the source's).
        prefix: key path of ``td`` (for error notes).
        follow: a batch operation: non-tensor leaves follow ``fn`` (applied to their positions).
    """
    if follow and type(td) in NON_TENSOR_TYPES:
        return td._from_positions(fn(td._positions()))  # type: ignore[attr-defined, no-any-return]  # non-tensor leaf
    data = tensors_only(td) if other is not NO_DEFAULT else None
    if data is not None:  # two in-memory trees of tensors: one comprehension, no per-key method calls
        # (a unary map gains nothing from this: its loop below is as fast for a few leaves)
        other_data: dict[str, Any] | None = (
            other._tensordict if type(other) is type(td) else None)  # type: ignore[attr-defined]  # in-memory
        if other_data is not None and other_data.keys() == data.keys():
            try:  # (other's values may be anything: fn meets them as in the loop below)
                out = {key: fn(value, other_data[key]) for key, value in data.items()}
            except Exception:  # the loop below raises again, with the key path
                pass
            else:
                if batch_size is None and names is NO_DEFAULT and device is NO_DEFAULT:
                    return td._new_node(out)
                return _result(td, out, batch_size, names, device)  # type: ignore[no-any-return]  # _dense_cls
    out = {}
    nd = td.batch_dims
    if other is NO_DEFAULT:
        for key, value in td._items_str():
            if type(value) is _Tensor or not is_td(value):
                try:
                    out[key] = fn(value)
                except Exception as err:
                    add_path_note(err, what, (*prefix, key))
                    raise
            else:
                sub_bs = None if batch_size is None else torch.Size((*batch_size, *value.batch_size[nd:]))
                node = map_leaves(value, fn, NO_DEFAULT, what, sub_bs, NO_DEFAULT, device, (*prefix, key), follow)
                out[key] = value._wrap_like(node) if type(value) in REWRAP_TYPES else node
    else:
        keys = td._keys_str()
        if len(other._keys_str()) != len(keys):
            raise key_sets_differ(prefix, keys, other._keys_str())
        for key, value in td._items_str():
            theirs = other._get_str(key, MISSING)
            if theirs is MISSING:
                raise key_sets_differ(prefix, keys, other._keys_str())
            if type(value) is _Tensor or not is_td(value):
                if is_node(theirs):  # a leaf here, a node there
                    raise key_sets_differ((*prefix, key), (), theirs._keys_str())
                try:
                    out[key] = fn(value, theirs)
                except Exception as err:
                    add_path_note(err, what, (*prefix, key))
                    raise
            else:
                if not is_td(theirs):
                    raise key_sets_differ((*prefix, key), value._keys_str(), ())
                if type(value) in NON_TENSOR_TYPES:  # comparisons compare values; other ops keep them
                    out[key] = value._binary(fn, theirs)
                    continue
                sub_bs = None if batch_size is None else torch.Size((*batch_size, *value.batch_size[nd:]))
                node = map_leaves(value, fn, theirs, what, sub_bs, NO_DEFAULT, device, (*prefix, key))
                out[key] = value._wrap_like(node) if type(value) in REWRAP_TYPES else node
    return _result(td, out, batch_size, names, device)  # type: ignore[no-any-return]  # built with _dense_cls


def _result(td: Any, out: dict[str, Any], batch_size: Any, names: Any, device: Any) -> Any:
    """The in-memory node for ``out``: names kept only when the batch size is."""
    if type(td) in NON_TENSOR_TYPES:
        return td._follow(batch_size, device)
    if batch_size is None:
        batch_size = td.batch_size
        if names is NO_DEFAULT:
            names = td._maybe_names()
    elif names is NO_DEFAULT:
        names = None
    return td._dense_cls._new_unsafe(out, batch_size, td.device if device is NO_DEFAULT else device, names)


def check_leaves(td: TensorDictBase, prefix: tuple[str, ...] = ()) -> None:
    """Raise if a leaf does not start with its node's batch size (results of user functions)."""
    bs = td.batch_size
    n = len(bs)
    for key, value in td._items_str():
        if type(value) is _Tensor:  # the common case first
            if value.shape[:n] != bs:
                raise batch_mismatch(bs, (*prefix, key), value.shape)
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
) -> TensorDictBase:
    """Map ``fn(leaf, *other_leaves)`` over every leaf and build the result.

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

    Returns:
        the new tree, or ``td`` itself when ``inplace``.
    """
    if batch_size is not None and not isinstance(batch_size, torch.Size):
        batch_size = torch.Size(batch_size)
    out = _walk(td, fn, others, batch_size, names, device, inplace, is_leaf, filter_empty, default, what, (), check)
    return out  # type: ignore[no-any-return]  # td itself or a node built with _dense_cls


def _walk(td: Any, fn: Any, others: Any, batch_size: Any, names: Any, device: Any, inplace: bool,
          is_leaf: Any, filter_empty: bool, default: Any, what: str, prefix: tuple[str, ...],
          check: bool = False) -> Any:
    out = {}
    nd = td.batch_dims
    bs = td.batch_size if batch_size is None else batch_size
    b0 = bs[0] if len(bs) == 1 else -1  # shape[0] == b0 stands for shape[:1] == bs (cheaper)
    for key, value in td._items_str():
        if not others and type(value) is _Tensor and not inplace:  # the common case, kept lean
            try:
                result = fn(value)
            except Exception as err:
                add_path_note(err, what, (*prefix, key))
                raise
            if result is not None:
                if check and (type(result) is not _Tensor or not (
                        shape[0] == b0 if b0 >= 0 and (shape := result.shape) else result.shape[:nd] == bs)):
                    _check_one(result, bs, (*prefix, key))
                out[key] = result
            continue
        subs = [_other_entry(o, key, default, prefix) for o in others] if others else ()
        if type(value) is not _Tensor and is_td(value) and (is_leaf is None or not is_leaf(type(value))):
            sub_bs = None if batch_size is None else torch.Size(batch_size + value.batch_size[nd:])
            result = _walk(value, fn, subs, sub_bs, NO_DEFAULT, device, inplace, is_leaf,
                           filter_empty, default, what, (*prefix, key), check)
            if filter_empty and not inplace and not len(result._keys_str()) and len(value._keys_str()):
                continue
            if not inplace and type(value) in REWRAP_TYPES:
                result = value._wrap_like(result)
        else:
            for sub in subs:  # a leaf here, a node in another tree: a key mismatch, said as one
                if is_node(sub) and (is_leaf is None or not is_leaf(type(sub))):
                    raise key_sets_differ((*prefix, key), (), sub._keys_str())
            try:
                result = fn(value, *subs)
            except Exception as err:
                add_path_note(err, what, (*prefix, key))
                raise
            if result is None:
                continue
            if check:
                _check_one(result, bs, (*prefix, key))
            if inplace:
                if result is not value:
                    td._set_str(key, result, inplace=True, validated=True)
                continue
        out[key] = result
    if inplace:
        return td
    return _result(td, out, batch_size, names, device)


def _check_one(result: Any, bs: torch.Size, path: tuple[str, ...]) -> None:
    """A user function's result must start with its node's batch size."""
    shape = result.batch_size if is_td(result) else getattr(result, "shape", None)
    if shape is not None and shape[: len(bs)] != bs:
        raise batch_mismatch(bs, path, shape)
    if is_td(result):
        check_leaves(result, path)


def _other_entry(other: Any, key: str, default: Any, prefix: tuple[str, ...]) -> Any:
    if other is default:
        return default
    if not is_td(other):  # a leaf in the other tree where this one has a node
        raise key_sets_differ(prefix, (key,), ())
    value = other._get_str(key, MISSING)
    if value is MISSING:
        if default is NO_DEFAULT:
            raise missing_key((*prefix, key), other._keys_str())
        return default
    return value
