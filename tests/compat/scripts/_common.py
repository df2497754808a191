"""Shared by the TorchRL scripts: the switch (``--switch``) and a tiny torch-only environment.

Run a script with ``--switch`` to import tensordict as tensorbatch, without it to use the real tensordict;
both runs print the same numbers when tensorbatch behaves as tensordict.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

warnings.filterwarnings("ignore")
if "--switch" in sys.argv:
    import tensorbatch.compat

    tensorbatch.compat.install()

import torch  # noqa: E402
from tensordict import TensorDict, TensorDictBase  # noqa: E402
from torchrl.data import Bounded, Composite, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402

torch.set_num_threads(1)
_expected = "tensorbatch" if "--switch" in sys.argv else "tensordict"
assert TensorDict.__module__.startswith(_expected), TensorDict.__module__


class PointEnv(EnvBase):
    """A point on a line: the action pushes it, the reward is minus its distance to the origin, 8 steps an episode."""

    def __init__(self, batch_size: tuple[int, ...] = ()) -> None:
        super().__init__(batch_size=torch.Size(batch_size))
        self.rng = torch.Generator().manual_seed(0)
        shape = self.batch_size
        self.observation_spec = Composite(observation=Unbounded((*shape, 3)), steps=Unbounded((*shape, 1)), shape=shape)
        self.action_spec = Bounded(-1.0, 1.0, (*shape, 1))
        self.reward_spec = Unbounded((*shape, 1))

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        obs = torch.randn((*self.batch_size, 3), generator=self.rng)
        return TensorDict(observation=obs, steps=torch.zeros((*self.batch_size, 1)), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs = tensordict["observation"] + 0.5 * tensordict["action"] * torch.tensor([1.0, -1.0, 0.5])
        steps = tensordict.get("steps", torch.zeros((*self.batch_size, 1))) + 1
        done = steps >= 8
        return TensorDict(
            observation=obs,
            steps=steps,
            reward=-obs.norm(dim=-1, keepdim=True),
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed: int | None) -> None:
        self.rng = torch.Generator().manual_seed(seed or 0)


def actor_critic(env: EnvBase, width: int) -> tuple[Any, Any]:
    """A PPO actor (MLP, NormalParamExtractor, TanhNormal in [-1, 1], log-prob) and critic, ``width`` wide."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, 2), NormalParamExtractor()),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        return_log_prob=True,
    )
    critic = ValueOperator(nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, 1)), in_keys=["observation"])
    return actor, critic


def show(label: str, value: float | torch.Tensor) -> None:
    """One line per number: the tests compare these."""
    print(f"{label} {float(value):.6e}")
