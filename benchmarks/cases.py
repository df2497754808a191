"""Benchmark cases shared by the tensorbatch / tensordict / raw-dict runner.

Each case is a *setup function* ``setup(lib) -> fn`` registered with
:func:`case`. ``lib`` is the library module (``tensorbatch`` or ``tensordict``;
both expose the same ``TensorDict`` API) or ``None`` for the "raw" baseline,
which does the same work by hand on plain (nested) dicts of tensors. Setup is
not timed; the returned zero-argument callable is.

Data and the raw helpers (``rmap``, ``flatten``, ...) live in ``bench_data.py``;
every setup builds fresh clones of the same seeded master data.

Notes on semantics:
    The raw side is the honest minimal floor: e.g. ``construct_*`` only
    (re)builds the dict structure (no shape validation), ``update`` is
    ``dict.update``, ``setitem_index`` is ``v[idx] = other[k]`` per key.
    ``sum`` uses ``td.sum(dim=0)`` (reduce the single batch dim, leaves become
    [16]); in tensordict 0.15 a bare ``td.sum()`` reduces *all* dims of every
    leaf to a scalar, which is less representative of batch work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from bench_data import (
    FLAT,
    FLAT2,
    FLAT_KEYS,
    IDX,
    MASK,
    NESTED,
    NESTED2,
    SMALL,
    B,
    clone,
    flat,
    flatten,
    leaf_keys,
    nested,
    rand,
    rmap,
    rmap2,
)

Setup = Callable[[Any], Callable[[], Any]]

#: Registered cases, in definition order: name -> setup function.
CASES: dict[str, Setup] = {}


def case(setup: Setup, name: str | None = None) -> Setup:
    """Registers a case; usable as a plain decorator.

    Args:
        setup: The setup function ``setup(lib) -> zero-arg callable``.
        name: Case name; defaults to the function name without a trailing
            underscore (so ``sum_`` registers as ``"sum"``).

    Returns:
        ``setup`` unchanged.
    """
    CASES[name or setup.__name__.rstrip("_")] = setup
    return setup


# --------------------------------------------------------------------------- #
# Construction and key access
# --------------------------------------------------------------------------- #
@case
def construct_flat(lib):
    """``TensorDict(d, batch_size=[64])``; raw floor: a shallow dict copy."""
    d = clone(FLAT)
    if lib is None:
        return lambda: {k: v for k, v in d.items()}
    return lambda: lib.TensorDict(d, batch_size=[B])


@case
def construct_nested(lib):
    """From nested plain dicts; raw floor: rebuild the nested dict structure."""
    d = clone(NESTED)
    if lib is None:
        return lambda: rmap(lambda v: v, d)
    return lambda: lib.TensorDict(d, batch_size=[B])


@case
def get_leaf(lib):
    td = flat(lib)
    return lambda: td["a"]


@case
def get_nested_leaf(lib):
    td = nested(lib)
    if lib is None:
        return lambda: td["x"]["y"]["z"]
    return lambda: td["x", "y", "z"]


@case
def set_leaf(lib):
    td, t = flat(lib), rand(B, 16)

    def fn():
        td["a"] = t

    return fn


@case
def set_nested_leaf(lib):
    td, t = nested(lib), rand(B, 16)

    if lib is None:

        def fn():
            td["x"]["y"]["z"] = t
    else:

        def fn():
            td["x", "y", "z"] = t

    return fn


@case
def items_iter(lib):
    """``for k, v in td.items()`` over a 10-key flat TD; raw: a plain dict's items."""
    d = {**clone(FLAT), **{k + "2": v for k, v in clone(FLAT2).items()}}
    td = d if lib is None else lib.TensorDict(d, batch_size=[B])

    def fn():
        for _k, _v in td.items():
            pass

    return fn


@case
def set_existing(lib):
    """``td.set_("a", x)`` into an existing leaf; raw: the same ``copy_`` by hand."""
    td, t = flat(lib), rand(B, 16)
    if lib is None:

        def fn():
            td["a"].copy_(t)
            return td

        return fn
    return lambda: td.set_("a", t)


@case
def keys_nested(lib):
    td = nested(lib)
    if lib is None:
        return lambda: leaf_keys(td)
    return lambda: list(td.keys(include_nested=True, leaves_only=True))


# --------------------------------------------------------------------------- #
# Indexing and shape ops
# --------------------------------------------------------------------------- #
def _index_case(index: Any, make: Callable = flat) -> Setup:
    """Builds a ``td[index]`` case over flat (default) or nested data."""

    def setup(lib):
        td = make(lib)
        if lib is None:
            if make is flat:
                return lambda: {k: v[index] for k, v in td.items()}
            return lambda: rmap(lambda v: v[index], td)
        return lambda: td[index]

    return setup


case(_index_case(3), "index_int")
case(_index_case(slice(2, 40, 2)), "index_slice")
case(_index_case(MASK), "index_mask")
case(_index_case(IDX), "index_tensor")


@case
def setitem_index(lib):
    """``td[idx] = other`` with a batch-[16] TD; raw: ``v[idx] = other[k]``."""
    td = flat(lib)
    src = {k: rand(16, 16) for k in FLAT_KEYS}
    if lib is None:

        def fn():
            for k, v in td.items():
                v[IDX] = src[k]
    else:
        other = lib.TensorDict(src, batch_size=[16])

        def fn():
            td[IDX] = other

    return fn


@case
def reshape(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v.reshape(8, 8, *v.shape[1:]) for k, v in td.items()}
    return lambda: td.reshape(8, 8)


@case
def permute(lib):
    """``permute(1, 0)`` of a batch-[8, 8] TD (leaves [8, 8, 16])."""
    d = {k: v.reshape(8, 8, 16) for k, v in clone(FLAT).items()}
    if lib is None:
        return lambda: {k: v.permute(1, 0, 2) for k, v in d.items()}
    td = lib.TensorDict(d, batch_size=[8, 8])
    return lambda: td.permute(1, 0)


@case
def unsqueeze(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v.unsqueeze(0) for k, v in td.items()}
    return lambda: td.unsqueeze(0)


@case
def stack_100(lib):
    """``torch.stack`` of 100 batch-[16] TDs; raw: ``torch.stack`` per key."""
    ds = [clone(d) for d in SMALL]
    if lib is None:
        return lambda: {k: torch.stack([d[k] for d in ds]) for k in FLAT_KEYS}
    tds = [lib.TensorDict(d, batch_size=[16]) for d in ds]
    return lambda: torch.stack(tds, 0)


@case
def cat_10(lib):
    tds = [flat(lib) for _ in range(10)]
    if lib is None:
        return lambda: {k: torch.cat([d[k] for d in tds]) for k in FLAT_KEYS}
    return lambda: torch.cat(tds, 0)


# --------------------------------------------------------------------------- #
# Math
# --------------------------------------------------------------------------- #
@case
def apply(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v + 1 for k, v in td.items()}
    return lambda: td.apply(lambda x: x + 1)


@case
def add_td(lib):
    td, td2 = flat(lib), flat(lib, FLAT2)
    if lib is None:
        return lambda: {k: v + td2[k] for k, v in td.items()}
    return lambda: td + td2


@case
def mul_scalar(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v * 2 for k, v in td.items()}
    return lambda: td * 2


@case
def add_inplace(lib):
    td, td2 = flat(lib), flat(lib, FLAT2)
    if lib is None:

        def fn():
            for k, v in td.items():
                v.add_(td2[k])
            return td

        return fn
    return lambda: td.add_(td2)


@case
def sum_(lib):
    """``td.sum(dim=0)``: reduce the batch dim (see module notes)."""
    td = flat(lib)
    if lib is None:
        return lambda: {k: v.sum(0) for k, v in td.items()}
    return lambda: td.sum(dim=0)


@case
def clone_(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v.clone() for k, v in td.items()}
    return lambda: td.clone()


@case
def to_dtype(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v.to(torch.float64) for k, v in td.items()}
    return lambda: td.to(torch.float64)


@case
def update(lib):
    """``td.update(plain_dict_same_keys)``; raw floor: ``dict.update``."""
    td, other = flat(lib), clone(FLAT2)
    if lib is None:

        def fn():
            td.update(other)
            return td

        return fn
    return lambda: td.update(other)


@case
def select(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: td[k] for k in ("a", "b")}
    return lambda: td.select("a", "b")


@case
def exclude(lib):
    td = flat(lib)
    if lib is None:
        return lambda: {k: v for k, v in td.items() if k != "a"}
    return lambda: td.exclude("a")


@case
def flatten_keys(lib):
    td = nested(lib)
    if lib is None:
        return lambda: flatten(td)
    return lambda: td.flatten_keys()


@case
def eq(lib):
    td, td2 = flat(lib), flat(lib, FLAT2)
    if lib is None:
        return lambda: {k: v == td2[k] for k, v in td.items()}
    return lambda: td == td2


# --------------------------------------------------------------------------- #
# Nested variants of leaf-heavy cases
# --------------------------------------------------------------------------- #
@case
def add_td_nested(lib):
    td, td2 = nested(lib), nested(lib, NESTED2)
    if lib is None:
        return lambda: rmap2(torch.add, td, td2)
    return lambda: td + td2


@case
def clone_nested(lib):
    td = nested(lib)
    if lib is None:
        return lambda: rmap(torch.clone, td)
    return lambda: td.clone()


@case
def to_tensordict_nested(lib):
    td = nested(lib)
    if lib is None:
        return lambda: rmap(torch.clone, td)
    return lambda: td.to_tensordict()


case(_index_case(slice(2, 40, 2), nested), "index_slice_nested")


@case
def apply_nested(lib):
    td = nested(lib)
    if lib is None:
        return lambda: rmap(lambda v: v + 1, td)
    return lambda: td.apply(lambda x: x + 1)
