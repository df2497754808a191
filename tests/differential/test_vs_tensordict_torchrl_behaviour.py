"""Differential tests: behaviour TorchRL relies on (issue 27, item 3), tensorbatch against tensordict 0.15.3.

Each case runs the same function with both libraries and compares a plain summary of the result (class
name, batch size, keys and values), or the error type when it raises.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def summary(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.tolist())
    if hasattr(value, "batch_size") and hasattr(value, "items"):
        leaves = sorted((str(k), summary(v)) for k, v in value.items(True, True))
        return (type(value).__name__, tuple(value.batch_size), leaves)
    if isinstance(value, (list, tuple)):
        return type(value)([summary(v) for v in value])
    return value


def run(lib: Any, fn: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return summary(fn(lib))
    except Exception as e:  # the error type is part of the behaviour
        return ("raises", type(e).__name__)


def check(ref: Any, tb: Any, fn: Any) -> Any:
    want, got = run(ref, fn), run(tb, fn)
    assert got == want
    return got


def _td(lib: Any) -> Any:
    return lib.TensorDict(
        a=torch.arange(2.0),
        s=lib.NonTensorData("hi", batch_size=[2]),
        b=lib.TensorDict(c=torch.ones(2), batch_size=[2]),
        batch_size=[2],
    )


def _is_leaf_nontensor(lib: Any) -> Any:
    def is_leaf(cls: type) -> bool:
        return not issubclass(cls, lib.TensorDictBase) or "NonTensor" in cls.__name__

    return is_leaf


# ------------------------------------------------------------------------------------------- 1. apply
def _calls(lib: Any, **kwargs: Any) -> Any:
    seen: list[Any] = []

    def fn(*args: Any) -> Any:
        seen.append(tuple(a if isinstance(a, (str, tuple)) else type(a).__name__ for a in args))
        return args[-1] if isinstance(args[-1], torch.Tensor) else None

    out = _td(lib).apply(fn, **kwargs)
    return seen, out


APPLY_CASES = {
    "plain": {},
    "named": {"named": True},
    "named_nested_keys": {"named": True, "nested_keys": True},
    "named_prefix": {"named": True, "nested_keys": True, "prefix": ("p",)},
    "named_prefix_flat": {"named": True, "prefix": ("p",)},
    "nested_keys_alone": {"nested_keys": True},
    "call_on_nested_named": {"named": True, "nested_keys": True, "call_on_nested": True},
    "call_on_unbatched": {"call_on_unbatched": True},
}


@pytest.mark.parametrize("kwargs", list(APPLY_CASES.values()), ids=list(APPLY_CASES))
def test_apply_keywords(ref, tb, kwargs):
    check(ref, tb, lambda lib: _calls(lib, **kwargs))


def test_apply_is_leaf_nontensor(ref, tb):
    got = check(ref, tb, lambda lib: _calls(lib, named=True, nested_keys=True, is_leaf=_is_leaf_nontensor(lib))[0])
    assert ("s", "NonTensorData") in got


def test_apply_named_str_prefix_raises(ref, tb):
    assert check(ref, tb, lambda lib: _calls(lib, named=True, nested_keys=True, prefix="p")) == ("raises", "TypeError")


def test_apply_named_filters_by_key(ref, tb):
    check(ref, tb, lambda lib: _td(lib).apply(lambda k, x: x if k == "c" else None, named=True))


def test_apply_named_with_others(ref, tb):
    def fn(lib: Any) -> Any:
        td = _td(lib).exclude("s")
        return td.apply(lambda k, x, y: x + y if k == ("b", "c") else x, td, named=True, nested_keys=True)

    check(ref, tb, fn)


def test_apply_named_inplace(ref, tb):
    def fn(lib: Any) -> Any:
        td = _td(lib)
        td.apply_(lambda k, x: x + 1 if k == "a" else x, named=True)
        return td

    check(ref, tb, fn)


def test_apply_named_lazy_stack(ref, tb):
    def fn(lib: Any) -> Any:
        seen: list[Any] = []
        stack = lib.lazy_stack([_td(lib).exclude("s"), _td(lib).exclude("s")])
        out = stack.apply(lambda k, x: seen.append(k) or x * 2, named=True, nested_keys=True)
        return seen, type(out).__name__, out["b", "c"]

    check(ref, tb, fn)


def test_named_apply_keeps_working(ref, tb):
    def fn(lib: Any) -> Any:
        seen: list[Any] = []
        out = _td(lib).named_apply(lambda k, x: seen.append(k) or x, nested_keys=True, prefix=("p",))
        return seen, out

    check(ref, tb, fn)


def test_named_apply_refuses_named(ref, tb):
    assert check(ref, tb, lambda lib: _td(lib).named_apply(lambda k, x: x, named=True)) == ("raises", "TypeError")


def test_apply_checked_keyword_raises(ref, tb):
    # tensordict's apply passes checked= itself: giving it again is a TypeError there too
    assert check(ref, tb, lambda lib: _td(lib).apply(lambda x: x, checked=True)) == ("raises", "TypeError")


def test_apply_unknown_keyword(ref, tb):
    check(ref, tb, lambda lib: _td(lib).apply(lambda x: x, bogus=1))


@pytest.mark.parametrize("call_on_unbatched", [False, True])
@pytest.mark.parametrize("batch_size", [None, [2]], ids=["same_batch", "new_batch"])
def test_apply_call_on_unbatched(ref, tb, call_on_unbatched, batch_size):
    def fn(lib: Any) -> Any:
        td = lib.TensorDict(a=torch.zeros(3, 2), u=lib.UnbatchedTensor(torch.ones(5)), batch_size=[3])
        out = td.apply(
            lambda x: x[:2] if x.shape[0] == 3 else x * 2, batch_size=batch_size, call_on_unbatched=call_on_unbatched
        )
        u = out.get("u")
        return type(u).__name__, tuple(u.batch_size), u.as_subclass(torch.Tensor).tolist(), summary(out["a"])

    check(ref, tb, fn)


# ------------------------------------------------------------------------------------------- 2. unravel_key
KEYS = {
    "int": (0,),
    "str_int": ("a", 0),
    "nested_int": ("a", ("b", 0)),
    "empty": (),
    "empty_part": ("a", ()),
    "one": ("a",),
    "nested_one": (("a",),),
    "nested": ("a", ("b", ("c",))),
    "none_part": ("a", None),
    "list_part": ("a", ["b"]),
    "top_int": 0,
    "top_list": ["a", "b"],
    "top_none": None,
}


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_unravel_key(ref, tb, key):
    check(ref, tb, lambda lib: lib.unravel_key(key))


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_unravel_key_to_tuple(ref, tb, key):
    check(ref, tb, lambda lib: lib.unravel_key_to_tuple(key))


@pytest.mark.parametrize(
    "keys",
    [["a", ("b", ("c",))], [(0,), "a"], [("a", 0)], ("a", "b"), "ab", [["a"]]],
    ids=["good", "int", "str_int", "tuple", "str", "list_in_list"],
)
def test_unravel_key_list(ref, tb, keys):
    check(ref, tb, lambda lib: lib.unravel_key_list(keys))


# ------------------------------------------------------------------------------------------- 3. keys membership
MEMBERS = {
    "a": "a",
    "a1": ("a",),
    "a11": (("a",),),
    "b1": ("b",),
    "bc": ("b", "c"),
    "bc_nested": ("b", ("c",)),
    "c1": ("c",),
    "ax": ("a", "x"),
    "int": 0,
    "int1": (0,),
    "a_int": ("a", 0),
    "empty": (),
    "list": ["a"],
}


_NOT_KEYS = ("int", "int1", "a_int", "empty", "list")
_VIEWS = ["keys", "nested", "nested_leaves", "sub", "lazy", "lazy_nested"]


@pytest.mark.parametrize(
    ("view", "key"),
    [
        pytest.param(view, key, id=f"{view}-{name}")
        for view in _VIEWS
        for name, key in MEMBERS.items()
        if not (view.startswith("lazy") and name in _NOT_KEYS)  # test_not_a_key_in_lazy_keys
    ],
)
def test_key_in_keys(ref, tb, view, key):
    def fn(lib: Any) -> Any:
        td = _td(lib).exclude("s")
        keys = {
            "keys": lambda: td.keys(),
            "nested": lambda: td.keys(True),
            "nested_leaves": lambda: td.keys(True, True),
            "sub": lambda: lib.TensorDict(x=td, batch_size=[2])["x"].keys(),
            "lazy": lambda: lib.lazy_stack([td, td.clone()]).keys(),
            "lazy_nested": lambda: lib.lazy_stack([td, td.clone()]).keys(True),
        }[view]()
        return key in keys

    check(ref, tb, fn)


def test_not_a_key_in_lazy_keys(ref, tb):
    check(ref, tb, lambda lib: 0 in lib.lazy_stack([_td(lib), _td(lib)]).keys())


def test_key_in_tensorclass_keys(ref, tb):
    def fn(lib: Any) -> Any:
        @lib.tensorclass
        class C:
            x: torch.Tensor

        return ("x",) in C(x=torch.zeros(2), batch_size=[2]).keys()

    assert check(ref, tb, fn) is True


# ------------------------------------------------------------------------------------------- 4. memmap_like
@pytest.mark.parametrize("method", ["memmap_like", "memmap", "memmap_"])
def test_memmap_into_existing_empty_folder(ref, tb, tmp_path, method):
    def fn(lib: Any) -> Any:
        folder = tmp_path / lib.__name__ / method
        folder.mkdir(parents=True)
        out = getattr(_td(lib).exclude("s"), method)(prefix=folder, existsok=False)
        return out, sorted(os.listdir(folder))

    check(ref, tb, fn)


def test_memmap_existsok_folder_with_other_files(ref, tb, tmp_path):
    def fn(lib: Any) -> Any:
        folder = tmp_path / lib.__name__
        folder.mkdir()
        (folder / "other.txt").write_text("kept")
        _td(lib).exclude("s").memmap_like(prefix=folder, existsok=False)
        return sorted(os.listdir(folder))

    check(ref, tb, fn)


def test_memmap_like_over_a_save_refused(ref, tb, tmp_path):
    def fn(lib: Any) -> Any:
        folder = tmp_path / lib.__name__
        _td(lib).exclude("s").memmap(folder)
        return _td(lib).exclude("s").memmap_like(prefix=folder, existsok=False)

    assert check(ref, tb, fn) == ("raises", "RuntimeError")


# ------------------------------------------------------------------------------------------- 5. ragged lazy stacks
def _ragged(lib: Any, stack_dim: int = 1) -> Any:
    torch.manual_seed(0)
    return lib.LazyStackedTensorDict(
        lib.TensorDict(a=torch.rand(5, 4, 8), batch_size=[5]),
        lib.TensorDict(a=torch.rand(5, 3, 8), batch_size=[5]),
        stack_dim=stack_dim,
    )


def _lazy(value: Any) -> Any:
    if type(value).__name__ == "LazyStackedTensorDict":
        return ("lazy", tuple(value.batch_size), value.stack_dim, [summary(m) for m in value.tensordicts])
    return summary(value)


RAGGED = {
    "index_expand": lambda s: s[0].expand(6, 2),
    "index": lambda s: s[0],
    "expand_lead": lambda s: s.expand(3, 5, 2),
    "unsqueeze0": lambda s: s.unsqueeze(0),
    "unsqueeze_last": lambda s: s[0].unsqueeze(-1),
    "squeeze": lambda s: s[:1].squeeze(0),
    "squeeze_all": lambda s: s[:1].squeeze(),
    "index_tensor": lambda s: s[torch.tensor([0, 2])],
    "index_mask": lambda s: s[torch.tensor([True, False, True, False, False])],
    "slice": lambda s: s[1:3],
    "expand_then_index": lambda s: s[0].expand(6, 2)[1],
}


@pytest.mark.parametrize("op", list(RAGGED.values()), ids=list(RAGGED))
def test_ragged_lazy_stack(ref, tb, op):
    check(ref, tb, lambda lib: _lazy(op(_ragged(lib))))


def test_ragged_lazy_stack_dim0_expand(ref, tb):
    check(ref, tb, lambda lib: _lazy(_ragged(lib, 0).expand(3, 2, 5)))


# ----------------------------------------------------------------------------------------- 6. lazy_stack of non-tensors
@pytest.mark.parametrize("values", [("x", "x"), ("x", "y")], ids=["same", "different"])
def test_lazy_stack_non_tensor(ref, tb, values):
    def fn(lib: Any) -> Any:
        out = lib.lazy_stack([lib.NonTensorData(v) for v in values])
        return type(out).__name__, tuple(out.batch_size), out.tolist(), out.data

    check(ref, tb, fn)


def test_lazy_stack_non_tensor_batched(ref, tb):
    def fn(lib: Any) -> Any:
        out = lib.lazy_stack([lib.NonTensorData("x", batch_size=[2]), lib.NonTensorData("y", batch_size=[2])], 1)
        return type(out).__name__, tuple(out.batch_size), out.tolist(), out[1].tolist()

    check(ref, tb, fn)


# ------------------------------------------------------------------------------------------- 7. del in a lazy stack
def _het(lib: Any) -> Any:
    return lib.LazyStackedTensorDict(
        lib.TensorDict(a=torch.zeros(()), b=torch.ones(()), n=lib.TensorDict(x=torch.ones(()))),
        lib.TensorDict(a=torch.ones(()), n=lib.TensorDict(y=torch.ones(()))),
        stack_dim=0,
    )


@pytest.mark.parametrize(
    "key",
    ["b", ("n", "x"), "a", "zzz", ("n", "zzz"), ("a", "b")],
    ids=["some", "nested_some", "all", "none", "nested_none", "through_leaf"],
)
def test_del_key_some_members_hold(ref, tb, key):
    def fn(lib: Any) -> Any:
        stack = _het(lib)
        del stack[key]
        return [sorted(map(str, td.keys(True))) for td in stack.tensordicts]

    check(ref, tb, fn)


def test_del_key_locked_lazy_stack(ref, tb):
    assert check(ref, tb, lambda lib: _het(lib).lock_().del_("b")) == ("raises", "RuntimeError")


# ------------------------------------------------------------------------------------------- 8. load_state_dict
def _src(lib: Any) -> Any:
    return lib.TensorDict(
        a=torch.arange(6.0).view(3, 2),
        n=lib.TensorDict(b=torch.ones(3, 4, 5), batch_size=[3, 4]),
        e=lib.TensorDict(batch_size=[3]),
        batch_size=[3],
    )


def _targets(lib: Any) -> dict[str, Any]:
    return {
        "empty": lib.TensorDict(),
        "unbatched": lib.TensorDict(a=torch.zeros(3, 2), n=lib.TensorDict(b=torch.zeros(3, 4, 5))),
        "same": _src(lib).zero_(),
    }


@pytest.mark.parametrize("flatten", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("target", ["empty", "unbatched", "same"])
def test_load_state_dict_batch_size(ref, tb, flatten, target):
    def fn(lib: Any) -> Any:
        out = _targets(lib)[target].load_state_dict(_src(lib).state_dict(flatten=flatten), strict=False)
        return out, [(str(k), tuple(v.batch_size)) for k, v in out.items(True) if hasattr(v, "batch_size")]

    check(ref, tb, fn)


def test_state_dict_metadata(ref, tb):
    def fn(lib: Any) -> Any:
        flat, nested = _src(lib).state_dict(), _src(lib).state_dict(flatten=False)
        prefixed = _src(lib).state_dict(prefix="p.")
        return (
            list(flat),
            dict(flat._metadata),
            list(nested),
            dict(nested._metadata),
            dict(nested["n"]._metadata),
            list(prefixed),
            dict(prefixed._metadata),
        )

    check(ref, tb, fn)


def test_load_state_dict_legacy_and_plain(ref, tb):
    def fn(lib: Any) -> Any:
        legacy = {"a": torch.zeros(3, 2), "__batch_size": torch.Size([3]), "__device": None}
        plain = {"a": torch.zeros(3, 2)}
        return (
            lib.TensorDict().load_state_dict(legacy, strict=False),
            lib.TensorDict().load_state_dict(plain, strict=False),
        )

    check(ref, tb, fn)


def test_load_state_dict_strict_mismatch(ref, tb):
    check(ref, tb, lambda lib: lib.TensorDict().load_state_dict(_src(lib).state_dict()))


# ------------------------------------------------------------------------------------------- 9. TensorClass.from_dict
def _classes(lib: Any) -> Any:
    class Inner(lib.TensorClass):
        y: torch.Tensor

    class Outer(lib.TensorClass):
        x: torch.Tensor
        inner: Inner = None
        s: str = "d"

    return Outer


def _tc(value: Any) -> Any:
    inner = value.inner
    return (
        type(value).__name__,
        tuple(value.batch_size),
        type(inner).__name__,
        value.s,
        None if value.x is None else tuple(value.x.shape),
    )


FROM_DICT = {
    "plain": ({"x": torch.zeros(3, 2), "inner": None, "s": "q"}, {}),
    "batch_size": ({"x": torch.zeros(3, 2), "inner": None, "s": "q"}, {"batch_size": [3]}),
    "auto": ({"x": torch.zeros(3, 2), "inner": {"y": torch.zeros(3, 2)}, "s": "q"}, {"auto_batch_size": True}),
    "batch_dims": ({"x": torch.zeros(3, 2), "inner": None, "s": "q"}, {"batch_dims": 1}),
    "missing_default": ({"x": torch.zeros(3)}, {}),
    "extra_key": ({"x": torch.zeros(3), "zz": torch.zeros(3), "inner": None, "s": "q"}, {}),
    "names": ({"x": torch.zeros(3), "inner": None, "s": "q"}, {"names": ["a"]}),
}


@pytest.mark.parametrize(("data", "kwargs"), list(FROM_DICT.values()), ids=list(FROM_DICT))
def test_tensorclass_from_dict(ref, tb, data, kwargs):
    check(ref, tb, lambda lib: _tc(_classes(lib).from_dict(data, **kwargs)))


def test_tensorclass_from_dict_warns_for_defaults(ref, tb):
    for lib in (ref, tb):
        with pytest.warns(FutureWarning, match="from_dict"):
            _classes(lib).from_dict({"x": torch.zeros(3)})


def test_tensorclass_decorator_from_dict(ref, tb):
    def fn(lib: Any) -> Any:
        @lib.tensorclass
        class Point:
            x: torch.Tensor

        return type(Point.from_dict({"x": torch.zeros(2)}, batch_size=[2])).__name__

    assert check(ref, tb, fn) == "Point"


# ------------------------------------------------------------------------------------------- 10. no h5py at import
_WITHOUT_H5PY = """
import sys
sys.modules["h5py"] = None  # as if h5py were not installed
from {lib} import PersistentTensorDict
try:
    PersistentTensorDict.from_h5("missing.h5")
except Exception as e:
    print(type(e).__name__)
"""


def test_persistent_import_without_h5py(ref, tb, tmp_path):
    import subprocess
    import sys

    def fn(lib: Any) -> Any:
        done = subprocess.run(
            [sys.executable, "-c", _WITHOUT_H5PY.format(lib=lib.__name__)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            timeout=300,
        )
        return done.returncode, done.stdout.strip()

    assert check(ref, tb, fn) == (0, "ModuleNotFoundError")
