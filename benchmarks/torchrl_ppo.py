"""TorchRL PPO iterations on tensorbatch (through the compat switch) vs on tensordict.

    .venv/bin/python benchmarks/torchrl_ppo.py [--rounds 5] [--iters 4] [--frames 256]

One PPO iteration, as a TorchRL user writes it: a ``Collector`` steps ``PointEnv`` (a torch-only environment,
8 in parallel) with a ``ProbabilisticActor`` (``TanhNormal``) for ``--frames`` frames, ``GAE`` computes the
advantage, the batch goes into a ``ReplayBuffer`` over ``LazyTensorStorage``, and ``ClipPPOLoss`` makes 4
epochs of minibatches of 64 with Adam steps. Each library runs in its own process (the switch changes what
``import tensordict`` gives): a child process builds everything, runs one untimed iteration, then times
``--iters`` iterations in CPU time (``time.process_time``, so other load on the machine counts less). The
parent alternates the two libraries ``--rounds`` times and prints the medians and their ratio (target: at
most 1.0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "compat" / "scripts"


def child(iters: int, frames: int) -> None:
    """Time PPO iterations in this process (``--switch`` in argv: on tensorbatch)."""
    sys.path.insert(0, str(SCRIPTS))
    from _common import PointEnv, actor_critic  # (first: it installs the switch when asked)
    # isort: split

    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers import SamplerWithoutReplacement
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(0)
    env = PointEnv((8,))
    env.set_seed(0)
    actor, critic = actor_critic(env, 64)
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    loss_module = ClipPPOLoss(actor, critic)
    optim = torch.optim.Adam(loss_module.parameters(), lr=3e-4)
    collector = Collector(env, actor, frames_per_batch=frames, total_frames=frames * (iters + 1))
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames), sampler=SamplerWithoutReplacement(), batch_size=64)
    times = []
    start = time.process_time()
    for data in collector:
        with torch.no_grad():
            advantage(data)
        buffer.extend(data.reshape(-1))
        for _ in range(4):
            for batch in buffer:
                losses = loss_module(batch)
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                total.backward()
                optim.step()
        collector.update_policy_weights_()
        now = time.process_time()
        times.append(now - start)
        start = time.process_time()  # (the collector's next batch is part of the next iteration)
    collector.shutdown()
    print(json.dumps(times[1:]))  # the first iteration warms up


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--frames", type=int, default=256)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--switch", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.iters, args.frames)
        return
    samples: dict[str, list[float]] = {"tensordict": [], "tensorbatch": []}
    for r in range(args.rounds):
        order = ["tensordict", "tensorbatch"] if r % 2 == 0 else ["tensorbatch", "tensordict"]
        for lib in order:
            cmd = [sys.executable, __file__, "--child", "--iters", str(args.iters), "--frames", str(args.frames)]
            if lib == "tensorbatch":
                cmd.append("--switch")
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
            samples[lib] += json.loads(out.stdout.strip().splitlines()[-1])
    med = {lib: statistics.median(s) * 1e3 for lib, s in samples.items()}
    print(
        f"PPO iteration ({args.frames} frames, 4 epochs of minibatches of 64), CPU ms, median of "
        f"{len(samples['tensorbatch'])}: tensordict {med['tensordict']:.1f}, tensorbatch {med['tensorbatch']:.1f}, "
        f"tb/td {med['tensorbatch'] / med['tensordict']:.3f}"
    )


if __name__ == "__main__":
    main()
