"""Differential tests, ``nn`` distributions and switches: mappings, parameter extractors, Delta,
OneHotCategorical, TruncatedNormal, CompositeDistribution, InteractionType and the two modes.

Each case is a function of the library (``tensordict`` or ``tensorbatch``), run once per library after
the same seed; the results are compared through a summary: per tensor its shape, dtype, values (NaN and
infinities included) and whether it requires grad; per TensorDict its class name, batch size and leaves;
for an exception its type and message; for a warning its category and message.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import torch
from torch import distributions as D

from ._nn_diff import check, summary

pytestmark = pytest.mark.differential


# --------------------------------------------------------------------------------------------------
# mappings
# --------------------------------------------------------------------------------------------------
X = torch.linspace(-3, 3, 7)
MAPPINGS = [
    "softplus",
    "exp",
    "relu",
    "biased_softplus",
    "none",
    "expln",
    "biased_softplus_2.0",
    "biased_softplus_2.0_0.1",
    "biased_softplus_1_2_3",
    "biased_softplus_x",
    "unknown",
]


@pytest.mark.parametrize("key", MAPPINGS)
def test_mappings(ref: Any, tb: Any, key: str) -> None:
    check(ref, tb, lambda lib: lib.nn.mappings(key)(X.clone()))


@pytest.mark.parametrize("bias", [1.0, 0.0, -1.0, 2, torch.tensor([1.0, 2.0]), [0.5, 3.0]])
def test_inv_softplus(ref: Any, tb: Any, bias: Any) -> None:
    check(ref, tb, lambda lib: (lambda out: (type(out).__name__, out))(lib.nn.inv_softplus(bias)))


def test_biased_softplus(ref: Any, tb: Any) -> None:
    check(
        ref,
        tb,
        lambda lib: [
            lib.nn.biased_softplus(2.0, min_val=0.5)(X),
            lib.nn.biased_softplus(0.1)(X),
            lib.nn.biased_softplus(3.0).bias,
        ],
    )


def test_add_custom_mapping(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        lib.nn.add_custom_mapping("diff_square", torch.square)
        npe = lib.nn.NormalParamExtractor(scale_mapping="diff_square", scale_lb=0.5)
        return [lib.nn.mappings("diff_square")(X), npe(X[:6].clone())]

    check(ref, tb, fn)


# --------------------------------------------------------------------------------------------------
# parameter extractors
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"scale_mapping": "exp"},
        {"scale_mapping": "relu", "scale_lb": 0.3},
        {"scale_mapping": "biased_softplus_0.5_0.01"},
    ],
)
@pytest.mark.parametrize("shape", [(6,), (2, 3, 4), (5,)])
def test_normal_param_extractor(ref: Any, tb: Any, kwargs: dict[str, Any], shape: tuple[int, ...]) -> None:
    def fn(lib: Any) -> Any:
        x = torch.randn(shape, requires_grad=True)
        other = torch.ones(2)
        out = lib.nn.NormalParamExtractor(**kwargs)(x, other)
        out[1].sum().backward()
        return [out, x.grad, out[2] is other]

    check(ref, tb, fn)


def test_normal_param_extractor_module(ref: Any, tb: Any) -> None:
    check(ref, tb, lambda lib: lib.nn.NormalParamExtractor())


@pytest.mark.parametrize(
    "case",
    [
        ((), {}, (3,)),
        (4, {}, (2, 4)),
        ((2, 3), {"scale_mapping": "softplus", "init_value": 0.5}, (5, 2, 3)),
        (3, {"make_param": False, "scale_lb": 2.0}, (3,)),
        (3, {}, (2, 4)),
        ((2, 3), {}, (3,)),
        (None, {"device": "cpu", "scale_mapping": "biased_softplus_1.0"}, (2, 2)),
    ],
)
def test_add_state_independent_normal_scale(ref: Any, tb: Any, case: Any) -> None:
    scale_shape, kwargs, loc_shape = case

    def fn(lib: Any) -> Any:
        module = lib.nn.AddStateIndependentNormalScale(scale_shape, **kwargs)
        loc = torch.randn(loc_shape)
        before = summary(module)
        out = module(loc, "other")
        if out[1].requires_grad:
            out[1].sum().backward()
        grad = module.state_independent_scale.grad
        return [before, out, grad, module.scale_shape, module.scale_mapping]

    check(ref, tb, fn)


# --------------------------------------------------------------------------------------------------
# Delta
# --------------------------------------------------------------------------------------------------
def _delta(lib: Any, shapes: dict[str, Any]) -> Any:
    param = torch.randn(2, 3, requires_grad=True)
    dist = lib.nn.distributions.Delta(param, **shapes)
    close = param.detach() + 1e-8
    far = param.detach().clone()
    far[0, 0] += 1
    rs = dist.rsample((4,))
    rs.sum().backward()
    return [
        dist.batch_shape,
        dist.event_shape,
        dist.sample(),
        dist.sample((2,)),
        rs,
        param.grad,
        dist.log_prob(param.detach()),
        dist.log_prob(close),
        dist.log_prob(far),
        dist.mode,
        dist.mean,
        dist.deterministic_sample,
        dist.log_prob(torch.stack([param.detach(), far])),
    ]


@pytest.mark.parametrize("shapes", [{}, {"batch_shape": (2,), "event_shape": (3,)}, {"batch_shape": (2, 3)}])
def test_delta(ref: Any, tb: Any, shapes: dict[str, Any]) -> None:
    check(ref, tb, lambda lib: _delta(lib, shapes))


def test_delta_event_of_two_dims(ref: Any, tb: Any) -> None:
    # a difference: tensordict reduces the event's second dim on the already reduced value (a batch dim)
    check(ref, tb, lambda lib: _delta(lib, {"event_shape": (2, 3)}))


def test_delta_tolerances_and_update(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        dist = lib.nn.distributions.Delta(torch.tensor([1.0, 100.0]), atol=0.1, rtol=0.01)
        near = dist.log_prob(torch.tensor([1.05, 100.9]))
        dist.update(torch.tensor([0.0, 0.0]))
        return [
            near,
            dist.log_prob(torch.tensor([1.05, 100.9])),
            dist.sample(),
            dist.batch_shape,
            dist.log_prob(torch.tensor([0.0, 0.0], dtype=torch.float64)),
        ]

    check(ref, tb, fn)


def test_delta_scalar(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        dist = lib.nn.distributions.Delta(torch.tensor(2.0))
        return [dist.batch_shape, dist.event_shape, dist.sample((3,)), dist.log_prob(torch.tensor(2.0))]

    check(ref, tb, fn)


# --------------------------------------------------------------------------------------------------
# OneHotCategorical, rand_one_hot
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["logits", "probs", "unit", "ties"])
def test_one_hot_categorical(ref: Any, tb: Any, which: str) -> None:
    def fn(lib: Any) -> Any:
        if which == "logits":
            dist = lib.nn.OneHotCategorical(logits=torch.randn(4, 5))
        elif which == "probs":
            dist = lib.nn.OneHotCategorical(probs=torch.rand(4, 5))
        elif which == "unit":
            dist = lib.nn.OneHotCategorical(logits=torch.randn(4, 1))
        else:
            dist = lib.nn.OneHotCategorical(logits=torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]))
        sample = dist.sample((3,))
        return [
            dist.batch_shape,
            dist.mode,
            dist.deterministic_sample,
            sample,
            dist.sample(),
            dist.log_prob(sample),
            dist.entropy(),
            dist.num_params,
        ]

    check(ref, tb, fn)


def _one_hot_rsample(lib: Any, grad: bool) -> Any:
    logits = torch.randn(3, 4, requires_grad=True)
    out = lib.nn.OneHotCategorical(logits=logits).rsample((2,))
    (out * torch.arange(4.0)).sum().backward()
    return [out, out.grad_fn is not None] + ([logits.grad] if grad else [])


def test_one_hot_categorical_rsample(ref: Any, tb: Any) -> None:
    check(ref, tb, lambda lib: _one_hot_rsample(lib, grad=False))


def test_one_hot_categorical_rsample_grad(ref: Any, tb: Any) -> None:
    # a difference: tensordict overwrites the relaxed sample's data, which its exp's backward has saved
    check(ref, tb, lambda lib: _one_hot_rsample(lib, grad=True))


def test_one_hot_categorical_validate(ref: Any, tb: Any) -> None:
    check(ref, tb, lambda lib: lib.nn.OneHotCategorical(logits=torch.zeros(2), probs=torch.ones(2)))
    check(ref, tb, lambda lib: lib.nn.OneHotCategorical(probs=torch.tensor([0.5, -1.0]), validate_args=True))


@pytest.mark.parametrize("do_softmax", [True, False])
def test_rand_one_hot(ref: Any, tb: Any, do_softmax: bool) -> None:
    check(ref, tb, lambda lib: lib.nn.rand_one_hot(torch.rand(6, 4).softmax(-1), do_softmax=do_softmax))


# --------------------------------------------------------------------------------------------------
# TruncatedNormal
# --------------------------------------------------------------------------------------------------
TN_CASES = {
    "tensors": lambda: (torch.randn(3), torch.rand(3) + 0.5, torch.full((3,), -1.0), torch.full((3,), 1.5)),
    "numbers": lambda: (0.5, 2.0, -1.0, 3.0),
    "mixed": lambda: (torch.randn(2, 3), 1.0, -2.0, torch.tensor([0.0, 1.0, 2.0])),
    "infinite": lambda: (torch.zeros(2), torch.ones(2), torch.tensor([-math.inf, 0.0]), torch.tensor([1.0, math.inf])),
    "tiny_scale": lambda: (torch.zeros(2), torch.tensor([0.0, 1e-9]), -1.0, 1.0),
    "far_tail": lambda: (torch.zeros(2), torch.ones(2), torch.tensor([4.0, 6.0]), torch.tensor([5.0, 9.0])),
    "float64": lambda: (torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64), -1.0, 2.0),
}


@pytest.mark.parametrize("case", list(TN_CASES))
def test_truncated_normal(ref: Any, tb: Any, case: str) -> None:
    def fn(lib: Any) -> Any:
        loc, scale, a, b = TN_CASES[case]()
        dist = lib.nn.TruncatedNormal(loc, scale, a, b)
        sample = dist.sample((4,))
        return [
            dist.batch_shape,
            dist.mean,
            dist.variance,
            dist.entropy(),
            dist.auc,
            sample,
            dist.rsample(),
            dist.log_prob(sample),
            dist.cdf(sample),
            dist.icdf(torch.tensor(0.3)),
            dist.support.lower_bound,
            dist.support.upper_bound,
            dist.scale,
            dist.loc,
        ]

    check(ref, tb, fn)


def test_truncated_normal_grad(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        loc = torch.zeros(3, requires_grad=True)
        scale = torch.ones(3, requires_grad=True)
        dist = lib.nn.TruncatedNormal(loc, scale, -0.5, torch.tensor([0.5, 1.0, 3.0]))
        (dist.rsample((5,)).sum() + dist.log_prob(torch.zeros(3)).sum() + dist.entropy().sum()).backward()
        return [loc.grad, scale.grad]

    check(ref, tb, fn)


@pytest.mark.parametrize(
    "args",
    [(0.0, 1.0, 1.0, -1.0), (0.0, 1.0, 1.0, 1.0), (torch.zeros(2), torch.ones(2), torch.tensor([0.0, 2.0]), 1.0)],
)
def test_truncated_normal_bad_range(ref: Any, tb: Any, args: Any) -> None:
    check(ref, tb, lambda lib: lib.nn.TruncatedNormal(*args))


def test_truncated_normal_validation(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        dist = lib.nn.TruncatedNormal(torch.zeros(2), torch.ones(2), 0.0, 1.0, validate_args=True)
        inside = [dist.log_prob(torch.tensor([0.5, 0.9])), dist.cdf(torch.tensor([0.5, 0.9]))]
        try:
            dist.log_prob(torch.tensor([0.5, 1.5]))
        except ValueError as e:
            return [inside, "ValueError", str(e)[:40]]
        return inside

    check(ref, tb, fn)


def test_truncated_standard_normal(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        cls = __import__(f"{lib.__name__}.nn.distributions.truncated_normal", fromlist=["x"]).TruncatedStandardNormal
        dist = cls(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 3.0]))
        sample = dist.rsample((3,))
        return [
            dist.mean,
            dist.variance,
            dist.entropy(),
            dist.auc,
            sample,
            dist.log_prob(sample),
            dist.cdf(sample),
            dist.icdf(torch.tensor([0.1, 0.9])),
            cls(0.0, 1.0).batch_shape,
        ]

    check(ref, tb, fn)
    check(
        ref,
        tb,
        lambda lib: __import__(
            f"{lib.__name__}.nn.distributions.truncated_normal", fromlist=["x"]
        ).TruncatedStandardNormal(torch.zeros(2), torch.ones(2, dtype=torch.float64)),
    )


# --------------------------------------------------------------------------------------------------
# CompositeDistribution
# --------------------------------------------------------------------------------------------------
class _Plain(D.Distribution):
    """A distribution class tensordict does not know: it has a support and a mean, nothing else."""

    arg_constraints: dict[str, Any] = {}  # noqa: RUF012
    support = D.constraints.real

    def __init__(self, loc: torch.Tensor) -> None:
        self.loc = loc
        super().__init__(loc.shape, validate_args=False)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc + 1

    def sample(self, sample_shape: Any = ()) -> torch.Tensor:
        return self.loc.expand(*sample_shape, *self.loc.shape).clone()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return -value.abs()


def _params(lib: Any) -> Any:
    return lib.TensorDict(
        {
            "cont": {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.1},
            ("nested", "disc"): {"logits": torch.randn(3, 5)},
            "bern": {"probs": torch.rand(3)},
        },
        [3],
    )


_MAP = {"cont": D.Normal, ("nested", "disc"): D.Categorical, "bern": D.Bernoulli}


@pytest.mark.parametrize("aggregate", [False, True])
def test_composite_sample_log_prob(ref: Any, tb: Any, aggregate: bool) -> None:
    def fn(lib: Any) -> Any:
        with lib.nn.set_composite_lp_aggregate(aggregate):
            dist = lib.nn.CompositeDistribution(_params(lib), _MAP)
            sample = dist.sample((2,))
            lp = dist.log_prob(sample)
            lpc = dist.log_prob_composite(sample.clone(), include_sum=True)
            lpc_no = dist.log_prob_composite(sample.clone(), include_sum=False)
            ent = dist.entropy()
            entc = dist.entropy_composite(include_sum=True)
            s2, lp2 = dist.sample_and_log_prob((2,))
            return [
                dist.batch_shape,
                dist.event_shape,
                sample,
                lp,
                lpc,
                lpc_no,
                ent,
                entc,
                s2,
                lp2,
                dist.mode,
                dist.mean if False else None,
                dist.deterministic_sample,
                sorted(map(str, dist)),
                len(dist),
                repr(dist),
                dist.log_prob_key,
                dist.entropy_key,
            ]

    check(ref, tb, fn)


@pytest.mark.parametrize("aggregate", [False, True])
def test_composite_log_prob_inplace(ref: Any, tb: Any, aggregate: bool) -> None:
    def fn(lib: Any) -> Any:
        with lib.nn.set_composite_lp_aggregate(aggregate):
            dist = lib.nn.CompositeDistribution(_params(lib), _MAP)
            sample = dist.sample()
            out = dist.log_prob_composite(sample)
            return [out is sample, out, sample]

    check(ref, tb, fn)


def test_composite_rsample_and_options(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        params = lib.TensorDict(
            {
                "a": {"loc": torch.randn(2, requires_grad=True), "scale": torch.ones(2)},
                ("n", "b"): {"loc": torch.zeros(2, 3)},
            },
            [2],
        )
        dist = lib.nn.CompositeDistribution(
            params,
            {"a": D.Normal, ("n", "b"): D.Normal},
            name_map={"a": ("out", "act"), ("n", "b"): "b2"},
            extra_kwargs={("n", "b"): {"scale": 2.0}},
            log_prob_key="lp",
            entropy_key=("e", "sum"),
        )
        s = dist.rsample((3,))
        sample, lp = dist.rsample_and_log_prob()
        with lib.nn.set_composite_lp_aggregate(False):
            lpc = dist.log_prob_composite(s, include_sum=True)
            ent = dist.entropy(include_sum=True)
        dist.log_prob_key = None
        return [
            s,
            sample,
            lp,
            lpc,
            ent,
            sorted(map(str, dist)),
            dist[("out", "act")].loc,
            dist.log_prob_key,
            dist.entropy_key,
        ]

    check(ref, tb, fn)


def test_composite_name_map_plain_keys(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        params = lib.TensorDict({"a": {"loc": torch.zeros(2), "scale": torch.ones(2)}}, [2])
        dist = lib.nn.CompositeDistribution(
            params, {("a",): D.Normal}, name_map={"a": "x", "zz": "y"}, extra_kwargs={"a": {"validate_args": False}}
        )
        return [sorted(map(str, dist)), dist.sample()]

    check(ref, tb, fn)


def test_composite_missing_param(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        try:
            lib.nn.CompositeDistribution(_params(lib), {"nope": D.Normal})
        except KeyError as e:  # the message ends with the keys view's repr, which is the core's
            return ["KeyError", str(e)[:41]]
        return None

    check(ref, tb, fn)


def test_composite_cdf_icdf(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        params = lib.TensorDict(
            {
                "a": {"loc": torch.zeros(2), "scale": torch.ones(2)},
                ("n", "b"): {"loc": torch.ones(2), "scale": torch.ones(2)},
            },
            [2],
        )
        dist = lib.nn.CompositeDistribution(params, {"a": D.Normal, ("n", "b"): D.Normal})
        sample = lib.TensorDict({"a": torch.tensor([0.0, 1.0]), ("n", "b"): torch.tensor([0.5, 2.0])}, [2])
        out = dist.cdf(sample)
        other = lib.TensorDict({"a": torch.tensor([0.0, 1.0]), ("n", "b"): torch.tensor([0.5, 2.0])}, [2])
        dist.icdf(other)
        bad = lib.TensorDict({"a": torch.tensor([0.0, 1.0])}, [2])
        try:
            dist.icdf(bad)
        except KeyError as e:
            return [out is sample, out, other, "KeyError", str(e)]
        return [out, other]

    check(ref, tb, fn)


def test_composite_from_distributions(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        dist = lib.nn.CompositeDistribution.from_distributions(
            lib.TensorDict(batch_size=[3]),
            {"a": D.Normal(torch.zeros(3), torch.ones(3)), ("n", "b"): D.Bernoulli(torch.full((3,), 0.3))},
            name_map={("n", "b"): "c", "missing": "d"},
        )
        return [dist.sample((2,)), dist.log_prob(dist.sample()), dist.aggregate_probabilities, sorted(map(str, dist))]

    check(ref, tb, fn)


@pytest.mark.parametrize("which", ["independent", "unknown", "tanh", "relaxed", "logistic", "delta"])
def test_composite_deterministic_fallbacks(ref: Any, tb: Any, which: str) -> None:
    def fn(lib: Any) -> Any:
        loc = torch.randn(2, 3)
        comp = {
            "independent": lambda: D.Independent(D.Normal(loc, torch.ones(2, 3)), 1),
            "unknown": lambda: _Plain(loc),
            "tanh": lambda: D.TransformedDistribution(D.Normal(loc, torch.ones(2, 3)), [D.TanhTransform()]),
            "relaxed": lambda: D.RelaxedBernoulli(torch.tensor(0.5), probs=torch.tensor([[0.2, 0.5, 0.9]] * 2)),
            "logistic": lambda: D.LogisticNormal(loc, torch.ones(2, 3)),
            "delta": lambda: D.Independent(lib.nn.distributions.Delta(loc), 1),
        }[which]()
        dist = lib.nn.CompositeDistribution.from_distributions(lib.TensorDict(batch_size=[2]), {"x": comp})
        return dist.deterministic_sample

    check(ref, tb, fn)


def test_composite_entropy_monte_carlo(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        loc = torch.randn(2, 3)
        tanh = D.TransformedDistribution(D.Normal(loc, torch.ones(2, 3)), [D.TanhTransform()])
        dist = lib.nn.CompositeDistribution.from_distributions(
            lib.TensorDict(batch_size=[2]), {"x": tanh, "y": D.Normal(loc, torch.ones(2, 3))}
        )
        out = [dist.entropy(samples_mc=4)]
        with lib.nn.set_composite_lp_aggregate(True):
            out.append(dist.entropy(samples_mc=2))
        out.append(dist.entropy(aggregate_probabilities=True))
        return out

    check(ref, tb, fn)


def test_composite_log_prob_not_a_tensordict(ref: Any, tb: Any) -> None:
    check(ref, tb, lambda lib: lib.nn.CompositeDistribution(_params(lib), _MAP).log_prob(torch.zeros(3)))


def test_composite_is_a_mapping(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        dist = lib.nn.CompositeDistribution(_params(lib), _MAP)
        return [
            ("nested", "disc") in dist,
            "cont" in dist,
            sorted(map(str, dist.keys())),
            dist.__hash__ is None,
            isinstance(dist, D.Distribution),
        ]

    check(ref, tb, fn)


# --------------------------------------------------------------------------------------------------
# InteractionType, set_interaction_type, composite_lp_aggregate
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["random", "RANDOM", "Mode", "median", "mean", "deterministic", "nope", 3])
def test_interaction_type_lookup(ref: Any, tb: Any, value: Any) -> None:
    def fn(lib: Any) -> Any:
        it = lib.nn.InteractionType(value)
        return [repr(it), str(it), f"{it}", it.name, it.value, it == str(it).lower()]

    check(ref, tb, fn)
    if isinstance(value, str):
        check(ref, tb, lambda lib: repr(lib.nn.InteractionType.from_str(value)))


def test_interaction_type_members(ref: Any, tb: Any) -> None:
    check(ref, tb, lambda lib: [(m.name, m.value) for m in lib.nn.InteractionType])


@pytest.mark.parametrize("value", ["mode", "RANDOM", None, 5, "bad"])
def test_set_interaction_type(ref: Any, tb: Any, value: Any) -> None:
    def fn(lib: Any) -> Any:
        seen = [lib.nn.interaction_type()]
        with lib.nn.set_interaction_type(value):
            seen.append(lib.nn.interaction_type())
            with lib.nn.set_interaction_type():
                seen.append(lib.nn.interaction_type())
            seen.append(lib.nn.interaction_type())
        seen.append(lib.nn.interaction_type())
        return [repr(s) for s in seen]

    check(ref, tb, fn)


def test_set_interaction_type_decorator(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        @lib.nn.set_interaction_type("mean")
        def f() -> Any:
            return lib.nn.interaction_type()

        @lib.nn.set_interaction_type("mode")
        def g() -> Any:
            yield lib.nn.interaction_type()
            yield lib.nn.interaction_type()
            return None

        gen = g()
        first = next(gen)
        between = lib.nn.interaction_type()
        second = next(gen)
        return [repr(x) for x in (f(), lib.nn.interaction_type(), first, between, second, list(gen))]

    check(ref, tb, fn)


def test_interaction_type_thread_local(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        seen: list[Any] = []
        ready, done = threading.Event(), threading.Event()

        def other() -> None:
            with lib.nn.set_interaction_type("random", thread_local=True):
                seen.append(("other in", lib.nn.interaction_type()))
                with lib.nn.set_interaction_type("mean"):
                    seen.append(("other nested", lib.nn.interaction_type()))
                    ready.set()
                    done.wait(5)
            seen.append(("other out", lib.nn.interaction_type()))

        thread = threading.Thread(target=other)
        thread.start()
        ready.wait(5)
        seen.append(("main", lib.nn.interaction_type()))
        done.set()
        thread.join()
        with lib.nn.set_interaction_type("mode", thread_local=True):
            seen.append(("main local", lib.nn.interaction_type()))
        seen.append(("main after", lib.nn.interaction_type()))
        return [(k, repr(v)) for k, v in seen]

    check(ref, tb, fn)


def test_composite_lp_aggregate_switch(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        seen = [lib.nn.composite_lp_aggregate(), lib.nn.composite_lp_aggregate(nowarn=True)]
        block = lib.nn.set_composite_lp_aggregate()
        block.set()
        seen.append(lib.nn.composite_lp_aggregate())
        with lib.nn.set_composite_lp_aggregate(False, thread_local=True):
            seen.append(lib.nn.composite_lp_aggregate())
        block.unset()
        seen.append(lib.nn.composite_lp_aggregate())
        seen.append(lib.nn.set_composite_lp_aggregate(True)(lib.nn.composite_lp_aggregate)())
        seen.append(block.mode)
        return seen

    check(ref, tb, fn)


def test_probabilistic_module_names(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        mod = __import__(f"{lib.__name__}.nn.probabilistic", fromlist=["x"])
        names = (
            "InteractionType",
            "interaction_type",
            "set_interaction_type",
            "composite_lp_aggregate",
            "set_composite_lp_aggregate",
            "_use_generator",
        )
        return [hasattr(mod, n) for n in names]

    check(ref, tb, fn)


def test_use_generator(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        use = __import__(f"{lib.__name__}.nn.probabilistic", fromlist=["x"])._use_generator
        gen = torch.Generator().manual_seed(3)
        global_before = torch.get_rng_state()
        with use(gen):
            first = torch.rand(3)
        with use(gen):
            second = torch.rand(3)
        with use(None):
            third = torch.rand(1)
        return [first, second, third, bool((torch.get_rng_state() != global_before).any()), gen.initial_seed()]

    check(ref, tb, fn)


def test_distributions_package_names(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        mod = __import__(f"{lib.__name__}.nn.distributions", fromlist=["x"])
        return [sorted(mod.__all__), sorted(mod.continuous.__all__), sorted(mod.discrete.__all__)]

    check(ref, tb, fn)


@pytest.mark.parametrize(
    "path",
    [
        "nn",
        "nn.probabilistic",
        "nn.utils",
        "nn.distributions",
        "nn.distributions.composite",
        "nn.distributions.continuous",
        "nn.distributions.discrete",
        "nn.distributions.truncated_normal",
    ],
)
def test_public_names_of_nn_modules(ref: Any, tb: Any, path: str) -> None:
    import importlib
    import types

    theirs = importlib.import_module(f"{ref.__name__}.{path}")
    ours = importlib.import_module(f"{tb.__name__}.{path}")
    names = getattr(theirs, "__all__", None) or [n for n in dir(theirs) if not n.startswith("_")]
    wanted = [
        n
        for n in names
        if not isinstance(getattr(theirs, n, None), types.ModuleType) or n in ("continuous", "discrete")
    ]
    assert [n for n in wanted if not hasattr(ours, n)] == []


def test_deprecated_distributions_maps(ref: Any, tb: Any) -> None:
    def fn(lib: Any) -> Any:
        maps = __import__(f"{lib.__name__}.nn.distributions", fromlist=["x"]).distributions_maps
        return sorted((name, cls.__name__) for name, cls in maps.items())

    check(ref, tb, fn)
