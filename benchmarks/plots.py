"""Charts and tables of benchmark results: the images and tables the docs' benchmarks page shows.

Reads result files written by ``benchmarks/run.py --json PATH`` (any suite whose results are
``{"case", "us": {impl: µs}}`` rows: core, lazy, typed, nn, vmap, store, compile, h5) and writes, per file, a
horizontal bar chart of the time ratios tensorbatch/raw and tensordict/raw per case (log scale, a line at 1.0),
titled with the machine and library facts of the file's ``meta``. The suite's name is the file's stem
(``data/core.json`` gives ``core.svg``); the compile suite's file gives a second chart, of compile times
(``compile_time.svg``).

Usage (from the repository root; matplotlib comes with the ``docs`` extra)::

    .venv/bin/python benchmarks/plots.py docs/benchmarks/data/*.json --out docs/benchmarks --page docs/benchmarks.md

``--page`` also rewrites, in that Markdown page, the block between ``<!-- plots:SUITE -->`` and
``<!-- /plots:SUITE -->`` of each suite: the image, a caption quoting the run's facts, and the table of medians
and ratios. Each image carries the cases it plots and their ratios in its metadata (``plotted(path)`` reads them
back), so a test can tell an image made from other results without comparing pixels.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import struct
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IMPLS = ("tb", "td", "raw")
NAMES = {"tb": "tensorbatch", "td": "tensordict", "raw": "raw"}
RATIOS = (("tb", "raw"), ("td", "raw"))
COLORS = {"tb": "#1f77b4", "td": "#ff7f0e"}
FORMATS = ("svg", "png")
META_KEY = "Description"  # the image metadata entry that carries the plotted cases (PNG tEXt, SVG dc:description)


class ResultFileError(ValueError):
    """A result file that is not what ``benchmarks/run.py --json`` writes; the message names the file and entry."""


@dataclass
class Suite:
    """One chart: its name, the run's facts and the median time per implementation of each case.

    ``what`` names the measure (the chart's title), ``unit`` its unit (the table's headers): the compile suite's
    file gives two, steady-state µs per call and seconds per compile.
    """

    name: str
    meta: dict[str, Any]
    rows: list[tuple[str, dict[str, float]]] = field(default_factory=list)
    source: str = ""
    what: str = "median time"
    unit: str = "µs"

    def ratios(self) -> list[tuple[str, float | None, float | None]]:
        """``(case, tb/raw, td/raw)`` per case that has raw and at least one library, ratios to 4 digits.

        Example:
            >>> Suite("s", {}, [("a", {"tb": 2.0, "raw": 1.0})]).ratios()
            [('a', 2.0, None)]
        """
        out = []
        for case, us in self.rows:
            pair = tuple(_sig(us[a] / us[b]) if a in us and b in us else None for a, b in RATIOS)
            if pair != (None, None):
                out.append((case, pair[0], pair[1]))
        return out


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def load(path: str | Path) -> Suite:
    """Reads and checks one result file: its ``us`` times (:func:`load_all` also reads compile times).

    Raises:
        ResultFileError: the file is missing, not JSON, or its ``results`` are not rows of
            ``{"case": str, "us": {impl: positive number}}`` (the message names the file and the entry).
    """
    return load_all(path)[0]


def load_all(path: str | Path) -> list[Suite]:
    """Every chart a result file gives: its ``us`` times, then (``--suite compile``) its compile times.

    Raises:
        ResultFileError: as :func:`load`; also a ``compile_s`` entry that is not ``{impl: {"median": seconds}}``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read the result file ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ResultFileError(
            f"{path}: no 'results' list at the top level: not a file written by benchmarks/run.py --json"
        )
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise ResultFileError(f"{path}: 'meta' must be an object, got {type(meta).__name__}")
    compiled = any(isinstance(row, dict) and "compile_s" in row for row in data["results"])
    suite = Suite(path.stem, meta, source=str(path), what="median steady-state time" if compiled else "median time")
    per_compile = {k: v for k, v in meta.items() if k != "repeats"}
    if "compile_repeats" in meta:
        per_compile["repeats"] = meta["compile_repeats"]
    if "clock" in meta:
        per_compile["clock"] = "wall"  # compiled.py times a compile by the wall clock, whatever --clock says
    compile_time = Suite(f"{path.stem}_time", per_compile, source=str(path), what="median compile time", unit="s")
    for i, row in enumerate(data["results"]):
        where = f"{path}: results[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("case"), str):
            raise ResultFileError(f"{where}: each result must be an object with a 'case' name")
        where += f" ({row['case']!r})"
        us = row.get("us")
        if not isinstance(us, dict) or not us:
            raise ResultFileError(f"{where}: 'us' must map implementation names to median microseconds")
        for impl, value in us.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ResultFileError(f"{where}: 'us'[{impl!r}] must be a positive number, got {value!r}")
        times = {k: float(v) for k, v in us.items()}
        raws = [v for k, v in times.items() if k.startswith("raw_")]
        if "raw" not in times and raws:  # h5.py times several raw h5py strategies: the floor is the best of them
            times["raw"] = min(raws)
        suite.rows.append((row["case"], {k: v for k, v in times.items() if not k.startswith("raw_")}))
        if compiled:
            compile_time.rows.append((row["case"], _compile_seconds(row.get("compile_s"), where)))
    if not suite.ratios():
        raise ResultFileError(f"{path}: no case has a 'raw' time and a library's time: nothing to plot")
    return [suite, compile_time] if compiled else [suite]


def _compile_seconds(entry: Any, where: str) -> dict[str, float]:
    if not isinstance(entry, dict) or not entry:
        raise ResultFileError(f"{where}: 'compile_s' must map implementation names to {{'median': seconds}}")
    out = {}
    for impl, value in entry.items():
        median = value.get("median") if isinstance(value, dict) else None
        if isinstance(median, bool) or not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
            raise ResultFileError(f"{where}: 'compile_s'[{impl!r}]['median'] must be a positive number, got {value!r}")
        out[impl] = float(median)
    return out


def facts(meta: dict[str, Any]) -> str:
    """The run's facts as one line (machine, load, torch, Python, threads, clock, repeats), from ``meta``.

    Example:
        >>> facts({"torch": "2.13.0", "cpus": 2, "threads": 1, "clock": "wall"})
        '2 CPUs, torch 2.13.0, 1 thread, wall clock'
    """
    parts = []
    if "platform" in meta:
        parts.append(str(meta["platform"]) + (f" {meta['machine']}" if meta.get("machine") else ""))
    if "cpus" in meta:
        parts.append(f"{meta['cpus']} CPUs")
    if "load_before" in meta:
        parts.append(f"load {meta['load_before']}" + (f"-{meta['load_after']}" if "load_after" in meta else ""))
    if "torch" in meta:
        parts.append(f"torch {meta['torch']}")
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    parts += [f"{NAMES.get(impl, impl)} {version}" for impl, version in versions.items()]
    if "python" in meta:
        parts.append(f"Python {meta['python']}")
    if "threads" in meta:
        parts.append(f"{meta['threads']} thread" + ("s" if meta["threads"] != 1 else ""))
    if "clock" in meta:
        parts.append(f"{meta['clock']} clock")
    if "repeats" in meta:
        parts.append(f"median of {meta['repeats']}")
    if "date" in meta:
        parts.append(str(meta["date"]))
    return ", ".join(parts)


def plot(suite: Suite, out: str | Path, fmt: str = "svg") -> Path:
    """Writes the suite's bar chart as ``OUT/NAME.FMT`` and returns its path.

    Raises:
        ValueError: an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = suite.ratios()
    cases = [case for case, _, _ in rows]
    height = 0.38
    fig, ax = plt.subplots(figsize=(10, 2.4 + 0.3 * len(rows)))
    try:
        for k, (impl, _) in enumerate(RATIOS):
            ys = [i + (k - 0.5) * height for i in range(len(rows))]
            values = [r[1 + k] for r in rows]
            shown = [(y, v) for y, v in zip(ys, values, strict=True) if v is not None]
            if shown:
                ax.barh(  # from the line at 1.0: left of it faster than raw, right of it slower
                    [y for y, _ in shown],
                    [v - 1.0 for _, v in shown],
                    height=height,
                    left=1.0,
                    color=COLORS[impl],
                    label=f"{NAMES[impl]} / raw",
                )
        ax.set_xscale("log")
        values = [v for r in rows for v in r[1:] if v is not None]
        lo, hi = min(0.8, *(0.8 * v for v in values)), max(1.25, *(1.25 * v for v in values))
        ax.set_xlim(lo, hi)
        ticks = _ticks(lo, hi)
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(len(rows)), cases, fontsize=9)
        ax.invert_yaxis()
        ax.set_xlabel(f"{suite.what} / raw (log scale; < 1: faster than the hand-written dict code)")
        ax.grid(axis="x", which="both", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)  # outside: never on a bar
        title = "\n".join([f"{suite.name}: {suite.what} of each case / raw", *textwrap.wrap(facts(suite.meta), 100)])
        ax.set_title(title, fontsize=9, loc="left")
        fig.tight_layout()
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{suite.name}.{fmt}"
        carried = json.dumps({"suite": suite.name, "ratios": rows})
        if fmt == "svg":
            with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": suite.name}):
                fig.savefig(path, format="svg", metadata={"Date": None, META_KEY: carried})
        else:
            fig.savefig(path, format="png", dpi=100, metadata={META_KEY: carried})
    finally:
        plt.close(fig)
    return path


def _ticks(lo: float, hi: float) -> list[float]:
    """Labelled ticks of a log axis from ``lo`` to ``hi``: 1, 2, 5 per decade, finer when the span is short.

    Example:
        >>> _ticks(0.5, 30)
        [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
        >>> _ticks(0.7, 1.6)
        [0.8, 1.0, 1.25, 1.5]
    """
    marks = (1, 2, 5) if hi / lo > 8 else (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    return [t for e in decades for m in marks if lo <= (t := round(m * 10.0**e, 6)) <= hi]


def plotted(path: str | Path) -> dict[str, Any]:
    """What an image written by :func:`plot` shows: ``{"suite": name, "ratios": [[case, tb/raw, td/raw], ...]}``.

    Raises:
        ResultFileError: the image carries no such record (not written by this script).
    """
    path = Path(path)
    data = path.read_bytes()
    text = None
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        at = 8
        while at + 8 <= len(data):
            (size,) = struct.unpack(">I", data[at : at + 4])
            kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + size]
            if kind == b"tEXt" and body.partition(b"\0")[0] == META_KEY.encode():
                text = body.partition(b"\0")[2].decode("latin-1")
            at += 12 + size
    else:
        found = re.search(r"<dc:description>(.*?)</dc:description>", data.decode("utf-8", "replace"), flags=re.S)
        text = html.unescape(found.group(1)) if found else None
    if text is None:
        raise ResultFileError(f"{path}: no plotted-cases record in the image (not written by benchmarks/plots.py)")
    record: dict[str, Any] = json.loads(text)
    return record


def table(suite: Suite) -> str:
    """The suite's Markdown table: median time per implementation and the ratios tb/td, tb/raw, td/raw.

    Example:
        >>> print(table(Suite("s", {}, [("a", {"tb": 2.0, "td": 4.0, "raw": 1.0})])))
        | case | tensorbatch (µs) | tensordict (µs) | raw (µs) | tb/td | tb/raw | td/raw |
        | --- | ---: | ---: | ---: | ---: | ---: | ---: |
        | a | 2.00 | 4.00 | 1.00 | 0.50 | 2.00 | 4.00 |
    """
    lines = [
        "| case | " + " | ".join(f"{NAMES[i]} ({suite.unit})" for i in IMPLS) + " | tb/td | tb/raw | td/raw |",
        "| --- |" + " ---: |" * (len(IMPLS) + 3),
    ]
    for case, us in suite.rows:
        cells = [(f"{us[i]:,.2f}" if suite.unit == "µs" else f"{us[i]:.3g}") if i in us else "-" for i in IMPLS]
        cells += [f"{us[a] / us[b]:.2f}" if a in us and b in us else "-" for a, b in (("tb", "td"), *RATIOS)]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def geomeans(suite: Suite) -> str:
    """One line: the geometric mean of each ratio over the cases that have it."""
    parts = []
    for a, b in (("tb", "td"), *RATIOS):
        rs = [us[a] / us[b] for _, us in suite.rows if a in us and b in us]
        if rs:
            parts.append(f"{a}/{b} {math.exp(sum(map(math.log, rs)) / len(rs)):.2f}")
    return "Geometric means over the cases: " + ", ".join(parts) + "."


def block(suite: Suite, image: str) -> str:
    """The page block of one suite: the image, a caption with the run's facts, the geomeans and the table."""
    return "\n".join(
        [
            f"![{suite.name}: time ratios of tensorbatch and tensordict to raw]({image})",
            "",
            f"Measured: {facts(suite.meta) or 'the file records no facts of its run'}. The machine is shared and"
            " noisy (load: the 1-minute load average when the run began and ended, other work running beside it):"
            " read single-case ratios within about 5% as ties.",
            "",
            geomeans(suite),
            "",
            table(suite),
        ]
    )


def update_page(page: str | Path, blocks: dict[str, str]) -> list[str]:
    """Replaces each ``<!-- plots:NAME -->`` ... ``<!-- /plots:NAME -->`` block of the page; returns the names done.

    Raises:
        ResultFileError: a suite has no such block in the page (add the two marker lines where it should go).
    """
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- plots:{re.escape(name)} -->\n).*?(<!-- /plots:{re.escape(name)} -->)", re.S)
        if not pattern.search(text):
            raise ResultFileError(
                f"{page}: no '<!-- plots:{name} -->' ... '<!-- /plots:{name} -->' block for suite {name!r}"
            )
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    page.write_text(text, encoding="utf-8")
    return list(blocks)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: charts (and with ``--page``, the page's blocks) from result files."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="RESULT.json", help="files written by benchmarks/run.py --json")
    p.add_argument("--out", default=".", help="folder for the images (default: the current folder)")
    p.add_argument("--format", choices=FORMATS, default="svg", help="image format (default svg)")
    p.add_argument("--page", help="a Markdown page whose <!-- plots:SUITE --> blocks to rewrite")
    args = p.parse_args(argv)
    try:
        suites = [suite for f in args.files for suite in load_all(f)]
        paths = [plot(s, args.out, args.format) for s in suites]
        if args.page:
            page = Path(args.page)
            where = {
                s.name: Path(os.path.relpath(path, page.parent)).as_posix()
                for s, path in zip(suites, paths, strict=True)
            }
            update_page(page, {s.name: block(s, where[s.name]) for s in suites})
    except ResultFileError as exc:
        print(f"plots.py: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
