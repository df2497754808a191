"""Differential tests, memory-mapped folders: each library reads the other's saves identically.

For every case the content is built once per library, then:

* ``test_reference_folder_loads_here``: a folder tensordict saved loads in the subject as in tensordict;
* ``test_our_folder_loads_in_reference``: a folder the subject saved loads in tensordict as tensordict's own;
* ``test_same_files``: both libraries write the same files (names, metadata, raw bytes);
* ``test_memmap_result``: ``memmap(prefix)`` returns the same thing in both.

Loaded TensorDicts are compared through :func:`summary` (class names, batch sizes, devices, names, leaf
classes, dtypes, shapes and raw bytes, non-tensor values; a lazy stack member by member, because reading
a heterogeneous stack's leaf raises). Locking is compared separately (``[mm_load_locked]``).

Deliberate differences are dedicated cases of ``test_deliberate_difference`` listed in ``DIFFERENCES``
(conftest.py, ids ``[mm_...]``); bugs are strict xfails marked here (only when the subject is tensorbatch,
so the self-check against tensordict stays green).
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV, builtin_bases

pytestmark = pytest.mark.differential

_IS_TB = os.environ.get(SUBJECT_ENV, "tensorbatch") == "tensorbatch"


def bug(reason: str) -> Any:
    """A strict xfail for a tensorbatch bug (inactive when the suite runs against another subject)."""
    return pytest.mark.xfail(_IS_TB, strict=True, reason=f"bug: {reason}")


# --------------------------------------------------------------------------------------------------
# Saving, loading, comparing
# --------------------------------------------------------------------------------------------------
def save(lib: Any, td: Any, folder: Path, **kwargs: Any) -> Any:
    """``td.memmap(folder)``; ``allow_pickle=True`` where the library asks for it (tensordict pickles freely)."""
    if "allow_pickle" in inspect.signature(type(td).memmap).parameters:
        kwargs.setdefault("allow_pickle", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return td.memmap(folder, **kwargs)


def load(lib: Any, folder: Path, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tensordict's FutureWarnings (allow_pickle, robust keys)
        return lib.TensorDict.load_memmap(folder, allow_pickle=True, **kwargs)


def _plain(x: Any) -> Any:
    """Lists (tensordict's LinkedList included), tuples and dicts rebuilt from builtins."""
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().as_subclass(torch.Tensor).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def summary(x: Any) -> Any:
    """A plain description of a loaded value, equal across libraries when the values are the same."""
    name = type(x).__name__
    if name == "NonTensorData":
        return (name, tuple(x.batch_size), _plain(x.data))
    if name == "NonTensorStack":
        return (name, tuple(x.batch_size), _plain(x.tolist()))
    if name == "LazyStackedTensorDict":
        return (name, tuple(x.batch_size), x.stack_dim, str(x.device), [summary(m) for m in x.tensordicts])
    if isinstance(x, torch.Tensor):
        data = None if x.device.type == "meta" else _bits(x)
        return (name, str(x.dtype), tuple(x.shape), str(x.device), data)
    if hasattr(x, "batch_size"):
        return (
            name,
            tuple(x.batch_size),
            str(x.device),
            list(x.names),
            {key: summary(x.get(key)) for key in list(x.keys())},  # iter(td) walks the batch
        )
    return (name, x)


def _outcome(fn: Callable[[], Any]) -> Any:
    """``("ok", fn())``, or ``("raises", builtin bases)`` when ``fn`` raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", fn())
    except Exception as err:
        return ("raises", tuple(b.__name__ for b in builtin_bases(type(err))))


def folder_content(folder: Path) -> dict[str, Any]:
    """Every file under ``folder``: metadata parsed, raw data as bytes, other files by name only."""
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_dir():
            out[rel] = "<dir>"
        elif path.suffix == ".json":
            out[rel] = json.loads(path.read_text())
        elif path.suffix == ".memmap":
            out[rel] = path.read_bytes()
        else:
            out[rel] = "<file>"
    return out


# --------------------------------------------------------------------------------------------------
# Content (built once per library)
# --------------------------------------------------------------------------------------------------
DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
]  # fmt: skip


def _values(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    base = torch.arange(n, dtype=torch.float64).reshape(shape)
    if dtype == torch.bool:
        return base.remainder(3) == 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return (base.remainder(7) + 1).to(dtype)


def _flat(lib: Any) -> Any:
    return lib.TensorDict(
        {"a": torch.arange(12.0).reshape(3, 4), "b": torch.tensor([1, 2, 3]), "c": torch.tensor([True, False, True])},
        batch_size=[3],
    )


def _nested(lib: Any, **kwargs: Any) -> Any:
    return lib.TensorDict(
        {
            "x": torch.arange(6.0).reshape(3, 2),
            "n": {"y": torch.arange(3, dtype=torch.int32), "deep": {"z": torch.ones(3, 1, 2, dtype=torch.float64)}},
        },
        batch_size=[3],
        **kwargs,
    )


def _dtypes(lib: Any) -> Any:
    return lib.TensorDict(
        {str(d).removeprefix("torch."): _values(d, (2, 3)) for d in DTYPES}
        | {"nested": {str(d).removeprefix("torch."): _values(d, (2,)) for d in DTYPES}},
        batch_size=[2],
    )


def _nan_inf(lib: Any) -> Any:
    return lib.TensorDict({"x": torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])}, batch_size=[4])


def _device(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.ones(2, 3)}, batch_size=[2], device="cpu")


def _scalar_batch(lib: Any) -> Any:
    return lib.TensorDict({"s": torch.tensor(3.5), "v": torch.arange(3)}, batch_size=[])


def _noncontiguous(lib: Any) -> Any:
    return lib.TensorDict({"t": torch.arange(12.0).reshape(3, 4).t(), "s": torch.arange(8)[::2]}, batch_size=[4])


def _empty_nodes(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.zeros(2), "e": {}, "f": {"g": {}}}, batch_size=[2])


def _empty_root(lib: Any) -> Any:
    return lib.TensorDict({}, batch_size=[2, 3])


def _empty_leaf(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.ones(0, 3), "b": torch.ones(0, dtype=torch.int64)}, batch_size=[0])


def _names(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.ones(2, 3)}, batch_size=[2, 3], names=["row", "col"])


def _non_tensor(lib: Any) -> Any:
    td = lib.TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    td["s"] = "hello"
    td["n", "i"] = lib.NonTensorData(3, batch_size=[2])
    td["n", "f"] = lib.NonTensorData(2.5, batch_size=[2])
    td["n", "none"] = lib.NonTensorData(None, batch_size=[2])
    td["n", "d"] = lib.NonTensorData({"k": [1, 2], "z": "w"}, batch_size=[2])
    return td


def _non_tensor_stack(lib: Any) -> Any:
    return lib.TensorDict(
        {"x": torch.zeros(3), "l": lib.NonTensorStack.from_list(["a", "b", "c"])},
        batch_size=[3],
    )


def _non_tensor_stack_2d(lib: Any) -> Any:
    return lib.TensorDict({"l": lib.NonTensorStack.from_list([["a", "b"], ["c", "d"]])}, batch_size=[2])


def _pickled(lib: Any) -> Any:
    return lib.TensorDict(
        {"x": torch.zeros(2), "n": {"f": lib.NonTensorData(Fraction(1, 3), batch_size=[2])}}, batch_size=[2]
    )


def _pickled_stack(lib: Any) -> Any:
    return lib.TensorDict({"l": lib.NonTensorStack.from_list([Fraction(1, 2), Fraction(1, 3)])}, batch_size=[2])


def _row(lib: Any, i: int, **extra: Any) -> Any:
    return lib.TensorDict({"x": torch.arange(3.0) + 10 * i, "n": {"i": torch.arange(3) + i}, **extra}, batch_size=[3])


def _lazy(lib: Any) -> Any:
    return lib.lazy_stack([_row(lib, i) for i in range(3)], 0)


def _lazy_dim1(lib: Any) -> Any:
    return lib.lazy_stack([_row(lib, i) for i in range(2)], 1)


def _lazy_heterogeneous(lib: Any) -> Any:
    members = [lib.TensorDict({"x": torch.ones(3, i + 1) * i, f"only{i}": torch.arange(3)}, [3]) for i in range(2)]
    return lib.lazy_stack(members, 0)


def _lazy_in_td(lib: Any) -> Any:
    inner = lib.lazy_stack([_row(lib, i) for i in range(2)], 0)
    return lib.TensorDict({"l": inner, "a": torch.arange(2.0)}, batch_size=[2])


def _lazy_non_tensor(lib: Any) -> Any:
    return lib.lazy_stack([_row(lib, i, s=f"v{i}") for i in range(2)], 0)


def _lazy_of_lazy(lib: Any) -> Any:
    rows = [lib.lazy_stack([lib.TensorDict({"x": torch.tensor(float(3 * i + j))}, []) for j in range(3)], 0)
            for i in range(2)]  # fmt: skip
    return lib.lazy_stack(rows, 0)


SAFE_KEYS = ["a/b", "a.b", "with space", ".hidden", "100%", "x:y", "q?", 'quo"te', "tab\tkey", "back\\slash"]


def _odd_keys(lib: Any) -> Any:
    td = lib.TensorDict({key: torch.full((2,), float(i)) for i, key in enumerate(SAFE_KEYS)}, batch_size=[2])
    td["sub/dir", "leaf.x"] = torch.zeros(2)
    td["sp ace", "s"] = "text"
    return td


def _unicode_keys(lib: Any) -> Any:
    keys = ["ünï", "日本", "a+b", "x#y", "(p)", "k=v", "a,b"]
    return lib.TensorDict({key: torch.full((2,), float(i)) for i, key in enumerate(keys)}, batch_size=[2])


def _complex32(lib: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        return lib.TensorDict({"c": torch.arange(4.0).to(torch.complex32)}, batch_size=[4])


def _nt_data_root(lib: Any) -> Any:
    return lib.NonTensorData("hello", batch_size=[2])


def _nt_stack_root(lib: Any) -> Any:
    return lib.NonTensorStack.from_list(["a", "b"])


# --------------------------------------------------------------------------------------------------
# Cases: id -> (builder, {test: bug reason}) (tests: here, there, files, result)
# --------------------------------------------------------------------------------------------------
_LAZY_MMT = ("a lazy stack whose members hold MemoryMappedTensors cannot stack them: reading a leaf raises "
             "'cannot stack the members' values' (_lazy._stack_values accepts only exact torch.Tensor)")  # fmt: skip
_KEYS = ("keys are percent-encoded with urllib's quote (every non-ASCII or reserved character), tensordict "
         "encodes only /<>:\"|?*\\ space % and control characters: a tensordict folder's files are not found "
         "(FileNotFoundError), and tensordict silently drops such keys from our folders")  # fmt: skip
_NAMES = ("dimension names are not saved (tensordict writes '_names'), and a tensordict folder with names does "
          "not load ('invalid entry for key _names')")  # fmt: skip
_EMPTY_LEAF = ("tensordict writes no file for an empty (numel 0) leaf; loading such a folder raises "
               "FileNotFoundError instead of making the empty tensor")  # fmt: skip
_PICKLED_STACK = ("pickled NonTensorStack: tensordict's format ('data': 'pickle.pkl' + pickle.pkl) is read as the "
                  "string 'pickle.pkl', and ours (other.pickle, no 'data') does not load in tensordict")  # fmt: skip
_COMPLEX32 = "complex32 is missing from the loader's dtype table ('unknown dtype')"
_NT_DATA_ROOT = ("a NonTensorData root: ours is saved as an empty TensorDict (the value is lost); tensordict's "
                 "does not load (TypeError: cannot create weak reference)")  # fmt: skip
_NT_STACK_ROOT = ("a NonTensorStack root: ours is saved without its values (memmap fails to reload it); "
                  "tensordict's does not load (TypeError: cannot create weak reference)")  # fmt: skip

ALL = ("here", "there", "files", "result")
CASES: dict[str, tuple[Callable[[Any], Any], dict[str, str]]] = {
    "mm_flat": (_flat, {}),
    "mm_nested": (_nested, {}),
    "mm_dtypes": (_dtypes, {}),
    "mm_nan_inf": (_nan_inf, {}),
    "mm_device": (_device, {}),
    "mm_scalar_batch": (_scalar_batch, {}),
    "mm_noncontiguous": (_noncontiguous, {}),
    "mm_empty_nodes": (_empty_nodes, {}),
    "mm_empty_root": (_empty_root, {}),
    "mm_non_tensor": (_non_tensor, {}),
    "mm_non_tensor_stack": (_non_tensor_stack, {}),
    "mm_non_tensor_stack_2d": (_non_tensor_stack_2d, {}),
    "mm_pickled": (_pickled, {}),
    "mm_odd_keys": (_odd_keys, {}),
    "mm_lazy": (_lazy, {}),
    "mm_lazy_dim1": (_lazy_dim1, {}),
    "mm_lazy_heterogeneous": (_lazy_heterogeneous, {}),
    "mm_lazy_in_td": (_lazy_in_td, {}),
    "mm_lazy_non_tensor": (_lazy_non_tensor, {}),
    "mm_lazy_of_lazy": (_lazy_of_lazy, {}),
    "mm_unicode_keys": (_unicode_keys, {}),
    "mm_names": (_names, {}),
    "mm_empty_leaf": (_empty_leaf, {}),  # "there" and "files": DIFFERENCES
    "mm_pickled_stack": (_pickled_stack, {}),
    "mm_complex32": (_complex32, {}),
    "mm_nt_data_root": (_nt_data_root, {}),
    "mm_nt_stack_root": (_nt_stack_root, {}),
}


def _params(test: str) -> list[Any]:
    out = []
    for case_id, (builder, bugs) in CASES.items():
        marks = [bug(bugs[test])] if test in bugs else []
        out.append(pytest.param(builder, id=case_id, marks=marks))
    return out


@pytest.mark.parametrize("builder", _params("here"))
def test_reference_folder_loads_here(ref, tb, tmp_path, builder):
    folder = tmp_path / "ref"
    save(ref, builder(ref), folder)
    expected = summary(load(ref, folder))
    assert summary(load(tb, folder)) == expected


@pytest.mark.parametrize("builder", _params("there"))
def test_our_folder_loads_in_reference(ref, tb, tmp_path, builder):
    save(ref, builder(ref), tmp_path / "ref")
    expected = summary(load(ref, tmp_path / "ref"))
    save(tb, builder(tb), tmp_path / "sub")
    assert summary(load(ref, tmp_path / "sub")) == expected


@pytest.mark.parametrize("builder", _params("files"))
def test_same_files(ref, tb, tmp_path, builder):
    save(ref, builder(ref), tmp_path / "ref")
    save(tb, builder(tb), tmp_path / "sub")
    assert folder_content(tmp_path / "sub") == folder_content(tmp_path / "ref")


@pytest.mark.parametrize("builder", _params("result"))
def test_memmap_result(ref, tb, tmp_path, builder):
    r = save(ref, builder(ref), tmp_path / "ref")
    s = save(tb, builder(tb), tmp_path / "sub")
    assert summary(s) == summary(r)
    assert bool(s.is_locked) == bool(r.is_locked)


# --------------------------------------------------------------------------------------------------
# Reading a lazy stack's stacked leaves, and other single checks
# --------------------------------------------------------------------------------------------------
def _stacked_reads(td: Any) -> Any:
    return {key: summary(td.get(key)) for key in ("x", ("n", "i"))}


@pytest.mark.parametrize(
    "builder",
    [
        pytest.param(_lazy, id="mm_lazy"),
        pytest.param(_lazy_dim1, id="mm_lazy_dim1"),
    ],
)
def test_lazy_stacked_leaf_read(ref, tb, tmp_path, builder):
    save(ref, builder(ref), tmp_path / "ref")
    expected = _stacked_reads(load(ref, tmp_path / "ref"))
    assert _stacked_reads(load(tb, tmp_path / "ref")) == expected


def test_leaf_classes_and_files(ref, tb, tmp_path):
    """Loaded leaves are MemoryMappedTensors of the folder's files, in both libraries."""
    save(ref, _nested(ref), tmp_path / "ref")
    for lib in (ref, tb):
        td = load(lib, tmp_path / "ref")
        leaf = td["n", "deep", "z"]
        assert type(leaf).__name__ == "MemoryMappedTensor"
        assert Path(leaf.filename) == tmp_path / "ref" / "n" / "deep" / "z.memmap"


def test_writes_are_shared_across_libraries(ref, tb, tmp_path):
    save(ref, _flat(ref), tmp_path / "ref")
    theirs = load(ref, tmp_path / "ref")
    ours = load(tb, tmp_path / "ref")
    ours["a"][0, 0] = -1.0
    theirs["b"][2] = 42
    assert theirs["a"][0, 0] == -1.0
    assert ours["b"][2] == 42


def test_meta_device(ref, tb, tmp_path):
    save(ref, _nested(ref), tmp_path / "ref")
    expected = summary(load(ref, tmp_path / "ref", device="meta"))
    assert summary(load(tb, tmp_path / "ref", device="meta")) == expected


def test_memmap_like(ref, tb, tmp_path):
    r = _nested(ref).memmap_like(tmp_path / "ref")
    s = _nested(tb).memmap_like(tmp_path / "sub")
    assert summary(s) == summary(r)
    assert folder_content(tmp_path / "sub") == folder_content(tmp_path / "ref")


def test_memmap_inplace(ref, tb, tmp_path):
    r, s = _nested(ref, device="cpu"), _nested(tb, device="cpu")  # device=None: test_memmap_device
    assert r.memmap_(tmp_path / "ref") is r
    assert s.memmap_(tmp_path / "sub") is s
    assert summary(s) == summary(r)
    assert (s.is_locked, s.is_memmap()) == (r.is_locked, r.is_memmap())
    r.set_("x", torch.full((3, 2), 5.0))
    s.set_("x", torch.full((3, 2), 5.0))
    assert folder_content(tmp_path / "sub") == folder_content(tmp_path / "ref")


def test_memmap_shared_memory(ref, tb):
    r, s = _nested(ref, device="cpu").memmap(), _nested(tb, device="cpu").memmap()  # None: test_memmap_device
    assert summary(s) == summary(r)
    assert (s.is_locked, s.is_memmap()) == (r.is_locked, r.is_memmap())
    for td in (r, s):
        with pytest.raises(RuntimeError):
            td["x"].filename  # noqa: B018


_DEVICE = ("memmap()/memmap_like() without a folder and memmap_() keep device None, while memmap(folder) gives "
           "'cpu' (tensordict: 'cpu' in every case)")  # fmt: skip


def _in_place(td: Any, *args: Any) -> Any:
    td.memmap_(*args)
    return td


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda td, folder: td.memmap(folder), id="memmap_folder"),
        pytest.param(lambda td, folder: td.memmap_like(folder), id="memmap_like_folder"),
        pytest.param(lambda td, folder: td.memmap(), id="memmap_shared"),
        pytest.param(lambda td, folder: td.memmap_like(), id="memmap_like_shared"),
        pytest.param(lambda td, folder: _in_place(td, folder), id="memmap_inplace_folder"),
        pytest.param(lambda td, folder: _in_place(td), id="memmap_inplace_shared"),
    ],
)
def test_memmap_device(ref, tb, tmp_path, make):
    """Memory-mapping a TensorDict without a device gives one on the CPU (where the files are)."""
    r = make(_nested(ref), tmp_path / "ref")
    s = make(_nested(tb), tmp_path / "sub")
    assert (str(s.device), str(s["n"].device)) == (str(r.device), str(r["n"].device))


def test_existsok_false(ref, tb, tmp_path):
    outcomes = []
    for lib in (ref, tb):
        folder = tmp_path / lib.__name__
        save(lib, _flat(lib), folder)
        outcomes.append(_outcome(lambda lib=lib, folder=folder: save(lib, _flat(lib), folder, existsok=False)))
    assert outcomes[1] == outcomes[0] == ("raises", ("RuntimeError",))


def test_return_early_with_threads(ref, tb, tmp_path):
    r = _nested(ref).memmap(tmp_path / "ref", return_early=True, num_threads=2).result()
    s = _nested(tb).memmap(tmp_path / "sub", return_early=True, num_threads=2).result()
    assert summary(s) == summary(r)


# --------------------------------------------------------------------------------------------------
# Deliberate differences (each one listed in DIFFERENCES): the subject's outcome differs from tensordict's
# --------------------------------------------------------------------------------------------------
def _saved_flat(lib: Any, folder: Path) -> Path:
    save(lib, _flat(lib), folder)
    return folder


def _truncate(folder: Path) -> Path:
    with open(folder / "a.memmap", "r+b") as f:
        f.truncate(8)
    return folder


def _grow(folder: Path) -> Path:
    with open(folder / "a.memmap", "ab") as f:
        f.write(b"\0" * 16)
    return folder


def _remove(folder: Path) -> Path:
    (folder / "b.memmap").unlink()
    return folder


def _bad_json(folder: Path) -> Path:
    (folder / "meta.json").write_text("{oops")
    return folder


def _bad_dtype(folder: Path) -> Path:
    meta = json.loads((folder / "meta.json").read_text())
    meta["a"]["dtype"] = "torch.float99"
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def _load_damaged(damage: Callable[[Path], Path]) -> Callable[[Any, Any, Path], Any]:
    """Each library loads a copy of tensordict's save of ``_flat`` damaged by ``damage``."""

    def fn(ref: Any, lib: Any, folder: Path) -> Any:
        damaged = damage(_saved_flat(ref, folder))
        return _outcome(lambda: sorted(str(k) for k in list(load(lib, damaged).keys())))

    return fn


def _load_locked(ref: Any, lib: Any, folder: Path) -> Any:
    save(ref, _flat(ref), folder)
    return bool(load(lib, folder).is_locked)


def _dot_keys(ref: Any, lib: Any, folder: Path) -> Any:
    def build(x: Any) -> Any:
        return x.TensorDict({"": torch.ones(2), ".": {"x": torch.zeros(2)}, "..": torch.ones(2)}, batch_size=[2])

    saved = _outcome(lambda: sorted(save(lib, build(lib), folder / "own").keys()))
    save(ref, build(ref), folder / "ref")
    loaded = _outcome(lambda: sorted(load(lib, folder / "ref").keys()))
    return saved, loaded


def _pickle_save(ref: Any, lib: Any, folder: Path) -> Any:
    return _outcome(lambda: lib.TensorDict({"f": lib.NonTensorData(Fraction(1, 3))}, []).memmap(folder)["f"])


def _pickle_load(ref: Any, lib: Any, folder: Path) -> Any:
    save(ref, _pickled(ref), folder)
    return _outcome(lambda: lib.TensorDict.load_memmap(folder)["n", "f"])


def _load_out(ref: Any, lib: Any, folder: Path) -> Any:
    save(ref, _flat(ref), folder)
    out = _flat(lib).zero_()
    lib.TensorDict.load_memmap(folder, out=out)
    return type(out["a"]).__name__, out["a"].sum().item()


def _load_memmap_(ref: Any, lib: Any, folder: Path) -> Any:
    save(ref, _flat(ref), folder)
    target = _flat(lib).zero_()
    target.load_memmap_(folder)
    return type(target["a"]).__name__, target["a"].sum().item()


def _return_early_no_threads(ref: Any, lib: Any, folder: Path) -> Any:
    return type(_flat(lib).memmap(folder, return_early=True)).__name__.endswith("TensorDict")


def _shared_is_shared(ref: Any, lib: Any, folder: Path) -> Any:
    m = _flat(lib).memmap()
    return bool(m["a"].is_shared()), bool(m.is_shared())


DIFFERENCE_CASES = {
    "mm_load_locked": _load_locked,
    "mm_truncated_file": _load_damaged(_truncate),
    "mm_oversized_file": _load_damaged(_grow),
    "mm_missing_file": _load_damaged(_remove),
    "mm_bad_json": _load_damaged(_bad_json),
    "mm_unknown_dtype": _load_damaged(_bad_dtype),
    "mm_keys_dot_empty": _dot_keys,
    "mm_pickle_save": _pickle_save,
    "mm_pickle_load": _pickle_load,
    "mm_load_out": _load_out,
    "mm_load_memmap_": _load_memmap_,
    "mm_return_early_no_threads": _return_early_no_threads,
    "mm_shared_is_shared": _shared_is_shared,
}


@pytest.mark.parametrize("check", list(DIFFERENCE_CASES.values()), ids=list(DIFFERENCE_CASES))
def test_deliberate_difference(ref, tb, tmp_path, check):
    expected = check(ref, ref, tmp_path / "ref")
    assert check(ref, tb, tmp_path / "sub") == expected
