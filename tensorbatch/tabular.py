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
from typing import Any

import torch

from ._nontensor import NonTensorDataBase, NonTensorStack
from ._ops.traverse import is_non_tensor_type, named_leaves
from .base import TensorDictBase

_KINDS = "biuf"  # numpy kinds that become tensors: bool, signed, unsigned, float


# ------------------------------------------------------------------------------------ columns -> TensorDict
def _strings(name: Any, values: list[Any]) -> NonTensorStack:
    """A NonTensorStack of a string column; missing values (None/NaN) become None."""
    return _stack(_checked(name, values))


def _checked(name: Any, values: list[Any]) -> list[Any]:
    """``values`` with missing ones (None/NaN) as None; a TypeError naming the column for non-strings."""
    if set(map(type, values)) <= {str}:  # the common case, checked at C speed
        return values
    for i, v in enumerate(values):
        if type(v) is not str:
            if v is None or (isinstance(v, float) and math.isnan(v)):
                values[i] = None
            else:
                raise TypeError(f"column {name!r}: only numeric, boolean and string columns are supported, "
                                f"row {i} holds a {type(v).__name__} ({v!r:.40})")
    return values


def _stack(values: list[Any]) -> NonTensorStack:
    # one shared list and positions 0..N-1: building one NonTensorData per row costs ~60 us a row
    return NonTensorStack._new(values, torch.arange(len(values)), None)


def _numpy_leaf(name: Any, array: Any) -> Any:
    """A tensor (numeric/bool/datetime numpy column, zero-copy when writable) or a string stack."""
    kind = array.dtype.kind
    if kind == "O" and not len(array):  # an empty text column (CSV header only): nothing says it holds strings
        return torch.zeros(0, dtype=torch.float64)
    if kind in "Mm":  # datetimes and durations: int64 nanoseconds, as tensordict does
        array = array.astype(array.dtype.str[:3] + "8[ns]").view("int64")
        kind = "i"
    if kind in _KINDS:
        if array.ndim != 1:
            raise ValueError(f"column {name!r}: expected one value per row, got shape {list(array.shape)}")
        if not array.flags.writeable:  # torch refuses to view read-only memory silently
            array = array.copy()
        return torch.from_numpy(array)
    return _strings(name, list(array.tolist()))


def _build(columns: list[tuple[Any, Any]], num_rows: int, cls: type, separator: str | None, device: Any,
           batch_size: Any, dtype: torch.dtype | None) -> Any:
    """The TensorDict of ``(name, leaf)`` columns: all validated before anything is built."""
    from ._td import TensorDict

    cls = TensorDict if cls is TensorDictBase else cls
    seen: dict[tuple[str, ...], Any] = {}
    for name, _ in columns:
        if isinstance(name, tuple):  # a pandas MultiIndex column: empty trailing levels are padding
            path = tuple(str(p) for p in name if p != "")
        else:
            path = tuple(str(name).split(separator)) if separator else (str(name),)
        clash = next((p for p in seen if p[:len(path)] == path or path[:len(p)] == p), None)
        if clash is not None:
            raise ValueError(f"columns {seen[clash]!r} and {name!r} both map to the key {path!r} "
                             f"(or one is nested inside the other)")
        seen[path] = name
    out: dict[Any, Any] = {}
    for path, (_, leaf) in zip(seen, columns, strict=True):
        if dtype is not None and isinstance(leaf, torch.Tensor):
            leaf = leaf.to(dtype)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = leaf
    size = torch.Size([num_rows]) if batch_size is None else torch.Size(batch_size)
    return cls(out, batch_size=size, device=device)


def from_pandas(dataframe: Any, *, auto_batch_size: bool = False, batch_dims: int | None = None,
                device: Any = None, batch_size: Any = None, separator: str | None = None,
                dtype: torch.dtype | None = None, cls: type = TensorDictBase) -> Any:
    """A TensorDict of ``batch_size=[len(dataframe)]`` with one entry per column of a pandas DataFrame.

    Numeric and boolean columns become tensors of the same dtype; datetime columns int64 nanoseconds;
    string and categorical columns a :class:`NonTensorStack` of their values (``None`` where missing).
    Multi-level (``MultiIndex``) columns become nested keys, as do names split on ``separator``.

    Args:
        dataframe: the ``pandas.DataFrame``.
        auto_batch_size: set the batch size to the leading dims all entries share (exclusive with
            ``batch_size``).
        batch_dims: with ``auto_batch_size``, the most batch dims to keep.
        device: the device of the result.
        batch_size: the batch size (``[num_rows]`` by default).
        separator: split column names on it into nested keys (``"obs.x"`` -> ``("obs", "x")``).
        dtype: cast the numeric and boolean columns to it.
        cls: the class to build (a TensorDict by default).

    Raises:
        TypeError: an object column holds something other than strings, naming the column.
        ValueError: two columns map to the same key, naming both.

    Examples:
        >>> import pandas as pd
        >>> import tensorbatch
        >>> df = pd.DataFrame({"obs.x": [1.0, 2.0], "obs.y": [3, 4], "name": ["a", "b"]})
        >>> td = tensorbatch.from_pandas(df, separator=".")
        >>> td["obs", "y"], td["name"], td.batch_size
        (tensor([3, 4]), ['a', 'b'], torch.Size([2]))
    """
    import pandas as pd  # type: ignore[import-untyped]

    names = list(dataframe.columns)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"column {dup!r} appears more than once in the DataFrame")
    columns = []
    for name in names:
        series = dataframe[name]
        if isinstance(series.dtype, pd.CategoricalDtype):
            leaf: Any = _strings(name, series.astype(object).tolist())
        elif series.dtype.kind in _KINDS + "Mm":
            leaf = _numpy_leaf(name, series.to_numpy())
        else:  # object, pandas' "str"/StringDtype, nullable extension dtypes
            leaf = _numpy_leaf(name, series.to_numpy(dtype=object))
        columns.append((name, leaf))
    result = _build(columns, len(dataframe), cls, separator, device, batch_size, dtype)
    return _auto(result, auto_batch_size, batch_dims, batch_size)


def _auto(result: Any, auto_batch_size: bool, batch_dims: int | None, batch_size: Any) -> Any:
    if auto_batch_size:
        if batch_size is not None:
            raise TypeError("auto_batch_size and batch_size cannot both be given")
        result.auto_batch_size_(batch_dims=batch_dims)
    return result


def _arrow_leaf(name: Any, column: Any) -> Any:
    """A tensor viewing an Arrow column's buffer when it can (numeric, no nulls), else a copy or a stack."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return _text(column)
    if pa.types.is_dictionary(kind):
        return _coded(name, column)
    if isinstance(column, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        array = column
    kind = array.type
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        array = array.cast(pa.timestamp("ns") if pa.types.is_timestamp(kind) else pa.duration("ns")).cast(pa.int64())
        kind = array.type
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and array.null_count == 0:
        if len(array) == 0:  # DLPack refuses empty buffers
            return torch.from_numpy(array.to_numpy(zero_copy_only=False).copy())
        return torch.utils.dlpack.from_dlpack(array)  # zero-copy: the tensor keeps the Arrow buffer alive
    if pa.types.is_boolean(kind) or pa.types.is_floating(kind):  # bits, or floats with nulls (-> NaN): a copy
        if pa.types.is_boolean(kind) and array.null_count:
            raise ValueError(f"column {name!r}: a boolean column with missing values has no tensor form")
        return torch.from_numpy(array.to_numpy(zero_copy_only=False))
    if pa.types.is_integer(kind):
        raise ValueError(f"column {name!r}: an integer column with missing values has no tensor form "
                         f"(cast it to float first)")
    raise TypeError(f"column {name!r}: Arrow type {kind} is not supported "
                    f"(numeric, boolean, timestamp, string and dictionary columns are)")


def _text(column: Any) -> NonTensorStack:
    """A string column (only str or None) as a NonTensorStack, each distinct string built once when they repeat.

    Building one Python string per row is most of the cost of reading text; when a sample of rows shows
    repeats (an estimated distinct count under 1/8 of the rows), the column is dictionary-encoded by Arrow
    first and the stack holds the distinct values with one position per row. Mostly-distinct columns are
    converted row by row (encoding them would hash every row for nothing).
    """
    import pyarrow as pa

    rows = len(column)
    sample = min(rows, 1024)
    if sample:
        picked = column.take(pa.array(range(0, rows, rows // sample)[:sample]))
        # duplicates among m sampled rows of D distinct values ~ m^2 / 2D; D < rows / 8 <=> more than 4m^2/rows
        if sample - len(set(picked.to_pylist())) > 4 * sample * sample / rows:
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            return _coded(None, column.dictionary_encode())
    # straight from the chunks (combining them first would copy the text once more)
    return _stack(column.to_numpy(zero_copy_only=False).tolist())


def _coded(name: Any, column: Any) -> NonTensorStack:
    """A NonTensorStack of a dictionary-encoded column: its distinct values and a position per row.

    The values are checked (strings or missing) unless ``name`` is None; missing rows point at an extra None.
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
    if name is not None:
        values = _checked(name, values)
    if indices.null_count:
        indices = indices.fill_null(len(values))
        values.append(None)
    positions = torch.from_numpy(indices.to_numpy(zero_copy_only=False).astype("int64", copy=False))
    return NonTensorStack._new(values, positions, None)


def from_arrow(table: Any, *, device: Any = None, batch_size: Any = None, separator: str | None = None,
               dtype: torch.dtype | None = None, auto_batch_size: bool = False, batch_dims: int | None = None,
               cls: type = TensorDictBase) -> Any:
    """A TensorDict of ``batch_size=[table.num_rows]`` with one entry per column of an Arrow table.

    Numeric columns without missing values are viewed, not copied (DLPack); boolean columns and
    float columns with missing values (NaN) are copied; string and dictionary columns become a
    :class:`NonTensorStack`. Arguments as :func:`from_pandas`.

    Examples:
        >>> import pyarrow as pa
        >>> import tensorbatch
        >>> td = tensorbatch.from_arrow(pa.table({"a": [1, 2], "s": ["x", "y"]}))
        >>> td["a"], td["s"]
        (tensor([1, 2]), ['x', 'y'])
    """
    import pyarrow as pa

    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        table = pa.table(table)
    names = list(table.column_names)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"column {dup!r} appears more than once in the table")
    columns = [(name, _arrow_leaf(name, table.column(i))) for i, name in enumerate(names)]
    result = _build(columns, table.num_rows, cls, separator, device, batch_size, dtype)
    return _auto(result, auto_batch_size, batch_dims, batch_size)


def from_parquet(path: Any, *, auto_batch_size: bool = False, batch_dims: int | None = None, device: Any = None,
                 batch_size: Any = None, separator: str | None = None, dtype: torch.dtype | None = None,
                 columns: list[str] | None = None, cls: type = TensorDictBase, **kwargs: Any) -> Any:
    """Read a Parquet file (a path or a file object) into a TensorDict with pyarrow, as :func:`from_arrow`.

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

    return from_arrow(pq.read_table(path, columns=columns, **kwargs), cls=cls, device=device, batch_size=batch_size,
                      separator=separator, dtype=dtype, auto_batch_size=auto_batch_size, batch_dims=batch_dims)


def from_csv(path: Any, *, auto_batch_size: bool = False, batch_dims: int | None = None, device: Any = None,
             batch_size: Any = None, separator: str | None = None, dtype: torch.dtype | None = None,
             cls: type = TensorDictBase, **kwargs: Any) -> Any:
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
        **kwargs: passed to ``pandas.read_csv``.

    Examples:
        >>> import io
        >>> import tensorbatch
        >>> td = tensorbatch.from_csv(io.StringIO("a,b.c\n1,x\n2,y\n"), separator=".")
        >>> td["a"], td["b", "c"]
        (tensor([1, 2]), ['x', 'y'])
    """
    import pandas as pd

    return from_pandas(pd.read_csv(path, **kwargs), cls=cls, device=device, batch_size=batch_size,
                       separator=separator, dtype=dtype, auto_batch_size=auto_batch_size, batch_dims=batch_dims)


def from_json(path: Any, *, auto_batch_size: bool = False, batch_dims: int | None = None, device: Any = None,
              batch_size: Any = None, separator: str | None = None, dtype: torch.dtype | None = None,
              lines: bool = False, cls: type = TensorDictBase, **kwargs: Any) -> Any:
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
        **kwargs: passed to ``pandas.read_json``.

    Examples:
        >>> import io
        >>> import tensorbatch
        >>> tensorbatch.from_json(io.StringIO('[{"a": 1.5}, {"a": 2.5}]'))["a"]
        tensor([1.5000, 2.5000], dtype=torch.float64)
    """
    import pandas as pd

    kwargs.setdefault("orient", "records")
    text = path.read() if hasattr(path, "read") else None
    if text is not None:
        import io

        path = io.StringIO(text if isinstance(text, str) else text.decode())
    frame = pd.read_json(path, lines=lines, **kwargs)
    return from_pandas(frame, cls=cls, device=device, batch_size=batch_size, separator=separator, dtype=dtype,
                       auto_batch_size=auto_batch_size, batch_dims=batch_dims)


# ------------------------------------------------------------------------------------ TensorDict -> columns
def _columns(td: Any, separator: str | None) -> dict[Any, Any]:
    """``name -> numpy array or list`` for every leaf, all checked before anything is converted."""
    if td.batch_dims != 1:
        raise ValueError(f"a table needs exactly one batch dim (one row per element), got batch_size "
                         f"{list(td.batch_size)}: call td.reshape(-1) first")
    rows = td.batch_size[0]
    leaves = named_leaves(td, is_leaf=is_non_tensor_type)
    out: dict[Any, Any] = {}
    for path, value in leaves:
        if len(path) > 1 and separator is None:
            raise ValueError(f"the key {path!r} is nested: pass separator= (e.g. '.') to name its column")
        name = separator.join(path) if separator is not None else path[0]
        if name in out:
            raise ValueError(f"two keys become the column {name!r} with separator {separator!r}")
        if isinstance(value, torch.Tensor) and value.dim() != 1:
            raise ValueError(f"the entry {path!r} has shape {list(value.shape)}: a column holds one value "
                             f"per row (flatten its trailing dims into separate keys first)")
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            raise TypeError(f"the entry {path!r} is bfloat16, which numpy and Arrow cannot hold: cast it first")
        out[name] = value
    for name, value in out.items():
        if isinstance(value, torch.Tensor):
            out[name] = value.detach().cpu().numpy()
        elif isinstance(value, NonTensorDataBase):
            out[name] = [value.data] * rows
        else:
            out[name] = value.tolist()
    return out


def to_pandas(td: Any, *, separator: str | None = None) -> Any:
    """A pandas DataFrame with one row per batch element and one column per leaf.

    Args:
        td: a TensorDict with one batch dim.
        separator: join nested keys with it into column names (required when ``td`` has nested keys).

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

    return pd.DataFrame(_columns(td, separator))


def to_arrow(td: Any, *, separator: str | None = None) -> Any:
    """A ``pyarrow.Table`` with one row per batch element and one column per leaf (as :func:`to_pandas`).

    Examples:
        >>> import torch
        >>> from tensorbatch import TensorDict
        >>> TensorDict(a=torch.arange(2), batch_size=[2]).to_arrow().to_pydict()
        {'a': [0, 1]}
    """
    import pyarrow as pa

    return pa.table(_columns(td, separator))


def to_parquet(td: Any, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
    """Write ``td`` to a Parquet file (a path or a binary file object), one column per leaf.

    ``kwargs`` go to ``pyarrow.parquet.write_table``. See :func:`from_parquet` for an example.
    """
    import pyarrow.parquet as pq

    pq.write_table(to_arrow(td, separator=separator), path, **kwargs)


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
        parameters=[inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params])
    return classmethod(method)


def install(cls: type) -> None:
    """Attach ``from_*`` (classmethods) and ``to_*`` (methods) to ``cls``."""
    for fn in (from_pandas, from_csv, from_parquet, from_json, from_arrow):
        setattr(cls, fn.__name__, _classmethod(fn))
    for method in (to_pandas, to_csv, to_parquet, to_json, to_arrow):
        setattr(cls, method.__name__, method)


install(TensorDictBase)  # base.py imports no feature: the feature attaches itself
