"""A few PPO iterations on PointEnv: Collector (SyncDataCollector), ProbabilisticActor (TanhNormal), GAE, ClipPPOLoss,
replay buffers over LazyTensorStorage and LazyMemmapStorage. Prints the losses (``--switch``: on tensorbatch)."""

from __future__ import annotations

import tempfile

from _common import PointEnv, actor_critic, show  # (first: it installs the switch)

# isort: split

import torch
from torchrl.collectors import Collector
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import SamplerWithoutReplacement
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

torch.manual_seed(0)
env = PointEnv()
env.set_seed(0)
actor, critic = actor_critic(env, 16)
advantage = GAE(gamma=0.9, lmbda=0.95, value_network=critic)
loss_module = ClipPPOLoss(actor, critic)
optim = torch.optim.Adam(loss_module.parameters(), lr=1e-2)
frames = 32
collector = Collector(env, actor, frames_per_batch=frames, total_frames=3 * frames)
with tempfile.TemporaryDirectory() as scratch:
    buffers = [
        ReplayBuffer(storage=LazyTensorStorage(frames), sampler=SamplerWithoutReplacement(), batch_size=16),
        ReplayBuffer(
            storage=LazyMemmapStorage(frames, scratch_dir=scratch), sampler=SamplerWithoutReplacement(), batch_size=16
        ),
    ]
    for it, data in enumerate(collector):
        show(f"iter{it}.reward", data["next", "reward"].sum())
        with torch.no_grad():
            advantage(data)
        show(f"iter{it}.advantage", data["advantage"].abs().sum())
        buffer = buffers[it % 2]
        buffer.extend(data.reshape(-1))
        for step, batch in enumerate(buffer):
            losses = loss_module(batch)
            total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            for key in ("loss_objective", "loss_critic", "loss_entropy"):
                show(f"iter{it}.{step}.{key}", losses[key])
            optim.zero_grad()
            total.backward()
            optim.step()
        collector.update_policy_weights_()
    show("memmap.reward", buffers[1][:]["next", "reward"].sum())
collector.shutdown()
print("done")
