"""Before/after: tensorbatch from two source trees, timed by ``run.py`` in alternating runs.

Usage::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/ab.py /tmp/before . --rounds 3 -- --suite all --quick --clock cpu

Each round runs ``benchmarks/run.py`` (of this tree, so both sides time the same cases) once with
``PYTHONPATH=<before>`` and once with ``PYTHONPATH=<after>``, in alternating order. Per case it reports the
median over rounds of tb's time and of tb/td, and after/before of both: tb/td cancels most of the machine's
drift between runs (tensordict is the same in both), tb's own time is the direct comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(tree: str, out: Path, extra: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    subprocess.run(
        [sys.executable, str(HERE / "run.py"), "--json", str(out), *extra],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def _per_case(runs: list[dict]) -> dict[str, tuple[float, float]]:
    """case -> (median tb us, median tb/td) over the runs."""
    tb: dict[str, list[float]] = {}
    ratio: dict[str, list[float]] = {}
    for run in runs:
        for res in run["results"]:
            us = res["us"]
            if us.get("tb") and us.get("td"):
                tb.setdefault(res["case"], []).append(us["tb"])
                ratio.setdefault(res["case"], []).append(us["tb"] / us["td"])
    return {case: (statistics.median(tb[case]), statistics.median(ratio[case])) for case in tb}


def main() -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", help="source tree (its root, holding tensorbatch/) timed as 'before'")
    p.add_argument("after", help="source tree timed as 'after'")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", metavar="PATH", help="write the per-case table as JSON")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # what follows -- goes to run.py
    args = p.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                print(f"round {r + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                runs[side].append(_run(getattr(args, side), Path(tmp) / f"{side}{r}.json", args.extra))
    before, after = _per_case(runs["before"]), _per_case(runs["after"])
    rows = sorted(((after[c][1] / before[c][1], c) for c in after if c in before), reverse=True)
    print(
        f"{'case':30s} {'tb us before':>12s} {'after':>9s} {'after/before':>12s} "
        f"{'tb/td before':>12s} {'after':>7s} {'after/before':>12s}"
    )
    table = {}
    for change, case in rows:
        (tb0, r0), (tb1, r1) = before[case], after[case]
        table[case] = {"tb_us": [tb0, tb1], "tb_td": [r0, r1]}
        print(f"{case:30s} {tb0:12.2f} {tb1:9.2f} {tb1 / tb0:12.3f} {r0:12.3f} {r1:7.3f} {change:12.3f}")
    geo = statistics.geometric_mean
    print(
        f"geomean tb/td: before {geo(v[1] for v in before.values()):.3f}, after {geo(v[1] for v in after.values()):.3f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
