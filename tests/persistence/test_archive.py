"""Memory-mapped archives (``.tdz``): round trips, zero-copy loading, ``mode="r+"``, checksums, corruption,
atomic writes, ``pack_memmap``/``unpack_memmap`` rules, and ``append_memmap``."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest
import torch

import tensorbatch
from tensorbatch import (
    LazyStackedTensorDict,
    NonTensorData,
    TensorDict,
    append_memmap,
    is_memmap_archive,
    lazy_stack,
    pack_memmap,
    refresh_archive_checksums,
    tensorclass,
    unpack_memmap,
)
from tensorbatch._io import append as _append
from tensorbatch._io import archive as _archive


def _td() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).view(3, 4),
            "n": {"b": torch.arange(3, dtype=torch.int16), "deep": {"c": torch.ones(3, 2, dtype=torch.bfloat16)}},
            "s": "text",
            "odd key/é": torch.tensor([True, False, True]),
        },
        batch_size=[3],
        names=["rows"],
    )


def _same(x: TensorDict, y: TensorDict) -> None:
    assert x.batch_size == y.batch_size
    assert sorted(x.keys(True, True), key=str) == sorted(y.keys(True, True), key=str)
    for key in x.keys(True, True):
        a, b = x.get(key), y.get(key)
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape, key
            assert torch.equal(a, b), key
        else:
            assert a == b, key


# ---------------------------------------------------------------------------------------------- round trips
def test_round_trip_keeps_values_dtypes_names_and_non_tensor(tmp_path):
    td = _td()
    out = td.memmap(tmp_path / "x.tdz")
    assert (tmp_path / "x.tdz").is_file() and is_memmap_archive(tmp_path / "x.tdz")
    loaded = TensorDict.load_memmap(tmp_path / "x.tdz")
    for got in (out, loaded, tensorbatch.load_memmap(tmp_path / "x.tdz")):
        _same(got, td)
        assert got.names == ["rows"] and got["s"] == "text" and got.device == torch.device("cpu")
        assert not got.is_locked  # as tensordict: an archive loads unlocked (writes stay in memory)


def test_archive_option_and_save_alias(tmp_path):
    TensorDict(a=torch.ones(2)).save(tmp_path / "plain", archive=True)
    assert is_memmap_archive(tmp_path / "plain")
    TensorDict(a=torch.ones(2)).memmap(tmp_path / "folder.tdz", archive=False)
    assert (tmp_path / "folder.tdz").is_dir()
    with pytest.raises(ValueError, match="compression applies to archives only"):
        TensorDict(a=torch.ones(2)).memmap(tmp_path / "f2", compression="deflate")
    with pytest.raises(ValueError, match="a path is required"):
        TensorDict(a=torch.ones(2)).memmap(archive=True)


def test_lazy_stack_nested_tensors_and_pickled_values(tmp_path):
    stack = lazy_stack([TensorDict(a=torch.zeros(2), x=torch.ones(1)), TensorDict(a=torch.ones(2))])
    stack.memmap(tmp_path / "s.tdz")
    loaded = TensorDict.load_memmap(tmp_path / "s.tdz")
    assert isinstance(loaded, LazyStackedTensorDict)
    assert loaded[0]["x"].tolist() == [1.0] and loaded["a"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    nested = torch.nested.nested_tensor([torch.arange(3.0), torch.arange(5.0)])
    TensorDict(pad=torch.zeros(2), nt=nested, batch_size=[2]).memmap(tmp_path / "n.tdz")
    nt = TensorDict.load_memmap(tmp_path / "n.tdz")["nt"]
    assert [t.tolist() for t in nt.unbind()] == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0, 4.0]]
    with pytest.raises(TypeError, match="'obj'"):
        TensorDict(obj=NonTensorData({1, 2})).memmap(tmp_path / "p.tdz")
    assert not (tmp_path / "p.tdz").exists()
    TensorDict(obj=NonTensorData({1, 2})).memmap(tmp_path / "p.tdz", allow_pickle=True)
    with pytest.raises(RuntimeError, match="allow_pickle"):
        TensorDict.load_memmap(tmp_path / "p.tdz")
    assert TensorDict.load_memmap(tmp_path / "p.tdz", allow_pickle=True)["obj"] == {1, 2}


def test_meta_device_reads_metadata_only(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    meta = TensorDict.load_memmap(tmp_path / "x.tdz", device="meta")
    assert meta["a"].device.type == "meta" and meta["n", "deep", "c"].dtype == torch.bfloat16


@tensorclass
class _Points:
    xy: torch.Tensor
    label: str


def test_tensorclass_saves_to_an_archive(tmp_path):
    points = _Points(xy=torch.arange(6.0).view(3, 2), label="p", batch_size=[3])
    out = points.memmap(tmp_path / "p.tdz")
    assert type(out) is _Points and out.xy.tolist() == points.xy.tolist() and out.label == "p"
    assert is_memmap_archive(tmp_path / "p.tdz")


# ---------------------------------------------------------------------------------------------- mapping
def test_leaves_are_views_of_one_copy_on_write_mapping(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    before = (tmp_path / "x.tdz").read_bytes()
    loaded = TensorDict.load_memmap(tmp_path / "x.tdz")
    a, b = loaded["a"], loaded["n", "b"]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one mapping, no copies
    assert a.storage_offset() * 4 % 64 == 0
    a.add_(100)  # copy-on-write: the file does not change
    assert (tmp_path / "x.tdz").read_bytes() == before
    assert TensorDict.load_memmap(tmp_path / "x.tdz")["a"][0, 0].item() == 0.0


def test_mode_r_plus_writes_reach_the_archive_and_checksums_refresh(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    TensorDict.load_memmap(tmp_path / "x.tdz", mode="r+")["a"].fill_(7.0)
    assert TensorDict.load_memmap(tmp_path / "x.tdz")["a"].unique().tolist() == [7.0]
    assert zipfile.ZipFile(tmp_path / "x.tdz").testzip() == "a.memmap"
    with pytest.raises(RuntimeError, match=r"a\.memmap"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert refresh_archive_checksums(tmp_path / "x.tdz") == tmp_path / "x.tdz"
    assert zipfile.ZipFile(tmp_path / "x.tdz").testzip() is None
    unpack_memmap(tmp_path / "x.tdz", tmp_path / "out")
    assert TensorDict.load_memmap(tmp_path / "out")["a"].unique().tolist() == [7.0]


def test_memmap_like_archive_is_zeros_and_writable(tmp_path):
    like = _td().memmap_like(tmp_path / "z.tdz")
    assert like["a"].shape == (3, 4) and like["a"].abs().sum() == 0 and like["s"] == "text"
    like["a"][1] = 3.0
    assert TensorDict.load_memmap(tmp_path / "z.tdz")["a"][1].tolist() == [3.0] * 4


@pytest.mark.parametrize("compression", ["deflate", "bzip2", "lzma", zipfile.ZIP_DEFLATED])
def test_compressed_archives_load_and_refuse_r_plus(tmp_path, compression):
    td = TensorDict(a=torch.zeros(1000), b=torch.arange(10))
    td.memmap(tmp_path / "c.tdz", compression=compression)
    assert (tmp_path / "c.tdz").stat().st_size < 1000
    loaded = TensorDict.load_memmap(tmp_path / "c.tdz")
    assert loaded["a"].abs().sum() == 0 and loaded["b"].tolist() == list(range(10))
    with pytest.raises(RuntimeError, match=r"c\.tdz::a\.memmap.*mode='r\+'|mode='r\+'.*a\.memmap"):
        TensorDict.load_memmap(tmp_path / "c.tdz", mode="r+")


def test_unknown_compression_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown compression 'zstd9'"):
        TensorDict(a=torch.zeros(2)).memmap(tmp_path / "c.tdz", compression="zstd9")
    assert not (tmp_path / "c.tdz").exists()


def test_resave_over_the_archive_it_was_loaded_from(tmp_path):
    TensorDict(a=torch.zeros(4)).memmap(tmp_path / "x.tdz")
    loaded = TensorDict.load_memmap(tmp_path / "x.tdz")
    (loaded + 1).memmap(tmp_path / "x.tdz")
    assert loaded["a"].tolist() == [0.0] * 4  # the old mapping keeps the old file
    assert TensorDict.load_memmap(tmp_path / "x.tdz")["a"].tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="already exists"):
        loaded.memmap(tmp_path / "x.tdz", existsok=False)


# ---------------------------------------------------------------------------------------------- corruption
def _entry_start(path: Path, name: str) -> int:
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        return _archive._payload_start(f, zf.getinfo(name), path)


def test_truncated_archive_names_the_file(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    data = (tmp_path / "x.tdz").read_bytes()
    (tmp_path / "x.tdz").write_bytes(data[: len(data) // 2])
    assert not is_memmap_archive(tmp_path / "x.tdz")
    with pytest.raises(ValueError, match=r"x\.tdz is not a memory-mapped TensorDict archive.*truncated"):
        TensorDict.load_memmap(tmp_path / "x.tdz")
    with pytest.raises(ValueError, match=r"x\.tdz"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "out")


def test_damaged_local_header_names_file_and_entry(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    with zipfile.ZipFile(tmp_path / "x.tdz") as zf:
        offset = zf.getinfo("n/b.memmap").header_offset
    with open(tmp_path / "x.tdz", "r+b") as f:
        f.seek(offset)
        f.write(b"XXXX")
    with pytest.raises(RuntimeError, match=r"x\.tdz: the entry 'n/b\.memmap' is corrupted \(its local header"):
        TensorDict.load_memmap(tmp_path / "x.tdz")


def test_corrupted_payload_fails_checksums_naming_the_entry(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    start = _entry_start(tmp_path / "x.tdz", "n/meta.json")
    with open(tmp_path / "x.tdz", "r+b") as f:
        f.seek(start + 2)
        f.write(b"#")
    with pytest.raises(RuntimeError, match=r"x\.tdz: the entry 'n/meta\.json' is corrupted \(Bad CRC-32"):
        TensorDict.load_memmap(tmp_path / "x.tdz")
    with pytest.raises(RuntimeError, match=r"the entry 'n/meta\.json' is corrupted"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_entry_size_not_matching_metadata_names_the_entry(tmp_path):
    TensorDict(a=torch.zeros(4)).memmap(tmp_path / "f")
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    meta["a"]["shape"] = [5]
    (tmp_path / "f" / "meta.json").write_text(json.dumps(meta))
    pack_memmap(tmp_path / "f", tmp_path / "x.tdz")
    with pytest.raises(RuntimeError, match=r"x\.tdz::a\.memmap holds 16 bytes but shape \[5\]"):
        TensorDict.load_memmap(tmp_path / "x.tdz")


def test_missing_leaf_entry_names_it(tmp_path):
    TensorDict(a=torch.zeros(4), b=torch.ones(2)).memmap(tmp_path / "f")
    (tmp_path / "f" / "b.memmap").unlink()
    pack_memmap(tmp_path / "f", tmp_path / "x.tdz")
    with pytest.raises(FileNotFoundError, match=r"x\.tdz::b\.memmap is missing"):
        TensorDict.load_memmap(tmp_path / "x.tdz")


# ---------------------------------------------------------------------------------------------- atomic writes
def test_a_failed_write_keeps_the_previous_archive(tmp_path, monkeypatch):
    TensorDict(a=torch.zeros(4)).memmap(tmp_path / "x.tdz")
    before = (tmp_path / "x.tdz").read_bytes()
    calls = []

    def failing_add(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise OSError("disk full")
        return add(*args, **kwargs)

    add = _archive._add
    monkeypatch.setattr(_archive, "_add", failing_add)
    with pytest.raises(OSError, match="disk full"):
        TensorDict(a=torch.ones(4), b=torch.ones(3)).memmap(tmp_path / "x.tdz")
    assert (tmp_path / "x.tdz").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.tdz"]  # no temporary file or staging folder left


def test_archive_gets_the_usual_file_mode(tmp_path):
    TensorDict(a=torch.zeros(4)).memmap(tmp_path / "x.tdz")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "x.tdz").stat().st_mode) == 0o666 & ~mask
    os.chmod(tmp_path / "x.tdz", 0o640)
    TensorDict(a=torch.ones(4)).memmap(tmp_path / "x.tdz")  # a replaced archive keeps its mode
    assert stat.S_IMODE((tmp_path / "x.tdz").stat().st_mode) == 0o640


# ---------------------------------------------------------------------------------------------- pack / unpack
def test_pack_refuses_what_is_not_a_saved_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"has no meta\.json"):
        pack_memmap(tmp_path / "empty", tmp_path / "x.tdz")
    TensorDict(a=torch.zeros(2)).memmap(tmp_path / "f")
    with pytest.raises(ValueError, match="must lie outside the folder"):
        pack_memmap(tmp_path / "f", tmp_path / "f" / "x.tdz")
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["a.memmap", "meta.json"]


def test_pack_then_unpack_gives_the_same_files(tmp_path):
    _td().memmap(tmp_path / "f")
    pack_memmap(tmp_path / "f", tmp_path / "x.tdz")
    names = zipfile.ZipFile(tmp_path / "x.tdz").namelist()
    assert names[0] == "meta.json" and names.index("n/meta.json") < names.index("n/b.memmap")
    assert unpack_memmap(tmp_path / "x.tdz", tmp_path / "g") == tmp_path / "g"
    files = sorted(p.relative_to(tmp_path / "f") for p in (tmp_path / "f").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "g") for p in (tmp_path / "g").rglob("*") if p.is_file())
    for rel in files:
        assert (tmp_path / "f" / rel).read_bytes() == (tmp_path / "g" / rel).read_bytes()


def test_unpack_replaces_only_empty_or_saved_folders(tmp_path):
    TensorDict(a=torch.ones(2)).memmap(tmp_path / "x.tdz")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an empty or saved TensorDict folder"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    TensorDict(old=torch.zeros(3)).memmap(tmp_path / "saved")
    unpack_memmap(tmp_path / "x.tdz", tmp_path / "saved")
    assert list(TensorDict.load_memmap(tmp_path / "saved").keys()) == ["a"]
    assert not (tmp_path / "saved" / "old.memmap").exists()


def test_unpack_keeps_hostile_names_inside(tmp_path):
    TensorDict(a=torch.ones(2)).memmap(tmp_path / "f")
    pack_memmap(tmp_path / "f", tmp_path / "x.tdz")
    with zipfile.ZipFile(tmp_path / "x.tdz", "a") as zf:
        zf.writestr("../escaped.txt", "boo")
    unpack_memmap(tmp_path / "x.tdz", tmp_path / "out" / "g")
    assert not (tmp_path / "out" / "escaped.txt").exists() and (tmp_path / "out" / "g" / "escaped.txt").exists()


def test_is_memmap_archive_is_false_for_everything_else(tmp_path):
    TensorDict(a=torch.ones(2)).memmap(tmp_path / "folder")
    (tmp_path / "text").write_text("hello")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme", "x")
    for path in ("folder", "text", "other.zip", "missing"):
        assert not is_memmap_archive(tmp_path / path)
    with pytest.raises(ValueError, match=r"no top-level meta\.json"):
        unpack_memmap(tmp_path / "other.zip", tmp_path / "out")


# ---------------------------------------------------------------------------------------------- append_memmap
def _rows(start: int, n: int) -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(start, start + n, dtype=torch.float32)[:, None].expand(n, 2),
            "n": {"b": torch.arange(start, start + n)},
            "s": "k",
            "e": torch.zeros(n, 0),
        },
        batch_size=[n],
    )


def test_append_grows_every_leaf_and_batch_size(tmp_path):
    _rows(0, 3).memmap(tmp_path / "f")
    append_memmap(tmp_path / "f", _rows(3, 2))
    append_memmap(tmp_path / "f", _rows(5, 1))
    loaded = TensorDict.load_memmap(tmp_path / "f")
    assert loaded.batch_size == (6,) and loaded["n"].batch_size == (6,)
    assert loaded["a"][:, 0].tolist() == [0, 1, 2, 3, 4, 5] and loaded["n", "b"].tolist() == [0, 1, 2, 3, 4, 5]
    assert loaded["s"] == "k" and loaded["e"].shape == (6, 0)


def test_append_tensorclass_rows(tmp_path):
    _Points(xy=torch.zeros(2, 2), label="p", batch_size=[2]).memmap(tmp_path / "f")
    append_memmap(tmp_path / "f", _Points(xy=torch.ones(1, 2), label="p", batch_size=[1]))
    loaded = TensorDict.load_memmap(tmp_path / "f")  # the folder names the class (its TensorDict in _tensordict/)
    assert type(loaded) is _Points
    assert loaded.xy.sum(-1).tolist() == [0.0, 0.0, 2.0]


def test_append_rows_holding_a_tensorclass(tmp_path):
    def rows(n: int, value: float) -> TensorDict:
        held = _Points(xy=torch.full((n, 2), value), label="p", batch_size=[n])
        return TensorDict(p=held, b=torch.full((n,), value), batch_size=[n])

    rows(2, 0.0).memmap(tmp_path / "f")
    append_memmap(tmp_path / "f", rows(1, 1.0))
    loaded = TensorDict.load_memmap(tmp_path / "f")
    assert type(loaded["p"]) is _Points
    assert loaded["p"].xy.sum(-1).tolist() == [0.0, 0.0, 2.0]
    assert loaded["b"].tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (lambda: _rows(3, 2).exclude("s"), "keys"),
        (lambda: _rows(3, 2).set("a", torch.zeros(2, 2, dtype=torch.float64)), r"to the entry 'a', of dtype"),
        (lambda: _rows(3, 2).set(("n", "b"), torch.zeros(2, 3, dtype=torch.long)), r"entry \('n', 'b'\)"),
        (lambda: _rows(3, 2).set("s", "other"), r"entry 's': the saved non-tensor value 'k'"),
        (lambda: TensorDict(a=torch.zeros(2)), "first batch dimension"),
    ],
)
def test_append_refuses_rows_that_do_not_fit_and_writes_nothing(tmp_path, rows, match):
    _rows(0, 3).memmap(tmp_path / "f")
    before = {p: p.read_bytes() for p in (tmp_path / "f").rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=match):
        append_memmap(tmp_path / "f", rows())
    assert {p: p.read_bytes() for p in (tmp_path / "f").rglob("*") if p.is_file()} == before


def test_append_refuses_archives_lazy_stacks_and_nested_tensors(tmp_path):
    _rows(0, 3).memmap(tmp_path / "x.tdz")
    with pytest.raises(ValueError, match="an archive cannot grow"):
        append_memmap(tmp_path / "x.tdz", _rows(3, 1))
    _rows(0, 1).memmap(tmp_path / "g")
    with pytest.raises(TypeError, match="rows must be a TensorDict"):
        append_memmap(tmp_path / "g", torch.zeros(2))
    lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.zeros(2))]).memmap(tmp_path / "l")
    with pytest.raises(ValueError, match="a lazy stack cannot grow"):
        append_memmap(tmp_path / "l", TensorDict(a=torch.zeros(1, 2), batch_size=[1]))
    nt = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    TensorDict(nt=nt, batch_size=[2]).memmap(tmp_path / "n")
    with pytest.raises(ValueError, match="entry 'nt': a nested tensor cannot grow"):
        append_memmap(tmp_path / "n", TensorDict(nt=nt, batch_size=[2]))


def test_a_failed_append_puts_everything_back(tmp_path, monkeypatch):
    _rows(0, 3).memmap(tmp_path / "f")
    before = {p: p.read_bytes() for p in (tmp_path / "f").rglob("*") if p.is_file()}
    replace = os.replace
    calls = []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the top meta.json is replaced, the nested one fails
            raise OSError("disk full")
        return replace(src, dst)

    monkeypatch.setattr(_append.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        append_memmap(tmp_path / "f", _rows(3, 2))
    assert {p: p.read_bytes() for p in (tmp_path / "f").rglob("*") if p.is_file()} == before
