"""zarr benchmarks: tensorbatch vs tensordict vs raw zarr on the same layout, side by side.

    .venv/bin/python benchmarks/run.py --suite zarr [--quick]      (or: python benchmarks/bench_zarr.py [--quick])

Data: a TensorDict of N = 20,000 rows: ``obs`` [N, 64] float32, ``reward`` [N], ``nested/action`` [N, 8] float32,
``nested/done`` [N] bool, in a local folder, in tensordict's layout (groups with ``__tensordict__`` attributes,
no compressor), chunked by 1,024 rows (``chunks=(1024,)``) so that row reads touch a few chunks.

Cases:
- ``write``:  ``td.to_zarr(path, chunks=(1024,))`` (a new store, consolidated) vs the same arrays written by hand
              with ``zarr.open_group``/``create_array`` plus the attributes and ``consolidate_metadata``.
- ``read``:   open and read everything: ``from_zarr(path).to_tensordict()`` vs ``open_group`` + ``arr[...]`` per leaf.
- ``rows``:   64 random rows of an open store: ``z[idx].to_tensordict()`` vs ``arr.oindex[sorted]`` + reorder.
- ``slice``:  ``z[5000:6000].to_tensordict()`` vs ``arr[5000:6000]`` per leaf.
- ``set_rows``: ``z[idx] = rows`` (64 random rows) vs ``arr.oindex[sorted] = values`` per leaf.
Timing: interleaved round-robin repeats (the implementations rotated each repeat), medians, ratios to raw.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

N, ROWS, CHUNK = 20_000, 64, 1024
warnings.filterwarnings("ignore")  # zarr's note on consolidated metadata


def make(lib: Any) -> Any:
    g = torch.Generator().manual_seed(0)
    return lib.TensorDict(
        {
            "obs": torch.rand(N, 64, generator=g),
            "reward": torch.rand(N, generator=g),
            "nested": {"action": torch.rand(N, 8, generator=g), "done": torch.rand(N, generator=g) > 0.5},
        },
        batch_size=[N],
    )


LEAVES = ("obs", "reward", "nested/action", "nested/done")


def raw_write(path: str, source: Any) -> None:
    import zarr

    root = zarr.open_group(
        path, mode="w", use_consolidated=False, attributes={"__tensordict__": {"batch_size": [N], "version": 1}}
    )
    nested = root.create_group("nested", attributes={"__tensordict__": {"batch_size": [N], "version": 1}})
    for name in LEAVES:
        parent, key = (nested, name.split("/")[1]) if "/" in name else (root, name)
        value = source[tuple(name.split("/"))].numpy()
        parent.create_array(key, data=value, chunks=(CHUNK, *value.shape[1:]), compressors=None)
    zarr.consolidate_metadata(root.store)


def raw_read(path: str) -> dict[str, np.ndarray]:
    import zarr

    root = zarr.open_group(path, mode="r")
    return {name: root[name][...] for name in LEAVES}


def run(repeats: int) -> list[dict[str, Any]]:
    import tensordict
    import zarr

    import tensorbatch

    libs = {"tb": tensorbatch, "td": tensordict}
    folder = Path(tempfile.mkdtemp(prefix="tb-zarr-bench-"))
    try:
        data = {name: make(lib) for name, lib in libs.items()}
        counter = iter(range(10**9))

        def fresh(impl: str) -> str:
            return str(folder / f"{impl}-{next(counter)}.zarr")

        for impl in ("tb", "td", "raw"):  # one store per implementation for the read cases
            if impl == "raw":
                raw_write(str(folder / "raw.zarr"), data["tb"])
            else:
                data[impl].to_zarr(str(folder / f"{impl}.zarr"), chunks=(CHUNK,))
        opened = {impl: libs[impl].TensorDict.from_zarr(str(folder / f"{impl}.zarr"), mode="r+") for impl in libs}
        raw_root = zarr.open_group(str(folder / "raw.zarr"), mode="r+")
        raw_arrays = {name: raw_root[name] for name in LEAVES}
        idx = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:ROWS]
        order = idx.sort()
        sorted_rows, inverse = order.values.numpy(), order.indices.argsort().numpy()
        values = {impl: make(lib)[:ROWS] for impl, lib in libs.items()}
        raw_values = {name: values["tb"][tuple(name.split("/"))].numpy()[order.indices.numpy()] for name in LEAVES}

        def raw_rows() -> Any:
            return {name: arr.oindex[sorted_rows][inverse] for name, arr in raw_arrays.items()}

        def raw_set_rows() -> None:
            for name, arr in raw_arrays.items():
                arr.oindex[sorted_rows] = raw_values[name]

        def set_rows(impl: str) -> Callable[[], None]:
            def go() -> None:
                opened[impl][idx] = values[impl]

            return go

        cases: dict[str, dict[str, Callable[[], Any]]] = {
            "write": {
                **{impl: (lambda impl=impl: data[impl].to_zarr(fresh(impl), chunks=(CHUNK,))) for impl in libs},
                "raw": lambda: raw_write(fresh("raw"), data["tb"]),
            },
            "read": {
                **{
                    impl: (
                        lambda impl=impl: libs[impl].TensorDict.from_zarr(str(folder / f"{impl}.zarr")).to_tensordict()
                    )
                    for impl in libs
                },
                "raw": lambda: raw_read(str(folder / "raw.zarr")),
            },
            "rows": {**{impl: (lambda impl=impl: opened[impl][idx].to_tensordict()) for impl in libs}, "raw": raw_rows},
            "slice": {
                **{impl: (lambda impl=impl: opened[impl][5000:6000].to_tensordict()) for impl in libs},
                "raw": lambda: {name: arr[5000:6000] for name, arr in raw_arrays.items()},
            },
            "set_rows": {**{impl: set_rows(impl) for impl in libs}, "raw": raw_set_rows},
        }
        results = []
        for case, fns in cases.items():
            for fn in fns.values():
                fn()  # warm-up (and a check that every implementation runs)
            samples: dict[str, list[float]] = {impl: [] for impl in fns}
            names = list(fns)
            for r in range(repeats):
                for impl in names[r % len(names) :] + names[: r % len(names)]:
                    start = time.perf_counter()
                    fns[impl]()
                    samples[impl].append(time.perf_counter() - start)
            med = {impl: statistics.median(s) for impl, s in samples.items()}
            results.append(
                {
                    "case": case,
                    **{f"{k}_ms": v * 1e3 for k, v in med.items()},
                    "tb/raw": med["tb"] / med["raw"],
                    "tb/td": med["tb"] / med["td"],
                }
            )
            row = results[-1]
            print(
                f"{case:10s} tb {row['tb_ms']:8.2f} ms  td {row['td_ms']:8.2f} ms  raw {row['raw_ms']:8.2f} ms  "
                f"tb/raw {row['tb/raw']:.2f}x  tb/td {row['tb/td']:.2f}x",
                flush=True,
            )
        return results
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(args: Any) -> list[dict[str, Any]]:
    """``run.py --suite zarr`` (its ``--quick``, ``--repeats``)."""
    repeats = getattr(args, "repeats", None) or (7 if getattr(args, "quick", False) else 21)
    return run(repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    main(parser.parse_args())
    sys.exit(0)
