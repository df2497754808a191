"""tensorbatch.nn distributions, mappings and modes: values, shapes, errors (tensordict not needed)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import pytest
import torch
from torch import distributions as D

from tensorbatch import TensorDict
from tensorbatch.nn import (
    AddStateIndependentNormalScale,
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    OneHotCategorical,
    TruncatedNormal,
    add_custom_mapping,
    biased_softplus,
    composite_lp_aggregate,
    interaction_type,
    inv_softplus,
    mappings,
    rand_one_hot,
    set_composite_lp_aggregate,
    set_interaction_type,
)
from tensorbatch.nn.distributions import Delta, _deterministic
from tensorbatch.nn.distributions.truncated_normal import TruncatedStandardNormal
from tensorbatch.nn.probabilistic import _use_generator


# mappings ---------------------------------------------------------------------------------------------
def test_mappings_values() -> None:
    x = torch.tensor([-2.0, 0.0, 3.0])
    assert torch.equal(mappings("exp")(x), x.exp())
    assert torch.equal(mappings("relu")(x), torch.tensor([0.0, 0.0, 3.0]))
    assert mappings("none")(x) is x
    torch.testing.assert_close(mappings("expln")(x), torch.tensor([math.exp(-2), 1.0, math.log(4) + 1]))
    torch.testing.assert_close(mappings("biased_softplus")(torch.zeros(1)), torch.ones(1))
    torch.testing.assert_close(mappings("biased_softplus_3.0")(torch.zeros(1)), torch.full((1,), 3.0))
    low = mappings("biased_softplus_1.0_0.5")(torch.full((1,), -50.0))
    assert low.item() == pytest.approx(0.5)


@pytest.mark.parametrize(("key", "error"), [("nope", NotImplementedError), ("biased_softplus_1_2_3", ValueError)])
def test_mappings_errors(key: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        mappings(key)


def test_inv_softplus_round_trip_and_floor() -> None:
    x = torch.tensor([0.5, 1.0, 4.0])
    torch.testing.assert_close(torch.nn.functional.softplus(inv_softplus(x)), x)
    assert isinstance(inv_softplus(1.0), float)
    assert inv_softplus(0.0) == pytest.approx(math.log(1e-6), rel=1e-5)  # expm1 is clamped to 1e-6
    assert biased_softplus(2.0, min_val=0.1)(torch.zeros(1)).item() == pytest.approx(2.0)


def test_add_custom_mapping() -> None:
    add_custom_mapping("tb_test_double", lambda t: 2 * t)
    assert torch.equal(mappings("tb_test_double")(torch.ones(2)), torch.full((2,), 2.0))


# parameter extractors ---------------------------------------------------------------------------------
def test_normal_param_extractor_split_and_pass_through() -> None:
    loc, scale, other = NormalParamExtractor(scale_mapping="exp", scale_lb=0.5)(
        torch.tensor([1.0, 2.0, 3.0, -5.0, 0.0]), "kept"
    )
    assert loc.tolist() == [1.0, 2.0, 3.0]  # odd size: the location gets one more element
    assert scale.tolist() == [0.5, 1.0]
    assert other == "kept"


def test_add_state_independent_normal_scale() -> None:
    module = AddStateIndependentNormalScale((2,), init_value=math.log(3.0))
    _, scale = module(torch.zeros(4, 2))
    torch.testing.assert_close(scale, torch.full((4, 2), 3.0))
    assert [n for n, _ in module.named_parameters()] == ["state_independent_scale"]
    buffered = AddStateIndependentNormalScale(2, make_param=False)
    assert not list(buffered.parameters()) and "state_independent_scale" in dict(buffered.named_buffers())
    with pytest.raises(RuntimeError, match="do not match"):
        module(torch.zeros(4, 3))


# Delta ------------------------------------------------------------------------------------------------
def test_delta_log_prob_reduces_every_event_dim() -> None:
    param = torch.randn(2, 3)
    far = param.clone()
    far[0, 0] += 1
    dist = Delta(param, event_shape=(2, 3))
    assert dist.log_prob(param).item() == math.inf
    assert dist.log_prob(torch.stack([param, far, param])).tolist() == [math.inf, -math.inf, math.inf]


def test_delta_samples_are_the_param() -> None:
    param = torch.arange(3.0, requires_grad=True)
    dist = Delta(param)
    assert dist.sample((2,)).tolist() == [[0.0, 1.0, 2.0]] * 2
    dist.rsample((2,)).sum().backward()
    assert param.grad.tolist() == [2.0, 2.0, 2.0]


# discrete ---------------------------------------------------------------------------------------------
def test_one_hot_rsample_has_the_relaxed_gradient() -> None:
    logits = torch.randn(3, 4, requires_grad=True)
    torch.manual_seed(1)
    hard = OneHotCategorical(logits=logits).rsample((2,))
    (hard * torch.arange(4.0)).sum().backward()
    got = logits.grad.clone()
    logits.grad = None
    torch.manual_seed(1)
    soft = D.RelaxedOneHotCategorical(1.0, logits=logits).rsample((2,))
    (soft * torch.arange(4.0)).sum().backward()
    torch.testing.assert_close(got, logits.grad)
    assert set(hard.unique().tolist()) == {0.0, 1.0} and hard.sum(-1).eq(1).all()


def test_one_hot_categorical_mode_first_tie_and_unit_dim() -> None:
    assert OneHotCategorical(logits=torch.tensor([1.0, 3.0, 3.0])).mode.tolist() == [0, 1, 0]
    assert OneHotCategorical(logits=torch.zeros(4, 1)).batch_shape == ()
    sample = OneHotCategorical(probs=torch.tensor([0.0, 1.0])).sample((3,))
    assert sample.dtype == torch.long and sample.tolist() == [[0, 1]] * 3


def test_rand_one_hot_is_one_hot() -> None:
    out = rand_one_hot(torch.randn(50, 6))
    assert out.dtype == torch.long and out.sum(-1).eq(1).all()
    assert rand_one_hot(torch.tensor([0.0, 0.0, 1.0]), do_softmax=False).tolist() == [0, 0, 1]


# truncated normal -------------------------------------------------------------------------------------
def test_truncated_normal_samples_stay_inside_and_match_moments() -> None:
    torch.manual_seed(0)
    dist = TruncatedNormal(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.5]), torch.tensor([-1.0, 2.5]), 3.0)
    samples = dist.sample((20000,))
    assert (samples >= dist.support.lower_bound).all() and (samples <= dist.support.upper_bound).all()
    torch.testing.assert_close(samples.mean(0), dist.mean, atol=0.02, rtol=0)
    torch.testing.assert_close(samples.var(0), dist.variance, atol=0.02, rtol=0)


def test_truncated_normal_density_integrates_to_one() -> None:
    dist = TruncatedNormal(0.3, 0.7, -0.5, 1.2)
    grid = torch.linspace(-0.5, 1.2, 20001)
    mass = torch.trapezoid(dist.log_prob(grid).exp(), grid)
    assert mass.item() == pytest.approx(1.0, abs=1e-4)
    assert dist.cdf(torch.tensor(1.2)).item() == pytest.approx(1.0, abs=1e-5)


def test_truncated_standard_normal_errors() -> None:
    with pytest.raises(ValueError, match="Incorrect truncation range"):
        TruncatedStandardNormal(1.0, 1.0)
    with pytest.raises(ValueError, match="types are different"):
        TruncatedStandardNormal(torch.zeros(1), torch.ones(1, dtype=torch.float64))


# composite --------------------------------------------------------------------------------------------
def _composite() -> CompositeDistribution:
    params = TensorDict(
        {"a": {"loc": torch.zeros(2, 3), "scale": torch.ones(2, 3)}, ("n", "b"): {"logits": torch.zeros(2, 4)}}, [2]
    )
    return CompositeDistribution(params, {"a": D.Normal, ("n", "b"): D.Categorical})


def test_composite_log_prob_keys_and_sum() -> None:
    dist = _composite()
    sample = TensorDict({"a": torch.zeros(2, 3), ("n", "b"): torch.zeros(2, dtype=torch.long)}, [2])
    lp = dist.log_prob(sample)
    assert sorted(lp.keys(True, True), key=str) == [("n", "b_log_prob"), "a_log_prob"]
    want = 3 * D.Normal(0.0, 1.0).log_prob(torch.tensor(0.0)) - math.log(4)
    with set_composite_lp_aggregate(True):
        torch.testing.assert_close(dist.log_prob(sample), want.expand(2))
        assert dist.log_prob_composite(sample) is sample and "sample_log_prob" in sample.keys()


def test_composite_mapping_and_batch() -> None:
    dist = _composite()
    assert len(dist) == 2 and list(dist) == ["a", ("n", "b")]
    assert isinstance(dist["a"], D.Normal)
    assert dist.sample((5,)).batch_size == (5, 2)


def test_composite_unknown_class_warns_and_falls_back() -> None:
    class Plain(D.Distribution):
        arg_constraints = {}  # noqa: RUF012

        def __init__(self) -> None:
            super().__init__(torch.Size([2]), validate_args=False)

        @property
        def mode(self) -> torch.Tensor:
            return torch.ones(2)

        @property
        def support(self) -> D.constraints.Constraint:
            return D.constraints.nonnegative_integer

    dist = CompositeDistribution.from_distributions(TensorDict(batch_size=[2]), {"x": Plain()})
    with pytest.warns(UserWarning, match="falling back on mode"):
        assert dist.deterministic_sample["x"].tolist() == [1.0, 1.0]


def test_deterministic_values_of_torch_classes_without_patching() -> None:
    # tensordict adds these attributes to torch's classes at import; tensorbatch computes the same values
    probs = torch.tensor([0.2, 0.5, 0.9])
    bern = _deterministic._TORCH_VALUES[D.RelaxedBernoulli](D.RelaxedBernoulli(torch.tensor(0.5), probs=probs))
    assert bern[0].item() == 0.0 and math.isnan(bern[1].item()) and bern[2].item() == 1.0
    onehot = D.RelaxedOneHotCategorical(torch.tensor(0.5), probs=torch.tensor([0.1, 0.7, 0.2]))
    assert _deterministic._TORCH_VALUES[D.RelaxedOneHotCategorical](onehot).tolist() == [0.0, 1.0, 0.0]
    logistic = D.LogisticNormal(torch.zeros(2), torch.ones(2))
    torch.testing.assert_close(_deterministic._TORCH_VALUES[D.LogisticNormal](logistic), torch.full((3,), 1 / 3))
    assert _deterministic.registered(D.Independent(D.Categorical(logits=torch.zeros(2, 3)), 1)) == "mode"


# modes ------------------------------------------------------------------------------------------------
def test_interaction_type_is_a_str_enum() -> None:
    assert InteractionType("MEAN") is InteractionType.MEAN and str(InteractionType.RANDOM) == "random"
    with pytest.raises(ValueError, match="'sometimes' is not a valid InteractionType"):
        InteractionType.from_str("sometimes")
    with pytest.raises(ValueError, match="not a valid InteractionType"):
        set_interaction_type(3)  # type: ignore[arg-type]


def test_set_interaction_type_same_block_reentered_and_set_unset() -> None:
    block = set_interaction_type("mode")
    with block:
        with set_interaction_type("mean"), block:
            assert interaction_type() is InteractionType.MODE
        assert interaction_type() is InteractionType.MODE
    assert interaction_type() is None
    block.set()
    assert interaction_type() is InteractionType.MODE
    block.unset()
    assert interaction_type() is None


def test_decorated_generator_sees_the_mode_at_each_step() -> None:
    @set_interaction_type("random")
    def steps():
        received = yield interaction_type()
        yield received, interaction_type()
        return "done"

    gen = steps()
    assert next(gen) is InteractionType.RANDOM
    assert interaction_type() is None
    assert gen.send("x") == ("x", InteractionType.RANDOM)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done"
    with pytest.raises(RuntimeError, match="cannot decorate a class"):
        set_interaction_type()(type("C", (), {}))


def test_thread_local_mode_stays_in_its_thread() -> None:
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def worker() -> None:
        with set_composite_lp_aggregate(True, thread_local=True):
            entered.set()
            release.wait(5)
            seen["worker"] = composite_lp_aggregate()

    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait(5)
    seen["main"] = composite_lp_aggregate()
    release.set()
    thread.join()
    assert seen == {"worker": True, "main": False}


def test_composite_lp_aggregate_environment_variable() -> None:
    code = "import tensorbatch.nn as n; print(n.composite_lp_aggregate())"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "COMPOSITE_LP_AGGREGATE": "1", "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def test_use_generator_advances_it_and_keeps_the_global_rng() -> None:
    torch.manual_seed(0)
    state = torch.get_rng_state()
    gen = torch.Generator().manual_seed(7)
    with _use_generator(gen):
        first = torch.rand(2)
    with _use_generator(gen):
        second = torch.rand(2)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(torch.cat([first, second]), torch.rand(4, generator=torch.Generator().manual_seed(7)))


def test_distributions_under_vmap() -> None:
    def lp(param: torch.Tensor) -> torch.Tensor:
        return Delta(param).log_prob(torch.zeros(2))

    assert torch.vmap(lp)(torch.tensor([[0.0, 0.0], [0.0, 1.0]])).tolist() == [math.inf, -math.inf]
    loc, scale = torch.vmap(NormalParamExtractor())(torch.zeros(3, 4))
    assert loc.shape == scale.shape == (3, 2)
