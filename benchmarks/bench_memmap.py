"""Memory-mapped persistence benchmarks: tensorbatch vs tensordict vs raw numpy.memmap, side by side.

    .venv/bin/python benchmarks/bench_memmap.py [--mb 200] [--repeats 5]

Cases (medians of interleaved repeats; ratios printed, tb/raw as bandwidth or time as noted):
- write:  ``td.memmap(folder)`` of ~MB of float32 leaves vs writing the same bytes with numpy.memmap
- load:   ``TensorDict.load_memmap(folder)`` (maps the files) vs numpy.memmap opening them
- gather: reading 1e5 random rows of a loaded memmapped TensorDict vs numpy.memmap fancy indexing
- consolidate: ``td.consolidate()`` vs ``torch.cat`` of the leaves' bytes
- like:   ``td.expand(1_000_000).memmap_like(folder)`` with 3x32x32 uint8 leaves, into a fresh folder each time:
  time, and peak RSS growth (MB) measured in a fresh interpreter per implementation (raw: sparse files of the
  same sizes mapped with ``torch.from_file``)
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import statistics
import subprocess
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
        out = fn()
        times.append(time.perf_counter() - start)
        # freed after the timer: a result that sits in a reference cycle (tensordict's consolidated ones) is
        # otherwise freed by the next gc.collect(), outside it, and one that is not inside it (~10 ms for 200 MB)
        del out
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
    p.add_argument("--like-one", nargs=2, metavar=("IMPL", "FOLDER"), help=argparse.SUPPRESS)  # internal
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.like_one:
        print(json.dumps(_like_one(args.like_one[0], Path(args.like_one[1]), args.repeats)))
        return
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
        _report_like(root, [*libs, "raw"], args.repeats)
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


LIKE_ROWS = 1_000_000
LIKE_LEAF = (3, 32, 32)


def _raw_like(folder: Path) -> dict[str, torch.Tensor]:
    folder.mkdir(parents=True)
    out = {}
    for key in ("img", "mask"):
        with open(folder / f"{key}.bin", "wb") as f:
            f.truncate(LIKE_ROWS * 3 * 32 * 32)
        out[key] = torch.from_file(str(folder / f"{key}.bin"), shared=True, size=LIKE_ROWS * 3 * 32 * 32,
                                   dtype=torch.uint8).view(LIKE_ROWS, *LIKE_LEAF)
    return out


def _like_one(impl: str, root: Path, repeats: int) -> dict[str, float]:
    """Runs in a fresh interpreter: peak RSS growth of the first memmap_like, then the median time."""
    if impl == "raw":
        run: Callable[[Path], Any] = _raw_like
    else:
        lib = tensorbatch if impl == "tb" else tensordict
        leaf = torch.zeros(*LIKE_LEAF, dtype=torch.uint8)
        big = lib.TensorDict({"img": leaf, "mask": leaf.clone()}, batch_size=[]).expand(LIKE_ROWS)
        run = big.memmap_like
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    run(root / "first")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    wipe = lambda: shutil.rmtree(root / "t", ignore_errors=True)  # noqa: E731  # a fresh folder each time
    seconds = _median(lambda: run(root / "t"), repeats, wipe)
    return {"ms": seconds * 1e3, "rss_mb": rss}


def _report_like(root: Path, impls: list[str], repeats: int) -> None:
    res = {}
    for impl in impls:  # a fresh interpreter each: ru_maxrss is a process-wide peak
        folder = root / f"like-{impl}"
        folder.mkdir()
        out = subprocess.run([sys.executable, __file__, "--like-one", impl, str(folder), "--repeats", str(repeats)],
                             check=True, capture_output=True, text=True)
        res[impl] = json.loads(out.stdout.strip().splitlines()[-1])
        shutil.rmtree(folder, ignore_errors=True)
    cols = " ".join(f"{res[i]['ms']:10.2f}" if i in res else f"{'-':>10}" for i in ("raw", "tb", "td"))
    tb, td, raw = (res.get(i, {}).get("ms") for i in ("tb", "td", "raw"))
    print(f"{'like':10} {cols} {tb / raw:8.2f} " + (f"{tb / td:8.2f}" if td else f"{'-':>8}")
          + f"   ({LIKE_ROWS} x {list(LIKE_LEAF)} uint8 x 2 leaves, sparse; peak RSS growth MB: "
          + ", ".join(f"{i} {r['rss_mb']:.1f}" for i, r in res.items()) + ")")


if __name__ == "__main__":
    main()
