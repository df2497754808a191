"""Differential tests: a TensorClass's own memmap folder, against tensordict 0.15.3.

``memmap``/``memmap_``/``memmap_like``/``save`` of a TensorClass write tensordict's layout at the folder's root:
a ``meta.json`` whose ``_type`` names the class, the TensorDict in ``_tensordict/``. Either library loads the
other's folder as the class (tensorbatch looks the class up by name, tensordict imports it). Folders that
earlier tensorbatch versions wrote (a TensorDict at the root) still load as the class asked for. An in-place
re-save where a node changes between a TensorDict and a TensorClass leaves exactly what a fresh save writes
(tensordict leaves the old layout's files behind: the file checks below compare with its fresh save).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from ._diff import SUBJECT_ENV, named_classes, outcome, what

pytestmark = pytest.mark.differential

_CLASSES: dict[str, tuple[type, type]] = {}


def _classes(lib: Any) -> tuple[type, type]:
    """``Inner`` (a tensor and a string field) and ``Other``, of one module and qualname in both libraries.

    tensordict imports the class a folder names, so its classes are attributes of this module; tensorbatch
    looks the name up among the classes defined (kept alive here).
    """
    if lib.__name__ not in _CLASSES:
        specs = (
            ("Inner", {"x": torch.Tensor, "s": str}, {"s": "hi"}),
            ("Other", {"x": torch.Tensor, "a": Any}, {"a": None}),
        )
        inner, other = named_classes(lib, globals(), "_folders_", specs)
        _CLASSES[lib.__name__] = (inner, other)
    return _CLASSES[lib.__name__]


def _inner(lib: Any, start: float = 0.0) -> Any:
    inner, _ = _classes(lib)
    return inner(x=torch.arange(3.0) + start, s="yo", batch_size=[3])


def _other(lib: Any) -> Any:
    inner, other = _classes(lib)
    return other(x=torch.ones(3), a=inner(x=torch.arange(3.0), batch_size=[3]), batch_size=[3])


def _files(folder: str | Path) -> dict[str, Any]:
    """Every file under ``folder`` by relative path: a meta.json's parsed contents, another file's size."""
    out: dict[str, Any] = {}
    for d, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, folder)
            out[rel] = json.loads(Path(path).read_text()) if name == "meta.json" else os.path.getsize(path)
    return out


def _summary(value: Any) -> Any:
    fields = {k: getattr(value, k) for k in ("s",) if hasattr(value, k)}
    return what(value), fields, value.is_locked


SAVES = ["memmap", "memmap_", "memmap_like", "save"]


def _saved(lib: Any, folder: str, how: str, make: Any = _inner) -> Any:
    return getattr(make(lib), how)(folder)


@pytest.mark.parametrize("make", [_inner, _other], ids=["inner", "holding"])
@pytest.mark.parametrize("how", SAVES)
def test_files_written_match(ref: Any, tb: Any, how: str, make: Any) -> None:
    """The same files, and the same meta.json contents, as tensordict writes for the TensorClass."""

    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            _saved(lib, folder, how, make)
            return _files(folder)

    ours, theirs = run(tb), run(ref)
    assert ours == theirs
    name = "Inner" if make is _inner else "Other"
    assert theirs["meta.json"] == {"_type": f"<class '{__name__}._folders_{name}'>"}
    assert "_tensordict/meta.json" in theirs


@pytest.mark.parametrize("how", SAVES)
def test_save_returns_the_class(ref: Any, tb: Any, how: str) -> None:
    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            return _summary(_saved(lib, folder, how))

    assert run(tb) == run(ref)


LOADS = {
    "tensordict": lambda lib, folder: lib.TensorDict.load_memmap(folder),
    "cls": lambda lib, folder: _classes(lib)[0].load_memmap(folder),
    "other_cls": lambda lib, folder: _classes(lib)[1].load_memmap(folder),  # the class the folder names wins
    "load": lambda lib, folder: lib.TensorDict.load(folder),
    "cls_load": lambda lib, folder: _classes(lib)[0].load(folder),
}


@pytest.mark.parametrize("load", list(LOADS))
@pytest.mark.parametrize(("writer", "reader"), [("tb", "tb"), ("tb", "ref"), ("ref", "tb")])
def test_loaded_as_the_class_by_either_library(ref: Any, tb: Any, writer: str, reader: str, load: str) -> None:
    libs = {"tb": tb, "ref": ref}
    with tempfile.TemporaryDirectory() as expected_folder, tempfile.TemporaryDirectory() as folder:
        _inner(ref).memmap(expected_folder)
        expected = _summary(LOADS[load](ref, expected_folder))
        _inner(libs[writer]).memmap(folder)
        assert _summary(LOADS[load](libs[reader], folder)) == expected
    assert expected[0][0] == "Inner"
    assert expected[1] == {"s": "yo"}


def test_holding_a_class_loads_both_classes(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            _other(lib).memmap(folder)
            loaded = lib.TensorDict.load_memmap(folder)
            return type(loaded).__name__, what(loaded.a), what(loaded.x)

    assert run(tb) == run(ref)


@pytest.mark.parametrize("load", ["cls", "tensordict", "cls_load"])
def test_a_folder_with_a_tensordict_at_the_root(ref: Any, tb: Any, load: str) -> None:
    """The layout earlier tensorbatch versions wrote for a TensorClass: loaded with a class, it gives that class."""

    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            lib.TensorDict(x=torch.arange(3.0), s="yo", batch_size=[3]).memmap(folder)
            return _summary(LOADS[load](lib, folder))

    assert outcome(lambda: run(tb)) == outcome(lambda: run(ref))


@pytest.mark.parametrize("load", ["cls", "cls_load"])
def test_a_folder_with_keys_that_are_no_fields_is_refused(ref: Any, tb: Any, load: str) -> None:
    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            lib.TensorDict(x=torch.arange(3.0), zz=torch.zeros(3), batch_size=[3]).memmap(folder)
            return _summary(LOADS[load](lib, folder))

    assert outcome(lambda: run(ref)) == ("raises", "ValueError")
    assert outcome(lambda: run(tb)) == outcome(lambda: run(ref))


OUTS = {
    "tensordict": lambda lib: lib.TensorDict(x=torch.zeros(3), s="no", batch_size=[3]),
    "same_class": lambda lib: _classes(lib)[0](x=torch.zeros(3), s="no", batch_size=[3]),
    "other_class": lambda lib: _classes(lib)[1](x=torch.zeros(3), batch_size=[3]),
}


@pytest.mark.parametrize("loader", ["tensordict", "cls"])
@pytest.mark.parametrize("out", list(OUTS))
def test_load_memmap_out(ref: Any, tb: Any, out: str, loader: str) -> None:
    """``out=``: the saved class over ``out`` (filled); ``out`` itself when it is an instance of that class.

    An instance of another TensorClass is left alone (tensordict's). (How ``out`` is filled differs: README.)
    """

    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            _inner(lib, 1.0).memmap(folder)
            given = OUTS[out](lib)
            cls = lib.TensorDict if loader == "tensordict" else _classes(lib)[0]
            result = cls.load_memmap(folder, out=given)
            backend = getattr(given, "_tensordict", given)
            return (
                type(result).__name__,
                result is given,
                getattr(result, "_tensordict", None) is backend,
                what(given.get("x")),
                _summary(result),
            )

    assert outcome(lambda: run(tb)) == outcome(lambda: run(ref))


# ----------------------------------------------------------------------- re-saving over another layout
def _first(lib: Any, folder: str, case: str) -> None:
    """The first save of each case."""
    if case == "root_class_to_td":
        _inner(lib).memmap(folder)
    elif case == "entry_td_to_class":
        lib.TensorDict(a=lib.TensorDict(x=torch.arange(3.0), s="yo", batch_size=[3]), batch_size=[3]).memmap(folder)
    elif case == "entry_class_to_td":
        lib.TensorDict(a=_inner(lib), batch_size=[3]).memmap(folder)
    else:  # a TensorDict at the root (as earlier tensorbatch versions saved a TensorClass)
        lib.TensorDict(x=torch.arange(3.0), s="yo", batch_size=[3]).memmap(folder)


def _second(lib: Any, folder: str, case: str) -> Any:
    """Save again with the layout changed: in place (the loaded data mapped from the folder), or fresh."""
    inner, _ = _classes(lib)
    if case.startswith("root_td_to_class"):
        loaded = inner.load_memmap(folder)
        loaded.x += 1
        # (copy_existing: tensordict refuses to map a leaf from another file of the folder without it)
        if case == "root_td_to_class":
            return loaded.memmap_(folder, copy_existing=True)
        return loaded.memmap(folder, copy_existing=True, existsok=True)
    if case == "root_class_to_td":
        loaded = lib.TensorDict.load_memmap(os.path.join(folder, "_tensordict"))
        loaded["x"] += 1
        return loaded.memmap(folder, copy_existing=True, existsok=True)
    if case == "entry_td_to_class":
        loaded = lib.TensorDict.load_memmap(folder)
        loaded["a"] = inner(x=loaded["a", "x"] + 1, s="yo", batch_size=[3])
        return loaded.memmap(folder, existsok=True)
    if case == "entry_class_to_td":
        loaded = lib.TensorDict.load_memmap(folder)
        loaded["a"] = lib.TensorDict(x=loaded["a"].x + 1, s="yo", batch_size=[3])
        return loaded.memmap(folder, existsok=True)
    return _inner(lib, 1.0).memmap(folder, existsok=True)  # a fresh save (written aside, swapped in)


def _fresh(lib: Any, folder: str, case: str) -> None:
    """What a fresh save of the re-saved data writes."""
    if case == "root_class_to_td":
        lib.TensorDict(x=torch.arange(3.0) + 1, s="yo", batch_size=[3]).memmap(folder)
    elif case == "entry_td_to_class":
        lib.TensorDict(a=_inner(lib, 1.0), batch_size=[3]).memmap(folder)
    elif case == "entry_class_to_td":
        lib.TensorDict(a=lib.TensorDict(x=torch.arange(3.0) + 1, s="yo", batch_size=[3]), batch_size=[3]).memmap(folder)
    else:
        _inner(lib, 1.0).memmap(folder)


SWITCHES = [
    "root_td_to_class",
    "root_td_to_class_memmap",
    "root_class_to_td",
    "entry_td_to_class",
    "entry_class_to_td",
    "fresh_over",
]


@pytest.mark.parametrize("case", SWITCHES)
def test_resave_over_another_layout(ref: Any, tb: Any, case: str) -> None:
    """The result and what loads back, as tensordict."""

    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            _first(lib, folder, case)
            result = _second(lib, folder, case)
            return _summary(result), what(lib.TensorDict.load_memmap(folder))

    assert run(tb) == run(ref)


@pytest.mark.skipif(
    os.environ.get(SUBJECT_ENV, "tensorbatch") != "tensorbatch",
    reason="tensordict leaves the old layout's files behind (README, Differences: memory-mapped folders)",
)
@pytest.mark.parametrize("case", SWITCHES)
def test_resave_over_another_layout_writes_what_a_fresh_save_writes(ref: Any, tb: Any, case: str) -> None:
    """Exactly the files of tensordict's fresh save of the same data: none of the old layout's is left."""
    with tempfile.TemporaryDirectory() as folder:
        _first(tb, folder, case)
        _second(tb, folder, case)
        ours = _files(folder)
    with tempfile.TemporaryDirectory() as folder:
        _fresh(ref, folder, case)
        assert ours == _files(folder)


@pytest.mark.parametrize("case", SWITCHES)
def test_resave_over_another_layout_keeps_the_users_files(tb: Any, case: str) -> None:
    """Files that no save wrote, at the root and inside the node whose layout changes, stay where they are."""
    with tempfile.TemporaryDirectory() as folder:
        _first(tb, folder, case)
        places = (Path(folder), Path(folder, "a"), Path(folder, "_tensordict"), Path(folder, "a", "_tensordict"))
        notes = [place / "notes.txt" for place in places if place.is_dir()]
        for note in notes:
            note.write_text("mine")
        _second(tb, folder, case)
        assert [note.read_text() for note in notes] == ["mine"] * len(notes)
        expected = what(tb.TensorDict.load_memmap(folder))
    with tempfile.TemporaryDirectory() as folder:
        _fresh(tb, folder, case)
        assert expected == what(tb.TensorDict.load_memmap(folder))


def test_saved_path_and_make_memmap_reach_the_tensordict_folder(ref: Any, tb: Any) -> None:
    """After ``memmap_``, ``saved_path`` is the TensorDict's folder (``_tensordict/``), where new leaves go."""

    def run(lib: Any) -> Any:
        with tempfile.TemporaryDirectory() as folder:
            saved = _inner(lib).memmap_(folder)
            path = os.path.relpath(saved.saved_path, folder)
            saved.make_memmap("y", (3, 2))
            files = sorted(_files(folder))  # (y is no field of Inner: both libraries refuse the load)
            return path, files, outcome(lambda: list(lib.TensorDict.load_memmap(folder).get("y").shape))

    assert run(tb) == run(ref)
