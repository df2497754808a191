"""Tabular import/export: pandas, CSV, Parquet, JSON and Arrow (the ``tabular`` extra).

One row per batch element: a table of ``N`` rows is a TensorDict of ``batch_size=[N]``. Numeric and
boolean columns become tensors (viewing the table's memory where Arrow allows it), string and
categorical columns become one :class:`NonTensorStack` each (one value per row). Nested keys become
columns named by joining the key path with ``separator`` (``("obs", "x")`` -> ``"obs.x"``), and back.

pandas and pyarrow are imported when a function is called, so ``import tensorbatch`` needs neither.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Literal

import numpy as np
import torch

from . import _progress
from . import _tabular_arrow as _arrow
from ._nontensor import NonTensorDataBase, NonTensorStack
from ._ops.traverse import is_non_tensor_type, named_leaves
from .base import TensorDictBase

_KINDS = "biuf"  # numpy kinds that become tensors: bool, signed, unsigned, float


# ------------------------------------------------------------------------------------ columns -> TensorDict
def _missing(value: Any) -> bool:
    """Whether a value of an object column stands for a missing one (None, NaN, pandas' NA or NaT)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return bool(np.isnat(value))
    return type(value).__name__ in ("NAType", "NaTType")


def _objects(values: list[Any]) -> NonTensorStack:
    """A NonTensorStack of an object column, one value per row, missing values as None."""
    if not set(map(type, values)) <= {str}:  # the common case (all strings) checked at C speed
        values = [None if _missing(v) else v for v in values]
    return _stack(values)


def _stack(values: list[Any]) -> NonTensorStack:
    # one shared list and positions 0..N-1: building one NonTensorData per row costs ~60 us a row
    return NonTensorStack._new(values, torch.arange(len(values)), None)


def _numpy_leaf(name: Any, array: Any, dtype: torch.dtype | None) -> Any:
    """A tensor (numeric/bool column: a copy, cast to ``dtype``; datetimes as int64 ns) or a stack of values."""
    kind = array.dtype.kind
    if kind == "O" and not len(array):  # an empty text column (CSV header only): nothing says it holds strings
        return torch.zeros(0, dtype=torch.float64)
    if kind == "M":  # datetimes: int64 nanoseconds since the epoch (NaT: the smallest int64), never cast
        return torch.from_numpy(array.astype("datetime64[ns]").view("int64").copy())
    if kind in _KINDS:
        if array.ndim != 1:
            raise ValueError(f"column {name!r}: expected one value per row, got shape {list(array.shape)}")
        tensor = torch.from_numpy(array.copy())  # a copy: writing the tensor never writes the DataFrame
        return tensor if dtype is None else tensor.to(dtype)
    # durations (numpy timedelta64 values), timezone-aware datetimes, periods, strings, mixed objects
    return _objects(list(array))


def _build(
    columns: list[tuple[Any, Any]], num_rows: int, cls: type, separator: str | None, device: Any, batch_size: Any
) -> Any:
    """The TensorDict of ``(name, leaf)`` columns: all validated before anything is built."""
    from ._td import TensorDict

    cls = TensorDict if cls is TensorDictBase else cls
    seen: dict[tuple[str, ...], Any] = {}
    for name, _ in columns:
        if isinstance(name, tuple):  # a pandas MultiIndex column: empty trailing levels are padding
            path = tuple(str(p) for p in name if p != "")
        else:
            path = tuple(str(name).split(separator)) if separator else (str(name),)
        clash = next((p for p in seen if p[: len(path)] == path or path[: len(p)] == p), None)
        if clash is not None:
            raise ValueError(
                f"columns {seen[clash]!r} and {name!r} both map to the key {path!r} (or one is nested inside the other)"
            )
        seen[path] = name
    out: dict[Any, Any] = {}
    for path, (_, leaf) in zip(seen, columns, strict=True):
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = leaf
    size = torch.Size([num_rows]) if batch_size is None else torch.Size(batch_size)
    return cls(out, batch_size=size, device=device)


def from_pandas(
    dataframe: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    categorical: Literal["codes", "values"] = "codes",
    cls: type = TensorDictBase,
    progress: bool | None = None,
) -> Any:
    """A TensorDict of ``batch_size=[len(dataframe)]`` with one entry per column of a pandas DataFrame.

    Each column is read as ``Series.to_numpy()`` gives it, as tensordict does: numeric and boolean columns
    (nullable ``Int64``/``boolean`` ones too, when they have no missing value; integers with missing values
    come out float with NaN) become tensors of the same dtype, copied; datetime columns int64 nanoseconds
    since the epoch (NaT the smallest int64); categorical columns the tensor of their codes (-1 where
    missing). Every other column (strings, booleans with missing values, durations, timezone-aware
    datetimes, mixed objects) becomes a :class:`NonTensorStack` of its values, one per row, ``None`` where
    missing. Multi-level (``MultiIndex``) columns become nested keys, as do names split on ``separator``.

    Args:
        dataframe: the ``pandas.DataFrame``.
        auto_batch_size: set the batch size to the leading dims all entries share (exclusive with
            ``batch_size``).
        batch_dims: with ``auto_batch_size``, the most batch dims to keep.
        device: the device of the result.
        batch_size: the batch size (``[num_rows]`` by default).
        separator: split column names on it into nested keys (``"obs.x"`` -> ``("obs", "x")``).
        dtype: cast the numeric and boolean columns (and categorical codes) to it.
        categorical: ``"codes"`` (tensordict's) reads a categorical column as its codes, ``"values"`` as a
            :class:`NonTensorStack` of its values.
        cls: the class to build (a TensorDict by default).
        progress: show a tqdm bar counting the columns read (None: the switch
            :class:`~tensorbatch.set_progress`; needs tqdm). An addition: tensordict has no such option.

    Raises:
        ValueError: two columns map to the same key, naming both; an unknown ``categorical``.

    Note:
        Differs from tensordict: a string or object column is a :class:`NonTensorStack` with one value
        per row (tensordict: one ``NonTensorData`` holding the whole array, so ``td[0]["name"]`` gives
        every row's value).

    Examples:
        >>> import pandas as pd
        >>> import tensorbatch
        >>> df = pd.DataFrame({"obs.x": [1.0, 2.0], "obs.y": [3, 4], "name": ["a", "b"]})
        >>> td = tensorbatch.from_pandas(df, separator=".")
        >>> td["obs", "y"], td["name"], td.batch_size
        (tensor([3, 4]), LinkedList(['a', 'b']), torch.Size([2]))
        >>> df = pd.DataFrame({"c": pd.Categorical(["lo", "hi", "lo"])})
        >>> tensorbatch.from_pandas(df)["c"], tensorbatch.from_pandas(df, categorical="values")["c"]
        (tensor([1, 0, 1], dtype=torch.int8), LinkedList(['lo', 'hi', 'lo']))
    """
    import pandas as pd  # type: ignore[import-untyped]

    if categorical not in ("codes", "values"):
        raise ValueError(f"categorical must be 'codes' or 'values', got {categorical!r}")
    names = list(dataframe.columns)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"column {dup!r} appears more than once in the DataFrame")
    columns = []
    for name in _progress.items(names, progress, "from_pandas", "column"):
        series = dataframe[name]
        if isinstance(series.dtype, pd.CategoricalDtype):
            if categorical == "codes":
                leaf: Any = _numpy_leaf(name, series.cat.codes.to_numpy(), dtype)
            else:
                leaf = _objects(series.astype(object).tolist())
        else:
            leaf = _numpy_leaf(name, series.to_numpy(), dtype)
        columns.append((name, leaf))
    result = _build(columns, len(dataframe), cls, separator, device, batch_size)
    return _auto(result, auto_batch_size, batch_dims, batch_size)


def _auto(result: Any, auto_batch_size: bool, batch_dims: int | None, batch_size: Any) -> Any:
    if auto_batch_size:
        if batch_size is not None:
            raise TypeError("auto_batch_size and batch_size cannot both be given")
        result.auto_batch_size_(batch_dims=batch_dims)
    return result


def _text(column: Any) -> NonTensorStack:
    """A string or dictionary column as a NonTensorStack, each distinct value built once when they repeat.

    Building one Python string per row is most of the cost of reading text; when a sample of rows shows
    repeats (an estimated distinct count under 1/8 of the rows), the column is dictionary-encoded by Arrow
    first and the stack holds the distinct values with one position per row. Mostly-distinct columns are
    converted row by row (encoding them would hash every row for nothing).
    """
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        return _coded(column)
    rows = len(column)
    sample = min(rows, 1024)
    if sample:
        picked = column.take(pa.array(range(0, rows, rows // sample)[:sample]))
        # duplicates among m sampled rows of D distinct values ~ m^2 / 2D; D < rows / 8 <=> more than 4m^2/rows
        if sample - len(set(picked.to_pylist())) > 4 * sample * sample / rows:
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            return _coded(column.dictionary_encode())
    # straight from the chunks (combining them first would copy the text once more)
    return _stack(column.to_numpy(zero_copy_only=False).tolist())


def _coded(column: Any) -> NonTensorStack:
    """A NonTensorStack of a dictionary-encoded column: its distinct values and a position per row.

    Missing rows point at an extra None.
    """
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):  # chunks may carry different dictionaries: one for all
        column = column.unify_dictionaries()
        chunks = column.chunks
        dictionary = chunks[0].dictionary if chunks else pa.array([], column.type.value_type)
        indices = pa.chunked_array([c.indices for c in chunks], column.type.index_type).combine_chunks()
    else:
        dictionary, indices = column.dictionary, column.indices
    values = dictionary.to_pylist()
    if indices.null_count:
        indices = indices.fill_null(len(values))
        values.append(None)
    positions = torch.from_numpy(indices.to_numpy(zero_copy_only=False).astype("int64", copy=False))
    return NonTensorStack._new(values, positions, None)


def from_arrow(
    table: Any,
    *,
    copy: bool | None = None,
    nulls: Literal["raise", "fill", "mask"] = "raise",
    mask_key: Any = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    cls: type = TensorDictBase,
    progress: bool | None = None,
) -> Any:
    """A TensorDict of ``batch_size=[table.num_rows]`` with one entry per column of an Arrow table, as tensordict's.

    Integer and float columns view the Arrow buffer (DLPack); boolean columns are copied (Arrow packs
    bits). ``list``/``large_list`` columns of numbers become jagged nested tensors (``layout=torch.jagged``),
    ``fixed_size_list`` and ``arrow.fixed_shape_tensor`` columns tensors with trailing dims, ``struct``
    columns nested TensorDicts. Every other column (strings, dictionaries, timestamps, dates, binary, lists
    of strings) becomes a :class:`NonTensorStack` of its Python values, one per row.

    Args:
        table: a ``pyarrow.Table`` or ``RecordBatch``; anything else goes through ``pyarrow.table`` first.
        copy: ``None`` views mutable buffers and copies immutable (memory-mapped) ones, ``True`` copies
            every column, ``False`` views every column it can.
        nulls: ``"raise"`` raises ValueError for a null row (or a null inside a list or struct row);
            ``"fill"`` fills nulls (NaN in float tensors, 0/False in the others, an empty row in jagged
            tensors, None in stacks); ``"mask"`` fills them and adds a boolean entry
            ``(*mask_key, *key)``, True where the row is not null, for each entry ``key`` with nulls.
        mask_key: where ``nulls="mask"`` puts the masks (``"_mask"`` by default).
        device: the device of the result.
        batch_size: the batch size (``[num_rows]`` by default).
        separator: split column names on it into nested keys (``"obs.x"`` -> ``("obs", "x")``).
        auto_batch_size: as :func:`from_pandas`.
        batch_dims: as :func:`from_pandas`.
        cls: the class to build (a TensorDict by default).
        progress: as :func:`from_pandas` (the bar counts the columns converted).

    Raises:
        ValueError: a null with ``nulls="raise"``, naming the column; a bad ``nulls``/``mask_key``.

    Examples:
        >>> import pyarrow as pa
        >>> import tensorbatch
        >>> td = tensorbatch.from_arrow(pa.table({"a": [1, 2], "s": ["x", "y"], "l": [[1, 2], [3]]}))
        >>> td["a"], td["s"], td["l"].is_nested
        (tensor([1, 2]), LinkedList(['x', 'y']), True)
        >>> td = tensorbatch.from_arrow(pa.table({"y": [1.0, None]}), nulls="mask")
        >>> td["y"], td["_mask", "y"]
        (tensor([1., nan], dtype=torch.float64), tensor([ True, False]))
    """
    import pyarrow as pa

    if nulls not in _arrow.NULLS:
        raise ValueError(f"nulls must be one of {_arrow.NULLS}, got {nulls!r}")
    if mask_key is not None and nulls != "mask":
        raise ValueError(f"from_arrow got a mask_key but nulls={nulls!r}, not 'mask'")
    mask_path = _mask_path("_mask" if mask_key is None else mask_key)
    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        table = pa.table(table)
    names = list(table.column_names)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"column {dup!r} appears more than once in the table")
    if nulls == "mask" and mask_path[0] in names:
        raise ValueError(
            f"nulls='mask' writes the masks under the key {mask_path[0]!r}, which is a column of the table"
        )
    masks: dict[Any, Any] = {}
    columns = [
        (name, _arrow.arrow_leaf(_arrow.combined(table.column(i)), copy, nulls, (name,), masks, _text))
        for i, name in _progress.items(enumerate(names), progress, "from_arrow", "column")
    ]
    columns += [((*mask_path, *key), mask) for key, mask in masks.items()]
    result = _build(columns, table.num_rows, cls, separator, device, batch_size)
    return _auto(result, auto_batch_size, batch_dims, batch_size)


def _mask_path(key: Any) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    if isinstance(key, tuple) and all(isinstance(k, (str, tuple)) for k in key):
        flat = tuple(p for k in key for p in _mask_path(k)) if key else ()
        if flat:
            return flat
        raise ValueError(f"mask_key must be a string or a non-empty tuple of strings, got {key!r}")
    raise TypeError(f"mask_key must be a string or a tuple of strings, got {key!r}")


def from_parquet(
    path: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    columns: list[str] | None = None,
    cls: type = TensorDictBase,
    progress: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Read a Parquet file (a path or a file object) into a TensorDict with pyarrow, as tensordict reads it.

    Numeric and boolean columns become tensors (integers with nulls float with NaN; booleans with nulls a
    :class:`NonTensorStack` with None), timestamps int64 nanoseconds (null: the smallest int64), numeric
    ``arrow.fixed_shape_tensor`` columns tensors with trailing dims, lists of numbers tensors (one tensor
    per row when their lengths differ); every other column a :class:`NonTensorStack` of its Python values.
    :func:`from_arrow` reads a table with other rules (jagged tensors, nested TensorDicts, ``nulls=``).

    Args:
        path: the file's path, or a binary file object.
        columns: the columns to read (all by default).
        cls: the class to build.
        auto_batch_size: as :func:`from_pandas`.
        batch_dims: as :func:`from_pandas`.
        device: as :func:`from_pandas`.
        batch_size: as :func:`from_pandas`.
        separator: as :func:`from_pandas`.
        dtype: as :func:`from_pandas`.
        progress: as :func:`from_pandas` (the bar counts the columns converted, after pyarrow read the file).
        **kwargs: passed to ``pyarrow.parquet.read_table``.

    Examples:
        >>> import io, torch
        >>> import tensorbatch
        >>> buf = io.BytesIO()
        >>> tensorbatch.TensorDict(a=torch.arange(3), batch_size=[3]).to_parquet(buf)
        >>> _ = buf.seek(0)
        >>> tensorbatch.from_parquet(buf)["a"]
        tensor([0, 1, 2])
    """
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=columns, **kwargs)
    names = list(table.column_names)
    read = [
        (name, _arrow.parquet_leaf(table.column(i), dtype, _text))
        for i, name in _progress.items(enumerate(names), progress, "from_parquet", "column")
    ]
    result = _build(read, table.num_rows, cls, separator, device, batch_size)
    return _auto(result, auto_batch_size, batch_dims, batch_size)


def from_csv(
    path: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    cls: type = TensorDictBase,
    progress: bool | None = None,
    **kwargs: Any,
) -> Any:
    r"""Read a CSV file (a path or a file object) into a TensorDict with ``pandas.read_csv``.

    Args:
        path: the file's path, or a text file object.
        cls: the class to build.
        auto_batch_size: as :func:`from_pandas`.
        batch_dims: as :func:`from_pandas`.
        device: as :func:`from_pandas`.
        batch_size: as :func:`from_pandas`.
        separator: as :func:`from_pandas`.
        dtype: as :func:`from_pandas`.
        progress: as :func:`from_pandas` (the bar counts the columns converted, after pandas read the file).
        **kwargs: passed to ``pandas.read_csv``.

    Examples:
        >>> import io
        >>> import tensorbatch
        >>> td = tensorbatch.from_csv(io.StringIO("a,b.c\n1,x\n2,y\n"), separator=".")
        >>> td["a"], td["b", "c"]
        (tensor([1, 2]), LinkedList(['x', 'y']))
    """
    import pandas as pd

    return from_pandas(
        pd.read_csv(path, **kwargs),
        cls=cls,
        device=device,
        batch_size=batch_size,
        separator=separator,
        dtype=dtype,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        progress=progress,
    )


def from_json(
    path: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    lines: bool = False,
    cls: type = TensorDictBase,
    progress: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Read a JSON array of records (or JSON Lines with ``lines=True``) into a TensorDict, through pandas.

    Args:
        path: the file's path, or a text file object.
        lines: one record per line.
        cls: the class to build.
        auto_batch_size: as :func:`from_pandas`.
        batch_dims: as :func:`from_pandas`.
        device: as :func:`from_pandas`.
        batch_size: as :func:`from_pandas`.
        separator: as :func:`from_pandas`.
        dtype: as :func:`from_pandas`.
        progress: as :func:`from_pandas` (the bar counts the columns converted, after pandas read the file).
        **kwargs: passed to ``pandas.read_json``.

    Examples:
        >>> import io
        >>> import tensorbatch
        >>> tensorbatch.from_json(io.StringIO('[{"a": 1.5}, {"a": 2.5}]'))["a"]
        tensor([1.5000, 2.5000], dtype=torch.float64)
    """
    import pandas as pd

    text = path.read() if hasattr(path, "read") else None
    if text is not None:
        import io

        path = io.StringIO(text if isinstance(text, str) else text.decode())
    frame = pd.read_json(path, lines=lines, **kwargs)
    return from_pandas(
        frame,
        cls=cls,
        device=device,
        batch_size=batch_size,
        separator=separator,
        dtype=dtype,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        progress=progress,
    )


# ------------------------------------------------------------------------------------ TensorDict -> columns
def _is_tensorclass(cls: type) -> bool:
    return bool(getattr(cls, "_tb_tensorclass", False))


def _non_tensor_or_class(cls: type) -> bool:
    return is_non_tensor_type(cls) or _is_tensorclass(cls)


def _columns(td: Any, separator: str | None, classes: bool = False) -> dict[Any, Any]:
    """``name -> numpy array or list`` for every leaf, all checked before anything is converted.

    ``classes``: without a separator, a TensorClass is one column of its elements (``to_pandas``, as tensordict).
    """
    if td.batch_dims != 1:
        raise ValueError(
            f"a table needs exactly one batch dim (one row per element), got batch_size "
            f"{list(td.batch_size)}: call td.reshape(-1) first"
        )
    rows = td.batch_size[0]
    leaves = named_leaves(td, is_leaf=_non_tensor_or_class if classes and separator is None else is_non_tensor_type)
    out: dict[Any, Any] = {}
    for path, value in leaves:
        if len(path) > 1 and separator is None:
            raise ValueError(f"the key {path!r} is nested: pass separator= (e.g. '.') to name its column")
        name = separator.join(path) if separator is not None else path[0]
        if name in out:
            raise ValueError(f"two keys become the column {name!r} with separator {separator!r}")
        if isinstance(value, torch.Tensor) and value.dim() != 1:
            raise ValueError(
                f"the entry {path!r} has shape {list(value.shape)}: a column holds one value "
                f"per row (flatten its trailing dims into separate keys first)"
            )
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            raise TypeError(f"the entry {path!r} is bfloat16, which numpy and Arrow cannot hold: cast it first")
        out[name] = value
    for name, value in out.items():
        if isinstance(value, torch.Tensor):
            out[name] = value.detach().cpu().numpy()
        elif isinstance(value, NonTensorDataBase):
            out[name] = [value.data] * rows
        elif _is_tensorclass(type(value)):
            out[name] = list(value.unbind(0))
        else:
            out[name] = value.tolist()
    return out


def to_pandas(td: Any, *, separator: str | None = None) -> Any:
    """A pandas DataFrame with one row per batch element and one column per leaf.

    Args:
        td: a TensorDict with one batch dim.
        separator: join nested keys with it into column names (required when ``td`` has nested keys; without
            it, a TensorClass entry is one column holding its elements, as tensordict's).

    Raises:
        ValueError: more than one batch dim, a nested key without ``separator``, or a leaf with more
            than one value per row, naming the key.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.arange(2), b=TensorDict(c=torch.zeros(2), batch_size=[2]), batch_size=[2])
        >>> td.to_pandas(separator=".")
           a  b.c
        0  0  0.0
        1  1  0.0
    """
    import pandas as pd

    return pd.DataFrame(_columns(td, separator, classes=True))


def to_arrow(td: Any, *, separator: str | None = None) -> Any:
    """A ``pyarrow.Table`` with one row per batch element and one column per entry, as tensordict's.

    1-D tensors become primitive columns, tensors with trailing dims ``arrow.fixed_shape_tensor`` columns,
    jagged nested tensors (ragged dim 1) ``large_list`` columns, nested TensorDicts ``struct`` columns and
    non-tensor entries columns of the type Arrow infers from their values. With ``separator``, nested keys
    become flat columns named by joining the key path with it instead of struct columns.

    Raises:
        ValueError: more than one batch dim; a nested tensor that is not jagged in dim 1, naming the key.
        TypeError: a bfloat16 entry, naming the key.

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> td = TensorDict(a=torch.arange(2), obs=TensorDict(x=torch.zeros(2, 3), batch_size=[2]), batch_size=[2])
        >>> td.to_arrow().schema.names, td.to_arrow(separator=".").schema.names
        (['a', 'obs'], ['a', 'obs.x'])
    """
    import pyarrow as pa

    if td.batch_dims != 1:
        raise ValueError(
            f"a table needs exactly one batch dim (one row per element), got batch_size "
            f"{list(td.batch_size)}: call td.reshape(-1) first"
        )
    entries: list[tuple[tuple[str, ...], Any]]
    if separator is None:
        entries = [((key,), td._get_str(key, None)) for key in td._keys_str()]
    else:
        entries = list(named_leaves(td, is_leaf=is_non_tensor_type))
    out: dict[str, Any] = {}
    for path, value in entries:
        name = path[0] if separator is None else separator.join(path)
        if name in out:
            raise ValueError(f"two keys become the column {name!r} with separator {separator!r}")
        out[name] = value
    return pa.table({name: _arrow.arrow_array(value, (name,)) for name, value in out.items()})


def to_parquet(td: Any, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
    """Write ``td`` to a Parquet file (a path or a binary file object), one column per leaf.

    ``kwargs`` go to ``pyarrow.parquet.write_table``. See :func:`from_parquet` for an example.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(_columns(td, separator)), path, **kwargs)


def to_csv(td: Any, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
    r"""Write ``td`` to a CSV file (a path or a text file object) without the index, through pandas.

    Examples:
        >>> import io, torch
        >>> from tensorbatch import TensorDict
        >>> buf = io.StringIO()
        >>> TensorDict(a=torch.arange(2), batch_size=[2]).to_csv(buf)
        >>> buf.getvalue()
        'a\n0\n1\n'
    """
    kwargs.setdefault("index", False)
    to_pandas(td, separator=separator).to_csv(path, **kwargs)


def to_json(td: Any, path: Any, *, separator: str | None = None, lines: bool = False, **kwargs: Any) -> None:
    """Write ``td`` as a JSON array of records (JSON Lines with ``lines=True``), through pandas.

    Examples:
        >>> import io, torch
        >>> from tensorbatch import TensorDict
        >>> buf = io.StringIO()
        >>> TensorDict(a=torch.arange(2), batch_size=[2]).to_json(buf)
        >>> buf.getvalue()
        '[{"a":0},{"a":1}]'
    """
    kwargs.setdefault("orient", "records")
    to_pandas(td, separator=separator).to_json(path, lines=lines, **kwargs)


# ------------------------------------------------------------------------------------ the methods
def _classmethod(fn: Any) -> classmethod[Any, Any, Any]:
    def method(cls: type, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, cls=cls, **kwargs)

    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = fn.__doc__
    # the function's own signature (its keywords are what callers and the stubs see), ``cls`` first
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "cls"]
    method.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params]
    )
    return classmethod(method)


def install(cls: type) -> None:
    """Attach ``from_*`` (classmethods) and ``to_*`` (methods) to ``cls``."""
    for fn in (from_pandas, from_csv, from_parquet, from_json, from_arrow):
        setattr(cls, fn.__name__, _classmethod(fn))
    for method in (to_pandas, to_csv, to_parquet, to_json, to_arrow):
        setattr(cls, method.__name__, method)


install(TensorDictBase)  # base.py imports no feature: the feature attaches itself
