"""Environments, transforms and replay buffers of TorchRL: transformed and batched envs (SerialEnv), spec checks,
prioritized and slice sampling, buffer checkpoints, and the A2C/DDPG/TD3 losses. Prints numbers
(``--switch``: on tensorbatch)."""

from __future__ import annotations

import tempfile

from _common import PointEnv, show  # (first: it installs the switch)

# isort: split

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SliceSampler,
    TensorDictReplayBuffer,
)
from torchrl.envs import Compose, ObservationNorm, RewardSum, SerialEnv, StepCounter, TransformedEnv
from torchrl.envs.utils import check_env_specs, step_mdp
from torchrl.modules import MLP, Actor, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import A2CLoss, DDPGLoss, TD3Loss
from torchrl.objectives.value import TD0Estimator, TDLambdaEstimator

torch.manual_seed(0)
env = TransformedEnv(
    PointEnv(),
    Compose(StepCounter(max_steps=6), RewardSum(), ObservationNorm(in_keys=["observation"], loc=0.5, scale=2.0)),
)
env.set_seed(0)
check_env_specs(env)
rollout = env.rollout(10)
show("transformed.len", rollout.shape[0])
show("transformed.episode_reward", rollout["next", "episode_reward"][-1].sum())
show("transformed.step_count", rollout["next", "step_count"].sum())
nxt = step_mdp(rollout[0])
show("step_mdp.keys", len(list(nxt.keys(True, True))))

batched = PointEnv(batch_size=(4,))
batched.set_seed(1)
data = batched.rollout(5, break_when_any_done=False)
show("batched.reward", data["next", "reward"].sum())
show("batched.shape", data.numel())

serial = SerialEnv(2, PointEnv)
serial.set_seed(2)
sdata = serial.rollout(4)
show("serial.reward", sdata["next", "reward"].sum())
serial.close()

# replay buffers
flat = data.reshape(-1)
# (PrioritizedSampler needs TorchRL's C++ extension, which does not load on torch 2.13 with either library)
rb = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=8)
rb.extend(flat)
sample = rb.sample()
show("tdrb.sample", sample["next", "reward"].sum())
show("tdrb.index", sample["index"].sum())

traj = data.clone()
traj["traj_ids"] = torch.arange(4).unsqueeze(-1).expand(4, 5)
slices = ReplayBuffer(
    storage=LazyTensorStorage(64), sampler=SliceSampler(num_slices=2, traj_key="traj_ids"), batch_size=6
)
slices.extend(traj.reshape(-1))
show("slice.sample", slices.sample()["next", "reward"].sum())

lst = ReplayBuffer(storage=ListStorage(10), batch_size=3)
lst.extend([TensorDict(a=torch.tensor(float(i))) for i in range(5)])
show("list.sample", sum(td["a"] for td in lst.sample()) if isinstance(lst.sample(), list) else lst.sample()["a"].sum())

with tempfile.TemporaryDirectory() as folder:
    mm = ReplayBuffer(storage=LazyMemmapStorage(32, scratch_dir=folder + "/scratch"), batch_size=4)
    mm.extend(flat)
    mm.dumps(folder + "/ckpt")
    again = ReplayBuffer(storage=LazyMemmapStorage(32), batch_size=4)
    again.loads(folder + "/ckpt")
    show("checkpoint.len", len(again))
    show("checkpoint.reward", again[:]["next", "reward"].sum())

# losses
actor = ProbabilisticActor(
    TensorDictModule(
        nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    ),
    in_keys=["loc", "scale"],
    spec=batched.action_spec[0],
    distribution_class=TanhNormal,
    distribution_kwargs={"low": -1.0, "high": 1.0},
    return_log_prob=True,
)
critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[16]), in_keys=["observation"])
a2c = A2CLoss(actor, critic)
a2c.make_value_estimator(gamma=0.9)
out = a2c(flat.clone())
for key in ("loss_objective", "loss_critic", "loss_entropy"):
    show(f"a2c.{key}", out[key])


class QValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1))


det_actor = Actor(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), in_keys=["observation"], spec=batched.action_spec[0])
qvalue = ValueOperator(QValue(), in_keys=["observation", "action"])
ddpg = DDPGLoss(det_actor, qvalue)
ddpg.make_value_estimator(gamma=0.9)
out = ddpg(flat.clone())
show("ddpg.loss_actor", out["loss_actor"])
show("ddpg.loss_value", out["loss_value"])
td3 = TD3Loss(det_actor, ValueOperator(QValue(), in_keys=["observation", "action"]), action_spec=batched.action_spec[0])
td3.make_value_estimator(gamma=0.9)
out = td3(flat.clone())
show("td3.loss_actor", out["loss_actor"])
show("td3.loss_qvalue", out["loss_qvalue"])
for name, estimator in (
    ("td0", TD0Estimator(gamma=0.9, value_network=critic)),
    ("tdlambda", TDLambdaEstimator(gamma=0.9, lmbda=0.9, value_network=critic)),
):
    show(f"{name}.advantage", estimator(data.clone())["advantage"].sum())
print("done")
