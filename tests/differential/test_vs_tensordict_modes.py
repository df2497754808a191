"""Differential tests, map modes: ``from_filename`` and ``load_memmap`` write the files as tensordict does.

``mode="r"`` maps copy-on-write (writes stay in memory, the file keeps its bytes), ``"r+"`` and the default
map shared (writes reach the file); an archive's default is copy-on-write. Both libraries run the same
writes on their own copy of the same files; the tensors' values and the files' bytes must agree. Saves into
a folder holding the user's files keep them in both.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential

MODES = [None, "r", "r+"]


def _quiet(fn: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def _kw(mode: str | None) -> dict[str, Any]:
    return {} if mode is None else {"mode": mode}


@pytest.mark.parametrize("mode", MODES)
def test_from_filename_modes(ref, tb, tmp_path, mode):
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        file = tmp_path / f"{name}.memmap"
        file.write_bytes(torch.arange(4).numpy().tobytes())
        x = _quiet(
            lambda lib=lib, file=file: lib.MemoryMappedTensor.from_filename(file, torch.int64, (4,), **_kw(mode))
        )
        x[0] = 100
        x[2:].add_(10)
        y = pickle.loads(pickle.dumps(x))  # a pickled tensor maps the file again, with the same mode
        results.append((x.tolist(), y.tolist(), file.read_bytes()))
    assert results[0] == results[1]


def test_from_filename_bad_mode(ref, tb, tmp_path):
    file = tmp_path / "x.memmap"
    file.write_bytes(bytes(8))
    messages = []
    for lib in (ref, tb):
        with pytest.raises(ValueError, match="mode must be") as info:
            _quiet(lambda lib=lib: lib.MemoryMappedTensor.from_filename(file, torch.int64, (1,), mode="w+"))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def _write_and_read(lib: Any, path: Path, mode: str | None) -> tuple[Any, ...]:
    loaded = _quiet(lambda: lib.TensorDict.load_memmap(path, **_kw(mode)))
    loaded["a"][0] = 100.0
    loaded["n", "b"].add_(1)
    fresh = _quiet(lambda: lib.TensorDict.load_memmap(path))
    return loaded["a"].tolist(), loaded["n", "b"].tolist(), fresh["a"].tolist(), fresh["n", "b"].tolist()


def _td(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.arange(3.0), "n": {"b": torch.ones(3, 2)}}, batch_size=[3])


@pytest.mark.parametrize("mode", MODES)
def test_load_memmap_folder_modes(ref, tb, tmp_path, mode):
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        folder = tmp_path / name
        _quiet(lambda lib=lib, folder=folder: _td(lib).memmap(folder))
        results.append(_write_and_read(lib, folder, mode))
    assert results[0] == results[1]


@pytest.mark.parametrize("mode", MODES)
def test_load_memmap_archive_modes(ref, tb, tmp_path, mode):
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        path = tmp_path / f"{name}.tdz"
        _quiet(lambda lib=lib, path=path: _td(lib).memmap(path))
        results.append(_write_and_read(lib, path, mode))
    assert results[0] == results[1]


def test_from_consolidated_is_copy_on_write(ref, tb, tmp_path):
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        file = tmp_path / f"{name}.bin"
        _quiet(lambda lib=lib, file=file: _td(lib).consolidate(filename=file))
        before = file.read_bytes()
        loaded = lib.TensorDict.from_consolidated(file)
        loaded["a"].add_(1)
        results.append((loaded["a"].tolist(), file.read_bytes() == before))
    assert results[0] == results[1] == ([1.0, 2.0, 3.0], True)


@pytest.mark.parametrize("method", ["memmap", "memmap_like", "memmap_"])
def test_user_files_in_the_folder_are_kept(ref, tb, tmp_path, method):
    for name, lib in (("ref", ref), ("tb", tb)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "notes.txt").write_text("x")
        _quiet(lambda lib=lib, folder=folder: getattr(_td(lib), method)(folder))
        assert (folder / "notes.txt").read_text() == "x", name
        assert _quiet(lambda lib=lib, folder=folder: lib.TensorDict.load_memmap(folder))["n", "b"].shape == (3, 2)


# deliberate differences (strict xfails in conftest.py): the subject refuses what the reference allows
def _outcome(fn: Any) -> Any:
    try:
        return ("ok", _quiet(fn))
    except Exception as err:  # the outcome compared: which error, if any
        return ("raises", type(err).__name__)


def test_load_refuses_a_link_leaving_the_folder(ref, tb, tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(torch.zeros(3).numpy().tobytes())
    outcomes = []
    for name, lib in (("ref", ref), ("tb", tb)):
        folder = tmp_path / name
        _quiet(lambda lib=lib, folder=folder: _td(lib).memmap(folder))
        (folder / "a.memmap").unlink()
        (folder / "a.memmap").symlink_to(outside)
        outcomes.append(_outcome(lambda lib=lib, folder=folder: lib.TensorDict.load_memmap(folder)["a"].tolist()))
    assert outcomes[0] == outcomes[1]


def test_save_refuses_to_replace_a_user_file(ref, tb, tmp_path):
    outcomes = []
    for name, lib in (("ref", ref), ("tb", tb)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.memmap").write_bytes(b"mine")
        outcomes.append(_outcome(lambda lib=lib, folder=folder: sorted(os.listdir(_td(lib).memmap(folder).saved_path))))
    assert outcomes[0] == outcomes[1]


def test_memmap_like_over_a_save_keeps_its_values(ref, tb, tmp_path):
    """memmap_like into a folder holding a save of the same structure maps the saved values (shared)."""
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        td = lib.TensorDict({"a": torch.arange(6.0).reshape(3, 2), "n": {"b": torch.ones(3)}}, batch_size=[3])
        saved = _quiet(lambda td=td, name=name: td.memmap(tmp_path / name))
        like = _quiet(lambda td=td, name=name: td.memmap_like(tmp_path / name))
        values = (like["a"].tolist(), like["n", "b"].tolist())
        like["a"][0, 0] = 100.0
        results.append((values, saved["a"][0, 0].item(), lib.TensorDict.load_memmap(tmp_path / name)["a"][0, 0].item()))
    assert results[1] == results[0]


def test_make_memmap_of_a_new_nested_key_joins_the_save(ref, tb, tmp_path):
    results = []
    for name, lib in (("ref", ref), ("tb", tb)):
        td = _quiet(lambda lib=lib, name=name: lib.TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(tmp_path / name))
        x = td.make_memmap(("nested", "deep", "b"), (3, 4))
        x.fill_(2.0)
        back = lib.TensorDict.load_memmap(tmp_path / name)
        results.append(
            (
                td["nested", "deep", "b"] is x,
                td["nested"].batch_size,
                back["nested", "deep", "b"].tolist(),
                back["nested", "deep"].batch_size,
                sorted(map(str, back.keys(True, True))),
            )
        )
    assert results[1] == results[0]
