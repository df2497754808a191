"""Memory-mapped persistence benchmarks: tensorbatch vs tensordict vs raw numpy.memmap, side by side.

    .venv/bin/python benchmarks/bench_memmap.py [--mb 200] [--repeats 5]

Cases (medians of interleaved repeats; ratios printed, tb/raw as bandwidth or time as noted):
- write:  ``td.memmap(folder)`` of ~MB of float32 leaves vs writing the same bytes with numpy.memmap
- load:   ``TensorDict.load_memmap(folder)`` (maps the files) vs numpy.memmap opening them
- gather: reading 1e5 random rows of a loaded memmapped TensorDict vs numpy.memmap fancy indexing
- consolidate: ``td.consolidate()`` vs ``torch.cat`` of the leaves' bytes (implementations interleaved)
- like:   ``td.expand(1_000_000).memmap_like(folder)`` with 3x32x32 uint8 leaves, into a fresh folder each time:
  time (implementations interleaved in one interpreter), and peak RSS growth (MB) of the first call measured
  in a fresh interpreter per implementation (raw: sparse files of the same sizes mapped with ``torch.from_file``)
- like-over: the same into the folder of the previous call: both libraries keep the saved values of leaves of
  the same shape and dtype (tensorbatch links the old files into a new save made aside and swapped in,
  tensordict maps the existing files); raw truncates the files in place.
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
    return {
        "obs": torch.rand(rows, 64, generator=g),
        "next_obs": torch.rand(rows, 64, generator=g),
        "reward": torch.rand(rows, 1, generator=g),
        "action": torch.rand(rows, 8, generator=g),
    }


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


def _interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int, setups: dict[str, Callable[[], Any]] | None = None
) -> dict[str, float]:
    """Median seconds of each function, the implementations taking turns within each repeat."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(_median(fn, 1, (setups or {}).get(name)))
    return {name: statistics.median(t) for name, t in times.items()}


def _raw_write(data: dict[str, torch.Tensor], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        arr = value.numpy()
        mm = np.memmap(folder / f"{key}.bin", dtype=arr.dtype, mode="w+", shape=arr.shape)
        mm[:] = arr
        mm.flush()
        del mm


def _raw_open(data: dict[str, torch.Tensor], folder: Path) -> dict[str, np.memmap]:
    return {
        k: np.memmap(folder / f"{k}.bin", dtype=np.float32, mode="r+", shape=tuple(v.shape)) for k, v in data.items()
    }


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
            rows["load"][name] = _median(
                lambda lib=lib, n=name: lib.TensorDict.load_memmap(root / f"w-{n}"), args.repeats
            )
        idx = torch.randint(0, len(data["obs"]), (100_000,), generator=torch.Generator().manual_seed(1))
        raw = _raw_open(data, root / "w-raw")
        np_idx = idx.numpy()
        rows["gather"]["raw"] = _median(lambda: {k: torch.from_numpy(v[np_idx]) for k, v in raw.items()}, args.repeats)
        for name, lib in libs.items():
            loaded = lib.TensorDict.load_memmap(root / f"w-{name}")
            rows["gather"][name] = _median(lambda t=loaded: t[idx], args.repeats)
        leaves = list(data.values())
        rows["consolidate"] = _interleaved(
            {
                "raw": lambda: torch.cat([v.reshape(-1).view(torch.uint8) for v in leaves]),
                **{name: (lambda n=name: tds[n].consolidate()) for name in libs},
            },
            args.repeats,
        )
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
            extra = (
                f"   bandwidth tb {nbytes / tb / 2**20:.0f} MB/s, raw {nbytes / raw / 2**20:.0f} MB/s, "
                f"tb/raw bandwidth {raw / tb:.2f}"
            )
        print(f"{case:10} {' '.join(cols)} {ratio_raw} {ratio_td}{extra}")


LIKE_ROWS = 1_000_000
LIKE_LEAF = (3, 32, 32)


def _raw_like(folder: Path) -> dict[str, torch.Tensor]:
    folder.mkdir(parents=True)
    out = {}
    for key in ("img", "mask"):
        with open(folder / f"{key}.bin", "wb") as f:
            f.truncate(LIKE_ROWS * 3 * 32 * 32)
        out[key] = torch.from_file(
            str(folder / f"{key}.bin"), shared=True, size=LIKE_ROWS * 3 * 32 * 32, dtype=torch.uint8
        ).view(LIKE_ROWS, *LIKE_LEAF)
    return out


def _like_run(impl: str) -> Callable[[Path], Any]:
    if impl == "raw":
        return _raw_like
    lib = tensorbatch if impl == "tb" else tensordict
    leaf = torch.zeros(*LIKE_LEAF, dtype=torch.uint8)
    big = lib.TensorDict({"img": leaf, "mask": leaf.clone()}, batch_size=[]).expand(LIKE_ROWS)
    return big.memmap_like  # type: ignore[no-any-return]


def _like_one(impl: str, root: Path, repeats: int) -> dict[str, float]:
    """Runs in a fresh interpreter: peak RSS growth of the first memmap_like."""
    run = _like_run(impl)
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    run(root / "first")
    return {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before}


def _like_times(root: Path, impls: list[str], repeats: int) -> dict[str, dict[str, float]]:
    """memmap_like into a fresh folder and over the previous save, implementations interleaved."""
    runs = {impl: _like_run(impl) for impl in impls}
    fresh = _interleaved(
        {i: (lambda i=i: runs[i](root / f"fresh-{i}")) for i in impls},
        repeats,
        {i: (lambda i=i: shutil.rmtree(root / f"fresh-{i}", ignore_errors=True)) for i in impls},
    )
    for impl in impls:
        runs[impl](root / f"over-{impl}")
    over = _interleaved({i: (lambda i=i: runs[i](root / f"over-{i}")) for i in impls if i != "raw"}, repeats)
    over["raw"] = _interleaved({"raw": lambda: _raw_like_over(root / "over-raw")}, repeats)["raw"]
    return {"like": fresh, "like-over": over}


def _raw_like_over(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for key in ("img", "mask"):
        with open(folder / f"{key}.bin", "r+b") as f:  # zeroed in place: truncated to 0, then to the size
            f.truncate(0)
            f.truncate(LIKE_ROWS * 3 * 32 * 32)
        out[key] = torch.from_file(
            str(folder / f"{key}.bin"), shared=True, size=LIKE_ROWS * 3 * 32 * 32, dtype=torch.uint8
        ).view(LIKE_ROWS, *LIKE_LEAF)
    return out


def _report_like(root: Path, impls: list[str], repeats: int) -> None:
    rss = {}
    for impl in impls:  # a fresh interpreter each: ru_maxrss is a process-wide peak
        folder = root / f"like-{impl}"
        folder.mkdir()
        out = subprocess.run(
            [sys.executable, __file__, "--like-one", impl, str(folder), "--repeats", str(repeats)],
            check=True,
            capture_output=True,
            text=True,
        )
        rss[impl] = json.loads(out.stdout.strip().splitlines()[-1])["rss_mb"]
        shutil.rmtree(folder, ignore_errors=True)
    for case, res in _like_times(root, impls, repeats).items():
        cols = " ".join(f"{1e3 * res[i]:10.2f}" if i in res else f"{'-':>10}" for i in ("raw", "tb", "td"))
        tb, td, raw = (res.get(i) for i in ("tb", "td", "raw"))
        assert tb is not None and raw is not None
        note = (
            (
                f"   ({LIKE_ROWS} x {list(LIKE_LEAF)} uint8 x 2 leaves, sparse; peak RSS growth MB: "
                + ", ".join(f"{i} {r:.1f}" for i, r in rss.items())
                + ")"
            )
            if case == "like"
            else "   (over the previous save: not the same work, see the docstring)"
        )
        print(f"{case:10} {cols} {tb / raw:8.2f} " + (f"{tb / td:8.2f}" if td else f"{'-':>8}") + note)


if __name__ == "__main__":
    main()
