"""Compiled training-style step: tensorbatch vs tensordict vs the same step on a plain dict of tensors.

    .venv/bin/python benchmarks/run.py --suite compile [--quick] [--cases inplace] [--backend inductor] [--cold]

Data: 10 leaves, ``small`` (5 x [128, 16]) and ``large`` (5 x [4096, 64]) float32, batch size ``[]``; raw holds
the same tensors in nested plain dicts. One step reads a leaf, applies an MLP-like pointwise map to every leaf
(``tanh(p * scale + 0.1)``) and makes an SGD-like update with it: a new tree (``step``) or in place
(``step_inplace``). Each implementation compiles its own function (``torch.compile``, default options).

Per case and implementation:
- steady state: median (and min) per call of the compiled function, interleaved round-robin as ``run.py``;
- compile time: the first call after ``torch._dynamo.reset()`` (a fresh dynamo cache), the implementations
  interleaved per repeat (3 repeats, 5 with ``--repeats``/full runs). One untimed compile of each implementation
  comes first, so torch's on-disk caches (the inductor FX graph cache, AOT autograd's and the compiled kernels)
  are as warm for all: the time is then mostly dynamo tracing the library's Python, which is what differs.
  ``--cold`` switches the FX graph and AOT autograd caches off (lowering and code generation in every compile);
- graphs, graph breaks and guards (``torch._dynamo.explain``), the frames compiled over 5 calls (a
  recompile would show here) and the bytecodes dynamo traces (its instruction translators' steps: what
  the library's Python adds to a compile).
The closing lines check the targets: steady state within 1.05x tensordict and 1.1x raw, compile time within
1.25x raw.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

LEAVES = {"small": (128, 16), "large": (4096, 64)}
PER_GROUP = 5
LR = 0.01
TARGETS = (("steady", "tb", "td", 1.05), ("steady", "tb", "raw", 1.1), ("compile", "tb", "raw", 1.25))


def make_data(lib: Any) -> Any:
    """The 10 leaves (seeded): a TensorDict of ``lib``, or nested plain dicts when ``lib`` is None."""
    g = torch.Generator().manual_seed(0)
    tree = {
        group: {str(i): torch.randn(*shape, generator=g) for i in range(PER_GROUP)} for group, shape in LEAVES.items()
    }
    return tree if lib is None else lib.TensorDict(tree, batch_size=[])


def _act(p: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.tanh(p * scale + 0.1)


def step_td(td: Any) -> Any:
    scale = td["small", "0"].mean()  # read
    grads = td.apply(lambda p: _act(p, scale))  # MLP-like apply
    return td - grads * LR  # SGD-like update, as a new tree


def step_raw(tree: dict) -> dict:
    scale = tree["small"]["0"].mean()
    grads = {g: {k: _act(p, scale) for k, p in sub.items()} for g, sub in tree.items()}
    return {g: {k: p - grads[g][k] * LR for k, p in sub.items()} for g, sub in tree.items()}


def step_inplace_td(td: Any) -> Any:
    scale = td["small", "0"].mean()
    grads = td.apply(lambda p: _act(p, scale))
    td.sub_(grads * LR)  # the update as an optimizer does it: in place
    return td


def step_inplace_raw(tree: dict) -> dict:
    scale = tree["small"]["0"].mean()
    for sub in tree.values():
        for p in sub.values():
            p.sub_(_act(p, scale) * LR)
    return tree


CASES: dict[str, tuple[Callable, Callable]] = {
    "step": (step_td, step_raw),
    "step_inplace": (step_inplace_td, step_inplace_raw),
}


def leaves(out: Any) -> list[torch.Tensor]:
    """The leaves of a result in key order (``small`` then ``large``), for checking the impls agree."""
    return [out[g][k] if isinstance(out, dict) else out[g, k] for g in LEAVES for k in map(str, range(PER_GROUP))]


def own_code(fn: Callable, impl: str) -> Callable:
    """``fn`` with a code object of its own: dynamo caches compiled frames per code object, and tb and td
    sharing one would make each call check the other's guards first."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{impl}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def compile_once(fn: Callable, data: Any, backend: str) -> tuple[Callable, float]:
    """A fresh dynamo cache, ``fn`` compiled and called once: the compiled function and that call's seconds."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    t0 = time.perf_counter()
    compiled(data)
    return compiled, time.perf_counter() - t0


def traced_bytecodes(fn: Callable, data: Any) -> int:
    """Bytecodes dynamo traces to compile ``fn`` (its translators' steps, eager backend; -1 if torch moved them).

    Tracing is most of a compile's time that differs between the implementations: this counts it exactly.
    """
    translator = getattr(torch._dynamo.symbolic_convert, "InstructionTranslatorBase", None)
    if translator is None or not hasattr(translator, "step"):
        return -1
    count = 0
    step = translator.step

    def counting(self: Any) -> Any:
        nonlocal count
        count += 1
        return step(self)

    translator.step = counting
    try:
        torch._dynamo.reset()
        torch.compile(fn, backend="eager")(data)
    finally:
        translator.step = step
    return count


def diagnose(fn: Callable, data: Any, backend: str) -> dict[str, int]:
    """Graphs, graph breaks, guards and traced bytecodes of ``fn`` on ``data``, frames compiled over 5 calls."""
    bytecodes = traced_bytecodes(fn, data)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(data)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = torch.compile(fn, backend=backend)
    for _ in range(5):
        compiled(data)
    return {
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "guards": len(explained.out_guards),
        "frames": counters["stats"]["unique_graphs"],
        "bytecodes": bytecodes,
    }


def run_case(
    name: str, libs: dict[str, Any], args: argparse.Namespace, round_robin: Callable, calibrate: Callable
) -> dict:
    """Times one case for every implementation: steady state, compile time, diagnostics."""
    td_fn, raw_fn = CASES[name]
    fns = {impl: own_code(raw_fn if lib is None else td_fn, impl) for impl, lib in libs.items()}
    data = {impl: make_data(lib) for impl, lib in libs.items()}
    res: dict[str, Any] = {"case": name, "diag": {}, "compile_s": {}, "us": {}, "min_us": {}}
    for impl in libs:
        res["diag"][impl] = diagnose(fns[impl], make_data(libs[impl]), args.backend)
    # check: the implementations compute the same step (fresh data, one call each)
    outs = {
        impl: leaves(compile_once(fns[impl], make_data(lib), args.backend)[0](make_data(lib)))
        for impl, lib in libs.items()
    }
    for impl, got in outs.items():
        for a, b in zip(got, outs["raw"], strict=True):
            torch.testing.assert_close(a, b, msg=f"{name}: {impl} differs from raw")
    # compile time: one untimed compile of each first (warm on-disk caches for all), then interleaved repeats
    for impl in libs:
        compile_once(fns[impl], data[impl], args.backend)
    order = list(libs)
    samples: dict[str, list[float]] = {impl: [] for impl in order}
    for r in range(args.compile_repeats):
        for impl in order[r % len(order) :] + order[: r % len(order)]:
            samples[impl].append(compile_once(fns[impl], data[impl], args.backend)[1])
    res["compile_s"] = {impl: {"median": statistics.median(s), "min": min(s)} for impl, s in samples.items()}
    # steady state: every compiled function kept (dynamo's cache is per code object: reset once, compile all)
    torch._dynamo.reset()
    calls = {}
    for impl in order:
        compiled = torch.compile(fns[impl], backend=args.backend)
        compiled(data[impl])
        compiled(data[impl])
        calls[impl] = lambda c=compiled, d=data[impl]: c(d)
    gc.collect()
    ns = {impl: calibrate(fn, args.target_ms / 1e3) for impl, fn in calls.items()}
    gc.collect()
    steady = round_robin(calls, ns, args.steady_repeats)
    res["us"] = {impl: statistics.median(s) * 1e6 for impl, s in steady.items()}
    res["min_us"] = {impl: min(s) * 1e6 for impl, s in steady.items()}
    return res


def _ratio(res: dict, kind: str, a: str, b: str) -> float | None:
    if kind == "steady":
        got = res["us"]
        return got[a] / got[b] if a in got and b in got else None
    got = res["compile_s"]
    return got[a]["median"] / got[b]["median"] if a in got and b in got else None


def report(results: list[dict], backend: str) -> list[str]:
    """Prints the table and the target checks; returns the missed targets."""
    impls = [i for i in ("tb", "td", "raw") if i in results[0]["us"]]
    print(f"backend: {backend}")
    head = (
        f"{'case':<14}{'impl':<6}{'steady µs':>11}{'(min)':>10}{'compile s':>11}{'(min)':>8}"
        f"{'graphs':>8}{'breaks':>8}{'guards':>8}{'frames':>8}{'bytecodes':>11}"
    )
    print(head)
    print("-" * len(head))
    for res in results:
        for impl in impls:
            c, d = res["compile_s"][impl], res["diag"][impl]
            print(
                f"{res['case']:<14}{impl:<6}{res['us'][impl]:>11.1f}{res['min_us'][impl]:>10.1f}"
                f"{c['median']:>11.3f}{c['min']:>8.3f}{d['graphs']:>8}{d['breaks']:>8}{d['guards']:>8}"
                f"{d['frames']:>8}{d['bytecodes']:>11}"
            )
    print("-" * len(head))
    misses = []
    for res in results:
        parts = []
        for kind, a, b, target in TARGETS:
            r = _ratio(res, kind, a, b)
            if r is None:
                continue
            ok = r <= target
            parts.append(f"{kind} {a}/{b} {r:.2f} (<= {target}: {'ok' if ok else 'MISSED'})")
            if not ok:
                misses.append(f"{res['case']}: {kind} {a}/{b} {r:.2f} > {target}")
        for kind, a, b in (("steady", "td", "raw"), ("compile", "tb", "td")):
            r = _ratio(res, kind, a, b)
            if r is not None:
                parts.append(f"{kind} {a}/{b} {r:.2f}")
        print(f"{res['case']}: " + "; ".join(parts))
    sys.stdout.flush()
    return misses


def main(
    args: argparse.Namespace,
    round_robin: Callable,
    calibrate: Callable,
    libs: dict[str, Any],
    facts: Callable[[], dict[str, Any]] = dict,
) -> None:
    """``run.py --suite compile``: runs the cases, prints the table and the targets (``--json``: writes them).

    ``facts()`` gives the run's facts (machine, load, versions) for the JSON's ``meta``.
    """
    if args.cold:  # lowering and code generation in every compile, not only dynamo's tracing
        torch._inductor.config.fx_graph_cache = False
        torch._functorch.config.enable_autograd_cache = False
    args.compile_repeats = args.repeats or (3 if args.quick else 5)
    args.steady_repeats = 15 if args.quick else 30
    names = [n for n in CASES if args.cases in n]
    if not names:
        sys.exit(f"no case matches {args.cases!r}; available: {', '.join(CASES)}")
    results = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(run_case(name, libs, args, round_robin, calibrate))
    misses = report(results, args.backend)
    if args.json:
        meta = {
            **facts(),
            "torch": torch.__version__,
            "backend": args.backend,
            "cold": args.cold,
            "repeats": args.steady_repeats,
            "compile_repeats": args.compile_repeats,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "misses": misses}, indent=2))
