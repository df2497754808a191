"""The modes that ``tensorbatch.nn`` reads at call time: the interaction type and the log-prob aggregation.

Each mode is process-wide by default; a block entered with ``thread_local=True`` gives the calling thread
its own value until it ends (blocks without the flag that the same thread enters meanwhile stay in that
thread too), as tensordict's modes do. A setter is a context manager, a decorator (each call runs in a
fresh block, generators included) and, with ``.set()``/``.unset()``, a global setter.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from enum import StrEnum
from typing import Any, Self

from .._options import _env_mode
from .utils import Mode


class _Block:
    """A context manager over one :class:`~tensorbatch.nn.utils.Mode`, usable as a decorator and as a global setter."""

    _MODE: Mode

    def __init__(self, value: Any, thread_local: bool = False) -> None:
        self._value = value
        self.thread_local = thread_local
        self._saved: list[Any] = []

    def clone(self) -> Self:
        """A new block with the same arguments (each decorated call enters its own)."""
        return type(self)(self._value, thread_local=self.thread_local)

    def __enter__(self) -> None:
        mode = self._MODE
        if self.thread_local:
            self._saved.append(mode.get_thread())
            mode.set_thread(self._value)
        else:
            self._saved.append(mode.get())
            mode.set(self._value)

    def __exit__(self, *exc: object) -> None:
        previous = self._saved.pop()
        if self.thread_local:
            self._MODE.set_thread(previous)
        else:
            self._MODE.set(previous)

    def set(self) -> None:
        """Sets the mode, as entering the block does, until :meth:`unset`."""
        self.__enter__()

    def unset(self) -> None:
        """Restores the mode that :meth:`set` replaced."""
        self.__exit__(None, None, None)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isclass(func):
            raise RuntimeError(f"{type(self).__name__} cannot decorate a class: decorate its methods")
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def steps(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
                gen = func(*args, **kwargs)
                try:
                    with self.clone():
                        sent = next(gen)
                    while True:
                        try:
                            received = yield sent
                        except GeneratorExit:
                            with self.clone():
                                gen.close()
                            raise
                        except BaseException as err:  # thrown in: the generator sees it inside a block
                            with self.clone():
                                sent = gen.throw(err)
                        else:
                            with self.clone():
                                sent = gen.send(received)
                except StopIteration as stop:
                    return stop.value

            return steps

        @functools.wraps(func)
        def inside(*args: Any, **kwargs: Any) -> Any:
            with self.clone():
                return func(*args, **kwargs)

        return inside


class InteractionType(StrEnum):
    """How a probabilistic module gets a value from its distribution.

    ``RANDOM`` samples (``rsample`` when the distribution has it); ``MODE``, ``MEDIAN`` and ``MEAN`` read
    that attribute (``MEAN`` averages samples when there is no ``mean``); ``DETERMINISTIC`` reads
    ``deterministic_sample``, falling back on the mode for discrete distributions and the mean for the
    others. Strings name members in any case.

    Examples:
        >>> from tensorbatch.nn import InteractionType
        >>> InteractionType("RANDOM")
        <InteractionType.RANDOM: 'random'>
        >>> InteractionType.from_str("Mode") is InteractionType.MODE
        True
    """

    MODE = "mode"
    MEDIAN = "median"
    MEAN = "mean"
    RANDOM = "random"
    DETERMINISTIC = "deterministic"

    @classmethod
    def from_str(cls, type_str: str) -> InteractionType:
        """The member named ``type_str``, in any case.

        Raises:
            ValueError: no member has that name.
        """
        return cls(type_str.lower())

    @classmethod
    def _missing_(cls, value: object) -> InteractionType | None:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None


_INTERACTION = Mode(None)
_LP_AGGREGATE = Mode(_env_mode("COMPOSITE_LP_AGGREGATE", False))


def interaction_type() -> InteractionType | None:
    """The interaction type that :class:`set_interaction_type` set, or None outside any block.

    With None, each probabilistic module uses its own ``default_interaction_type``.

    Examples:
        >>> from tensorbatch.nn import interaction_type, set_interaction_type
        >>> print(interaction_type())
        None
        >>> with set_interaction_type("mode"):
        ...     print(interaction_type())
        mode
    """
    value: InteractionType | None = _INTERACTION.get()
    return value


class set_interaction_type(_Block):
    """Sets the interaction type of every probabilistic module inside a block or a decorated function.

    Args:
        type: an :class:`InteractionType` or its name in any case; None lets each module use its
            ``default_interaction_type``.
        thread_local: set it for the calling thread only.

    Raises:
        ValueError: ``type`` names no interaction type.

    Examples:
        >>> from tensorbatch.nn import InteractionType, interaction_type, set_interaction_type
        >>> @set_interaction_type(InteractionType.RANDOM)
        ... def current():
        ...     return interaction_type()
        >>> current()
        <InteractionType.RANDOM: 'random'>
    """

    _MODE = _INTERACTION

    def __init__(
        self, type: InteractionType | str | None = InteractionType.DETERMINISTIC, *, thread_local: bool = False
    ) -> None:
        if type is not None and not isinstance(type, InteractionType):
            if not isinstance(type, str):
                raise ValueError(f"{type} is not a valid InteractionType")
            type = InteractionType(type.lower())
        super().__init__(type, thread_local=thread_local)

    @property
    def type(self) -> InteractionType | None:
        """The interaction type the block sets."""
        value: InteractionType | None = self._value
        return value


def composite_lp_aggregate(nowarn: bool = False) -> bool:
    """Whether a :class:`~tensorbatch.nn.CompositeDistribution` sums its log-probabilities into one tensor.

    It is False (one ``<key>_log_prob`` entry per component) unless :class:`set_composite_lp_aggregate`
    or the ``COMPOSITE_LP_AGGREGATE`` environment variable set it. It also decides the keys under which
    probabilistic modules write log-probabilities, and applies to entropies.

    Args:
        nowarn: has no effect (kept for calls that pass it).

    Examples:
        >>> from tensorbatch.nn import composite_lp_aggregate, set_composite_lp_aggregate
        >>> composite_lp_aggregate(), set_composite_lp_aggregate(True)(composite_lp_aggregate)()
        (False, True)
    """
    return bool(_LP_AGGREGATE.get())


class set_composite_lp_aggregate(_Block):
    """Sets :func:`composite_lp_aggregate` inside a block, a decorated function, or until ``unset()``.

    Args:
        mode: the value :func:`composite_lp_aggregate` returns.
        thread_local: set it for the calling thread only.

    Examples:
        >>> from tensorbatch.nn import composite_lp_aggregate, set_composite_lp_aggregate
        >>> with set_composite_lp_aggregate(True):
        ...     composite_lp_aggregate()
        True
    """

    _MODE = _LP_AGGREGATE

    def __init__(self, mode: bool = True, *, thread_local: bool = False) -> None:
        super().__init__(mode, thread_local=thread_local)

    @property
    def mode(self) -> bool:
        """The value the block sets."""
        return bool(self._value)
