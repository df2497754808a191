"""Differential tests, tables: pandas, Arrow, Parquet, CSV and JSON give tensordict 0.15.3's results.

Each case builds the same DataFrame, Arrow table or file, reads it with both libraries and compares a
summary of every leaf: its kind (tensor, jagged tensor, non-tensor), dtype, shape and values (NaN equal to
NaN), or the error type. One difference is allowed everywhere and pinned in tests/test_tabular.py: a string
or object column read through pandas is one ``NonTensorData`` holding the whole array in tensordict, a
``NonTensorStack`` with one value per row here; the summary compares the values row by row
(missing values as None) and leaves the type to that strict xfail.
"""

from __future__ import annotations

import datetime
import math
import warnings
from typing import Any

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.differential


def _value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(v, (np.datetime64, np.timedelta64)) and np.isnat(v):
        return None
    if isinstance(v, torch.Tensor):
        return ("tensor", str(v.dtype), v.tolist())
    return v


def summary(lib: Any, td: Any) -> dict[Any, Any]:
    """``key -> (kind, dtype, shape, values)`` for every leaf of ``td``, and its batch size."""
    out: dict[Any, Any] = {"batch_size": list(td.batch_size), "class": type(td).__name__}
    for key in td.keys(
        True, True, is_leaf=lambda c: issubclass(c, (torch.Tensor, lib.NonTensorData, lib.NonTensorStack))
    ):
        v = td.get(key)
        if isinstance(v, torch.Tensor) and v.is_nested:
            out[key] = ("jagged", str(v.dtype), [t.nan_to_num(nan=-0.5).tolist() for t in v.unbind(0)])
        elif isinstance(v, torch.Tensor):
            values = v.double().nan_to_num(nan=-0.5).tolist() if v.is_floating_point() else v.tolist()
            out[key] = ("tensor", str(v.dtype), list(v.shape), values)
        elif (
            isinstance(v, lib.NonTensorData)
            and isinstance(v.data, np.ndarray)
            and v.data.ndim == 1
            and v.data.shape[0] == td.batch_size[0]
        ):
            out[key] = ("values", [_value(x) for x in v.data])  # tensordict: the whole column in one object
        else:
            out[key] = ("values", [_value(x) for x in v.tolist()])
    return out


def both(ref: Any, tb: Any, fn: Any) -> tuple[Any, Any]:
    """``fn(lib)`` on both libraries: the summaries, or the error types."""
    results = []
    for lib in (ref, tb):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                results.append(summary(lib, fn(lib)))
            except Exception as e:  # the error type is the result compared
                results.append(("raises", type(e).__name__))
    return results[0], results[1]


FRAMES = {
    "datetime": lambda: pd.DataFrame({"c": pd.to_datetime(["2020-01-01", "2021-06-01 12:00"], format="ISO8601")}),
    "datetime_nat": lambda: pd.DataFrame({"c": pd.to_datetime(["2020-01-01", None])}),
    "datetime_s": lambda: pd.DataFrame({"c": np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[s]")}),
    "datetime_tz": lambda: pd.DataFrame({"c": pd.to_datetime(["2020-01-01", "2021-01-01"]).tz_localize("UTC")}),
    "timedelta": lambda: pd.DataFrame({"c": pd.to_timedelta([1, 2], unit="s")}),
    "timedelta_nat": lambda: pd.DataFrame({"c": pd.to_timedelta([1, None], unit="s")}),
    "categorical": lambda: pd.DataFrame({"c": pd.Categorical(["lo", "hi", None, "lo"])}),
    "categorical_ints": lambda: pd.DataFrame({"c": pd.Categorical([3, 1, 3])}),
    "categorical_wide": lambda: pd.DataFrame({"c": pd.Categorical([f"v{i}" for i in range(300)])}),
    "Int64": lambda: pd.DataFrame({"c": pd.array([1, 2], dtype="Int64")}),
    "Int64_missing": lambda: pd.DataFrame({"c": pd.array([1, None], dtype="Int64")}),
    "UInt8": lambda: pd.DataFrame({"c": pd.array([1, 2], dtype="UInt8")}),
    "Float64_missing": lambda: pd.DataFrame({"c": pd.array([1.5, None], dtype="Float64")}),
    "boolean": lambda: pd.DataFrame({"c": pd.array([True, False], dtype="boolean")}),
    "boolean_missing": lambda: pd.DataFrame({"c": pd.array([True, None], dtype="boolean")}),
    "string_python": lambda: pd.DataFrame({"c": pd.array(["a", "b"], dtype="string[python]")}),
    "string_python_missing": lambda: pd.DataFrame({"c": pd.array(["a", None], dtype="string[python]")}),
    "string_pyarrow_missing": lambda: pd.DataFrame({"c": pd.array(["a", None], dtype="string[pyarrow]")}),
    "str_default": lambda: pd.DataFrame({"c": ["a", "b"]}),
    "object_mixed": lambda: pd.DataFrame({"c": pd.Series([1, "x", 2.5, None], dtype=object)}),
    "object_ints": lambda: pd.DataFrame({"c": pd.Series([1, 2], dtype=object)}),
    "int_pyarrow_missing": lambda: pd.DataFrame({"c": pd.array([1, None], dtype="int64[pyarrow]")}),
    "period": lambda: pd.DataFrame({"c": pd.period_range("2020", periods=2, freq="D")}),
    "numbers": lambda: pd.DataFrame(
        {"a": np.arange(3, dtype=np.int16), "b.c": [0.5, np.nan, 2.0], "d": [True, False, True]}
    ),
}


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_from_pandas(ref, tb, name):
    frame = FRAMES[name]()
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_pandas(frame, separator="."))
    assert got == expected


@pytest.mark.parametrize("name", ["numbers", "categorical", "datetime", "Int64"])
def test_from_pandas_dtype_cast(ref, tb, name):
    frame = FRAMES[name]()
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_pandas(frame, dtype=torch.float32))
    assert got == expected


TABLES = {
    "numbers": lambda: pa.table(
        {
            "i": pa.array([1, 2, 3], pa.int32()),
            "f": [0.5, 1.5, 2.5],
            "u": pa.array([1, 2, 3], pa.uint16()),
            "b": [True, False, True],
        }
    ),
    "int_null": lambda: pa.table({"c": pa.array([1, None, 3], pa.int32())}),
    "uint_null": lambda: pa.table({"c": pa.array([1, None], pa.uint32())}),
    "float_null": lambda: pa.table({"c": pa.array([1.5, None])}),
    "bool_null": lambda: pa.table({"c": pa.array([True, None])}),
    "string": lambda: pa.table({"c": ["a", "b", "a"]}),
    "string_null": lambda: pa.table({"c": pa.array(["a", None])}),
    "timestamp": lambda: pa.table({"c": pa.array([0, 1000], pa.timestamp("us"))}),
    "timestamp_null": lambda: pa.table({"c": pa.array([0, None], pa.timestamp("us"))}),
    "timestamp_tz": lambda: pa.table({"c": pa.array([0, 1000], pa.timestamp("us", tz="UTC"))}),
    "duration": lambda: pa.table({"c": pa.array([0, 1000], pa.duration("us"))}),
    "date_null": lambda: pa.table({"c": pa.array([datetime.date(2020, 1, 1), None])}),
    "dictionary": lambda: pa.table({"c": pa.array(["u", "v", "u"]).dictionary_encode()}),
    "dictionary_ints": lambda: pa.table({"c": pa.array([5, 6, 5]).dictionary_encode()}),
    "dictionary_null": lambda: pa.table({"c": pa.array(["u", None, "u"]).dictionary_encode()}),
    "list": lambda: pa.table({"c": pa.array([[1, 2], [3], []])}),
    "list_float": lambda: pa.table({"c": pa.array([[1.5], [2.5, 3.5]], pa.large_list(pa.float32()))}),
    "list_null": lambda: pa.table({"c": pa.array([[1, 2], None, [3]])}),
    "list_inner_null": lambda: pa.table({"c": pa.array([[1.0, None], [3.0]])}),
    "list_strings": lambda: pa.table({"c": pa.array([["a"], ["b", "c"]])}),
    "list_of_lists": lambda: pa.table({"c": pa.array([[[1], [2, 3]], [[4]]])}),
    "fixed_size_list": lambda: pa.table({"c": pa.array([[1, 2], [3, 4]], pa.list_(pa.int64(), 2))}),
    "fixed_size_list_null": lambda: pa.table({"c": pa.array([[1.0, 2.0], None], pa.list_(pa.float64(), 2))}),
    "fixed_shape_tensor": lambda: pa.table(
        {"c": pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(12, dtype=np.float32).reshape(2, 3, 2))}
    ),
    "struct": lambda: pa.table({"c": pa.array([{"x": 1, "y": "a"}, {"x": 2, "y": "b"}])}),
    "struct_nested": lambda: pa.table({"c": pa.array([{"x": {"z": 1.0}}, {"x": {"z": 2.0}}])}),
    "struct_null": lambda: pa.table({"c": pa.array([{"x": 1.0}, None])}),
    "binary": lambda: pa.table({"c": pa.array([b"a", b"b"])}),
    "chunked": lambda: pa.Table.from_batches([pa.record_batch({"c": [1.0, 2.0]}), pa.record_batch({"c": [3.0]})]),
    "empty": lambda: pa.table({"c": pa.array([], pa.float64()), "s": pa.array([], pa.string())}),
}


@pytest.mark.parametrize("nulls", ["raise", "fill", "mask"])
@pytest.mark.parametrize("name", sorted(TABLES))
def test_from_arrow(ref, tb, name, nulls):
    table = TABLES[name]()
    expected, got = both(ref, tb, lambda lib: lib.from_arrow(table, nulls=nulls))
    assert got == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nulls": "mask", "mask_key": ("m", "k")},
        {"nulls": "mask", "mask_key": "valid"},
        {"nulls": "fill", "mask_key": "m"},
        {"nulls": "drop"},
        {"nulls": "mask", "mask_key": ()},
        {"nulls": "mask", "mask_key": 3},
        {"copy": True},
        {"copy": False},
    ],
)
def test_from_arrow_options(ref, tb, kwargs):
    table = pa.table({"c": pa.array([1.0, None]), "s": pa.array([{"x": 1}, None])})
    expected, got = both(ref, tb, lambda lib: lib.from_arrow(table, **kwargs))
    assert got == expected


def test_from_arrow_mask_key_that_is_a_column(ref, tb):
    table = pa.table({"_mask": [1.0, None]})
    expected, got = both(ref, tb, lambda lib: lib.from_arrow(table, nulls="mask"))
    assert got == expected == ("raises", "ValueError")


def test_from_arrow_copy_views_or_copies(tb):
    table = pa.table({"c": np.arange(4, dtype=np.float64)})
    address = table.column("c").chunk(0).buffers()[1].address
    assert tb.from_arrow(table)["c"].data_ptr() == address
    assert tb.from_arrow(table, copy=True)["c"].data_ptr() != address


@pytest.mark.parametrize("name", sorted(set(TABLES) - {"list_inner_null", "list_of_lists"}))
def test_from_parquet(ref, tb, name, tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(TABLES[name](), path)
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_parquet(path))
    if name == "list_strings":  # tensordict's batch size [2, -1] for a column of lists of strings (see README)
        expected["c"] = got["c"]
    if name == "empty":  # tensordict: an empty string column is a float32 tensor
        expected["s"] = got["s"]
    assert got == expected


def test_from_parquet_options(ref, tb, tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(TABLES["numbers"](), path)
    for kwargs in (
        {"columns": ["i", "b"]},
        {"dtype": torch.float16},
        {"auto_batch_size": True},
        {"batch_size": [3]},
        {"auto_batch_size": True, "batch_size": [3]},
    ):
        expected, got = both(ref, tb, lambda lib, kw=kwargs: lib.TensorDict.from_parquet(path, **kw))
        assert got == expected, kwargs


CSV = "a,b.c,t,s,k\n1,0.5,2020-01-01,x,lo\n2,,2021-01-01,,hi\n3,2.5,2022-01-01,z,lo\n"


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"separator": "."},
        {"parse_dates": ["t"]},
        {"dtype": {"k": "category"}},
        {"usecols": ["a", "s"]},
        {"sep": ";"},
        {"dtype": torch.float32},
    ],
)
def test_from_csv(ref, tb, tmp_path, kwargs):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_csv(path, **kwargs))
    assert got == expected


JSON = '[{"a": 1, "b": 0.5, "s": "x", "date": "2020-01-01"}, {"a": 2, "b": null, "s": null, "date": "2021-01-01"}]'


@pytest.mark.parametrize("kwargs", [{}, {"convert_dates": False}, {"dtype": {"a": "float32"}}])
def test_from_json(ref, tb, tmp_path, kwargs):
    path = tmp_path / "t.json"
    path.write_text(JSON)
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_json(path, **kwargs))
    assert got == expected


def test_from_json_lines_and_columns_orient(ref, tb, tmp_path):
    (tmp_path / "l.jsonl").write_text('{"a": 1, "s": "x"}\n{"a": 2, "s": "y"}\n')
    (tmp_path / "c.json").write_text('{"a": {"0": 1, "1": 2}, "b": {"0": 0.5, "1": 1.5}}')
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_json(tmp_path / "l.jsonl", lines=True))
    assert got == expected
    expected, got = both(ref, tb, lambda lib: lib.TensorDict.from_json(tmp_path / "c.json"))
    assert got == expected


# ------------------------------------------------------------------------------------ writers
def _td(lib: Any) -> Any:
    return lib.TensorDict(
        a=torch.arange(3),
        f=torch.tensor([0.5, float("nan"), 2.0]),
        b=torch.tensor([True, False, True]),
        s=lib.NonTensorStack("x", "y", "z"),
        obs=lib.TensorDict(x=torch.arange(3, dtype=torch.float32), batch_size=[3]),
        batch_size=[3],
    )


def test_to_pandas(ref, tb):
    a, b = _td(ref).to_pandas(separator="."), _td(tb).to_pandas(separator=".")
    pd.testing.assert_frame_equal(a, b)
    expected, got = both(ref, tb, lambda lib: _td(lib).to_pandas())
    assert expected == got == ("raises", "ValueError")


_POINTS: dict[str, Any] = {}


def _with_point(lib: Any) -> Any:
    """A TensorDict holding a TensorClass (made once per library) and a tensor."""
    if lib.__name__ not in _POINTS:

        @lib.tensorclass  # (tensordict 0.15.3 gives the object column for this form; a TensorClass subclass raises)
        class Point:
            x: torch.Tensor
            y: torch.Tensor

        _POINTS[lib.__name__] = Point
    point = _POINTS[lib.__name__](x=torch.arange(3.0), y=torch.ones(3), batch_size=[3])
    return lib.TensorDict(p=point, a=torch.arange(3), batch_size=[3])


def test_to_pandas_tensorclass_column(ref, tb):
    # without a separator a TensorClass is one object column of its elements; with one, a column per field
    for lib in (ref, tb):
        df = _with_point(lib).to_pandas()
        assert list(df.columns) == ["p", "a"] and str(df["p"].dtype) == "object", lib.__name__
        assert [type(v).__name__ for v in df["p"]] == ["Point"] * 3, lib.__name__
        assert [(v.batch_size, v.x.item(), v.y.item()) for v in df["p"]] == [(torch.Size([]), i, 1.0) for i in range(3)]
        assert df["a"].tolist() == [0, 1, 2]
    a, b = _with_point(ref).to_pandas(separator="."), _with_point(tb).to_pandas(separator=".")
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_writers_write_the_same_file(ref, tb, fmt, tmp_path):
    getattr(_td(ref), f"to_{fmt}")(tmp_path / f"r.{fmt}", separator=".")
    getattr(_td(tb), f"to_{fmt}")(tmp_path / f"o.{fmt}", separator=".")
    if fmt == "parquet":
        a, b = pq.read_table(tmp_path / "r.parquet").to_pandas(), pq.read_table(tmp_path / "o.parquet").to_pandas()
        pd.testing.assert_frame_equal(a, b)
    else:
        assert (tmp_path / f"r.{fmt}").read_text() == (tmp_path / f"o.{fmt}").read_text()
    expected, got = both(
        ref,
        tb,
        lambda lib: (
            lib.TensorDict.from_json(tmp_path / "r.json")
            if fmt == "json"
            else getattr(lib.TensorDict, f"from_{fmt}")(tmp_path / f"r.{fmt}")
        ),
    )
    assert got == expected


def _rich(lib: Any) -> Any:
    return lib.TensorDict(
        a=torch.arange(3),
        img=torch.arange(18, dtype=torch.float32).reshape(3, 3, 2),
        ids=torch.nested.nested_tensor_from_jagged(torch.arange(6), torch.tensor([0, 2, 3, 6])),
        s=lib.NonTensorStack("x", "y", "z"),
        obs=lib.TensorDict(x=torch.zeros(3), batch_size=[3]),
        empty=lib.TensorDict(batch_size=[3]),
        batch_size=[3],
    )


def test_to_arrow(ref, tb):
    a, b = ref.to_arrow(_rich(ref)), tb.to_arrow(_rich(tb))
    assert a.schema == b.schema
    assert a.equals(b)
    expected, got = both(ref, tb, lambda lib: lib.from_arrow(lib.to_arrow(_rich(lib))))
    assert got == expected


@pytest.mark.parametrize("bad", ["two_batch_dims", "ragged_dim_2", "strided_nested"])
def test_to_arrow_errors(ref, tb, bad):
    def make(lib: Any) -> Any:
        if bad == "two_batch_dims":
            td = lib.TensorDict(a=torch.zeros(2, 2), batch_size=[2, 2])
        elif bad == "ragged_dim_2":
            nt = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(2, 4)], layout=torch.jagged)
            td = lib.TensorDict(a=nt.transpose(1, 2).transpose(1, 2), batch_size=[2])
            td = lib.TensorDict(a=nt.transpose(1, 2), batch_size=[2])
        else:
            td = lib.TensorDict(a=torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]), batch_size=[2])
        return lib.to_arrow(td)

    results = []
    for lib in (ref, tb):
        try:
            make(lib)
            results.append("ok")
        except Exception as e:  # the error type is the result compared
            results.append(type(e).__name__)
    assert results[0] == results[1]


def test_to_arrow_nested_tensorclass(ref, tb):
    tables = []
    for lib in (ref, tb):

        class Point(lib.TensorClass):
            x: torch.Tensor
            y: torch.Tensor

        point = Point(x=torch.zeros(2), y=torch.arange(2), batch_size=[2])
        tables.append(lib.to_arrow(lib.TensorDict(p=point, batch_size=[2])))
    assert tables[0].equals(tables[1])
    assert str(tables[1].schema.field("p").type) == "struct<x: float, y: int64>"
