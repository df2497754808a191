"""``torch.save`` / ``torch.load``: every container type round-trips under ``weights_only`` True and False.

torch >= 2.6 loads with ``weights_only=True`` by default: only allowlisted globals may be named by the pickle.
tensorbatch's reduce functions name module-level rebuild functions, allowlisted at import; these tests check
the round trips, that nothing else is allowlisted (crafted payloads are refused) and that the rebuild
functions refuse crafted arguments.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbatch import (
    LazyStackedTensorDict,
    MetaData,
    NonTensorData,
    NonTensorStack,
    TensorClass,
    TensorDict,
    TypedTensorDict,
    UnbatchedTensor,
    tensorclass,
)
from tensorbatch.memmap import MemoryMappedTensor


@tensorclass
class Sample:
    obs: torch.Tensor
    label: str


class Pair(TensorClass):
    left: torch.Tensor
    right: torch.Tensor
    inner: Sample | None = None
    tag: str = "none"


class Typed(TypedTensorDict):
    x: torch.Tensor
    y: torch.Tensor


USER_CLASSES = [Sample, Pair, Typed]


def _save_load(obj: Any, weights_only: bool) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=weights_only)


def _globals_named(obj: Any) -> set[str]:
    """The ``module.name`` globals a pickle of ``obj`` names (protocol 2, as torch.save)."""
    return {
        arg.replace(" ", ".") for op, arg, _ in pickletools.genops(pickle.dumps(obj, protocol=2)) if op.name == "GLOBAL"
    }


def assert_same(got: Any, want: Any) -> None:
    """Same type, batch size, names, device, lock, keys, and leaves equal in value and dtype, level by level."""
    assert type(got) is type(want)
    assert got.batch_size == want.batch_size
    assert got.names == want.names
    assert got.device == want.device
    assert got.is_locked == want.is_locked
    if isinstance(want, LazyStackedTensorDict):
        assert got.stack_dim == want.stack_dim
        assert len(got.tensordicts) == len(want.tensordicts)
        for g, w in zip(got.tensordicts, want.tensordicts, strict=True):
            assert_same(g, w)
        return
    if isinstance(want, (NonTensorData, NonTensorStack, MetaData)):
        assert got.tolist() == want.tolist()
        return
    assert sorted(got.keys()) == sorted(want.keys())
    for key in want.keys():  # (iterating a TensorDict walks its batch dim)
        g, w = got.get(key), want.get(key)
        if isinstance(w, torch.Tensor):
            assert type(g) is type(w), key
            assert (g.dtype, g.shape) == (w.dtype, w.shape), key
            assert torch.equal(g, w), key
        else:
            assert_same(g, w)


def nested_td() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(6.0).view(3, 2),
            "i": torch.arange(3, dtype=torch.int16),
            "flag": torch.ones(3).bool(),
            "sub": TensorDict(
                b=torch.zeros(3, 4, dtype=torch.float64),
                c=torch.arange(12).view(3, 4),
                batch_size=[3, 4],
                names=["n", "m"],
            ),
            "text": "hello",
            "many": NonTensorStack("x", "y", "z"),
        },
        batch_size=[3],
        names=["n"],
    )


def lazy_stack() -> LazyStackedTensorDict:
    members = [TensorDict(a=torch.full((2, k), float(k)), s=f"m{k}", batch_size=[2]) for k in (1, 3)]
    out = LazyStackedTensorDict(*members, stack_dim=1)
    out.names = ["row", "member"]
    return out


FACTORIES = {
    "td": nested_td,
    "td_locked": lambda: nested_td().lock_(),
    "td_empty": lambda: TensorDict(batch_size=[2, 0]),
    "td_device": lambda: TensorDict(a=torch.ones(2), batch_size=[2], device="cpu"),
    "td_consolidated": lambda: TensorDict(
        a=torch.arange(4.0), sub={"b": torch.ones(4, 2)}, s="x", batch_size=[4]
    ).consolidate(),
    "td_sub_view": lambda: nested_td()[1:],
    "lazy": lazy_stack,
    "lazy_locked": lambda: lazy_stack().lock_(),
    "lazy_in_td": lambda: TensorDict(stack=lazy_stack(), batch_size=[2]),
    "non_tensor_data": lambda: NonTensorData("value", batch_size=[2]),
    "metadata": lambda: TensorDict(cfg=MetaData({"lr": 0.1}, batch_size=[2]), batch_size=[2]),
    "non_tensor_stack": lambda: NonTensorStack("a", "b", "c"),
    "unbatched": lambda: TensorDict(a=torch.ones(3), u=UnbatchedTensor(torch.arange(5.0)), batch_size=[3]),
    "memmap_no_file": lambda: TensorDict(a=torch.arange(3.0), batch_size=[3]).memmap_(),
}


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
@pytest.mark.parametrize("name", list(FACTORIES))
def test_round_trip(name: str, weights_only: bool) -> None:
    source = FACTORIES[name]()
    assert_same(_save_load(source, weights_only), source)


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
def test_round_trip_keeps_leaf_types(weights_only: bool) -> None:
    source = FACTORIES["memmap_no_file"]()
    back = _save_load(source, weights_only)
    assert type(back.get("a")) is MemoryMappedTensor
    assert back.is_locked
    back = _save_load(FACTORIES["unbatched"](), weights_only)
    assert type(back.get("u")) is UnbatchedTensor
    assert back.get("u").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert back.get("u").batch_size == (3,)
    back = _save_load(FACTORIES["metadata"](), weights_only)
    assert type(back.get("cfg")) is MetaData
    assert back.get("cfg").data == {"lr": 0.1}
    back = _save_load(lazy_stack(), weights_only)
    assert back.stack_dim == 1
    assert [m.batch_size for m in back.tensordicts] == [(2,), (2,)]


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
def test_tensorclass_round_trip_with_allowlisted_class(weights_only: bool) -> None:
    inner = Sample(obs=torch.arange(4.0).view(2, 2), label="in", batch_size=[2])
    source = Pair(
        left=torch.zeros(2, 3),
        right=torch.ones(2, dtype=torch.int64),
        inner=inner,
        tag="pair",
        batch_size=[2],
        names=["b"],
    )
    with torch.serialization.safe_globals(USER_CLASSES):
        back = _save_load(source, weights_only)
    assert type(back) is Pair
    assert type(back.inner) is Sample
    assert back.tag == "pair"
    assert back.inner.label == "in"
    assert back.names == ["b"]
    assert torch.equal(back.left, source.left)
    assert back.right.dtype == torch.int64
    assert torch.equal(back.inner.obs, inner.obs)
    assert back.batch_size == (2,)
    frozen = Sample(obs=torch.ones(1), label="l", batch_size=[1]).lock_()
    with torch.serialization.safe_globals(USER_CLASSES):
        assert _save_load(frozen, weights_only).is_locked


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
def test_tensorclass_non_tensordict_fields_round_trip(weights_only: bool) -> None:
    source = Sample.from_tensordict(TensorDict(obs=torch.ones(2, 1), batch_size=[2]), non_tensordict={"label": "x"})
    assert source._non_tensordict == {"label": "x"}  # held beside the TensorDict
    with torch.serialization.safe_globals(USER_CLASSES):
        back = _save_load(source, weights_only)
    assert back.label == "x"
    assert back._non_tensordict == {"label": "x"}
    assert torch.equal(back.obs, source.obs)


def test_user_tensorclass_needs_allowlisting() -> None:
    """As tensordict: the pickle names the user's class, which only the user may allowlist."""
    source = Sample(obs=torch.ones(2), label="x", batch_size=[2])
    buffer = io.BytesIO()
    torch.save(source, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"Unsupported global: GLOBAL .*test_torch_save\.Sample"):
        torch.load(buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False).label == "x"


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "trusted"])
def test_typed_round_trip(weights_only: bool) -> None:
    source = Typed(x=torch.arange(3.0), y=torch.zeros(3, 2, dtype=torch.int32), batch_size=[3])
    with torch.serialization.safe_globals(USER_CLASSES):
        back = _save_load(source, weights_only)
    assert type(back) is Typed
    assert back.batch_size == (3,)
    assert torch.equal(back.x, source.x)
    assert back.y.dtype == torch.int32
    buffer = io.BytesIO()
    torch.save(source, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"Unsupported global: GLOBAL .*test_torch_save\.Typed"):
        torch.load(buffer)


class TestFileBackedMemmap:
    """A file-backed MemoryMappedTensor pickles its file's name; a weights-only load maps it privately."""

    def _saved(self, tmp_path: Path) -> tuple[Path, Path]:
        leaf = tmp_path / "leaf.memmap"
        td = TensorDict(a=MemoryMappedTensor.from_tensor(torch.arange(6.0).view(3, 2), filename=leaf), batch_size=[3])
        saved = tmp_path / "td.pt"
        torch.save(td, saved)
        return leaf, saved

    def test_trusted_load_maps_the_file_shared(self, tmp_path: Path) -> None:
        leaf, saved = self._saved(tmp_path)
        back = torch.load(saved, weights_only=False)
        a = back.get("a")
        assert type(a) is MemoryMappedTensor
        assert a.filename == str(leaf)
        a[0, 0] = 42.0
        assert MemoryMappedTensor.from_filename(leaf, torch.float32, (3, 2))[0, 0].item() == 42.0

    def test_weights_only_load_maps_it_privately(self, tmp_path: Path) -> None:
        leaf, saved = self._saved(tmp_path)
        back = torch.load(saved)
        a = back.get("a")
        assert type(a) is MemoryMappedTensor
        with pytest.raises(RuntimeError, match="has no file"):
            a.filename  # noqa: B018
        assert a.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
        a[0, 0] = 42.0  # copy-on-write: the file keeps its data
        assert MemoryMappedTensor.from_filename(leaf, torch.float32, (3, 2))[0, 0].item() == 0.0

    def test_weights_only_load_of_a_read_only_file(self, tmp_path: Path) -> None:
        leaf, saved = self._saved(tmp_path)
        leaf.chmod(0o444)
        try:
            assert torch.load(saved).get("a")[2].tolist() == [4.0, 5.0]
        finally:
            leaf.chmod(0o644)

    def test_a_view_round_trips(self, tmp_path: Path) -> None:
        m = MemoryMappedTensor.from_tensor(torch.arange(10.0), filename=tmp_path / "m.memmap")
        for weights_only in (True, False):
            back = _save_load(m[3:7], weights_only)
            assert type(back) is MemoryMappedTensor
            assert back.tolist() == [3.0, 4.0, 5.0, 6.0]

    def test_truncated_file_is_refused(self, tmp_path: Path) -> None:
        leaf, saved = self._saved(tmp_path)
        leaf.write_bytes(b"\0" * 8)
        with pytest.raises(RuntimeError, match=r"holds 8 bytes, fewer than the 6 torch.float32 elements"):
            torch.load(saved)


# ----------------------------------------------------------------------------------------------- security
class _Crafted:
    """An object whose pickle calls ``fn(*args)`` (what an attacker writes into a checkpoint)."""

    def __init__(self, fn: Any, args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> Any:
        return (self.fn, self.args)


def _crafted_file(tmp_path: Path, fn: Any, *args: Any) -> Path:
    path = tmp_path / "crafted.pt"
    torch.save({"weights": torch.ones(2), "payload": _Crafted(fn, args)}, path)
    return path


@pytest.mark.parametrize("target", ["os.system", "builtins.exec", "builtins.getattr", "builtins.eval"])
def test_a_payload_calling_another_global_is_refused(tmp_path: Path, target: str) -> None:
    marker = tmp_path / "pwned"
    code = f"open({str(marker)!r}, 'w').close()"
    payloads = {
        "os.system": (os.system, f"touch {marker}"),
        "builtins.exec": (exec, code),
        "builtins.eval": (eval, code),
        "builtins.getattr": (getattr, TensorDict, "_from_state"),
    }
    fn, *args = payloads[target]
    path = _crafted_file(tmp_path, fn, *args)
    with pytest.raises(pickle.UnpicklingError, match=r"(?i)unsupported global"):
        torch.load(path)
    assert not marker.exists()


def test_only_the_rebuild_functions_are_allowlisted() -> None:
    """The pickles of tensorbatch's containers name nothing else than allowlisted rebuild functions."""
    allowed = {
        f"{f.__module__}.{f.__qualname__}" if not isinstance(f, tuple) else f[1]
        for f in torch.serialization.get_safe_globals()
    }
    ours = sorted(name for name in allowed if name.startswith("tensorbatch."))
    assert ours == sorted(
        [
            "tensorbatch._io.consolidate.restore",
            "tensorbatch._lazy._rebuild",
            "tensorbatch._nontensor.MetaData",
            "tensorbatch._nontensor.NonTensorData",
            "tensorbatch._nontensor._rebuild_data",
            "tensorbatch._nontensor._rebuild_stack",
            "tensorbatch._td.TensorDict",
            "tensorbatch._td._rebuild",
            "tensorbatch._unbatched._rebuild",
            "tensorbatch.memmap._rebuild_file",
            "tensorbatch.memmap._rebuild_shared",
            "tensorbatch.tensorclass._unpickle",
            "tensorbatch.typed._unpickle",
        ]
    )
    for name in FACTORIES:
        named = {g for g in _globals_named(FACTORIES[name]()) if g.startswith("tensorbatch.")}
        assert named <= set(ours), (name, named - set(ours))


def _rebuild_fn(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    return getattr(__import__(module, fromlist=[attr]), attr)


BAD_ARGUMENTS = [  # (rebuild function, crafted arguments, error type, message)
    (
        "tensorbatch._td._rebuild",
        (NonTensorData, {}, torch.Size([]), None, None, False),
        TypeError,
        "expected a TensorDict class",
    ),
    ("tensorbatch._td._rebuild", (TensorDict, ["a"], torch.Size([]), None, None, False), TypeError, "malformed state"),
    (
        "tensorbatch._td._rebuild",
        (TensorDict, {"a": torch.ones(2)}, torch.Size([3]), None, None, False),
        RuntimeError,
        "batch",
    ),
    (
        "tensorbatch._lazy._rebuild",
        ([TensorDict(), "x"], 0, torch.Size([2]), None, False),
        TypeError,
        "malformed state",
    ),
    (
        "tensorbatch._nontensor._rebuild_data",
        (TensorDict, "x", torch.Size([]), None),
        TypeError,
        "expected a NonTensorData or MetaData class",
    ),
    (
        "tensorbatch._nontensor._rebuild_stack",
        (["a"], torch.tensor([0, 5]), None),
        IndexError,
        "positions outside its 1 values",
    ),
    ("tensorbatch._nontensor._rebuild_stack", ("ab", torch.tensor([0, 1]), None), TypeError, "malformed state"),
    (
        "tensorbatch.tensorclass._unpickle",
        (TensorDict, TensorDict(), {}),
        TypeError,
        "expected a TensorClass with fields",
    ),
    (
        "tensorbatch.tensorclass._unpickle",
        (TensorClass, TensorDict(), {}),
        TypeError,
        "expected a TensorClass with fields",
    ),
    ("tensorbatch.tensorclass._unpickle", (Sample, TensorDict(), {"__class__": 1}), TypeError, "malformed state"),
    ("tensorbatch.tensorclass._unpickle", (Sample, torch.ones(2), {}), TypeError, "malformed state"),
    ("tensorbatch.typed._unpickle", (TensorDict, TensorDict()), TypeError, "expected a TypedTensorDict class"),
    (
        "tensorbatch._io.consolidate.restore",
        (NonTensorData, torch.zeros(8, dtype=torch.uint8), {}),
        TypeError,
        "expected a TensorDict class",
    ),
    ("tensorbatch._io.consolidate.restore", (TensorDict, torch.zeros(8), {}), TypeError, "1-d uint8 buffer"),
    (
        "tensorbatch._io.consolidate.restore",
        (
            TensorDict,
            torch.zeros(8, dtype=torch.uint8),
            {"batch_size": [], "device": None, "entries": {"a": {"offset": 4, "dtype": "torch.float64", "shape": [1]}}},
        ),
        RuntimeError,
        "outside the buffer of 8 bytes",
    ),
    ("tensorbatch._unbatched._rebuild", ("data", torch.Size([])), TypeError, "expected a tensor and a torch.Size"),
    ("tensorbatch.memmap._rebuild_shared", ("data",), TypeError, "expected a tensor"),
    (
        "tensorbatch.memmap._rebuild_file_private",
        (b"/etc/passwd", torch.uint8, 1, 0, (1,), (1,)),
        TypeError,
        "expected a file name",
    ),
    (
        "tensorbatch.memmap._rebuild_file_private",
        ("/dev/zero", torch.uint8, 8, 0, (8,), (1,)),
        ValueError,
        "is not a regular file",
    ),
]


@pytest.mark.parametrize(
    ("name", "args", "error", "match"),
    BAD_ARGUMENTS,
    ids=[f"{b[0].rsplit('.', 1)[1]}-{i}" for i, b in enumerate(BAD_ARGUMENTS)],
)
def test_rebuild_functions_refuse_crafted_arguments(name: str, args: tuple[Any, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _rebuild_fn(name)(*args)


def test_crafted_rebuild_call_inside_a_checkpoint_is_refused(tmp_path: Path) -> None:
    """An allowlisted rebuild function given another allowlisted class in a weights-only load: a TypeError."""
    from tensorbatch._td import _rebuild

    path = _crafted_file(tmp_path, _rebuild, NonTensorData, {}, torch.Size([]), None, None, False)
    with pytest.raises(TypeError, match="expected a TensorDict class"):
        torch.load(path)


def test_crafted_memmap_path_to_a_fifo_does_not_block(tmp_path: Path) -> None:
    from tensorbatch.memmap import _rebuild_file

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = _crafted_file(tmp_path, _rebuild_file, str(fifo), torch.uint8, 4, 0, (4,), (1,))
    with pytest.raises(ValueError, match="is not a regular file"):
        torch.load(path)


def test_crafted_memmap_path_maps_a_readable_file_privately(tmp_path: Path) -> None:
    """The documented limit: a crafted checkpoint can read a file the user can read, never write it."""
    from tensorbatch.memmap import _rebuild_file

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"secret!!")
    path = _crafted_file(tmp_path, _rebuild_file, str(victim), torch.uint8, 8, 0, (8,), (1,))
    loaded = torch.load(path)["payload"]
    assert bytes(loaded.tolist()) == b"secret!!"
    with pytest.raises(RuntimeError, match="has no file"):
        loaded.filename  # noqa: B018
    loaded.zero_()
    assert victim.read_bytes() == b"secret!!"
