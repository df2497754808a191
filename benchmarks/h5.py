"""HDF5 benchmarks: tensorbatch vs tensordict vs the best raw h5py code, side by side.

    .venv/bin/python benchmarks/run.py --suite h5 [--quick] [--cases rows] [--json out.json] [--h5-dir DIR]

Data: one file per layout, leaves of 100,000 rows (``obs`` [N, W] with W = 64 or 1,024 float32, ``reward`` [N],
``nested/action`` [N, 8]), contiguous or chunked (~1 MiB chunks), written once with h5py into ``--h5-dir``
(default: a folder in the temp dir, reused by later runs; about 1.8 GB with the write copies).

Cases, per layout (``w64_contig``, ``w64_chunked``, ``w1024_contig``, ``w1024_chunked``):
- ``rows``:   1,000 random (unsorted, unique) rows, materialised: ``ptd[idx].to_tensordict()``; raw is the best
              of three h5py strategies, each timed: ``span`` (one hyperslab from the smallest to the largest row,
              then gather), ``fancy`` (sorted index ``ds[sorted]``, then restore the order), ``chunk`` (chunked
              files: read each touched chunk once, then gather). Peak memory (RSS growth, below) too.
- ``write``:  the same 1,000 unsorted rows written (``ptd[idx] = td``) vs raw sorted writes ``ds[sorted] = v``.
              tensordict cannot write unsorted rows (h5py raises): its column writes the sorted rows.
- ``totd``:   ``ptd.to_tensordict()`` vs reading every dataset with ``ds[()]``.
- ``slice``:  a 1,000-row slice ``ptd[40_000:41_000].to_tensordict()`` vs ``ds[40_000:41_000]``.
- ``tofile_100``/``_10k``/``_200k``: ``td.to_h5(path).close()`` of a TensorDict of that many rows (``obs`` [N, 16],
              ``reward`` [N, 1], ``nested/action`` [N, 4]) onto an existing file vs h5py writing the same datasets
              (``h5py.File(path, "w")``; ours also records the batch sizes in attributes, tensordict's does not).
Once: ``keys`` (``list(ptd.keys())`` vs ``list(f.keys())``), ``open`` (``from_h5(path)`` + close vs
``h5py.File(path, "r")`` + close), and ``from_schema`` of 1 GB (``storage="h5"``: time, RSS growth and bytes
allocated on disk, in a fresh interpreter per implementation; raw is ``create_dataset(shape, dtype)``;
tensordict's, which writes the whole GB, runs in full runs only; with ``--quick`` these fresh interpreters
run at the same time).

Timing follows ``run.py``: interleaved round-robin repeats of calibrated batches (a call slower than a batch
is timed alone), medians; 15 repeats, 3 with ``--quick`` (about a minute). The implementations of a case
share one process, so they share HDF5's open datasets: the libraries open them first (see ``case_fns``).
Peak memory of one call is measured in a fresh interpreter (glibc told to return freed memory at once), on
handles opened for it alone, after a warm-up on other handles: RSS before the call, the peak counter reset
(``/proc/self/clear_refs``), the call, then the peak (``VmHWM``) minus the start. It counts what the read
holds: numpy/torch buffers, h5py's temporaries and HDF5's own buffers, the chunk cache included (see
``peak_child``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

N = 100_000
K = 1_000
WIDTHS = (64, 1024)
LAYOUTS = tuple(f"w{w}_{kind}" for w in WIDTHS for kind in ("contig", "chunked"))
SLICE = slice(40_000, 41_000)
SCHEMA_ROWS = 2**30 // (4 * 1024)  # 1 GiB of float32 [rows, 1024]
DEFAULT_DIR = Path(tempfile.gettempdir()) / "tensorbatch-h5-bench"
TARGETS = {"rows": 1.3, "write": 1.3, "totd": 1.2, "slice": 1.5, "keys": 2.0, "open": 3.0, "tofile": 1.1}
TOFILE_ROWS = {"100": 100, "10k": 10_000, "200k": 200_000}  # ``tofile_*``: to_h5 of obs [N, 16], reward, nested/action

_rng = np.random.default_rng(13)
ROWS = _rng.permutation(N)[:K]  # unsorted, unique
ORDER = np.argsort(ROWS)
SORTED = ROWS[ORDER]
VALUES = {
    w: {
        "obs": _rng.random((K, w), dtype=np.float32),
        "reward": _rng.random(K, dtype=np.float32),
        "nested/action": _rng.random((K, 8), dtype=np.float32),
    }
    for w in WIDTHS
}


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------
def _width(layout: str) -> int:
    return int(layout.split("_")[0][1:])


def _write_file(path: Path, width: int, chunked: bool) -> None:
    rng = np.random.default_rng(width)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for name, shape in (("obs", (N, width)), ("reward", (N,)), ("nested/action", (N, 8))):
            row_bytes = 4 * int(np.prod(shape[1:]))
            chunks = (max(1, min(N, 2**20 // row_bytes)), *shape[1:]) if chunked else None
            f.create_dataset(name, data=rng.random(shape, dtype=np.float32), chunks=chunks)
    os.replace(tmp, path)


def prepare(folder: Path, layouts: list[str]) -> dict[str, Path]:
    """The data files (and a ``.w`` copy per layout for the write cases), written if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for layout in layouts:
        path = folder / f"{layout}.h5"
        if not path.exists():
            print(f"writing {path} ...", file=sys.stderr, flush=True)
            _write_file(path, _width(layout), layout.endswith("chunked"))
        if not (folder / f"{layout}.w.h5").exists():
            shutil.copyfile(path, folder / f"{layout}.w.h5")
        paths[layout] = path
    small = folder / "open.h5"
    if not small.exists():
        _write_file(small, 4, False)
    return paths


# --------------------------------------------------------------------------------------------------
# Implementations: each case gives {impl: zero-arg callable}
# --------------------------------------------------------------------------------------------------
DATASETS = ("obs", "reward", "nested/action")


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = torch.from_numpy(value)
    return out


def _span(ds: h5py.Dataset) -> np.ndarray:
    lo, hi = int(SORTED[0]), int(SORTED[-1]) + 1
    return ds[lo:hi][ROWS - lo]


def _fancy(ds: h5py.Dataset) -> np.ndarray:
    out = np.empty((K, *ds.shape[1:]), ds.dtype)
    out[ORDER] = ds[SORTED]
    return out


def _chunk(ds: h5py.Dataset) -> np.ndarray:
    step = ds.chunks[0]
    out = np.empty((K, *ds.shape[1:]), ds.dtype)
    ids = SORTED // step
    bounds = np.flatnonzero(np.diff(ids)) + 1
    for group in np.split(np.arange(K), bounds):
        start = int(ids[group[0]]) * step
        block = ds[start : min(start + step, N)]
        out[ORDER[group]] = block[SORTED[group] - start]
    return out


RAW_ROWS = {"span": _span, "fancy": _fancy, "chunk": _chunk}


def _lib_value(lib: Any, width: int, sort: bool) -> Any:
    v = VALUES[width]
    pick = ORDER if sort else slice(None)
    return lib.TensorDict(
        {
            "obs": torch.from_numpy(v["obs"][pick]),
            "reward": torch.from_numpy(v["reward"][pick]),
            "nested": {"action": torch.from_numpy(v["nested/action"][pick])},
        },
        batch_size=[K],
    )


def case_fns(
    name: str,
    libs: dict[str, Any],
    paths: dict[str, Path],
    folder: Path,
    opened: list[Any] | None = None,
    only: str | None = None,
) -> dict[str, Callable[[], Any]]:
    """The callables of one case, per implementation (``raw:<strategy>`` for the raw ones).

    The files they open (h5py files, PersistentTensorDicts) are appended to ``opened``, to be closed;
    ``only`` builds just that implementation. Without it, the libraries' callables run once here, before the
    raw code opens the file: HDF5 shares a dataset opened twice in a process, and its first open sets its chunk cache
    (tensorbatch opens an uncompressed chunked dataset with none). So the raw code reads those datasets
    without a chunk cache too, which makes none of its strategies slower (whole chunks are read straight
    into the result; a selection reads just its rows); its peak memory is measured on its own handles.
    """
    opened = [] if opened is None else opened
    kind, _, layout = name.partition("_")
    libs = {impl: lib for impl, lib in libs.items() if only in (None, impl)}
    fns: dict[str, Callable[[], Any]] = {}
    if kind in ("keys", "open"):
        path = paths.get("w64_contig", folder / "open.h5") if kind == "keys" else folder / "open.h5"
        for impl, lib in libs.items():
            if kind == "keys":
                ptd = lib.from_h5(str(path))
                opened.append(ptd)
                fns[impl] = lambda ptd=ptd: list(ptd.keys())
            else:
                fns[impl] = lambda lib=lib: lib.from_h5(str(path)).close()
        if only in (None, "raw") and kind == "keys":
            raw_file = h5py.File(path, "r")
            opened.append(raw_file)
            fns["raw"] = lambda: list(raw_file.keys())
        elif only in (None, "raw"):
            fns["raw"] = lambda: h5py.File(path, "r").close()
        return fns
    if kind == "tofile":  # a whole TensorDict written to a file that exists (truncated), then closed
        rows = TOFILE_ROWS[layout]
        leaves = {"obs": torch.ones(rows, 16), "reward": torch.ones(rows, 1), "action": torch.ones(rows, 4)}
        for impl, lib in libs.items():
            td = lib.TensorDict(
                {"obs": leaves["obs"], "reward": leaves["reward"], "nested": {"action": leaves["action"]}}, [rows]
            )
            fns[impl] = lambda td=td, target=str(folder / f"tofile.{impl}.h5"): td.to_h5(target).close()
        if only in (None, "raw"):
            arrays = {
                "obs": leaves["obs"].numpy(),
                "reward": leaves["reward"].numpy(),
                "nested/action": leaves["action"].numpy(),
            }

            def raw_tofile(target: str = str(folder / "tofile.raw.h5")) -> None:
                with h5py.File(target, "w") as f:
                    for ds_name, array in arrays.items():
                        f[ds_name] = array

            fns["raw"] = raw_tofile
        return fns
    width = _width(layout)
    if kind == "write":
        path = folder / f"{layout}.w.h5"
        values = VALUES[width]
        for impl, lib in libs.items():
            ptd = lib.from_h5(str(path), mode="r+")
            opened.append(ptd)
            sort = impl == "td"  # tensordict raises on unsorted rows
            rows, value = (SORTED if sort else ROWS), _lib_value(lib, width, sort)
            index = torch.from_numpy(rows)

            def lib_write(ptd: Any = ptd, index: torch.Tensor = index, value: Any = value) -> None:
                ptd[index] = value

            if only is None:
                lib_write()
            fns[impl] = lib_write
        if only in (None, "raw"):
            raw_file = h5py.File(path, "r+")
            opened.append(raw_file)

            def raw_write() -> None:
                for ds_name in DATASETS:
                    raw_file[ds_name][SORTED] = values[ds_name][ORDER]

            fns["raw"] = raw_write
        return fns
    path = paths[layout]
    index = torch.from_numpy(ROWS)
    for impl, lib in libs.items():
        ptd = lib.from_h5(str(path))
        opened.append(ptd)
        if kind == "rows":
            fns[impl] = lambda ptd=ptd: ptd[index].to_tensordict()
        elif kind == "totd":
            fns[impl] = lambda ptd=ptd: ptd.to_tensordict()
        elif kind == "slice":
            fns[impl] = lambda ptd=ptd: ptd[SLICE].to_tensordict()
        if only is None:
            fns[impl]()
    raws: dict[str, Callable[[dict[str, h5py.Dataset]], Any]] = {}
    if kind == "rows":
        for strategy, read in RAW_ROWS.items():
            if strategy != "chunk" or layout.endswith("chunked"):
                raws[f"raw:{strategy}"] = lambda dsets, read=read: _nest({n: read(ds) for n, ds in dsets.items()})
    elif kind == "totd":
        raws["raw"] = lambda dsets: _nest({n: ds[()] for n, ds in dsets.items()})
    elif kind == "slice":
        raws["raw"] = lambda dsets: _nest({n: ds[SLICE] for n, ds in dsets.items()})
    raws = {impl: fn for impl, fn in raws.items() if only in (None, impl)}
    if raws:
        raw_file = h5py.File(path, "r")
        opened.append(raw_file)
        dsets = {n: raw_file[n] for n in DATASETS}
        for impl, read_all in raws.items():
            fns[impl] = lambda read_all=read_all: read_all(dsets)
    return fns


def case_names(layouts: list[str]) -> list[str]:
    names = [f"{kind}_{layout}" for kind in ("rows", "write", "totd", "slice") for layout in layouts]
    return [*names, "keys", "open", *(f"tofile_{rows}" for rows in TOFILE_ROWS)]


# --------------------------------------------------------------------------------------------------
# Peak memory of one call, in a fresh interpreter
# --------------------------------------------------------------------------------------------------
def _status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", text).group(1)) * 1024 for k in ("VmRSS", "VmHWM")}


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    if hasattr(x, "to_dict"):
        return _nbytes(x.to_dict())
    return 0


def peak_child(names: list[str], folder: Path) -> None:
    """Child side of :func:`measure_peaks`: prints ``{case: {impl: [peak bytes, result bytes]}}``.

    Each call is measured on fresh handles: a first set of callables warms the interpreter (lazy imports,
    first-call allocations) and is closed, then a second set, opened anew, is measured on its first call.
    So the peak counts everything the read allocates and holds: the numpy/torch buffers, h5py's
    temporaries, and HDF5's own buffers (the chunk cache, up to ``rdcc_nbytes`` per open dataset, 8 MiB by
    default in HDF5 2; the sieve buffer of a contiguous dataset, 64 KiB): they are memory the read makes
    resident and keeps while the dataset is open. (Measured on the warmed handles instead, the chunk
    cache filled by the warm-up is already in the starting RSS and the peak hides it.)
    """
    import ctypes

    trim = ctypes.CDLL("libc.so.6").malloc_trim
    libs = load_libs()
    layouts = sorted({n.partition("_")[2] for n in names if n.partition("_")[2]})
    paths = prepare(folder, layouts)
    out: dict[str, dict[str, list[int]]] = {}
    for name in names:
        out[name] = {}
        opened: list[Any] = []
        impls = list(case_fns(name, libs, paths, folder, opened))
        for impl in impls:
            for handle in opened:
                handle.close()
            opened.clear()
            case_fns(name, libs, paths, folder, opened, impl)[impl]()  # warm-up, on handles closed below
            for handle in opened:
                handle.close()
            opened.clear()
            fn = case_fns(name, libs, paths, folder, opened, impl)[impl]  # fresh: its first call is measured
            gc.collect()
            trim(0)
            start = _status()["VmRSS"]
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            result = fn()
            out[name][impl] = [_status()["VmHWM"] - start, _nbytes(result)]
            del result, fn
        for handle in opened:
            handle.close()
    print(json.dumps(out))


PEAK_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}  # freed buffers leave the RSS


# --------------------------------------------------------------------------------------------------
# from_schema of 1 GB, in a fresh interpreter per implementation
# --------------------------------------------------------------------------------------------------
def schema_child(impl: str, folder: Path, repeats: int) -> None:
    """Child side of :func:`measure_schema`: prints ``{"ms": median, "rss": bytes, "disk": bytes}``."""
    libs = load_libs()
    times, disk, rss = [], 0, 0
    for i in range(repeats):
        path = folder / f"schema-{impl}-{i}.h5"
        path.unlink(missing_ok=True)
        gc.collect()
        start = _status()["VmRSS"]
        Path("/proc/self/clear_refs").write_text("5")
        t0 = time.perf_counter()
        if impl == "raw":
            with h5py.File(path, "w") as f:
                f.create_dataset("obs", shape=(SCHEMA_ROWS, 1024), dtype=np.float32)
        else:
            out = libs[impl].TensorDict.from_schema(
                {"obs": ([1024], torch.float32)}, batch_size=[SCHEMA_ROWS], storage="h5", filename=str(path)
            )
            out.close()
        times.append(time.perf_counter() - t0)
        rss = max(rss, _status()["VmHWM"] - start)
        disk = max(disk, path.stat().st_blocks * 512)
        path.unlink()
    print(json.dumps({"ms": statistics.median(times) * 1e3, "rss": rss, "disk": disk}))


def run_children(jobs: dict[str, tuple[list[str], dict[str, str]]], parallel: bool) -> dict[str, Any]:
    """Runs ``h5.py <args>`` per job in fresh interpreters (all at once when ``parallel``); parsed JSON outputs."""
    out: dict[str, Any] = {}
    procs: dict[str, subprocess.Popen] = {}

    def collect(name: str) -> None:
        stdout, stderr = procs[name].communicate(timeout=600)
        if procs[name].returncode == 0:
            out[name] = json.loads(stdout.strip().splitlines()[-1])
        else:
            print(f"{name} failed: {stderr[-2000:]}", file=sys.stderr)

    homes = [str(Path(m.__file__).resolve().parents[1]) for m in load_libs().values()]  # the same checkouts
    path = os.pathsep.join([*homes, os.environ.get("PYTHONPATH", "")])
    for name, (args, env) in jobs.items():
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, *args],
            env={**os.environ, **env, "PYTHONPATH": path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if not parallel:
            collect(name)
    for name in procs:
        if name not in out and procs[name].returncode is None:
            collect(name)
    return out


# --------------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------------
def load_libs() -> dict[str, Any]:
    libs = {}
    for impl, modname in (("tb", "tensorbatch"), ("td", "tensordict")):
        try:
            module = __import__(modname)
        except ImportError:
            continue
        if hasattr(module, "from_h5"):
            libs[impl] = module
        else:
            print(f"[{impl}] {modname} has no from_h5: skipped", file=sys.stderr)
    return libs


def time_case(
    fns: dict[str, Callable[[], Any]], repeats: int, target: float, round_robin: Callable, calibrate: Callable
) -> dict[str, float]:
    """Median µs per call of each callable, interleaved round-robin as ``run.run_case``."""
    ns = {}
    for impl, fn in fns.items():  # a call slower than a batch is timed alone: no calibration rounds
        t0 = time.perf_counter()
        fn()
        ns[impl] = 1 if time.perf_counter() - t0 > target else calibrate(fn, target)
    gc.collect()
    samples = round_robin(fns, ns, repeats)
    return {impl: statistics.median(s) * 1e6 for impl, s in samples.items()}


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def report(results: list[dict], schema: dict[str, dict[str, float]]) -> list[str]:
    head = (
        f"{'case':<22}{'tb (µs)':>11}{'td (µs)':>11}{'raw (µs)':>11} {'raw is':<7}{'tb/td':>7}{'tb/raw':>7}"
        f"{'td/raw':>7}{'tb MB':>8}{'td MB':>8}{'raw MB':>8}{'res MB':>8}"
    )
    print(head)
    print("-" * len(head))
    misses = []
    for res in results:
        us, peak = res["us"], res.get("peak", {})
        raws = {k: v for k, v in us.items() if k.startswith("raw")}
        best = min(raws, key=raws.get) if raws else None
        raw = raws.get(best) if best else None
        tb, td = us.get("tb"), us.get("td")
        tb_raw = tb / raw if tb and raw else None
        mb = {impl: p[0] / 2**20 for impl, p in peak.items()}
        result_mb = peak[best][1] / 2**20 if best in peak else None
        print(
            f"{res['case']:<22}{_fmt(tb):>11}{_fmt(td):>11}{_fmt(raw):>11} {(best or '-').removeprefix('raw:'):<7}"
            f"{_fmt(tb / td if tb and td else None):>7}{_fmt(tb_raw):>7}{_fmt(td / raw if td and raw else None):>7}"
            f"{_fmt(mb.get('tb'), '.1f'):>8}{_fmt(mb.get('td'), '.1f'):>8}{_fmt(mb.get(best), '.1f'):>8}"
            f"{_fmt(result_mb, '.2f'):>8}"
        )
        kind = res["case"].split("_")[0]
        if tb_raw is not None and kind in TARGETS and tb_raw > TARGETS[kind]:
            misses.append(f"{res['case']}: tb/raw {tb_raw:.2f} > {TARGETS[kind]}")
        if kind == "rows" and "tb" in peak and peak["tb"][0] > 2 * peak["tb"][1]:
            misses.append(f"{res['case']}: tb peak {mb['tb']:.1f} MB > 2x the result {result_mb:.2f} MB")
    print("-" * len(head))
    if schema:
        print(
            "from_schema 1 GiB (storage='h5'):  "
            + "   ".join(
                f"{i} {r['ms']:.1f} ms, RSS +{r['rss'] / 2**20:.1f} MB, {r['disk'] / 2**20:.1f} MB on disk"
                for i, r in schema.items()
            )
        )
        tb = schema.get("tb")
        if tb and (tb["ms"] >= 50 or tb["rss"] >= 10 * 2**20 or tb["disk"] >= 2**20):
            misses.append(
                f"from_schema: tb {tb['ms']:.1f} ms, +{tb['rss'] / 2**20:.1f} MB RSS, "
                f"{tb['disk'] / 2**20:.1f} MB on disk (targets < 50 ms, < 10 MB, no data)"
            )
    measured = any("tb" in res["us"] for res in results) or "tb" in schema
    verdict = f"{len(misses)} miss" if misses else "all hold" if measured else "not checked (no tensorbatch timings)"
    print(f"speed targets (tb/raw per case kind, from_schema): {verdict}")
    for miss in misses:
        print(f"  miss: {miss}")
    return misses


def main(
    args: argparse.Namespace,
    round_robin: Callable,
    calibrate: Callable,
    facts: Callable[[dict[str, Any]], dict[str, Any]] = lambda libs: {},
) -> None:
    """``run.py --suite h5``: times every case (and peaks, from_schema), prints the table and targets.

    ``facts(libs)`` gives the run's facts (machine, load, versions) for the JSON's ``meta``.
    """
    folder = Path(args.h5_dir) if getattr(args, "h5_dir", None) else DEFAULT_DIR
    names = [n for n in case_names(list(LAYOUTS)) if args.cases in n] + (
        ["from_schema"] if args.cases in "from_schema" else []
    )
    layouts = sorted({n.partition("_")[2] for n in names if n.partition("_")[2] in LAYOUTS})
    paths = prepare(folder, layouts or ["w64_contig"])
    libs = load_libs()
    repeats = args.repeats or (3 if args.quick else 15)
    results = []
    timed = [n for n in names if n != "from_schema"]
    for name in timed:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        fns = case_fns(name, libs, paths, folder)
        results.append({"case": name, "us": time_case(fns, repeats, args.target_ms / 1e3, round_robin, calibrate)})
        del fns
        gc.collect()
    peak_names = [n for n in timed if n.startswith("rows") or n.startswith("slice")]
    jobs: dict[str, tuple[list[str], dict[str, str]]] = {}
    if peak_names:
        jobs["peak"] = (["--peak-child", str(folder), *peak_names], PEAK_ENV)
    if "from_schema" in names:
        for impl in ["raw", *libs]:
            if impl == "td" and args.quick:  # it writes the whole GB (~15 s here): full runs only
                continue
            repeats = 1 if impl == "td" else (3 if args.quick else 7)
            jobs[f"schema:{impl}"] = (["--schema-child", impl, str(folder), str(repeats)], {})
    print("measuring peak memory and from_schema in fresh interpreters ...", file=sys.stderr, flush=True)
    children = run_children(jobs, parallel=args.quick)  # --quick: at once, to keep it short
    for res in results:
        res["peak"] = children.get("peak", {}).get(res["case"], {})
    schema = {k.removeprefix("schema:"): v for k, v in children.items() if k.startswith("schema:")}
    misses = report(results, schema)
    if args.json:
        meta = {**facts(libs), "repeats": args.repeats or (3 if args.quick else 15)}
        out = {"meta": meta, "results": results, "from_schema": schema, "misses": misses}
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    if sys.argv[1] == "--peak-child":
        peak_child(sys.argv[3:], Path(sys.argv[2]))
    elif sys.argv[1] == "--schema-child":
        schema_child(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit("run it through benchmarks/run.py --suite h5")
