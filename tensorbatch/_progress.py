"""Optional tqdm progress bars where a user waits: saves, loads, consolidation, uploads and table reads.

Bars are off by default. A call turns its bar on with ``progress=True`` (off with ``False``); ``None``, the
default of every such keyword, follows the global switch :class:`~tensorbatch.set_progress` (or the
environment variable ``TENSORBATCH_PROGRESS=1`` at import). When no bar is wanted the helpers here hand
back what they were given, or one shared do-nothing bar: the loops they wrap cost the same as without
them. A wanted bar needs tqdm (the ``progress`` extra); without it, :class:`ImportError` names the extra.
Bars count bytes (the leaves' ``numel() * element_size()``) or, for tables, columns. They are updated
from the calling thread only, also when a thread pool does the work (``num_threads``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from . import _options
from ._ops.traverse import is_td


class _NoBar:
    """The bar used when none is wanted: every method does nothing."""

    __slots__ = ()
    total: int | None = None
    n = 0

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units (nothing to do)."""

    def close(self) -> None:
        """Close the bar (nothing to do)."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


NO_BAR = _NoBar()


def wanted(progress: bool | None) -> bool:
    """Whether a call given ``progress`` shows a bar: its own choice, else the global switch.

    Examples:
        >>> from tensorbatch._progress import wanted
        >>> wanted(True), wanted(False), wanted(None)
        (True, False, False)
    """
    return _options.PROGRESS if progress is None else bool(progress)


def bar(progress: bool | None, desc: str, total: int | None, unit: str = "B") -> Any:
    """A tqdm bar (on stderr) when ``progress`` wants one, else :data:`NO_BAR`.

    Args:
        progress: the caller's ``progress=`` (None: the global switch).
        desc: what is running, shown before the bar (the name of the call, e.g. ``"memmap"``).
        total: how many units the work counts (None when it is known only at the end).
        unit: ``"B"`` counts bytes (shown scaled: KB, MB...), anything else plain counts.

    Raises:
        ImportError: a bar is wanted and tqdm is not installed (naming the ``progress`` extra).

    Examples:
        >>> from tensorbatch._progress import NO_BAR, bar
        >>> bar(False, "memmap", 10) is NO_BAR
        True
    """
    if not wanted(progress):
        return NO_BAR
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as err:
        raise ImportError(
            f"{desc}(progress=True) shows a progress bar with tqdm, which is not installed: "
            "pip install 'tensorbatch[progress]' (or pip install tqdm), or turn bars off "
            "(progress=False, tensorbatch.set_progress(False))"
        ) from err
    scaled = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {}
    return tqdm(total=total, desc=desc, unit=unit, **scaled)


def finish(b: Any) -> None:
    """Close ``b``, first setting its total to what it counted (a bar whose total was unknown)."""
    if b is NO_BAR:
        return
    if b.total is None or b.total != b.n:
        b.total = b.n
        b.refresh()
    b.close()


def nbytes(value: Any) -> int:
    """Bytes of a tensor, or of every tensor leaf of a TensorDict; 0 for anything else.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> from tensorbatch._progress import nbytes
        >>> nbytes(torch.zeros(3)), nbytes(TensorDict(a=torch.zeros(2), b={"c": torch.zeros(2, 2)})), nbytes("x")
        (12, 24, 0)
    """
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # (numel() of a jagged tensor is symbolic in places: count its values)
            return sum(nbytes(t) for t in value.unbind())
        return value.numel() * value.element_size()
    if is_td(value):
        return sum(nbytes(v) for v in value.values(include_nested=True, leaves_only=True))
    return 0


def entries(pairs: Iterable[tuple[Any, Any]], progress: bool | None, desc: str) -> Iterable[tuple[Any, Any]]:
    """``pairs`` of (key, value), with a bar counting each value's bytes once the loop body is done with it.

    Without a wanted bar ``pairs`` itself is returned. The bar closes when the loop ends (also on an error).

    Examples:
        >>> import torch
        >>> from tensorbatch._progress import entries
        >>> pairs = [("a", torch.zeros(2))]
        >>> entries(pairs, False, "to_h5") is pairs
        True
    """
    if not wanted(progress):
        return pairs
    pairs = list(pairs)
    return _counted(pairs, bar(progress, desc, sum(nbytes(v) for _, v in pairs)), lambda pair: nbytes(pair[1]))


def items(values: Iterable[Any], progress: bool | None, desc: str, unit: str) -> Iterable[Any]:
    """``values``, with a bar counting one ``unit`` each (table columns); ``values`` itself without a bar."""
    if not wanted(progress):
        return values
    values = list(values)
    return _counted(values, bar(progress, desc, len(values), unit), lambda _: 1)


def _counted(values: list[Any], b: Any, size: Callable[[Any], int]) -> Iterator[Any]:
    try:
        for value in values:
            yield value
            b.update(size(value))
    finally:
        b.close()
