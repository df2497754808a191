"""Differential tests, ``torch.utils.data.DataLoader``: the same loaders give the same batches in both libraries.

A dataset (a TensorDict, a lazy stack, a tensorclass) is read by a DataLoader with ``collate_fn=lambda b: b``
(what ``__getitems__`` returns) and with torch's default collate (what the library registered in
``default_collate_fn_map``), and lists of samples go through ``default_collate``; the summaries (class
names, batch sizes, leaves) must agree, and so must the errors for samples that do not stack.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, default_collate

pytestmark = pytest.mark.differential

N = 10


def summary(lib: Any, value: Any) -> Any:
    """Class name, batch size and leaves (lazy stacks member by member)."""
    if isinstance(value, torch.Tensor):
        return {"dtype": value.dtype, "values": value.tolist()}
    if isinstance(value, dict):
        return {key: summary(lib, v) for key, v in value.items()}
    if isinstance(value, (lib.NonTensorData, lib.NonTensorStack)):
        return {"cls": type(value).__name__, "value": value.tolist()}
    out: dict[str, Any] = {"cls": type(value).__name__, "batch_size": tuple(value.batch_size)}
    if isinstance(value, lib.LazyStackedTensorDict):
        out["members"] = [summary(lib, td) for td in value.tensordicts]
        return out
    for key in sorted(value.keys()):  # (iterating a TensorDict walks its batch dim)
        out[key] = summary(lib, value.get(key))
    return out


def _td(lib: Any) -> Any:
    idx = torch.arange(N)
    return lib.TensorDict(
        idx=idx,
        a=idx[:, None] * 10.0 + torch.arange(3),
        n=lib.TensorDict(b=idx.to(torch.int16), batch_size=[N]),
        batch_size=[N],
    )


def _lazy(lib: Any) -> Any:
    return lib.LazyStackedTensorDict(
        *[lib.TensorDict(idx=torch.tensor(i), a=torch.full((i % 3 + 1,), float(i))) for i in range(N)]
    )


def _lazy_dense(lib: Any) -> Any:
    return lib.LazyStackedTensorDict(
        *[lib.TensorDict(idx=torch.tensor(i), a=torch.full((2,), float(i))) for i in range(N)]
    )


_CLASSES: dict[str, type] = {}


def _rows_cls(lib: Any) -> type:
    if lib.__name__ not in _CLASSES:

        @lib.tensorclass
        class Rows:
            idx: torch.Tensor
            a: torch.Tensor

        _CLASSES[lib.__name__] = Rows
    return _CLASSES[lib.__name__]


def _tc(lib: Any) -> Any:
    idx = torch.arange(N)
    return _rows_cls(lib)(idx=idx, a=idx[:, None] * 1.0, batch_size=[N])


DATASETS = {"td": _td, "lazy": _lazy, "lazy_dense": _lazy_dense, "tc": _tc}


@pytest.mark.parametrize("collate", ["identity", "default"])
@pytest.mark.parametrize("name", list(DATASETS))
def test_batches_alike(ref: Any, tb: Any, name: str, collate: str) -> None:
    def batches(lib: Any) -> list[Any]:
        kwargs: dict[str, Any] = {"collate_fn": (lambda b: b)} if collate == "identity" else {}
        loader = DataLoader(
            DATASETS[name](lib), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3), **kwargs
        )
        return [summary(lib, batch) for batch in loader]

    assert batches(tb) == batches(ref)


def test_getitems_alike(ref: Any, tb: Any) -> None:
    for name, make in DATASETS.items():
        got, want = make(tb).__getitems__([4, 1, 2]), make(ref).__getitems__([4, 1, 2])
        assert summary(tb, got) == summary(ref, want), name


SAMPLES = {
    "td_rows": lambda lib: [_td(lib)[i] for i in (0, 3, 5)],
    "td_slices": lambda lib: [_td(lib)[:2], _td(lib)[4:6]],
    "lazy_members": lambda lib: [_lazy(lib).tensordicts[i] for i in range(4)],
    "tc_rows": lambda lib: [_tc(lib)[i] for i in (2, 7)],
    "dicts": lambda lib: [{"td": _td(lib)[i], "label": i} for i in range(3)],
    "non_tensor": lambda lib: [lib.NonTensorData("a"), lib.NonTensorData("b")],
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_default_collate_alike(ref: Any, tb: Any, name: str) -> None:
    assert summary(tb, default_collate(SAMPLES[name](tb))) == summary(ref, default_collate(SAMPLES[name](ref)))


REFUSED = {
    "tc_and_td": lambda lib: [_tc(lib)[0], _td(lib)[0]],
    "batch_dims": lambda lib: [_td(lib)[0], _td(lib)[:2]],
    "other_type": lambda lib: [_td(lib)[0], 3],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_default_collate_refusals_alike(ref: Any, tb: Any, name: str) -> None:
    messages = []
    for lib in (ref, tb):
        with pytest.raises(TypeError) as info:
            default_collate(REFUSED[name](lib))
        messages.append(str(info.value))
    assert messages[0] == messages[1]
