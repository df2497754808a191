"""``torch.utils.data.DataLoader`` over TensorDicts: ``__getitems__``, torch's default collate, pin memory, workers.

Every dataset holds ``N`` rows with an ``idx`` leaf (the row number) and leaves computed from it, so a batch
checks itself: its ``idx`` says which rows it should hold. The datasets: a TensorDict, a lazy stack (members
of different shapes), a TensorClass, a TypedTensorDict, an HDF5 file and a Redis store (a real server).
Workers run in real processes (fork and spawn), each DataLoader with ``timeout=60``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
from _redis_server import Server, shared_server
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler, default_collate
from torch.utils.data._utils.pin_memory import pin_memory as torch_pin_memory

from tensorbatch import LazyStackedTensorDict, TensorClass, TensorDict, TypedTensorDict
from tensorbatch.persistent import PersistentTensorDict
from tensorbatch.stored import StoredTensorDict

if TYPE_CHECKING:
    from tensorbatch.store import TensorDictStore

N = 10
TIMEOUT = 60  # seconds a DataLoader waits for a worker's batch


class Rows(TensorClass):
    idx: torch.Tensor
    a: torch.Tensor
    tag: str


class TypedRows(TypedTensorDict):
    idx: torch.Tensor
    a: torch.Tensor


def _a(idx: torch.Tensor) -> torch.Tensor:
    return idx[:, None] * 10.0 + torch.arange(3)


def make_td() -> TensorDict:
    idx = torch.arange(N)
    return TensorDict(idx=idx, a=_a(idx), n=TensorDict(b=idx.to(torch.int16), batch_size=[N]), batch_size=[N])


def make_lazy() -> LazyStackedTensorDict:
    # member i: a leaf of length i % 3 + 1 (the members differ in shape: the stack stays lazy)
    return LazyStackedTensorDict(
        *[TensorDict(idx=torch.tensor(i), a=torch.full((i % 3 + 1,), float(i))) for i in range(N)]
    )


def make_tc() -> Rows:
    idx = torch.arange(N)
    return Rows(idx=idx, a=_a(idx), tag="rows", batch_size=[N])


def make_typed() -> TypedRows:
    idx = torch.arange(N)
    return TypedRows(idx=idx, a=_a(idx), batch_size=[N])


@pytest.fixture
def h5(tmp_path: Path) -> Iterator[PersistentTensorDict]:
    """The file opened ``"r"``: workers reopen it ``"r"`` too (HDF5 locks a file open for writing)."""
    pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")
    PersistentTensorDict.from_dict(make_td(), filename=str(tmp_path / "rows.h5")).close()
    out = PersistentTensorDict.from_h5(str(tmp_path / "rows.h5"))
    yield out
    out.close()


@pytest.fixture
def zarr_rows(tmp_path: Path) -> Any:
    """A zarr store opened ``"r"`` (the stored layer): workers reopen it from its path."""
    pytest.importorskip("zarr", reason="zarr (the zarr extra) is not installed")
    from tensorbatch import from_zarr

    make_td().to_zarr(tmp_path / "rows.zarr")
    return from_zarr(tmp_path / "rows.zarr")


@pytest.fixture(scope="module")
def server() -> Server:
    return shared_server()  # stopped at session end (root conftest)


@pytest.fixture
def store(server: Server) -> Iterator[TensorDictStore]:
    from tensorbatch.store import TensorDictStore  # (needs the redis extra: the server fixture skips without it)

    out = TensorDictStore.from_tensordict(make_td(), **server.kwargs())
    yield out
    out.clear_redis()
    out.close()


IN_MEMORY: dict[str, Callable[[], Any]] = {"td": make_td, "lazy": make_lazy, "tc": make_tc, "typed": make_typed}


@pytest.fixture(params=[*IN_MEMORY, "h5", "zarr_rows", "store"])
def dataset(request: pytest.FixtureRequest) -> Any:
    if request.param in IN_MEMORY:
        return IN_MEMORY[request.param]()
    return request.getfixturevalue(request.param)


def check_batch(batch: Any, rows: list[int] | None = None) -> list[int]:
    """The rows a batch holds (checked against its other leaves, and against ``rows`` when given)."""
    if isinstance(batch, LazyStackedTensorDict):
        got = [int(m["idx"]) for m in batch.tensordicts]
        for i, member in zip(got, batch.tensordicts, strict=True):
            assert member["a"].tolist() == [float(i)] * (i % 3 + 1)
    else:
        idx = batch.get("idx")
        got = idx.tolist()
        assert idx.dtype == torch.int64
        assert torch.equal(batch.get("a"), _a(idx))
        if "n" in batch.keys():
            assert batch.get(("n", "b")).tolist() == got
        if isinstance(batch, Rows):  # one value read by rows; a stack of the samples' values (as tensordict)
            assert batch.tag == "rows" or batch.tag == ["rows"] * len(got)
    if rows is not None:
        assert got == rows
    return got


def expected_type(dataset: Any) -> str:
    """The class of a batch read in the main process (tensordict 0.15.3 gives the same kinds)."""
    if isinstance(dataset, PersistentTensorDict) or (
        isinstance(dataset, StoredTensorDict) and dataset.dialect.lazy_index
    ):
        return "IndexedView"  # a lazy view of the file, as indexing gives (tensordict: a _SubTensorDict)
    if type(dataset).__name__ == "TensorDictStore":  # (by name: tensorbatch.store needs the redis extra)
        return "TensorDict"  # read from the server
    return type(dataset).__name__


# ------------------------------------------------------------------------------------------- __getitems__
def test_getitems_is_indexing_with_the_list(dataset: Any) -> None:
    got = dataset.__getitems__([3, 0, 7])
    want = dataset[[3, 0, 7]]
    assert type(got) is type(want)
    assert type(got).__name__ == expected_type(dataset)
    assert got.batch_size == want.batch_size == (3,)
    assert check_batch(got) == check_batch(want) == [3, 0, 7]


def test_store_batch_is_the_batched_row_read(store: TensorDictStore, server: Server) -> None:
    """One batch fetch sends the commands of one indexed read (a pipeline), not one read per row."""
    client = server.client()

    def commands(fn: Callable[[], Any]) -> dict[str, int]:
        before = client.info("commandstats")
        fn()
        after = client.info("commandstats")
        return {
            k: v["calls"] - before.get(k, {"calls": 0})["calls"]
            for k, v in after.items()
            if k != "cmdstat_info" and v["calls"] != before.get(k, {"calls": 0})["calls"]
        }

    rows = [3, 0, 7, 9]
    batched = commands(lambda: store.__getitems__(rows))
    assert batched == commands(lambda: store[rows])
    per_row = commands(lambda: [store[i] for i in rows])
    assert sum(batched.values()) < sum(per_row.values())


# ------------------------------------------------------------------------------------------ in the process
@pytest.mark.parametrize("collate", ["identity", "default"])
def test_one_container_per_batch(dataset: Any, collate: str) -> None:
    kwargs: dict[str, Any] = {"collate_fn": (lambda b: b)} if collate == "identity" else {}
    batches = list(DataLoader(dataset, batch_size=4, **kwargs))
    assert [type(b).__name__ for b in batches] == [expected_type(dataset)] * 3
    assert [b.batch_size for b in batches] == [(4,), (4,), (2,)]
    assert [check_batch(b) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_shuffle_and_drop_last(dataset: Any) -> None:
    loader = DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0))
    order = DataLoader(
        range(N),
        batch_size=4,
        shuffle=True,
        drop_last=True,  # the same sampling, of row numbers
        generator=torch.Generator().manual_seed(0),
    )
    want = [b.tolist() for b in order]
    assert len(want) == 2  # drop_last: the last 2 rows are left out
    assert sorted(want[0] + want[1]) != want[0] + want[1]  # shuffled
    assert [check_batch(b) for b in loader] == want


def test_batch_sampler(dataset: Any) -> None:
    sampler = BatchSampler(SequentialSampler(range(N)), batch_size=3, drop_last=False)
    batches = [check_batch(b) for b in DataLoader(dataset, batch_sampler=sampler)]
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


# ---------------------------------------------------------------------------------------------- workers
def identity(batch: Any) -> Any:
    """``collate_fn=lambda b: b`` that a spawned worker can unpickle."""
    return batch


def _by_workers(dataset: Any, context: str, **kwargs: Any) -> list[Any]:
    loader = DataLoader(
        dataset, batch_size=4, num_workers=2, multiprocessing_context=context, timeout=TIMEOUT, **kwargs
    )
    return list(loader)


def worker_type(dataset: Any) -> str:
    """The class of a batch a worker sends: a lazy view of a file is read in the worker, in one batched read."""
    return "TensorDict" if isinstance(dataset, PersistentTensorDict | StoredTensorDict) else expected_type(dataset)


def test_fork_workers(dataset: Any) -> None:
    batches = _by_workers(dataset, "fork", collate_fn=lambda b: b)
    assert [type(b).__name__ for b in batches] == [worker_type(dataset)] * 3
    assert sorted(i for b in batches for i in check_batch(b)) == list(range(N))


def test_fork_workers_default_collate_shuffle(dataset: Any) -> None:
    batches = _by_workers(dataset, "fork", shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(1))
    assert [type(b).__name__ for b in batches] == [worker_type(dataset)] * 2
    rows = [i for b in batches for i in check_batch(b)]
    assert len(rows) == len(set(rows)) == 8


# one spawn test per family: in memory (TensorDict, lazy stack), typed wrappers, stored (HDF5, zarr, Redis)
@pytest.mark.slow
@pytest.mark.parametrize("family", ["memory", "typed", "stored"])
def test_spawn_workers(family: str, request: pytest.FixtureRequest) -> None:
    datasets = {
        "memory": [make_td(), make_lazy()],
        "typed": [make_tc(), make_typed()],
        "stored": [
            request.getfixturevalue("h5"),
            request.getfixturevalue("zarr_rows"),
            request.getfixturevalue("store"),
        ],
    }[family]
    for dataset in datasets:
        batches = (
            _by_workers(dataset, "spawn", collate_fn=identity)
            if family == "memory"
            else (_by_workers(dataset, "spawn"))
        )
        assert [type(b).__name__ for b in batches] == [worker_type(dataset)] * 3
        assert sorted(i for b in batches for i in check_batch(b)) == list(range(N))


# --------------------------------------------------------------------------------------- default collate
class Samples(Dataset):
    """A map-style dataset of single samples (no ``__getitems__``): torch's collate stacks them."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        self.make = make

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> Any:
        return self.make(i)


def _sample_td(i: int) -> TensorDict:
    return make_td()[i]


def _sample_tc(i: int) -> Rows:
    return make_tc()[i]


def _sample_lazy(i: int) -> TensorDict:
    return make_lazy().tensordicts[i]


def _sample_pair(i: int) -> dict[str, Any]:
    return {"td": make_td()[i], "label": i}


@pytest.mark.parametrize("workers", [0, 2])
def test_default_collate_stacks_samples(workers: int) -> None:
    kwargs: dict[str, Any] = {"num_workers": workers, "timeout": TIMEOUT if workers else 0}
    if workers:
        kwargs["multiprocessing_context"] = "fork"
    td_batches = list(DataLoader(Samples(_sample_td), batch_size=4, **kwargs))
    assert [type(b).__name__ for b in td_batches] == ["TensorDict"] * 3
    assert [check_batch(b) for b in td_batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    tc_batches = list(DataLoader(Samples(_sample_tc), batch_size=4, **kwargs))
    assert [type(b).__name__ for b in tc_batches] == ["Rows"] * 3
    assert check_batch(tc_batches[1]) == [4, 5, 6, 7]
    lazy_batches = list(DataLoader(Samples(_sample_lazy), batch_size=4, **kwargs))
    assert [type(b).__name__ for b in lazy_batches] == ["LazyStackedTensorDict"] * 3  # shapes differ
    assert check_batch(lazy_batches[2]) == [8, 9]
    pairs = list(DataLoader(Samples(_sample_pair), batch_size=4, **kwargs))
    assert type(pairs[0]["td"]) is TensorDict
    assert check_batch(pairs[0]["td"]) == pairs[0]["label"].tolist() == [0, 1, 2, 3]


def test_default_collate_of_samples_with_batch_dims() -> None:
    out = default_collate([make_td()[:2], make_td()[2:4]])
    assert type(out) is TensorDict
    assert out.batch_size == (2, 2)
    assert out.get("idx").tolist() == [[0, 1], [2, 3]]


class Other(TensorClass):
    idx: torch.Tensor


@pytest.mark.parametrize(
    ("items", "match"),
    [
        pytest.param(
            lambda: [make_tc()[0], Other(idx=torch.tensor(0))],
            r"different tensorclasses: got \['Other', 'Rows'\]",
            id="tensorclasses",
        ),
        pytest.param(lambda: [make_tc()[0], make_td()[0]], "mixes tensorclass instances with tensordicts", id="mixed"),
        pytest.param(
            lambda: [make_td()[0], make_td()[:2]], r"different numbers of batch dims: got \[0, 1\]", id="dims"
        ),
        pytest.param(lambda: [make_td()[0], 3], r"with other types: got \['TensorDict', 'int'\]", id="other"),
    ],
)
def test_default_collate_refuses_what_does_not_stack(items: Callable[[], list[Any]], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        default_collate(items())


# -------------------------------------------------------------------------------------------- pin memory
def test_torch_pin_memory_dispatches_to_the_tensordict() -> None:
    """torch's pin-memory thread calls ``pin_memory(batch)``: it reaches TensorDict.pin_memory, leaf by leaf."""
    batch = next(iter(DataLoader(make_td(), batch_size=4)))
    if not torch.cuda.is_available():  # CPU-only torch cannot pin: torch's own error, from a leaf
        with pytest.raises(RuntimeError, match="accelerator") as info:
            torch_pin_memory(batch)
        assert any("while pinning memory at key" in note for note in getattr(info.value, "__notes__", []))
        return
    pinned = torch_pin_memory(batch)  # pragma: no cover - needs CUDA
    assert type(pinned) is TensorDict
    assert pinned.get("a").is_pinned()
    assert pinned.get(("n", "b")).is_pinned()


def test_pin_memory_without_an_accelerator_is_skipped() -> None:
    if torch.accelerator.is_available():  # pragma: no cover - on a machine with an accelerator
        pytest.skip("an accelerator is available: DataLoader pins (see test_pin_memory_pins_batches)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(DataLoader(make_td(), batch_size=4, pin_memory=True))
    assert any("pin_memory" in str(w.message) for w in caught)
    assert [check_batch(b) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert not batches[0].get("a").is_pinned()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: pinning needs one")
@pytest.mark.parametrize("make", [make_td, make_tc], ids=["td", "tc"])
def test_pin_memory_pins_batches(make: Callable[[], Any]) -> None:  # pragma: no cover - needs CUDA
    for workers in (0, 2):
        loader = DataLoader(
            make(),
            batch_size=4,
            pin_memory=True,
            num_workers=workers,
            timeout=TIMEOUT if workers else 0,
            multiprocessing_context="fork" if workers else None,
        )
        batches = list(loader)
        assert [check_batch(b) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert all(b.get("a").is_pinned() and b.get("idx").is_pinned() for b in batches)
        assert type(batches[0]) is type(make())
