"""Differential tests, HDF5 files: each library opens the other's files identically (tensordict 0.15.3 as oracle).

For every content case, built once per library from the same plain data:

* a file tensordict wrote (``PersistentTensorDict.from_dict`` or ``TensorDict.to_h5``) opens here with the
  same keys, values, dtypes and inferred batch sizes as in tensordict;
* a file written here opens in tensordict as tensordict's own file does, and holds the same groups and
  datasets (dtypes and values, read with h5py alone): our extra metadata lives in attributes only;
* ``from_h5`` options (``batch_size``, ``auto_batch_size``, ``batch_dims``) and ``from_dict`` options give the
  same batch sizes; indexing reads the same rows; writes through an index write the same bytes.

Deliberate differences are strict xfails (``difference``): unsorted or repeated row writes work here (last
write wins, as torch) where tensordict raises. What we keep and tensordict loses (batch size, dim names, nested
batch sizes, bfloat16 and float8) round-trips here (``ours_only``). ``TB_DIFF_SUBJECT=tensordict`` runs the
file against the reference itself (see ``_h5util``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ._h5util import assert_same_raw, difference, ours_only, quiet, raw_content, summary, tb, text

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")

ref = pytest.importorskip("tensordict", reason="tensordict (the reference, 0.15.3) is not installed")

pytestmark = pytest.mark.differential

H5_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128,
]  # fmt: skip


def _values(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    base = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape)
    if dtype == torch.bool:
        return base.remainder(3) == 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return (base.remainder(7) + 1).to(dtype)


# --------------------------------------------------------------------------------------------------
# Content: (plain data, batch size), turned into a TensorDict of either library
# --------------------------------------------------------------------------------------------------
CONTENT: dict[str, Callable[[], tuple[dict[str, Any], list[int]]]] = {
    "flat": lambda: ({"a": torch.arange(18.0).reshape(6, 3), "b": torch.arange(6),
                      "c": torch.arange(24).reshape(6, 4) % 3 == 0}, [6]),
    "dtypes": lambda: ({str(d).removeprefix("torch."): _values(d, (2, 3)) for d in H5_DTYPES}, [2]),
    "nested": lambda: ({
        "x": torch.arange(12.0).reshape(6, 2),
        "n": {"y": torch.arange(6, dtype=torch.int32), "deep": {"z": torch.rand(6, 1, 2, dtype=torch.float64)}},
    }, [6]),
    "strings": lambda: ({"a": torch.ones(3), "s": "hello", "n": {"t": "wörld", "b": torch.zeros(3, 2)}}, [3]),
    "batch2d": lambda: ({"a": torch.arange(60.0).reshape(4, 5, 3), "n": {"c": torch.arange(20).reshape(4, 5)}}, [4, 5]),
    "scalar_batch": lambda: ({"s": torch.tensor(3.5), "v": torch.arange(3)}, []),
    "empty_leaf": lambda: ({"a": torch.ones(0, 3), "b": torch.ones(0, dtype=torch.int64)}, [0]),
    "empty_nodes": lambda: ({"a": torch.zeros(2), "e": {}, "f": {"g": {}}}, [2]),
    "nan_inf": lambda: ({"x": torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])}, [4]),
}  # fmt: skip

WRITERS = {
    "from_dict": lambda lib, td, path: lib.PersistentTensorDict.from_dict(td, filename=str(path)),
    "to_h5": lambda lib, td, path: td.to_h5(str(path)),
}


def make(lib: Any, case: str, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    data, batch_size = CONTENT[case]()
    return lib.TensorDict(data, batch_size=batch_size, **kwargs)


def write(lib: Any, case: str, path: Path, writer: str = "from_dict") -> Path:
    out = quiet(lambda: WRITERS[writer](lib, make(lib, case), path))
    out.close()
    return path


def opened(lib: Any, path: Path, **kwargs: Any) -> dict[Any, Any]:
    """``summary`` of ``lib.from_h5(path, **kwargs)``, closing the file after."""
    ptd = quiet(lambda: lib.from_h5(str(path), **kwargs))
    try:
        assert type(ptd).__name__ == "PersistentTensorDict"
        return summary(ptd)
    finally:
        ptd.close()


def raw_with_dtypes(path: Path) -> dict[str, Any]:
    return {name: (value, getattr(value, "dtype", None)) for name, value in raw_content(path).items()}


# --------------------------------------------------------------------------------------------------
# Files travel both ways
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("case", list(CONTENT))
def test_reference_file_opens_here(tmp_path, case, writer):
    path = write(ref, case, tmp_path / "ref.h5", writer)
    assert opened(tb, path) == opened(ref, path)


@pytest.mark.parametrize("opener", ["module", "TensorDict", "PersistentTensorDict"])
def test_reference_file_opens_with_every_entry_point(tmp_path, opener):
    path = write(ref, "nested", tmp_path / "ref.h5")
    open_fn = {
        "module": tb.from_h5,
        "TensorDict": tb.TensorDict.from_h5,
        "PersistentTensorDict": tb.PersistentTensorDict.from_h5,
    }[opener]
    ptd = open_fn(str(path))
    try:
        assert type(ptd) is tb.PersistentTensorDict
        assert summary(ptd) == opened(ref, path)
    finally:
        ptd.close()


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("case", list(CONTENT))
def test_our_file_opens_in_reference(tmp_path, case, writer):
    ours = write(tb, case, tmp_path / "ours.h5", writer)
    theirs = write(ref, case, tmp_path / "ref.h5", writer)
    assert opened(ref, ours) == opened(ref, theirs)


@pytest.mark.parametrize("case", list(CONTENT))
def test_our_file_holds_the_same_datasets(tmp_path, case):
    ours = write(tb, case, tmp_path / "ours.h5")
    theirs = write(ref, case, tmp_path / "ref.h5")
    a, b = raw_with_dtypes(ours), raw_with_dtypes(theirs)
    assert {k: v[1] for k, v in a.items()} == {k: v[1] for k, v in b.items()}  # names and dtypes
    assert_same_raw(raw_content(ours), raw_content(theirs))


@ours_only
@pytest.mark.parametrize("case", ["nested", "strings"])
def test_our_file_opened_here_after_reference_edits_it(tmp_path, case):
    path = write(tb, case, tmp_path / "ours.h5")
    theirs = quiet(lambda: ref.from_h5(str(path), mode="r+"))
    quiet(lambda: theirs.set("added", torch.full((*tuple(theirs.batch_size), 2), 7.0)))
    theirs.close()
    ptd = tb.from_h5(str(path))
    try:
        assert torch.equal(ptd["added"], torch.full((*tuple(ptd.batch_size), 2), 7.0))
        expected = summary(make(tb, case))
        got = summary(ptd)
        del got[("added",)]
        assert got == expected
    finally:
        ptd.close()


@ours_only
@pytest.mark.parametrize("options", [{}, {"auto_batch_size": True}])
def test_deep_groups_get_their_own_batch_size(tmp_path, options):
    path = write(ref, "nested", tmp_path / "ref.h5")
    expected = make(tb, "nested")
    expected.batch_size = []
    expected.auto_batch_size_()  # root [6], n [6], n/deep [6, 1, 2]
    assert opened(tb, path, **options) == summary(expected)


@difference(
    "a node read by a tuple key (td['n', 'deep']) has its own batch size, as read node by node "
    "(tensordict gives it the root's when it inferred the batch sizes of the file)"
)
def test_deep_group_by_tuple_key_as_reference(tmp_path):
    path = write(ref, "nested", tmp_path / "ref.h5")
    sizes = []
    for lib in (ref, tb):
        with quiet(lambda lib=lib: lib.from_h5(str(path))) as ptd:
            sizes.append((tuple(ptd["n", "deep"].batch_size), tuple(ptd["n"]["deep"].batch_size)))
    assert sizes[0] == ((6,), (6, 1, 2))
    assert sizes[1] == sizes[0]


# --------------------------------------------------------------------------------------------------
# Batch sizes: from_h5 and from_dict options
# --------------------------------------------------------------------------------------------------
OPEN_OPTIONS = {
    "default": {},
    "batch_size": {"batch_size": [4]},
    "batch_size_2d": {"batch_size": [4, 5]},
    "batch_size_empty": {"batch_size": []},
    "auto": {"auto_batch_size": True},
    "auto_dims1": {"auto_batch_size": True, "batch_dims": 1},
    "auto_dims0": {"auto_batch_size": True, "batch_dims": 0},
    "non_tensor_as_stack": {"non_tensor_as_stack": True},
}


@pytest.mark.parametrize("case", ["batch2d", "nested", "strings"])
@pytest.mark.parametrize("options", list(OPEN_OPTIONS))
def test_from_h5_options(tmp_path, case, options):
    if case != "batch2d" and "batch_size" in OPEN_OPTIONS[options]:
        pytest.skip("batch sizes chosen for batch2d")
    path = write(ref, case, tmp_path / "ref.h5")
    assert opened(tb, path, **OPEN_OPTIONS[options]) == opened(ref, path, **OPEN_OPTIONS[options])


def test_from_h5_auto_batch_size_with_batch_size_raises_type_error(tmp_path):
    path = write(ref, "batch2d", tmp_path / "ref.h5")
    for lib in (ref, tb):
        with pytest.raises(TypeError):
            lib.from_h5(str(path), auto_batch_size=True, batch_size=[4])


FROM_DICT_OPTIONS = {
    "inferred": {},
    "batch_size": {"batch_size": [4]},
    "batch_dims1": {"batch_dims": 1},
    "batch_dims2": {"batch_dims": 2},
}


@pytest.mark.parametrize("options", list(FROM_DICT_OPTIONS))
def test_from_dict_of_a_plain_dict(tmp_path, options):
    data, _ = CONTENT["batch2d"]()
    results = []
    for lib, name in ((tb, "ours.h5"), (ref, "ref.h5")):
        ptd = quiet(
            lambda lib=lib, name=name: lib.PersistentTensorDict.from_dict(
                data, filename=str(tmp_path / name), **FROM_DICT_OPTIONS[options]
            )
        )
        results.append(summary(ptd))
        ptd.close()
    assert results[0] == results[1]
    assert_same_raw(raw_content(tmp_path / "ours.h5"), raw_content(tmp_path / "ref.h5"))


def test_nontensor_values_written_by_reference(tmp_path):
    values = {"i": 3, "f": 2.5, "b": b"xx", "l": [1, 2], "s": "txt"}
    td = ref.TensorDict({k: ref.NonTensorData(v) for k, v in values.items()}, batch_size=[])
    quiet(lambda: ref.PersistentTensorDict.from_dict(td, filename=str(tmp_path / "ref.h5"))).close()
    got = opened(tb, tmp_path / "ref.h5")
    assert got == opened(ref, tmp_path / "ref.h5")
    assert {k[0]: v[1] for k, v in got.items() if k} == {k: text(v) for k, v in values.items()}


def test_nontensor_stack_both_ways(tmp_path):
    for lib, name in ((ref, "ref.h5"), (tb, "ours.h5")):
        td = lib.TensorDict({"x": lib.NonTensorStack("a", "b", "c"), "y": torch.arange(3)}, batch_size=[3])
        quiet(lambda lib=lib, td=td, name=name: lib.PersistentTensorDict.from_dict(td, str(tmp_path / name))).close()
    for lib in (ref, tb):
        ptd = quiet(lambda lib=lib: lib.from_h5(str(tmp_path / "ours.h5")))
        other = quiet(lambda lib=lib: lib.from_h5(str(tmp_path / "ref.h5")))
        assert list(quiet(lambda ptd=ptd: ptd["x"])) == list(quiet(lambda other=other: other["x"])) == ["a", "b", "c"]
        assert quiet(lambda ptd=ptd: ptd[1]["x"]) == "b"
        ptd.close()
        other.close()


@ours_only
def test_reference_strings_read_as_str(tmp_path):
    path = write(ref, "strings", tmp_path / "ref.h5")
    with tb.from_h5(str(path)) as ptd:
        assert ptd["s"] == "hello"
        assert ptd["n", "t"] == "wörld"
        assert ptd[1]["s"] == "hello"


@difference("strings tensordict wrote read as str (tensordict 0.15.3: bytes with a FutureWarning, str from 0.17)")
def test_reference_strings_as_reference(tmp_path):
    path = write(ref, "strings", tmp_path / "ref.h5")
    values = []
    for lib in (ref, tb):
        with quiet(lambda lib=lib: lib.from_h5(str(path))) as ptd:
            values.append(quiet(lambda ptd=ptd: ptd["s"]))
    assert values[0] == b"hello"
    assert values[1] == values[0]


@difference(
    "unpickling a handle opened with mode 'w' reopens the file read-write (tensordict reopens it with "
    "'w' and truncates it)"
)
def test_unpickled_w_handle_as_reference(tmp_path):
    import pickle

    kept = []
    for lib in (ref, tb):
        path = tmp_path / f"{lib.__name__}.h5"
        ptd = lib.PersistentTensorDict(filename=str(path), batch_size=[3], mode="w")
        ptd["a"] = torch.arange(3.0)
        blob = pickle.dumps(ptd)
        ptd.close()
        quiet(lambda blob=blob: pickle.loads(blob)).close()
        kept.append(raw_content(path))
    assert kept[0] == {}  # tensordict truncated its file
    assert sorted(kept[1]) == sorted(kept[0])


def test_to_h5_overwrites_in_place_as_reference(tmp_path):
    for lib in (ref, tb):
        path = tmp_path / f"{lib.__name__}.h5"
        quiet(lambda lib=lib, path=path: lib.TensorDict({"a": torch.zeros(3)}, [3]).to_h5(str(path))).close()
        inode = os.stat(path).st_ino
        out = quiet(lambda lib=lib, path=path: lib.TensorDict({"b": torch.ones(3)}, [3]).to_h5(str(path)))
        assert os.stat(path).st_ino == inode  # truncated and written in place
        assert list(out.keys()) == ["b"]
        out.close()
        assert sorted(raw_content(path)) == ["b"]


@difference(
    "to_h5/from_dict onto a file open in this process (the source itself, say) writes it aside and renames it "
    "into place (tensordict raises OSError: HDF5 cannot truncate an open file)"
)
def test_to_h5_onto_an_open_file_as_reference(tmp_path):
    for lib in (ref, tb):
        path = tmp_path / f"{lib.__name__}.h5"
        source = quiet(lambda lib=lib, path=path: lib.TensorDict({"a": torch.zeros(3)}, [3]).to_h5(str(path)))
        try:
            with pytest.raises(OSError, match="already open"):
                quiet(lambda lib=lib, path=path: lib.TensorDict({"a": torch.ones(3)}, [3]).to_h5(str(path)))
        finally:
            source.close()


# --------------------------------------------------------------------------------------------------
# A file that neither library wrote (h5py alone)
# --------------------------------------------------------------------------------------------------
def _foreign(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f["obs"] = np.arange(40, dtype=np.float32).reshape(10, 4)
        f["done"] = np.zeros(10, dtype=bool)
        f.create_group("info")["step"] = np.arange(10, dtype=np.int64)
        f["info"]["pos"] = np.ones((10, 3), dtype=np.float64)
        f["title"] = "a title"  # a variable-length str with no tensordict attribute
        f["raw"] = np.bytes_(b"\x00\x01")
        f["names"] = np.array([f"row{i}" for i in range(10)], dtype=h5py.string_dtype())
        f.create_dataset(
            "chunked", data=np.arange(100, dtype=np.int32).reshape(10, 10), chunks=(3, 10), compression="gzip"
        )
    return path


@pytest.mark.parametrize("options", [{}, {"non_tensor_as_stack": True}, {"auto_batch_size": True, "batch_dims": 1}])
def test_foreign_file_opens_as_in_reference(tmp_path, options):
    path = _foreign(tmp_path / "foreign.h5")
    assert opened(tb, path, **options) == opened(ref, path, **options)


def test_foreign_file_rows_of_strings_as_stack(tmp_path):
    path = _foreign(tmp_path / "foreign.h5")
    results = []
    for lib in (tb, ref):
        ptd = quiet(lambda lib=lib: lib.from_h5(str(path), non_tensor_as_stack=True))
        results.append([text(quiet(lambda ptd=ptd, i=i: ptd[i]["names"])) for i in (0, 9)])
        ptd.close()
    assert results[0] == results[1] == ["row0", "row9"]


# --------------------------------------------------------------------------------------------------
# Indexing reads the same rows
# --------------------------------------------------------------------------------------------------
READ_INDICES = {
    "int": 1, "neg_int": -1, "slice": slice(1, 3), "step": slice(None, None, 2), "empty_slice": slice(2, 2),
    "list_unsorted_repeated": [3, 1, 1], "tensor": torch.tensor([2, 0]),
    "mask": torch.tensor([True, False, True, True]), "int_then_slice": (1, slice(0, 3)),
    "slice_then_list": (slice(0, 2), [4, 0]), "list_then_int": ([3, 1], 2), "dim1_int": (slice(None), 2),
    "ellipsis": (Ellipsis, 1), "none": (None, 1), "mask_2d": torch.arange(20).reshape(4, 5) % 3 == 0,
    "two_tensors": (torch.tensor([0, 3]), torch.tensor([2, 4])),
}  # fmt: skip


@pytest.mark.parametrize("index", list(READ_INDICES))
def test_index_reads_the_same(tmp_path, index):
    idx = READ_INDICES[index]
    path = write(ref, "batch2d", tmp_path / "ref.h5")
    ours, theirs = tb.from_h5(str(path)), ref.from_h5(str(path))
    try:
        got, expected = ours[idx], theirs[idx]
        assert tuple(got.batch_size) == tuple(expected.batch_size)
        assert torch.equal(got["a"], expected["a"])  # one leaf read through the view
        assert summary(got.to_tensordict()) == summary(expected.to_tensordict())
        assert summary(got.to_tensordict()) == summary(make(tb, "batch2d")[idx])
    finally:
        ours.close()
        theirs.close()


# --------------------------------------------------------------------------------------------------
# Writes through an index
# --------------------------------------------------------------------------------------------------
WRITE_INDICES = {
    "int": 1, "slice": slice(1, 3), "sorted_list": [0, 2], "mask": torch.tensor([True, False, True, True]),
    "int_then_slice": (1, slice(0, 3)), "slice_then_list": (slice(0, 2), [0, 4]), "dim1_int": (slice(None), 2),
}  # fmt: skip
UNSORTED_INDICES = {
    "unsorted": [2, 0],
    "repeated": [1, 1],
    "unsorted_tensor": torch.tensor([3, 0, 2]),
    "repeated_unsorted": [3, 1, 3, 0],
}


def _new_rows(lib: Any, shape: torch.Size) -> Any:
    n = shape.numel()
    return lib.TensorDict(
        {"a": -torch.arange(n * 3.0).reshape(*shape, 3), "n": {"c": -torch.arange(n).reshape(shape) - 1}},
        batch_size=shape,
    )


def _write_at(lib: Any, path: Path, idx: Any, style: str) -> Any:
    """Opens ``path`` "r+" and writes new rows at ``idx``: the whole node, or one leaf through the view.

    Returns ``("ok", raw file content)`` or ``("raises", error type)``.
    """
    ptd = quiet(lambda: lib.from_h5(str(path), mode="r+"))
    try:
        shape = torch.Size(make(lib, "batch2d")[idx].batch_size)
        value = _new_rows(lib, shape)
        if style == "node":
            ptd[idx] = value
        else:
            ptd[idx]["a"] = value["a"]
    except Exception as err:
        return ("raises", type(err).__name__)
    finally:
        ptd.close()
    return ("ok", raw_content(path))


def _expected_write(idx: Any, style: str) -> dict[str, Any]:
    """What the file holds after the write, computed with plain torch (a loop: the last repeat wins)."""
    data, _ = CONTENT["batch2d"]()
    a, c = data["a"].clone(), data["n"]["c"].clone()
    target = a[idx] if not isinstance(idx, list) else a[torch.tensor(idx)]
    new = _new_rows(tb, torch.Size(target.shape[:-1]))
    if isinstance(idx, (list, torch.Tensor)) and not (isinstance(idx, torch.Tensor) and idx.dtype == torch.bool):
        for pos, row in enumerate(torch.as_tensor(idx).tolist()):
            a[row] = new["a"][pos]
            if style == "node":
                c[row] = new["n", "c"][pos]
    else:
        a[idx] = new["a"]
        if style == "node":
            c[idx] = new["n", "c"]
    return {"a": a.numpy(), "n": "<group>", "n/c": c.numpy()}


@pytest.mark.parametrize("style", ["node", "leaf_of_view"])
@pytest.mark.parametrize("index", list(WRITE_INDICES))
def test_index_writes_the_same(tmp_path, index, style):
    idx = WRITE_INDICES[index]
    results = [
        _write_at(lib, write(ref, "batch2d", tmp_path / f"{name}.h5"), idx, style)
        for lib, name in ((tb, "ours"), (ref, "ref"))
    ]
    assert results[0][0] == results[1][0] == "ok", results
    assert_same_raw(results[0][1], results[1][1])
    assert_same_raw(results[0][1], _expected_write(idx, style))


@ours_only
@pytest.mark.parametrize("style", ["node", "leaf_of_view"])
@pytest.mark.parametrize("index", list(UNSORTED_INDICES))
def test_unsorted_and_repeated_index_writes_last_write_wins(tmp_path, index, style):
    idx = UNSORTED_INDICES[index]
    outcome = _write_at(tb, write(tb, "batch2d", tmp_path / "ours.h5"), idx, style)
    assert outcome[0] == "ok", outcome
    assert_same_raw(outcome[1], _expected_write(idx, style))


@difference("unsorted or repeated row writes work, last write wins (tensordict raises TypeError from h5py)")
@pytest.mark.parametrize("index", list(UNSORTED_INDICES))
def test_unsorted_index_writes_as_reference(tmp_path, index):
    idx = UNSORTED_INDICES[index]
    ours = _write_at(tb, write(ref, "batch2d", tmp_path / "ours.h5"), idx, "node")
    theirs = _write_at(ref, write(ref, "batch2d", tmp_path / "ref.h5"), idx, "node")
    assert theirs == ("raises", "TypeError")
    assert ours[0] == theirs[0]


# --------------------------------------------------------------------------------------------------
# What tensorbatch keeps that tensordict loses
# --------------------------------------------------------------------------------------------------
def _rich(lib: Any) -> Any:
    """Batch [6] over leaves that share [6, 3]; dim names; a nested node of batch [6, 3] over [6, 3, 2, 2]."""
    inner = lib.TensorDict({"w": torch.arange(72.0).reshape(6, 3, 2, 2)}, batch_size=[6, 3])
    return lib.TensorDict({"a": torch.arange(36.0).reshape(6, 3, 2), "inner": inner}, batch_size=[6], names=["rows"])


@ours_only
@pytest.mark.parametrize("writer", list(WRITERS))
def test_batch_size_names_and_nested_batch_sizes_round_trip(tmp_path, writer):
    quiet(lambda: WRITERS[writer](tb, _rich(tb), tmp_path / "ours.h5")).close()
    ptd = tb.from_h5(str(tmp_path / "ours.h5"))
    try:
        assert ptd.batch_size == torch.Size([6])
        assert ptd.names == ["rows"]
        assert ptd["inner"].batch_size == torch.Size([6, 3])
        assert summary(ptd) == summary(_rich(tb))
    finally:
        ptd.close()
    # tensordict still opens the file, inferring batch sizes from the shapes as for its own files
    theirs = ref.from_h5(str(tmp_path / "ours.h5"))
    assert theirs.batch_size == torch.Size([6, 3, 2])
    assert theirs["inner"].batch_size == torch.Size([6, 3, 2, 2])
    assert torch.equal(theirs["inner", "w"], _rich(tb)["inner", "w"])
    theirs.close()


@ours_only
def test_explicit_batch_size_overrides_the_stored_one(tmp_path):
    quiet(lambda: tb.PersistentTensorDict.from_dict(_rich(tb), tmp_path / "ours.h5")).close()
    with tb.from_h5(str(tmp_path / "ours.h5"), batch_size=[]) as ptd:
        assert ptd.batch_size == torch.Size([])
    with tb.from_h5(str(tmp_path / "ours.h5"), auto_batch_size=True) as ptd:  # as auto_batch_size_() in memory
        assert ptd.batch_size == torch.Size([6, 3, 2])
        assert ptd["inner"].batch_size == torch.Size([6, 3, 2, 2])


EXTRA_DTYPES = [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


@ours_only
@pytest.mark.parametrize("dtype", EXTRA_DTYPES, ids=str)
def test_dtypes_h5py_lacks_round_trip_here(tmp_path, dtype):
    values = torch.linspace(-3, 3, 12).reshape(4, 3).to(dtype)
    td = tb.TensorDict({"x": values, "n": {"y": values[:, 0].clone()}}, batch_size=[4])
    quiet(lambda: td.to_h5(str(tmp_path / "ours.h5"))).close()
    with tb.from_h5(str(tmp_path / "ours.h5")) as ptd:
        assert ptd["x"].dtype == dtype
        assert torch.equal(ptd["x"].view(torch.uint8), values.view(torch.uint8))
        assert ptd[1:3]["x"].dtype == dtype
        assert torch.equal(ptd[[3, 0]]["n", "y"].view(torch.uint8), values[[3, 0], 0].view(torch.uint8))
    # the reference opens the file: the bits are there, as a plain integer type of the same width
    theirs = ref.from_h5(str(tmp_path / "ours.h5"))
    stored = theirs["x"]
    assert stored.dtype.itemsize == dtype.itemsize
    assert not stored.dtype.is_floating_point
    assert torch.equal(stored.view(torch.uint8), values.view(torch.uint8))
    theirs.close()


@difference("bfloat16 leaves can be written (tensordict raises TypeError: unsupported ScalarType)")
def test_bfloat16_written_as_reference(tmp_path):
    td = {lib: lib.TensorDict({"x": torch.ones(2, dtype=torch.bfloat16)}, batch_size=[2]) for lib in (tb, ref)}
    outcomes = []
    for lib in (tb, ref):
        try:
            quiet(lambda lib=lib: td[lib].to_h5(str(tmp_path / f"{lib.__name__}.h5"))).close()
            outcomes.append("ok")
        except TypeError:
            outcomes.append("TypeError")
    assert outcomes[1] == "TypeError"
    assert outcomes[0] == outcomes[1]
