"""Benchmark cases for lazy stacks and padding, same protocol as ``cases.py``.

Run them with ``benchmarks/run.py --suite lazy``. The raw floor is the same work on a plain list of
dicts of tensors: a lazy stack of dicts *is* the list, reading a key stacks the members' tensors, and
padding uses ``torch.nn.utils.rnn.pad_sequence`` key by key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from bench_data import SMALL, rand
from torch.nn.utils.rnn import pad_sequence as _torch_pad_sequence

Setup = Callable[[Any], Callable[[], Any]]

CASES: dict[str, Setup] = {}
#: Cases whose results are not compared structurally with raw's (a lazy stack is not a list).
UNCHECKED: set[str] = set()

_gen = torch.Generator().manual_seed(3)
#: 100 members whose "obs" leaf has a different length each (heterogeneous shapes).
HETERO = [{"obs": rand(4, 8 + i % 7), "act": rand(4, 2)} for i in range(100)]
#: 64 variable-length samples for pad_sequence.
SEQS = [
    {"tokens": torch.randint(0, 100, (int(n),), generator=_gen), "mask": torch.ones(int(n), dtype=torch.bool)}
    for n in torch.randint(5, 60, (64,), generator=_gen)
]


def case(setup: Setup, name: str | None = None, checked: bool = False) -> Setup:
    """Register a case (unchecked by default: lazy results are compared by hand in the tests)."""
    key = name or setup.__name__
    CASES[key] = setup
    if not checked:
        UNCHECKED.add(key)
    return setup


def _members(lib: Any, rows: list[dict], batch: int) -> list[Any]:
    return [lib.TensorDict({k: v.clone() for k, v in r.items()}, batch_size=[batch]) for r in rows]


@case
def lazy_stack_100(lib):
    """``lazy_stack`` of 100 TDs of batch [16]; raw: the list itself."""
    if lib is None:
        rows = [dict(r) for r in SMALL]
        return lambda: list(rows)
    tds = _members(lib, SMALL, 16)
    return lambda: lib.lazy_stack(tds, 0)


@case
def lazy_index(lib):
    """``s[7]`` and ``s[10:20]`` on a lazy stack of 100; raw: list indexing."""
    if lib is None:
        rows = [dict(r) for r in SMALL]
        return lambda: (rows[7], rows[10:20])
    s = lib.lazy_stack(_members(lib, SMALL, 16), 0)
    return lambda: (s[7], s[10:20])


@case
def lazy_get(lib):
    """``s["a"]`` on a lazy stack of 100 (stacks the members' leaves); raw: ``torch.stack``."""
    if lib is None:
        rows = [dict(r) for r in SMALL]
        return lambda: torch.stack([r["a"] for r in rows])
    s = lib.lazy_stack(_members(lib, SMALL, 16), 0)
    return lambda: s["a"]


@case
def stack_hetero_100(lib):
    """``maybe_dense_stack`` of 100 TDs whose "obs" shapes differ (gives a lazy stack); raw: the list."""
    if lib is None:
        rows = [dict(r) for r in HETERO]
        return lambda: list(rows)
    tds = _members(lib, HETERO, 4)
    return lambda: lib.maybe_dense_stack(tds, 0)


@case
def pad_sequence_64(lib):
    """``pad_sequence`` of 64 variable-length samples; raw: torch's pad_sequence per key."""
    if lib is None:
        rows = [dict(r) for r in SEQS]
        return lambda: {k: _torch_pad_sequence([r[k] for r in rows], batch_first=True) for k in rows[0]}
    tds = [lib.TensorDict(dict(r), batch_size=[len(r["tokens"])]) for r in SEQS]
    return lambda: lib.pad_sequence(tds)
