"""Data to and from the GPU, small GPU ops, a compiled step and a vmap ensemble: tb vs tensordict vs raw.

    .venv/bin/python benchmarks/run.py --suite gpu [--quick] [--cases d2h] [--json out.json]
    .venv/bin/python benchmarks/gpu.py --device cpu --small     # the logic on a machine without CUDA

Without CUDA (and no ``--device``) it says so and exits 0. Every case builds its data once per implementation:
``tb`` (tensorbatch), ``td`` (tensordict 0.15.3) and ``raw`` (the same work by hand on a dict of tensors: the
floor). Timing is interleaved round-robin, the start order rotating per repeat; each timed call is bounded by a
device synchronisation before and after (the time until the data is usable), and the median over the repeats
is reported, with GB/s for the transfers. Data for the transfers: 64 float32 leaves in 8 nested groups,
batch ``[1024]`` (``--small``: [64], for a logic check), ~262 MB in all.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

IMPLS = ("tb", "td", "raw")
Case = Callable[[Any, "Env"], Callable[[], Any]]
CASES: dict[str, Case] = {}
TRANSFERS: set[str] = set()  # cases that move the whole data set: reported with GB/s


class Env:
    """Where a case runs: the accelerator (``dev``), the host and the data size."""

    def __init__(self, device: str, rows: int) -> None:
        self.dev = torch.device(device)
        self.rows = rows

    def host_tree(self, pinned: bool = False) -> dict[str, dict[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        tree = {f"g{i}": {f"x{j}": torch.randn(self.rows, 1024, generator=g) for j in range(8)} for i in range(8)}
        if pinned and self.dev.type == "cuda":
            tree = {k: {j: v.pin_memory() for j, v in sub.items()} for k, sub in tree.items()}
        return tree

    def nbytes(self) -> int:
        return 64 * self.rows * 1024 * 4

    def sync(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)


def case(transfer: bool = False) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[fn.__name__] = fn
        if transfer:
            TRANSFERS.add(fn.__name__)
        return fn

    return register


def _td(lib: Any, tree: dict[str, Any], rows: int, device: Any = None) -> Any:
    return lib.TensorDict(tree, batch_size=[rows], device=device)


def _flat(tree: dict[str, dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    return [v for sub in tree.values() for v in sub.values()]


def _raw_move(
    tree: dict[str, dict[str, torch.Tensor]], device: torch.device, env: Env, pin: bool = False, threads: int = 0
) -> Callable[[], Any]:
    """The floor: every leaf copied non-blocking (pinned first with ``pin``), one synchronisation."""

    def one(v: torch.Tensor) -> torch.Tensor:
        return (v.pin_memory() if pin else v).to(device, non_blocking=True)

    if threads:
        pool = ThreadPoolExecutor(threads)

        def run_threads() -> Any:
            out = list(pool.map(one, _flat(tree)))
            env.sync()
            return out

        return run_threads

    def run() -> Any:
        out = {k: {j: one(v) for j, v in sub.items()} for k, sub in tree.items()}
        env.sync()
        return out

    return run


# ------------------------------------------------------------------------------------------------ transfers
@case(transfer=True)
def d2h_default(lib: Any, env: Env) -> Callable[[], Any]:
    """``td.to("cpu")`` of data on the GPU (the library synchronises where it must)."""
    tree = {k: {j: v.to(env.dev) for j, v in sub.items()} for k, sub in env.host_tree().items()}
    if lib is None:
        return _raw_move(tree, torch.device("cpu"), env)
    td = _td(lib, tree, env.rows, env.dev)
    return lambda: td.to("cpu")


@case(transfer=True)
def d2h_consolidated(lib: Any, env: Env) -> Callable[[], Any]:
    """``td.to("cpu")`` of a consolidated TensorDict on the GPU (one buffer)."""
    tree = env.host_tree()
    if lib is None:
        buffer = torch.cat([v.reshape(-1).view(torch.uint8) for v in _flat(tree)]).to(env.dev)

        def run() -> Any:
            out = buffer.to("cpu", non_blocking=True)
            env.sync()
            return out

        return run
    td = _td(lib, tree, env.rows).consolidate().to(env.dev)
    return lambda: td.to("cpu")


@case(transfer=True)
def consolidate_then_h2d(lib: Any, env: Env) -> Callable[[], Any]:
    """``td.consolidate().to("cuda")``: packing into one buffer, then one copy."""
    tree = env.host_tree()
    if lib is None:

        def run() -> Any:
            out = torch.cat([v.reshape(-1).view(torch.uint8) for v in _flat(tree)]).to(env.dev, non_blocking=True)
            env.sync()
            return out

        return run
    td = _td(lib, tree, env.rows)
    return lambda: td.consolidate().to(env.dev)


def _h2d_case(
    name: str,
    doc: str,
    move: Callable[[Any, torch.device], Any],
    pinned: bool = False,
    pin: bool = False,
    threads: int = 0,
) -> None:
    """A host-to-device case: ``move(td, device)`` vs the raw floor (pinned source leaves with ``pinned``)."""

    def setup(lib: Any, env: Env) -> Callable[[], Any]:
        tree = env.host_tree(pinned=pinned)
        if lib is None:
            return _raw_move(tree, env.dev, env, pin=pin, threads=threads)
        td = _td(lib, tree, env.rows)
        return lambda: move(td, env.dev)

    setup.__name__, setup.__doc__ = name, doc
    CASES[name] = setup
    TRANSFERS.add(name)


_h2d_case("h2d_default", '``td.to("cuda")`` from pageable host memory.', lambda td, dev: td.to(dev))
_h2d_case(
    "h2d_pin_on_the_fly",
    '``td.to("cuda", non_blocking_pin=True)``: each leaf pinned, then copied.',
    lambda td, dev: td.to(dev, non_blocking_pin=True),
    pin=True,
)
_h2d_case(
    "h2d_pin_8_threads",
    '``td.to("cuda", non_blocking_pin=True, num_threads=8)``.',
    lambda td, dev: td.to(dev, non_blocking_pin=True, num_threads=8),
    pin=True,
    threads=8,
)
_h2d_case(
    "pinned_h2d_default",
    '``td.to("cuda")`` of a TensorDict whose leaves are pinned.',
    lambda td, dev: td.to(dev),
    pinned=True,
)
_h2d_case(
    "pinned_h2d_non_blocking",
    '``td.to("cuda", non_blocking=True)`` of pinned leaves (the timing waits).',
    lambda td, dev: td.to(dev, non_blocking=True),
    pinned=True,
)


@case(transfer=True)
def consolidated_pinned_h2d(lib: Any, env: Env) -> Callable[[], Any]:
    """``td.to("cuda")`` of a TensorDict consolidated into pinned memory (one buffer)."""
    tree = env.host_tree()
    pin = env.dev.type == "cuda"
    if lib is None:
        buffer = torch.cat([v.reshape(-1).view(torch.uint8) for v in _flat(tree)])
        buffer = buffer.pin_memory() if pin else buffer

        def run() -> Any:
            out = buffer.to(env.dev, non_blocking=True)
            env.sync()
            return out

        return run
    td = _td(lib, tree, env.rows).consolidate(pin_memory=pin)
    return lambda: td.to(env.dev)


# ------------------------------------------------------------------------------------------- small GPU ops
def _small(lib: Any, env: Env) -> Any:
    g = torch.Generator().manual_seed(1)
    tree = {f"k{i}": torch.randn(256, 64, generator=g).to(env.dev) for i in range(20)}
    return tree if lib is None else lib.TensorDict(tree, batch_size=[256], device=env.dev)


def _op_case(name: str, on_td: Callable[[Any], Any], on_raw: Callable[[dict[str, Any]], Any]) -> None:
    def setup(lib: Any, env: Env) -> Callable[[], Any]:
        data = _small(lib, env)
        return (lambda: on_raw(data)) if lib is None else (lambda: on_td(data))

    setup.__name__ = name
    setup.__doc__ = f"{name} on 20 leaves [256, 64] on the GPU"
    CASES[name] = setup


_IDX = torch.arange(0, 256, 4)
_op_case("gpu_add", lambda td: td + td, lambda d: {k: v + v for k, v in d.items()})
_op_case("gpu_mul", lambda td: td * 2.0, lambda d: {k: v * 2.0 for k, v in d.items()})
_op_case("gpu_add_", lambda td: td.add_(1.0), lambda d: [v.add_(1.0) for v in d.values()])
_op_case("gpu_apply_tanh", lambda td: td.apply(torch.tanh), lambda d: {k: torch.tanh(v) for k, v in d.items()})
_op_case(
    "gpu_index_64_rows", lambda td: td[_IDX.to(td.device)], lambda d: {k: v[_IDX.to(v.device)] for k, v in d.items()}
)
_op_case("gpu_stack_8", lambda td: torch.stack([td] * 8), lambda d: {k: torch.stack([v] * 8) for k, v in d.items()})
_op_case("gpu_sum", lambda td: td.sum(), lambda d: {k: v.sum() for k, v in d.items()})


# ------------------------------------------------------------------------- a compiled step, a vmap ensemble
@case()
def compiled_sgd_step(lib: Any, env: Env) -> Callable[[], Any]:
    """The SGD-like step of benchmarks/compiled.py (10 leaves), compiled with inductor, in place, steady state."""
    import compiled  # (benchmarks/compiled.py, beside this file)

    data = compiled.make_data(lib)
    data = (
        {g: {k: v.to(env.dev) for k, v in sub.items()} for g, sub in data.items()} if lib is None else data.to(env.dev)
    )
    fn = compiled.own_code(
        compiled.step_inplace_raw if lib is None else compiled.step_inplace_td, "raw" if lib is None else lib.__name__
    )
    step = torch.compile(fn)
    for _ in range(3):  # compiled and warm before the timing
        step(data)
    return lambda: step(data)


@case()
def vmap_ensemble(lib: Any, env: Env) -> Callable[[], Any]:
    """Forward and backward of 8 MLPs at once (vmap over stacked parameters), on the GPU."""
    torch.manual_seed(0)
    modules = [
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).to(env.dev)
        for _ in range(8)
    ]
    x = torch.randn(64, 16, device=env.dev)
    base = copy.deepcopy(modules[0]).to("meta")
    if lib is None:
        params, buffers = stack_module_state(modules)  # type: ignore[arg-type]
        fn = torch.vmap(lambda p, b, x: functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))
        return lambda: fn(params, buffers, x).sum().backward()
    stacked = lib.TensorDict.from_modules(*modules)

    def call(p: Any, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(base):
            return base(x)

    vfn = torch.vmap(call, (0, None))
    return lambda: vfn(stacked, x).sum().backward()


# ---------------------------------------------------------------------------------------------- the timing
def time_case(name: str, libs: dict[str, Any], env: Env, repeats: int) -> dict[str, Any]:
    """Median seconds per call of each implementation, interleaved round-robin, synchronise-bounded."""
    fns: dict[str, Callable[[], Any]] = {}
    errors: dict[str, str] = {}
    for impl, lib in libs.items():
        try:
            fn = CASES[name](lib, env)
            fn()  # warm: allocator caches, pinned-memory cache, compiled kernels
            env.sync()
            fns[impl] = fn
        except Exception as err:  # a case one library cannot run is reported, not fatal
            errors[impl] = f"{type(err).__name__}: {err}"
    times: dict[str, list[float]] = {impl: [] for impl in fns}
    order = list(fns)
    gc.collect()
    for r in range(repeats):
        for impl in order[r % len(order) :] + order[: r % len(order)]:
            env.sync()
            t0 = time.perf_counter()
            out = fns[impl]()
            env.sync()
            times[impl].append(time.perf_counter() - t0)
            del out
    return {"case": name, "median": {i: statistics.median(t) for i, t in times.items()}, "errors": errors}


def report(results: list[dict[str, Any]], env: Env) -> None:
    print(f"{'case':26} " + " ".join(f"{i:>10}" for i in IMPLS) + "   tb/td  tb/raw   GB/s tb / td / raw")
    for res in results:
        med = res["median"]
        cells = " ".join(f"{med[i] * 1e3:9.3f}m" if i in med else f"{'-':>10}" for i in IMPLS)
        ratios = [f"{med['tb'] / med[o]:6.2f}x" if "tb" in med and o in med else "      -" for o in ("td", "raw")]
        rates = ""
        if res["case"] in TRANSFERS:
            rates = " / ".join(f"{env.nbytes() / med[i] / 1e9:.1f}" if i in med else "-" for i in IMPLS)
        print(f"{res['case']:26} {cells}  {ratios[0]} {ratios[1]}   {rates}")
        for impl, err in res["errors"].items():
            print(f"    error [{impl}]: {err}", file=sys.stderr)


def run(libs: dict[str, Any], device: str | None, repeats: int, only: str = "", small: bool = False) -> list[Any]:
    """Run the suite (``device`` None: CUDA, else skip); returns the results."""
    if device is None:
        if not torch.cuda.is_available():
            print("gpu suite skipped: no CUDA device (use --device cpu to check the logic)")
            return []
        device = "cuda"
    env = Env(device, 64 if small else 1024)
    results = []
    for name in [n for n in CASES if only in n]:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(time_case(name, libs, env, repeats))
    report(results, env)
    return results


def main(args: Any, libs: dict[str, Any]) -> list[Any]:
    """``run.py --suite gpu`` (its ``--cases``, ``--quick``, ``--repeats``)."""
    repeats = args.repeats or (7 if args.quick else 15)
    return run(libs, getattr(args, "device", None), repeats, args.cases, getattr(args, "small", False))


if __name__ == "__main__":
    import importlib

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", help="cuda (default when available) or cpu (a logic check)")
    parser.add_argument("--small", action="store_true", help="batch [64] instead of [1024]")
    parser.add_argument("--cases", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    ns = parser.parse_args()
    loaded: dict[str, Any] = {}
    for impl, mod in (("tb", "tensorbatch"), ("td", "tensordict")):
        try:
            loaded[impl] = importlib.import_module(mod)
        except ImportError as exc:
            print(f"[{impl}] {mod} not importable: {exc}", file=sys.stderr)
    loaded["raw"] = None
    main(ns, loaded)
