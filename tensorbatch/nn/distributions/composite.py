"""A distribution of several named distributions whose samples are TensorDicts."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import torch
from torch import distributions as D
from torch.distributions import constraints

from ..._keys import NestedKey, unravel_key
from ..._td import TensorDict
from ...base import TensorDictBase
from .._switches import InteractionType, composite_lp_aggregate, set_composite_lp_aggregate
from . import _deterministic

__all__ = ["CompositeDistribution"]

_REAL = type(constraints.real)


def _add_suffix(key: NestedKey, suffix: str) -> NestedKey:
    """``key`` with ``suffix`` on its last name: ``("a", "b") -> ("a", "b_log_prob")``."""
    key = unravel_key(key)
    if isinstance(key, str):
        return key + suffix
    return (*key[:-1], key[-1] + suffix)


def _resolve_name_map(name_map: Mapping[NestedKey, NestedKey] | None, names: Any) -> dict[NestedKey, NestedKey]:
    """Each (unravelled) name of ``names`` -> the key its sample is written under."""
    renamed = {unravel_key(k): unravel_key(v) for k, v in (name_map or {}).items()}
    return {name: renamed.get(name, name) for name in map(unravel_key, names)}


def _total(values: Iterable[torch.Tensor], ndim: int) -> torch.Tensor:
    """The sum of ``values``, each summed first over its dims beyond the first ``ndim`` (its event dims)."""
    total: Any = 0.0
    for value in values:
        total = total + (value.flatten(ndim, -1).sum(-1) if value.ndim > ndim else value)
    return cast(torch.Tensor, total)


class CompositeDistribution(D.Distribution, Mapping):  # type: ignore[type-arg]
    """Several named distributions that sample and score TensorDicts.

    The component at ``name`` is ``distribution_map[name](**params[name], **extra_kwargs[name])``. Samples
    (``sample``, ``rsample``, ``mode``, ``mean``, ``deterministic_sample``) are TensorDicts with one entry
    per component at its name (or its ``name_map`` key); the batch size of ``params`` is the batch shape
    and the event shape is ``()``. The distribution is also a read-only mapping from sample keys to
    components. ``log_prob`` and ``entropy`` give one ``<key>_log_prob`` / ``<key>_entropy`` entry per
    component, or one summed tensor under :func:`~tensorbatch.nn.composite_lp_aggregate`.

    Args:
        params: for each name of ``distribution_map``, a TensorDict of keyword arguments.
        distribution_map: name (a nested key) -> distribution class (or any factory of keyword arguments).
        name_map: name -> the key its sample is written under (default: the name).
        extra_kwargs: name -> extra keyword arguments of that component.
        log_prob_key: where ``log_prob_composite(include_sum=True)`` writes the sum
            (default ``"sample_log_prob"``).
        entropy_key: where ``entropy_composite(include_sum=True)`` writes the sum (default ``"entropy"``).

    Raises:
        KeyError: ``params`` has no entry for a name.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import CompositeDistribution
        >>> params = TensorDict({"cont": {"loc": torch.zeros(3, 4), "scale": torch.ones(3, 4)},
        ...                      ("nested", "disc"): {"logits": torch.zeros(3, 10)}}, [3])
        >>> dist = CompositeDistribution(params, {"cont": d.Normal, ("nested", "disc"): d.Categorical})
        >>> sample = dist.sample((4,))
        >>> sample.batch_size, sample["nested", "disc"].shape
        (torch.Size([4, 3]), torch.Size([4, 3]))
        >>> dist.log_prob(sample)["nested", "disc_log_prob"].shape
        torch.Size([4, 3])
    """

    aggregate_probabilities: bool | None  # set by from_distributions only, as tensordict

    def __init__(
        self,
        params: TensorDictBase,
        distribution_map: dict[NestedKey, Any],
        *,
        name_map: dict[NestedKey, NestedKey] | None = None,
        extra_kwargs: dict[NestedKey, dict[str, Any]] | None = None,
        log_prob_key: NestedKey | None = None,
        entropy_key: NestedKey | None = None,
    ) -> None:
        self._batch_shape = params.shape
        self._event_shape = torch.Size(())
        extra_kwargs = extra_kwargs or {}
        keys = _resolve_name_map(name_map, distribution_map)
        dists: dict[NestedKey, D.Distribution] = {}
        for raw_name, factory in distribution_map.items():
            name = unravel_key(raw_name)
            dist_params = params.get(name)
            if dist_params is None:
                raise KeyError(f"no param {name} found in params with keys {params.keys(True, True)}")
            kwargs = extra_kwargs.get(name, extra_kwargs.get(raw_name, {}))
            dists[keys[name]] = factory(**dist_params, **kwargs)
        self.dists = dists
        self.log_prob_key = log_prob_key
        self.entropy_key = entropy_key

    @classmethod
    def from_distributions(
        cls,
        params: TensorDictBase,
        distributions: Mapping[NestedKey, D.Distribution],
        *,
        name_map: dict[NestedKey, NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        entropy_key: NestedKey | None = None,
    ) -> CompositeDistribution:
        """A composite of existing distribution instances; ``params`` only gives the batch shape.

        Examples:
            >>> import torch
            >>> from torch import distributions as d
            >>> from tensorbatch import TensorDict
            >>> from tensorbatch.nn import CompositeDistribution
            >>> dist = CompositeDistribution.from_distributions(
            ...     TensorDict(batch_size=[3]), {"a": d.Normal(torch.zeros(3), torch.ones(3))})
            >>> dist.sample().batch_size
            torch.Size([3])
        """
        self = cls.__new__(cls)
        self._batch_shape = params.shape
        self._event_shape = torch.Size(())
        keys = _resolve_name_map(name_map, distributions)
        self.dists = {keys[unravel_key(name)]: dist for name, dist in distributions.items()}
        self.log_prob_key = log_prob_key
        self.entropy_key = entropy_key
        self.aggregate_probabilities = None
        return self

    def __iter__(self) -> Iterator[NestedKey]:
        yield from self.dists

    def __getitem__(self, item: NestedKey) -> D.Distribution:
        return self.dists[item]

    def __len__(self) -> int:
        return len(self.dists)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dists})"

    @property
    def log_prob_key(self) -> NestedKey:
        """Where the summed log-probability goes (``"sample_log_prob"`` unless set; None restores it)."""
        return "sample_log_prob" if self._log_prob_key is None else self._log_prob_key

    @log_prob_key.setter
    def log_prob_key(self, value: NestedKey | None) -> None:
        self._log_prob_key = value

    @property
    def entropy_key(self) -> NestedKey:
        """Where the summed entropy goes (``"entropy"`` unless set; None restores it)."""
        return "entropy" if self._entropy_key is None else self._entropy_key

    @entropy_key.setter
    def entropy_key(self, value: NestedKey | None) -> None:
        self._entropy_key = value

    def _gather(self, values: Mapping[NestedKey, Any], shape: torch.Size | None = None) -> TensorDict:
        return TensorDict(dict(values), self.batch_shape if shape is None else shape + self.batch_shape)

    def sample(self, shape: torch.Size | tuple[int, ...] | None = None) -> TensorDictBase:  # type: ignore[override]
        """One sample per component, in a TensorDict of batch size ``shape + batch_shape``."""
        shape = torch.Size(shape or ())
        return self._gather({name: dist.sample(shape) for name, dist in self.dists.items()}, shape)

    def rsample(self, shape: torch.Size | tuple[int, ...] | None = None) -> TensorDictBase:  # type: ignore[override]
        """One reparameterized sample per component (each must have ``rsample``)."""
        shape = torch.Size(shape or ())
        return self._gather({name: dist.rsample(shape) for name, dist in self.dists.items()}, shape)

    @property
    def mode(self) -> TensorDictBase:  # type: ignore[override]
        """The mode of each component."""
        return self._gather({name: dist.mode for name, dist in self.dists.items()})

    @property
    def mean(self) -> TensorDictBase:  # type: ignore[override]
        """The mean of each component."""
        return self._gather({name: dist.mean for name, dist in self.dists.items()})

    @property
    def deterministic_sample(self) -> TensorDictBase:
        """Each component's ``deterministic_sample``, else its mode (discrete support) or mean.

        A class that the fallback register does not know is judged by its support, with a warning.

        Raises:
            NotImplementedError: the fallback attribute is not implemented.
        """
        return self._gather({name: self._deterministic(dist) for name, dist in self.dists.items()})

    def _deterministic(self, dist: D.Distribution) -> Any:
        value = _deterministic.deterministic_sample(dist)
        if value is not None:
            return value
        kind = _deterministic.registered(dist)
        if kind is InteractionType.DETERMINISTIC and isinstance(dist, D.Independent):
            value = _deterministic.deterministic_sample(dist.base_dist)
            if value is not None:
                return value  # Independent leaves its base's samples unchanged
        if kind is None:
            try:
                fallback = "mean" if isinstance(dist.support, _REAL) else "mode"
            except NotImplementedError:
                fallback = "mean"  # custom distributions without a support
        elif kind in (InteractionType.MEAN, InteractionType.MODE):
            fallback = kind.value
        else:
            raise RuntimeError(f"InteractionType {kind} is unaccounted for.")
        errors: tuple[type[Exception], ...] = (
            (AttributeError, NotImplementedError) if kind is None else (NotImplementedError,)
        )
        try:
            result = dist.mean if fallback == "mean" else dist.mode
        except errors as err:
            raise NotImplementedError(
                f"{type(dist)} has no deterministic_sample, and its {fallback} is not implemented, so "
                f"{type(self).__name__} cannot compute a deterministic sample for it. Use a distribution with a "
                f"deterministic_sample attribute (for example TanhNormal), or another interaction type."
            ) from err
        if kind is None:
            warnings.warn(
                f"deterministic_sample wasn't found when queried on {type(dist)}. {type(self).__name__} is falling "
                f"back on {fallback} instead. For better code quality and efficiency, make sure to either provide "
                f"a distribution with a deterministic_sample attribute or to change the InteractionMode to the "
                f"desired value.",
                UserWarning,
                stacklevel=3,
            )
        return result

    def sample_and_log_prob(
        self, shape: torch.Size | tuple[int, ...] | None = None
    ) -> tuple[TensorDictBase, torch.Tensor | TensorDictBase]:
        """A sample and the log-probability of that draw (as :meth:`log_prob` lays it out).

        Each component uses its own ``sample_and_log_prob`` when it has one.
        """
        return self._sample_and_log_prob(shape, reparameterize=False)

    def rsample_and_log_prob(
        self, shape: torch.Size | tuple[int, ...] | None = None
    ) -> tuple[TensorDictBase, torch.Tensor | TensorDictBase]:
        """As :meth:`sample_and_log_prob`, with reparameterized samples."""
        return self._sample_and_log_prob(shape, reparameterize=True)

    def _sample_and_log_prob(
        self, shape: torch.Size | tuple[int, ...] | None, *, reparameterize: bool
    ) -> tuple[TensorDictBase, torch.Tensor | TensorDictBase]:
        shape = torch.Size(shape or ())
        joint = "rsample_and_log_prob" if reparameterize else "sample_and_log_prob"
        samples, log_probs = {}, {}
        for name, dist in self.dists.items():
            if callable(getattr(type(dist), joint, None)):
                samples[name], log_probs[name] = getattr(dist, joint)(shape)
            else:
                samples[name] = dist.rsample(shape) if reparameterize else dist.sample(shape)
                log_probs[name] = dist.log_prob(samples[name])
        sample = self._gather(samples, shape)
        if not composite_lp_aggregate():
            renamed = {_add_suffix(name, "_log_prob"): lp for name, lp in log_probs.items()}
            return sample, sample.empty(recurse=True).update(renamed).filter_empty_()
        return sample, _total(log_probs.values(), sample.ndim)

    def log_prob(self, sample: TensorDictBase) -> torch.Tensor | TensorDictBase:  # type: ignore[override]
        """The log-probability of ``sample``: per component (``<key>_log_prob``), or summed when aggregating.

        Examples:
            >>> import torch
            >>> from torch import distributions as d
            >>> from tensorbatch import TensorDict
            >>> from tensorbatch.nn import CompositeDistribution, set_composite_lp_aggregate
            >>> params = TensorDict(a={"loc": torch.zeros(2), "scale": torch.ones(2)}, batch_size=[2])
            >>> dist = CompositeDistribution(params, {"a": d.Normal})
            >>> sample = TensorDict(a=torch.zeros(2), batch_size=[2])
            >>> list(dist.log_prob(sample).keys())
            ['a_log_prob']
            >>> with set_composite_lp_aggregate(True):
            ...     dist.log_prob(sample)
            tensor([-0.9189, -0.9189])
        """
        if not composite_lp_aggregate():
            with set_composite_lp_aggregate(False):
                return self.log_prob_composite(sample)
        return _total((dist.log_prob(sample.get(name)) for name, dist in self.dists.items()), sample.ndim)

    def log_prob_composite(self, sample: TensorDictBase, *, include_sum: bool | None = None) -> TensorDictBase:
        """The log-probability of each component at ``<key>_log_prob``.

        Args:
            sample: the value of each component at its key.
            include_sum: also write the sum (over components and event dims) at :attr:`log_prob_key`
                (default: :func:`~tensorbatch.nn.composite_lp_aggregate`).

        Returns:
            A new TensorDict; while aggregating, ``sample`` itself, updated.

        Raises:
            RuntimeError: ``sample`` is no TensorDict.
        """
        aggregate = composite_lp_aggregate()
        include_sum = aggregate if include_sum is None else include_sum
        out: dict[NestedKey, Any] = {}
        for name, dist in self.dists.items():
            try:
                out[_add_suffix(name, "_log_prob")] = dist.log_prob(sample.get(name))
            except AttributeError:
                raise RuntimeError(
                    f"Expected a tensordict sample, but got a {type(sample).__name__} instead."
                ) from None
        if include_sum:
            out[self.log_prob_key] = _total(list(out.values()), sample.ndim)
        if aggregate:
            return sample.update(out)
        return sample.empty(recurse=True).update(out).filter_empty_()

    def _entropies(self, samples_mc: int) -> dict[NestedKey, torch.Tensor]:
        found = {}
        for name, dist in self.dists.items():
            try:
                found[name] = dist.entropy()
            except NotImplementedError:  # a Monte Carlo estimate from reparameterized samples
                found[name] = -dist.log_prob(dist.rsample((samples_mc,))).mean(0)
        return found

    def entropy(  # type: ignore[override]
        self,
        samples_mc: int = 1,
        *,
        aggregate_probabilities: bool | None = None,
        include_sum: bool | None = None,
    ) -> torch.Tensor | TensorDictBase:
        """The entropy of each component (``<key>_entropy``), or their sum when aggregating.

        A component without a closed form gets a Monte Carlo estimate from ``samples_mc`` samples.

        Args:
            samples_mc: the number of samples of a Monte Carlo estimate.
            aggregate_probabilities: deprecated and ignored (warns); use
                :class:`~tensorbatch.nn.set_composite_lp_aggregate`.
            include_sum: see :meth:`entropy_composite`.
        """
        if aggregate_probabilities is not None:
            warnings.warn(
                "CompositeDistribution.entropy(aggregate_probabilities=...), which has no effect, is "
                "deprecated and will be removed in TensorDict 0.17. Use set_composite_lp_aggregate "
                "instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        aggregate = composite_lp_aggregate()
        if not aggregate:
            return self.entropy_composite(samples_mc, include_sum=aggregate if include_sum is None else include_sum)
        return _total(self._entropies(samples_mc).values(), len(self.batch_shape))

    def entropy_composite(self, samples_mc: int = 1, *, include_sum: bool | None = None) -> TensorDictBase:
        """The entropy of each component at ``<key>_entropy``, in a new TensorDict of batch ``batch_shape``.

        Args:
            samples_mc: the number of samples of a Monte Carlo estimate.
            include_sum: also write the sum (over components and event dims) at :attr:`entropy_key`
                (default: :func:`~tensorbatch.nn.composite_lp_aggregate`).
        """
        include_sum = composite_lp_aggregate() if include_sum is None else include_sum
        entropies = self._entropies(samples_mc)
        out: dict[NestedKey, Any] = {_add_suffix(name, "_entropy"): value for name, value in entropies.items()}
        if include_sum:
            out[self.entropy_key] = _total(entropies.values(), len(self.batch_shape))
        return self._gather(out)

    def cdf(self, sample: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Writes each component's CDF of its value at ``<key>_cdf`` into ``sample``; returns ``sample``."""
        return sample.update(
            {_add_suffix(name, "_cdf"): dist.cdf(sample.get(name)) for name, dist in self.dists.items()}
        )

    def icdf(self, sample: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Writes each component's inverse CDF of ``<key>_cdf`` (else of the CDF of ``key``) at ``<key>_icdf``.

        Raises:
            KeyError: ``sample`` has neither ``key`` nor ``<key>_cdf`` for a component.
        """
        for name, dist in self.dists.items():
            cdf_key = _add_suffix(name, "_cdf")
            prob = sample.get(cdf_key)
            if prob is None:
                value = sample.get(name)
                if value is None:
                    raise KeyError(
                        f"Neither {name} nor {cdf_key} could be found in the sampled tensordict. Make "
                        f"sure one of these is available to icdf."
                    )
                prob = dist.cdf(value)
            sample.set(_add_suffix(name, "_icdf"), dist.icdf(prob))
        return sample
