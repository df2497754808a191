"""Tabular benchmark: a Parquet file read into a TensorDict, three ways, side by side.

    .venv/bin/python benchmarks/tabular.py [--rows 1000000] [--repeats 9] [--distinct] [--json out.json]

Data: one Parquet file of ``--rows`` rows (default 1,000,000) written once with pyarrow into the temp dir:
``a`` float32, ``b`` float64, ``c`` int64, ``d`` int32 and ``s`` a string column (``"item<k % 1000>"``, or
``"item<k>"``, every row distinct, with ``--distinct``: the case where text cannot be shared between rows).

Implementations, each reading the whole file into tensors (the string column into Python strings):
- ``tb``:  ``tensorbatch.from_parquet(path)``;
- ``raw``: pyarrow's own path, ``t = pq.read_table(path)`` then ``torch.from_numpy(t.column(n).to_numpy())``
           per numeric column and ``t.column("s").to_numpy()`` (an object array) for the strings;
- ``td``:  ``tensordict.TensorDict.from_parquet(path)`` (skipped if tensordict is not installed).
Timing: interleaved round robin (the start order rotates each repeat), ``gc`` collected before and disabled
during each call; the median per implementation, and the ratios to ``raw``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tensorbatch


def write_file(rows: int, distinct: bool = False) -> str:
    path = os.path.join(tempfile.gettempdir(), f"tensorbatch_bench_{rows}{'_distinct' * distinct}.parquet")
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        labels = np.array([f"item{k}" for k in range(rows if distinct else 1000)], dtype=object)
        table = pa.table(
            {
                "a": rng.random(rows, dtype=np.float32),
                "b": rng.random(rows),
                "c": rng.integers(0, 1 << 40, rows),
                "d": rng.integers(0, 1 << 20, rows, dtype=np.int32),
                "s": labels[np.arange(rows) % len(labels)],
            }
        )
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def raw_read(path: str) -> dict[str, object]:
    table = pq.read_table(path)
    out: dict[str, object] = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            out[name] = column.to_numpy()
        else:
            out[name] = torch.from_numpy(column.to_numpy())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--distinct", action="store_true", help="every string distinct (no sharing possible)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    path = write_file(args.rows, args.distinct)
    impls = {"tb": lambda: tensorbatch.from_parquet(path), "raw": lambda: raw_read(path)}
    try:
        import tensordict

        impls["td"] = lambda: tensordict.TensorDict.from_parquet(path)
    except ImportError:
        pass
    warnings.simplefilter("ignore")
    for fn in impls.values():  # warm-up: imports, page cache
        fn()
    times: dict[str, list[float]] = {name: [] for name in impls}
    names = list(impls)
    for rep in range(args.repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            gc.collect()
            gc.disable()
            start = time.perf_counter()
            result = impls[name]()
            times[name].append(time.perf_counter() - start)
            gc.enable()
            del result
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    text = "distinct" if args.distinct else "1,000 repeated"
    print(
        f"{args.rows:,} rows, 4 numeric + 1 string column ({text} strings), {args.repeats} interleaved repeats "
        f"(median):"
    )
    for name, m in medians.items():
        print(f"  {name:4s} {m * 1e3:9.1f} ms   {m / medians['raw']:.2f}x raw")
    if "td" in medians:
        print(f"  tb / td: {medians['tb'] / medians['td']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": args.rows, "medians_s": medians}, indent=1))


if __name__ == "__main__":
    main()
