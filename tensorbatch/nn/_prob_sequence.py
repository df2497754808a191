"""ProbabilisticTensorDictSequential: modules computing distribution parameters, then probabilistic modules."""

from __future__ import annotations

import collections
import warnings
from collections.abc import Callable, Iterator, MutableSequence
from typing import Any, cast

import torch
from torch import distributions as D
from torch import nn

from .._keys import NestedKey
from ..base import TensorDictBase
from ._prob_module import ProbabilisticTensorDictModule, _rename_entries
from ._switches import InteractionType, interaction_type, set_interaction_type
from .common import _module_forward
from .distributions.composite import CompositeDistribution
from .sequence import TensorDictSequential

__all__ = ["ProbabilisticTensorDictSequential"]

_EMPTY = (
    "ProbabilisticTensorDictSequential must consist of zero or more TensorDictModules followed by a "
    "ProbabilisticTensorDictModule"
)
_LAST = (
    "The final module passed to ProbabilisticTensorDictSequential must be an instance of "
    "ProbabilisticTensorDictModule or another ProbabilisticTensorDictSequential (unless return_composite is "
    "set to ``True``)."
)


def _is_probabilistic(module: Any) -> bool:
    return isinstance(module, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential))


class ProbabilisticTensorDictSequential(TensorDictSequential):
    """A :class:`~tensorbatch.nn.TensorDictSequential` ending in probabilistic modules, which gives their distribution.

    The modules before the last compute the parameters of the last (a
    :class:`~tensorbatch.nn.ProbabilisticTensorDictModule` or a probabilistic sequence). With
    ``return_composite`` (the default when the last module is not probabilistic or when several are), each
    probabilistic module samples in turn and :meth:`get_dist` is a
    :class:`~tensorbatch.nn.CompositeDistribution` of all of them (each conditional on the samples before it).
    When the modules before the last already write its sampled keys, the last one does not sample again.

    Args:
        *modules: the modules, or one list, or one (ordered) dict naming them.
        partial_tolerant: skip modules whose inputs are missing.
        return_composite: see above (None: decided from the modules).
        selected_out_keys: keep only these outputs.
        inplace: as :class:`~tensorbatch.nn.TensorDictSequential`.

    Raises:
        ValueError: no module.
        TypeError: ``return_composite=False`` and the last module is not probabilistic.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> policy = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 4), in_keys=["obs"], out_keys=["params"]),
        ...     TensorDictModule(NormalParamExtractor(), in_keys=["params"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                   distribution_class=d.Normal, return_log_prob=True))
        >>> td = policy(TensorDict(obs=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action_log_prob"].shape, type(policy.get_dist(td)).__name__
        (torch.Size([5, 2]), torch.Size([5, 2]), 'Normal')
    """

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        return_composite: bool | None = None,
        selected_out_keys: list[NestedKey] | None = None,
        inplace: bool | str | None = None,
    ) -> None:
        if not modules:
            raise ValueError(_EMPTY)
        self._ordered_dict = len(modules) == 1 and isinstance(modules[0], dict)
        if self._ordered_dict:
            modules = (collections.OrderedDict(modules[0]),)
            listed = list(modules[0].values())
        elif len(modules) == 1 and isinstance(modules[0], MutableSequence):
            modules = tuple(modules[0])
            listed = list(modules)
        else:
            listed = list(modules)
        listed = self._convert_modules(listed)
        if return_composite is False and not _is_probabilistic(listed[-1]):
            raise TypeError(_LAST)
        if return_composite is None:
            return_composite = (
                not _is_probabilistic(listed[-1])
                or sum(isinstance(m, ProbabilisticTensorDictModule) for m in listed) > 1
            )
        kwargs: dict[str, Any] = {"partial_tolerant": partial_tolerant, "inplace": inplace}
        if selected_out_keys is not None:
            kwargs["selected_out_keys"] = selected_out_keys
        if not any(_is_probabilistic(m) for m in listed):
            TensorDictSequential.__init__(self, *modules, **kwargs)
            self._requires_sample = False
            self.__dict__["_det_part"] = None
            self.return_composite = True  # forward then runs the modules one by one
            return
        self._requires_sample = self._needs_sample(listed)
        self.__dict__["_det_part"] = self._deterministic_part(modules, listed)
        super().__init__(*modules, **kwargs)
        self.return_composite = return_composite

    def _needs_sample(self, modules: list[Any]) -> bool:
        """False when the modules before the last write every key the last one samples."""
        _, written = self._compute_in_and_out_keys(modules[:-1])
        return any(key not in written for key in getattr(modules[-1], "dist_sample_keys", [None]))

    def _deterministic_part(self, modules: Any, listed: list[Any]) -> TensorDictSequential:
        if self._ordered_dict:
            return TensorDictSequential(collections.OrderedDict(list(modules[0].items())[:-1]))
        return TensorDictSequential(*listed[:-1])

    def _edit_modules(self, edit: Callable[[Any], None]) -> None:
        def checked(container: Any) -> None:
            edit(container)
            if container is not self.module:  # the trial copy: refuse before the real edit
                self._check_modules(list(container.values() if isinstance(container, nn.ModuleDict) else container))

        super()._edit_modules(checked)
        modules = list(self._module_iter())
        if not any(_is_probabilistic(m) for m in modules):
            self._requires_sample = False
            self.__dict__["_det_part"] = None
            return
        self._requires_sample = self._needs_sample(modules)
        items = (
            (collections.OrderedDict(cast(nn.ModuleDict, self.module).items()),)
            if self._ordered_dict
            else (tuple(modules))
        )
        self.__dict__["_det_part"] = self._deterministic_part(items, modules)

    def _check_modules(self, modules: list[Any]) -> None:
        if not modules:
            raise ValueError(_EMPTY)
        if not self.return_composite and not _is_probabilistic(modules[-1]):
            raise TypeError(_LAST)

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, (int, str)):
            return self.module[index]  # type: ignore[index]
        modules = self.module[index]  # type: ignore[index]
        if self.return_composite and any(_is_probabilistic(m) for m in modules):
            return self._keep_options(type(self)(*modules, return_composite=self.return_composite))
        if _is_probabilistic(modules[-1]):
            return self._keep_options(type(self)(*modules))
        return self._keep_options(TensorDictSequential(*modules))

    _dist_sample = ProbabilisticTensorDictModule._dist_sample
    _draw_dist_sample = ProbabilisticTensorDictModule._draw_dist_sample
    _deterministic_fallback = ProbabilisticTensorDictModule._deterministic_fallback

    @property
    def det_part(self) -> Any:
        """The modules computing the parameters (deprecated: use :meth:`get_dist_params`)."""
        warnings.warn(
            "ProbabilisticTensorDictSequential.det_part is deprecated and will be removed in TensorDict "
            "0.17. Use ProbabilisticTensorDictSequential.get_dist_params() instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.__dict__["_det_part"]

    def _modules_list(self) -> list[Any]:
        return list(self._module_iter())

    def get_dist_params(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None, **kwargs: Any
    ) -> TensorDictBase:
        """Runs every module but the last (with the sequence's interaction type) and returns the parameters.

        Args:
            tensordict: the input.
            tensordict_out: where the parameters go (default: ``tensordict``).
            **kwargs: for the modules that are not probabilistic modules.

        Raises:
            ValueError: no module has a ``default_interaction_type`` and none is set.
        """
        part: Any = self.__dict__["_det_part"]
        kind = interaction_type()
        if kind is None:
            for module in reversed(self._modules_list()):
                if hasattr(module, "default_interaction_type"):
                    kind = module.default_interaction_type
                    break
            else:
                raise ValueError("Could not find a default interaction in the modules.")
        with set_interaction_type(kind):
            if not kwargs:
                return part(tensordict, tensordict_out)  # type: ignore[no-any-return]
            work = tensordict if tensordict_out is None else tensordict.copy()
            for module in part._module_iter():
                work = part._run_module(
                    module, work, **({} if isinstance(module, ProbabilisticTensorDictModule) else kwargs)
                )
            if tensordict_out is None:
                return work
            return tensordict_out.update(work, keys_to_update=part.out_keys)

    def _gather(self, attr: str) -> list[NestedKey]:
        found: list[NestedKey] = []
        for module in reversed(self._modules_list()):
            found.extend(getattr(module, attr, []))
        return found

    @property
    def log_prob_keys(self) -> list[NestedKey]:
        """The log-probability keys of every probabilistic module, the last module's first."""
        return self._gather("log_prob_keys")

    @property
    def log_prob_key(self) -> NestedKey:
        """The one log-probability key.

        Raises:
            AttributeError: there is not exactly one (or the aggregation mode changed since a module was built).
        """
        try:
            keys = self.log_prob_keys
        except RuntimeError as err:  # AttributeError keeps getattr(..., default) and hasattr working
            raise AttributeError("log_prob_key") from err
        if len(keys) == 1:
            return keys[0]
        raise AttributeError(
            f"log_prob_key needs exactly one log-probability key, got {keys}. Use log_prob_keys instead."
        )

    @property
    def dist_params_keys(self) -> list[NestedKey]:
        """The parameter keys of every probabilistic module, the last module's first."""
        return self._gather("dist_params_keys")

    @property
    def dist_sample_keys(self) -> list[NestedKey]:
        """The sampled keys of every probabilistic module, the last module's first."""
        return self._gather("dist_sample_keys")

    def _log_prob_renames(self) -> tuple[list[tuple[NestedKey, NestedKey]], bool]:
        """The modules' (default, custom) log-probability key pairs, and whether one was built aggregating."""
        renames: list[tuple[NestedKey, NestedKey]] = []
        aggregated = False
        for module in self._module_iter():
            if isinstance(module, ProbabilisticTensorDictSequential):
                pairs, built = module._log_prob_renames()
            elif isinstance(module, ProbabilisticTensorDictModule):
                pairs, built = module._custom_log_prob_keys, module._composite_lp_aggreate_at_init
            else:
                continue
            renames.extend(pairs)
            aggregated = aggregated or built
        return renames, aggregated

    @property
    def num_samples(self) -> tuple[int, ...]:
        """The leading dims the probabilistic modules add to the output, the last module's first."""
        dims: tuple[int, ...] = ()
        for module in self._module_iter():
            if _is_probabilistic(module):
                dims = tuple(module.num_samples or ()) + dims
        return dims

    @property
    def default_interaction_type(self) -> InteractionType | None:
        """The last module's ``default_interaction_type`` (else :func:`~tensorbatch.nn.interaction_type`)."""
        for module in reversed(self._modules_list()):
            found = getattr(module, "default_interaction_type", None)
            if found is not None:
                return found  # type: ignore[no-any-return]
        return interaction_type()

    @property
    def _last_module(self) -> Any:
        return self._modules_list()[-1]

    def get_dist(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None, **kwargs: Any
    ) -> D.Distribution:
        """The distribution the sequence samples from.

        Without ``return_composite``: the last module's, after running the others on ``tensordict`` (or into
        ``tensordict_out``). With it: a :class:`~tensorbatch.nn.CompositeDistribution` of every probabilistic
        module's distribution, computed on a shallow copy (each but the last draws the value the next read).

        Raises:
            RuntimeError: no probabilistic module.
        """
        if not self.return_composite:
            return self.build_dist_from_params(self.get_dist_params(tensordict, tensordict_out, **kwargs))
        work = tensordict.copy()
        dists: dict[NestedKey, D.Distribution] = {}
        modules = self._modules_list()
        for i, module in enumerate(modules):
            if not _is_probabilistic(module):
                work = module(work)
                continue
            dist = module.get_dist(work)
            if i < len(modules) - 1:
                work = self._draw_into(module, dist, work)
            if isinstance(dist, CompositeDistribution):
                dists.update(dict(dist))
            else:
                dists[module.dist_sample_keys[0]] = dist
        if not dists:
            raise RuntimeError(f"No distribution module found in {self}.")
        return CompositeDistribution.from_distributions(work, dists)

    def _draw_into(self, module: Any, dist: D.Distribution, work: TensorDictBase) -> TensorDictBase:
        """Draw ``module``'s value from ``dist`` into ``work`` (for the modules after it)."""
        generator, writeback = (
            module._resolve_generator(work) if isinstance(module, ProbabilisticTensorDictModule) else (None, None)
        )
        sample = module._dist_sample(dist, interaction_type=interaction_type(), generator=generator)
        if writeback is not None:
            writeback(generator)
        if module.num_samples not in ((), None):
            work = work.expand(module.num_samples + work.shape)
        if isinstance(module, ProbabilisticTensorDictModule):
            values = [sample] if isinstance(sample, torch.Tensor) else sample
            work.update(dict(zip(module.dist_sample_keys, values, strict=True)))
        elif isinstance(sample, torch.Tensor):  # a nested sequence without return_composite: its last module's
            work.set(module.dist_sample_keys[0], sample)
        else:
            work.update(sample)
        return work

    def log_prob(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        *,
        dist: D.Distribution | None = None,
        **kwargs: Any,
    ) -> Any:
        """The log-probability of the sampled values in ``tensordict``.

        With ``return_composite``: the composite's ``log_prob`` (a TensorDict at the keys a call writes, or the
        sum while aggregating). Without: the last module's :meth:`ProbabilisticTensorDictModule.log_prob`.

        Args:
            tensordict: the input with the sampled values.
            tensordict_out: compute on a copy of the input (and write a TensorDict result there).
            dist: the distribution (default: :meth:`get_dist`).
            **kwargs: for :meth:`get_dist` (without ``return_composite``, when the last module's ``log_prob`` is
                the base one), else for the ``log_prob`` called.
        """
        inp = tensordict.copy() if tensordict_out is not None else tensordict
        if dist is None:
            reroute = bool(kwargs) and not self.return_composite
            if reroute:  # the base log_prob takes no keyword arguments; an override keeps getting them
                leaf = self._last_module
                while type(leaf).log_prob is ProbabilisticTensorDictSequential.log_prob:
                    leaf = leaf._last_module
                reroute = type(leaf).log_prob is ProbabilisticTensorDictModule.log_prob
            dist = self.get_dist(inp, **kwargs) if reroute else self.get_dist(inp)
            if reroute:
                kwargs = {}
        if self.return_composite and isinstance(dist, CompositeDistribution):
            lp = dist.log_prob(tensordict, **kwargs)
            if isinstance(lp, TensorDictBase):
                renames, aggregated = self._log_prob_renames()
                if renames and not aggregated:
                    present = set(lp.keys(True, True))
                    _rename_entries(lp, [pair for pair in renames if pair[0] in present])
            return lp
        out = self._last_module.log_prob(inp, dist=dist, **kwargs)
        if not isinstance(out, TensorDictBase):
            return out
        if tensordict_out is None:
            return out
        if out is inp:
            tensordict_out.update(inp.apply(lambda x, y: x if x is not y else None, tensordict, filter_empty=True))
        else:
            tensordict_out.update(out)
        return tensordict_out

    def build_dist_from_params(self, tensordict: TensorDictBase) -> D.Distribution:
        """The last :class:`ProbabilisticTensorDictModule`'s distribution (nested ones included), from parameters.

        Raises:
            RuntimeError: no such module.
        """
        for module in reversed(list(self.modules())):
            if isinstance(module, ProbabilisticTensorDictModule):
                return module.get_dist(tensordict)
        raise RuntimeError("Could not find any ProbabilisticTensorDictModule in the sequence.")

    @_module_forward
    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        _requires_sample: bool | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Runs the modules in order (the last one does not sample again what the others wrote).

        Args:
            tensordict: the input.
            tensordict_out: run on a shallow copy and write the outputs there.
            _requires_sample: a caller's say on sampling (a nested sequence keeps its own prefix's sample).
            **kwargs: for the modules that are not probabilistic modules.

        Returns:
            The TensorDict holding the outputs (see ``inplace``).
        """
        requires = self._requires_sample if _requires_sample is None else (_requires_sample and self._requires_sample)
        work = self._work_on(tensordict, tensordict_out)
        if self.return_composite:
            work = self._run_all(work, requires, kwargs)
        else:
            work = self.get_dist_params(work, **kwargs)
            last = self._last_module
            if isinstance(last, ProbabilisticTensorDictSequential):
                work = last(work, _requires_sample=requires, **kwargs)
            elif isinstance(last, ProbabilisticTensorDictModule):
                work = last(work, _requires_sample=requires)
            else:
                work = last(work, **kwargs)
        target = self._inplace_target(tensordict)  # (inplace wins over a given tensordict_out, as tensordict's)
        result: TensorDictBase = self._finish(tensordict, work, tensordict_out if target is None else target)
        return result

    def _run_all(self, work: TensorDictBase, requires: bool, kwargs: dict[str, Any]) -> TensorDictBase:
        modules: Iterator[Any] = self._module_iter()
        last = len(self) - 1
        for i, module in enumerate(modules):
            try:
                if _is_probabilistic(module):
                    # only the last module may keep a sample its prefix wrote; a nested sequence gets **kwargs
                    work = module(
                        work,
                        _requires_sample=requires if i == last else True,
                        **(kwargs if isinstance(module, ProbabilisticTensorDictSequential) else {}),
                    )
                else:
                    work = module(work, **kwargs)
            except Exception as err:
                raise RuntimeError(
                    f"Failed while executing module '{self._get_module_num_or_key(module)}'. Scroll up for more info."
                ) from err
        return work
