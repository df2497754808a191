"""Tabular import/export (tensorbatch/tabular.py): round trips, dtypes, strings, nesting, bad input."""

import datetime
import io
import math

import numpy as np
import pytest
import torch

import tensorbatch
from tensorbatch import TensorClass, TensorDict

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyarrow.parquet")


def _parquet(table):
    buf = io.BytesIO()
    pa.parquet.write_table(table, buf)
    buf.seek(0)
    return buf


DTYPES = [
    torch.bool,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.float16,
    torch.float32,
    torch.float64,
]
FORMATS = ["pandas", "arrow", "parquet", "csv", "json"]


def _sample(n: int = 4) -> TensorDict:
    return TensorDict(
        {
            "f": torch.tensor([0.5, float("nan"), -1.25, 3.0])[:n],
            "i": torch.arange(n),
            "b": torch.arange(n) % 2 == 0,
            "s": tensorbatch.NonTensorStack(*[f"row{k}" for k in range(n)]) if n else None,
            "obs": {"x": torch.arange(n, dtype=torch.float32), "y": {"z": torch.arange(n, dtype=torch.int16)}},
        }
        if n
        else {"f": torch.zeros(0), "obs": {"x": torch.zeros(0)}},
        batch_size=[n],
    )


def _round_trip(td: TensorDict, fmt: str, tmp_path, sep="."):
    if fmt == "pandas":
        return TensorDict.from_pandas(td.to_pandas(separator=sep), separator=sep)
    if fmt == "arrow":
        return tensorbatch.from_arrow(td.to_arrow(separator=sep), separator=sep)
    path = tmp_path / f"t.{fmt}"
    getattr(td, f"to_{fmt}")(path, separator=sep)
    return getattr(TensorDict, f"from_{fmt}")(path, separator=sep)


def _assert_same(a, b, exact_dtype=True):
    assert a.batch_size == b.batch_size
    assert sorted(a.keys(True, True), key=str) == sorted(b.keys(True, True), key=str)
    for key in a.keys(True, True):
        x, y = a.get(key), b.get(key)
        if isinstance(x, torch.Tensor):
            if exact_dtype:
                assert x.dtype == y.dtype, key
            torch.testing.assert_close(x, y.to(x.dtype), equal_nan=True, msg=str(key))
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_values_strings_nan_nested(fmt, tmp_path):
    td = _sample()
    back = _round_trip(td, fmt, tmp_path)
    # text formats cannot tell an int16/float32 column from int64/float64: values hold, widths do not
    _assert_same(td, back, exact_dtype=fmt in ("pandas", "arrow", "parquet"))
    assert back["s"] == ["row0", "row1", "row2", "row3"]
    assert back[2]["s"] == "row2"
    assert math.isnan(back["f"][1].item())


@pytest.mark.parametrize("fmt", ["pandas", "arrow", "parquet"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_keeps_dtype(fmt, dtype, tmp_path):
    if dtype == torch.float16 and fmt == "parquet":
        pytest.importorskip("pyarrow", minversion="15")
    values = torch.tensor([0, 1, 1, 0, 5, 127]).to(dtype)
    back = _round_trip(TensorDict(v=values, batch_size=[6]), fmt, tmp_path)
    assert back["v"].dtype == dtype
    assert torch.equal(back["v"], values)


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float64])
def test_text_formats_keep_the_widest_dtypes(fmt, dtype, tmp_path):
    values = torch.tensor([0, 1, 1, 0]).to(dtype)
    if dtype.is_floating_point:
        values = values + 0.5
    back = _round_trip(TensorDict(v=values, batch_size=[4]), fmt, tmp_path)
    assert back["v"].dtype == dtype
    assert torch.equal(back["v"], values)
    # (JSON writes 1.0 as 1.0 but pandas reads an all-integral float column as int64: a known pandas limit)


@pytest.mark.parametrize("fmt", ["pandas", "arrow", "parquet", "csv", "json"])
def test_empty_table(fmt, tmp_path):
    td = TensorDict(a=torch.zeros(0), b=torch.zeros(0, dtype=torch.int64), batch_size=[0])
    back = _round_trip(td, fmt, tmp_path)
    assert back.batch_size == torch.Size([0])
    if fmt == "json":  # an empty array of records names no fields
        assert set(back.keys()) == set()
        return
    assert set(back.keys()) == {"a", "b"}
    assert back["a"].shape == (0,)
    assert back["a"].dtype == torch.float32 or fmt == "csv"  # CSV has no types, and no rows to guess from


def test_file_objects():
    td = _sample()
    for fmt, buf in (("csv", io.StringIO()), ("json", io.StringIO()), ("parquet", io.BytesIO())):
        getattr(td, f"to_{fmt}")(buf, separator=".")
        buf.seek(0)
        back = getattr(tensorbatch, f"from_{fmt}")(buf, separator=".")
        _assert_same(td, back, exact_dtype=fmt == "parquet")


def test_json_lines(tmp_path):
    td = TensorDict(a=torch.arange(3), s=tensorbatch.NonTensorStack("x", "y", "z"), batch_size=[3])
    td.to_json(tmp_path / "d.jsonl", lines=True)
    assert (tmp_path / "d.jsonl").read_text().splitlines()[1] == '{"a":1,"s":"y"}'
    back = TensorDict.from_json(tmp_path / "d.jsonl", lines=True)
    assert torch.equal(back["a"], td["a"])
    assert back["s"] == ["x", "y", "z"]


def test_csv_text_and_nested_column_names(tmp_path):
    td = TensorDict(a=torch.arange(2), b=TensorDict(c=torch.tensor([0.5, 1.5]), batch_size=[2]), batch_size=[2])
    td.to_csv(tmp_path / "d.csv", separator="/")
    assert (tmp_path / "d.csv").read_text() == "a,b/c\n0,0.5\n1,1.5\n"


def test_categorical_and_missing_strings():
    df = pd.DataFrame({"c": pd.Categorical(["lo", "hi", "lo"]), "s": ["a", None, "c"]})
    td = tensorbatch.from_pandas(df)  # tensordict's: the codes
    assert torch.equal(td["c"], torch.tensor([1, 0, 1], dtype=torch.int8))
    assert td["s"] == ["a", None, "c"]
    assert td.batch_size == torch.Size([3])
    td = tensorbatch.from_pandas(df, categorical="values")
    assert td["c"] == ["lo", "hi", "lo"]
    with pytest.raises(ValueError, match="categorical must be 'codes' or 'values', got 'labels'"):
        tensorbatch.from_pandas(df, categorical="labels")
    out = td.to_pandas()
    assert out["c"].tolist() == ["lo", "hi", "lo"]


def test_pandas_datetimes_durations_and_objects():
    df = pd.DataFrame(
        {
            "t": pd.to_datetime(["1970-01-01 00:00:01", None]),
            "d": pd.to_timedelta([1, None], unit="s"),
            "o": pd.Series([1, None], dtype=object),
            "n": pd.array([True, None], dtype="boolean"),
        }
    )
    td = tensorbatch.from_pandas(df, dtype=torch.float32)
    assert td["t"].dtype == torch.int64  # int64 nanoseconds, never cast
    assert td["t"].tolist() == [1_000_000_000, torch.iinfo(torch.int64).min]
    assert td["d"] == [np.timedelta64(1, "s"), None]
    assert td["o"] == [1, None]
    assert td["n"] == [True, None]
    assert td[0]["o"] == 1


def test_arrow_dictionary_and_timestamps():
    table = pa.table(
        {
            "d": pa.array(["u", "v", "u"]).dictionary_encode(),
            "t": pa.array([0, 1_000, 2_000], type=pa.timestamp("us")),
        }
    )
    td = tensorbatch.from_arrow(table)
    assert td["d"] == ["u", "v", "u"]
    assert td["t"][1] == datetime.datetime(1970, 1, 1, 0, 0, 0, 1000)  # Python datetimes, as tensordict's
    path_td = tensorbatch.from_parquet(_parquet(table))
    assert path_td["t"].tolist() == [0, 1_000_000, 2_000_000]  # from_parquet: int64 nanoseconds, as tensordict's


def test_repeated_strings_are_built_once_per_distinct_value(tmp_path):
    # 5,000 rows of 3 labels and missing values, in 4 chunks: Arrow encodes them, the stack keeps 3 values + None
    labels = ["x", "y", None, "z", "y"] * 1000
    table = pa.Table.from_batches([pa.record_batch({"s": labels[i : i + 1250]}) for i in range(0, 5000, 1250)])
    td = tensorbatch.from_arrow(table, nulls="fill")
    assert td["s"] == labels
    assert sorted(td._get_str("s")._items, key=str) == [None, "x", "y", "z"]
    assert td[3:7]["s"] == ["z", "y", "x", "y"]
    path = tmp_path / "t.parquet"
    td.to_parquet(path)
    assert tensorbatch.from_parquet(path)["s"] == labels


def test_distinct_strings_stay_one_per_row():
    labels = [f"row{i}" if i % 7 else None for i in range(5000)]
    td = tensorbatch.from_arrow(pa.table({"s": labels}), nulls="fill")
    assert td["s"] == labels
    assert len(td._get_str("s")._items) == 5000  # not encoded: no repeats in the sample


def test_arrow_dictionary_chunks_with_different_dictionaries():
    chunks = [pa.array(["u", "v", None]).dictionary_encode(), pa.array(["w", "u"]).dictionary_encode()]
    td = tensorbatch.from_arrow(pa.table({"d": pa.chunked_array(chunks)}), nulls="fill")
    assert td["d"] == ["u", "v", None, "w", "u"]
    assert tensorbatch.from_arrow(pa.table({"n": pa.array([1, 2, 1]).dictionary_encode()}))["n"] == [1, 2, 1]


def test_multi_level_columns_are_nested_keys():
    df = pd.DataFrame([[1, 2.0, 3]], columns=pd.MultiIndex.from_tuples([("obs", "x"), ("obs", "y"), ("r", "")]))
    td = tensorbatch.from_pandas(df)
    assert td["obs", "x"].tolist() == [1]
    assert td["obs", "y"].tolist() == [2.0]
    assert td["r"].tolist() == [3]


def test_arrow_read_is_zero_copy():
    table = pa.table({"a": np.arange(5, dtype=np.float32)})
    td = tensorbatch.from_arrow(table)
    buf_address = table.column("a").chunk(0).buffers()[1].address
    assert td["a"].data_ptr() == buf_address


def test_dtype_device_and_batch_size_arguments():
    df = pd.DataFrame({"a": [1, 2, 3, 4], "b": [1.0, 2.0, 3.0, 4.0]})
    td = tensorbatch.from_pandas(df, dtype=torch.float32, device="cpu")
    assert td["a"].dtype == td["b"].dtype == torch.float32
    assert td.device == torch.device("cpu")
    with pytest.raises(TypeError, match="auto_batch_size and batch_size"):
        tensorbatch.from_pandas(df, auto_batch_size=True, batch_size=[4])


def test_tensorclass_delegates():
    class Row(TensorClass):
        x: torch.Tensor
        y: torch.Tensor

    row = Row(x=torch.arange(3), y=torch.ones(3), batch_size=[3])
    df = row.to_pandas()
    assert list(df.columns) == ["x", "y"]
    assert df["x"].tolist() == [0, 1, 2]
    assert torch.equal(Row.from_pandas(df)["y"], torch.ones(3))


# ----------------------------------------------------------------------------------- bad input
def test_object_column_of_mixed_values_is_one_value_per_row():
    marker = object()
    td = tensorbatch.from_pandas(pd.DataFrame({"ok": [1, 2], "mixed": [marker, "x"]}))
    assert td["mixed"] == [marker, "x"]
    assert td[1]["mixed"] == "x"


def test_duplicate_and_colliding_columns_name_them():
    df = pd.DataFrame([[1, 2]], columns=["a", "a"])
    with pytest.raises(ValueError, match="column 'a' appears more than once"):
        tensorbatch.from_pandas(df)
    df = pd.DataFrame({"a": [1], "a.b": [2]})
    with pytest.raises(ValueError, match=r"columns 'a' and 'a.b' both map"):
        tensorbatch.from_pandas(df, separator=".")
    td = TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.zeros(1)}}, batch_size=[1])
    with pytest.raises(ValueError, match=r"two keys become the column 'a.b'"):
        td.to_pandas(separator=".")


def test_ragged_csv_names_the_problem(tmp_path):
    (tmp_path / "r.csv").write_text("a,b\n1,2\n3,4,5,6\n")
    with pytest.raises(Exception, match="Expected 2 fields"):
        tensorbatch.from_csv(tmp_path / "r.csv")


def test_export_errors_name_the_key():
    with pytest.raises(ValueError, match=r"\('obs', 'x'\) is nested: pass separator="):
        TensorDict(obs={"x": torch.zeros(2)}, batch_size=[2]).to_pandas()
    with pytest.raises(ValueError, match=r"the entry \('v',\) has shape \[2, 3\]"):
        TensorDict(v=torch.zeros(2, 3), batch_size=[2]).to_pandas()
    with pytest.raises(ValueError, match=r"exactly one batch dim.*\[2, 2\]"):
        TensorDict(v=torch.zeros(2, 2), batch_size=[2, 2]).to_pandas()
    with pytest.raises(TypeError, match=r"\('h',\) is bfloat16"):
        TensorDict(h=torch.zeros(2, dtype=torch.bfloat16), batch_size=[2]).to_pandas()


def test_arrow_nulls_raise_fill_or_mask():
    table = pa.table({"n": pa.array([1, None], type=pa.int32()), "s": pa.array([{"f": 1.0}, None])})
    with pytest.raises(ValueError, match=r"the Arrow column \('n',\) has 1 null value\(s\): pass nulls='fill'"):
        tensorbatch.from_arrow(table)
    td = tensorbatch.from_arrow(table, nulls="fill")
    assert td["n"].tolist() == [1, 0]
    assert math.isnan(td["s", "f"][1].item())
    td = tensorbatch.from_arrow(table, nulls="mask", mask_key=("m", "k"))
    assert td["m", "k", "n"].tolist() == [True, False]
    assert td["m", "k", "s", "f"].tolist() == [True, False]
    with pytest.raises(ValueError, match="nulls must be one of"):
        tensorbatch.from_arrow(table, nulls="drop")
    with pytest.raises(ValueError, match="got a mask_key but nulls='fill'"):
        tensorbatch.from_arrow(table, nulls="fill", mask_key="m")
    with pytest.raises(TypeError, match="mask_key must be a string or a tuple of strings, got 3"):
        tensorbatch.from_arrow(table, nulls="mask", mask_key=3)


def test_arrow_lists_structs_and_trailing_dims_round_trip():
    td = TensorDict(
        img=torch.arange(12.0).reshape(3, 2, 2),
        ids=torch.nested.nested_tensor_from_jagged(torch.arange(4), torch.tensor([0, 1, 1, 4])),
        obs=TensorDict(x=torch.arange(3), s=tensorbatch.NonTensorStack("a", "b", "c"), batch_size=[3]),
        batch_size=[3],
    )
    table = td.to_arrow()
    assert table.column("img").type.extension_name == "arrow.fixed_shape_tensor"
    assert str(table.column("ids").type) == "large_list<item: int64>"
    assert str(table.column("obs").type) == "struct<x: int64, s: string>"
    back = tensorbatch.from_arrow(table)
    assert torch.equal(back["img"], td["img"])
    assert [t.tolist() for t in back["ids"].unbind(0)] == [[0], [], [1, 2, 3]]
    assert back["obs", "s"] == ["a", "b", "c"]
    assert tensorbatch.from_arrow(td.to_arrow(separator="."), separator=".")["obs", "x"].tolist() == [0, 1, 2]


# ----------------------------------------------------------------------------------- differential
def test_matches_tensordict_on_numeric_tables(tmp_path):
    tensordict = pytest.importorskip("tensordict")
    df = pd.DataFrame({"a": np.arange(5, dtype=np.int32), "b.c": np.linspace(0, 1, 5), "d": [True, False] * 2 + [True]})
    ours = TensorDict.from_pandas(df, separator=".")
    ref = tensordict.TensorDict.from_pandas(df, separator=".")
    for key in ref.keys(True, True):
        assert ours[key].dtype == ref[key].dtype
        assert torch.equal(ours[key], ref[key])
    ours.to_parquet(tmp_path / "o.parquet", separator=".")
    ref_back = tensordict.TensorDict.from_parquet(tmp_path / "o.parquet", separator=".")
    for key in ref_back.keys(True, True):
        assert torch.equal(ours[key], ref_back[key])
    assert ours.to_pandas(separator=".").equals(ref.to_pandas(separator="."))


# ---------------------------------------------------------------- deliberate differences (README, "Tables")
# Each asserts tensordict 0.15.3's outcome on tensorbatch and is a strict xfail: it fails while we differ.
def _difference(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"deliberate difference (README 'Tables'): {reason}")


@_difference("a string column is a NonTensorStack, one value per row (tensordict: one NonTensorData of an array)")
def test_difference_string_column_is_one_value():
    td = tensorbatch.from_pandas(pd.DataFrame({"s": ["a", "b", "a"]}))
    assert isinstance(td.get("s"), tensorbatch.NonTensorData)


@_difference("from_parquet keeps a column of lists of lists (tensordict: RuntimeError, a crash)")
def test_difference_parquet_list_of_lists(tmp_path):
    path = tmp_path / "t.parquet"
    pa.parquet.write_table(pa.table({"c": [[[1], [2, 3]], [[4]]]}), path)
    with pytest.raises(RuntimeError):
        tensorbatch.from_parquet(path)


@_difference("from_parquet keeps a list column with a null inside (tensordict: RuntimeError, a crash)")
def test_difference_parquet_null_inside_a_list(tmp_path):
    path = tmp_path / "t.parquet"
    pa.parquet.write_table(pa.table({"c": [[1, None], [3]]}), path)
    with pytest.raises(RuntimeError):
        tensorbatch.from_parquet(path)


@_difference("from_parquet: lists of strings keep batch_size [N] (tensordict: [N, -1], a ragged non-tensor stack)")
def test_difference_parquet_lists_of_strings(tmp_path):
    path = tmp_path / "t.parquet"
    pa.parquet.write_table(pa.table({"c": [["a"], ["b", "c"]]}), path)
    assert tensorbatch.from_parquet(path)["c"].batch_size == torch.Size([2, -1])


@_difference("from_parquet: an empty string column stays a stack (tensordict: a float32 tensor, the type lost)")
def test_difference_parquet_empty_string_column(tmp_path):
    path = tmp_path / "t.parquet"
    pa.parquet.write_table(pa.table({"s": pa.array([], pa.string())}), path)
    assert tensorbatch.from_parquet(path)["s"].dtype == torch.float32
