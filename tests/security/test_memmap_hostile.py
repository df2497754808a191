"""Memory-mapped files and folders: read-only maps never write, saves delete nothing of the user's, loads
never reach outside the folder (docs/security.md).

Every probe runs in ``tmp_path``; files outside the target are fingerprinted before and after.
"""

from __future__ import annotations

import os
import pickle
import types
import warnings
from pathlib import Path

import pytest
import torch

import tensorbatch
from tensorbatch import MemoryMappedTensor, TensorDict, from_safetensors, to_safetensors

from ._files import digest, tree


def _td() -> TensorDict:
    return TensorDict({"a": torch.arange(3.0), "n": {"b": torch.ones(3, 2)}}, batch_size=[3])


def _raw(path: Path, dtype: torch.dtype = torch.float32) -> list:
    return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=dtype).tolist()


# ============================================================================ 1. read-only maps stay read-only
class TestReadOnlyMaps:
    def test_from_filename_mode_r_is_copy_on_write(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(3), filename=file)
        before = digest(file)
        x = MemoryMappedTensor.from_filename(file, torch.int64, (3,), mode="r")
        x[0] = 100
        x[1:].add_(10)  # a view writes too
        assert digest(file) == before
        assert x.tolist() == [100, 11, 12]  # the tensor holds the writes (tensordict's behaviour)
        assert isinstance(x, MemoryMappedTensor)
        assert x.filename == str(file)

    @pytest.mark.parametrize("mode", [None, "r+"])
    def test_from_filename_writable_modes_write_the_file(self, tmp_path, mode):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(3), filename=file)
        MemoryMappedTensor.from_filename(file, torch.int64, (3,), mode=mode)[0] = 100
        assert _raw(file, torch.int64) == [100, 1, 2]

    def test_from_filename_bad_mode(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(3), filename=file)
        with pytest.raises(ValueError, match="mode must be 'r', 'r\\+' or None, got 'w\\+'"):
            MemoryMappedTensor.from_filename(file, torch.int64, (3,), mode="w+")

    @pytest.mark.skipif(os.geteuid() == 0, reason="root can write any file")
    def test_unwritable_file(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(3), filename=file)
        file.chmod(0o444)
        with pytest.raises(PermissionError, match="not writable"):
            MemoryMappedTensor.from_filename(file, torch.int64, (3,), mode="r+")
        x = MemoryMappedTensor.from_filename(file, torch.int64, (3,))  # default: copy-on-write
        x[0] = 7
        assert _raw(file, torch.int64) == [0, 1, 2]
        assert x.tolist() == [7, 1, 2]

    def test_pickled_copy_on_write_tensor_stays_copy_on_write(self, tmp_path):
        file = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(4), filename=file)
        x = MemoryMappedTensor.from_filename(file, torch.int64, (4,), mode="r")
        x[0] = 100
        y = pickle.loads(pickle.dumps(x[1:]))
        y[0] = 50
        assert _raw(file, torch.int64) == [0, 1, 2, 3]
        assert y.tolist() == [50, 2, 3]  # the file's data (as tensordict: private writes do not travel)
        shared = pickle.loads(pickle.dumps(MemoryMappedTensor.from_filename(file, torch.int64, (4,))))
        shared[3] = 9
        assert _raw(file, torch.int64) == [0, 1, 2, 9]

    @pytest.mark.parametrize("how", ["load_memmap_r", "load_r", "function_r", "subpath_r"])
    def test_load_mode_r_never_writes(self, tmp_path, how):
        folder = tmp_path / "td"
        _td().memmap(folder)
        before = tree(folder)
        loaded = {
            "load_memmap_r": lambda: TensorDict.load_memmap(folder, mode="r"),
            "load_r": lambda: TensorDict.load(folder, mode="r"),
            "function_r": lambda: tensorbatch.load_memmap(folder, mode="r"),
            "subpath_r": lambda: TensorDict(n=TensorDict.load_memmap(folder, subpath="n", mode="r"), batch_size=[3]),
        }[how]()
        loaded["n", "b"].add_(1)
        if "a" in loaded:
            loaded["a"][0] = 100
            assert loaded["a"].tolist() == [100.0, 1.0, 2.0]
        assert loaded["n", "b"].tolist() == [[2.0, 2.0]] * 3
        assert tree(folder) == before

    def test_default_load_writes_through_as_tensordict(self, tmp_path):
        # tensordict's documented default: shared when the files can be written (mode="r" for read-only)
        folder = tmp_path / "td"
        _td().memmap(folder)
        TensorDict.load_memmap(folder)["a"][0] = 100
        assert _raw(folder / "a.memmap") == [100.0, 1.0, 2.0]

    def test_load_memmap_inplace_only_reads(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        before = tree(folder)
        target = _td().zero_()
        out = target.load_memmap_(folder)
        assert out is target
        assert target["a"].tolist() == [0.0, 1.0, 2.0]
        target["a"].add_(1)
        assert tree(folder) == before
        with pytest.raises(ValueError, match="mode must be None, 'r' or 'r\\+'"):
            target.load_memmap_(folder, mode="w")

    def test_refresh_keeps_the_mode(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        before = tree(folder)
        loaded = TensorDict.load_memmap(folder, mode="r")
        loaded.memmap_refresh_()
        loaded["a"].add_(5)
        assert tree(folder) == before
        assert loaded["a"].tolist() == [5.0, 6.0, 7.0]

    def test_resave_of_copy_on_write_leaves_writes_them(self, tmp_path):
        # a copy-on-write leaf names its file but holds private writes: re-saving must not skip it
        folder = tmp_path / "td"
        _td().memmap(folder)
        loaded = TensorDict.load_memmap(folder, mode="r")
        loaded["a"].add_(1)
        loaded.memmap(folder)
        assert _raw(folder / "a.memmap") == [1.0, 2.0, 3.0]

    @pytest.mark.parametrize("mode", [None, "r"])
    def test_archive_read_only_modes(self, tmp_path, mode):
        path = tmp_path / "td.tdz"
        _td().memmap(path)
        before = digest(path)
        loaded = TensorDict.load_memmap(path, mode=mode)
        loaded["a"].add_(1)
        loaded["n", "b"][0] = 7
        assert digest(path) == before
        assert loaded["a"].tolist() == [1.0, 2.0, 3.0]

    def test_archive_compressed_leaves(self, tmp_path):
        path = tmp_path / "td.tdz"
        _td().memmap(path, compression="deflate")
        before = digest(path)
        loaded = TensorDict.load_memmap(path)
        loaded["a"].add_(1)
        assert digest(path) == before
        assert loaded["a"].tolist() == [1.0, 2.0, 3.0]

    def test_from_consolidated_is_copy_on_write(self, tmp_path):
        file = tmp_path / "td.bin"
        _td().consolidate(filename=file)
        before = digest(file)
        loaded = TensorDict.from_consolidated(file)
        loaded["a"].add_(1)
        loaded["n", "b"].zero_()
        assert digest(file) == before
        assert loaded["a"].tolist() == [1.0, 2.0, 3.0]
        assert loaded.is_consolidated()
        again = tensorbatch.from_consolidated(file)
        again["a"].add_(1)
        assert digest(file) == before

    def test_consolidate_again_writes_the_changes(self, tmp_path):
        # (tensordict's documented way to write a from_consolidated TensorDict's changes)
        file = tmp_path / "td.bin"
        _td().consolidate(filename=file)
        loaded = TensorDict.from_consolidated(file)
        loaded["a"].add_(1)
        loaded.consolidate(filename=file)
        assert loaded["a"].tolist() == [1.0, 2.0, 3.0]  # (read while its own file was replaced)
        assert TensorDict.from_consolidated(file)["a"].tolist() == [1.0, 2.0, 3.0]

    def test_safetensors_load_never_writes(self, tmp_path):
        pytest.importorskip("safetensors", reason="safetensors (the safetensors extra) is not installed")
        file = tmp_path / "td.safetensors"
        to_safetensors(_td(), file)
        before = digest(file)
        loaded = from_safetensors(file)
        loaded["a"].add_(1)
        loaded["n", "b"].zero_()
        assert digest(file) == before
        assert loaded["a"].tolist() == [1.0, 2.0, 3.0]

    def test_from_handler_over_a_read_only_buffer(self):
        data = torch.arange(4.0).numpy().tobytes()
        handler = types.SimpleNamespace(buffer=data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            x = MemoryMappedTensor.from_handler(handler, torch.float32, (4,))
        x[0] = 100.0
        assert data == torch.arange(4.0).numpy().tobytes()  # the immutable bytes are untouched
        assert x.tolist() == [100.0, 1.0, 2.0, 3.0]


# ============================================================================ 2. no data loss
def _user_files(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "docs").mkdir(exist_ok=True)
    (folder / "docs" / "readme.md").write_text("also mine")
    return {"notes.txt": digest(folder / "notes.txt"), "docs/readme.md": digest(folder / "docs" / "readme.md")}


def _kept(folder: Path, files: dict[str, str]) -> None:
    now = tree(folder)
    for rel, value in files.items():
        assert now.get(rel) == value, f"{rel} was lost or changed"


class TestNoDataLoss:
    @pytest.mark.parametrize("method", ["memmap", "memmap_like", "memmap_", "save", "dumps"])
    def test_saving_into_a_folder_with_user_files(self, tmp_path, method):
        folder = tmp_path / "td"
        files = _user_files(folder)
        out = getattr(_td(), method)(folder)
        _kept(folder, files)
        assert sorted(os.listdir(tmp_path)) == ["td"]  # no temporary or old folder left
        loaded = TensorDict.load_memmap(folder)
        assert loaded["n", "b"].shape == (3, 2)
        assert out is not None

    def test_resaving_over_a_previous_save_with_user_files(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        files = _user_files(folder)
        (folder / "n" / "mine.bin").write_bytes(b"\x01\x02")
        files["n/mine.bin"] = digest(folder / "n" / "mine.bin")
        TensorDict({"z": torch.zeros(3)}, batch_size=[3]).memmap(folder, existsok=True)
        _kept(folder, files)
        assert not (folder / "a.memmap").exists()
        assert not (folder / "n" / "b.memmap").exists()
        assert not (folder / "n" / "meta.json").exists()
        assert list(TensorDict.load_memmap(folder).keys()) == ["z"]

    def test_inplace_resave_keeps_user_files_in_dropped_nodes(self, tmp_path):
        folder = tmp_path / "td"
        mapped = _td().memmap(folder)
        (folder / "n" / "mine.bin").write_bytes(b"\x01")
        mapped.exclude("n").memmap(folder)  # mapped from this folder: updated in place
        assert (folder / "n" / "mine.bin").read_bytes() == b"\x01"
        assert sorted(os.listdir(folder / "n")) == ["mine.bin"]

    def test_existsok_false(self, tmp_path):
        folder = tmp_path / "td"
        files = _user_files(folder)
        _td().memmap(folder, existsok=False)  # no save there yet: written beside the user's files
        _kept(folder, files)
        before = tree(folder)
        with pytest.raises(RuntimeError, match="already exists and holds a save"):
            _td().memmap(folder, existsok=False)
        assert tree(folder) == before

    def test_a_user_file_in_the_way_is_refused(self, tmp_path):
        folder = tmp_path / "td"
        folder.mkdir()
        (folder / "a.memmap").write_bytes(b"precious")  # no meta.json names it: the user's
        with pytest.raises(RuntimeError, match=r"would replace .*a\.memmap, which no previous save wrote"):
            _td().memmap(folder)
        assert (folder / "a.memmap").read_bytes() == b"precious"
        assert sorted(os.listdir(tmp_path)) == ["td"]

    def test_a_file_as_the_folder_is_refused(self, tmp_path):
        (tmp_path / "thing").write_text("a file")
        with pytest.raises(NotADirectoryError, match="it is a file"):
            _td().memmap(tmp_path / "thing")
        assert (tmp_path / "thing").read_text() == "a file"

    def test_unpack_keeps_user_files(self, tmp_path):
        _td().memmap(tmp_path / "x.tdz")
        folder = tmp_path / "saved"
        TensorDict(old=torch.zeros(3)).memmap(folder)
        files = _user_files(folder)
        tensorbatch.unpack_memmap(tmp_path / "x.tdz", folder)
        _kept(folder, files)
        assert not (folder / "old.memmap").exists()

    def test_archive_over_a_user_file_replaces_only_it(self, tmp_path):
        files = _user_files(tmp_path / "beside")
        _td().memmap(tmp_path / "beside" / "td.tdz")
        _kept(tmp_path / "beside", files)

    def test_consolidate_over_an_existing_file_is_atomic(self, tmp_path):
        file = tmp_path / "td.bin"
        _td().consolidate(filename=file)
        reader = TensorDict.from_consolidated(file)
        bigger = TensorDict({"a": torch.arange(1000.0) + 50}, batch_size=[1000])
        bigger.consolidate(filename=file)  # the old file is replaced, not truncated under its readers
        assert reader["a"].tolist() == [0.0, 1.0, 2.0]
        assert TensorDict.from_consolidated(file)["a"].shape == (1000,)
        assert sorted(os.listdir(tmp_path)) == ["td.bin"]

    def test_consolidate_through_a_symlink_is_refused(self, tmp_path):
        victim = tmp_path / "victim"
        victim.write_bytes(b"x" * 64)
        (tmp_path / "out").mkdir()
        os.symlink(victim, tmp_path / "out" / "td.bin")
        with pytest.raises(RuntimeError, match="through symlink"):
            _td().consolidate(filename=tmp_path / "out" / "td.bin")
        assert victim.read_bytes() == b"x" * 64


# ============================================================================ 3. nothing outside the target
def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside


class TestLinksLeavingTheFolder:
    @pytest.mark.parametrize("mode", [None, "r", "r+"])
    def test_leaf_file_link(self, tmp_path, mode):
        folder = tmp_path / "td"
        _td().memmap(folder)
        outside = _outside(tmp_path)
        victim = outside / "victim.bin"
        victim.write_bytes(torch.full((3,), 9.0).numpy().tobytes())
        before = tree(outside)
        (folder / "a.memmap").unlink()
        os.symlink(victim, folder / "a.memmap")
        with pytest.raises(RuntimeError, match=f"Refusing to load {folder / 'a.memmap'}: it is a symbolic link"):
            TensorDict.load_memmap(folder, mode=mode)
        assert tree(outside) == before

    @pytest.mark.parametrize("mode", [None, "r+"])
    def test_sub_folder_link(self, tmp_path, mode):
        folder = tmp_path / "td"
        _td().memmap(folder)
        outside = _outside(tmp_path)
        TensorDict({"b": torch.ones(3, 2)}, batch_size=[3]).memmap(outside / "n")
        before = tree(outside)
        os.rename(folder / "n", tmp_path / "moved")
        os.symlink(outside / "n", folder / "n")
        with pytest.raises(RuntimeError, match=r"Refusing to load .*n: it is a symbolic link"):
            TensorDict.load_memmap(folder, mode=mode)
        assert tree(outside) == before

    def test_meta_json_link(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        outside = _outside(tmp_path)
        os.replace(folder / "meta.json", outside / "meta.json")
        os.symlink(outside / "meta.json", folder / "meta.json")
        with pytest.raises(RuntimeError, match=r"meta\.json: it is a symbolic link"):
            TensorDict.load_memmap(folder)

    def test_links_inside_the_folder_and_a_linked_root_are_fine(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        os.rename(folder / "a.memmap", folder / "real_a")
        os.symlink("real_a", folder / "a.memmap")  # relative, inside the folder
        os.symlink(folder, tmp_path / "link")
        loaded = TensorDict.load_memmap(tmp_path / "link", mode="r+")
        assert loaded["a"].tolist() == [0.0, 1.0, 2.0]

    def test_write_through_the_refused_links_never_happens(self, tmp_path):
        # the probe: load_memmap(mode="r+")["a"].add_(1) with a.memmap linked to an outside file
        folder = tmp_path / "td"
        _td().memmap(folder)
        outside = _outside(tmp_path)
        victim = outside / "v.bin"
        victim.write_bytes(bytes(12))
        before = digest(victim)
        (folder / "a.memmap").unlink()
        os.symlink(victim, folder / "a.memmap")
        with pytest.raises(RuntimeError, match="symbolic link"):
            TensorDict.load_memmap(folder, mode="r+")["a"].add_(1)
        assert digest(victim) == before

    def test_make_memmap_through_a_linked_sub_folder(self, tmp_path):
        folder = tmp_path / "td"
        td = _td()
        td.memmap_(folder)
        outside = _outside(tmp_path)
        os.rename(folder / "n", outside / "n")
        os.symlink(outside / "n", folder / "n")
        before = tree(outside)
        with pytest.raises(RuntimeError, match="through symlink"):
            td.make_memmap(("n", "new"), (3,))
        assert tree(outside) == before


# ============================================================================ 4. declared sizes
class TestDeclaredSizes:
    def test_meta_shape_larger_than_the_file(self, tmp_path):
        folder = tmp_path / "td"
        _td().memmap(folder)
        meta = (folder / "meta.json").read_text().replace('"shape": [3]', '"shape": [1073741824]', 1)
        (folder / "meta.json").write_text(meta)
        with pytest.raises(RuntimeError, match=r"a.memmap holds 12 bytes but shape \[1073741824\]"):
            TensorDict.load_memmap(folder)

    def test_consolidated_layout_past_the_data(self, tmp_path):
        import json
        import struct

        file = tmp_path / "td.bin"
        _td().consolidate(filename=file)
        raw = file.read_bytes()
        (length,) = struct.unpack("<Q", raw[-8:])
        layout = json.loads(raw[-8 - length : -8])
        layout["entries"]["a"]["shape"] = [2**30]
        forged = json.dumps(layout).encode()
        file.write_bytes(raw[: -8 - length] + forged + struct.pack("<Q", len(forged)))
        with pytest.raises(RuntimeError, match=r"the leaf at key 'a' ends at byte .* past the"):
            TensorDict.from_consolidated(file)


# ============================================================================ 5. class names in the folder
class _Held(tensorbatch.TensorClass):
    x: torch.Tensor


def _held_folder(tmp_path: Path, type_string: str) -> Path:
    """A folder holding a TensorClass at key ``"a"`` whose meta.json names ``type_string`` as its class."""
    folder = tmp_path / "td"
    TensorDict(a=_Held(x=torch.arange(3.0), batch_size=[3]), batch_size=[3]).memmap(folder)
    (folder / "a" / "meta.json").write_text('{"_type": "%s"}' % type_string.replace('"', '\\"'))  # noqa: UP031
    return folder


class TestClassNamesAreLookedUpNeverImported:
    """A folder names the class of a TensorClass it holds (``_type``, as tensordict writes it): loading rebuilds
    only a TensorClass of that exact name already defined in this process, and never imports or evaluates the
    name (an unknown or hostile one loads as a TensorDict)."""

    HOSTILE = (
        "<class 'os.system'>",
        "<class 'builtins.eval'>",
        "<class 'subprocess.Popen'>",
        "<class 'tb_never_imported_module_xyz.Payload'>",
        "<class '__import__('os').system'>",
        "<class 'tensorbatch.TensorDict'>",  # defined, but not a TensorClass
        "<class 'tests.security.test_memmap_hostile._Held'>garbage",
        "os.system",
        "",
    )

    @pytest.mark.parametrize("type_string", HOSTILE)
    def test_an_unknown_or_hostile_class_loads_as_a_tensordict(self, tmp_path, monkeypatch, type_string):
        folder = _held_folder(tmp_path, type_string)
        imported: list[str] = []
        real_import = __import__

        def spy(name, *args, **kwargs):
            imported.append(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr("builtins.__import__", spy)
        monkeypatch.setattr("importlib.import_module", lambda name, *a: imported.append(name))
        loaded = TensorDict.load_memmap(folder)
        monkeypatch.undo()
        assert type(loaded["a"]) is TensorDict
        assert loaded["a", "x"].tolist() == [0.0, 1.0, 2.0]
        assert not [n for n in imported if n.split(".")[0] in ("os", "subprocess", "tb_never_imported_module_xyz")]
        assert "tb_never_imported_module_xyz" not in __import__("sys").modules

    def test_a_defined_class_of_that_exact_name_is_rebuilt(self, tmp_path):
        folder = _held_folder(tmp_path, f"<class '{_Held.__module__}.{_Held.__qualname__}'>")
        loaded = TensorDict.load_memmap(folder)
        assert type(loaded["a"]) is _Held
        assert loaded["a"].x.tolist() == [0.0, 1.0, 2.0]

    def test_a_class_defined_elsewhere_under_another_module_is_not_used(self, tmp_path):
        # the same qualname in another module: not the class the folder names
        folder = _held_folder(tmp_path, "<class 'some_other_module._Held'>")
        assert type(TensorDict.load_memmap(folder)["a"]) is TensorDict

    def test_a_link_in_place_of_the_tensorclass_data_folder_is_refused(self, tmp_path):
        folder = _held_folder(tmp_path, f"<class '{_Held.__module__}.{_Held.__qualname__}'>")
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "mine.txt").write_text("user data")
        (folder / "a" / "_tensordict").rename(tmp_path / "moved")
        (folder / "a" / "_tensordict").symlink_to(outside)
        before = tree(outside)
        with pytest.raises(RuntimeError, match=r"through symlink .*_tensordict \(key 'a'\)"):
            TensorDict(a=_Held(x=torch.ones(3), batch_size=[3]), batch_size=[3]).memmap(folder, existsok=True)
        assert tree(outside) == before
