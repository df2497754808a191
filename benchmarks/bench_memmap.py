"""Memory-mapped persistence benchmarks: tensorbatch vs tensordict vs raw numpy.memmap, side by side.

    .venv/bin/python benchmarks/bench_memmap.py [--mb 200] [--repeats 5]

Cases (medians of interleaved repeats; ratios printed, tb/raw as bandwidth or time as noted):
- write:  ``td.memmap(folder)`` of ~MB of float32 leaves vs writing the same bytes with numpy.memmap
- load:   ``TensorDict.load_memmap(folder)`` (maps the files) vs numpy.memmap opening them
- gather: reading 1e5 random rows of a loaded memmapped TensorDict vs numpy.memmap fancy indexing
- consolidate: ``td.consolidate()`` vs ``torch.cat`` of the leaves' bytes
- like:   ``td.expand(1_000_000).memmap_like(folder)`` with 3x32x32 uint8 leaves: peak RSS growth (MB)
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensorbatch

try:
    import tensordict
except ImportError:  # the comparison column is skipped
    tensordict = None

KEYS = ("obs", "next_obs", "reward", "action")


def _data(mb: int) -> dict[str, torch.Tensor]:
    rows = mb * 2**20 // (4 * (64 + 64 + 1 + 8))
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.rand(rows, 64, generator=g), "next_obs": torch.rand(rows, 64, generator=g),
            "reward": torch.rand(rows, 1, generator=g), "action": torch.rand(rows, 8, generator=g)}


def _median(fn: Callable[[], Any], repeats: int, setup: Callable[[], Any] | None = None) -> float:
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _raw_write(data: dict[str, torch.Tensor], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        arr = value.numpy()
        mm = np.memmap(folder / f"{key}.bin", dtype=arr.dtype, mode="w+", shape=arr.shape)
        mm[:] = arr
        mm.flush()
        del mm


def _raw_open(data: dict[str, torch.Tensor], folder: Path) -> dict[str, np.memmap]:
    return {k: np.memmap(folder / f"{k}.bin", dtype=np.float32, mode="r+", shape=tuple(v.shape))
            for k, v in data.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = _data(args.mb)
    nbytes = sum(v.numel() * v.element_size() for v in data.values())
    root = Path(tempfile.mkdtemp(prefix="tb-bench-"))
    libs = {"tb": tensorbatch, "td": tensordict} if tensordict is not None else {"tb": tensorbatch}
    tds = {name: lib.TensorDict(dict(data), batch_size=[len(data["obs"])]) for name, lib in libs.items()}
    rows: dict[str, dict[str, float]] = {"write": {}, "load": {}, "gather": {}, "consolidate": {}}
    try:
        for name in ["raw", *libs]:  # write: interleaved by repeat
            folder = root / f"w-{name}"
            wipe = lambda f=folder: shutil.rmtree(f, ignore_errors=True)  # noqa: E731
            if name == "raw":
                rows["write"][name] = _median(lambda f=folder: _raw_write(data, f), args.repeats, wipe)
            else:
                rows["write"][name] = _median(lambda n=name, f=folder: tds[n].memmap(f), args.repeats, wipe)
            if name != "raw":
                tds[name].memmap(folder)
        _raw_write(data, root / "w-raw")
        rows["load"]["raw"] = _median(lambda: _raw_open(data, root / "w-raw"), args.repeats)
        for name, lib in libs.items():
            rows["load"][name] = _median(lambda lib=lib, n=name: lib.TensorDict.load_memmap(root / f"w-{n}"),
                                         args.repeats)
        idx = torch.randint(0, len(data["obs"]), (100_000,), generator=torch.Generator().manual_seed(1))
        raw = _raw_open(data, root / "w-raw")
        np_idx = idx.numpy()
        rows["gather"]["raw"] = _median(lambda: {k: torch.from_numpy(v[np_idx]) for k, v in raw.items()},
                                        args.repeats)
        for name, lib in libs.items():
            loaded = lib.TensorDict.load_memmap(root / f"w-{name}")
            rows["gather"][name] = _median(lambda t=loaded: t[idx], args.repeats)
        leaves = list(data.values())
        rows["consolidate"]["raw"] = _median(lambda: torch.cat([v.reshape(-1).view(torch.uint8) for v in leaves]),
                                             args.repeats)
        for name in libs:
            rows["consolidate"][name] = _median(lambda n=name: tds[n].consolidate(), args.repeats)
        _report(rows, nbytes)
        _report_like(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _report(rows: dict[str, dict[str, float]], nbytes: int) -> None:
    print(f"{'case':10} {'raw':>10} {'tb':>10} {'td':>10} {'tb/raw':>8} {'tb/td':>8}   (ms; write also as MB/s)")
    for case, res in rows.items():
        tb, raw, td = res.get("tb"), res.get("raw"), res.get("td")
        cols = [f"{1e3 * x:10.2f}" if x is not None else f"{'-':>10}" for x in (raw, tb, td)]
        ratio_raw = f"{tb / raw:8.2f}" if tb and raw else f"{'-':>8}"
        ratio_td = f"{tb / td:8.2f}" if tb and td else f"{'-':>8}"
        extra = ""
        if case == "write" and tb and raw:
            extra = f"   bandwidth tb {nbytes / tb / 2**20:.0f} MB/s, raw {nbytes / raw / 2**20:.0f} MB/s, " \
                    f"tb/raw bandwidth {raw / tb:.2f}"
        print(f"{case:10} {' '.join(cols)} {ratio_raw} {ratio_td}{extra}")


def _report_like(root: Path) -> None:
    base = tensorbatch.TensorDict({"img": torch.zeros(3, 32, 32, dtype=torch.uint8),
                                   "mask": torch.zeros(3, 32, 32, dtype=torch.uint8)}, batch_size=[])
    big = base.expand(1_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    out = big.memmap_like(root / "like")
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = sum(os.path.getsize(root / "like" / f) for f in os.listdir(root / "like") if f.endswith(".memmap"))
    print(f"like: {out.batch_size} leaves of {list(out['img'].shape[1:])} uint8 ({size / 2**30:.1f} GiB on disk, "
          f"sparse) in {elapsed * 1e3:.1f} ms; peak RSS grew by {after - before:.1f} MB")


if __name__ == "__main__":
    main()
