"""``map`` and ``map_iter``: apply a function to chunks of a TensorDict in a pool of processes.

Chunks are slices of the TensorDict. A memory-mapped or shared-memory TensorDict pickles as file names
or shared handles, so workers read their chunk without a copy; an ``out`` that is memory-mapped or
shared is written by the workers directly (nothing but ``None`` travels back).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.multiprocessing as mp

from .._progress import bar as _bar


def _chunks(td: Any, dim: int, chunksize: int | None, num_chunks: int | None, workers: int) -> tuple[list[Any], bool]:
    """The pieces of ``td`` along ``dim`` and whether they were unbound (chunksize=0: results stack)."""
    if chunksize is not None and num_chunks is not None:
        raise ValueError("map: pass chunksize or num_chunks, not both")
    if chunksize == 0:
        return list(td.unbind(dim)), True
    size = td.batch_size[dim]
    if chunksize is None:
        chunksize = max(1, math.ceil(size / max(1, num_chunks or workers)))
    if chunksize < 0:
        raise ValueError(f"map: chunksize must be >= 0, got {chunksize}")
    return list(td.split(chunksize, dim)), False


def _run(job: tuple[Callable[[Any], Any], Any, Any, int]) -> Any:
    fn, chunk, out_chunk, threads = job
    torch.set_num_threads(threads)
    result = fn(chunk)
    if out_chunk is not None and result is not None:
        out_chunk.update_(result)
        return None
    return result


def _progress(it: Iterator[Any], total: int, enabled: bool) -> Iterator[Any]:
    """``it``, counted on a tqdm bar of ``total`` chunks when ``enabled`` (``pbar=True``: the switch is not read)."""
    if not enabled:
        return it
    return _counted(it, _bar(True, "map", total, unit="chunk"))


def _counted(it: Iterator[Any], bar: Any) -> Iterator[Any]:
    with bar:
        for result in it:
            bar.update(1)
            yield result


def _pool(num_workers: int | None, max_tasks_per_child: int | None, start_method: str | None) -> Any:
    ctx = mp.get_context(start_method)
    return ctx.Pool(num_workers, maxtasksperchild=max_tasks_per_child)


def map_chunks(
    td: Any,
    fn: Callable[[Any], Any],
    dim: int = 0,
    num_workers: int | None = None,
    *,
    out: Any = None,
    chunksize: int | None = None,
    num_chunks: int | None = None,
    pool: Any = None,
    max_tasks_per_child: int | None = None,
    worker_threads: int = 1,
    pbar: bool = False,
    mp_start_method: str | None = None,
) -> Any:
    """Apply ``fn`` to chunks of ``td`` in worker processes and join the results along ``dim``."""
    workers = num_workers or mp.cpu_count()
    chunks, unbound = _chunks(td, dim, chunksize, num_chunks, workers)
    direct = out is not None and (out.is_memmap() or out.is_shared())
    out_chunks: list[Any] = [None] * len(chunks)
    if direct:
        sizes = [c.batch_size[dim] for c in chunks] if not unbound else None
        out_chunks = list(out.unbind(dim)) if unbound else list(out.split(sizes, dim))
    jobs = [(fn, c, oc, worker_threads) for c, oc in zip(chunks, out_chunks, strict=True)]
    own = pool is None
    pool = _pool(num_workers, max_tasks_per_child, mp_start_method) if own else pool
    try:
        results = list(_progress(pool.imap(_run, jobs), len(jobs), pbar))
    finally:
        if own:
            pool.close()
            pool.join()
    if direct:
        return out
    results = [r for r in results if r is not None]
    if not results:
        return None
    joined = torch.stack(results, dim) if unbound else torch.cat(results, dim)
    if out is not None:
        out.update_(joined)
        return out
    return joined


def map_iter_chunks(
    td: Any,
    fn: Callable[[Any], Any],
    dim: int = 0,
    num_workers: int | None = None,
    *,
    shuffle: bool = False,
    chunksize: int | None = None,
    num_chunks: int | None = None,
    pool: Any = None,
    generator: torch.Generator | None = None,
    max_tasks_per_child: int | None = None,
    worker_threads: int = 1,
    pbar: bool = False,
    mp_start_method: str | None = None,
) -> Iterator[Any]:
    """Yield ``fn(chunk)`` for the chunks of ``td`` as the workers finish them (in chunk order)."""
    workers = num_workers or mp.cpu_count()
    chunks, _ = _chunks(td, dim, chunksize, num_chunks, workers)
    if shuffle:
        seed = int(torch.randint(0, 2**31, (), generator=generator)) if generator is not None else None
        random.Random(seed).shuffle(chunks)
    jobs = [(fn, c, None, worker_threads) for c in chunks]
    own = pool is None
    pool = _pool(num_workers, max_tasks_per_child, mp_start_method) if own else pool
    try:
        for result in _progress(pool.imap(_run, jobs), len(jobs), pbar):
            if result is not None:
                yield result
    finally:
        if own:
            pool.close()
            pool.join()
