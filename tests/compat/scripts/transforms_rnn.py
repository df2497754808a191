"""More of TorchRL: transforms (InitTracker, StepCounter, CatFrames, UnsqueezeTransform, TensorDictPrimer, VecNorm),
an LSTM policy in both recurrent modes, MultiStep, split_trajectories, the Trajectory tensorclass (a field named
``data``), LazyStackStorage and a 2-dim LazyTensorStorage. Prints numbers (``--switch``: on tensorbatch)."""

from __future__ import annotations

from _common import PointEnv, show  # (first: it installs the switch)

# isort: split

import torch
from tensordict import TensorDict, lazy_stack
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors.utils import split_trajectories
from torchrl.data import LazyStackStorage, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.data.postprocs import MultiStep
from torchrl.data.replay_buffers.query import Trajectory
from torchrl.envs import (
    CatFrames,
    Compose,
    InitTracker,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    UnsqueezeTransform,
    VecNorm,
)
from torchrl.modules import LSTMModule, set_recurrent_mode

torch.manual_seed(0)
env = TransformedEnv(
    PointEnv(),
    Compose(
        InitTracker(),
        StepCounter(),
        CatFrames(N=3, dim=-1, in_keys=["observation"], out_keys=["frames"]),
        UnsqueezeTransform(dim=-1, in_keys=["step_count"], out_keys=["count2"]),
    ),
)
env.set_seed(0)
data = env.rollout(6)
show("transforms.frames", data["frames"].sum())
show("transforms.is_init", data["is_init"].sum())
show("transforms.count2", data["next", "count2"].sum())

env = TransformedEnv(PointEnv(), Compose(InitTracker(), TensorDictPrimer(hidden=Unbounded((4,)))))
env.set_seed(0)
lstm = LSTMModule(
    input_size=3,
    hidden_size=8,
    in_keys=["observation", "rs_h", "rs_c"],
    out_keys=["features", ("next", "rs_h"), ("next", "rs_c")],
)
env.append_transform(lstm.make_tensordict_primer())
policy = TensorDictSequential(lstm, TensorDictModule(nn.Linear(8, 1), in_keys=["features"], out_keys=["action"]))
data = env.rollout(6, policy)
show("lstm.step_mode", data["features"].sum())
with set_recurrent_mode(True):
    show("lstm.recurrent_mode", policy(data.clone())["features"].sum())

env = TransformedEnv(PointEnv(), VecNorm(in_keys=["observation"], decay=0.9))
env.set_seed(0)
show("vecnorm", env.rollout(6)["observation"].abs().sum())

batched = PointEnv(batch_size=(3,))
batched.set_seed(0)
data = batched.rollout(10, break_when_any_done=False)
show("multistep", MultiStep(gamma=0.9, n_steps=3)(data.clone())["next", "reward"].sum())
data["traj_ids"] = torch.arange(3).unsqueeze(-1).expand(3, 10)
split = split_trajectories(data.reshape(-1), trajectory_key="traj_ids")
show("split.reward", split["next", "reward"].sum())
show("split.count", split.shape[0])

trajectory = Trajectory(TensorDict(obs=torch.arange(6.0), batch_size=[6]))
show("trajectory.obs", trajectory["obs"].sum())
show("trajectory.slice", trajectory[:3].data.batch_size[0])

rb = ReplayBuffer(storage=LazyStackStorage(10), batch_size=3)
rb.extend(lazy_stack([TensorDict(a=torch.ones(i + 1), b=torch.tensor(float(i))) for i in range(5)]))
sample = rb.sample()
show("lazystack.b", sample["b"].sum())
show("lazystack.padded", sample.get("a", as_padded_tensor=True).sum())

storage = LazyTensorStorage(8, ndim=2)
rb = ReplayBuffer(storage=storage, batch_size=4)
rb.extend(TensorDict(a=torch.arange(8.0).reshape(2, 4), batch_size=[2, 4]))
show("ndim2.sample", rb.sample()["a"].sum())
rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
rb.extend(TensorDict(a=torch.arange(6.0), batch_size=[6]))
rb[1:3] = TensorDict(a=torch.zeros(2), batch_size=[2])
show("setitem", rb[:]["a"].sum())
print("done")
