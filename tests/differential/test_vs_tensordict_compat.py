"""Differential tests for what TorchRL needs from the core and the compat layer: TensorClass fields named
``data``/``fields``, a class-level ``__getattr__``, tensordict.utils' public helpers, and the private helpers that
``tensorbatch.compat`` serves as ``tensordict.utils._x`` (compared here with tensordict's, without the switch)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from tensorbatch.compat import _private

pytestmark = pytest.mark.differential


def outcome(fn: Any, *args: Any) -> Any:
    try:
        out = fn(*args)
    except Exception as e:  # the error type is part of the behaviour
        return ("raises", type(e).__name__)
    if isinstance(out, torch.Tensor):
        return ("tensor", tuple(out.shape), out.tolist())
    if hasattr(out, "batch_size"):
        return (type(out).__name__, tuple(out.batch_size), sorted(map(str, out.keys(True, True))))
    return out


# ------------------------------------------------------------------------------ TensorClass blockers
def _make_data_field(lib: Any, base_flavour: str | None) -> Any:
    base = lib.TensorClass[base_flavour] if base_flavour else lib.TensorClass

    class Trajectory(base):  # type: ignore[misc,valid-type]
        data: Any

    inner = lib.TensorDict(a=torch.arange(3.0), batch_size=[3])
    t = Trajectory(data=inner, batch_size=[3])
    return (
        type(t.data).__name__,
        tuple(t[:2].data.batch_size),
        t[1].data["a"].item(),
        sorted(t.to_tensordict().keys(True, True)),
        tuple(Trajectory(data=torch.ones(2), batch_size=[2]).data.shape),
    )


@pytest.mark.parametrize("flavour", [None, "nocast"])
def test_field_named_data(ref: Any, tb: Any, flavour: str | None) -> None:
    assert outcome(_make_data_field, tb, flavour) == outcome(_make_data_field, ref, flavour)


def _make_fields_field(lib: Any) -> Any:
    class F(lib.TensorClass):
        fields: torch.Tensor

    return F(fields=torch.zeros(2), batch_size=[2]).fields.tolist()


def test_field_named_fields(ref: Any, tb: Any) -> None:
    assert outcome(_make_fields_field, tb) == outcome(_make_fields_field, ref)


@pytest.mark.parametrize("name", ["batch_size", "to_dict", "sum"])
def test_other_member_names_still_refused(ref: Any, tb: Any, name: str) -> None:
    def make(lib: Any) -> Any:
        return type("T", (lib.TensorClass,), {"__annotations__": {name: torch.Tensor}})

    assert outcome(make, tb) == outcome(make, ref) == ("raises", "AttributeError")


def _chained_getattr(lib: Any) -> Any:
    class G(lib.TensorClass["nocast"]):
        x: torch.Tensor

    original = G.__getattr__

    def fallback(self: Any, name: str) -> Any:
        try:
            return original(self, name)
        except AttributeError:
            return f"fallback:{name}"

    G.__getattr__ = fallback
    g = G(x=torch.zeros(2), batch_size=[2])
    return (g.x.tolist(), g.missing, original(g, "x").tolist(), tuple(original(g, "batch_size")), g.batch_size[0])


def test_class_level_getattr_can_be_chained(ref: Any, tb: Any) -> None:
    assert outcome(_chained_getattr, tb) == outcome(_chained_getattr, ref)


def test_missing_attribute_message(ref: Any, tb: Any) -> None:
    def read(lib: Any) -> str:
        class G(lib.TensorClass):
            x: torch.Tensor

        try:
            _ = G(x=torch.zeros(2), batch_size=[2]).nope
        except AttributeError as e:
            return str(e)
        return "no error"

    assert read(tb) == read(ref)


# ------------------------------------------------------------------------------ tensordict.utils public names
EXPAND_CASES = [((3,), (3, 2)), ((3, 4), (3, 4, 5)), ((1,), (3, 2)), ((3,), (4, 2)), ((2, 3), (2,))]


@pytest.mark.parametrize(("shape", "dest"), EXPAND_CASES)
def test_expand_right(ref: Any, tb: Any, shape: tuple[int, ...], dest: tuple[int, ...]) -> None:
    x = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    assert outcome(tb.utils.expand_right, x, dest) == outcome(ref.utils.expand_right, x, dest)


@pytest.mark.parametrize(("shape", "dest"), EXPAND_CASES)
def test_expand_as_right(ref: Any, tb: Any, shape: tuple[int, ...], dest: tuple[int, ...]) -> None:
    x = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    assert outcome(tb.utils.expand_as_right, x, torch.zeros(dest)) == outcome(
        ref.utils.expand_as_right, x, torch.zeros(dest)
    )
    td = {lib: lib.TensorDict(a=torch.zeros(dest), batch_size=dest) for lib in (ref, tb)}
    assert outcome(tb.utils.expand_as_right, x, td[tb]) == outcome(ref.utils.expand_as_right, x, td[ref])


def test_utils_public_names(ref: Any, tb: Any) -> None:
    for name in (
        "Buffer",
        "expand_right",
        "expand_as_right",
        "is_non_tensor",
        "is_tensorclass",
        "logger",
        "DeviceType",
        "IndexType",
    ):
        assert name in tb.utils.__all__ and hasattr(tb.utils, name), name
    assert tb.utils.Buffer is ref.utils.Buffer is torch.nn.Buffer
    data = {lib: (lib.NonTensorData("x"), lib.TensorDict(), torch.zeros(1)) for lib in (ref, tb)}
    assert [tb.utils.is_non_tensor(v) for v in data[tb]] == [ref.utils.is_non_tensor(v) for v in data[ref]]
    # (NonTensorData is a tensorclass in tensordict, not here: compared on the other values)
    assert [tb.utils.is_tensorclass(v) for v in data[tb][1:]] == [ref.utils.is_tensorclass(v) for v in data[ref][1:]]


@pytest.mark.parametrize("seq", [["a", ("b", "c")], [], "abc", [["a", "b"]], [()], [1], ("a",), None])
def test_is_seq_of_nested_key_is_deprecated(ref: Any, tb: Any, seq: Any) -> None:
    with pytest.warns(DeprecationWarning, match="is_seq_of_nested_key is deprecated"):
        mine = tb.utils.is_seq_of_nested_key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ref.utils.is_seq_of_nested_key
    assert mine(seq) == theirs(seq)


# ------------------------------------------------------------------------------ compat-only private helpers
@pytest.mark.parametrize("key", [0, (0,), ("a", 0), ("a", ("b",)), (), "a", ("a", ()), ["a", "b"], None])
def test_private_unravel_key_to_tuple(ref: Any, key: Any) -> None:
    assert outcome(_private._unravel_key_to_tuple, key) == outcome(ref.utils._unravel_key_to_tuple, key)


@pytest.mark.parametrize(
    "index",
    [
        0,
        slice(1, 3),
        (slice(None), 0),
        (None, 1),
        ...,
        torch.tensor([0, 2]),
        torch.tensor([True, False, True, True]),
        (torch.tensor([0, 1]), torch.tensor([1, 2])),
        (Ellipsis, None),
        [0, 1],
    ],
)
def test_private_getitem_batch_size(ref: Any, index: Any) -> None:
    def shape(fn: Any) -> Any:
        out = outcome(fn, [4, 3, 2], index)
        return tuple(out) if isinstance(out, (list, torch.Size)) else out

    assert shape(_private._getitem_batch_size) == shape(ref.utils._getitem_batch_size)


@pytest.mark.parametrize(
    ("dim", "shape", "ndim"), [(-1, (2, 3), None), (1, (2, 3), None), (2, (2, 3), None), (-3, None, 2), (0, None, 2)]
)
def test_private_maybe_correct_neg_dim(ref: Any, dim: int, shape: Any, ndim: Any) -> None:
    size = torch.Size(shape) if shape is not None else None
    assert outcome(_private._maybe_correct_neg_dim, dim, size, ndim) == outcome(
        ref.utils._maybe_correct_neg_dim, dim, size, ndim
    )


def test_private_shape_and_predicates(ref: Any, tb: Any) -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)])
    assert _private._shape(nested) == ref.utils._shape(nested)
    assert _private._shape(torch.zeros(2, 5)) == ref.utils._shape(torch.zeros(2, 5))
    assert _private._shape(tb.TensorDict(batch_size=[3])) == ref.utils._shape(ref.TensorDict(batch_size=[3]))
    for name in ("NonTensorData", "TensorDict", "TensorClass", "NonTensorStack"):
        assert _private._is_non_tensor(getattr(tb, name)) == ref.utils._is_non_tensor(getattr(ref, name)), name
    for name in ("TensorDict", "TensorClass"):  # (NonTensorData is a tensorclass in tensordict, not here)
        assert _private._is_tensorclass(getattr(tb, name)) == ref.utils._is_tensorclass(getattr(ref, name)), name
    assert list(_private._zip_strict([1, 2], "ab")) == list(ref.utils._zip_strict([1, 2], "ab"))
    with pytest.raises(ValueError, match="shorter"):
        list(_private._zip_strict([1], []))


def test_private_is_leaf_markers(ref: Any, tb: Any) -> None:
    import tensordict.base as ref_base

    mine, theirs = _private._NESTED_TENSORS_AS_LISTS, ref_base._NESTED_TENSORS_AS_LISTS
    assert bool(mine) is bool(theirs) is False
    for name in ("TensorDict", "NonTensorData", "LazyStackedTensorDict"):
        assert mine(getattr(tb, name)) == theirs(getattr(ref, name)), name
        assert _private._NESTED_TENSORS_AS_LISTS_NONTENSOR(
            getattr(tb, name)
        ) == ref_base._NESTED_TENSORS_AS_LISTS_NONTENSOR(getattr(ref, name)), name
    assert mine(torch.Tensor) == theirs(torch.Tensor)


def test_exclude_td_from_pytree(ref: Any, tb: Any) -> None:
    from torch.utils import _pytree

    td = tb.TensorDict(a=torch.zeros(2), batch_size=[2])
    assert len(_pytree.tree_leaves(td)) == 1 and _pytree.tree_leaves(td)[0] is not td
    with _private._exclude_td_from_pytree():
        assert _pytree.tree_leaves(td) == [td]
    assert _pytree.tree_leaves(td)[0] is td["a"]


# ------------------------------------------------------------------------------ core behaviour TorchRL relies on
def _stack_into_out(lib: Any, extra_in: bool) -> Any:
    td_cls = lib.TensorDict
    out = td_cls(
        a=torch.zeros(2, 3),
        next=td_cls(b=torch.zeros(2, 3), steps=torch.full((2, 3), 7.0), batch_size=[2, 3]),
        batch_size=[2, 3],
    )
    nxt = {"b": torch.ones(3), **({"x": torch.ones(3)} if extra_in else {})}
    tds = [td_cls(a=torch.full((3,), float(i)), next=td_cls(nxt, batch_size=[3]), batch_size=[3]) for i in range(2)]
    result = torch.stack(tds, 0, out=out)
    return (
        result is out,
        sorted(map(str, out.keys(True, True))),
        out["a"].tolist(),
        out["next", "b"].tolist(),
        out["next", "steps"].tolist(),
    )


@pytest.mark.parametrize("extra_in", [False, True])
def test_stack_into_out_with_more_keys(ref: Any, tb: Any, extra_in: bool) -> None:
    """torch.stack(tds, out=buffer): the buffer's other keys keep their values (TorchRL's collector rollout)."""
    assert outcome(_stack_into_out, tb, extra_in) == outcome(_stack_into_out, ref, extra_in)


def test_stack_into_out_wrong_batch_size(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> Any:
        tds = [lib.TensorDict(a=torch.ones(3), batch_size=[3])] * 2
        return torch.stack(tds, 0, out=lib.TensorDict(a=torch.zeros(3, 2), batch_size=[3, 2]))

    assert outcome(run, tb) == outcome(run, ref) == ("raises", "RuntimeError")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"as_padded_tensor": True},
        {"as_padded_tensor": True, "padding_value": 1.0},
        {"padding_side": "left"},
        {"layout": torch.jagged},
    ],
)
def test_dense_get_takes_the_lazy_stack_keywords(ref: Any, tb: Any, kwargs: dict[str, Any]) -> None:
    def run(lib: Any) -> Any:
        td = lib.TensorDict(a=torch.arange(6.0).reshape(2, 3), batch_size=[2])
        return (td.get("a", None, **kwargs).tolist(), td.get("missing", None, **kwargs))

    assert outcome(run, tb) == outcome(run, ref)


@pytest.mark.parametrize("flag", ["as_list", "as_nested_tensor"])
def test_dense_get_as_list_warns(ref: Any, tb: Any, flag: str) -> None:
    for lib in (ref, tb):
        td = lib.TensorDict(a=torch.ones(2, 3), batch_size=[2])
        with pytest.warns(FutureWarning, match=flag):
            assert td.get("a", **{flag: True}).shape == (2, 3)


def test_module_names_torchrl_imports(ref: Any, tb: Any) -> None:
    import sys

    for module, name in (
        ("tensorclass", "is_non_tensor"),
        ("functional", "dense_stack_tds"),
        ("tensordict", "expand_right"),
        ("tensordict", "expand_as_right"),
    ):
        mine = getattr(sys.modules[f"tensorbatch.{module}"], name)
        theirs = getattr(sys.modules[f"tensordict.{module}"], name)
        assert callable(mine) and callable(theirs), (module, name)
    data = {lib: lib.NonTensorData("x") for lib in (ref, tb)}
    assert sys.modules["tensorbatch.tensorclass"].is_non_tensor(data[tb]) is True
    assert sys.modules["tensordict.tensorclass"].is_non_tensor(data[ref]) is True
