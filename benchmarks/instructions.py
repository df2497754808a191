"""Instructions per call of benchmark cases under callgrind: an A/B check that load on the machine cannot move.

Wall and CPU times on a shared 2-core box swing by +-50%, too much to see a 5% change; the number of
instructions a case executes is the same from run to run (within ~0.5%), so comparing two source trees
by it shows what a code change costs. It is a proxy (a cache miss or a slow instruction costs more
than one), so use it beside ``ab.py``, not instead of it. Needs ``valgrind`` (``callgrind_control``).

Usage:
    python benchmarks/instructions.py OLD_TREE NEW_TREE [--cases a,b] [--calls 200]
    python benchmarks/instructions.py --libs [--cases module_64,sequence_64] [--calls 200]

``--libs`` counts the installed tensorbatch, tensordict and the raw floor side by side instead (default cases:
the nn suite's eager ones), and prints each library's overhead over raw and their ratio.

Each tree is a checkout (its ``tensorbatch`` is imported); the cases come from this folder. The import
runs uninstrumented; each case is warmed up, then counted over ``--calls`` calls inside one
``functools.reduce`` (callgrind collects only inside that C function and dumps after it).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(calls: int, names: list[str], lib_name: str = "tensorbatch") -> None:
    """Run inside valgrind: warm each case, switch instrumentation on, count each in its own reduce."""
    sys.path.insert(0, str(HERE))
    import importlib

    import cases  # (the tree under test is on PYTHONPATH)
    import cases_h5
    import cases_lazy
    import cases_nn
    import cases_store
    import cases_typed
    import cases_vmap
    import torch

    lib = None if lib_name == "raw" else importlib.import_module(lib_name)
    torch.set_num_threads(1)
    pool = {
        **cases.CASES,
        **cases_lazy.CASES,
        **cases_typed.CASES,
        **cases_vmap.CASES,
        **cases_nn.CASES,
        **cases_store.CASES,  # (a server is started on first use: its instructions are not counted)
        **cases_h5.CASES,
    }
    fns = [pool[name](lib) for name in names]
    for fn in fns:
        for _ in range(300):
            fn()
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    gc.disable()
    for fn in fns:
        functools.reduce(lambda acc, _, fn=fn: (fn(), acc)[1], range(calls), 0)


def count(tree: str, names: list[str], calls: int, lib: str = "tensorbatch") -> dict[str, int]:
    """Instructions per call of each case with ``tree``'s tensorbatch (or ``lib``: tensordict, raw)."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--dump-after=functools_reduce",
            "--dump-instr=no",
            f"--callgrind-out-file={out}/cg.out",
            sys.executable,
            __file__,
            "--child",
            str(calls),
            lib,
            *names,
        ]
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=3600)
        dumps = sorted(Path(out).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))[-len(names) :]
        result = {}
        for name, dump in zip(names, dumps, strict=True):
            line = next(t for t in dump.read_text().splitlines() if t.startswith(("summary:", "totals:")))
            result[name] = int(line.split()[1]) // calls
        return result


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(int(sys.argv[2]), sys.argv[4:], sys.argv[3])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", nargs="?")
    p.add_argument("new", nargs="?")
    p.add_argument("--libs", action="store_true", help="tensorbatch vs tensordict vs raw in the current tree")
    p.add_argument(
        "--cases",
        help="comma-separated case names (default: run.py's 'all' suite; the vmap suite's "
        "cases by name, e.g. vmap_enter_leave; the HDF5 ones of cases_h5.py, e.g. h5_slice,h5_rows)",
    )
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    import run

    if args.libs:
        names = args.cases.split(",") if args.cases else [n for n in run.cases_nn.CASES if "compiled" not in n]
        tree = str(HERE.parent)
        counts = {lib: count(tree, names, args.calls, lib) for lib in ("tensorbatch", "tensordict", "raw")}
        print(f"{'case':<26} {'tb':>10} {'td':>10} {'raw':>10} {'tb-raw':>9} {'td-raw':>9} {'over':>6} {'tb/raw':>7}")
        for name in names:
            tb, td, raw = (counts[lib][name] for lib in ("tensorbatch", "tensordict", "raw"))
            over = f"{(tb - raw) / (td - raw):.2f}" if td > raw else "-"  # tb's overhead over raw / td's
            print(f"{name:<26} {tb:>10} {td:>10} {raw:>10} {tb - raw:>9} {td - raw:>9} {over:>6} {tb / raw:>7.3f}")
        return
    if not (args.old and args.new):
        p.error("OLD_TREE and NEW_TREE are required without --libs")
    names = args.cases.split(",") if args.cases else list(run.CASES)
    old, new = count(args.old, names, args.calls), count(args.new, names, args.calls)
    print(f"{'case':<22} {'old':>10} {'new':>10} {'new/old':>8}")
    for name in sorted(names, key=lambda n: new[n] / old[n], reverse=True):
        flag = "  <- over 1.05" if new[name] > 1.05 * old[name] else ""
        print(f"{name:<22} {old[name]:>10} {new[name]:>10} {new[name] / old[name]:>8.3f}{flag}")


if __name__ == "__main__":
    main()
