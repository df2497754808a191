"""Differential tests, memmap archives (``.tdz``), ``append_memmap`` and safetensors files, both ways.

The archive cases are the memory-mapped folder cases (``test_vs_tensordict_memmap.CASES``): an archive one
library writes loads in the other as in the writer, compared through ``summary`` (classes, batch sizes,
devices, names, dtypes, shapes, raw bytes, non-tensor values). Then each library's ``pack_memmap`` /
``unpack_memmap`` on the other's folders and archives, ``append_memmap`` across libraries, and
``to_safetensors`` / ``from_safetensors`` both ways.
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from .test_vs_tensordict_memmap import _params, folder_content, load, save, summary

pytestmark = pytest.mark.differential


def _load_archive(lib: Any, path: Path) -> Any:
    return load(lib, path)


# ---------------------------------------------------------------------------------------------- archives
@pytest.mark.parametrize("builder", _params("here"))
def test_reference_archive_loads_here(ref, tb, tmp_path, builder):
    save(ref, builder(ref), tmp_path / "ref.tdz")
    assert ref.is_memmap_archive(tmp_path / "ref.tdz")
    expected = summary(_load_archive(ref, tmp_path / "ref.tdz"))
    assert summary(_load_archive(tb, tmp_path / "ref.tdz")) == expected


@pytest.mark.parametrize("builder", _params("there"))
def test_our_archive_loads_in_reference(ref, tb, tmp_path, builder):
    save(ref, builder(ref), tmp_path / "ref.tdz")
    expected = summary(_load_archive(ref, tmp_path / "ref.tdz"))
    result = save(tb, builder(tb), tmp_path / "sub.tdz")
    assert tb.is_memmap_archive(tmp_path / "sub.tdz")
    assert summary(_load_archive(ref, tmp_path / "sub.tdz")) == expected
    assert summary(result) == summary(_load_archive(tb, tmp_path / "sub.tdz"))


@pytest.mark.parametrize("builder", _params("files"))
def test_same_entries(ref, tb, tmp_path, builder):
    """Both archives unzip to the same files (names, metadata, raw bytes), whoever unpacks them."""
    save(ref, builder(ref), tmp_path / "ref.tdz")
    save(tb, builder(tb), tmp_path / "sub.tdz")
    ref.unpack_memmap(tmp_path / "sub.tdz", tmp_path / "sub_by_ref")
    tb.unpack_memmap(tmp_path / "ref.tdz", tmp_path / "ref_by_tb")
    assert folder_content(tmp_path / "sub_by_ref") == folder_content(tmp_path / "ref_by_tb")


def test_our_payloads_are_aligned(tb, tmp_path):
    """Each leaf's bytes start at a multiple of 64 in the file: loading views them in place, in any dtype."""
    td = tb.TensorDict(
        {
            "a": torch.arange(5, dtype=torch.float64),
            "é": torch.ones(3, dtype=torch.int8),
            "n": {"long_name" * 5: torch.zeros(2, 7, dtype=torch.complex64)},
        },
        batch_size=[],
    )
    td.memmap(tmp_path / "x.tdz")
    data = (tmp_path / "x.tdz").read_bytes()
    with zipfile.ZipFile(tmp_path / "x.tdz") as zf:
        leaves = [info for info in zf.infolist() if info.filename.endswith(".memmap")]
        assert len(leaves) == 3
        for info in leaves:
            start = (
                info.header_offset
                + 30
                + int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
                + int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
            )
            assert start % 64 == 0, info.filename
            assert data[start : start + info.file_size] == zf.read(info)


@pytest.mark.parametrize("compression", [None, "deflate", "lzma"])
def test_pack_and_unpack_across_libraries(ref, tb, tmp_path, compression):
    td = ref.TensorDict({"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.arange(3)}, "s": "text"}, batch_size=[3])
    save(ref, td, tmp_path / "ref")
    ref.pack_memmap(tmp_path / "ref", tmp_path / "by_ref.tdz", compression=compression)
    expected = summary(load(ref, tmp_path / "by_ref.tdz"))
    assert tb.pack_memmap(tmp_path / "ref", tmp_path / "by_tb.tdz", compression=compression) == tmp_path / "by_tb.tdz"
    assert summary(load(ref, tmp_path / "by_tb.tdz")) == expected
    assert summary(load(tb, tmp_path / "by_ref.tdz")) == summary(load(tb, tmp_path / "by_tb.tdz"))
    tb.unpack_memmap(tmp_path / "by_ref.tdz", tmp_path / "unpacked")
    assert summary(load(ref, tmp_path / "unpacked")) == summary(load(ref, tmp_path / "ref"))
    assert folder_content(tmp_path / "unpacked") == folder_content(tmp_path / "ref")


def test_reference_refreshes_our_checksums_and_back(ref, tb, tmp_path):
    tb.TensorDict(a=torch.zeros(4)).memmap(tmp_path / "x.tdz")
    tb.TensorDict.load_memmap(tmp_path / "x.tdz", mode="r+")["a"].add_(2)
    assert zipfile.ZipFile(tmp_path / "x.tdz").testzip() == "a.memmap"
    ref.refresh_archive_checksums(tmp_path / "x.tdz")
    assert zipfile.ZipFile(tmp_path / "x.tdz").testzip() is None
    assert load(ref, tmp_path / "x.tdz")["a"].tolist() == [2.0] * 4
    ref.TensorDict(a=torch.zeros(4)).save(tmp_path / "y.tdz")
    ref.TensorDict.load_memmap(tmp_path / "y.tdz", mode="r+")["a"].add_(3)
    tb.refresh_archive_checksums(tmp_path / "y.tdz")
    assert zipfile.ZipFile(tmp_path / "y.tdz").testzip() is None
    assert load(tb, tmp_path / "y.tdz")["a"].tolist() == [3.0] * 4


def test_memmap_like_archive_matches_reference(ref, tb, tmp_path):
    r = ref.TensorDict(a=torch.ones(3, 2), batch_size=[3]).memmap_like(tmp_path / "r.tdz")
    s = tb.TensorDict(a=torch.ones(3, 2), batch_size=[3]).memmap_like(tmp_path / "s.tdz")
    assert summary(s) == summary(r)
    s["a"][1] = 5.0  # writes reach the archive, as the reference's
    r["a"][1] = 5.0
    assert load(ref, tmp_path / "s.tdz")["a"].tolist() == load(ref, tmp_path / "r.tdz")["a"].tolist()


# ---------------------------------------------------------------------------------------------- append_memmap
def _rows(lib: Any, start: int, n: int) -> Any:
    return lib.TensorDict(
        {
            "a": torch.arange(start, start + n, dtype=torch.float32)[:, None].expand(n, 2),
            "n": {"b": torch.arange(start, start + n)},
            "s": "same",
        },
        batch_size=[n],
    )


@pytest.mark.parametrize(("writer", "appender"), [("ref", "tb"), ("tb", "ref"), ("tb", "tb")])
def test_append_across_libraries(ref, tb, tmp_path, writer, appender):
    libs = {"ref": ref, "tb": tb}
    save(libs[writer], _rows(libs[writer], 0, 3), tmp_path / "f")
    libs[appender].append_memmap(tmp_path / "f", _rows(libs[appender], 3, 2))
    save(ref, _rows(ref, 0, 5), tmp_path / "expected")
    expected = summary(load(ref, tmp_path / "expected"))
    assert summary(load(ref, tmp_path / "f")) == expected
    assert summary(load(tb, tmp_path / "f")) == summary(load(tb, tmp_path / "expected"))


@pytest.mark.parametrize("bad", ["dtype", "shape", "keys", "value", "batch"])
def test_append_refusals_match(ref, tb, tmp_path, bad):
    def rows(lib: Any) -> Any:
        td = _rows(lib, 3, 2)
        if bad == "dtype":
            td["a"] = td["a"].double()
        elif bad == "shape":
            td["a"] = torch.zeros(2, 3)
        elif bad == "keys":
            del td["s"]
        elif bad == "value":
            td["s"] = "other"
        else:
            td = lib.TensorDict(
                {"a": torch.zeros(2, 4, 2), "n": {"b": torch.zeros(2, 4, dtype=torch.long)}, "s": "same"},
                batch_size=[2, 4],
            )
        return td

    for lib, name in ((ref, "r"), (tb, "s")):
        save(lib, _rows(lib, 0, 3), tmp_path / name)
        before = folder_content(tmp_path / name)
        with pytest.raises(ValueError):  # noqa: PT011  # both libraries: ValueError, files untouched
            lib.append_memmap(tmp_path / name, rows(lib))
        assert folder_content(tmp_path / name) == before


# ---------------------------------------------------------------------------------------------- safetensors
@pytest.fixture
def safetensors() -> Any:
    """The safetensors module; the test skips when the safetensors extra is not installed."""
    return pytest.importorskip("safetensors", reason="safetensors (the safetensors extra) is not installed")


def _st_cases(lib: Any) -> dict[str, Any]:
    return {
        "flat": lib.TensorDict({"w": torch.linspace(-1, 1, 12).view(3, 4), "b": torch.arange(3)}, batch_size=[3]),
        "nested": lib.TensorDict({"layer": {"w": torch.ones(2, 2), "sub": {"b": torch.zeros(2)}}}, batch_size=[2]),
        "dtypes": lib.TensorDict(
            {
                str(d).split(".")[1]: torch.arange(4).to(d)
                for d in (
                    torch.bfloat16,
                    torch.float16,
                    torch.float64,
                    torch.int8,
                    torch.uint8,
                    torch.int16,
                    torch.int32,
                    torch.bool,
                    torch.complex64,
                )
            },
            batch_size=[4],
        ),
        "names": lib.TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3], names=["b", "t"]),
        "non_tensor": lib.TensorDict(
            {
                "x": torch.zeros(2),
                "meta": lib.NonTensorData({"lr": 0.1, "tags": ["a"]}),
                "n": {"label": lib.NonTensorData("y")},
            },
            batch_size=[2],
        ),
        "lazy": lib.lazy_stack([lib.TensorDict({"x": torch.zeros(3)}), lib.TensorDict({"x": torch.ones(3)})], 0),
        "scalar": lib.TensorDict({"x": torch.tensor(3.0)}),
        "empty_leaf": lib.TensorDict({"x": torch.zeros(2, 0)}, batch_size=[2]),
    }


_ST_IDS = ["flat", "nested", "dtypes", "names", "non_tensor", "lazy", "scalar", "empty_leaf"]


@pytest.mark.parametrize("case", _ST_IDS)
def test_safetensors_both_ways(ref, tb, tmp_path, case, safetensors):
    ref.to_safetensors(_st_cases(ref)[case], tmp_path / "ref.safetensors")
    expected = summary(ref.from_safetensors(tmp_path / "ref.safetensors"))
    assert summary(tb.from_safetensors(tmp_path / "ref.safetensors")) == expected
    tb.to_safetensors(_st_cases(tb)[case], tmp_path / "sub.safetensors")
    assert summary(ref.from_safetensors(tmp_path / "sub.safetensors")) == expected
    assert summary(tb.from_safetensors(tmp_path / "sub.safetensors")) == expected


def test_safetensors_same_tensors_and_metadata(ref, tb, tmp_path, safetensors):
    safe_open = safetensors.safe_open
    ref.to_safetensors(_st_cases(ref)["nested"], tmp_path / "r.safetensors")
    tb.to_safetensors(_st_cases(tb)["nested"], tmp_path / "s.safetensors")
    with safe_open(tmp_path / "r.safetensors", "pt") as r, safe_open(tmp_path / "s.safetensors", "pt") as s:
        assert sorted(s.keys()) == sorted(r.keys()) == ["layer.sub.b", "layer.w"]
        assert s.metadata() == r.metadata()


def test_plain_checkpoint_loads_alike(ref, tb, tmp_path, safetensors):
    from safetensors.torch import save_file

    save_file(
        {"0.weight": torch.ones(4, 3), "0.bias": torch.zeros(4), "scale": torch.tensor(2.0)}, tmp_path / "m.safetensors"
    )
    assert summary(tb.from_safetensors(tmp_path / "m.safetensors")) == summary(
        ref.from_safetensors(tmp_path / "m.safetensors")
    )


@pytest.mark.parametrize("bad", ["object", "nested_tensor", "dup_name", "non_tensor_root"])
def test_safetensors_refusals_match(ref, tb, tmp_path, bad, safetensors):
    def make(lib: Any) -> Any:
        if bad == "object":
            return lib.TensorDict({"a": {"b": lib.NonTensorData(object())}})
        if bad == "nested_tensor":
            return lib.TensorDict({"a": torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])})
        if bad == "dup_name":
            return lib.TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.zeros(1)}})
        return lib.NonTensorData("x")

    errors = []
    for lib in (ref, tb):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises((TypeError, ValueError)) as info:
                lib.to_safetensors(make(lib), tmp_path / "x.safetensors")
        errors.append(type(info.value))
    assert errors[0] is errors[1]
    assert not (tmp_path / "x.safetensors").exists()
