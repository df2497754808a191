"""Differential tests, error messages users match on: the same bad call on both libraries, and the
reference's phrase (a regex over its key part, as a user's ``pytest.raises(match=...)`` would be written
against tensordict) matches the subject's message too. Our messages keep their key-path wording around it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.differential


def _td(lib: Any) -> Any:
    return lib.TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.zeros(3, 2)}}, [3])


def _locked(lib: Any) -> Any:
    return _td(lib).lock_()


_FOO: dict[str, Any] = {}


def _foo(lib: Any) -> Any:
    """A TensorClass with one field ``x`` (batch [3]); the class is made once per library."""
    if lib.__name__ not in _FOO:

        class Foo(lib.TensorClass):
            x: torch.Tensor

        _FOO[lib.__name__] = Foo
    return _FOO[lib.__name__](x=torch.zeros(3), batch_size=[3])


Z = torch.zeros
LOCKED = r"Cannot modify locked TensorDict"
CASES: list[tuple[str, Callable[[Any], Any], type, str]] = [
    ("locked-set", lambda L: _locked(L).set("c", Z(3)), RuntimeError, LOCKED),
    ("locked-setitem", lambda L: _locked(L).__setitem__("c", Z(3)), RuntimeError, LOCKED),
    ("locked-del", lambda L: _locked(L).__delitem__("a"), RuntimeError, LOCKED),
    ("locked-pop", lambda L: _locked(L).pop("a"), RuntimeError, LOCKED),
    ("locked-rename", lambda L: _locked(L).rename_key_("a", "z"), RuntimeError, LOCKED),
    ("locked-nested", lambda L: _locked(L).set(("n", "c"), Z(3)), RuntimeError, LOCKED),
    ("locked-update", lambda L: _locked(L).update({"c": Z(3)}), RuntimeError, LOCKED),
    ("set_-no-fit", lambda L: _td(L).set_("a", Z(3, 5)), RuntimeError, r"Failed to update 'a'"),
    ("set_-no-fit-nested", lambda L: _td(L).set_(("n", "b"), Z(3, 5)), ValueError, r"Failed to update 'b'"),
    ("getitem-missing", lambda L: _td(L)["zz"], KeyError, r'key "zz" not found in TensorDict with keys'),
    ("getitem-missing-nested", lambda L: _td(L)["n", "zz"], KeyError, r'key "zz" not found'),
    ("getitem-missing-level", lambda L: _td(L)["zz", "b"], KeyError, r'key "zz" not found'),
    ("pop-missing", lambda L: _td(L).pop("zz"), KeyError, r'key "zz" not found'),
    ("set_-missing", lambda L: _td(L).set_("zz", Z(3)), KeyError, r'key "zz" not found'),
    ("select-missing", lambda L: _td(L).select("zz"), KeyError, r'key "zz" not found'),
    ("rename-missing", lambda L: _td(L).rename_key_("zz", "y"), KeyError, r'key "zz" not found'),
    (
        "names-setter-length",
        lambda L: setattr(_td(L), "names", ["x", "y"]),
        ValueError,
        r"the length of the dimension names must equate the tensordict batch_dims attribute",
    ),
    (
        "names-ctor-length",
        lambda L: L.TensorDict({"a": Z(3)}, [3], names=["x", "y"]),
        ValueError,
        r"the length of the dimension names must equate",
    ),
    (
        "stack-different-keys",
        lambda L: torch.stack([_td(L), L.TensorDict({"a": Z(3, 2)}, [3])]),
        RuntimeError,
        r"The sets of keys in the tensordicts to stack are exclusive",
    ),
    (
        "add-different-keys",
        lambda L: _td(L) + L.TensorDict({"a": Z(3, 2)}, [3]),
        KeyError,
        r"keys in tensordicts mismatch",
    ),
    (
        "update_-missing",
        lambda L: _td(L).update_({"zz": Z(3)}),
        KeyError,
        r"The key zz was not found in the dest tensordict",
    ),
    (
        "update_-missing-nested",
        lambda L: _td(L).update_({"n": {"zz": Z(3)}}),
        KeyError,
        r"was not found in the dest tensordict",
    ),
    (
        "tc-set-unknown",
        lambda L: _foo(L).set("z", Z(3)),
        AttributeError,
        re.escape("Cannot set the attribute 'z': Foo has no such field. Its fields are ['x']."),
    ),
    (
        "tc-set-unknown-nested",
        lambda L: _foo(L).set(("z", "a"), Z(3)),
        AttributeError,
        re.escape("'Foo' object has no attribute or field 'z'. Its fields are ['x']."),
    ),
    ("key-int", lambda L: _td(L).get(1), KeyError, r"Only NestedKeys are supported"),
    ("key-list", lambda L: _td(L).set(["a"], Z(3)), KeyError, r"Only NestedKeys are supported"),
    ("key-empty-tuple", lambda L: _td(L).get(()), KeyError, r"Only NestedKeys are supported"),
    (
        "cat-different-keys",
        lambda L: torch.cat([_td(L), L.TensorDict({"a": Z(3, 2)}, [3])]),
        KeyError,
        r"all tensordicts must have the same keys",
    ),
    (
        "cat-dim",
        lambda L: torch.cat([_td(L), _td(L)], 1),
        RuntimeError,
        re.escape("dim must be in the range 0 <= dim < len(batch_size)"),
    ),
    (
        "stack-batch-sizes",
        lambda L: torch.stack([_td(L), L.TensorDict({"a": Z(4, 2)}, [4])]),
        RuntimeError,
        r"stacking tensordicts requires them to have congruent batch sizes",
    ),
    ("expand-incompatible", lambda L: _td(L).expand(2, 4), RuntimeError, r"Incompatible expanded shape"),
    (
        "expand-fewer-dims",
        lambda L: _td(L).expand(),
        RuntimeError,
        re.escape(
            "the number of sizes provided (0) must be greater or equal to the number of dimensions in the "
            "TensorDict (1)"
        ),
    ),
    ("view-invalid", lambda L: _td(L).view(4), RuntimeError, re.escape("invalid shape [4] for a batch of 3 elements")),
    (
        "reshape-invalid",
        lambda L: _td(L).reshape(2, 2),
        RuntimeError,
        re.escape("invalid shape [2, 2] for a batch of 3 elements"),
    ),
    (
        "names-non-unique",
        lambda L: setattr(L.TensorDict({}, [3, 2]), "names", ["x", "x"]),
        ValueError,
        r"Some dimension names are non-unique",
    ),
    (
        "permute-not-a-permutation",
        lambda L: L.TensorDict({}, [3, 2]).permute(0, 0),
        ValueError,
        r"Cannot compute the permutation",
    ),
    (
        "unbind-dim",
        lambda L: _td(L).unbind(2),
        IndexError,
        re.escape("Incompatible dim 2 for tensordict with shape torch.Size([3])"),
    ),
    ("squeeze-dim", lambda L: _td(L).squeeze(3), IndexError, r"Incompatible dim 3 for tensordict"),
    (
        "split-sizes",
        lambda L: _td(L).split([1, 1]),
        RuntimeError,
        r"split_with_sizes expects split_sizes to sum exactly to 3",
    ),
    (
        "lazy-missing-in-some",
        lambda L: L.lazy_stack([_td(L), L.TensorDict({"a": Z(3, 2)}, [3])])["n"],
        KeyError,
        r'key "n" not found in LazyStackedTensorDict with keys',
    ),
    (
        "lazy-missing-in-all",
        lambda L: L.lazy_stack([_td(L), _td(L)])["zz"],
        KeyError,
        r'key "zz" not found in LazyStackedTensorDict with keys',
    ),
]


def _error(fn: Callable[[], Any]) -> BaseException:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn()
        except Exception as err:
            return err
    raise AssertionError("no error raised")


@pytest.mark.parametrize(("fn", "exc", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reference_phrase_matches_ours(ref, tb, fn, exc, phrase):
    theirs, ours = _error(lambda: fn(ref)), _error(lambda: fn(tb))
    assert isinstance(theirs, exc), type(theirs)
    assert isinstance(ours, exc), type(ours)
    assert re.search(phrase, str(theirs)), f"the phrase is not the reference's: {theirs}"
    assert re.search(phrase, str(ours)), f"{phrase!r} does not match: {ours}"


def _tc(lib: Any) -> Any:
    @lib.tensorclass
    class Sample:
        x: torch.Tensor
        y: Any = None

    return Sample


def _tc_set(lib: Any) -> None:
    s = _tc(lib)(x=Z(3), batch_size=[3])
    s.x = Z(4)


def _typed(lib: Any) -> Any:
    class State(lib.TypedTensorDict):
        x: torch.Tensor
        y: torch.Tensor

    return State


def _typed_set(lib: Any) -> None:
    s = _typed(lib)(x=Z(4), y=Z(4), batch_size=[4])
    s.x = Z(2)


def _deep(lib: Any) -> Any:
    return lib.TensorDict({"n": {"m": {"b": Z(3, 2)}}}, [3])


# Batch-size mismatches: the same message, character for character.
EXACT: list[tuple[str, Callable[[Any], Any]]] = [
    ("set", lambda L: _td(L).set("c", Z(4))),
    ("setitem", lambda L: _td(L).__setitem__("c", Z(4, 2))),
    ("set-existing", lambda L: _td(L).set("a", Z(2, 2))),
    ("set_", lambda L: _td(L).set_("a", Z(4))),
    ("ctor", lambda L: L.TensorDict({"a": Z(3)}, [4])),
    ("ctor-2d", lambda L: L.TensorDict({"a": Z(3, 2)}, [3, 5])),
    ("ctor-kwargs", lambda L: L.TensorDict(a=Z(3), batch_size=[4])),
    ("update", lambda L: _td(L).update({"c": Z(4)})),
    ("setdefault", lambda L: _td(L).setdefault("c", Z(4))),
    ("set-list", lambda L: _td(L).set("c", [1, 2])),
    ("set-scalar", lambda L: _td(L).set("c", 1.0)),
    ("apply", lambda L: _td(L).exclude("n").apply(lambda x: x[:2])),
    ("from_struct_array", lambda L: L.TensorDict.from_struct_array(np.zeros(3, dtype=[("a", "f4")]), batch_size=[5])),
    ("lazy-set", lambda L: L.lazy_stack([_td(L), _td(L)]).set("c", Z(2, 4))),
    ("tensorclass-ctor", lambda L: _tc(L)(x=Z(3), batch_size=[4])),
    ("tensorclass-field-set", _tc_set),
    ("tensorclass-set", lambda L: _tc(L)(x=Z(3), batch_size=[3]).set("x", Z(4))),
    ("batch-size-setter", lambda L: setattr(_td(L), "batch_size", [4])),
    ("batch-size-setter-2d", lambda L: setattr(L.TensorDict({"a": Z(3, 4)}, [3]), "batch_size", [3, 5])),
    ("batch-size-setter-nested-td", lambda L: setattr(_td(L).exclude("a"), "batch_size", [4])),
    (
        "batch-size-setter-deep-td",
        lambda L: setattr(L.TensorDict({"n": L.TensorDict({"b": Z(3, 2)}, [3, 2])}, [3]), "batch_size", [3, 5]),
    ),
    ("batch-size-setter-memmap", lambda L: setattr(_td(L).exclude("n").memmap_like(), "batch_size", [4])),
    ("typed-ctor", lambda L: _typed(L)(x=Z(3), y=Z(4), batch_size=[4])),
    ("typed-field-set", _typed_set),
    ("typed-batch-size", lambda L: setattr(_typed(L)(x=Z(4), y=Z(4), batch_size=[4]), "batch_size", [5])),
    (
        "batch-size-setter-lazy-entry",
        lambda L: setattr(L.TensorDict({"l": L.lazy_stack([_td(L)] * 2, 1)}, [3]), "batch_size", [4]),
    ),
    ("tensorclass-batch-size", lambda L: setattr(_tc(L)(x=Z(3), batch_size=[3]), "batch_size", [4])),
]


@pytest.mark.parametrize("fn", [c[1] for c in EXACT], ids=[c[0] for c in EXACT])
def test_batch_mismatch_messages_are_the_reference_s(ref, tb, fn):
    theirs, ours = _error(lambda: fn(ref)), _error(lambda: fn(tb))
    assert type(theirs) is RuntimeError and type(ours) is RuntimeError, (type(theirs), type(ours))
    assert str(ours) == str(theirs)


# Nested: tensordict names the last key; ours names the full path in the same slot, and is otherwise the same.
NESTED: list[tuple[str, Callable[[Any], Any], str, str]] = [
    ("set", lambda L: _td(L).set(("n", "c"), Z(4)), "key 'c'", "key ('n', 'c')"),
    ("setitem", lambda L: _td(L).__setitem__(("n", "c"), Z(4)), "key 'c'", "key ('n', 'c')"),
    ("update", lambda L: _td(L).update({"n": {"c": Z(4)}}), "key 'c'", "key ('n', 'c')"),
    ("ctor", lambda L: L.TensorDict({"n": {"a": Z(3)}}, [4]), "key 'a'", "key ('n', 'a')"),
    (
        "batch-size-setter",
        lambda L: setattr(_td(L).exclude("a"), "batch_size", [3, 5]),
        "Tensor b",
        "Tensor ('n', 'b')",
    ),
    ("batch-size-setter-deep", lambda L: setattr(_deep(L), "batch_size", [3, 5]), "Tensor b", "Tensor ('n', 'm', 'b')"),
]


@pytest.mark.parametrize(("fn", "their_key", "our_key"), [c[1:] for c in NESTED], ids=[c[0] for c in NESTED])
def test_nested_batch_mismatch_messages_name_the_path(ref, tb, fn, their_key, our_key):
    theirs, ours = _error(lambda: fn(ref)), _error(lambda: fn(tb))
    assert type(theirs) is RuntimeError and type(ours) is RuntimeError, (type(theirs), type(ours))
    assert their_key in str(theirs)
    assert str(ours) == str(theirs).replace(their_key, our_key, 1)


def test_our_messages_keep_the_key_path(tb):
    assert '(key path ("n", "zz"))' in _error(lambda: _td(tb)["n", "zz"]).args[0]
    assert "('n', 'b') of shape [3, 2]" in str(_error(lambda: _td(tb).set_(("n", "b"), Z(3, 5))))
    assert "for key ('n', 'c')." in str(_error(lambda: _td(tb).set(("n", "c"), Z(4))))


def _stored(lib: Any, folder: Any, storage: str) -> str:
    """A file of ``storage`` ("h5" or "zarr") holding ``a`` [3, 4] and ``n.b`` [3, 4, 5] (batch [3]); its path."""
    td = lib.TensorDict({"a": torch.zeros(3, 4), "n": {"b": torch.zeros(3, 4, 5)}}, [3])
    path = str(folder / f"{lib.__name__}.{storage}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if storage == "h5":
            td.to_h5(path).close()
        else:
            td.to_zarr(path)
    return path


def _open(lib: Any, path: str, storage: str, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if storage == "h5":
            return lib.PersistentTensorDict.from_h5(path, mode="r+", **kwargs)
        return lib.TensorDict.from_zarr(path, **kwargs)


@pytest.mark.parametrize("storage", ["h5", "zarr"])
@pytest.mark.parametrize("size", [[4], [3, 5], [3, 4, 6]])
@pytest.mark.parametrize("when", ["opening", "setter"])
def test_stored_batch_size_refused_as_reference(ref, tb, tmp_path, storage, size, when):
    pytest.importorskip("h5py" if storage == "h5" else "zarr")
    phrase = re.escape(f"batch size and array size mismatch: array.shape=(3, 4), batch_size={torch.Size(size)}")
    for lib in (ref, tb):
        path = _stored(lib, tmp_path, storage)
        if when == "opening":  # tensordict: ValueError from the constructor
            with pytest.raises(ValueError, match=phrase):
                _open(lib, path, storage, batch_size=size)
            continue
        stored = _open(lib, path, storage, batch_size=[3])
        with pytest.raises(RuntimeError, match=phrase):  # the setter: RuntimeError
            stored.batch_size = size
        assert stored.batch_size == torch.Size([3])  # (unchanged)
        if storage == "h5":
            stored.close()
