"""ProbabilisticTensorDictModule / ProbabilisticTensorDictSequential: values, keys, errors, vmap, compile."""

from __future__ import annotations

import pytest
import torch
from torch import distributions as D
from torch import nn

from tensorbatch import TensorClass, TensorDict, lazy_stack
from tensorbatch.nn import (
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_composite_lp_aggregate,
    set_interaction_type,
)


def _normal(**kwargs: object) -> ProbabilisticTensorDictModule:
    return ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, **kwargs
    )  # type: ignore[arg-type]


def _policy(**kwargs: object) -> ProbabilisticTensorDictSequential:
    torch.manual_seed(0)
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=["params"]),
        TensorDictModule(NormalParamExtractor(), in_keys=["params"], out_keys=["loc", "scale"]),
        _normal(return_log_prob=True, **kwargs),
    )


def test_random_sample_and_log_prob_match_torch() -> None:
    td = TensorDict(loc=torch.zeros(4), scale=torch.full((4,), 2.0), batch_size=[4])
    torch.manual_seed(3)
    out = _normal(default_interaction_type="random", return_log_prob=True)(td)
    torch.manual_seed(3)
    want = D.Normal(torch.zeros(4), torch.full((4,), 2.0)).rsample()
    assert torch.equal(out["action"], want)
    torch.testing.assert_close(out["action_log_prob"], D.Normal(0.0, 2.0).log_prob(want))


@pytest.mark.parametrize(("kind", "value"), [("mode", 1.0), ("mean", 1.0), ("deterministic", 1.0)])
def test_deterministic_kinds(kind: str, value: float) -> None:
    td = TensorDict(loc=torch.ones(2), scale=torch.ones(2))
    with set_interaction_type(kind):
        assert _normal()(td)["action"].tolist() == [value, value]


def test_log_prob_keys_follow_the_aggregation_mode() -> None:
    assert _normal(return_log_prob=True).out_keys == ["action", "action_log_prob"]
    with set_composite_lp_aggregate(True):
        module = _normal(return_log_prob=True)
        assert module.out_keys == ["action", "sample_log_prob"]
    with pytest.raises(RuntimeError, match="instantiated with"):
        _ = module.log_prob_key  # built while aggregating, read while not


def test_custom_log_prob_key_cannot_overwrite_the_sample() -> None:
    with pytest.raises(ValueError, match="overwrite the sample"):
        _normal(return_log_prob=True, log_prob_key=("action", "lp"))


def test_num_samples_expands_the_output() -> None:
    td = TensorDict(loc=torch.zeros(3, 2), scale=torch.ones(3, 2), batch_size=[3])
    out = _normal(num_samples=5, default_interaction_type="random")(td)
    assert out.batch_size == (5, 3)
    assert out["action"].shape == (5, 3, 2)
    assert out["action"].std(0).min() > 0  # five different draws


def test_seed_key_is_advanced_and_global_rng_untouched() -> None:
    td = TensorDict(loc=torch.zeros(2), scale=torch.ones(2))
    td["seed"] = torch.tensor(11)
    module = _normal(default_interaction_type="random", generator="seed")
    state = torch.get_rng_state()
    first = module(td)["action"].clone()
    assert td["seed"].item() != 11
    assert torch.equal(torch.get_rng_state(), state)
    td["seed"] = torch.tensor(11)
    assert torch.equal(module(td)["action"], first)


def test_composite_module_writes_each_component() -> None:
    params = TensorDict(
        {"p": {"a": {"loc": torch.zeros(3), "scale": torch.ones(3)}, "b": {"logits": torch.zeros(3, 4)}}}, [3]
    )
    module = ProbabilisticTensorDictModule(
        in_keys={"params": "p"},
        distribution_class=CompositeDistribution,
        return_log_prob=True,
        distribution_kwargs={"distribution_map": {"a": D.Normal, "b": D.Categorical}},
        default_interaction_type="random",
    )
    out = module(params)
    assert module.out_keys == ["a", "b", "a_log_prob", "b_log_prob"]
    torch.testing.assert_close(out["b_log_prob"], torch.full((3,), -torch.log(torch.tensor(4.0)).item()))
    assert out["a"].shape == (3,) and out["b"].dtype == torch.long


def test_sequence_skips_sampling_what_its_prefix_wrote() -> None:
    seq = ProbabilisticTensorDictSequential(
        TensorDictModule(lambda loc: loc + 1, in_keys=["loc"], out_keys=["action"]), _normal(return_log_prob=True)
    )
    out = seq(TensorDict(loc=torch.zeros(2), scale=torch.ones(2)))
    assert out["action"].tolist() == [1.0, 1.0]  # the prefix's value is kept and scored
    torch.testing.assert_close(out["action_log_prob"], D.Normal(0.0, 1.0).log_prob(torch.ones(2)))


def test_sequence_composite_of_two_stages() -> None:
    seq = ProbabilisticTensorDictSequential(
        ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["z"],
            distribution_class=D.Normal,
            distribution_kwargs={"scale": 1.0},
            default_interaction_type="random",
        ),
        TensorDictModule(lambda z: z * 0, in_keys=["z"], out_keys=["loc2"]),
        ProbabilisticTensorDictModule(
            in_keys={"loc": "loc2"}, out_keys=["y"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}
        ),
    )
    td = seq(TensorDict(loc=torch.zeros(3), batch_size=[3]))
    assert seq.return_composite
    dist = seq.get_dist(TensorDict(loc=torch.zeros(3), batch_size=[3]))
    assert isinstance(dist, CompositeDistribution) and list(dist) == ["z", "y"]
    lp = seq.log_prob(td)
    assert sorted(lp.keys()) == ["y_log_prob", "z_log_prob"]


def test_sequence_edit_refreshes_its_parts() -> None:
    seq = _policy()
    with pytest.raises(TypeError, match="final module"):
        seq[2] = TensorDictModule(lambda x: x, in_keys=["loc"], out_keys=["other"])
    assert isinstance(seq[2], ProbabilisticTensorDictModule)  # the refused edit left the sequence alone
    seq[0] = TensorDictModule(nn.Linear(3, 4), in_keys=["obs2"], out_keys=["params"])
    assert seq.in_keys == ["obs2"]
    assert seq.get_dist_params(TensorDict(obs2=torch.zeros(2, 3), batch_size=[2]))["loc"].shape == (2, 2)
    assert type(seq[:2]) is TensorDictSequential and type(seq[1:]) is ProbabilisticTensorDictSequential


def test_policy_over_vmap_of_parameters() -> None:
    policy = _policy()
    params = TensorDict.from_module(policy).expand(3).clone()
    obs = TensorDict(obs=torch.randn(5, 3), batch_size=[5])

    def call(p: TensorDict) -> TensorDict:
        with p.to_module(policy):
            return policy(obs.clone())

    out = torch.vmap(call)(params)
    assert out.batch_size == (3, 5)
    torch.testing.assert_close(out["action"][0], policy(obs.clone())["action"])


def test_lazy_stack_and_tensorclass_inputs() -> None:
    policy = _policy()
    members = [TensorDict(obs=torch.randn(3), batch_size=[]) for _ in range(2)]
    out = policy(lazy_stack(members))
    assert out["action"].shape == (2, 2)

    class Step(TensorClass):
        obs: torch.Tensor
        params: torch.Tensor | None = None
        loc: torch.Tensor | None = None
        scale: torch.Tensor | None = None
        action: torch.Tensor | None = None
        action_log_prob: torch.Tensor | None = None

    step = policy(Step(obs=out["obs"], batch_size=[2]))
    assert isinstance(step, Step)
    torch.testing.assert_close(step.action, out["action"])


@pytest.mark.slow
def test_policy_compiles_without_graph_break() -> None:
    policy = _policy()
    obs = TensorDict(obs=torch.randn(4, 3), batch_size=[4])
    want = policy(obs.clone())
    compiled = torch.compile(policy, fullgraph=True)
    got = compiled(obs.clone())
    torch.testing.assert_close(got["action"], want["action"])
    torch.testing.assert_close(got["action_log_prob"], want["action_log_prob"])


def test_interaction_type_of_the_sequence() -> None:
    policy = _policy(default_interaction_type=InteractionType.RANDOM)
    assert policy.default_interaction_type is InteractionType.RANDOM
    with pytest.raises(AttributeError, match="log_prob_key"):  # two keys: use log_prob_keys
        _ = ProbabilisticTensorDictSequential(
            _normal(return_log_prob=True),
            ProbabilisticTensorDictModule(
                in_keys={"loc": "action"},
                out_keys=["y"],
                distribution_class=D.Normal,
                distribution_kwargs={"scale": 1.0},
                return_log_prob=True,
            ),
        ).log_prob_key
