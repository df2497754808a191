"""ProbabilisticTensorDictModule: build a distribution from TensorDict entries and write a value drawn from it.

Log-probability keys (``return_log_prob=True``), by :func:`~tensorbatch.nn.composite_lp_aggregate` (read when
the module is built, and checked at each use):

==========================================  ===============================  ==============================
sampled keys                                False (the default)              True
==========================================  ===============================  ==============================
one, ``"action"``                           ``"action_log_prob"``            ``"sample_log_prob"``
one nested, ``("agent", "action")``         ``("agent", "action_log_prob")`` ``"sample_log_prob"``
a CompositeDistribution's ``a``, ``(n, b)`` ``"a_log_prob"``, ``(n, "b_log_prob")``  the same, and their sum at
                                                                             ``"sample_log_prob"``
==========================================  ===============================  ==============================

``log_prob_key`` (one sampled key, or the sum) and ``log_prob_keys`` (one per sampled key) choose others.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator
from textwrap import indent
from typing import Any, cast

import torch
from torch import distributions as D
from torch.compiler import is_compiling

from .._errors import user_stacklevel
from .._keys import NestedKey, unravel_key
from .._ops.traverse import is_non_tensor
from ..base import TensorDictBase
from ._switches import InteractionType, composite_lp_aggregate, interaction_type, set_composite_lp_aggregate
from .common import TensorDictModuleBase, _module_forward
from .distributions import _by_name, _deterministic
from .distributions.composite import CompositeDistribution, _add_suffix, _resolve_name_map, _total
from .distributions.continuous import Delta

__all__ = ["ProbabilisticTensorDictModule"]

_TORCH_DIR = (os.path.dirname(torch.__file__),)  # warnings point past torch's frames too
_REAL = type(D.constraints.real)


@contextlib.contextmanager
def _use_generator(generator: torch.Generator | None) -> Iterator[None]:
    """Draws the block's global random numbers from ``generator`` (which advances); the global RNG stays.

    A no-op for ``None`` and under ``torch.compile`` (forking the RNG state is not traceable).
    """
    if generator is None or is_compiling():
        yield
        return
    device = generator.device
    cuda = device.type == "cuda"
    read: Callable[[], torch.Tensor] = (
        functools.partial(torch.cuda.get_rng_state, device) if cuda else torch.get_rng_state
    )
    write: Callable[[torch.Tensor], None] = (
        functools.partial(torch.cuda.set_rng_state, device=device) if cuda else torch.set_rng_state
    )
    with torch.random.fork_rng(devices=[device.index] if cuda else []):
        write(generator.get_state())
        try:
            yield
        finally:
            generator.set_state(read())


def _is_inside(key: NestedKey, other: NestedKey) -> bool:
    key = (key,) if isinstance(key, str) else key
    other = (other,) if isinstance(other, str) else other
    return len(key) > len(other) and key[: len(other)] == other


def _rename_entries(tensordict: TensorDictBase, renames: list[tuple[NestedKey, NestedKey]]) -> None:
    """Move each ``old`` entry to ``new`` (all read before any is written: keys may swap)."""
    values = [tensordict.pop(old) for old, _ in renames]
    for (_, new), value in zip(renames, values, strict=True):
        tensordict.set(new, value)


def _joint_sampler(dist: Any) -> Any:
    """``dist``'s method drawing a sample with its log-probability (reparameterized when it can), or None."""
    if not isinstance(dist, D.Distribution):
        return None
    name = "rsample_and_log_prob" if dist.has_rsample else "sample_and_log_prob"
    return getattr(dist, name) if callable(getattr(type(dist), name, None)) else None


def _summed_log_prob(log_prob: Any) -> Any:
    """The sum over entries and their feature dims of a TensorDict of log-probabilities."""
    return _total(list(log_prob.values(True, True)), log_prob.batch_dims)


def _plain_kwargs(kwargs: Any) -> Any:
    """``distribution_kwargs`` as dynamo can unpack them (a TensorDict's entries, non-tensor values unwrapped)."""
    if not is_compiling() or not isinstance(kwargs, TensorDictBase):
        return kwargs
    return {key: value.data if is_non_tensor(value) else value for key, value in kwargs.items()}


class ProbabilisticTensorDictModule(TensorDictModuleBase):
    """A module drawing a value from a distribution built from TensorDict entries.

    It builds ``distribution_class(**params, **distribution_kwargs)`` from the entries at ``in_keys`` and writes
    a value of it at ``out_keys``. The value follows the interaction type (:func:`~tensorbatch.nn.interaction_type`
    inside :class:`~tensorbatch.nn.set_interaction_type`, else ``default_interaction_type``; see
    :class:`~tensorbatch.nn.InteractionType`). With ``return_log_prob=True`` the module also writes the
    log-probability of the value (keys: see this module's docstring); under ``RANDOM`` it draws and scores in
    one call when the distribution has ``(r)sample_and_log_prob``. The default ``Delta`` copies the input. A
    module whose outputs are present is skipped under :class:`~tensorbatch.nn.set_skip_existing`.

    Args:
        in_keys: the parameters' keys; the last name of each is the distribution's keyword, or a dict
            ``{keyword: key}``.
        out_keys: where the values go. Default: a CompositeDistribution's ``name_map`` values or
            ``distribution_map`` keys; for another distribution ``"_"`` (with a FutureWarning at the first call).
        default_interaction_type: the interaction type outside :class:`~tensorbatch.nn.set_interaction_type`.
        distribution_class: a distribution class or factory of keyword arguments (or its name).
        distribution_kwargs: more keyword arguments (a TensorDictParams moves with the module).
        return_log_prob: also write the log-probability.
        log_prob_keys: one log-probability key per sampled key (not while aggregating).
        log_prob_key: the log-probability key of the one sampled key, or of the sum while aggregating.
        cache_dist: deprecated, no effect.
        n_empirical_estimate: how many samples ``MEAN`` averages for a distribution without ``mean``.
        num_samples: leading sample dims of each value; the output is expanded to them.
        generator: the random source: a ``torch.Generator``, a seed, or the key of one (or of a seed) in
            the input; the global RNG is left alone. Ignored under ``torch.compile``.

    Raises:
        KeyError: a CompositeDistribution without ``distribution_map``.
        ValueError: dict ``in_keys`` whose keys are not strings; a custom log-probability key at, inside or
            around a sample key.
        RuntimeError: ``log_prob_keys`` while aggregating, ``log_prob_key`` with several sampled keys while
            not.
        TypeError: ``generator`` of another type.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import InteractionType, ProbabilisticTensorDictModule
        >>> module = ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...     distribution_class=d.Normal, default_interaction_type=InteractionType.RANDOM, return_log_prob=True)
        >>> _ = torch.manual_seed(0)
        >>> td = module(TensorDict(loc=torch.zeros(3), scale=torch.ones(3)))
        >>> td["action"], td["action_log_prob"]
        (tensor([ 1.5410, -0.2934, -2.1788]), tensor([-2.1063, -0.9620, -3.2925]))
    """

    _warn_default_out_key = False  # out_keys defaulted to "_": warn at the first write there
    _CHANGE_IN_C_LP_A = (
        "The value returned by composite_lp_aggregate changed between init of {} and its execution "
        "({} -> {}). Make sure the mode matches."
    )

    def __init__(
        self,
        in_keys: NestedKey | list[NestedKey] | dict[str, NestedKey],
        out_keys: NestedKey | list[NestedKey] | None = None,
        *,
        default_interaction_type: InteractionType | str = InteractionType.DETERMINISTIC,
        distribution_class: Any = Delta,
        distribution_kwargs: Any = None,
        return_log_prob: bool = False,
        log_prob_keys: list[NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
        num_samples: int | torch.Size | None = None,
        generator: torch.Generator | int | NestedKey | None = None,
    ) -> None:
        super().__init__()
        distribution_kwargs = {} if distribution_kwargs is None else distribution_kwargs
        if isinstance(in_keys, (str, tuple)):
            in_keys = [in_keys]
        out_keys = self._default_out_keys(out_keys, distribution_class, distribution_kwargs)
        dist_keys: Any
        if isinstance(in_keys, dict):
            dist_keys, in_keys = tuple(in_keys), list(in_keys.values())
            if set(map(type, dist_keys)) != {str}:
                raise ValueError(
                    "If in_keys is dict, its keys must be strings matching to the distribution kwargs."
                    f"{type(self).__name__} got {dist_keys}"
                )
        else:
            dist_keys = in_keys
        self._out_keys = [unravel_key(k) for k in out_keys]
        self.in_keys = list(in_keys)
        self.dist_keys = dist_keys
        aggregate = composite_lp_aggregate()
        log_prob_keys, log_prob_key = self._lp_keys(out_keys, log_prob_keys, log_prob_key, aggregate)
        self._log_prob_key: Any = log_prob_key
        self._log_prob_keys: Any = log_prob_keys
        # (default key, custom key) pairs: ProbabilisticTensorDictSequential.log_prob renames them
        self._custom_log_prob_keys: list[tuple[NestedKey, NestedKey]] = []
        if log_prob_keys is not None and len(log_prob_keys) == len(self._out_keys):
            for out_key, lp_key in zip(self._out_keys, log_prob_keys, strict=True):
                if lp_key != _add_suffix(out_key, "_log_prob"):
                    self._custom_log_prob_keys.append((_add_suffix(out_key, "_log_prob"), lp_key))
        self.default_interaction_type = InteractionType(default_interaction_type)
        if isinstance(distribution_class, str):
            distribution_class = _by_name().get(distribution_class.lower())
        self.distribution_class = distribution_class
        self.distribution_kwargs = distribution_kwargs
        if return_log_prob:
            self._check_log_prob_keys(log_prob_keys, log_prob_key)
        self.n_empirical_estimate = n_empirical_estimate
        self._dist = None
        if cache_dist:
            warnings.warn(
                "ProbabilisticTensorDictModule(cache_dist=True) is deprecated and will be removed in TensorDict 0.17.",
                DeprecationWarning,
                stacklevel=2,
            )
        self.cache_dist = cache_dist if hasattr(distribution_class, "update") else False
        self.return_log_prob = return_log_prob
        if isinstance(num_samples, (int, torch.SymInt)):
            num_samples = torch.Size((num_samples,))
        self.num_samples = num_samples
        self._composite_lp_aggreate_at_init = aggregate
        self._generator: torch.Generator | None = None
        self._generator_key: NestedKey | None = None
        if isinstance(generator, torch.Generator):
            self._generator = generator
        elif isinstance(generator, int) and not isinstance(generator, bool):
            self._generator = torch.Generator()
            self._generator.manual_seed(generator)
        elif isinstance(generator, (str, tuple)):
            self._generator_key = unravel_key(generator)
        elif generator is not None:
            raise TypeError(
                f"generator must be a torch.Generator, int, NestedKey, or None; got {type(generator).__name__}."
            )

    def _default_out_keys(self, out_keys: Any, distribution_class: Any, distribution_kwargs: Any) -> list[Any]:
        if isinstance(out_keys, (str, tuple)):
            return [out_keys]
        if out_keys is not None:
            return list(out_keys)
        if distribution_class is not CompositeDistribution:
            self._warn_default_out_key = True
            return ["_"]
        distribution_map = distribution_kwargs.get("distribution_map")
        if distribution_map is None:
            raise KeyError(
                "'distribution_map' must be provided within distribution_kwargs whenever the "
                "distribution is of type CompositeDistribution."
            )
        name_map = distribution_kwargs.get("name_map")
        if name_map is None:
            return list(distribution_map.keys())
        mapped = {unravel_key(name) for name in name_map}
        if any(unravel_key(name) not in mapped for name in distribution_map):
            warnings.warn(
                "ProbabilisticTensorDictModule got a name_map that leaves out components of "
                "distribution_map and no out_keys: these components are written but are not in "
                "out_keys. Starting with TensorDict 0.17, the default will change to out_keys that "
                "include them. Pass out_keys to keep the current keys.",
                FutureWarning,
                stacklevel=user_stacklevel(_TORCH_DIR),
            )
        return list(name_map.values())

    def _lp_keys(self, out_keys: list[Any], log_prob_keys: Any, log_prob_key: Any, aggregate: bool) -> Any:
        """The (``log_prob_keys``, ``log_prob_key``) pair the module keeps, per the table of the module doc."""
        if log_prob_keys is None:
            if len(out_keys) == 1 and log_prob_key is not None:
                log_prob_keys = [log_prob_key]
            elif aggregate:
                log_prob_keys = ["sample_log_prob"] if len(out_keys) == 1 else None
            else:
                log_prob_keys = [_add_suffix(key, "_log_prob") for key in self._out_keys]
        elif aggregate:
            raise RuntimeError(
                "composite_lp_aggregate is set to True but log_prob_keys were passed. When "
                "composite_lp_aggregate() returns ``True``, log_prob_key must be used instead."
            )
        if log_prob_key is None:
            if aggregate:
                log_prob_key = "sample_log_prob"
            elif len(out_keys) == 1:
                log_prob_key = _add_suffix(out_keys[0], "_log_prob")
        elif len(out_keys) > 1 and not aggregate:
            raise RuntimeError(
                "composite_lp_aggregate is set to `False` but a `log_prob_key` was passed. When "
                "composite_lp_aggregate() returns ``False``, log_prob_keys must be used instead."
            )
        return log_prob_keys, log_prob_key

    def _check_log_prob_keys(self, log_prob_keys: Any, log_prob_key: Any) -> None:
        """Refuse a custom log-probability key at, inside or around a sample key (it would overwrite the sample).

        The sample keys are known for a distribution class only (not for a factory).
        """
        cls = self.distribution_class
        if not isinstance(cls, type):
            return
        if issubclass(cls, CompositeDistribution):
            distribution_map = self.distribution_kwargs.get("distribution_map")
            if distribution_map is None:
                return
            sample_keys = list(_resolve_name_map(self.distribution_kwargs.get("name_map"), distribution_map).values())
        else:
            sample_keys = self._out_keys
        defaults = {_add_suffix(key, "_log_prob") for key in [*self._out_keys, *sample_keys]} | {"sample_log_prob"}
        candidates = log_prob_keys if log_prob_keys is not None else [log_prob_key]
        clashes = [
            (lp_key, sample_key)
            for lp_key in (unravel_key(k) for k in candidates if isinstance(k, (str, tuple)))
            if lp_key not in defaults
            for sample_key in sample_keys
            if lp_key == sample_key or _is_inside(lp_key, sample_key) or _is_inside(sample_key, lp_key)
        ]
        if clashes:
            raise ValueError(
                "A custom log-probability key cannot be a sample key, lie inside one or hold one, since "
                "writing the log-probability would overwrite the sample. Got "
                + ", ".join(f"log-probability key {lp!r} for sample key {sk!r}" for lp, sk in clashes)
                + "."
            )

    def __repr__(self) -> str:
        fields = [
            f"in_keys={self.in_keys}",
            f"out_keys={self.out_keys}",
            f"distribution_class={self.distribution_class}",
            f"distribution_kwargs={self.distribution_kwargs})",
            f"default_interaction_type={self.default_interaction_type})",
            f"num_samples={self.num_samples})",
        ]
        separators = [",", ",", ", ", ",", ",", ")"]
        return f"{type(self).__name__}(" + "".join(
            f"\n{indent(field, 4 * ' ')}{sep}" for field, sep in zip(fields, separators, strict=True)
        )

    @property  # type: ignore[misc]
    def out_keys(self) -> list[NestedKey]:
        """The sampled keys, then (with ``return_log_prob``) the log-probability keys."""
        out_keys = list(self._out_keys)
        if self.return_log_prob:
            if not composite_lp_aggregate():
                if out_keys[-len(self.log_prob_keys) :] != self.log_prob_keys:
                    out_keys.extend(self.log_prob_keys)
            elif self.log_prob_key not in out_keys:
                out_keys.append(self.log_prob_key)
        return out_keys

    def _check_aggregate(self, what: str) -> bool:
        aggregate = composite_lp_aggregate()
        if aggregate != self._composite_lp_aggreate_at_init:
            raise RuntimeError(
                f"composite_lp_aggregate is set to `{aggregate}`, but the class was instantiated "
                f"with `{self._composite_lp_aggreate_at_init}` which may affect the {what} property."
            )
        return aggregate

    @property
    def log_prob_key(self) -> NestedKey:
        """The one log-probability key (the sum's while aggregating).

        Raises:
            RuntimeError: the aggregation mode changed since the module was built, or there are several keys.
        """
        if not self._check_aggregate("log_prob_key"):
            if len(self.log_prob_keys) == 1:
                return self.log_prob_keys[0]
            raise RuntimeError(
                f"composite_lp_aggregate is set to ``False``, hence {type(self).__name__}.log_prob_key cannot be "
                f"accessed unless there is one and only one element in log_prob_keys (got "
                f"log_prob_keys={self.log_prob_keys}). When composite_lp_aggregate() returns ``False``, try to use "
                f"{type(self).__name__}.log_prob_keys instead."
            )
        return cast(NestedKey, self._log_prob_key)

    @property
    def log_prob_keys(self) -> list[NestedKey]:
        """The log-probability keys: one per sampled key, or ``[log_prob_key]`` while aggregating.

        Raises:
            RuntimeError: the aggregation mode changed since the module was built.
        """
        if self._check_aggregate("log_prob_keys"):
            return [self.log_prob_key]
        return cast(list[NestedKey], self._log_prob_keys)

    @property
    def dist_params_keys(self) -> list[NestedKey]:
        """The parameters' keys: ``in_keys``."""
        return list(self.in_keys)

    @property
    def dist_sample_keys(self) -> list[NestedKey]:
        """The sampled keys (``out_keys`` without the log-probability keys)."""
        return list(self._out_keys)

    def get_dist(self, tensordict: TensorDictBase) -> D.Distribution:
        """The distribution built from the parameters in ``tensordict``.

        Raises:
            TypeError: the entries do not match the distribution's keywords.

        Examples:
            >>> import torch
            >>> from torch import distributions as d
            >>> from tensorbatch import TensorDict
            >>> from tensorbatch.nn import ProbabilisticTensorDictModule
            >>> module = ProbabilisticTensorDictModule(in_keys={"loc": "mu", "scale": "sigma"}, out_keys=["x"],
            ...                                        distribution_class=d.Normal)
            >>> module.get_dist(TensorDict(mu=torch.zeros(2), sigma=torch.ones(2))).entropy()
            tensor([1.4189, 1.4189])
        """
        try:
            kwargs = {}
            for dist_key, td_key in zip(self.dist_keys, self.in_keys, strict=True):
                kwargs[dist_key[-1] if isinstance(dist_key, tuple) else dist_key] = tensordict.get(td_key, None)
            dist: D.Distribution = self.distribution_class(**kwargs, **_plain_kwargs(self.distribution_kwargs))
        except TypeError as err:
            if "an unexpected keyword argument" in str(err):
                raise TypeError(
                    "distribution keywords and tensordict keys indicated by "
                    "ProbabilisticTensorDictModule.dist_keys must match. Got this error message: \n"
                    f"{indent(str(err), 4 * ' ')}\nwith dist_keys={self.dist_keys}"
                ) from None
            if re.search(r"missing.*required positional arguments", str(err)):
                raise TypeError(
                    f"TensorDict with keys {tensordict.keys()} does not match the distribution "
                    f"{self.distribution_class} keywords."
                ) from None
            raise
        return dist

    build_dist_from_params = get_dist

    def log_prob(self, tensordict: TensorDictBase, *, dist: D.Distribution | None = None) -> Any:
        """The log-probability of the values in ``tensordict`` (a TensorDict for a composite, unless aggregating).

        Args:
            tensordict: the parameters and the values.
            dist: the distribution (default: built from ``tensordict``).

        Raises:
            RuntimeError: the aggregation mode changed since the module was built (composite distributions).
        """
        if dist is None:
            dist = self.get_dist(tensordict)
        if not isinstance(dist, CompositeDistribution):
            return dist.log_prob(tensordict.get(self.out_keys[0]))
        aggregate = composite_lp_aggregate()
        if aggregate != self._composite_lp_aggreate_at_init:
            raise RuntimeError(
                self._CHANGE_IN_C_LP_A.format(type(self).__name__, self._composite_lp_aggreate_at_init, aggregate)
            )
        lp: Any
        if aggregate:
            with set_composite_lp_aggregate(False):
                lp = dist.log_prob(tensordict)
                tensordict.update(lp)
            return _summed_log_prob(lp)
        lp = dist.log_prob(tensordict)
        self._update_td_lp(lp)
        return lp

    def _update_td_lp(self, lp: Any) -> None:
        renames = []
        for out_key, lp_key in zip(self.dist_sample_keys, self.log_prob_keys, strict=True):
            if lp_key != _add_suffix(out_key, "_log_prob"):
                renames.append((_add_suffix(out_key, "_log_prob"), lp_key))
        if renames:
            _rename_entries(lp, renames)

    @_module_forward
    def forward(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None, _requires_sample: bool = True
    ) -> TensorDictBase:
        """Builds the distribution and writes its value (and log-probability) at ``out_keys``.

        Args:
            tensordict: the parameters.
            tensordict_out: where to write (default: ``tensordict``).
            _requires_sample: False when the values are in the input already (only score them).

        Returns:
            ``tensordict_out``, expanded to ``num_samples + batch_size`` when ``num_samples`` is set.
        """
        if tensordict_out is None:
            tensordict_out = tensordict
        dist = self.get_dist(tensordict)
        if _requires_sample:
            return self._write_sample(dist, tensordict, tensordict_out)
        if self.return_log_prob:
            self._write_log_prob_of_input(dist, tensordict, tensordict_out)
        return tensordict_out

    def _write_sample(self, dist: Any, tensordict: TensorDictBase, tensordict_out: TensorDictBase) -> TensorDictBase:
        generator, writeback = self._resolve_generator(tensordict)
        log_prob = None
        joint = None
        if self.return_log_prob and (interaction_type() or self.default_interaction_type) is InteractionType.RANDOM:
            joint = _joint_sampler(dist)
        if joint is not None:  # score the draw itself, not a value recovered from it (a saturated tanh)
            composite = isinstance(dist, CompositeDistribution)
            with (
                _use_generator(generator),
                set_composite_lp_aggregate(False) if composite else contextlib.nullcontext(),
            ):
                out, log_prob = joint(self.num_samples or torch.Size(()))
        else:
            out = self._dist_sample(dist, interaction_type=interaction_type(), generator=generator)
        if writeback is not None:
            writeback(generator)
        if self.num_samples is not None:
            tensordict_out = tensordict_out.expand(self.num_samples + tensordict_out.shape)
        if isinstance(out, TensorDictBase):
            if self.return_log_prob:
                aggregate = composite_lp_aggregate()
                if aggregate != self._composite_lp_aggreate_at_init:
                    raise RuntimeError(
                        self._CHANGE_IN_C_LP_A.format(
                            type(self).__name__, self._composite_lp_aggreate_at_init, aggregate
                        )
                    )
                if aggregate:
                    if log_prob is None:
                        with set_composite_lp_aggregate(False):
                            log_prob = dist.log_prob(out)
                    if log_prob is not out:
                        out.update(log_prob)
                    out.set(self.log_prob_key, _summed_log_prob(log_prob))
                else:
                    if log_prob is None:
                        log_prob = dist.log_prob(out)
                    self._update_td_lp(log_prob)
                    out.update(log_prob)
            tensordict_out.update(out)
            return tensordict_out
        values = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        if self._warn_default_out_key and not torch.compiler.is_dynamo_compiling():
            self._warn_default_out_key = False
            warnings.warn(
                'ProbabilisticTensorDictModule got no out_keys and writes its sample at "_". Starting '
                'with TensorDict 0.17, the default will change to not writing the sample at "_". Pass '
                "out_keys to write the sample at a key of your choice and silence this warning.",
                FutureWarning,
                stacklevel=user_stacklevel(_TORCH_DIR),
            )
        tensordict_out.update(dict(zip(self.dist_sample_keys, values, strict=True)))
        if self.return_log_prob:
            tensordict_out.set(self.log_prob_key, dist.log_prob(*values) if log_prob is None else log_prob)
        return tensordict_out

    def _write_log_prob_of_input(
        self, dist: D.Distribution, tensordict: TensorDictBase, tensordict_out: TensorDictBase
    ) -> None:
        values = [tensordict.get(key) for key in self.out_keys if key not in self.log_prob_keys]
        if isinstance(dist, CompositeDistribution) and not (len(values) == 1 and isinstance(values[0], TensorDictBase)):
            log_prob = self.log_prob(tensordict, dist=dist)  # a composite scores the samples in the input
            if isinstance(log_prob, TensorDictBase):
                tensordict_out.update(log_prob)
            else:
                tensordict_out.set(self.log_prob_key, log_prob)
        else:
            tensordict_out.set(self.log_prob_key, dist.log_prob(*values))

    def _resolve_generator(self, tensordict: TensorDictBase) -> tuple[torch.Generator | None, Any]:
        """The generator of this call, and None or a function writing the next seed back to the input."""
        if self._generator is not None:
            return self._generator, None
        if self._generator_key is None:
            return None, None
        value = tensordict.get(self._generator_key, default=None)
        if value is None:
            return None, None
        value = value.data if is_non_tensor(value) else value
        if isinstance(value, torch.Generator):
            return value, None
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"Generator key {self._generator_key!r} resolved to a tensor of {value.numel()} "
                    "elements; expected a scalar seed."
                )
            seed, device, as_tensor = int(value.item()), value.device, True
        elif isinstance(value, int) and not isinstance(value, bool):
            seed, device, as_tensor = value, self._infer_param_device(tensordict), False
        else:
            raise TypeError(
                f"Generator key {self._generator_key!r} resolved to a value of type "
                f"{type(value).__name__}; expected torch.Generator, int, or scalar Tensor."
            )
        local = torch.Generator(device=device)
        local.manual_seed(seed)
        key = self._generator_key

        def writeback(gen: torch.Generator) -> None:
            following = torch.randint(0, 2**62, (), generator=gen, dtype=torch.int64, device=device)
            if as_tensor:
                tensordict.set(key, following)
            else:
                from .._nontensor import NonTensorData

                tensordict.set(key, NonTensorData(int(following.item())))

        return local, writeback

    def _infer_param_device(self, tensordict: TensorDictBase) -> torch.device:
        for key in self.in_keys:
            value = tensordict.get(key, default=None)
            if isinstance(value, torch.Tensor):
                return value.device
        return torch.device("cpu")

    def _dist_sample(
        self,
        dist: D.Distribution,
        interaction_type: InteractionType | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> Any:
        if interaction_type is None:
            interaction_type = self.default_interaction_type
        sample = self._draw_dist_sample(dist, interaction_type, generator=generator)
        num_samples = self.num_samples
        if num_samples and interaction_type is not InteractionType.RANDOM:
            # only RANDOM draws num_samples values: repeat the one deterministic value
            if isinstance(sample, tuple):
                return tuple(s.expand(num_samples + s.shape) for s in sample)
            return sample.expand(num_samples + sample.shape)
        return sample

    def _draw_dist_sample(
        self,
        dist: D.Distribution,
        interaction_type: InteractionType | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> Any:
        if not isinstance(dist, D.Distribution):
            raise TypeError(f"Expected Distribution, but got {type(dist)}")
        if interaction_type is None:
            interaction_type = self.default_interaction_type
        if isinstance(dist, D.LKJCholesky) and interaction_type in (
            InteractionType.DETERMINISTIC,
            InteractionType.MEAN,
            InteractionType.MODE,
        ):
            raise RuntimeError(f"DETERMINISTIC, MEAN and MODE are not implemented for {type(dist).__name__}.")
        if interaction_type is InteractionType.DETERMINISTIC:
            value = _deterministic.deterministic_sample(dist)
            if value is not None:
                return value
            interaction_type = self._deterministic_fallback(dist)
            if interaction_type is InteractionType.DETERMINISTIC and isinstance(dist, D.Independent):
                value = _deterministic.deterministic_sample(dist.base_dist)
                if value is not None:  # Independent leaves its base's samples unchanged
                    return value
        if interaction_type is InteractionType.MODE:
            try:
                return dist.mode
            except AttributeError:
                raise NotImplementedError(f"method {type(dist)}.mode is not implemented") from None
        if interaction_type is InteractionType.MEDIAN:
            try:
                return dist.median  # type: ignore[attr-defined]
            except AttributeError:
                raise NotImplementedError(f"method {type(dist)}.median is not implemented") from None
        if interaction_type is InteractionType.MEAN:
            try:
                return dist.mean
            except (AttributeError, NotImplementedError):
                pass
            with _use_generator(generator):
                draw = dist.rsample if dist.has_rsample else dist.sample
                return draw((self.n_empirical_estimate,)).mean(0)
        if interaction_type is InteractionType.RANDOM:
            with _use_generator(generator):
                draw = dist.rsample if dist.has_rsample else dist.sample
                return draw(self.num_samples if self.num_samples is not None else torch.Size(()))
        raise NotImplementedError(f"unknown interaction_type {interaction_type}")

    def _deterministic_fallback(self, dist: D.Distribution) -> InteractionType | None:
        """The interaction type DETERMINISTIC falls back on (by the register, else by the support, warning)."""
        registered = _deterministic.registered(dist)
        if registered is not None:
            return registered
        try:
            fallback = "mean" if isinstance(dist.support, _REAL) else "mode"
        except NotImplementedError:
            fallback = "mean"  # custom distributions without a support
        warnings.warn(
            f"deterministic_sample wasn't found when queried on {type(dist)}. {type(self).__name__} is "
            f"falling back on {fallback} instead. For better code quality and efficiency, make sure to "
            "either provide a distribution with a deterministic_sample attribute or to change the "
            "InteractionMode to the desired value.",
            UserWarning,
            stacklevel=user_stacklevel(_TORCH_DIR),
        )
        return InteractionType.MEAN if fallback == "mean" else InteractionType.MODE
