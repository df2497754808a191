"""TensorDictSequential: modules run one after the other on one TensorDict."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from typing import Any

from torch import nn
from torch.compiler import is_compiling

from .._keys import NestedKey, unravel_key_list
from .._lazy import LazyStackedTensorDict
from .._td import TensorDict
from .common import TensorDictModule, TensorDictModuleBase, WrapModule, _module_forward

__all__ = ["TensorDictSequential"]

_BASE_OUT_KEYS: Any = TensorDictModuleBase.__dict__["out_keys"]  # the base's property (a sequence extends its setter)


class TensorDictSequential(TensorDictModule):
    """Run TensorDict modules in order, each reading what the previous ones wrote.

    ``in_keys`` are the keys read before being written by an earlier module; ``out_keys`` every key written
    (each once, in the order of its last write). Callables without keys are wrapped in a :class:`WrapModule`.

    Args:
        *modules: the modules, or one list of them, or one (ordered) dict naming them.
        partial_tolerant: skip a module whose inputs are missing (on a lazy stack, run it on the members that
            have them).
        selected_out_keys: keep only these outputs (as ``select_out_keys``).
        inplace: ``None``/``True`` writes into the input; ``False`` returns a new TensorDict with the outputs;
            ``"empty"`` the outputs in ``tensordict.empty()``.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch.nn import TensorDictModule, TensorDictSequential
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"]),
        ...     TensorDictModule(lambda y: y * 2, in_keys=["y"], out_keys=["z"]),
        ... )
        >>> seq.in_keys, seq.out_keys
        (['x'], ['y', 'z'])
        >>> seq(TensorDict(x=torch.zeros(2)))["z"]
        tensor([2., 2.])
        >>> seq(x=torch.ones(1))
        (tensor([2.]), tensor([4.]))
    """

    module: nn.Module
    _select_before_return = False

    def _set_out_keys(self, value: list[NestedKey]) -> None:
        _BASE_OUT_KEYS.fset(self, value)
        self._complete_out_keys = list(self._out_keys)  # what reset_out_keys goes back to

    out_keys = property(
        _BASE_OUT_KEYS.fget, _set_out_keys, doc="The keys written (only the selected ones after ``select_out_keys``)."
    )

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        selected_out_keys: list[NestedKey] | None = None,
        inplace: bool | str | None = None,
    ) -> None:
        container: nn.Module
        if len(modules) == 1 and isinstance(modules[0], dict):
            converted = self._convert_modules(list(modules[0].values()))
            container = nn.ModuleDict(collections.OrderedDict(zip(modules[0], converted, strict=True)))
        else:
            items = modules[0] if len(modules) == 1 and isinstance(modules[0], MutableSequence) else modules
            converted = self._convert_modules(list(items))
            container = nn.ModuleList(converted)
        in_keys, out_keys = self._compute_in_and_out_keys(converted)
        super().__init__(module=container, in_keys=in_keys, out_keys=out_keys)
        self.inplace = inplace
        self.partial_tolerant = partial_tolerant
        if selected_out_keys:
            self._select(selected_out_keys)
        else:
            self._select_before_return = False

    def _select(self, keys: Iterable[NestedKey]) -> None:
        selected = unravel_key_list(list(keys))
        if not all(key in self.out_keys for key in selected):
            raise ValueError("All keys in selected_out_keys must be in out_keys.")
        self._select_before_return = True
        self._out_keys_apparent = selected

    def reset_out_keys(self) -> TensorDictSequential:
        """Undo ``select_out_keys``. Returns self."""
        self.out_keys = list(self._complete_out_keys)
        self._select_before_return = False
        return self

    @staticmethod
    def _convert_modules(modules: Iterable[Any]) -> list[Any]:
        return [m if TensorDictModuleBase.is_tdmodule_compatible(m) else WrapModule(m) for m in modules]

    def _compute_in_and_out_keys(self, modules: list[Any]) -> tuple[list[NestedKey], list[NestedKey]]:
        in_keys: list[NestedKey] = []
        written: list[NestedKey] = []
        for module in modules:
            for key in module.in_keys:
                if key not in written and key not in in_keys:
                    in_keys.append(key)
            written += module.out_keys
        out_keys = [key for i, key in enumerate(written) if key not in written[i + 1 :]]
        return in_keys, out_keys

    def select_out_keys(self, *selected_out_keys: NestedKey) -> TensorDictSequential:
        """Keep only these outputs in the result (the input's own entries stay). Returns self.

        Examples:
            >>> import torch
            >>> from tensorbatch import TensorDict
            >>> from tensorbatch.nn import TensorDictModule, TensorDictSequential
            >>> seq = TensorDictSequential(TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"]),
            ...                            TensorDictModule(lambda y: y + 1, in_keys=["y"], out_keys=["z"]))
            >>> sorted(seq.select_out_keys("z")(TensorDict(x=torch.zeros(1))).keys())
            ['x', 'z']
        """
        self._select(selected_out_keys)
        return self

    def select_subsequence(
        self, in_keys: Iterable[NestedKey] | None = None, out_keys: Iterable[NestedKey] | None = None
    ) -> TensorDictSequential:
        """The sub-sequence of modules that run from ``in_keys`` and contribute to ``out_keys``.

        Args:
            in_keys: the keys available (default: the sequence's ``in_keys``); modules needing others go.
            out_keys: the keys wanted (default: the sequence's ``out_keys``); modules not leading to them go.

        Returns:
            A new sequence sharing the kept modules.

        Raises:
            ValueError: when no module is left.
        """
        available = unravel_key_list(list(self.in_keys if in_keys is None else in_keys))
        wanted = unravel_key_list(list(self.out_keys if out_keys is None else out_keys))
        modules = list(self._module_iter())
        keep = set(range(len(modules)))
        for i, module in enumerate(modules):
            if type(module) is TensorDictSequential:  # (not subclasses)
                try:
                    module = modules[i] = module.select_subsequence(in_keys=available)
                except ValueError:
                    keep.discard(i)
                    continue
            if all(key in available for key in module.in_keys):
                available.extend(module.out_keys)
            else:
                keep.discard(i)
        for i in reversed(range(len(modules))):
            if i not in keep:
                continue
            module = modules[i]
            if any(key in wanted for key in module.out_keys):
                if type(module) is TensorDictSequential:
                    module = modules[i] = module.select_subsequence(out_keys=wanted)
                wanted.extend(module.in_keys)
            else:
                keep.discard(i)
        kept = sorted(keep)
        if not kept:
            raise ValueError("No modules left after selection. Make sure that in_keys and out_keys are coherent.")
        if isinstance(self.module, nn.ModuleDict):
            names = list(self.module)
            return self._keep_options(type(self)(collections.OrderedDict((names[i], modules[i]) for i in kept)))
        return self._keep_options(type(self)(*[modules[i] for i in kept]))

    def _keep_options(self, sequence: TensorDictSequential) -> TensorDictSequential:
        sequence.partial_tolerant = self.partial_tolerant
        sequence.inplace = self.inplace
        return sequence

    def _run_module(self, module: Any, tensordict: Any, **kwargs: Any) -> Any:
        if not self.partial_tolerant:
            return module(tensordict, **kwargs)
        if all(key in tensordict.keys(include_nested=True) for key in module.in_keys):
            return module(tensordict, **kwargs)
        if isinstance(tensordict, LazyStackedTensorDict):
            for member in tensordict.tensordicts:
                if all(key in member.keys(include_nested=True) for key in module.in_keys):
                    out = module(member, **kwargs)
                    if out is not member and hasattr(out, "batch_size"):
                        present = [key for key in module.out_keys if key in out.keys(include_nested=True)]
                        if present:
                            member.update(out, keys_to_update=present)
        return tensordict

    def _module_iter(self) -> Iterator[Any]:
        if isinstance(self.module, nn.ModuleDict):
            yield from self.module.values()
        else:
            yield from self.module  # type: ignore[misc]

    def _get_module_num_or_key(self, mod: nn.Module) -> int | str:
        items: Iterable[tuple[Any, Any]] = (
            self.module.named_children() if isinstance(self.module, nn.ModuleDict) else enumerate(self._module_iter())
        )
        for name, module in items:
            if module is mod:
                return name  # type: ignore[no-any-return]
        raise RuntimeError("module not found.")

    @_module_forward
    def forward(self, tensordict: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
        """Run the modules in order.

        Args:
            tensordict: the input.
            tensordict_out: write the outputs there.
            **kwargs: not accepted (RuntimeError).

        Returns:
            The input with the outputs written (see ``inplace``), or ``tensordict_out``.
        """
        if kwargs:
            raise RuntimeError(
                "TensorDictSequential does not support keyword arguments other than "
                f"'tensordict_out' or in_keys: {self.in_keys}. Got {kwargs.keys()} instead."
            )
        work = self._work_on(tensordict, tensordict_out)
        if tensordict_out is None:
            tensordict_out = self._inplace_target(tensordict)
        tolerant = self.partial_tolerant
        modules: Any = self._modules["module"]
        for module in modules._modules.values():
            try:
                work = self._run_module(module, work) if tolerant else module(work)
            except Exception as err:
                err.add_note(f"Failed while executing module '{self._get_module_num_or_key(module)}'.")
                raise
        return self._finish(tensordict, work, tensordict_out)

    def _work_on(self, tensordict: Any, tensordict_out: Any) -> Any:
        """What the modules run on: the input, or a shallow copy when the outputs go elsewhere or are selected."""
        copy_first = (
            tensordict_out is not None or self._select_before_return or self.inplace is False or self.inplace == "empty"
        )
        return tensordict.copy() if copy_first else tensordict

    def _inplace_target(self, tensordict: Any) -> Any:
        """Where ``inplace`` says the outputs go: the input, a new TensorDict, an empty one like the input, or None."""
        if self.inplace is True:
            return tensordict
        if self.inplace is False:
            return TensorDict()
        if self.inplace == "empty":
            return tensordict.empty()
        return None

    def _finish(self, tensordict: Any, work: Any, tensordict_out: Any) -> Any:
        """The result: the outputs written into ``tensordict_out``, or ``work`` (selected outputs into the input)."""
        if tensordict_out is not None:
            tensordict_out.update(work, keys_to_update=self.out_keys)
            return tensordict_out
        if self._select_before_return:  # values of the input changed on the way are written back too
            if is_compiling():
                keys = list({*self.out_keys, *tensordict.keys(True, True)})
            else:
                keys = list(set(self.out_keys).union(tensordict.keys(True, True)))
            return tensordict.update(work, keys_to_update=keys)
        return work

    def __len__(self) -> int:
        return len(self.module)  # type: ignore[arg-type]

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, (int, str)):
            return self.module[index]  # type: ignore[index]
        return self._keep_options(type(self)(*self.module[index]))  # type: ignore[index]

    def __setitem__(self, index: int | slice | str, module: Any) -> None:
        if callable(module):
            (module,) = self._convert_modules([module])
        self._edit_modules(lambda modules: modules.__setitem__(index, module))

    def __delitem__(self, index: int | slice | str) -> None:
        self._edit_modules(lambda modules: modules.__delitem__(index))

    def _edit_modules(self, edit: Callable[[Any], None]) -> None:
        """Apply ``edit`` to a copy first (refusing an edit that removes selected outputs), then for real."""
        if isinstance(self.module, nn.ModuleDict):
            trial: Any = nn.ModuleDict(collections.OrderedDict(self.module.items()))
            edit(trial)
            modules = list(trial.values())
        else:
            trial = nn.ModuleList(list(self.module))  # type: ignore[call-overload]
            edit(trial)
            modules = list(trial)
        if self._select_before_return:
            _, out_keys = self._compute_in_and_out_keys(modules)
            missing = [key for key in self._out_keys_apparent if key not in out_keys]
            if missing:
                raise ValueError(
                    f"The edit would remove the selected out_keys {missing}. Call reset_out_keys() "
                    "before the edit, or select other keys."
                )
        edit(self.module)
        in_keys, out_keys = self._compute_in_and_out_keys(list(self._module_iter()))
        selected = self._out_keys_apparent if self._select_before_return else None
        self.in_keys = in_keys
        self.out_keys = out_keys
        if selected is not None:
            self._out_keys_apparent = selected
