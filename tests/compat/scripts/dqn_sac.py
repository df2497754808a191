"""DQN and SAC losses on a batch of PointEnv transitions (a random rollout). Prints the losses and the
gradient norms (``--switch``: on tensorbatch)."""

from __future__ import annotations

from _common import PointEnv, show  # (first: it installs the switch)

# isort: split

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import OneHot
from torchrl.modules import MLP, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator
from torchrl.objectives import DQNLoss, SACLoss, SoftUpdate

torch.manual_seed(0)
env = PointEnv()
env.set_seed(0)
data = env.rollout(16)  # random actions
show("rollout.reward", data["next", "reward"].sum())

# DQN: three discrete actions as a one-hot
spec = OneHot(3)
qnet = QValueActor(MLP(in_features=3, out_features=3, num_cells=[16]), in_keys=["observation"], spec=spec)
dqn = DQNLoss(qnet, action_space=spec, delay_value=True)
batch = data.clone()
batch["action"] = torch.nn.functional.one_hot(torch.randint(3, batch.shape), 3)
out = dqn(batch)
show("dqn.loss", out["loss"])
out["loss"].backward()
show("dqn.grad", sum(p.grad.norm() for p in qnet.parameters() if p.grad is not None))
updater = SoftUpdate(dqn, eps=0.5)
updater.step()
show("dqn.after_update", dqn(batch)["loss"])

# SAC
actor = ProbabilisticActor(
    TensorDictModule(
        nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    ),
    in_keys=["loc", "scale"],
    spec=env.action_spec,
    distribution_class=TanhNormal,
    distribution_kwargs={"low": -1.0, "high": 1.0},
    return_log_prob=True,
)


class QValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1))


qvalue = ValueOperator(QValue(), in_keys=["observation", "action"], out_keys=["state_action_value"])
sac = SACLoss(actor, qvalue, num_qvalue_nets=2, action_spec=env.action_spec)
sac.make_value_estimator(gamma=0.9)
losses = sac(data.clone())
for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
    show(f"sac.{key}", losses[key])
(losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]).backward()
show("sac.grad", sum(p.grad.norm() for p in sac.parameters() if p.grad is not None))
print(isinstance(losses, TensorDict), sorted(losses.keys()))
print("done")
