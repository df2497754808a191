"""Memory-mapped persistence: MemoryMappedTensor and the TensorDict methods that save and load folders.

Every file lives under pytest's ``tmp_path``. Library bugs are strict xfails whose reason starts with
``bug:``; each states what should happen.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import re
import warnings
from concurrent.futures import Future
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import tensorbatch
from tensorbatch import LazyStackedTensorDict, MemoryMappedTensor, NonTensorData, NonTensorStack, TensorDict, lazy_stack

ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def bug(reason: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"bug: {reason}")


def files(folder: Path) -> list[str]:
    """Every path under ``folder``, relative, sorted (folders included)."""
    return sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*"))


def bits(t: torch.Tensor) -> bytes:
    """The raw bytes of ``t`` (exact, NaN-safe comparison for every dtype)."""
    return t.detach().as_subclass(torch.Tensor).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3)) -> torch.Tensor:
    """Distinct, non-trivial values of ``dtype`` (exactly representable in every dtype)."""
    n = 1
    for s in shape:
        n *= s
    base = torch.arange(n, dtype=torch.float64).reshape(shape)
    if dtype == torch.bool:
        return base.remainder(2) == 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return (base.remainder(7) + 1).to(dtype)


def make_td() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).reshape(3, 4),
            "b": torch.tensor([1, 2, 3]),
            "c": torch.tensor([[True], [False], [True]]),
            "nested": {"d": torch.ones(3, 2, dtype=torch.float64), "deep": {"e": torch.arange(3, dtype=torch.int16)}},
        },
        batch_size=[3],
    )


def assert_tensors_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert bits(got) == bits(want)


def assert_same_td(got: Any, want: Any) -> None:
    """Same batch size, keys and tensor values (leaf classes are not compared)."""
    assert got.batch_size == want.batch_size
    got_keys = set(got.keys(include_nested=True, leaves_only=True))
    assert got_keys == set(want.keys(include_nested=True, leaves_only=True))
    for key in got_keys:
        assert_tensors_equal(got.get(key), want.get(key))


def rewrite_meta(file: Path, edit: Any) -> None:
    meta = json.loads(file.read_text())
    edit(meta)
    file.write_text(json.dumps(meta))


# ====================================================================================== MemoryMappedTensor
class TestFromTensor:
    def test_to_file(self, tmp_path):
        src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        file = tmp_path / "x.memmap"
        m = MemoryMappedTensor.from_tensor(src, filename=file)
        assert type(m) is MemoryMappedTensor
        assert m.filename == str(file)
        assert isinstance(m.filename, str)
        assert m.shape == (3, 4)
        assert m.dtype == torch.float32
        assert torch.equal(m, src)
        assert file.read_bytes() == bits(src)  # the file holds exactly the raw data

    def test_str_filename_and_parent_created(self, tmp_path):
        file = tmp_path / "new" / "deeper" / "x.memmap"
        m = MemoryMappedTensor.from_tensor(torch.ones(2), filename=str(file))
        assert m.filename == str(file)
        assert file.stat().st_size == 8

    def test_writes_reach_the_file(self, tmp_path):
        file = tmp_path / "x.memmap"
        m = MemoryMappedTensor.from_tensor(torch.zeros(4), filename=file)
        m[1:3] = 5.0
        again = MemoryMappedTensor.from_filename(file, torch.float32, [4])
        assert again.tolist() == [0.0, 5.0, 5.0, 0.0]

    def test_noncontiguous_input(self, tmp_path):
        src = torch.arange(6.0).reshape(2, 3).t()
        m = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "x.memmap")
        assert m.shape == (3, 2)
        assert torch.equal(m, src)
        assert (tmp_path / "x.memmap").read_bytes() == bits(src)

    def test_shared_memory_without_filename(self):
        src = torch.arange(5)
        m = MemoryMappedTensor.from_tensor(src)
        assert type(m) is MemoryMappedTensor
        assert m.is_shared()
        assert torch.equal(m, src)
        m[0] = 100
        assert src[0] == 0  # a copy
        with pytest.raises(RuntimeError, match="no file"):
            m.filename  # noqa: B018

    def test_existsok(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(4.0), filename=file)
        with pytest.raises(RuntimeError, match="already exists") as info:
            MemoryMappedTensor.from_tensor(torch.zeros(2), filename=file)
        assert str(file) in str(info.value)
        assert "existsok" in str(info.value)
        assert file.stat().st_size == 16  # untouched
        m = MemoryMappedTensor.from_tensor(torch.full((2,), 7, dtype=torch.int16), filename=file, existsok=True)
        assert m.tolist() == [7, 7]
        assert file.stat().st_size == 4  # rewritten to the new size

    def test_copy_existing_refused(self, tmp_path):
        a = MemoryMappedTensor.from_tensor(torch.arange(3.0), filename=tmp_path / "a.memmap")
        with pytest.raises(RuntimeError, match="copy_existing=True") as info:
            MemoryMappedTensor.from_tensor(a, filename=tmp_path / "b.memmap")
        assert str(tmp_path / "a.memmap") in str(info.value)
        assert not (tmp_path / "b.memmap").exists()

    def test_copy_existing_copies(self, tmp_path):
        a = MemoryMappedTensor.from_tensor(torch.arange(3.0), filename=tmp_path / "a.memmap")
        b = MemoryMappedTensor.from_tensor(a, filename=tmp_path / "b.memmap", copy_existing=True)
        assert b.filename == str(tmp_path / "b.memmap")
        assert torch.equal(a, b)
        b[0] = 42.0
        assert a[0] == 0.0  # another file

    def test_same_file_returns_the_input(self, tmp_path):
        a = MemoryMappedTensor.from_tensor(torch.arange(3.0), filename=tmp_path / "a.memmap")
        assert MemoryMappedTensor.from_tensor(a, filename=tmp_path / "a.memmap") is a

    def test_copy_data_false_allocates_zeros(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.ones(2, 3), filename=tmp_path / "x.memmap", copy_data=False)
        assert m.shape == (2, 3)
        assert torch.equal(m, torch.zeros(2, 3))

    def test_shape_argument(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(
            torch.empty(0, dtype=torch.int32), filename=tmp_path / "x.memmap", copy_data=False, shape=(4, 5)
        )
        assert m.shape == (4, 5)
        assert m.dtype == torch.int32
        assert (tmp_path / "x.memmap").stat().st_size == 80


class TestFromFilename:
    def test_maps_the_file(self, tmp_path):
        file = tmp_path / "x.memmap"
        file.write_bytes(bits(torch.arange(6, dtype=torch.int64)))
        m = MemoryMappedTensor.from_filename(file, torch.int64, [2, 3])
        assert type(m) is MemoryMappedTensor
        assert m.filename == str(file)
        assert m.tolist() == [[0, 1, 2], [3, 4, 5]]

    def test_index(self, tmp_path):
        file = tmp_path / "x.memmap"
        file.write_bytes(bits(torch.arange(6, dtype=torch.int64)))
        m = MemoryMappedTensor.from_filename(file, torch.int64, (6,), index=slice(2, 4))
        assert type(m) is MemoryMappedTensor
        assert m.filename == str(file)
        assert m.tolist() == [2, 3]
        m[0] = -1  # a view of the file
        assert MemoryMappedTensor.from_filename(file, torch.int64, (6,))[2] == -1

    @pytest.mark.parametrize("shape", [(4,), (2, 3), (20,)], ids=["shorter", "other_shape", "longer"])
    def test_size_mismatch_names_the_file(self, tmp_path, shape):
        file = tmp_path / "x.memmap"
        file.write_bytes(bits(torch.arange(5, dtype=torch.float32)))  # 20 bytes
        with pytest.raises(RuntimeError, match="truncated") as info:
            MemoryMappedTensor.from_filename(file, torch.float32, shape)
        assert str(file) in str(info.value)
        assert "20 bytes" in str(info.value)

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            MemoryMappedTensor.from_filename(tmp_path / "nothing.memmap", torch.float32, [3])


def _shape_forms() -> list[Any]:
    return [
        pytest.param(((2, 3),), id="tuple"),
        pytest.param(([2, 3],), id="list"),
        pytest.param((torch.Size([2, 3]),), id="size"),
        pytest.param((2, 3), id="varargs"),
    ]


class TestConstructors:
    @pytest.mark.parametrize("args", _shape_forms())
    @pytest.mark.parametrize("with_file", [False, True], ids=["shared", "file"])
    @pytest.mark.parametrize(("name", "value"), [("zeros", 0), ("ones", 1), ("empty", None)])
    def test_shape_forms(self, tmp_path, args, with_file, name, value):
        kwargs = {"filename": tmp_path / "x.memmap"} if with_file else {}
        m = getattr(MemoryMappedTensor, name)(*args, **kwargs)
        assert type(m) is MemoryMappedTensor
        assert m.shape == (2, 3)
        assert m.dtype == torch.get_default_dtype()
        if value is not None:
            assert torch.equal(m, torch.full((2, 3), float(value)))
        if with_file:
            assert m.filename == str(tmp_path / "x.memmap")
            assert (tmp_path / "x.memmap").stat().st_size == 24
        else:
            assert m.is_shared()
            with pytest.raises(RuntimeError, match="no file"):
                m.filename  # noqa: B018

    @pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64, torch.bfloat16], ids=str)
    def test_dtype(self, tmp_path, dtype):
        z = MemoryMappedTensor.zeros(3, dtype=dtype, filename=tmp_path / "z.memmap")
        o = MemoryMappedTensor.ones((3,), dtype=dtype, filename=tmp_path / "o.memmap")
        assert (z.dtype, o.dtype) == (dtype, dtype)
        assert torch.equal(z, torch.zeros(3, dtype=dtype))
        assert torch.equal(o, torch.ones(3, dtype=dtype))
        assert (tmp_path / "o.memmap").stat().st_size == 3 * o.element_size()

    @pytest.mark.parametrize(
        ("args", "kwargs"),
        [
            (((2, 3), 7), {}),
            (((2, 3),), {"fill_value": 7}),
            ((2, 3), {"fill_value": 7}),
            (([2, 3], 7), {"dtype": torch.int64}),
        ],
        ids=["positional", "keyword", "varargs_keyword", "dtype"],
    )
    def test_full(self, tmp_path, args, kwargs):
        m = MemoryMappedTensor.full(*args, filename=tmp_path / "f.memmap", **kwargs)
        dtype = kwargs.get("dtype", torch.get_default_dtype())
        assert m.dtype == dtype
        assert torch.equal(m, torch.full((2, 3), 7, dtype=dtype))
        assert torch.equal(MemoryMappedTensor.from_filename(tmp_path / "f.memmap", dtype, (2, 3)), m)

    def test_unknown_keyword(self):
        with pytest.raises(TypeError, match="unexpected"):
            MemoryMappedTensor.zeros(2, foo=1)

    def test_existing_file(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.full((4,), 3.0, filename=file)
        with pytest.raises(RuntimeError, match="already exists"):
            MemoryMappedTensor.zeros(4, filename=file)
        z = MemoryMappedTensor.zeros(4, filename=file, existsok=True)
        assert z.tolist() == [0.0] * 4  # the old values are gone

    def test_empty_shapes(self, tmp_path):
        m = MemoryMappedTensor.zeros(0, 3, filename=tmp_path / "x.memmap")
        assert m.shape == (0, 3)
        assert (tmp_path / "x.memmap").stat().st_size == 0
        s = MemoryMappedTensor.empty(0)
        assert s.shape == (0,)


class TestFromStorage:
    def test_file_storage(self, tmp_path):
        file = tmp_path / "x.memmap"
        file.write_bytes(bits(torch.arange(6.0)))
        storage = torch.UntypedStorage.from_file(str(file), shared=True, nbytes=24)
        m = MemoryMappedTensor.from_storage(storage, shape=(2, 3), dtype=torch.float32)
        assert type(m) is MemoryMappedTensor
        assert m.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert m.filename == str(file)  # read from the storage
        m[0, 0] = 9.0
        assert MemoryMappedTensor.from_filename(file, torch.float32, (6,))[0] == 9.0

    def test_explicit_filename_and_index(self, tmp_path):
        file = tmp_path / "x.memmap"
        file.write_bytes(bits(torch.arange(6.0)))
        storage = torch.UntypedStorage.from_file(str(file), shared=True, nbytes=24)
        m = MemoryMappedTensor.from_storage(storage, shape=(2, 3), dtype=torch.float32, filename=file, index=1)
        assert type(m) is MemoryMappedTensor
        assert m.tolist() == [3.0, 4.0, 5.0]
        assert m.filename == str(file)

    def test_default_dtype_is_bytes(self, tmp_path):
        storage = torch.UntypedStorage(4)
        m = MemoryMappedTensor.from_storage(storage)
        assert m.dtype == torch.uint8
        assert m.shape == (4,)


class TestTensorBehaviour:
    def test_indexing_keeps_the_type_and_the_file(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.arange(12.0).reshape(3, 4), filename=tmp_path / "x.memmap")
        for view in (m[1], m[1:], m[:, 2], m[..., ::2], m[0, 0]):
            assert type(view) is MemoryMappedTensor
            assert view.filename == m.filename
        m[1:][0, 0] = -5.0  # views write through
        assert m[1, 0] == -5.0

    def test_advanced_indexing_copies(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.arange(6.0), filename=tmp_path / "x.memmap")
        picked = m[[0, 5]]
        assert picked.tolist() == [0.0, 5.0]
        assert pickle.loads(pickle.dumps(picked)).tolist() == [0.0, 5.0]
        masked = m[m > 3]
        assert pickle.loads(pickle.dumps(masked)).tolist() == [4.0, 5.0]
        picked[0] = 99.0  # a copy: the file is untouched
        assert m[0] == 0.0

    def test_other_operations_return_plain_tensors(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.arange(6.0), filename=tmp_path / "x.memmap")
        for out in (m + 1, m * 2, m.sum(), m.clone(), torch.stack([m, m]), m.to(torch.float64), -m):
            assert type(out) is torch.Tensor
        assert (m + 1).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert m.sum().item() == 15.0

    def test_repr_is_a_tensor_repr_and_filename_names_the_file(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.arange(2.0), filename=tmp_path / "x.memmap")
        assert repr(m) == "MemoryMappedTensor([0., 1.])"  # tensordict's repr: torch's, with the class name
        assert m.filename.endswith("x.memmap")


class TestPickle:
    def test_sends_the_file_not_the_data(self, tmp_path):
        big = MemoryMappedTensor.zeros(1_000_000, filename=tmp_path / "big.memmap")  # 4 MB
        payload = pickle.dumps(big)
        assert len(payload) < 1000
        back = pickle.loads(payload)
        assert type(back) is MemoryMappedTensor
        assert back.filename == big.filename
        assert back.shape == big.shape
        back[5] = 3.0
        assert big[5] == 3.0  # the same file
        big[7] = 4.0
        assert back[7] == 4.0

    @pytest.mark.parametrize(
        "index",
        [slice(10, 20), slice(None, None, 3), (slice(None), 2), 7],
        ids=["slice", "step", "column", "row"],
    )
    def test_view_maps_the_same_region(self, tmp_path, index):
        m = MemoryMappedTensor.from_tensor(torch.arange(400.0).reshape(40, 10), filename=tmp_path / "x.memmap")
        view = m[index]
        payload = pickle.dumps(view)
        assert len(payload) < 1000
        back = pickle.loads(payload)
        assert type(back) is MemoryMappedTensor
        assert back.shape == view.shape
        assert torch.equal(back, view)
        back.fill_(-1.0)
        assert bool((m[index] == -1.0).all())
        assert int((m == -1.0).sum()) == view.numel()  # nothing else was written

    @pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
    def test_another_process_writes_through(self, tmp_path):
        m = MemoryMappedTensor.zeros(100_000, filename=tmp_path / "x.memmap")
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_write_in_child, args=(child, pickle.dumps(m[10:20])))
        proc.start()
        assert parent.poll(60), "the child process did not answer"
        assert parent.recv() == (str(tmp_path / "x.memmap"), (10,))
        proc.join(60)
        assert proc.exitcode == 0
        assert m[10:20].tolist() == [float(i) for i in range(10)]
        assert m[:10].tolist() == [0.0] * 10
        assert m[20:30].tolist() == [0.0] * 10

    def test_shared_memory_tensor(self):
        m = MemoryMappedTensor.from_tensor(torch.arange(4))
        back = pickle.loads(pickle.dumps(m))
        assert type(back) is MemoryMappedTensor
        assert back.tolist() == [0, 1, 2, 3]

    def test_empty(self, tmp_path):
        m = MemoryMappedTensor.from_tensor(torch.empty(0, 3), filename=tmp_path / "x.memmap")
        back = pickle.loads(pickle.dumps(m))
        assert back.shape == (0, 3)


def _write_in_child(conn: Any, payload: bytes) -> None:
    view = pickle.loads(payload)  # maps the file again: no data came through the pipe
    view.copy_(torch.arange(10.0))
    conn.send((view.filename, tuple(view.shape)))
    conn.close()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_dtype_round_trips(tmp_path, dtype):
    src = sample(dtype)
    m = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "x.memmap")
    assert m.dtype == dtype
    assert (tmp_path / "x.memmap").stat().st_size == src.numel() * src.element_size()
    back = MemoryMappedTensor.from_filename(tmp_path / "x.memmap", dtype, src.shape)
    assert_tensors_equal(back, src)
    assert_tensors_equal(pickle.loads(pickle.dumps(m)), src)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2, 2)], ids=str)
def test_empty_tensors(tmp_path, shape):
    m = MemoryMappedTensor.from_tensor(torch.empty(shape), filename=tmp_path / "x.memmap")
    assert m.shape == shape
    assert (tmp_path / "x.memmap").stat().st_size == 0
    assert MemoryMappedTensor.from_filename(tmp_path / "x.memmap", torch.float32, shape).shape == shape


# ====================================================================================== TensorDict.memmap
class TestMemmap:
    def test_flat_and_nested(self, tmp_path):
        td = make_td()
        m = td.memmap(tmp_path / "td")
        assert type(m) is TensorDict
        assert m is not td
        assert m.is_locked
        assert m["nested"].is_locked
        assert m.is_memmap()
        assert not td.is_memmap()
        assert m.device == torch.device("cpu")
        assert_same_td(m, td)
        for key, leaf in m.items(include_nested=True, leaves_only=True):
            path = (key,) if isinstance(key, str) else key
            assert type(leaf) is MemoryMappedTensor
            assert leaf.filename == str(tmp_path.joinpath("td", *path[:-1], path[-1] + ".memmap"))
        assert files(tmp_path / "td") == [
            "a.memmap", "b.memmap", "c.memmap", "meta.json",
            "nested", "nested/d.memmap", "nested/deep", "nested/deep/e.memmap", "nested/deep/meta.json",
            "nested/meta.json",
        ]  # fmt: skip
        assert (tmp_path / "td" / "a.memmap").read_bytes() == bits(td["a"])

    def test_meta_json(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        meta = json.loads((tmp_path / "td" / "meta.json").read_text())
        assert meta["a"] == {"device": "cpu", "shape": [3, 4], "dtype": "torch.float32", "is_nested": False}
        assert meta["c"]["dtype"] == "torch.bool"
        assert meta["nested"] == {"type": "TensorDict"}
        assert meta["shape"] == [3]
        assert meta["device"] == "cpu"
        assert meta["_class"] == "tensordict:TensorDict"

    def test_writes_through_the_result(self, tmp_path):
        m = make_td().memmap(tmp_path / "td")
        m["a"][0] = -1.0  # locked, but leaves are writable in place
        m.set_(("nested", "deep", "e"), torch.tensor([7, 8, 9], dtype=torch.int16))
        back = TensorDict.load_memmap(tmp_path / "td")
        assert back["a"][0].tolist() == [-1.0] * 4
        assert back["nested", "deep", "e"].tolist() == [7, 8, 9]

    def test_device_and_empty_nodes(self, tmp_path):
        td = TensorDict({"a": torch.ones(2), "empty": {}}, batch_size=[2], device="cpu")
        m = td.memmap(tmp_path / "td")
        assert m.device == torch.device("cpu")
        assert isinstance(m["empty"], TensorDict)
        assert m["empty"].batch_size == (2,)
        assert list(m["empty"].keys()) == []

    def test_zero_dim_batch_and_noncontiguous_leaf(self, tmp_path):
        td = TensorDict({"s": torch.tensor(3.5), "t": torch.arange(6.0).reshape(2, 3).t()}, batch_size=[])
        m = td.memmap(tmp_path / "td")
        assert m.batch_size == ()
        assert m["s"].item() == 3.5
        assert torch.equal(m["t"], td["t"])

    @pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
    def test_every_dtype(self, tmp_path, dtype):
        td = TensorDict({"x": sample(dtype), "n": {"y": sample(dtype, (2,))}}, batch_size=[2])
        m = td.memmap(tmp_path / "td")
        back = TensorDict.load_memmap(tmp_path / "td")
        for out in (m, back):
            assert out["x"].dtype == dtype
            assert_tensors_equal(out["x"], td["x"])
            assert_tensors_equal(out["n", "y"], td["n", "y"])

    def test_complex32(self, tmp_path):
        src = torch.arange(4.0).to(torch.complex32)
        m = TensorDict({"c": src}, batch_size=[4]).memmap(tmp_path / "td")
        assert_tensors_equal(m["c"], src)

    def test_nan_and_inf_bits(self, tmp_path):
        src = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
        m = TensorDict({"x": src}, batch_size=[4]).memmap(tmp_path / "td")
        assert bits(m["x"]) == bits(src)

    def test_empty_leaves(self, tmp_path):
        td = TensorDict({"a": torch.ones(0, 3), "b": torch.ones(0, dtype=torch.int64)}, batch_size=[0])
        m = td.memmap(tmp_path / "td")
        assert m["a"].shape == (0, 3)
        assert m["b"].dtype == torch.int64
        assert (tmp_path / "td" / "a.memmap").stat().st_size == 0
        assert TensorDict.load_memmap(tmp_path / "td")["a"].shape == (0, 3)

    def test_empty_td(self, tmp_path):
        m = TensorDict({}, batch_size=[2]).memmap(tmp_path / "td")
        assert m.batch_size == (2,)
        assert list(m.keys()) == []
        assert files(tmp_path / "td") == ["meta.json"]
        assert not m.is_memmap()  # nothing to map

    def test_returns_the_loaded_folder(self, tmp_path):
        m = make_td().memmap(tmp_path / "td")
        assert m.saved_path == str(tmp_path / "td")

    def test_relative_prefix(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        m = make_td().memmap("rel")
        assert m.saved_path == str(tmp_path / "rel")
        assert_same_td(m, make_td())
        assert (tmp_path / "rel" / "a.memmap").read_bytes() == bits(make_td()["a"])

    def test_relative_prefix_gives_absolute_file_names(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        td = make_td()
        td.memmap_("rel")
        assert td["a"].filename == str(tmp_path / "rel" / "a.memmap")
        assert td.memmap_("rel") is td


class TestMemmapNonTensor:
    def test_str_dict_list(self, tmp_path):
        td = TensorDict(
            {
                "a": torch.ones(2),
                "s": "hello",
                "n": {
                    "d": NonTensorData({"k": [1, 2], "z": None}, batch_size=[2]),
                    "i": NonTensorData(3, batch_size=[2]),
                },
                "l": NonTensorStack.from_list(["x", "y"]),
                "plain_list": ["p", "q"],  # a list of str becomes a NonTensorStack
            },
            batch_size=[2],
        )
        m = td.memmap(tmp_path / "td")
        assert type(m.get("plain_list")) is NonTensorStack
        assert m.get("plain_list").tolist() == ["p", "q"]
        assert json.loads((tmp_path / "td" / "plain_list" / "meta.json").read_text())["data"] == ["p", "q"]
        assert type(m.get("s")) is NonTensorData
        assert m["s"] == "hello"
        assert m.get("s").batch_size == (2,)
        assert m["n", "d"] == {"k": [1, 2], "z": None}
        assert m["n", "i"] == 3
        assert type(m.get("l")) is NonTensorStack
        assert m.get("l").tolist() == ["x", "y"]
        assert m.get("l").batch_size == (2,)
        assert "s/meta.json" in files(tmp_path / "td")
        assert json.loads((tmp_path / "td" / "s" / "meta.json").read_text())["data"] == "hello"
        assert json.loads((tmp_path / "td" / "l" / "meta.json").read_text())["data"] == ["x", "y"]
        back = TensorDict.load_memmap(tmp_path / "td")
        assert back["s"] == "hello"
        assert back.get("l").tolist() == ["x", "y"]

    def test_nested_list_stack(self, tmp_path):
        td = TensorDict({"s": NonTensorStack.from_list([["a", "b"], ["c", "d"]])}, batch_size=[2])
        back = td.memmap(tmp_path / "td")
        assert type(back.get("s")) is NonTensorStack
        assert back.get("s").tolist() == [["a", "b"], ["c", "d"]]

    def test_non_json_refused_without_allow_pickle(self, tmp_path):
        td = TensorDict({"a": torch.ones(2), "n": {"f": NonTensorData(Fraction(1, 3), batch_size=[2])}}, [2])
        with pytest.raises(TypeError, match="allow_pickle=True") as info:
            td.memmap(tmp_path / "td")
        assert "('n', 'f')" in str(info.value)  # the full key path
        assert "Fraction" in str(info.value)
        assert not (tmp_path / "td").exists()
        assert os.listdir(tmp_path) == []  # no temporary folder left behind

    def test_pickled_value(self, tmp_path):
        td = TensorDict({"a": torch.ones(2), "n": {"f": NonTensorData(Fraction(1, 3), batch_size=[2])}}, [2])
        m = td.memmap(tmp_path / "td", allow_pickle=True)
        assert m["n", "f"] == Fraction(1, 3)
        assert (tmp_path / "td" / "n" / "f" / "other.pickle").exists()
        assert "data" not in json.loads((tmp_path / "td" / "n" / "f" / "meta.json").read_text())
        with pytest.raises(RuntimeError, match="allow_pickle=True") as info:
            TensorDict.load_memmap(tmp_path / "td")
        assert str(tmp_path / "td" / "n" / "f" / "other.pickle") in str(info.value)
        back = TensorDict.load_memmap(tmp_path / "td", allow_pickle=True)
        assert back["n", "f"] == Fraction(1, 3)
        assert back.get(("n", "f")).batch_size == (2,)

    def test_pickled_stack(self, tmp_path):
        td = TensorDict({"l": NonTensorStack.from_list([Fraction(1, 2), Fraction(1, 3)])}, batch_size=[2])
        m = td.memmap(tmp_path / "td", allow_pickle=True)
        assert m.get("l").tolist() == [Fraction(1, 2), Fraction(1, 3)]
        with pytest.raises(RuntimeError, match="allow_pickle=True"):
            TensorDict.load_memmap(tmp_path / "td")

    def test_non_tensor_data_root(self, tmp_path):
        out = NonTensorData("hello", batch_size=[2]).memmap(tmp_path / "nt")
        assert type(out) is NonTensorData
        assert out.data == "hello"

    def test_non_tensor_stack_root(self, tmp_path):
        out = NonTensorStack.from_list(["a", "b"]).memmap(tmp_path / "nt")
        assert type(out) is NonTensorStack
        assert out.tolist() == ["a", "b"]


class TestMemmapLazy:
    def test_homogeneous(self, tmp_path):
        members = [TensorDict({"x": torch.full((3,), float(i)), "s": f"v{i}"}, [3]) for i in range(2)]
        m = lazy_stack(members, 0).memmap(tmp_path / "ls")
        assert type(m) is LazyStackedTensorDict
        assert m.is_locked
        assert m.batch_size == (2, 3)
        assert m.stack_dim == 0
        assert m.is_memmap()
        assert [t["x"].tolist() for t in m.tensordicts] == [[0.0] * 3, [1.0] * 3]
        assert [t["s"] for t in m.tensordicts] == ["v0", "v1"]
        assert all(type(t["x"]) is MemoryMappedTensor for t in m.tensordicts)
        assert files(tmp_path / "ls") == [
            "0", "0/meta.json", "0/s", "0/s/meta.json", "0/x.memmap",
            "1", "1/meta.json", "1/s", "1/s/meta.json", "1/x.memmap", "meta.json",
        ]  # fmt: skip
        assert json.loads((tmp_path / "ls" / "meta.json").read_text())["_class"] == "tensordict:LazyStackedTensorDict"

    def test_heterogeneous(self, tmp_path):
        members = [TensorDict({"x": torch.ones(3, i + 1), f"only{i}": torch.zeros(3)}, [3]) for i in range(2)]
        m = lazy_stack(members, 0).memmap(tmp_path / "ls")
        assert type(m) is LazyStackedTensorDict
        assert [sorted(t.keys()) for t in m.tensordicts] == [["only0", "x"], ["only1", "x"]]
        assert [tuple(t["x"].shape) for t in m.tensordicts] == [(3, 1), (3, 2)]
        back = TensorDict.load_memmap(tmp_path / "ls")
        assert [tuple(t["x"].shape) for t in back.tensordicts] == [(3, 1), (3, 2)]

    def test_stack_dim_1(self, tmp_path):
        m = lazy_stack([TensorDict({"x": torch.ones(3) * i}, [3]) for i in range(2)], 1).memmap(tmp_path / "ls")
        assert type(m) is LazyStackedTensorDict
        assert m.stack_dim == 1
        assert m.batch_size == (3, 2)

    def test_nested_in_a_td(self, tmp_path):
        inner = lazy_stack([TensorDict({"x": torch.ones(3) * i}, [3]) for i in range(2)], 0)
        m = TensorDict({"l": inner, "a": torch.zeros(2)}, batch_size=[2]).memmap(tmp_path / "td")
        assert type(m.get("l")) is LazyStackedTensorDict
        assert [t["x"].tolist() for t in m.get("l").tensordicts] == [[0.0] * 3, [1.0] * 3]

    def test_read_stacked_leaf(self, tmp_path):
        m = lazy_stack([TensorDict({"x": torch.ones(3) * i}, [3]) for i in range(2)], 0).memmap(tmp_path / "ls")
        assert m["x"].tolist() == [[0.0] * 3, [1.0] * 3]

    def test_memmap_inplace(self, tmp_path):
        ls = lazy_stack([TensorDict({"x": torch.ones(3) * i}, [3]) for i in range(2)], 0)
        assert ls.memmap_(tmp_path / "ls") is ls
        assert all(type(t["x"]) is MemoryMappedTensor for t in ls.tensordicts)


class TestMemmapShared:
    def test_no_prefix_gives_shared_memory(self):
        td = make_td()
        m = td.memmap()
        assert m.is_locked
        assert m.is_memmap()
        assert m.is_shared()
        assert_same_td(m, td)
        for leaf in m.values(include_nested=True, leaves_only=True):
            assert type(leaf) is MemoryMappedTensor
            assert leaf.is_shared()
            with pytest.raises(RuntimeError, match="no file"):
                leaf.filename  # noqa: B018
        m["a"][0, 0] = 100.0
        assert td["a"][0, 0] == 0.0  # a copy

    def test_shared_leaves_pickle_by_value(self):
        m = make_td().memmap()
        back = pickle.loads(pickle.dumps(m))
        assert_same_td(back, m)


class TestMemmapInPlace:
    def test_leaves_replaced_and_locked(self, tmp_path):
        td = make_td()
        want = make_td()
        old = td["a"]
        assert td.memmap_(tmp_path / "td") is td
        assert td.is_locked
        assert td.is_memmap()
        assert td["a"] is not old
        assert type(td["a"]) is MemoryMappedTensor
        assert td["a"].filename == str(tmp_path / "td" / "a.memmap")
        assert td.saved_path == str(tmp_path / "td")
        assert_same_td(td, want)

    def test_writes_reach_the_files(self, tmp_path):
        td = make_td()
        td.memmap_(tmp_path / "td")
        td.set_("a", torch.full((3, 4), 9.0))
        td["nested"].update_({"d": torch.full((3, 2), -2.0, dtype=torch.float64)})
        td.update_({"b": torch.tensor([4, 5, 6])})
        td[0] = TensorDict(
            {"a": torch.zeros(4), "b": torch.tensor(0), "c": torch.tensor([False]),
             "nested": {"d": torch.zeros(2, dtype=torch.float64), "deep": {"e": torch.tensor(5, dtype=torch.int16)}}},
            batch_size=[],
        )  # fmt: skip
        back = TensorDict.load_memmap(tmp_path / "td")
        assert back["a"].tolist() == [[0.0] * 4, [9.0] * 4, [9.0] * 4]
        assert back["b"].tolist() == [0, 5, 6]
        assert back["nested", "d"][1:].tolist() == [[-2.0, -2.0]] * 2
        assert back["nested", "deep", "e"].tolist() == [5, 1, 2]

    def test_locked_refuses_new_keys(self, tmp_path):
        td = make_td()
        td.memmap_(tmp_path / "td")
        with pytest.raises(RuntimeError):
            td["z"] = torch.zeros(3)

    def test_without_prefix(self):
        td = make_td()
        assert td.memmap_() is td
        assert td.is_locked
        assert td.is_shared()
        assert type(td["a"]) is MemoryMappedTensor
        assert td.saved_path is None

    def test_non_tensor_kept(self, tmp_path):
        td = TensorDict({"a": torch.ones(2), "s": "hi"}, batch_size=[2])
        td.memmap_(tmp_path / "td")
        assert td["s"] == "hi"
        assert type(td["a"]) is MemoryMappedTensor

    def test_return_early(self, tmp_path):
        td = make_td()
        future = td.memmap_(tmp_path / "td", return_early=True, num_threads=2)
        assert isinstance(future, Future)
        assert future.result(timeout=30) is td
        assert td.is_memmap()


class TestMemmapLike:
    def test_zero_filled_same_structure(self, tmp_path):
        td = make_td()
        like = td.memmap_like(tmp_path / "like")
        assert like.is_locked
        assert like.is_memmap()
        assert set(like.keys(True, True)) == set(td.keys(True, True))
        for key, leaf in like.items(include_nested=True, leaves_only=True):
            assert type(leaf) is MemoryMappedTensor
            src = td.get(key)
            assert (leaf.shape, leaf.dtype) == (src.shape, src.dtype)
            assert not leaf.any()
        assert (tmp_path / "like" / "a.memmap").stat().st_size == 3 * 4 * 4
        assert (tmp_path / "like" / "b.memmap").stat().st_size == 3 * 8
        assert (tmp_path / "like" / "c.memmap").stat().st_size == 3
        assert (tmp_path / "like" / "nested" / "deep" / "e.memmap").stat().st_size == 3 * 2
        assert td["a"].sum() == 66.0  # the source is untouched

    @pytest.mark.parametrize("method", ["memmap", "memmap_", "memmap_like", "save", "dumps"])
    def test_an_unknown_keyword_is_refused(self, tmp_path, method):
        td = make_td()
        with pytest.raises(TypeError, match="copy_data"):
            getattr(td, method)(tmp_path / "x", copy_data=True)
        assert not (tmp_path / "x").exists() and not td.is_locked
        if method != "memmap_like":  # tensordict's atomic (its memmap_like has none) is accepted
            getattr(td.clone(), method)(tmp_path / "y", atomic=True)
            assert TensorDict.load_memmap(tmp_path / "y")["a"].sum() == 66.0

    def test_over_a_save_keeps_the_values_of_leaves_of_the_same_shape_and_dtype(self, tmp_path):
        # as tensordict, which maps the existing files (and reads other dtypes' bytes as garbage: zeros here)
        td = make_td()
        saved = td.memmap(tmp_path / "x")
        like = td.memmap_like(tmp_path / "x")
        assert like["a"].sum() == 66.0 and TensorDict.load_memmap(tmp_path / "x")["a"].sum() == 66.0
        like["a"][0, 0] = 100.0  # the old save's mapping and the new one share the file, as tensordict's
        assert saved["a"][0, 0] == 100.0
        other = TensorDict({"a": torch.ones(3, 4, dtype=torch.float64), "b": torch.ones(3, 2)}, [3])
        changed = other.memmap_like(tmp_path / "x")
        assert not changed["a"].any() and not changed["b"].any()  # another dtype, another shape: zeros
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]  # nothing left aside

    def test_writes_reach_the_files(self, tmp_path):
        like = make_td().memmap_like(tmp_path / "like")
        like["a"][:] = 1.0
        assert TensorDict.load_memmap(tmp_path / "like")["a"].sum() == 12.0

    def test_expanded_source_is_not_materialised(self, tmp_path):
        td = TensorDict({"x": torch.zeros(1, 256)}, batch_size=[1]).expand(4096)
        like = td.memmap_like(tmp_path / "like")
        assert like["x"].shape == (4096, 256)
        assert (tmp_path / "like" / "x.memmap").stat().st_size == 4096 * 256 * 4

    def test_without_prefix(self):
        like = make_td().memmap_like()
        assert like.is_locked
        assert all(type(v) is MemoryMappedTensor for v in like.values(True, True))
        assert all(not v.any() for v in like.values(True, True))

    def test_non_tensor_and_lazy(self, tmp_path):
        td = TensorDict({"a": torch.ones(2), "s": "hi"}, batch_size=[2])
        like = td.memmap_like(tmp_path / "like")
        assert like["s"] == "hi"
        assert like["a"].tolist() == [0.0, 0.0]
        ls = lazy_stack([TensorDict({"x": torch.ones(3, i + 1)}, [3]) for i in range(2)], 0)
        lazy_like = ls.memmap_like(tmp_path / "lazy")
        assert type(lazy_like) is LazyStackedTensorDict
        assert [tuple(t["x"].shape) for t in lazy_like.tensordicts] == [(3, 1), (3, 2)]
        assert all(not t["x"].any() for t in lazy_like.tensordicts)


# ====================================================================================== loading
class TestLoad:
    def test_load_memmap(self, tmp_path):
        td = make_td()
        td.memmap(tmp_path / "td")
        back = TensorDict.load_memmap(tmp_path / "td")
        assert type(back) is TensorDict
        assert not back.is_locked  # (as tensordict: memmap() locks its result, load_memmap does not)
        assert back.is_memmap()
        assert back.saved_path == str(tmp_path / "td")
        assert_same_td(back, td)
        assert back["nested", "deep", "e"].filename == str(tmp_path / "td" / "nested" / "deep" / "e.memmap")

    def test_str_prefix(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        assert_same_td(TensorDict.load_memmap(str(tmp_path / "td")), make_td())

    def test_loaded_leaves_share_the_files(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        one = TensorDict.load_memmap(tmp_path / "td")
        two = TensorDict.load_memmap(tmp_path / "td")
        one["a"][0, 0] = 123.0
        assert two["a"][0, 0] == 123.0

    def test_loaded_td_pickles_by_file(self, tmp_path):
        big = TensorDict({"x": torch.zeros(250_000)}, batch_size=[250_000]).memmap(tmp_path / "td")
        payload = pickle.dumps(big)
        assert len(payload) < 5000
        back = pickle.loads(payload)
        back["x"][3] = 1.0
        assert big["x"][3] == 1.0

    def test_meta_device_reads_no_file(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        for file in (tmp_path / "td").rglob("*.memmap"):
            file.unlink()  # nothing to read: the metadata is enough
        meta = TensorDict.load_memmap(tmp_path / "td", device="meta")
        assert meta.device == torch.device("meta")
        assert meta.batch_size == (3,)
        for key, leaf in make_td().items(include_nested=True, leaves_only=True):
            got = meta.get(key)
            assert got.device.type == "meta"
            assert (got.shape, got.dtype) == (leaf.shape, leaf.dtype)

    def test_fake_mode_gives_fake_tensors_and_reads_no_file(self, tmp_path):
        from torch._subclasses import FakeTensor, FakeTensorMode

        make_td().memmap(tmp_path / "td")
        for file in (tmp_path / "td").rglob("*.memmap"):
            file.unlink()  # nothing to read: the metadata is enough
        with FakeTensorMode() as mode:
            fake = TensorDict.load_memmap(tmp_path / "td")
            on_meta = TensorDict.load_memmap(tmp_path / "td", device="meta")
        assert type(fake) is TensorDict
        assert fake.batch_size == (3,)
        assert fake.device == torch.device("cpu")
        assert not fake.is_memmap()
        for key, leaf in make_td().items(include_nested=True, leaves_only=True):
            got = fake.get(key)
            assert type(got) is FakeTensor
            assert got.fake_mode is mode
            assert (got.shape, got.dtype, got.device) == (leaf.shape, leaf.dtype, torch.device("cpu"))
            assert type(on_meta.get(key)) is FakeTensor
            assert on_meta.get(key).device.type == "meta"

    def test_fake_mode_lazy_stack_and_non_tensor(self, tmp_path):
        from torch._subclasses import FakeTensor, FakeTensorMode

        s = lazy_stack([TensorDict({"x": torch.ones(3, 2), "s": "hi"}, [3]) for _ in range(2)]).refine_names("m", "t")
        s.memmap(tmp_path / "ls")
        with FakeTensorMode():
            back = TensorDict.load_memmap(tmp_path / "ls")
        assert type(back) is LazyStackedTensorDict
        assert back.names == ["m", "t"]
        assert type(back.tensordicts[1]["x"]) is FakeTensor
        assert back.tensordicts[1]["x"].shape == (3, 2)
        assert back.tensordicts[0]["s"] == "hi"

    def test_without_fake_mode_the_files_are_mapped(self, tmp_path):
        from torch._subclasses import FakeTensorMode

        make_td().memmap(tmp_path / "td")
        with FakeTensorMode():
            pass  # a finished mode leaves later loads alone
        back = TensorDict.load_memmap(tmp_path / "td")
        assert type(back["a"]) is MemoryMappedTensor
        assert_same_td(back, make_td())

    def test_out(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        out = make_td().zero_()
        result = TensorDict.load_memmap(tmp_path / "td", out=out)
        assert result is out
        assert_same_td(out, make_td())

    def test_load_memmap_(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        target = make_td().zero_()
        assert target.load_memmap_(tmp_path / "td") is target
        assert_same_td(target, make_td())

    def test_load_underscore_is_load_memmap_(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        target = make_td().zero_()
        assert target.load_(tmp_path / "td") is target
        assert_same_td(target, make_td())

    def test_load_memmap_shape_mismatch(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        wrong = TensorDict({"a": torch.zeros(3, 5)}, batch_size=[3])
        with pytest.raises((RuntimeError, KeyError, ValueError)):
            wrong.load_memmap_(tmp_path / "td")

    def test_lazy_root_type(self, tmp_path):
        lazy_stack([TensorDict({"x": torch.ones(3)}, [3]) for _ in range(2)], 0).memmap(tmp_path / "ls")
        assert type(TensorDict.load_memmap(tmp_path / "ls")) is LazyStackedTensorDict
        assert type(tensorbatch.load_memmap(tmp_path / "ls")) is LazyStackedTensorDict

    def test_not_a_folder(self, tmp_path):
        with pytest.raises(FileNotFoundError) as info:
            TensorDict.load_memmap(tmp_path / "nothing")
        assert str(tmp_path / "nothing") in str(info.value)


class TestAliases:
    def test_method_aliases(self, tmp_path):
        td = make_td()
        for name in ("save", "dumps", "memmap"):
            out = getattr(td, name)(tmp_path / name)
            assert out.is_locked
            assert out.is_memmap()
            assert_same_td(out, td)
        assert files(tmp_path / "save") == files(tmp_path / "dumps") == files(tmp_path / "memmap")
        loaded = TensorDict.load(tmp_path / "save")
        assert loaded.is_memmap()
        assert_same_td(loaded, td)

    def test_module_functions(self, tmp_path):
        td = make_td()
        a = tensorbatch.memmap(td, tmp_path / "a")
        b = tensorbatch.save(td, tmp_path / "b")
        for out in (a, b):
            assert out.is_memmap()
            assert_same_td(out, td)
        for fn in (tensorbatch.load, tensorbatch.load_memmap):
            back = fn(tmp_path / "a")
            assert type(back) is TensorDict
            assert not back.is_locked
            assert_same_td(back, td)
        shared = tensorbatch.memmap(td)
        assert shared.is_shared()
        meta = tensorbatch.load_memmap(tmp_path / "b", device="meta")
        assert meta["a"].device.type == "meta"


class TestSaveOptions:
    def test_return_early(self, tmp_path):
        td = make_td()
        future = td.memmap(tmp_path / "td", return_early=True, num_threads=2)
        assert isinstance(future, Future)
        out = future.result(timeout=30)
        assert out.is_memmap()
        assert_same_td(out, td)
        like = td.memmap_like(tmp_path / "like", return_early=True, num_threads=2).result(timeout=30)
        assert not like["a"].any()
        # without threads the call returns its result (as tensordict's)
        now = td.memmap(tmp_path / "now", return_early=True)
        assert not isinstance(now, Future) and now.is_memmap()
        assert_same_td(now, td)

    def test_num_threads(self, tmp_path):
        g = torch.Generator().manual_seed(0)
        td = TensorDict(
            {f"k{i}": torch.randn(50, 7, generator=g) for i in range(8)} | {"n": {"x": torch.arange(50)}},
            batch_size=[50],
        )
        threaded = td.memmap(tmp_path / "threads", num_threads=4)
        serial = td.memmap(tmp_path / "serial")
        assert files(tmp_path / "threads") == files(tmp_path / "serial")
        assert_same_td(threaded, td)
        for file in (tmp_path / "serial").rglob("*"):
            if file.is_file():
                other = tmp_path / "threads" / file.relative_to(tmp_path / "serial")
                assert other.read_bytes() == file.read_bytes()
        assert_same_td(serial, threaded)

    def test_existsok_false(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        before = (tmp_path / "td" / "a.memmap").read_bytes()
        with pytest.raises(RuntimeError, match="already exists") as info:
            TensorDict({"z": torch.ones(1)}, [1]).memmap(tmp_path / "td", existsok=False)
        assert str(tmp_path / "td") in str(info.value)
        assert (tmp_path / "td" / "a.memmap").read_bytes() == before
        assert sorted(os.listdir(tmp_path)) == ["td"]

    def test_existsok_false_on_a_new_folder(self, tmp_path):
        out = make_td().memmap(tmp_path / "td", existsok=False)
        assert out.is_memmap()

    def test_overwrite_replaces_everything(self, tmp_path):
        TensorDict({"x": torch.ones(3), "sub": {"y": torch.ones(3)}, "s": "text"}, [3]).memmap(tmp_path / "td")
        out = TensorDict({"z": torch.zeros(3)}, [3]).memmap(tmp_path / "td")
        assert files(tmp_path / "td") == ["meta.json", "z.memmap"]
        assert list(out.keys()) == ["z"]
        assert sorted(os.listdir(tmp_path)) == ["td"]  # no temporary or old folder left
        assert list(TensorDict.load_memmap(tmp_path / "td").keys()) == ["z"]

    def test_overwrite_a_foreign_folder_keeps_its_files(self, tmp_path):
        # files no save wrote (no meta.json names them) are the user's: kept, as tensordict keeps them
        (tmp_path / "td").mkdir()
        (tmp_path / "td" / "stale.memmap").write_bytes(b"x")
        (tmp_path / "td" / "notes.txt").write_text("not ours")
        make_td().memmap(tmp_path / "td")
        assert (tmp_path / "td" / "stale.memmap").read_bytes() == b"x"
        assert (tmp_path / "td" / "notes.txt").read_text() == "not ours"
        assert_same_td(TensorDict.load_memmap(tmp_path / "td"), make_td())

    def test_failed_save_keeps_the_previous_one(self, tmp_path):
        make_td().memmap(tmp_path / "td")
        before = files(tmp_path / "td")
        bad = TensorDict({"f": NonTensorData(Fraction(1, 3), batch_size=[3])}, batch_size=[3])
        with pytest.raises(TypeError):
            bad.memmap(tmp_path / "td")
        assert files(tmp_path / "td") == before
        assert sorted(os.listdir(tmp_path)) == ["td"]
        assert_same_td(TensorDict.load_memmap(tmp_path / "td"), make_td())

    def test_prefix_is_a_file(self, tmp_path):
        (tmp_path / "thing").write_text("a file")
        with contextlib.suppress(OSError, RuntimeError):  # refusing is fine too
            make_td().memmap(tmp_path / "thing")
        assert [name for name in os.listdir(tmp_path) if name != "thing"] == []

    def test_already_mapped_leaves(self, tmp_path):
        m = make_td().memmap(tmp_path / "one")
        with pytest.raises(RuntimeError, match="copy_existing=True") as info:
            m.memmap(tmp_path / "two")
        assert str(tmp_path / "one") in str(info.value)
        assert not (tmp_path / "two").exists()
        copy = m.memmap(tmp_path / "two", copy_existing=True)
        assert copy["a"].filename == str(tmp_path / "two" / "a.memmap")
        assert_same_td(copy, make_td())
        copy["a"][0, 0] = -7.0
        assert m["a"][0, 0] == 0.0

    def test_resave_into_own_folder_keeps_mappings(self, tmp_path):
        m = make_td().memmap(tmp_path / "td")
        again = m.memmap(tmp_path / "td")
        m["a"][0, 0] = 100.0
        assert again["a"][0, 0] == 100.0
        assert TensorDict.load_memmap(tmp_path / "td")["a"][0, 0] == 100.0
        assert_same_td(again, m)

    def test_memmap_inplace_twice_keeps_held_leaves(self, tmp_path):
        td = make_td()
        td.memmap_(tmp_path / "td")
        held = td["a"]
        td.memmap_(tmp_path / "td")
        held[1, 1] = -3.0
        assert td["a"][1, 1] == -3.0
        assert TensorDict.load_memmap(tmp_path / "td")["a"][1, 1] == -3.0
        assert sorted(os.listdir(tmp_path)) == ["td"]

    def test_resave_into_own_folder_with_new_keys(self, tmp_path):
        m = make_td().memmap(tmp_path / "td")
        grown = TensorDict({"a": m["a"], "new": torch.arange(3.0)}, batch_size=[3])
        out = grown.memmap(tmp_path / "td")
        assert out["new"].tolist() == [0.0, 1.0, 2.0]
        assert sorted(TensorDict.load_memmap(tmp_path / "td").keys()) == ["a", "new"]

    def test_resave_into_own_folder_leaves_no_stale_files(self, tmp_path):
        m = make_td().memmap(tmp_path / "td")
        out = m.select("a").memmap(tmp_path / "td")
        assert list(out.keys()) == ["a"]
        assert files(tmp_path / "td") == ["a.memmap", "meta.json"]


# ====================================================================================== keys and file names
ODD_KEYS = {
    "a/b": "a%2Fb",
    "a.b": "a.b",
    "with space": "with%20space",
    ".hidden": ".hidden",
    "100%": "100%25",
    "x:y": "x%3Ay",
    "tab\tkey": "tab%09key",
}


class TestKeys:
    def test_odd_keys_round_trip_with_encoded_names(self, tmp_path):
        td = TensorDict({key: torch.full((2,), float(i)) for i, key in enumerate(ODD_KEYS)}, batch_size=[2])
        m = td.memmap(tmp_path / "td")
        assert sorted(os.listdir(tmp_path / "td")) == sorted(["meta.json", *(f"{n}.memmap" for n in ODD_KEYS.values())])
        back = TensorDict.load_memmap(tmp_path / "td")
        for out in (m, back):
            assert list(out.keys()) == list(ODD_KEYS)
            for i, key in enumerate(ODD_KEYS):
                assert out[key].tolist() == [float(i)] * 2
        assert set(json.loads((tmp_path / "td" / "meta.json").read_text())) >= set(ODD_KEYS)  # keys stored as is

    def test_unicode_keys_round_trip(self, tmp_path):
        keys = ["ünï", "日本", "a+b", "é#(x)"]
        td = TensorDict({key: torch.full((2,), float(i)) for i, key in enumerate(keys)}, batch_size=[2])
        td.memmap(tmp_path / "td")
        back = TensorDict.load_memmap(tmp_path / "td")
        assert list(back.keys()) == keys
        assert [back[k][0].item() for k in keys] == [0.0, 1.0, 2.0, 3.0]
        names = os.listdir(tmp_path / "td")
        assert all("/" not in name for name in names)
        assert len(names) == len(keys) + 1

    def test_odd_keys_on_nested_and_non_tensor_nodes(self, tmp_path):
        td = TensorDict({"a/b": {"c.d": torch.zeros(2), "s p": "text"}}, batch_size=[2])
        td.memmap(tmp_path / "td")
        assert files(tmp_path / "td") == [
            "a%2Fb", "a%2Fb/c.d.memmap", "a%2Fb/meta.json", "a%2Fb/s%20p", "a%2Fb/s%20p/meta.json", "meta.json",
        ]  # fmt: skip
        back = TensorDict.load_memmap(tmp_path / "td")
        assert back["a/b", "c.d"].tolist() == [0.0, 0.0]
        assert back["a/b", "s p"] == "text"

    @pytest.mark.parametrize("nested", [False, True], ids=["leaf", "node"])
    def test_empty_key_is_encoded(self, tmp_path, nested):
        value = {"x": torch.zeros(2)} if nested else torch.full((2,), 3.0)
        td = TensorDict({"ok": torch.ones(2), "": value, "%": torch.ones(2)}, batch_size=[2])
        td.memmap(tmp_path / "td")  # (tensordict's names: "" is "%", "%" is "%25")
        names = set(os.listdir(tmp_path / "td"))
        assert ("%" if nested else "%.memmap") in names and "%25.memmap" in names
        back = TensorDict.load_memmap(tmp_path / "td")
        assert set(back.keys(True, True)) == set(td.keys(True, True))
        assert_same_td(back, td)

    @pytest.mark.parametrize(("key", "name"), [(".", "%2E"), ("..", "%2E%2E")], ids=["dot", "dotdot"])
    @pytest.mark.parametrize("nested", [False, True], ids=["leaf", "node"])
    def test_dot_keys_are_encoded(self, tmp_path, key, name, nested):
        value = {"x": torch.zeros(2)} if nested else torch.full((2,), 3.0)
        TensorDict({"ok": torch.ones(2), key: value}, batch_size=[2]).memmap(tmp_path / "td")
        assert (tmp_path / "td" / (name if nested else f"{name}.memmap")).exists()
        back = TensorDict.load_memmap(tmp_path / "td")
        assert (back[key, "x"] if nested else back[key]).tolist() == ([0.0, 0.0] if nested else [3.0, 3.0])


# ====================================================================================== damaged folders
@pytest.fixture
def saved(tmp_path) -> Path:
    folder = tmp_path / "td"
    make_td().memmap(folder)
    return folder


class TestDamaged:
    def test_truncated_file(self, saved):
        file = saved / "a.memmap"
        with open(file, "r+b") as f:
            f.truncate(8)
        with pytest.raises(RuntimeError, match="truncated") as info:
            TensorDict.load_memmap(saved)
        assert str(file) in str(info.value)

    def test_oversized_file(self, saved):
        file = saved / "nested" / "d.memmap"
        with open(file, "ab") as f:
            f.write(b"\0" * 8)
        with pytest.raises(RuntimeError, match="truncated or does not belong") as info:
            TensorDict.load_memmap(saved)
        assert str(file) in str(info.value)

    def test_missing_file(self, saved):
        file = saved / "nested" / "deep" / "e.memmap"
        file.unlink()
        with pytest.raises(FileNotFoundError, match="missing") as info:
            TensorDict.load_memmap(saved)
        assert str(file) in str(info.value)

    def test_missing_meta(self, saved):
        (saved / "nested" / "meta.json").unlink()
        with pytest.raises(FileNotFoundError, match=r"meta\.json") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "nested") in str(info.value)

    def test_bad_json(self, saved):
        (saved / "nested" / "meta.json").write_text("{not json")
        with pytest.raises(json.JSONDecodeError, match="not valid JSON, the save is corrupted") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "nested" / "meta.json") in str(info.value)

    def test_json_not_an_object(self, saved):
        (saved / "meta.json").write_text("[1, 2]")
        with pytest.raises(RuntimeError, match="JSON object") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "meta.json") in str(info.value)

    def test_unknown_dtype(self, saved):
        rewrite_meta(saved / "meta.json", lambda m: m["a"].update(dtype="torch.float99"))
        with pytest.raises(KeyError, match=r"unknown dtype 'torch\.float99'") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "a.memmap") in str(info.value)

    @pytest.mark.parametrize("shape", [[3, "x"], "oops", [-3], [-1], None, [3.5], [True]], ids=str)
    def test_bad_leaf_shape(self, saved, shape):
        rewrite_meta(saved / "meta.json", lambda m: m["a"].update(shape=shape))
        with pytest.raises(RuntimeError, match="invalid shape") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "a.memmap") in str(info.value)

    def test_bad_batch_shape(self, saved):
        rewrite_meta(saved / "nested" / "meta.json", lambda m: m.update(shape="oops"))
        with pytest.raises(RuntimeError, match="invalid shape") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "nested" / "meta.json") in str(info.value)

    def test_shape_inconsistent_with_batch(self, saved):
        # 12 floats either way: the file size matches, the batch size does not
        rewrite_meta(saved / "meta.json", lambda m: m["a"].update(shape=[2, 6]))
        with pytest.raises(RuntimeError):
            TensorDict.load_memmap(saved)

    def test_invalid_entry(self, saved):
        rewrite_meta(saved / "meta.json", lambda m: m.update(a=5))
        with pytest.raises(RuntimeError, match="invalid entry for key 'a'") as info:
            TensorDict.load_memmap(saved)
        assert str(saved / "meta.json") in str(info.value)

    def test_non_tensor_without_data(self, tmp_path):
        TensorDict({"s": "x"}, batch_size=[]).memmap(tmp_path / "td")
        rewrite_meta(tmp_path / "td" / "s" / "meta.json", lambda m: m.pop("data"))
        with pytest.raises(RuntimeError, match="without data") as info:
            TensorDict.load_memmap(tmp_path / "td")
        assert str(tmp_path / "td" / "s") in str(info.value)


class TestHostileMeta:
    """meta.json names files; a crafted key must never reach outside the saved folder."""

    @pytest.fixture
    def layout(self, tmp_path):
        secret = torch.arange(4.0)
        (tmp_path / "secret.memmap").write_bytes(bits(secret))
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "meta.json").write_text(
            json.dumps({"shape": [], "device": "cpu", "_class": "tensordict:TensorDict"})
        )
        folder = tmp_path / "save" / "inner"
        folder.mkdir(parents=True)
        return tmp_path, folder

    def _write(self, folder: Path, key: str, entry: dict) -> None:
        meta = {key: entry, "shape": [], "device": "cpu", "_class": "tensordict:TensorDict"}
        (folder / "meta.json").write_text(json.dumps(meta))

    LEAF: ClassVar[dict[str, Any]] = {"device": "cpu", "shape": [4], "dtype": "torch.float32", "is_nested": False}

    @pytest.mark.parametrize("key", ["../../secret", "/" + "x" * 3, "../..", "..", "."])
    @pytest.mark.parametrize("robust_key", [True, False], ids=["robust", "raw"])
    def test_leaf_key_cannot_escape(self, layout, key, robust_key):
        _, folder = layout
        self._write(folder, key, self.LEAF)
        with pytest.raises((FileNotFoundError, ValueError)) as info:
            TensorDict.load_memmap(folder, robust_key=robust_key)
        if isinstance(info.value, FileNotFoundError):  # looked for an encoded name inside the folder
            assert str(folder) in str(info.value)

    @pytest.mark.parametrize("key", ["../../outside", "..", "/tmp"])
    @pytest.mark.parametrize("robust_key", [True, False], ids=["robust", "raw"])
    def test_node_key_cannot_escape(self, layout, key, robust_key):
        _, folder = layout
        self._write(folder, key, {"type": "TensorDict"})
        with pytest.raises((FileNotFoundError, ValueError)) as info:
            TensorDict.load_memmap(folder, robust_key=robust_key)
        if isinstance(info.value, FileNotFoundError):
            assert str(folder) in str(info.value)

    def test_lazy_members_are_only_numbered_subfolders(self, tmp_path):
        lazy_stack([TensorDict({"x": torch.ones(2) * i}, [2]) for i in range(2)], 0).memmap(tmp_path / "ls")
        (tmp_path / "ls" / "evil").mkdir()  # not a member: ignored
        (tmp_path / "ls" / "evil" / "meta.json").write_text("{broken")
        back = TensorDict.load_memmap(tmp_path / "ls")
        assert len(back.tensordicts) == 2


# ====================================================================================== shared memory helpers
class TestSharing:
    def test_share_memory_(self):
        td = make_td()
        assert not td.is_shared()
        assert td.share_memory_() is td
        assert td.is_locked
        assert td.is_shared()
        assert all(v.is_shared() for v in td.values(True, True))
        assert_same_td(td, make_td())

    def test_is_shared_and_is_memmap(self, tmp_path):
        empty = TensorDict({}, batch_size=[])
        assert not empty.is_shared()
        assert not empty.is_memmap()
        m = make_td().memmap(tmp_path / "td")
        assert m.is_shared()
        assert m.is_memmap()
        mixed = TensorDict({"m": m["a"], "p": torch.zeros(3)}, batch_size=[3])
        assert not mixed.is_memmap()
        assert not mixed.is_shared()

    def test_pin_memory(self):
        td = make_td()
        if not torch.cuda.is_available():
            with pytest.raises(RuntimeError):
                td.pin_memory()
            return
        pinned = td.pin_memory()
        assert all(v.is_pinned() for v in pinned.values(True, True))
        assert_same_td(pinned, td)

    def test_pin_memory_underscore_is_deprecated_inplace_pinning(self):
        td = make_td()
        if not torch.cuda.is_available():
            with pytest.warns(DeprecationWarning, match=r"pin_memory\(inplace=True\)"), pytest.raises(RuntimeError):
                td.pin_memory_()
            assert_same_td(td, make_td())  # nothing pinned, nothing changed
            return
        with pytest.warns(DeprecationWarning, match=r"pin_memory\(inplace=True\)"):
            assert td.pin_memory_() is td
        assert all(v.is_pinned() for v in td.values(True, True))
        assert_same_td(td, make_td())


# ---------------------------------------------------------------------------------------------- nested leaves
def _nested(layout: torch.layout, lengths: tuple[int, ...] = (2, 1, 3)) -> torch.Tensor:
    comps = [torch.arange(float(2 * n)).reshape(n, 2) + 10 * i for i, n in enumerate(lengths)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout is "prototype"
        return torch.nested.nested_tensor(comps, layout=layout)


def _components(t: torch.Tensor) -> list[Any]:
    return [c.tolist() for c in t.unbind(0)]


NESTED_LAYOUTS = [pytest.param(torch.jagged, id="jagged"), pytest.param(torch.strided, id="strided")]


@pytest.mark.parametrize("layout", NESTED_LAYOUTS)
class TestNestedLeaves:
    def _td(self, layout: torch.layout) -> TensorDict:
        return TensorDict({"nt": _nested(layout), "x": torch.zeros(3), "n": {"nt2": _nested(layout).double()}}, [3])

    def test_folder_layout(self, tmp_path, layout):
        self._td(layout).memmap(tmp_path / "td")
        meta = json.loads((tmp_path / "td" / "meta.json").read_text())
        entry = {"device": "cpu", "shape": [3, 2], "dtype": "torch.float32", "is_nested": True}
        assert meta["nt"] == (entry if layout is torch.strided else {**entry, "layout": "jagged"})
        sizes = torch.from_file(str(tmp_path / "td" / "nt.shape.memmap"), size=6, dtype=torch.int64)
        assert sizes.tolist() == [2, 2, 1, 2, 3, 2]
        assert os.path.getsize(tmp_path / "td" / "nt.memmap") == 12 * 4

    def test_round_trip_maps_the_file(self, tmp_path, layout):
        mapped = self._td(layout).memmap(tmp_path / "td")
        loaded = TensorDict.load_memmap(tmp_path / "td")
        assert mapped.is_locked and not loaded.is_locked
        for td in (mapped, loaded):
            assert td["nt"].layout is layout
            assert td["n", "nt2"].dtype == torch.float64
            assert _components(td["nt"]) == _components(_nested(layout))
        loaded["nt"].unbind()[2][0, 0] = -7.0  # a view of the mapped file: the write reaches it
        assert TensorDict.load_memmap(tmp_path / "td")["nt"].unbind()[2][0, 0].item() == -7.0

    def test_memmap_like_keeps_the_sizes(self, tmp_path, layout):
        like = self._td(layout).memmap_like(tmp_path / "td")
        assert [tuple(c.shape) for c in like["nt"].unbind()] == [(2, 2), (1, 2), (3, 2)]
        assert all(c.abs().sum() == 0 for c in like["nt"].unbind())

    def test_shared_memory_without_folder(self, layout):
        for out in (self._td(layout).memmap(), self._td(layout).memmap_like()):
            assert out["nt"].layout is layout
            assert [tuple(c.shape) for c in out["nt"].unbind()] == [(2, 2), (1, 2), (3, 2)]
        assert _components(self._td(layout).memmap()["nt"]) == _components(_nested(layout))

    def test_resave_replaces_a_nested_leaf_by_a_plain_one(self, tmp_path, layout):
        self._td(layout).memmap(tmp_path / "td")
        TensorDict({"nt": torch.ones(3, 2)}, [3]).memmap(tmp_path / "td")
        assert not (tmp_path / "td" / "nt.shape.memmap").exists()
        assert TensorDict.load_memmap(tmp_path / "td")["nt"].tolist() == [[1.0, 1.0]] * 3

    @pytest.mark.parametrize("name", ["nt.memmap", "nt.shape.memmap"])
    def test_truncated_files_are_refused(self, tmp_path, layout, name):
        self._td(layout).memmap(tmp_path / "td")
        file = tmp_path / "td" / name
        file.write_bytes(file.read_bytes()[:-8])
        with pytest.raises(RuntimeError, match=re.escape(name)):
            TensorDict.load_memmap(tmp_path / "td")

    def test_missing_sizes_file_is_refused(self, tmp_path, layout):
        self._td(layout).memmap(tmp_path / "td")
        (tmp_path / "td" / "nt.shape.memmap").unlink()
        with pytest.raises(FileNotFoundError, match=re.escape("nt.shape.memmap")):
            TensorDict.load_memmap(tmp_path / "td")


def test_nested_jagged_metadata_only_load(tmp_path):
    TensorDict({"nt": _nested(torch.jagged)}, [3]).memmap(tmp_path / "td")
    loaded = TensorDict.load_memmap(tmp_path / "td", device="meta")
    assert loaded["nt"].device.type == "meta"
    assert loaded["nt"].is_nested


def test_load_memmap_subpath_loads_one_nested_tensordict(tmp_path) -> None:
    td = TensorDict(a=torch.zeros(3), b={"c": torch.ones(3), "d": {"e": torch.arange(3)}}, batch_size=[3])
    td.memmap(tmp_path)
    sub = TensorDict.load_memmap(tmp_path, subpath="b")
    assert set(sub.keys(True, True)) == {"c", ("d", "e")} and sub["c"].tolist() == [1.0, 1.0, 1.0]
    deep = TensorDict.load_memmap(tmp_path, subpath=("b", "d"))
    assert deep["e"].tolist() == [0, 1, 2] and not deep.is_locked
    with pytest.raises(ValueError, match=r"no TensorDict saved under subpath 'zz' \(.*zz/meta.json' is missing\)"):
        TensorDict.load_memmap(tmp_path, subpath="zz")
    with pytest.raises(ValueError, match="mode must be None, 'r' or 'r\\+', got 'w'"):
        TensorDict.load_memmap(tmp_path, mode="w")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        TensorDict.load_memmap(tmp_path, bogus=1)


def test_memmapped_leaves_under_functorch_transforms(tmp_path):
    """grad and vmap over memory-mapped leaves: their wrapped tensors have no storage to compare with the file."""
    td = TensorDict({"a": torch.randn(4, 3), "n": {"b": torch.randn(4)}}, batch_size=[4]).memmap_(tmp_path / "td")
    assert isinstance(td["a"], MemoryMappedTensor)
    g = torch.func.grad(lambda x: (td["a"] * x).sum())(torch.tensor(1.0))
    torch.testing.assert_close(g, td["a"].sum())
    out = torch.vmap(lambda t: t * 2)(td)
    assert out.batch_size == torch.Size([4])
    torch.testing.assert_close(out["n", "b"], td["n", "b"] * 2)
    assert type(out["a"]) is torch.Tensor
    view = td["a"][1:3]  # outside a transform, a view of the file stays memory-mapped
    assert isinstance(view, MemoryMappedTensor)


def test_save_into_an_existing_empty_folder(tmp_path):
    td = TensorDict({"a": torch.arange(3)}, [3])
    out = td.memmap_like(prefix=tmp_path, existsok=False)
    assert sorted(os.listdir(tmp_path)) == ["a.memmap", "meta.json"] and out["a"].shape == (3,)
    with pytest.raises(RuntimeError, match="already exists"):  # now it holds a save
        td.memmap(prefix=tmp_path, existsok=False)
