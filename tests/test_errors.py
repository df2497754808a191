"""Message assertions for the helpers in ``tensorbatch._errors`` (STYLE.md R6).

Every helper is checked for its exact text, its builtin type (the one tensordict 0.15.3 raises for
the same situation), and, for ``add_path_note``, that the note is added once and leaves the type alone.
"""

from __future__ import annotations

import pytest
import torch

from tensorbatch import _errors
from tensorbatch._errors import (
    LOCKED_MSG,
    InplaceWriteError,
    add_path_note,
    batch_mismatch,
    batch_size_refused,
    fmt_path,
    fmt_shape,
    key_sets_differ,
    key_through_leaf,
    locked,
    missing_key,
)


# ------------------------------------------------------------------ fmt_path
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("a",), "'a'"),
        ("a", "'a'"),
        (("next", "obs"), "('next', 'obs')"),
        (("a", "b", "c"), "('a', 'b', 'c')"),
        ((), "()"),
        (("it's",), '"it\'s"'),
    ],
    ids=["one-tuple", "str", "pair", "triple", "empty", "quote"],
)
def test_fmt_path(path, expected):
    assert fmt_path(path) == expected


def test_fmt_path_one_tuple_equals_str():
    # a path of length one is printed the way users type it: td["a"], not td[("a",)]
    assert fmt_path(("obs",)) == fmt_path("obs") == "'obs'"


# ------------------------------------------------------------------ fmt_shape
@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (torch.Size([3, 4]), "[3, 4]"),
        (torch.Size([]), "[]"),
        ((2,), "[2]"),
        ([5, 0, 1], "[5, 0, 1]"),
        (torch.zeros(2, 3).shape, "[2, 3]"),
    ],
    ids=["size", "empty", "tuple", "list", "tensor-shape"],
)
def test_fmt_shape(shape, expected):
    assert fmt_shape(shape) == expected


def test_fmt_shape_has_no_torch_size_prefix():
    assert "torch.Size" not in fmt_shape(torch.Size([1, 2]))


# ------------------------------------------------------------------ missing_key
def test_missing_key_flat():
    err = missing_key(("x",), ["b", "a"])
    assert type(err) is KeyError
    assert err.args == ('key "x" not found in TensorDict with keys ["a", "b"]',)


def test_missing_key_nested_path_and_class_name():
    err = missing_key(("next", "obs"), {"rew": 1, "done": 2}, cls_name="LazyStackedTensorDict")
    assert err.args[0] == (
        'key "obs" not found in LazyStackedTensorDict with keys ["done", "rew"] (key path ("next", "obs"))'
    )


def test_missing_key_no_keys():
    assert missing_key(("a",), []).args[0] == 'key "a" not found in TensorDict with keys []'


def test_missing_key_is_raisable_and_matchable():
    with pytest.raises(KeyError, match=r'key "b" not found in TensorDict with keys .* \(key path ') as info:
        raise missing_key(("a", "b"), ["c"])
    assert info.value.args[0].endswith('(key path ("a", "b"))')


# ------------------------------------------------------------------ batch_mismatch
def test_batch_mismatch_text():
    err = batch_mismatch(torch.Size([3]), ("x",), torch.Size([4]))
    assert type(err) is RuntimeError
    assert str(err) == (  # tensordict 0.15.3's text
        "batch dimension mismatch, got self.batch_size=torch.Size([3]) and value.shape=torch.Size([4]) for key 'x'. "
        "The leading dimensions of a value must match the batch size."
    )


def test_batch_mismatch_names_the_full_path_in_the_key_slot():
    err = batch_mismatch(torch.Size([3, 5]), ("obs", "state"), torch.Size([3, 4, 5]))
    assert str(err) == (
        "batch dimension mismatch, got self.batch_size=torch.Size([3, 5]) and value.shape=torch.Size([3, 4, 5]) "
        "for key ('obs', 'state'). The leading dimensions of a value must match the batch size."
    )


def test_batch_mismatch_of_a_0d_value_says_how_to_store_a_scalar():
    msg = str(batch_mismatch([2], ("x",), ()))
    assert msg.startswith(
        "batch dimension mismatch, got self.batch_size=torch.Size([2]) and value.shape=torch.Size([]) for key 'x'. "
    )
    assert "Python scalars are stored as 0-dim tensors" in msg
    assert "wrap it in NonTensorData" in msg


@pytest.mark.parametrize(
    ("path", "kind", "expected"),
    [
        (("a",), "Tensor", "the Tensor a has shape"),
        (("n",), "TensorDict", "the TensorDict n has shape"),
        (("n", "m", "b"), "Tensor", "the Tensor ('n', 'm', 'b') has shape"),
    ],
)
def test_batch_size_refused_text(path, kind, expected):
    err = batch_size_refused(torch.Size([4]), path, torch.Size([3, 2]), kind)
    assert type(err) is RuntimeError
    assert str(err) == f"{expected} torch.Size([3, 2]) which is incompatible with the batch-size torch.Size([4])."


# ------------------------------------------------------------------ locked
def test_locked():
    err = locked()
    assert type(err) is RuntimeError
    assert str(err) == LOCKED_MSG
    assert str(err) == (
        "Cannot modify locked TensorDict. For in-place modification, consider using the `set_()` method "
        "and make sure the key is present."
    )


def test_locked_returns_a_fresh_exception():
    assert locked() is not locked()


def test_locked_message_matches_tensordict():
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict({}, batch_size=[]).lock_()
    with pytest.raises(RuntimeError) as info:
        td["x"] = torch.zeros(())
    assert str(info.value) == LOCKED_MSG


# ------------------------------------------------------------------ key_sets_differ
def test_key_sets_differ_root():
    err = key_sets_differ((), ["a", "b", "c"], ["b", "d"])
    assert type(err) is KeyError
    assert err.args[0] == (
        "keys in tensordicts mismatch. The first TD has keys {'a', 'c'} that the second does not have. The second "
        "TD has keys {'d'} that the first does not have."
    )


def test_key_sets_differ_nested_path():
    err = key_sets_differ(("next",), ["obs", "rew"], ["obs"])
    assert err.args[0] == (
        "keys in tensordicts mismatch under 'next'. The first TD has keys {'rew'} that the second does not have. The "
        "second TD has keys set() that the first does not have."
    )


def test_key_sets_differ_deep_path():
    err = key_sets_differ(("a", "b"), [], ["z"])
    assert err.args[0] == (
        "keys in tensordicts mismatch under ('a', 'b'). The first TD has keys set() that the second does not have. "
        "The second TD has keys {'z'} that the first does not have."
    )


# ------------------------------------------------------------------ key_through_leaf
def test_key_through_leaf():
    err = key_through_leaf(("a", "b", "c"), 1, torch.zeros(1))
    assert type(err) is ValueError
    assert str(err) == "key ('a', 'b', 'c'): 'a' is a Tensor, not a TensorDict, so it has no entry 'b'"


def test_key_through_leaf_deeper():
    err = key_through_leaf(("a", "b", "c"), 2, 3)
    assert str(err) == "key ('a', 'b', 'c'): ('a', 'b') is a int, not a TensorDict, so it has no entry 'c'"


# ------------------------------------------------------------------ InplaceWriteError
def test_inplace_write_error_types():
    # tensordict's _InplaceWriteError subclasses both ValueError and RuntimeError
    assert issubclass(InplaceWriteError, RuntimeError)
    assert issubclass(InplaceWriteError, ValueError)
    with pytest.raises(ValueError, match="boom"):
        raise InplaceWriteError("boom")


# ------------------------------------------------------------------ add_path_note
def test_add_path_note_adds_note_and_keeps_type():
    err = RuntimeError("shape '[4, 5]' is invalid")
    add_path_note(err, "applying 'view'", ("obs", "pixels"))
    assert type(err) is RuntimeError
    assert str(err) == "shape '[4, 5]' is invalid"
    assert err.__notes__ == ["while applying 'view' at key ('obs', 'pixels')"]


def test_add_path_note_flat_key():
    err = ValueError("x")
    add_path_note(err, "mapping", ("a",))
    assert err.__notes__ == ["while mapping at key 'a'"]


def test_add_path_note_only_once():
    # the innermost frame notes the full path; outer frames must not add a second (shorter) note
    err = RuntimeError("boom")
    add_path_note(err, "inner", ("a", "b"))
    add_path_note(err, "outer", ("a",))
    add_path_note(err, "outer", ("a",))
    assert err.__notes__ == ["while inner at key ('a', 'b')"]


def test_add_path_note_keeps_existing_notes():
    err = RuntimeError("boom")
    err.add_note("user note")
    add_path_note(err, "mapping", ("k",))
    assert err.__notes__ == ["user note", "while mapping at key 'k'"]


def test_add_path_note_special_constructor_exception():
    # UnicodeDecodeError cannot be rebuilt from a message: notes keep it intact
    with pytest.raises(UnicodeDecodeError) as info:
        b"\xff".decode("utf-8")
    err = info.value
    add_path_note(err, "decoding", ("text",))
    assert type(err) is UnicodeDecodeError
    assert err.reason == "invalid start byte"
    assert err.__notes__ == ["while decoding at key 'text'"]


def test_add_path_note_visible_to_pytest_match():
    err = KeyError("k")
    add_path_note(err, "reading", ("x", "y"))
    with pytest.raises(KeyError, match=r"while reading at key \('x', 'y'\)"):
        raise err


def test_add_path_note_reraised_keeps_traceback_note():
    def inner():
        try:
            torch.zeros(2).view(3)
        except RuntimeError as err:
            add_path_note(err, "applying 'view'", ("obs",))
            raise

    with pytest.raises(RuntimeError, match=r"(?s)invalid.*while applying 'view' at key 'obs'"):
        inner()


def test_module_exports_only_builtin_subclasses():
    for name in (
        "missing_key",
        "batch_mismatch",
        "locked",
        "key_sets_differ",
        "key_through_leaf",
    ):
        assert hasattr(_errors, name)
    made = [
        missing_key(("a",), []),
        batch_mismatch([1], ("a",), [2]),
        locked(),
        key_sets_differ((), [], []),
        key_through_leaf(("a", "b"), 1, 1),
    ]
    assert [type(e) for e in made] == [KeyError, RuntimeError, RuntimeError, KeyError, ValueError]
