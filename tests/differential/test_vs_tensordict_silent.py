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
    case(
        f"{name}_device_meta",
        lambda lib, td, name=name: _devices(getattr(torch, name)(td, *_LIKE_ARGS.get(name, ()), device="meta")),
    )
    for name in ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
] + [
    case(
        "empty_like_device_meta_from_cpu", lambda lib, td: _devices(torch.empty_like(td, device="meta")), device="cpu"
    ),
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
    case("stack", _set_nt(lambda lib: lib.NonTensorStack(*[lib.NonTensorStack(*"abcde")] * 4)), raises=AttributeError),
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
    case(
        "eq_tuple_keys",
        lambda lib, td: (
            td == {"a": td["a"], "b": td["b"], ("nested", "c"): td["nested", "c"], ("nested", "deep", "d"): 0}
        ),
    ),
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
    case(
        "collision_other_order",
        lambda lib, _: lib.TensorDict({"a": {"b": torch.ones(2)}, "a_b": torch.zeros(2)}, [2]).flatten_keys("_"),
        raises=KeyError,
        data=None,
    ),
    case(
        "collision_inplace",
        lambda lib, _: lib.TensorDict({"a.b": torch.zeros(2), "a": {"b": torch.ones(2)}}, [2]).flatten_keys(
            ".", inplace=True
        ),
        raises=KeyError,
        data=None,
    ),
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
    case(
        "leaf_shapes", _expand_as({"a": torch.zeros(3, 1, 4)}, [3], {"a": torch.zeros(2, 3, 6, 4)}, [2, 3]), data=None
    ),
    case(
        "same_batch_dims",
        _expand_as({"a": torch.arange(6.0).reshape(2, 3, 1, 1)}, [2, 3], {"a": torch.zeros(2, 3, 6, 4)}, [2, 3]),
        data=None,
    ),
    case(
        "nested_and_extra_target_key",
        _expand_as(
            {"a": torch.zeros(3, 1), "n": {"c": torch.ones(3, 1, 2)}},
            [3],
            {"a": torch.zeros(2, 3, 5), "n": {"c": torch.zeros(2, 3, 4, 2)}, "z": torch.zeros(2, 3)},
            [2, 3],
        ),
        data=None,
    ),
    case(
        "missing_target_key",
        _expand_as({"a": torch.zeros(3), "b": torch.zeros(3)}, [3], {"a": torch.zeros(2, 3)}, [2, 3]),
        raises=KeyError,
        data=None,
    ),
    case(
        "bad_leaf",
        _expand_as({"a": torch.zeros(3, 2)}, [3], {"a": torch.zeros(2, 3, 5)}, [2, 3]),
        raises=RuntimeError,
        data=None,
    ),
    case("tensor", lambda lib, td: td.expand_as(torch.zeros(3, 4, 5))),
]


@pytest.mark.parametrize(("fn", "kw"), EXPAND_AS)
def test_expand_as(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Non-tensor leaves written in place (update_at_, update_, update(inplace=True), copy_)
# --------------------------------------------------------------------------------------------------
def _nt_target(lib: Any) -> Any:
    return lib.TensorDict(
        {
            "val": lib.NonTensorData(0, batch_size=[10]),
            "t": torch.zeros(10),
            "n": {"s": lib.NonTensorData("a", batch_size=[10])},
        },
        [10],
    )


def _written(op: Any) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        td = _nt_target(lib)
        op(lib, td)
        return _plain(td["val"]), _plain(td["n", "s"]), td["t"]

    return fn


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value  # tensordict's LinkedList is a list


def _src(lib: Any, n: int = 5) -> Any:
    return lib.TensorDict(
        {
            "val": lib.NonTensorData(1, batch_size=[n]),
            "t": torch.ones(n),
            "n": {"s": lib.NonTensorData("b", batch_size=[n])},
        },
        [n],
    )


WRITE_NT = [
    case("update_at_slice", _written(lambda lib, td: td.update_at_(_src(lib), slice(1, None, 2))), data=None),
    case(
        "update_at_int",
        _written(
            lambda lib, td: td.update_at_(
                lib.TensorDict(
                    {"val": lib.NonTensorData(1), "t": torch.ones(()), "n": {"s": lib.NonTensorData("b")}}, []
                ),
                3,
            )
        ),
        data=None,
    ),
    case(
        "update_at_keys",
        _written(lambda lib, td: td.update_at_(_src(lib), slice(1, None, 2), keys_to_update=["val"])),
        data=None,
    ),
    case("setitem_slice", _written(lambda lib, td: td.__setitem__(slice(1, None, 2), _src(lib))), data=None),
    case("update_", _written(lambda lib, td: td.update_(_src(lib, 10))), data=None),
    case("update_inplace", _written(lambda lib, td: td.update(_src(lib, 10), inplace=True)), data=None),
    case("copy_", _written(lambda lib, td: td.copy_(_src(lib, 10))), data=None),
    case("copy_at_", _written(lambda lib, td: td.copy_at_(_src(lib), slice(1, None, 2))), data=None),
]


@pytest.mark.parametrize(("fn", "kw"), WRITE_NT)
def test_write_non_tensor(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Dim names through batch operations
# --------------------------------------------------------------------------------------------------
def _named(lib: Any) -> Any:
    return lib.TensorDict(
        {"x": torch.arange(120.0).reshape(3, 4, 5, 2), "n": {"y": torch.arange(60.0).reshape(3, 4, 5)}},
        [3, 4, 5],
        names=["a", "b", "c"],
    )


def _names_of(fn: Any) -> Any:
    def run(lib: Any, _: Any) -> Any:
        out = fn(lib, _named(lib))
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [(o, o["n"].names) for o in outs]

    return run


NAMES = [
    case(name, _names_of(fn), data=None)
    for name, fn in [
        ("gather", lambda lib, td: td.gather(1, torch.zeros(3, 2, 5, dtype=torch.long))),
        ("all_dim", lambda lib, td: td.all(dim=0)),
        ("any_dim", lambda lib, td: td.any(dim=1)),
        ("sum_dim", lambda lib, td: td.sum(dim=1)),
        ("sum_dim_neg", lambda lib, td: td.mean(dim=-1)),
        ("sum_keepdim", lambda lib, td: td.sum(dim=1, keepdim=True)),
        ("std_dim", lambda lib, td: td.std(dim=1)),
        ("prod_dim", lambda lib, td: td.prod(dim=2)),
        ("nansum_dim", lambda lib, td: td.nansum(dim=1)),
        ("max_dim", lambda lib, td: td.max(dim=1)),
        ("min_dim", lambda lib, td: td.min(dim=0)),
        ("flatten_01", lambda lib, td: td.flatten(0, 1)),
        ("flatten_12", lambda lib, td: td.flatten(1, 2)),
        ("flatten_all", lambda lib, td: td.flatten()),
        ("unflatten", lambda lib, td: td.unflatten(1, (2, 2))),
        ("repeat", lambda lib, td: td.repeat(1, 2, 1)),
        ("repeat_interleave", lambda lib, td: td.repeat_interleave(2, dim=1)),
        ("transpose", lambda lib, td: td.transpose(0, 1)),
        ("permute", lambda lib, td: td.permute(2, 0, 1)),
        ("unsqueeze", lambda lib, td: td.unsqueeze(1)),
        ("expand", lambda lib, td: td.expand(2, 3, 4, 5)),
        ("split", lambda lib, td: td.split(2, dim=1)),
        ("unbind", lambda lib, td: td.unbind(1)),
        ("index_int", lambda lib, td: td[0]),
        ("index_slice", lambda lib, td: td[:, 1:]),
        ("stack", lambda lib, td: torch.stack([td, td], 1)),
        ("cat", lambda lib, td: torch.cat([td, td], 1)),
    ]
] + [
    case(
        "flatten_unnamed_merge",
        lambda lib, _: lib.TensorDict({"x": torch.zeros(3, 4, 5, 6)}, [3, 4, 5], names=[None, None, "d"]).flatten(0, 1),
        data=None,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), NAMES)
def test_names_survive(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# torch.func transforms of TensorDict -> TensorDict functions
# --------------------------------------------------------------------------------------------------
def _double(td: Any) -> Any:
    return td.apply(lambda x: x * 2)


def _func_case(transform: Any, data: dict, batch: list) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        out = transform(_double)(lib.TensorDict({k: v.clone() for k, v in data.items()}, batch))
        return out, {k: out[k] for k in data}

    return fn


_X = {"a": torch.arange(6.0).reshape(2, 3)}
_XY = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.arange(8.0).reshape(2, 4)}
FUNC = [
    case("jacrev", _func_case(torch.func.jacrev, _X, [2]), data=None),
    case("jacfwd", _func_case(torch.func.jacfwd, _X, [2]), data=None),
    case("jacrev_two_leaves", _func_case(torch.func.jacrev, _XY, [2]), data=None),
    case("jacfwd_two_leaves", _func_case(torch.func.jacfwd, _XY, [2]), data=None),
    case("vmap", _func_case(torch.func.vmap, _X, [2]), data=None),
]


@pytest.mark.parametrize(("fn", "kw"), FUNC)
def test_func_transforms(run_both, fn, kw):
    run_both(fn, **kw)


# --------------------------------------------------------------------------------------------------
# Tensorclass fields annotated with a forward reference
# --------------------------------------------------------------------------------------------------
_TC: dict[str, Any] = {}


def _forward_classes(lib: Any) -> Any:
    """Built once per library (tensordict registers every tensorclass with pytree)."""
    if lib.__name__ not in _TC:

        @lib.tensorclass
        class MyDataNested:
            X: torch.Tensor
            y: "MyDataNested" = None  # noqa: UP037  # the forward reference is the point

        @lib.tensorclass
        class Outer:
            X: torch.Tensor
            inner: "Inner" = None  # noqa: UP037  # defined below, in this function: never resolvable by name

        @lib.tensorclass
        class Inner:
            Z: torch.Tensor

        _TC[lib.__name__] = MyDataNested, Outer, Inner
    return _TC[lib.__name__]


def _self_ref(op: Any) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        cls, _outer, _inner = _forward_classes(lib)
        data = cls(X=torch.zeros(3, 4), y=cls(X=torch.ones(3, 4), batch_size=[3, 4]), batch_size=[3, 4])
        out = op(data)
        return type(out).__name__, type(out.y).__name__, out.y.X

    return fn


def _other_ref(op: Any) -> Any:
    def fn(lib: Any, _: Any) -> Any:
        _cls, outer, inner = _forward_classes(lib)
        data = outer(X=torch.zeros(3), inner=inner(Z=torch.arange(3.0), batch_size=[3]), batch_size=[3])
        out = op(data)
        return type(out).__name__, type(out.inner).__name__, out.inner.Z

    return fn


FORWARD = [
    case("self_ref", _self_ref(lambda d: d), data=None),
    case("self_ref_permute", _self_ref(lambda d: d.permute(1, 0)), data=None),
    case("self_ref_index", _self_ref(lambda d: d[0]), data=None),
    case("self_ref_clone", _self_ref(lambda d: d.clone()), data=None),
    case("other_ref", _other_ref(lambda d: d), data=None),
    case("other_ref_index", _other_ref(lambda d: d[1:]), data=None),
    case("other_ref_apply", _other_ref(lambda d: d.apply(lambda x: x + 1)), data=None),
]


@pytest.mark.parametrize(("fn", "kw"), FORWARD)
def test_tensorclass_forward_reference(run_both, fn, kw):
    run_both(fn, **kw)
