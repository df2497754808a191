"""Differential tests, safety: saves that would write through a symbolic link are refused, as in tensordict.

A save into an existing folder whose entry for a key (a leaf's ``.memmap`` file, a sub-TensorDict's
folder) is a link would write wherever the link points; both libraries raise RuntimeError before
writing anything. The folder the user names may itself be a link: both libraries follow it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _td(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.ones(3), "s": {"b": torch.ones(3)}}, [3])


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(b"x" * 64)
    return victim


def _raises_same(ref: Any, tb: Any, fn: Any) -> list[str]:
    messages = []
    for lib in (ref, tb):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="through symlink") as info:
                fn(lib)
        messages.append(str(info.value))
    return messages


@pytest.mark.parametrize("method", ["memmap", "memmap_like", "memmap_"])
def test_leaf_file_symlink_is_refused(ref, tb, tmp_path, method):
    victim = _victim(tmp_path)
    folders = iter(tmp_path / name for name in ("ref", "tb"))

    def go(lib: Any) -> Any:
        folder = next(folders)
        folder.mkdir()
        os.symlink(victim, folder / "a.memmap")
        return getattr(_td(lib), method)(folder)

    ref_msg, tb_msg = _raises_same(ref, tb, go)
    assert "Refusing to write memory-mapped tensor through symlink" in ref_msg
    assert "Refusing to write memory-mapped tensor through symlink" in tb_msg
    assert str(tmp_path / "tb" / "a.memmap") in tb_msg and "key 'a'" in tb_msg
    assert victim.read_bytes() == b"x" * 64
    assert sorted(os.listdir(tmp_path / "tb")) == ["a.memmap"]  # nothing written


def test_sub_tensordict_folder_symlink_is_refused(ref, tb, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folders = iter(tmp_path / name for name in ("ref", "tb"))

    def go(lib: Any) -> Any:
        folder = next(folders)
        folder.mkdir()
        os.symlink(elsewhere, folder / "s")
        return _td(lib).memmap(folder)

    ref_msg, tb_msg = _raises_same(ref, tb, go)
    assert "Refusing to write a memory-mapped TensorDict through symlink" in ref_msg
    assert "Refusing to write a memory-mapped TensorDict through symlink" in tb_msg
    assert "key 's'" in tb_msg
    assert os.listdir(elsewhere) == []
    assert sorted(os.listdir(tmp_path / "tb")) == ["s"]


def test_nested_leaf_symlink_names_the_key_path(tb, tmp_path):
    victim = _victim(tmp_path)
    (tmp_path / "p" / "s").mkdir(parents=True)
    os.symlink(victim, tmp_path / "p" / "s" / "b.memmap")
    with pytest.raises(RuntimeError, match=r"through symlink .*b\.memmap \(key \('s', 'b'\)\)"):
        _td(tb).memmap(tmp_path / "p")
    assert victim.read_bytes() == b"x" * 64


def test_dangling_symlink_is_refused(ref, tb, tmp_path):
    nowhere = tmp_path / "nowhere"
    folders = iter(tmp_path / name for name in ("ref", "tb"))

    def go(lib: Any) -> Any:
        folder = next(folders)
        folder.mkdir()
        os.symlink(nowhere, folder / "a.memmap")
        return _td(lib).memmap(folder)

    _raises_same(ref, tb, go)
    assert not nowhere.exists()


def test_make_memmap_and_from_tensor_refuse_symlinks(ref, tb, tmp_path):
    victim = _victim(tmp_path)
    for lib in (ref, tb):
        folder = tmp_path / lib.__name__
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            td = _td(lib).memmap(folder)
        os.symlink(victim, folder / "c.memmap")
        with pytest.raises(RuntimeError, match="Refusing to write memory-mapped tensor through symlink"):
            td.make_memmap("c", (3,))
        link = tmp_path / f"{lib.__name__}.link"
        os.symlink(victim, link)
        with pytest.raises(RuntimeError, match="Refusing to write memory-mapped tensor through symlink"):
            lib.MemoryMappedTensor.from_tensor(torch.ones(4), filename=link, existsok=True)
    assert victim.read_bytes() == b"x" * 64


def test_the_named_folder_may_be_a_symlink(ref, tb, tmp_path):
    for lib in (ref, tb):
        target = tmp_path / f"{lib.__name__}.target"
        target.mkdir()
        link = tmp_path / f"{lib.__name__}.link"
        os.symlink(target, link)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _td(lib).memmap(link)
            loaded = lib.TensorDict.load_memmap(link)
        assert (target / "a.memmap").exists()
        assert torch.equal(loaded["s", "b"], torch.ones(3))


# --------------------------------------------------------------------------------------------------
# The lock graph: a TensorDict nested under two locked roots stays locked until both let go
# --------------------------------------------------------------------------------------------------
def _outcome(fn: Any) -> str:
    try:
        fn()
    except RuntimeError as err:
        if "Cannot unlock a tensordict that is part of a locked graph" not in str(err):
            raise
        return "refused"
    return "ok"


def _shared_inner(lib: Any) -> tuple[Any, Any, Any]:
    inner = lib.TensorDict({"x": torch.zeros(3)}, [3])
    return inner, lib.TensorDict({"i": inner}, [3]), lib.TensorDict({"i": inner}, [3])


def _lock_graph_story(lib: Any) -> list[Any]:
    inner, r1, r2 = _shared_inner(lib)
    r1.lock_()
    steps = [_outcome(r2.lock_)]
    steps += [_outcome(r1.unlock_), r1.is_locked, inner.is_locked]
    steps += [_outcome(inner.unlock_), inner.is_locked, _outcome(r2.unlock_)]
    return steps


def test_lock_graph_of_a_shared_sub_tensordict(ref, tb):
    assert _lock_graph_story(tb) == _lock_graph_story(ref)
    assert _lock_graph_story(tb)[:2] == ["ok", "refused"]


def _single_root_story(lib: Any) -> list[Any]:
    inner, r1, r2 = _shared_inner(lib)
    r1.lock_()
    steps = [_outcome(inner.unlock_), inner.is_locked]  # its locked parent keeps it locked
    steps += [_outcome(r1.unlock_), r1.is_locked, inner.is_locked]
    r1.lock_()
    del r1  # a holder that is gone no longer holds the lock
    steps += [_outcome(inner.unlock_), inner.is_locked]
    r2.lock_()
    steps += [_outcome(r2.unlock_), r2.is_locked, inner.is_locked]
    return steps


def test_unlocking_under_a_single_root(ref, tb):
    assert _single_root_story(tb) == _single_root_story(ref)
    assert _single_root_story(tb) == ["refused", True, "ok", False, False, "ok", False, "ok", False, False]
