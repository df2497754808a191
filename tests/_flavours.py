"""The TensorDict flavours run by the conformance suite, and helpers to check their results.

Every factory returns a TensorDict (or a TensorClass) with the same logical content (see :func:`reference`):

    batch_size [3, 4]
    "a"                   float32 [3, 4, 5]   values in [0.5, 2)  (safe for log, sqrt, reciprocal)
    "b"                   int64   [3, 4]      values in [1, 10)   (safe as a divisor)
    "c"                   bool    [3, 4, 1]
    ("nested", "d")       float32 [3, 4, 2]   values in [0.5, 2)
    ("nested", "deep", "e") float64 [3, 4]    values in [0.5, 2)

but each builds it differently (views, permutations, stacks, ...). Factories take ``seed``
(default 0): ``factory(seed=1)`` gives a second operand with different values (``reference(1)``).
A flavour declares its
capabilities in ``caps``; tests call ``requires(flavour, cap)`` instead of branching on names, so
a new backend is one more line in ``FLAVOURS``::

    _param("memmap", make_memmap_td, add={"memmap"}, marks=...)
    _param("tensorclass_over_td", make_tc, add={"tensorclass"}, drop={"str_keys", "new_keys"})

Not every flavour is a TensorDictBase: the ``tensorclass_*`` flavours are TensorClass instances (a
TensorClass HAS-A TensorDict and forwards its API). A TensorClass refuses string keys in ``[]``
(``tc["a"]`` raises ValueError, as tensordict 0.15.3's tensorclass), so tests read and write keys
with ``get``/``set``; only the tests about string-key ``[]`` require ``str_keys``. The helpers below
accept any tensor collection and check that an operation on a TensorClass (or TypedTensorDict) gives
back the same class.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from backends.numpy_store import CopyingNumpyStore, NumpyStore

from tensorbatch import (
    LazyStackedTensorDict,
    TensorClass,
    TensorDict,
    TensorDictBase,
    TypedTensorDict,
    is_non_tensor,
    is_tensor_collection,
    lazy_stack,
)
from tensorbatch._delegation import WRAPPER_TYPES, unwrap
from tensorbatch._ops.meta import NODE, TENSOR
from tensorbatch.stored import StoredTensorDict

BATCH = torch.Size([3, 4])
LEAF_KEYS: tuple[tuple[str, ...], ...] = (("a",), ("b",), ("c",), ("nested", "d"), ("nested", "deep", "e"))
FLOAT_KEYS: tuple[tuple[str, ...], ...] = (("a",), ("nested", "d"), ("nested", "deep", "e"))
NESTED_KEYS: tuple[tuple[str, ...], ...] = (("nested", "d"), ("nested", "deep", "e"))  # all floats

# Capabilities every flavour has unless it drops them.
#   mapping_mutation  keys can be deleted, popped, renamed, replaced, and added under a nested node
#                     (set/del/pop/rename_key_/update)
#   new_keys          new top-level keys can be added (set/setitem/update/setdefault with a new key). A
#                     TensorClass holds its fields only: ``tc.set("f", x)`` raises AttributeError (as
#                     tensordict 0.15.3's tensorclass; its nested TensorDict fields take new keys)
#   str_keys          ``td["a"]``, ``td["nested", "d"]`` read and ``td["a"] = x`` writes a key (a missing
#                     key raises KeyError). A TensorClass is indexed along its batch dims only: a string
#                     (or tuple of strings) index raises ValueError, keys go through get/set (as in
#                     tensordict 0.15.3)
#   inplace           leaves can be written in place (zero_, copy_, set_, index assignment, apply_)
#   lock              lock_()/unlock_() are honoured
#   pickle            pickle round trip
#   state_dict        state_dict()/load_state_dict()
#   grad              leaves can require grad and be detached
#   uniform_members   a lazy stack's members hold exactly the keys the stack shows (indexing the stack
#                     dim hands out members, so their own extra keys would show)
#   pytree            registered with torch.utils._pytree (torch.vmap / torch.compile see through it);
#                     lazy stacks are not registered yet
#   stored_leaves     reading a leaf returns the stored tensor object: ``td.get("a") is td.get("a")``, a leaf
#                     read with get/getitem can be mutated in place and the TD sees it, leaves keep
#                     their identity through in-place writes, clone(False), select, update, ..., and
#                     shape ops (view, permute, ...) give views sharing the TD's storage. A lazy stack
#                     lacks it: reading a leaf stacks the members' leaves into a new tensor (as in
#                     tensordict 0.15.3); writes go through the TD API (set_, update_, td[idx] = ...).
#   whole_leaf_apply  apply/named_apply call fn once per leaf, on the whole leaf (a lazy stack calls
#                     it once per member, on the member's leaf, as tensordict 0.15.3 does)
#   fresh_index_nodes indexing and unbind give new TensorDict nodes (unlocked even when the source is
#                     locked); a lazy stack's index results keep its lock (its members along the stack
#                     dim, ``s[i] is member``; new members locked off it), as in tensordict 0.15.3
#   shared_select     select/exclude/detach give TensorDicts sharing the leaves' storage: in-place writes
#                     through them reach the source. A store whose reads are copies (HDF5) lacks it:
#                     those give in-memory copies (its nested nodes are views: use float_part)
#   index_views       ``td[1:3]`` is a view: writes through it (``set_``) reach the source. A TensorDictStore
#                     reads ``td[idx]`` at once into memory (one round trip for every leaf), as tensordict's does
#   batch_size_shrink batch_size can be set to fewer dims (the dropped dims become feature dims); a
#                     lazy stack cannot when its stack dim would become a feature dim
BASE_CAPS = frozenset(
    {
        "mapping_mutation",
        "new_keys",
        "str_keys",
        "inplace",
        "lock",
        "pickle",
        "state_dict",
        "grad",
        "stored_leaves",
        "whole_leaf_apply",
        "fresh_index_nodes",
        "batch_size_shrink",
        "pytree",
        "uniform_members",
        "shared_select",
        "index_views",
    }
)
# Facts some flavours add:
#   device            td.device is set (to cpu)
#   noncontiguous     leaves are not contiguous
#   view              leaves are views into a larger storage
#   memmap            leaves are MemoryMappedTensors (td.is_memmap())
#   lazy              the backend is a lazy stack
#   typed             a TypedTensorDict (a TensorDictBase subclass) over a backend
#   h5                the backend is a PersistentTensorDict (an HDF5 file)
#   tensorclass       a TensorClass over a backend: not a TensorDictBase; results of its operations are
#                     instances of the same class (re-wrapped)


@dataclass(frozen=True)
class Flavour:
    """One way of building the reference content; ``caps`` says what it supports."""

    name: str
    factory: Callable[..., Any]  # factory(seed=0): the reference content for that seed (TensorDict or TensorClass)
    caps: frozenset[str] = BASE_CAPS

    def __repr__(self) -> str:
        return f"Flavour({self.name})"


def requires(flavour: Flavour, cap: str) -> None:
    """Skip the calling test when ``flavour`` lacks capability ``cap``."""
    if cap not in flavour.caps:
        pytest.skip(f"flavour {flavour.name!r} lacks capability {cap!r}")


# ---------------------------------------------------------------------------- reference data
def reference(seed: int = 0) -> dict[tuple[str, ...], torch.Tensor]:
    """The logical content shared by every flavour: a fresh dict ``path -> tensor`` (batch [3, 4])."""
    g = torch.Generator().manual_seed(seed)

    def unit(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (torch.rand(*shape, generator=g, dtype=torch.float64) * 1.5 + 0.5).to(dtype)

    return {
        ("a",): unit(3, 4, 5),
        ("b",): torch.randint(1, 10, (3, 4), generator=g, dtype=torch.int64),
        ("c",): torch.rand(3, 4, 1, generator=g) > 0.5,
        ("nested", "d"): unit(3, 4, 2),
        ("nested", "deep", "e"): unit(3, 4, dtype=torch.float64),
    }


def _nest(leaves: Mapping[tuple[str, ...], torch.Tensor]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in leaves.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _mapped(fn: Callable[[torch.Tensor], torch.Tensor], seed: int) -> dict[tuple[str, ...], torch.Tensor]:
    return {path: fn(value) for path, value in reference(seed).items()}


def make_td(seed: int = 0) -> TensorDictBase:
    """Direct construction, nested TensorDicts built explicitly."""
    ref = reference(seed)
    deep = TensorDict({"e": ref["nested", "deep", "e"]}, batch_size=BATCH)
    nested = TensorDict({"d": ref["nested", "d"], "deep": deep}, batch_size=BATCH)
    return TensorDict({"a": ref["a",], "b": ref["b",], "c": ref["c",], "nested": nested}, batch_size=BATCH)


def make_nested_td(seed: int = 0) -> TensorDictBase:
    """A nested plain dict for the first levels, tuple-key assignment for the deepest leaf."""
    ref = reference(seed)
    td = TensorDict(
        {"a": ref["a",], "b": ref["b",], "c": ref["c",], "nested": {"d": ref["nested", "d"]}},
        batch_size=[3, 4],
    )
    td["nested", "deep", "e"] = ref["nested", "deep", "e"]
    return td


def make_sliced_td(seed: int = 0) -> TensorDictBase:
    """A [5, 6] TensorDict indexed with [1:4, 2:6]: leaves are strided views."""

    def embed(x: torch.Tensor) -> torch.Tensor:
        big = torch.zeros(5, 6, *x.shape[2:], dtype=x.dtype)
        big[1:4, 2:6] = x
        return big

    return TensorDict(_nest(_mapped(embed, seed)), batch_size=[5, 6])[1:4, 2:6]


def make_permuted_td(seed: int = 0) -> TensorDictBase:
    """Built at [4, 3], then ``permute(1, 0)``: leaves are non-contiguous."""
    leaves = _mapped(lambda x: x.transpose(0, 1).contiguous(), seed)
    return TensorDict(_nest(leaves), batch_size=[4, 3]).permute(1, 0)


def make_unsqueezed_td(seed: int = 0) -> TensorDictBase:
    """Built at [3, 1, 4], then ``squeeze(1)``."""
    return TensorDict(_nest(_mapped(lambda x: x.unsqueeze(1), seed)), batch_size=[3, 1, 4]).squeeze(1)


def make_stacked_td(seed: int = 0) -> TensorDictBase:
    """``torch.stack`` of three TensorDicts of batch [4]."""
    ref = reference(seed)
    rows = [TensorDict(_nest({p: v[i] for p, v in ref.items()}), batch_size=[4]) for i in range(3)]
    return torch.stack(rows, 0)


def make_cloned_td(seed: int = 0) -> TensorDictBase:
    """``clone()`` of a locked TensorDict, then unlocked."""
    locked = TensorDict(_nest(reference(seed)), batch_size=BATCH, lock=True)
    return locked.clone().unlock_()


def make_device_td(seed: int = 0) -> TensorDictBase:
    """Built with ``device="cpu"``."""
    return TensorDict(_nest(reference(seed)), batch_size=BATCH, device="cpu")


def make_lazy_stack0(seed: int = 0) -> TensorDictBase:
    """``lazy_stack`` of three TensorDicts of batch [4] along dim 0 (members kept apart)."""
    ref = reference(seed)
    rows = [TensorDict(_nest({p: v[i] for p, v in ref.items()}), batch_size=[4]) for i in range(3)]
    return lazy_stack(rows, 0)


def make_lazy_stack1(seed: int = 0) -> TensorDictBase:
    """``lazy_stack`` of four TensorDicts of batch [3] along dim 1."""
    ref = reference(seed)
    cols = [TensorDict(_nest({p: v[:, j] for p, v in ref.items()}), batch_size=[3]) for j in range(4)]
    return lazy_stack(cols, 1)


def make_lazy_exclusive(seed: int = 0) -> TensorDictBase:
    """A lazy stack whose members also hold keys of their own (hidden: only common keys show)."""
    ref = reference(seed)
    rows = []
    for i in range(3):
        row = TensorDict(_nest({p: v[i] for p, v in ref.items()}), batch_size=[4])
        row[f"only_{i}"] = torch.full((4,), float(i))
        row["nested", f"private_{i}"] = torch.zeros(4, i + 1)
        rows.append(row)
    return lazy_stack(rows, 0)


def make_lazy_nested(seed: int = 0) -> TensorDictBase:
    """A lazy stack of three lazy stacks of four 0-d TensorDicts (stack of stacks)."""
    ref = reference(seed)
    rows = [
        lazy_stack([TensorDict(_nest({p: v[i, j] for p, v in ref.items()}), batch_size=[]) for j in range(4)])
        for i in range(3)
    ]
    return lazy_stack(rows, 0)


def make_memmap_td(seed: int = 0) -> TensorDictBase:
    """Saved with ``memmap(folder)`` (leaves are MemoryMappedTensors of files in a temporary folder), then
    unlocked. The folder holds the device, so the result has ``device="cpu"``."""
    folder = tempfile.mkdtemp(prefix="tb-memmap-flavour-")
    atexit.register(shutil.rmtree, folder, True)
    return make_td(seed).memmap(os.path.join(folder, "td")).unlock_()


def make_numpy_store(seed: int = 0) -> TensorDictBase:
    """A :class:`~backends.numpy_store.NumpyStore` (tests/backends): a dict of numpy arrays implementing only
    the backend contract (tensorbatch/BACKENDS.md)."""
    return NumpyStore(_nest(reference(seed)), batch_size=BATCH)


def make_copying_numpy_store(seed: int = 0) -> TensorDictBase:
    """A :class:`~backends.numpy_store.CopyingNumpyStore`: a NumpyStore whose reads are copies (as h5py's)."""
    return CopyingNumpyStore(_nest(reference(seed)), batch_size=BATCH)


_H5_FOLDER: list[str] = []


def make_h5(seed: int = 0) -> TensorDictBase:
    """A :class:`~tensorbatch.persistent.PersistentTensorDict`: the reference content written to a new HDF5
    file (``from_dict``), open read-write. Reads are copies of the datasets."""
    return make_h5_from(make_td(seed))


def make_h5_view(seed: int = 0) -> TensorDictBase:
    """``ptd[1:4]`` of a PersistentTensorDict of batch [5, 4] whose rows 1 to 3 hold the reference content: an
    indexed view of the file (reads its rows on access, writes through)."""
    ref = make_td(seed)
    big = ref.apply(lambda x: torch.cat([torch.zeros_like(x[:1]), x, torch.zeros_like(x[:1])]), batch_size=[5, 4])
    return make_h5_from(big)[1:4]


def make_h5_from(td: TensorDictBase) -> TensorDictBase:
    pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")
    from tensorbatch.persistent import PersistentTensorDict

    if not _H5_FOLDER:
        _H5_FOLDER.append(tempfile.mkdtemp(prefix="tb-h5-flavour-"))
        atexit.register(shutil.rmtree, _H5_FOLDER[0], True)
    fd, path = tempfile.mkstemp(suffix=".h5", dir=_H5_FOLDER[0])
    os.close(fd)
    return PersistentTensorDict.from_dict(td, path)


def make_zarr(seed: int = 0) -> TensorDictBase:
    """A zarr-stored TensorDict (``tensorbatch.stored``, the zarr dialect) holding the reference content, written
    with ``to_zarr`` into a folder, open read-write. Reads are copies of the arrays."""
    pytest.importorskip("zarr", reason="zarr (the zarr extra) is not installed")
    if not _H5_FOLDER:
        _H5_FOLDER.append(tempfile.mkdtemp(prefix="tb-h5-flavour-"))
        atexit.register(shutil.rmtree, _H5_FOLDER[0], True)
    return make_td(seed).to_zarr(tempfile.mkdtemp(suffix=".zarr", dir=_H5_FOLDER[0]))


def make_store(seed: int = 0) -> TensorDictBase:
    """A :class:`~tensorbatch.store.TensorDictStore` holding the reference content, on the test run's server
    (``tests/_redis_server.py``: started on first use, stopped at session end)."""
    from _redis_server import SOCKET_TIMEOUT, shared_server

    server = shared_server()  # (skips without the redis extra)
    from tensorbatch.store import TensorDictStore

    return TensorDictStore.from_tensordict(
        make_td(seed), host=server.host, port=server.port, socket_timeout=SOCKET_TIMEOUT, prefix="flavour"
    )


def make_lazy_store(seed: int = 0) -> TensorDictBase:
    """A :class:`~tensorbatch.store.LazyStackedTensorDictStore` of ``make_lazy_stack0``'s members (three
    elements of batch [4]), on the test run's server."""
    from _redis_server import SOCKET_TIMEOUT, shared_server

    server = shared_server()  # (skips without the redis extra)
    from tensorbatch.store import LazyStackedTensorDictStore

    return LazyStackedTensorDictStore.from_lazy_stack(
        make_lazy_stack0(seed), host=server.host, port=server.port, socket_timeout=SOCKET_TIMEOUT, prefix="flavour"
    )


class RefState(TypedTensorDict):
    """The reference content's schema (the flavours ``typed_over_*`` wrap a backend in it)."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    nested: TensorDictBase


class RefSample(TensorClass):
    """The reference content's schema as a TensorClass (the flavours ``tensorclass_over_*`` wrap a backend in it)."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    nested: TensorDictBase


def over(wrapper: Any, backend: Callable[..., Any]) -> Callable[..., Any]:
    """A factory: ``wrapper.from_tensordict(backend(seed))`` (zero-copy, live)."""

    def factory(seed: int = 0) -> Any:
        return wrapper.from_tensordict(backend(seed))

    factory.__doc__ = f"``{wrapper.__name__}.from_tensordict`` over ``{backend.__name__}``."
    return factory


def _param(
    name: str,
    factory: Callable[..., Any],
    *,
    add: Iterable[str] = (),
    drop: Iterable[str] = (),
    marks: Any = (),
) -> Any:
    caps = (BASE_CAPS | frozenset(add)) - frozenset(drop)
    return pytest.param(Flavour(name, factory, caps), id=name, marks=marks)


_TC_DROPS = frozenset({"str_keys", "new_keys"})
_STORE_DROPS = frozenset({"stored_leaves", "grad", "pytree"})
_H5_DROPS = _STORE_DROPS | {"shared_select", "fresh_index_nodes"}
_REDIS_DROPS = _STORE_DROPS | {"shared_select", "index_views"}

FLAVOURS = [
    _param("td", make_td),
    _param("nested_td", make_nested_td),
    _param("sliced_td", make_sliced_td, add={"noncontiguous", "view"}),
    _param("permuted_td", make_permuted_td, add={"noncontiguous"}),
    _param("unsqueezed_td", make_unsqueezed_td),
    _param("stacked_td", make_stacked_td),
    _param("cloned_td", make_cloned_td),
    _param("device_td", make_device_td, add={"device"}),
    _param("memmap_td", make_memmap_td, add={"device", "memmap"}),
    _param(
        "lazy_stack0",
        make_lazy_stack0,
        add={"lazy"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree"},
    ),
    _param(
        "lazy_exclusive",
        make_lazy_exclusive,
        add={"lazy"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree", "uniform_members"},
    ),
    _param(
        "lazy_nested",
        make_lazy_nested,
        add={"lazy"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree", "batch_size_shrink"},
    ),
    _param(
        "lazy_stack1",
        make_lazy_stack1,
        add={"lazy"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "batch_size_shrink", "pytree"},
    ),
    # A NumpyStore (tests/backends/numpy_store.py) implements only the backend contract. It drops:
    # stored_leaves (a read wraps the array in a new tensor: same memory, never the same object), grad
    # (numpy arrays hold no autograd state), pytree (only the in-memory TensorDict is registered).
    _param("numpy_store", make_numpy_store, add={"device"}, drop=_STORE_DROPS),
    # The same store with reads that are copies (as h5py's): in-place ops must write back through the store.
    # It also drops shared_select: select/exclude/detach read copies into a new in-memory TensorDict.
    _param("numpy_copy", make_copying_numpy_store, add={"device"}, drop=_STORE_DROPS | {"shared_select"}),
    # A PersistentTensorDict (HDF5) drops what the NumpyStore drops; shared_select: its reads are copies of
    # the datasets, so select/exclude/detach give in-memory copies (tensordict refuses them); and
    # fresh_index_nodes: td[idx] is a view of the file that reads on access and writes through (as in
    # tensordict), so a new key set through it goes to the file and its keys cannot be deleted.
    _param("h5", make_h5, add={"h5"}, drop=_H5_DROPS),
    _param("typed_over_h5", over(RefState, make_h5), add={"typed", "h5"}, drop=_H5_DROPS),
    # ptd[1:4]: a view of the file's rows. It also drops mapping_mutation (deleting a key would delete it
    # from the file, for every row: refused), lock (a view's nested nodes are new views at each read) and
    # batch_size_shrink (its batch size is its index's).
    _param("h5_view", make_h5_view, add={"h5"}, drop=_H5_DROPS | {"mapping_mutation", "lock", "batch_size_shrink"}),
    _param("tensorclass_over_h5", over(RefSample, make_h5), add={"tensorclass", "h5"}, drop=_TC_DROPS | _H5_DROPS),
    # A TensorDictStore (Redis/Valkey) drops what the NumpyStore drops (leaves are bytes on a server: a read is
    # a new tensor, no autograd through the server, no pytree registration) and shared_select (its reads are
    # copies: select/exclude/detach give in-memory copies; its nested nodes are views).
    # index_views: store[idx] is read into memory at once (as tensordict's store does), not a view.
    _param("store", make_store, add={"store"}, drop=_REDIS_DROPS),
    _param("typed_over_store", over(RefState, make_store), add={"typed", "store"}, drop=_REDIS_DROPS),
    _param(
        "tensorclass_over_store",
        over(RefSample, make_store),
        add={"tensorclass", "store"},
        drop=_TC_DROPS | _REDIS_DROPS,
    ),
    # A LazyStackedTensorDictStore drops what lazy_stack0 drops and what every store drops (no autograd through
    # the server, no pytree, select/exclude/detach give in-memory copies).
    _param(
        "lazy_store",
        make_lazy_store,
        add={"lazy", "store"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree", "grad", "shared_select"},
    ),
    # A zarr-stored TensorDict (the stored layer over the zarr dialect) drops what a PersistentTensorDict drops:
    # its reads are copies of the arrays, and td[idx] is a view that reads on access and writes through.
    _param("zarr", make_zarr, add={"device"}, drop=_H5_DROPS),
    _param("typed_over_zarr", over(RefState, make_zarr), add={"typed", "device"}, drop=_H5_DROPS),
    _param(
        "tensorclass_over_zarr", over(RefSample, make_zarr), add={"tensorclass", "device"}, drop=_TC_DROPS | _H5_DROPS
    ),
    _param("typed_over_td", over(RefState, make_td), add={"typed"}),
    _param("typed_over_numpy", over(RefState, make_numpy_store), add={"typed", "device"}, drop=_STORE_DROPS),
    _param(
        "typed_over_lazy",
        over(RefState, make_lazy_stack0),
        add={"lazy", "typed"},
        drop={"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree"},
    ),
    # A TensorClass refuses string keys in [] and new top-level keys (it holds its fields only): it drops
    # str_keys and new_keys; everything else of the TensorDict API is forwarded to its backend.
    _param("tensorclass_over_td", over(RefSample, make_td), add={"tensorclass"}, drop=_TC_DROPS),
    _param(
        "tensorclass_over_memmap",
        over(RefSample, make_memmap_td),
        add={"tensorclass", "device", "memmap"},
        drop=_TC_DROPS,
    ),
    _param(
        "tensorclass_over_numpy",
        over(RefSample, make_numpy_store),
        add={"tensorclass", "device"},
        drop=_TC_DROPS | _STORE_DROPS,
    ),
    _param(
        "tensorclass_over_lazy",
        over(RefSample, make_lazy_stack0),
        add={"tensorclass", "lazy"},
        # as lazy_stack0 (its backend): leaves are stacked at each read, apply runs per member, indexing
        # the stack dim hands out members, lazy stacks are not pytree-registered
        drop=_TC_DROPS | {"stored_leaves", "whole_leaf_apply", "fresh_index_nodes", "pytree"},
    ),
]


# ---------------------------------------------------------------------------- checking helpers
def float_part(flavour: Flavour, td: Any) -> tuple[Any, tuple[tuple[str, ...], ...]]:
    """A TensorDict over float leaves of ``td`` through which in-place writes reach ``td``, and the paths in
    ``td`` of its leaves: ``select(*FLOAT_KEYS)`` where the flavour has ``shared_select``, else the node
    ``"nested"`` (all floats; a nested node read from a store is a view of it)."""
    if "shared_select" in flavour.caps:
        return td.select(*FLOAT_KEYS), FLOAT_KEYS
    return td.get("nested"), NESTED_KEYS


def _path(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def leaves(td: Any) -> dict[tuple[str, ...], torch.Tensor]:
    """``path -> leaf`` of a tensor collection (TensorDict, TensorClass) or a mapping of keys to tensors,
    paths as tuples."""
    if is_tensor_collection(td):
        return {_path(k): v for k, v in td.items(include_nested=True, leaves_only=True)}
    return {_path(k): v for k, v in td.items()}


def assert_same_kind(source: Any, result: Any) -> None:
    """``result`` of an operation on the collection ``source`` is a collection of the same kind: the same
    class for a TensorClass or TypedTensorDict ``source`` (results are re-wrapped), a TensorDictBase for
    any other TensorDict."""
    assert is_tensor_collection(result), f"expected a tensor collection, got {type(result).__name__}"
    if (
        getattr(source, "_plain_results", None)
        and isinstance(result, TensorDictBase)
        and type(result) not in WRAPPER_TYPES
    ):
        return  # a TypedTensorDict's reductions and comparisons: its backend's (tests/test_typed.py pins which ops)
    if type(source) in WRAPPER_TYPES:
        assert type(result) is type(source), f"expected a {type(source).__name__}, got {type(result).__name__}"
    elif isinstance(source, TensorDictBase):
        assert isinstance(result, TensorDictBase), f"expected a TensorDict, got {type(result).__name__}"


def snapshot(td: Any) -> dict[tuple[str, ...], torch.Tensor]:
    """Cloned leaves (plain torch), to compare with after an in-place operation."""
    return {path: value.clone() for path, value in leaves(td).items()}


def assert_leaves(
    source: Any,
    fn: Callable[[torch.Tensor], torch.Tensor | None],
    result: Any,
    *,
    keys: Iterable[Any] | None = None,
    batch_size: Any = None,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> None:
    """Check that ``result`` holds ``fn(leaf)`` for every leaf of ``source``, and nothing else.

    ``fn`` returning None means the leaf must be absent from ``result``. ``keys`` restricts the
    leaves of ``source`` considered. Values, shapes and dtypes are compared exactly unless
    tolerances are given. A collection ``source`` (not a mapping) and ``result`` must be of the same
    kind (:func:`assert_same_kind`): an operation on a TensorClass gives back that class.
    """
    assert is_tensor_collection(result), f"expected a tensor collection, got {type(result).__name__}"
    if is_tensor_collection(source):
        assert_same_kind(source, result)
    src = leaves(source)
    if keys is not None:
        wanted = [_path(k) for k in keys]
        src = {p: src[p] for p in wanted}
    got = leaves(result)
    expected = {p: out for p, out in ((p, fn(v)) for p, v in src.items()) if out is not None}
    assert set(got) == set(expected), f"leaf keys differ: got {sorted(got)}, expected {sorted(expected)}"
    for path, want in expected.items():
        have = got[path]
        assert have.shape == want.shape, f"{path}: shape {tuple(have.shape)} != {tuple(want.shape)}"
        assert have.dtype == want.dtype, f"{path}: dtype {have.dtype} != {want.dtype}"
        torch.testing.assert_close(
            have, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m, path=path: f"{path}: {m}"
        )
    if batch_size is not None:
        assert result.batch_size == torch.Size(batch_size)


def assert_op(
    td: Any,
    td_op: Callable[[Any], Any],
    leaf_op: Callable[[torch.Tensor], torch.Tensor | None],
    **kwargs: Any,
) -> Any:
    """Check an out-of-place ``td_op`` against ``leaf_op`` on each leaf of ``td``.

    When torch raises on some leaf, ``td_op`` must raise the same exception type. Otherwise the
    result is checked with :func:`assert_leaves` (``kwargs`` forwarded) and returned.
    """
    try:
        expected = {path: leaf_op(value) for path, value in leaves(td).items()}
    except Exception as err:  # torch refuses: so must the TensorDict
        with pytest.raises(type(err)):
            td_op(td)
        return None
    result = td_op(td)
    assert_same_kind(td, result)
    assert_leaves(expected, lambda x: x, result, **kwargs)
    return result


def assert_same_leaf(flavour: Flavour, got: Any, want: torch.Tensor) -> None:
    """``got`` is the leaf ``want``: the same object where the flavour has ``stored_leaves``, else a tensor
    with the same shape, dtype and values (a lazy stack builds a new tensor at every read)."""
    if "stored_leaves" in flavour.caps:
        assert got is want
        return
    assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    assert torch.equal(got, want)


def leaf_ids(flavour: Flavour, td: Any) -> dict[tuple[Any, ...], int]:
    """``path -> id(tensor)`` of every tensor the collection stores, through wrappers and lazy stacks.

    Compare it before and after an in-place operation to check that the stored tensors were written into,
    not replaced. A lazy stack stores no leaf of its own: its members' tensors are listed, under paths
    starting with ``("<member>", i)`` (exclusive keys included). A NumpyStore's arrays are listed (a read
    wraps its array in a new tensor). ``flavour`` is checked against the result:
    a flavour with ``stored_leaves`` reads its stored tensors back as its leaves.
    """
    ids = _stored_ids(td, ())
    assert ids, "a collection without stored tensors cannot show that they were kept"
    if "stored_leaves" in flavour.caps:
        assert ids == {path: id(value) for path, value in leaves(td).items()}
    return ids


def _dialect_ids(td: StoredTensorDict, path: tuple[str, ...], prefix: tuple[Any, ...]) -> dict[tuple[Any, ...], int]:
    out: dict[tuple[Any, ...], int] = {}
    for key, kind in td._state.entries(path).items():
        if kind == TENSOR:
            out[(*prefix, key)] = td.dialect.leaf_id((*path, key))
        elif kind == NODE:
            out.update(_dialect_ids(td, (*path, key), (*prefix, key)))
    return out


def _stored_ids(td: Any, prefix: tuple[Any, ...]) -> dict[tuple[Any, ...], int]:
    td = unwrap(td)
    out: dict[tuple[Any, ...], int] = {}
    if isinstance(td, LazyStackedTensorDict):
        for i, member in enumerate(td.tensordicts):
            out.update(_stored_ids(member, (*prefix, "<member>", i)))
        return out
    if type(td).__name__ == "IndexedView":  # a view of a file: the datasets it shows
        return _stored_ids(td.source, prefix)
    if type(td).__name__ == "PersistentTensorDict":  # its datasets (a read copies one into a new tensor)
        return {
            (*prefix, *path): hash(td._group["/".join(path)].id)
            for path, _ in (
                ((p if isinstance(p, tuple) else (p,)), None) for p in td.keys(include_nested=True, leaves_only=True)
            )
        }
    if type(td).__name__ == "TensorDictStore":  # a leaf's insertion rank on the server: a replaced leaf gets a new one
        conn = td._conn
        ranks = conn.client.zrange(conn.key("__order__"), 0, -1, withscores=True)
        return {
            (*prefix, *path[len(td._path) :]): score
            for path, score in ((tuple(k.decode().split(".")), score) for k, score in ranks)
            if path[: len(td._path)] == td._path and ".".join(path) in conn.tree.leaves
        }
    if isinstance(td, StoredTensorDict):  # the dialect's identity of each stored leaf (a read is a new tensor;
        # a stored lazy stack's element: the leaf's insertion rank on the server, a replaced leaf gets a new one)
        return _dialect_ids(td, td._path, prefix)
    for key, value in td.items():
        if is_tensor_collection(value) and not is_non_tensor(value):
            out.update(_stored_ids(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = id(value)
    return out


def assert_same_content(td: Any, seed: int = 0) -> None:
    """``td`` holds exactly the reference content (batch [3, 4])."""
    assert td.batch_size == BATCH
    assert_leaves(reference(seed), lambda x: x, td)


__all__ = [
    "BASE_CAPS",
    "BATCH",
    "FLAVOURS",
    "FLOAT_KEYS",
    "LEAF_KEYS",
    "Flavour",
    "RefSample",
    "assert_leaves",
    "assert_op",
    "assert_same_content",
    "assert_same_kind",
    "assert_same_leaf",
    "float_part",
    "leaf_ids",
    "leaves",
    "reference",
    "requires",
    "snapshot",
]
