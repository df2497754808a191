"""Public helpers (only those tensordict exposes; no dumping ground)."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, TypeAlias

import torch

from ._errors import fmt_path, key_sets_differ
from ._keys import (
    KEY_SEPARATOR,
    NestedKey,
    key_tuple,
    unravel_key,
    unravel_key_list,
    unravel_key_to_tuple,
    unravel_keys,
)
from ._nontensor import is_non_tensor as is_non_tensor
from ._ops.torch_function import holds_lazy
from ._ops.traverse import NO_DEFAULT, flat_leaves_like, is_node, is_non_tensor_type, is_td, named_leaves
from ._options import (
    capture_non_tensor_stack,
    get_printoptions,
    lazy_legacy,
    list_to_stack,
    set_capture_non_tensor_stack,
    set_lazy_legacy,
    set_list_to_stack,
    set_printoptions,
)
from ._reprparse import parse_tensor_dict_string
from .tensorclass import is_tensorclass as is_tensorclass

Buffer = torch.nn.Buffer  # tensordict.utils re-exports torch's Buffer
IndexType: TypeAlias = int | slice | str | torch.Tensor | list[Any] | tuple[Any, ...] | None
DeviceType: TypeAlias = torch.device | str | int

__all__ = [
    "KEY_SEPARATOR",
    "Buffer",
    "DeviceType",
    "IndexType",
    "NestedKey",
    "assert_allclose_td",
    "assert_close",
    "capture_non_tensor_stack",
    "convert_ellipsis_to_idx",
    "default_is_leaf",
    "expand_as_right",
    "expand_right",
    "get_printoptions",
    "is_bool",
    "is_floating",
    "is_inexact",
    "is_integer",
    "is_leaf_nontensor",
    "is_non_tensor",
    "is_tensor_collection",
    "is_tensorclass",
    "isin",
    "lazy_legacy",
    "list_to_stack",
    "logger",
    "parse_tensor_dict_string",
    "print_directory_tree",
    "remove_duplicates",
    "set_capture_non_tensor_stack",
    "set_lazy_legacy",
    "set_list_to_stack",
    "set_printoptions",
    "timeit",
    "unravel_key",
    "unravel_key_list",
    "unravel_key_to_tuple",
    "unravel_keys",
]

logger = logging.getLogger("tensorbatch")


def is_tensor_collection(datatype: Any) -> bool:
    """True for TensorDict and TensorClass instances or their types."""
    return getattr(datatype if isinstance(datatype, type) else type(datatype), "_is_tensor_collection", False)


def assert_close(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    intersection: bool = False,
    msg: str = "",
    prefix: NestedKey = (),
) -> bool:
    """Assert that two TensorDicts have the same keys, batch size and close leaves.

    Args:
        actual: the TensorDict to check.
        expected: the TensorDict with the expected values.
        rtol: relative tolerance (``torch.testing.assert_close``'s default for the dtype when None).
        atol: absolute tolerance (likewise).
        equal_nan: two NaNs are equal.
        intersection: compare only the keys both have (otherwise different key sets raise ``KeyError``).
        msg: appended to the error message.
        prefix: a key prepended to the key paths in the error messages.

    Raises:
        TypeError: if either argument is not a TensorDict (or TensorClass).
        KeyError: if the key sets differ and ``intersection`` is False.
        AssertionError: naming the first differing key path (or the batch sizes).

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict({"a": torch.ones(2)}, batch_size=[2])
        >>> assert_close(td, td.clone())
        True
        >>> assert_close(td.set("b", torch.zeros(2)), td.exclude("b"), intersection=True)
        True
    """
    if not is_td(actual) or not is_td(expected):
        raise TypeError(
            f"assert_close expects two TensorDicts, got {type(actual).__name__} and {type(expected).__name__}"
        )
    if actual.batch_size != expected.batch_size:
        raise AssertionError(f"batch sizes differ: {list(actual.batch_size)} vs {list(expected.batch_size)}. {msg}")
    if intersection:
        theirs = dict(named_leaves(expected))
        pairs = [(path, a, theirs[path]) for path, a in named_leaves(actual) if path in theirs]
    else:
        try:
            if any(_members(td) is not None or holds_lazy(td) for td in (actual, expected)):  # read apart
                pairs = list(_leaf_pairs(actual, expected, ()))
            else:
                others = flat_leaves_like(expected, actual)
                pairs = [(path, a, b) for (path, a), b in zip(named_leaves(actual), others, strict=True)]
        except KeyError as err:
            raise KeyError(f"{err.args[0]}. {msg}" if msg else err.args[0]) from None
    root = () if prefix == () else key_tuple(prefix)
    for path, a, b in pairs:
        try:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        except AssertionError as err:
            # tensordict's first line: the key as a tuple and, called "mse", the root of the mean squared error
            mse = (a.double() - b.double()).pow(2).mean().sqrt().item() if a.shape == b.shape else float("nan")
            note = f"\t{msg}" if msg else ""
            raise AssertionError(f"key {(*root, *path)} does not match, got mse = {mse:.4f}{note}\n{err}") from None
    return True


assert_allclose_td = assert_close


def _members(td: Any) -> Any:
    """A lazy stack's ``(stack_dim, members)``, else None (a TensorClass has none)."""
    members = getattr(td, "_stacked_members", None)
    return None if members is None else members()


def _leaf_pairs(actual: Any, expected: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """``(path, leaf, expected leaf)`` of two trees, lazy stacks of the same stack dim compared member by member."""
    mine, theirs = _members(actual), _members(expected)
    if mine is not None and theirs is not None and mine[0] == theirs[0] and len(mine[1]) == len(theirs[1]):
        for a, b in zip(mine[1], theirs[1], strict=True):
            yield from _leaf_pairs(a, b, path)
        return
    keys = list(actual._keys_str())
    if set(keys) != set(expected._keys_str()):
        raise key_sets_differ(path, keys, expected._keys_str())
    for key in keys:
        a, b = actual._get_str(key, NO_DEFAULT), expected._get_str(key, NO_DEFAULT)
        if is_node(a) and is_node(b):
            yield from _leaf_pairs(a, b, (*path, key))
        elif not is_non_tensor(a):
            yield (*path, key), a, b


# ------------------------------------------------------------------------------------ is_leaf predicates
def default_is_leaf(cls: type) -> bool:
    """The default ``is_leaf`` of ``keys``/``items``/``apply``: anything but a tensor collection.

    Tensors (and ``UnbatchedTensor``) are leaves; TensorDicts, TensorClasses and non-tensor data are not,
    so ``leaves_only=True`` skips the non-tensor entries.

    Args:
        cls: an entry's type (see ``entry_class``).

    Examples:
        >>> from tensorbatch import NonTensorData, TensorDict
        >>> default_is_leaf(torch.Tensor), default_is_leaf(NonTensorData), default_is_leaf(TensorDict)
        (True, False, False)
        >>> td = TensorDict(a={}, b="a string!", c=torch.zeros(()))
        >>> list(td.keys(leaves_only=True, is_leaf=default_is_leaf))
        ['c']
    """
    return cls is torch.Tensor or not is_tensor_collection(cls) or bool(getattr(cls, "_pass_through", False))


def is_leaf_nontensor(cls: type) -> bool:
    """An ``is_leaf`` that also counts non-tensor data as leaves: tensors and ``NonTensorData``/``Stack``.

    TensorDicts and TensorClasses are not leaves, nor are types that are neither tensors nor collections.

    Args:
        cls: an entry's type (see ``entry_class``).

    Examples:
        >>> from tensorbatch import NonTensorData, TensorDict
        >>> is_leaf_nontensor(torch.Tensor), is_leaf_nontensor(NonTensorData), is_leaf_nontensor(TensorDict)
        (True, True, False)
        >>> td = TensorDict(a={}, b="a string!", c=torch.zeros(()))
        >>> list(td.keys(leaves_only=True, is_leaf=is_leaf_nontensor))
        ['b', 'c']
    """
    if cls is torch.Tensor:
        return True
    if is_tensor_collection(cls):
        return is_non_tensor_type(cls) or bool(getattr(cls, "_pass_through", False))
    return isinstance(cls, type) and issubclass(cls, torch.Tensor)


# ------------------------------------------------------------------------------------ dtype predicates
def is_inexact(*args: Any) -> bool:
    """Whether the last argument is a floating-point or complex tensor.

    Only the last argument is tested, so it works as ``fn(value)`` (``apply``) and as ``fn(key, value)``
    (the ``cast_filter`` of ``to``).

    Examples:
        >>> is_inexact(torch.zeros(3)), is_inexact("a", torch.zeros(3, dtype=torch.long))
        (True, False)
    """
    dtype: torch.dtype = args[-1].dtype
    return dtype.is_floating_point or dtype.is_complex


def is_floating(*args: Any) -> bool:
    """Whether the last argument is a floating-point tensor (see :func:`is_inexact`).

    Examples:
        >>> is_floating(torch.zeros(3)), is_floating(torch.zeros(3, dtype=torch.complex64))
        (True, False)
    """
    dtype: torch.dtype = args[-1].dtype
    return dtype.is_floating_point


def is_integer(*args: Any) -> bool:
    """Whether the last argument is an integer tensor, signed or unsigned, not bool (see :func:`is_inexact`).

    Examples:
        >>> is_integer(torch.zeros(3, dtype=torch.uint8)), is_integer(torch.zeros(3, dtype=torch.bool))
        (True, False)
    """
    dtype: torch.dtype = args[-1].dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype is torch.bool)


def is_bool(*args: Any) -> bool:
    """Whether the last argument is a boolean tensor (see :func:`is_inexact`).

    Examples:
        >>> is_bool(torch.zeros(3, dtype=torch.bool)), is_bool("mask", torch.zeros(3))
        (True, False)
    """
    return args[-1].dtype is torch.bool


# ------------------------------------------------------------------------------------ indices and rows
def convert_ellipsis_to_idx(idx: Any, batch_size: Any) -> Any:
    """Replace the ``...`` of an index by one ``slice(None)`` per batch dim it covers (deprecated in tensordict).

    Indices that are not tuples (or ``...``) are returned as they are.

    Examples:
        >>> import warnings
        >>> warnings.simplefilter("ignore", DeprecationWarning)
        >>> convert_ellipsis_to_idx((..., 0), [1, 2, 3])
        (slice(None, None, None), slice(None, None, None), 0)
    """
    warnings.warn(
        "convert_ellipsis_to_idx is deprecated (tensordict removes it in 0.17)", DeprecationWarning, stacklevel=2
    )
    if idx is Ellipsis:
        idx = (idx,)
    elif not isinstance(idx, tuple):
        return idx
    if sum(item is Ellipsis for item in idx) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis not in idx:
        return idx
    used = sum(_dims_used(item) for item in idx)
    at = next(i for i, item in enumerate(idx) if item is Ellipsis)
    fill = (slice(None),) * max(len(batch_size) - used, 0)
    return (*idx[:at], *fill, *idx[at + 1 :])


def _dims_used(item: Any) -> int:
    """How many dims an index element consumes (a mask as many as its dims, ``None``/``...`` none)."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, torch.Tensor) and item.dtype is torch.bool:
        return item.ndim
    return 1


def _rows_key(input: Any, key: NestedKey, dim: int, what: str) -> tuple[torch.Tensor, int]:
    """The tensor at ``key`` and ``dim`` as a non-negative batch dim, for :func:`isin`/:func:`remove_duplicates`."""
    tensor = input.get(key, None)
    if not isinstance(tensor, torch.Tensor):
        found = "missing" if tensor is None else f"a {type(tensor).__name__}, not a tensor"
        raise KeyError(f"{what}: key {fmt_path(key_tuple(key))} is {found}")
    nd = input.batch_dims
    if not nd or not -nd <= dim < nd:
        raise ValueError(f"{what}: dim {dim} is not a batch dim of batch_size {list(input.batch_size)}")
    return tensor, dim % nd


def isin(input: Any, reference: Any, key: NestedKey, dim: int = 0) -> torch.Tensor:
    """Which elements of ``input`` along ``dim`` have a ``key`` slice equal to one of ``reference``'s.

    Args:
        input: the TensorDict to test.
        reference: the TensorDict to look in (same number of batch dims).
        key: the entry compared; a tensor in both.
        dim: the batch dim along which elements are compared.

    Returns:
        A bool tensor of length ``input.batch_size[dim]``.

    Raises:
        KeyError: if ``key`` is missing or no tensor in either.
        ValueError: if the batch dims differ in number or ``dim`` is not one.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(x=torch.tensor([[1, 2], [3, 4], [1, 2], [5, 6]]), batch_size=[4])
        >>> isin(td, TensorDict(x=torch.tensor([[1, 2], [5, 6]]), batch_size=[2]), key="x")
        tensor([ True, False,  True,  True])
    """
    if input.batch_dims != reference.batch_dims:
        raise ValueError(
            f"isin: input and reference need the same number of batch dims, got batch sizes "
            f"{list(input.batch_size)} and {list(reference.batch_size)}"
        )
    target, dim = _rows_key(input, key, dim, "isin (input)")
    known, _ = _rows_key(reference, key, dim, "isin (reference)")
    # one unique over both: equal slices get the same id, so membership is an id lookup
    _, ids = torch.unique(torch.cat([known, target], dim=dim), dim=dim, return_inverse=True)
    n = known.shape[dim]
    return torch.isin(ids[n:], ids[:n])


def remove_duplicates(input: Any, key: NestedKey, dim: int = 0, *, return_indices: bool = False) -> Any:
    """Keep the first element of each group whose ``key`` slices along ``dim`` are equal.

    The result is sorted by the value of ``key`` (as ``torch.unique``), and the same elements are kept
    in every entry.

    Args:
        input: the TensorDict.
        key: the tensor entry that defines duplicates.
        dim: the batch dim along which to look.
        return_indices: also return, for each element of ``input``, the index of its value in the result.

    Returns:
        The deduplicated TensorDict, or ``(td, indices)`` with ``return_indices=True``.

    Raises:
        KeyError: if ``key`` is missing or no tensor.
        ValueError: if ``dim`` is not a batch dim.

    Examples:
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(x=torch.tensor([7, 1, 7, 3]), y=torch.arange(4), batch_size=[4])
        >>> out, indices = remove_duplicates(td, key="x", return_indices=True)
        >>> out["x"], out["y"], indices
        (tensor([1, 3, 7]), tensor([1, 3, 0]), tensor([2, 0, 2, 1]))
    """
    tensor, dim = _rows_key(input, key, dim, "remove_duplicates")
    _, ids = torch.unique(tensor, dim=dim, return_inverse=True)
    # the first position of each id: a stable sort groups equal ids in their original order
    order = torch.sort(ids, stable=True).indices
    counts = torch.bincount(ids)
    starts = torch.cumsum(counts, 0) - counts
    out = input[(slice(None),) * dim + (order[starts],)]
    return (out, ids) if return_indices else out


# ------------------------------------------------------------------------------------ files
def print_directory_tree(path: Any, indent: str = "", display_metadata: bool = True) -> str:
    """Log (at INFO, on the ``tensorbatch`` logger) and return the tree of files under ``path``.

    Entries are in :func:`os.listdir` order; each level adds four spaces to ``indent``.

    Args:
        path: a folder (or a file).
        indent: put before each line.
        display_metadata: start with a line giving the total size of the files.

    Examples:
        >>> import tempfile
        >>> from tensorbatch import TensorDict
        >>> with tempfile.TemporaryDirectory() as path:
        ...     _ = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(path)
        ...     tree = print_directory_tree(path, display_metadata=False)
        >>> sorted(line.strip() for line in tree.splitlines()[1:])
        ['a.memmap', 'meta.json']
    """
    lines = []
    if display_metadata:
        size = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
        lines.append(f"Directory size: {_human_size(size)}")
        logger.info(lines[-1])
    _tree(os.fspath(path), indent, lines)
    return "\n".join(lines)


def _tree(path: str, indent: str, lines: list[str]) -> None:
    if not os.path.isdir(path):
        lines.append(indent + os.path.basename(path))
        logger.info(lines[-1])
        return
    lines.append(indent + os.path.basename(path) + "/")
    logger.info(lines[-1])
    for name in os.listdir(path):
        _tree(os.path.join(path, name), indent + "    ", lines)


def _human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024.0:
            return f"{size:.2f} {unit}"
        size /= 1024.0
    return f"{size:.2f} TB"


# ------------------------------------------------------------------------------------ right-aligned expansion
def expand_right(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Expand ``tensor`` to ``shape`` adding the missing dims on the right (broadcasting adds them on the left).

    The leading dims of ``tensor`` must equal those of ``shape`` or be 1. The result is a view.

    Args:
        tensor: the tensor to expand.
        shape: the result's shape, at least as long as ``tensor.shape``.

    Examples:
        >>> expand_right(torch.arange(3), (3, 2))
        tensor([[0, 0],
                [1, 1],
                [2, 2]])
    """
    while tensor.ndim < len(shape):
        tensor = tensor.unsqueeze(-1)
    return tensor.expand(shape)


def expand_as_right(tensor: Any, dest: Any) -> Any:
    """Expand ``tensor`` (or a TensorDict) to the shape of ``dest`` adding dims on the right.

    Args:
        tensor: a tensor or a TensorDict (its batch size is its shape).
        dest: a tensor or a TensorDict whose shape (batch size) the result takes.

    Raises:
        RuntimeError: if ``dest`` has fewer dims than ``tensor`` or a leading dim differs and is not 1.

    Examples:
        >>> expand_as_right(torch.ones(2), torch.zeros(2, 3)).shape
        torch.Size([2, 3])
    """
    n, m = tensor.ndimension(), dest.ndimension()
    if m < n:
        raise RuntimeError(
            f"expand_as_right needs a destination with at least as many dims as the tensor, got "
            f"tensor.ndimension()={n} and dest.ndimension()={m}"
        )
    if any(a != b and a != 1 for a, b in zip(tensor.shape, dest.shape, strict=False)):
        raise RuntimeError(
            f"tensor shape is incompatible with dest shape, got: tensor.shape={tensor.shape}, dest={dest.shape}"
        )
    for _ in range(m - n):
        tensor = tensor.unsqueeze(-1)
    return tensor.expand(dest.shape)


def _is_seq_of_nested_key(seq: Any) -> bool:
    if not isinstance(seq, Sequence):
        return False
    return all(
        isinstance(k, str) or (isinstance(k, (list, tuple)) and k and all(isinstance(p, str) for p in k)) for k in seq
    )


_DEPRECATED = {"is_seq_of_nested_key": (_is_seq_of_nested_key, "isinstance(key, NestedKey) on each key")}


def __getattr__(name: str) -> Any:
    """Serve the names tensordict deprecates (they warn, as there)."""
    if name not in _DEPRECATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value, instead = _DEPRECATED[name]
    warnings.warn(
        f"{__name__}.{name} is deprecated (tensordict removes it in 0.17); use {instead} instead",
        DeprecationWarning,
        stacklevel=2,
    )
    return value


class timeit:
    """Time a function or a block by name; each name keeps its call count, total and mean seconds.

    A decorator (``@timeit("step")``) or a context manager (``with timeit("load"):``). :meth:`print`
    logs every name at INFO on the ``tensorbatch`` logger; :meth:`erase` sets them back to zero.

    Examples:
        >>> @timeit("step")
        ... def step():
        ...     return 1
        >>> step(), timeit.stats("step")[2]
        (1, 1)
        >>> with timeit("step"):
        ...     pass
        >>> timeit.stats("step")[2]
        2
        >>> timeit.erase(); timeit.stats("step")
        (0.0, 0.0, 0)
    """

    _REG: ClassVar[dict[str, list[float]]] = {}  # name -> [mean seconds, total seconds, count]

    def __init__(self, name: str) -> None:
        self.name = name
        self._start = 0.0

    def __call__(self, fn: Any) -> Any:
        """``fn`` timed under this name at every call."""
        import functools

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return timed

    def __enter__(self) -> timeit:
        import time

        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        import time

        elapsed = time.perf_counter() - self._start
        entry = self._REG.setdefault(self.name, [0.0, 0.0, 0])
        entry[1] += elapsed
        entry[2] += 1
        entry[0] = entry[1] / entry[2]

    @staticmethod
    def stats(name: str) -> tuple[float, float, int]:
        """``(mean seconds, total seconds, count)`` recorded under ``name``."""
        mean, total, count = timeit._REG.get(name, [0.0, 0.0, 0])
        return mean, total, int(count)

    @staticmethod
    def print(prefix: str | None = None) -> None:
        """Log the mean and total time of each name (sorted), at INFO."""
        for name in sorted(timeit._REG):
            mean, total, _ = timeit.stats(name)
            line = f"{name} took {mean * 1000:.4g} msec (total = {total:.4g} sec)"
            logger.info(f"{prefix} -- {line}" if prefix else line)

    @staticmethod
    def erase() -> None:
        """Set every name's count and times back to zero."""
        for name in timeit._REG:
            timeit._REG[name] = [0.0, 0.0, 0]
