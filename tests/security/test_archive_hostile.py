"""Archives (``.tdz``) and repr strings that declare more than they hold: refused before allocating.

A forged archive is built with :mod:`zipfile`, then its size fields are patched (local header and central
directory). Memory is measured in a fresh process (its peak resident size), so a read of a declared 2 GiB
shows. Every probe runs in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from tensorbatch import TensorDict, parse_tensor_dict_string

from ._files import tree

GiB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


def _meta(shape: list[int]) -> bytes:
    return json.dumps(
        {
            "a": {"device": "cpu", "shape": shape, "dtype": "torch.uint8", "is_nested": False},
            "shape": [],
            "device": "cpu",
            "_type": "<class 'tensordict._td.TensorDict'>",
            "_format_version": 1,
            "_class": "tensordict:TensorDict",
        }
    ).encode()


def _forge(path: Path, payload: bytes, method: int, declared: int) -> Path:
    """An archive whose leaf ``a`` holds ``payload`` (``method``) but declares ``declared`` bytes everywhere."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("meta.json"), _meta([declared]))
        info = zipfile.ZipInfo("a.memmap")
        info.compress_type = method
        zf.writestr(info, payload)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        entry, start = zf.getinfo("a.memmap"), zf.start_dir
    struct.pack_into("<I", raw, entry.header_offset + 22, declared)  # the local header's size
    pos = start
    while raw[pos : pos + 4] == b"PK\x01\x02":  # the central directory's records
        name_len, extra_len, comment_len = struct.unpack_from("<3H", raw, pos + 28)
        if raw[pos + 46 : pos + 46 + name_len] == b"a.memmap":
            struct.pack_into("<I", raw, pos + 24, declared)
        pos += 46 + name_len + extra_len + comment_len
    path.write_bytes(bytes(raw))
    return path


def _load_in_fresh_process(path: Path) -> tuple[str, int]:
    """Load ``path`` in a new interpreter: (the error message, the peak memory growth in MiB)."""
    script = textwrap.dedent(f"""
        import resource, torch, tensorbatch
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            tensorbatch.load_memmap({str(path)!r})
            message = "loaded"
        except Exception as err:
            message = f"{{type(err).__name__}}: {{err}}"
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
        print(message)
        print(grown)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, check=True
    )
    message, grown = done.stdout.strip().rsplit("\n", 1)
    return message, int(grown)


class TestForgedArchives:
    def test_stored_entry_declaring_more_than_its_payload(self, tmp_path):
        path = _forge(tmp_path / "x.tdz", os.urandom(2 << 20), zipfile.ZIP_STORED, 2 * GiB - 1)
        with pytest.raises(
            RuntimeError,
            match=r"x.tdz: the entry 'a.memmap' is corrupted \(it declares "
            r"2147483647 bytes but its uncompressed payload holds 2097152\)",
        ):
            TensorDict.load_memmap(path)

    def test_deflated_entry_declaring_past_deflates_bound(self, tmp_path):
        path = _forge(tmp_path / "x.tdz", os.urandom(1 << 20), zipfile.ZIP_DEFLATED, 2 * GiB - 1)
        with pytest.raises(RuntimeError, match=r"the entry 'a\.memmap' is corrupted .*deflated bytes cannot hold"):
            TensorDict.load_memmap(path)

    @pytest.mark.parametrize(
        "method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["deflate", "bzip2", "lzma"]
    )
    def test_compressed_entry_declaring_2gib_is_streamed(self, tmp_path, method):
        # within deflate's bound (3 MiB of payload can hold 3 GiB): memory must follow the real data
        path = _forge(tmp_path / "x.tdz", os.urandom(3 << 20), method, 2 * GiB - 1)
        before = tree(tmp_path)
        message, grown = _load_in_fresh_process(path)
        assert message.startswith("RuntimeError: ")
        assert "x.tdz: the entry 'a.memmap' is corrupted" in message
        assert grown < 256, f"loading grew the process by {grown} MiB"
        assert tree(tmp_path) == before

    def test_compressed_entry_holding_more_than_declared(self, tmp_path):
        path = _forge(tmp_path / "x.tdz", bytes(4096), zipfile.ZIP_DEFLATED, 100)
        with pytest.raises(RuntimeError, match=r"the entry 'a\.memmap' is corrupted"):
            TensorDict.load_memmap(path)

    def test_honest_compressed_archive_still_loads(self, tmp_path):
        td = TensorDict({"a": torch.zeros(1 << 20), "b": torch.arange(10)}, batch_size=[])
        for compression in ("deflate", "bzip2", "lzma"):
            path = tmp_path / f"{compression}.tdz"
            td.memmap(path, compression=compression)
            loaded = TensorDict.load_memmap(path)
            assert loaded["a"].shape == (1 << 20,)
            assert loaded["b"].tolist() == list(range(10))

    def test_unpack_refuses_forged_sizes_without_writing_outside(self, tmp_path):
        from tensorbatch import unpack_memmap

        path = _forge(tmp_path / "x.tdz", os.urandom(1 << 20), zipfile.ZIP_STORED, 2 * GiB - 1)
        with pytest.raises(RuntimeError, match=r"a\.memmap"):
            unpack_memmap(path, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        assert sorted(os.listdir(tmp_path)) == ["x.tdz"]


def _repr_of(shape: str, dtype: str = "float32", key: str = "b") -> str:
    return (
        f"TensorDict(batch_size=[], device=None)\n"
        f"`-- n: TensorDict(batch_size=[])\n"
        f"    `-- {key}: Tensor(shape=[{shape}], dtype={dtype}, device=cpu)"
    )


class TestReprParserBound:
    def test_a_huge_declared_shape_is_refused(self):
        with pytest.raises(
            ValueError,
            match=r"the tensor at key \('n', 'b'\) of shape \[1073741824\] "
            r"\(1073741824 elements\) would pass max_numel",
        ):
            parse_tensor_dict_string(_repr_of("1073741824"))

    def test_the_bound_is_over_all_leaves(self):
        text = (
            "TensorDict(batch_size=[], device=None)\n"
            "|-- a: Tensor(shape=[10000000], dtype=float32, device=cpu)\n"
            "`-- c: Tensor(shape=[10000000], dtype=float32, device=cpu)"
        )
        with pytest.raises(ValueError, match=r"key 'c' .* \(6777216 elements left of the bound\)"):
            parse_tensor_dict_string(text)
        assert parse_tensor_dict_string(text, max_numel=2 * 10**7)["c"].shape == (10**7,)

    def test_the_bound_can_be_set_or_lifted(self):
        with pytest.raises(ValueError, match="would pass max_numel"):
            parse_tensor_dict_string(_repr_of("3, 4"), max_numel=11)
        assert parse_tensor_dict_string(_repr_of("3, 4"), max_numel=12)["n", "b"].shape == (3, 4)
        assert parse_tensor_dict_string(_repr_of("4096, 4097"), max_numel=None)["n", "b"].shape == (4096, 4097)

    def test_within_the_default_bound(self):
        td = TensorDict({"x": torch.ones(16, 1 << 20)}, batch_size=[16])
        assert parse_tensor_dict_string(repr(td))["x"].shape == (16, 1 << 20)

    @pytest.mark.parametrize("dtype", ["manual_seed", "Tensor", "nonsense"])
    def test_unknown_dtype_is_refused(self, dtype):
        with pytest.raises(ValueError, match=rf"key \('n', 'b'\) has an unknown dtype '{dtype}'"):
            parse_tensor_dict_string(_repr_of("3", dtype=dtype))
