"""Differential tests, results that once differed silently (issue 12, item 1).

Each case ran without an error in both libraries but computed something else in tensorbatch:
devices ignored by ``*_like``/``new_*``, ``is_empty`` with non-tensor leaves, wrappers stored by
``set_non_tensor``, comparisons with a dict, key collisions in ``flatten_keys``, ``expand_as`` with a
TensorDict. The reference is tensordict 0.15.3.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ._diff import case

pytestmark = pytest.mark.differential


def _devices(td: Any) -> tuple[Any, ...]:
    """The result's device and its leaves' (meta tensors have no values to compare)."""
    return td.batch_size, td.device, td["nested"].device, td["a"].device, td["nested", "c"].device, td["a"].shape


_LIKE_ARGS = {"full_like": (2.0,)}
LIKE = [
    case(f"{name}_device_meta", lambda lib, td, name=name: _devices(
        getattr(torch, name)(td, *_LIKE_ARGS.get(name, ()), device="meta")))
    for name in ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
] + [
    case("empty_like_device_meta_from_cpu", lambda lib, td: _devices(torch.empty_like(td, device="meta")),
         device="cpu"),
    case("zeros_like_device_cpu_from_none", lambda lib, td: torch.zeros_like(td, device="cpu")),
    case("zeros_like_no_device_keeps_none", lambda lib, td: torch.zeros_like(td)),
    case("empty_like_dtype", lambda lib, td: torch.empty_like(td, dtype=torch.float64).apply(torch.zeros_like)),
    case("new_zeros_device_meta", lambda lib, td: _devices(td.new_zeros(2, 3, device="meta"))),
    case("new_ones_device_meta", lambda lib, td: _devices(td.new_ones(2, device="meta"))),
    case("new_empty_device_meta", lambda lib, td: _devices(td.new_empty(2, device="meta"))),
    case("new_full_device_meta", lambda lib, td: _devices(td.new_full((2,), 1.0, device="meta"))),
    case("new_zeros_no_device", lambda lib, td: td.new_zeros(2, 3)),
]


@pytest.mark.parametrize(("fn", "kw"), LIKE)
def test_like_device(run_both, fn, kw):
    run_both(fn, **kw)


def _nt(lib: Any, value: Any = "x", batch_size: Any = (4, 5)) -> Any:
    return lib.NonTensorData(value, batch_size=list(batch_size))


EMPTY = [
    case("non_tensor_data", lambda lib, _: lib.TensorDict({"n": _nt(lib, "x", [3])}, [3]).is_empty(), data=None),
    case("non_tensor_string", lambda lib, _: lib.TensorDict({"n": "x"}, [3]).is_empty(), data=None),
    case("nested_non_tensor", lambda lib, _: lib.TensorDict({"m": {"n": "x"}}, [3]).is_empty(), data=None),
    case("nested_empty", lambda lib, _: lib.TensorDict({"m": {}}, [3]).is_empty(), data=None),
    case("empty", lambda lib, _: lib.TensorDict({}, [3]).is_empty(), data=None),
    case("tensor", lambda lib, td: td.is_empty()),
    case("non_tensor_itself", lambda lib, _: _nt(lib, "x", []).is_empty(), data=None),
    case("excluded_tensors", lambda lib, td: td.set_non_tensor("s", "x").exclude("a", "b", "nested").is_empty()),
]


@pytest.mark.parametrize(("fn", "kw"), EMPTY)
def test_is_empty(run_both, fn, kw):
    run_both(fn, **kw)


def _set_nt(value_fn: Any) -> Any:
    def fn(lib: Any, td: Any) -> Any:
        td.set_non_tensor("k", value_fn(lib))
        leaf = td.get("k")
        return type(leaf).__name__, leaf.batch_size, td.get_non_tensor("k"), td["k"]

    return fn


SET_NT = [
    case("wrapper", _set_nt(lambda lib: lib.NonTensorData("text"))),
    case("wrapper_batched", _set_nt(lambda lib: lib.NonTensorData("text", batch_size=[4, 5]))),
    case("wrapper_in_wrapper", _set_nt(lambda lib: lib.NonTensorData(lib.NonTensorData("text")))),
    case("plain", _set_nt(lambda lib: "text")),
    case("dict", _set_nt(lambda lib: {"lr": 0.1})),
]


@pytest.mark.parametrize(("fn", "kw"), SET_NT)
def test_set_non_tensor(run_both, fn, kw):
    run_both(fn, **kw)


def test_set_non_tensor_wrapper_then_memmap(run_both, tmp_path):
    def fn(lib: Any, td: Any) -> Any:
        td.set_non_tensor("k", lib.NonTensorData("text"))
        folder = tmp_path / lib.__name__
        td.memmap(folder)
        return lib.TensorDict.load_memmap(folder)["k"]

    run_both(fn)


COMPARE = [
    case(f"{op}_to_dict", lambda lib, td, op=op: getattr(td, op)(td.to_dict()))
    for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
] + [
    case("dict_eq_td", lambda lib, td: td.to_dict() == td),
    case("dict_lt_td", lambda lib, td: td.to_dict() < td + 1),
    case("eq_shifted_dict", lambda lib, td: td == (td + 1).to_dict()),
    case("eq_scalar_dict", lambda lib, td: td == {"a": 0, "b": 1, "nested": {"c": 0.5, "deep": {"d": 0}}}),
    case("eq_tuple_keys", lambda lib, td: td == {"a": td["a"], "b": td["b"], ("nested", "c"): td["nested", "c"],
                                                  ("nested", "deep", "d"): 0}),
    case("eq_missing_key", lambda lib, td: td == {"a": td["a"]}, raises=KeyError),
    case("eq_extra_key", lambda lib, td: td == {**td.to_dict(), "z": 1}, raises=KeyError),
    case("eq_string", lambda lib, td: td == "x"),
]


@pytest.mark.parametrize(("fn", "kw"), COMPARE)
def test_compare_with_dict(run_both, fn, kw):
    run_both(fn, **kw)


def _collide(lib: Any, td: Any) -> Any:
    td = lib.TensorDict({"a.b.c": torch.zeros(2), "a": {"b": {"c": torch.ones(2)}}}, [2])
    return td.flatten_keys(".")


FLATTEN_KEYS = [
    case("collision", _collide, raises=KeyError, data=None),
    case("collision_other_order",
         lambda lib, _: lib.TensorDict({"a": {"b": torch.ones(2)}, "a_b": torch.zeros(2)}, [2]).flatten_keys("_"),
         raises=KeyError, data=None),
    case("collision_inplace", lambda lib, _: lib.TensorDict({"a.b": torch.zeros(2), "a": {"b": torch.ones(2)}},
                                                           [2]).flatten_keys(".", inplace=True),
         raises=KeyError, data=None),
    case("no_collision", lambda lib, td: td.flatten_keys(".")),
    case("no_collision_sep", lambda lib, td: td.flatten_keys("/")),
]


@pytest.mark.parametrize(("fn", "kw"), FLATTEN_KEYS)
def test_flatten_keys(run_both, fn, kw):
    run_both(fn, **kw)


def test_flatten_keys_collision_leaves_input(tb):
    td = tb.TensorDict({"a.b": torch.zeros(2), "a": {"b": torch.ones(2)}}, [2])
    with pytest.raises(KeyError, match="collide"):
        td.flatten_keys(".", inplace=True)
    assert set(td.keys(True, True)) == {"a.b", ("a", "b")}


def _expand_as(source: dict, batch: list, target: dict, target_batch: list) -> Any:
    return lambda lib, _: lib.TensorDict(source, batch).expand_as(lib.TensorDict(target, target_batch))


EXPAND_AS = [
    case("leaf_shapes", _expand_as({"a": torch.zeros(3, 1, 4)}, [3], {"a": torch.zeros(2, 3, 6, 4)}, [2, 3]),
         data=None),
    case("same_batch_dims", _expand_as({"a": torch.arange(6.0).reshape(2, 3, 1, 1)}, [2, 3],
                                       {"a": torch.zeros(2, 3, 6, 4)}, [2, 3]), data=None),
    case("nested_and_extra_target_key",
         _expand_as({"a": torch.zeros(3, 1), "n": {"c": torch.ones(3, 1, 2)}}, [3],
                    {"a": torch.zeros(2, 3, 5), "n": {"c": torch.zeros(2, 3, 4, 2)}, "z": torch.zeros(2, 3)},
                    [2, 3]), data=None),
    case("missing_target_key", _expand_as({"a": torch.zeros(3), "b": torch.zeros(3)}, [3],
                                          {"a": torch.zeros(2, 3)}, [2, 3]), raises=KeyError, data=None),
    case("bad_leaf", _expand_as({"a": torch.zeros(3, 2)}, [3], {"a": torch.zeros(2, 3, 5)}, [2, 3]),
         raises=RuntimeError, data=None),
    case("tensor", lambda lib, td: td.expand_as(torch.zeros(3, 4, 5))),
]


@pytest.mark.parametrize(("fn", "kw"), EXPAND_AS)
def test_expand_as(run_both, fn, kw):
    run_both(fn, **kw)
