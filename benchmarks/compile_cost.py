"""Where a compile of the ``compiled.py`` step goes: Python call events per traced line, per phase.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_cost.py [--case step|step_inplace] [--impl tb|raw] [--top 40]

Compile time on a shared box swings too much to see a 2% change; the number of Python (and C) function
calls dynamo makes while it compiles is the same from run to run, and follows its time (tracing, guards
and code generation are all Python). This counts them with ``sys.setprofile`` during one compile (eager
backend, after a warm-up compile) and gives each to the bytecode dynamo was tracing (exclusive of the
calls it inlined), so a line of the library shows what it costs: per call, guard and object far more than
per bytecode. Phases: guard building (``CheckFunctionManager``), the graph's compile and the code that
rebuilds the outputs (``compile_subgraph``, ``codegen_suffix``).

Rough costs measured with it (torch 2.13): an inlined call 1.5-3k events, a guard ~500, a traced tensor op
~1.5k, a cheap bytecode 20-120, a new object with 5 attributes ~2.5k (and its rebuilding when returned).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

import torch
import torch._dynamo.guards as dynamo_guards
import torch._dynamo.output_graph as dynamo_output
from torch._dynamo import symbolic_convert

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="step", choices=list(compiled.CASES))
    parser.add_argument("--impl", default="tb", choices=["tb", "raw"])
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()

    import tensorbatch

    lib = tensorbatch if args.impl == "tb" else None
    td_fn, raw_fn = compiled.CASES[args.case]
    fn = compiled.own_code(td_fn if lib else raw_fn, args.impl)

    events = [0]
    busy = [False]  # this tool's own bookkeeping: not counted
    per_line: collections.Counter[tuple[Any, ...]] = collections.Counter()
    steps: collections.Counter[tuple[Any, ...]] = collections.Counter()
    phases: collections.Counter[str] = collections.Counter()
    stack = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if (event == "call" or event == "c_call") and not busy[0]:
            events[0] += 1

    translator = symbolic_convert.InstructionTranslatorBase
    step = translator.step

    def counted_step(self: Any) -> Any:
        busy[0] = True
        ip = self.instruction_pointer
        inst = self.instructions[ip] if ip is not None and ip < len(self.instructions) else None
        line = inst.positions.lineno if inst is not None and getattr(inst, "positions", None) else None
        key = (Path(self.f_code.co_filename).name, self.f_code.co_name, line, inst.opname if inst else None)
        stack.append(0)
        start = events[0]
        busy[0] = False
        try:
            return step(self)
        finally:
            busy[0] = True
            spent = events[0] - start
            per_line[key] += spent - stack.pop()
            steps[key] += 1
            stack[-1] += spent
            busy[0] = False

    def phase(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def counted(*a: Any, **k: Any) -> Any:
            start = events[0]
            try:
                return original(*a, **k)
            finally:
                phases[label] += events[0] - start

        setattr(owner, name, counted)

    phase(dynamo_guards.CheckFunctionManager, "__init__", "guards")
    phase(dynamo_output.OutputGraph, "compile_subgraph", "compile_subgraph (in RETURN_VALUE)")
    phase(dynamo_output.OutputGraph, "codegen_suffix", "codegen_suffix (outputs rebuilt)")
    translator.step = counted_step
    torch._dynamo.reset()
    torch.compile(fn, backend="eager")(compiled.make_data(lib))  # warm-up: imports, caches
    per_line.clear()
    steps.clear()
    phases.clear()
    torch._dynamo.reset()
    data = compiled.make_data(lib)
    compiled_fn = torch.compile(fn, backend="eager")
    events[0] = 0
    sys.setprofile(profile)
    try:
        compiled_fn(data)
    finally:
        sys.setprofile(None)
        translator.step = step
    print(
        f"{args.case} {args.impl}: {events[0]} events, {sum(steps.values())} bytecodes traced "
        f"({sum(per_line.values())} events in them)"
    )
    for label, n in phases.items():
        print(f"  {label}: {n}")
    by_function: collections.Counter[tuple[str, str]] = collections.Counter()
    for key, n in per_line.items():
        by_function[key[:2]] += n
    print("per function (exclusive):")
    for (file, name), n in by_function.most_common(args.top // 2):
        print(f"  {n:8d}  {file}:{name}")
    print("per line and opcode (exclusive): events, times traced")
    for key, n in per_line.most_common(args.top):
        print(f"  {n:8d} {steps[key]:5d}  {key[0]}:{key[2]} {key[1]} {key[3]}")


if __name__ == "__main__":
    main()
