"""Side-by-side micro-benchmarks: tensorbatch vs tensordict vs raw dicts.

Runs every case in ``benchmarks/cases.py`` for up to three implementations in
one process:

* ``tb``  -- ``tensorbatch.TensorDict`` (skipped if not importable),
* ``td``  -- ``tensordict.TensorDict`` (skipped if not importable),
* ``raw`` -- the same work by hand on plain (nested) dicts of tensors, the
  minimal floor.

Timing is interleaved round-robin: each repeat times one batch of N calls per
implementation (N auto-calibrated so a batch takes ~3 ms; start order rotates
per repeat), with ``gc`` collected before each case and disabled while timing.
The reported number is the median per-call time over the repeats.

Usage (from the repository root)::

    .venv/bin/python benchmarks/run.py                 # all cases, 30 repeats
    .venv/bin/python benchmarks/run.py --quick         # 15 repeats
    .venv/bin/python benchmarks/run.py --cases index   # substring filter
    .venv/bin/python benchmarks/run.py --json out.json # also dump results
"""

from __future__ import annotations

import argparse
import gc
import importlib
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases
import cases_lazy
import cases_nn
import cases_store
import cases_typed
import cases_vmap
import compiled
import h5
import torch

# (store: needs a server, started on first use; not part of all)
SUITES = {
    "core": cases.CASES,
    "lazy": cases_lazy.CASES,
    "typed": cases_typed.CASES,
    "store": cases_store.CASES,
    "vmap": cases_vmap.CASES,
    "nn": cases_nn.CASES,
}
CASES = {**cases.CASES, **cases_lazy.CASES, **cases_typed.CASES}
UNCHECKED = (
    cases_lazy.UNCHECKED | cases_typed.UNCHECKED | cases_store.UNCHECKED | cases_vmap.UNCHECKED | cases_nn.UNCHECKED
)
# every case by name (store cases run with --suite store only)
LOOKUP = {**CASES, **cases_store.CASES, **cases_vmap.CASES, **cases_nn.CASES}

IMPLS = ("tb", "td", "raw")
MODULES = {"tb": "tensorbatch", "td": "tensordict"}
RATIOS = (("tb", "td"), ("tb", "raw"), ("td", "raw"))


def load_impls() -> dict[str, Any]:
    """Imports the libraries that are available.

    Returns:
        Mapping impl name -> module (``None`` for raw), available ones only.
    """
    libs: dict[str, Any] = {}
    for name, modname in MODULES.items():
        try:
            libs[name] = importlib.import_module(modname)
        except ImportError as exc:
            print(f"[{name}] {modname} not importable: {exc}", file=sys.stderr)
    libs["raw"] = None
    return libs


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter  # set by --clock


def time_batch(fn: Callable[[], Any], n: int) -> float:
    """Returns the time in seconds (wall, or this process's CPU time with ``--clock cpu``) of ``n`` calls."""
    loop = itertools.repeat(None, n)
    t0 = clock()
    for _ in loop:
        fn()
    return clock() - t0


def round_robin(fns: dict[str, Callable[[], Any]], ns: dict[str, int], repeats: int) -> dict[str, list[float]]:
    """Per-call seconds of each impl, ``repeats`` samples of ``ns[impl]`` calls, the impls rotated each repeat."""
    samples: dict[str, list[float]] = {impl: [] for impl in fns}
    order = list(fns)
    gc.disable()
    try:
        for r in range(repeats):
            for impl in order[r % len(order) :] + order[: r % len(order)]:
                samples[impl].append(time_batch(fns[impl], ns[impl]) / ns[impl])
    finally:
        gc.enable()
    return samples


def calibrate(fn: Callable[[], Any], target: float) -> int:
    """Picks a batch size N so that N calls of ``fn`` take about ``target`` s.

    Grows N by 4x until a batch takes at least ``target / 4`` (best of three
    tries, so a single hiccup such as a cold cache right after
    ``gc.collect()`` cannot shrink N), then scales N to ``target``.

    Args:
        fn: The callable to time (already warmed up).
        target: Desired batch duration in seconds.

    Returns:
        The number of calls per batch (at least 1).
    """
    n = 1
    while True:
        t = min(time_batch(fn, n) for _ in range(3))
        if t >= target / 4 or n >= 10**6:
            return max(1, round(n * target / max(t, 1e-9)))
        n *= 4


def signature(x: Any) -> Any:
    """Structural summary (keys, shapes, dtypes) used to cross-check impls."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), str(x.dtype))
    if isinstance(x, dict):
        return {k: signature(v) for k, v in x.items()}
    if hasattr(x, "batch_size") and hasattr(x, "to_dict"):
        return signature(x.to_dict())
    if isinstance(x, tuple):  # e.g. a nested key: order matters
        return tuple(signature(v) for v in x)
    if isinstance(x, list):  # e.g. a key listing: order does not
        return sorted(repr(signature(v)) for v in x)
    return type(x).__name__


def run_case(name: str, libs: dict[str, Any], repeats: int, target: float) -> dict:
    """Sets up, checks, calibrates and times one case for every impl.

    Args:
        name: Case name (key of ``CASES``).
        libs: Available implementations, as returned by :func:`load_impls`.
        repeats: Number of round-robin timing rounds.
        target: Desired duration of one timed batch, in seconds.

    Returns:
        A dict with per-impl ``us`` (median µs/call), ``min_us``, ``n``,
        ``errors`` and ``mismatch`` (impls whose result structure differs
        from raw's).
    """
    fns, errors, sigs = {}, {}, {}
    for impl, lib in libs.items():
        try:
            fn = LOOKUP[name](lib)
            out = fn()  # warm-up + structural check
            sigs[impl] = None if name in UNCHECKED else signature(out)
            fn()
            fns[impl] = fn
        except Exception as exc:  # report and keep going with the others
            errors[impl] = f"{type(exc).__name__}: {exc}"
    mismatch = [] if name in UNCHECKED else [i for i in fns if "raw" in sigs and sigs[i] != sigs["raw"]]

    gc.collect()
    ns = {impl: calibrate(fn, target) for impl, fn in fns.items()}
    gc.collect()
    samples = round_robin(fns, ns, repeats)
    return {
        "case": name,
        "us": {i: statistics.median(s) * 1e6 for i, s in samples.items()},
        "min_us": {i: min(s) * 1e6 for i, s in samples.items()},
        "n": ns,
        "errors": errors,
        "mismatch": mismatch,
    }


def ratio(res: dict, a: str, b: str) -> float | None:
    """Returns ``res[a] / res[b]`` (median times) or None if either is absent."""
    us = res["us"]
    return us[a] / us[b] if a in us and b in us else None


def geomean(xs: list[float]) -> float | None:
    """Geometric mean of positive numbers, or None for an empty list."""
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def report(results: list[dict]) -> dict:
    """Prints the results table and summary; returns the summary dict."""
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    head = f"{'case':<20}" + "".join(f"{i + ' (µs)':>11}" for i in IMPLS)
    head += "".join(f"{a + '/' + b:>9}" for a, b in RATIOS)
    print(head)
    print("-" * len(head))
    for res in results:
        us = res["us"]
        line = f"{res['case']:<20}"
        line += "".join(f"{fmt(us.get(i), '.2f'):>11}" for i in IMPLS)
        line += "".join(f"{fmt(ratio(res, a, b), '.2f'):>9}" for a, b in RATIOS)
        notes = [f"{i} ERROR" for i in res["errors"]] + [f"{i} shape-mismatch" for i in res["mismatch"]]
        print(line + ("  " + ", ".join(notes) if notes else ""))
    print("-" * len(head))
    summary: dict[str, Any] = {}
    for a, b in RATIOS:
        rs = [r for r in (ratio(res, a, b) for res in results) if r is not None]
        summary[f"geomean_{a}/{b}"] = geomean(rs)
        print(f"geomean {a}/{b}: {fmt(geomean(rs), '.3f'):>7}   (over {len(rs)} cases)")
    slower = [res["case"] for res in results if (ratio(res, "tb", "td") or 0) > 1.0]
    clearly = [res["case"] for res in results if (ratio(res, "tb", "td") or 0) > 1.05]
    summary["tb_slower_than_td"] = slower
    print(f"cases with tb/td > 1.0: {len(slower)}" + (f"  ({', '.join(slower)})" if slower else ""))
    names = f"  ({', '.join(clearly)})" if clearly else ""
    print(f"  of which > 1.05 (beyond typical noise): {len(clearly)}" + names)
    sys.stdout.flush()
    for res in results:
        for impl, err in res["errors"].items():
            print(f"error [{res['case']}/{impl}]: {err}", file=sys.stderr)
    return summary


def facts(args: argparse.Namespace, libs: dict[str, Any], load_before: float) -> dict[str, Any]:
    """The run's facts for ``--json``'s ``meta``: machine, load, versions, threads, clock (``plots.py`` quotes them)."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_before": load_before,  # 1-minute load average when the run began (others' work)
        "load_after": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__,
        "threads": args.threads,
        "clock": args.clock,
        "versions": {i: getattr(m, "__version__", "?") for i, m in libs.items() if m is not None},
    }


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="", help="only run cases whose name contains this substring")
    p.add_argument(
        "--suite",
        choices=[*SUITES, "all", "h5", "zarr", "dist", "compile", "gpu"],
        default="core",
        help="core: the core TensorDict cases (default); lazy: lazy stacks and padding; "
        "typed: TensorClass and TypedTensorDict; store: TensorDictStore vs raw redis-py (cases_store.py); "
        "h5: PersistentTensorDict vs raw h5py (h5.py; not part of all); zarr: to_zarr/from_zarr, rows, "
        "slices and row writes vs tensordict's zarr and raw zarr (bench_zarr.py; "
        "not part of all); dist: send/recv between two gloo processes (distributed.py; not part of all); "
        "compile: a compiled training-style step, steady state and compile time (compiled.py; not part "
        "of all); gpu: host/device transfers, small GPU ops, a compiled step and a vmap ensemble on "
        "CUDA (gpu.py; skips without CUDA; not part of all)",
    )
    p.add_argument("--backend", default="inductor", help="--suite compile: torch.compile backend (default inductor)")
    p.add_argument(
        "--cold",
        action="store_true",
        help="--suite compile: FX graph and AOT autograd caches off (every compile lowers anew)",
    )
    p.add_argument("--h5-dir", help="--suite h5: folder of the data files (default: a reused temp folder)")
    p.add_argument("--json", metavar="PATH", help="write results and summary as JSON")
    p.add_argument("--quick", action="store_true", help="15 repeats instead of 30")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--target-ms", type=float, default=3.0, help="duration of one timed batch (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, less noise)")
    p.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall (default) or cpu: this process's CPU time, which other processes' load disturbs "
        "less (for A/B runs on a busy machine)",
    )
    args = p.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]

    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # library deprecation chatter would spam the table
    if args.suite == "h5":  # its own cases, raw strategies, peak memory and table (h5.py)
        load_before = round(os.getloadavg()[0], 2)
        h5.main(args, round_robin, calibrate, facts=lambda libs: facts(args, libs, load_before))
        return
    if args.suite == "zarr":  # its own cases on a store in a temp folder (bench_zarr.py)
        import bench_zarr

        bench_zarr.main(args)
        return
    if args.suite == "dist":  # two processes, each timing its side of the transfers (distributed.py)
        import distributed

        distributed.run([1.0, 100.0], args.repeats or (5 if args.quick else 9), args.json)
        return
    libs = load_impls()
    if args.suite == "gpu":  # synchronise-bounded timings on CUDA, GB/s for transfers (gpu.py)
        import gpu

        gpu.main(args, libs)
        return
    if args.suite == "compile":  # steady state and compile time of compiled steps (compiled.py)
        load_before = round(os.getloadavg()[0], 2)
        compiled.main(args, round_robin, calibrate, libs, facts=lambda: facts(args, libs, load_before))
        return
    repeats = args.repeats or (15 if args.quick else 30)
    pool = CASES if args.suite == "all" else SUITES[args.suite]
    names = [n for n in pool if args.cases in n]
    if not names:
        sys.exit(f"no case matches {args.cases!r}; available: {', '.join(CASES)}")

    load_before = round(os.getloadavg()[0], 2)
    results = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(run_case(name, libs, repeats, args.target_ms / 1e3))
    summary = report(results)
    if args.suite == "nn":
        cases_nn.check_targets(results)

    if args.json:
        meta = {**facts(args, libs, load_before), "repeats": repeats, "target_ms": args.target_ms}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "summary": summary}, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
