"""Differential tests, typed containers: TypedTensorDict and TensorClass against tensordict 0.15.3.

Each library gets its own classes (built once per library by :func:`_classes`). TypedTensorDict
results are TensorDicts and compare directly (class names included); TensorClass results are not
TensorDicts in tensordict, so they are compared through :func:`_tc`: the class name and
``to_tensordict()``.

Deliberate differences are strict xfails marked here with :func:`difference` (only when the subject is
tensorbatch, so the self-check against tensordict stays green).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Optional

import pytest
import torch
from torch import Tensor

from ._diff import SUBJECT_ENV

pytestmark = pytest.mark.differential

_IS_TB = os.environ.get(SUBJECT_ENV, "tensorbatch") == "tensorbatch"
_CACHE: dict[str, Any] = {}
BATCH = [4, 5]


def difference(reason: str) -> Any:
    return pytest.mark.xfail(_IS_TB, strict=True, reason=f"deliberate difference: {reason}")


def _classes(lib: Any) -> Any:
    """The test classes of ``lib`` (built once: tensordict registers every class with pytree)."""
    if lib.__name__ in _CACHE:
        return _CACHE[lib.__name__]

    class State(lib.TypedTensorDict):
        a: Tensor
        b: Tensor
        nested: lib.TensorDictBase

    class Sub(State):
        z: Tensor

    class WithDefault(lib.TypedTensorDict):
        a: Tensor
        extra: Tensor = torch.zeros(())

    class Frozen(lib.TypedTensorDict["frozen"]):
        a: Tensor

    class TC(lib.TensorClass):
        a: Tensor
        b: Tensor
        nested: lib.TensorDict

    class Labeled(lib.TensorClass):
        a: Tensor
        label: str
        mask: Optional[Tensor] = None  # noqa: UP045

    class FrozenTC(lib.TensorClass["frozen"]):
        a: Tensor

    class Named(lib.TypedTensorDict):
        a: Tensor
        name: str

    class CastTC(lib.TensorClass["autocast"]):
        a: Tensor

    class FilteredTC(lib.TensorClass, cast_filter=lib.is_inexact):  # its dtype casts skip integer leaves
        a: Tensor
        i: Tensor

    class FilteredSub(FilteredTC):
        extra: Optional[Tensor] = None  # noqa: UP045

    @lib.tensorclass(cast_filter=lambda key, x: key == ("a",))
    class FilteredDecorated:
        a: Tensor
        b: Tensor

    class Outer(lib.TensorClass):
        inner: Labeled
        b: Tensor
        tag: str = "t"
        extra: Any = None

    ns = type("Classes", (), {})
    classes = (State, Sub, WithDefault, Frozen, TC, Labeled, FrozenTC, CastTC, Named, FilteredTC, FilteredSub)
    for cls in (*classes, FilteredDecorated, Outer):
        setattr(ns, cls.__name__, cls)
    _CACHE[lib.__name__] = ns
    return ns


def _state(lib: Any, td: Any) -> Any:
    return _classes(lib).State.from_tensordict(td)


def _tc(x: Any) -> Any:
    """A TensorClass result as something the harness compares: (class name, its TensorDict)."""
    if isinstance(x, (tuple, list)):
        return type(x)(_tc(i) for i in x)
    if hasattr(x, "to_tensordict") and hasattr(type(x), "__dataclass_fields__"):
        return (type(x).__name__, x.to_tensordict())
    return x


def _make_tc(lib: Any, td: Any) -> Any:
    return _classes(lib).TC(a=td["a"], b=td["b"], nested=td["nested"], batch_size=BATCH)


def _labeled(lib: Any, td: Any) -> Any:
    return _classes(lib).Labeled(a=td["a"], label="lbl", batch_size=BATCH)


def _filtered(lib: Any, td: Any, name: str = "FilteredTC") -> Any:
    return getattr(_classes(lib), name)(a=td["a"], i=td["b"].long(), batch_size=BATCH)


def _outer(lib: Any, td: Any, label: str = "lbl", tag: str = "t") -> Any:
    inner = _classes(lib).Labeled(a=td["a"], label=label, batch_size=BATCH)
    return _classes(lib).Outer(inner=inner, b=td["b"], tag=tag, extra={"k": 1}, batch_size=BATCH)


def _sorted(facts: Any) -> Any:
    return {k: dict(sorted(v.items())) if k == "_non_tensor" else v for k, v in facts.items()}


def _meta(state_dict: Any) -> Any:
    """A state dict's ``_metadata`` (and its nested dicts'), as plain dicts."""
    out = {"": {k: _sorted(v) for k, v in sorted(state_dict._metadata.items())}}  # (tensordict's order differs)
    out.update({k: _meta(v) for k, v in state_dict.items() if hasattr(v, "_metadata")})
    return out


def _loaded(lib: Any, td: Any, **kwargs: Any) -> Any:
    """A state dict of one Outer loaded into another: the non-tensor fields come back too."""
    sd = _outer(lib, td).state_dict(**kwargs)
    dest = _outer(lib, td.apply(lambda x: x + 1), label="other", tag="u")
    out = dest.load_state_dict(sd)
    return out is dest, dest.inner.label, dest.tag, dest.extra, dest.b, dest.inner.a


def _dtypes(x: Any) -> Any:
    return {k: v.dtype for k, v in x.items()}


def case(case_id: str, fn: Any, *marks: Any, **kwargs: Any) -> Any:
    return pytest.param(fn, kwargs, id=case_id, marks=marks)


def _quiet(fn: Any) -> Any:
    def run(lib: Any, td: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tensordict warns about experimental / deprecated features
            return fn(lib, td)

    return run


# --------------------------------------------------------------------------------------------------
# TypedTensorDict
# --------------------------------------------------------------------------------------------------
TYPED = [
    case("ttd_wrap", lambda lib, td: _state(lib, td)),
    case("ttd_construct", lambda lib, td: _classes(lib).State(**td, batch_size=BATCH)),
    case("ttd_construct_sub", lambda lib, td: _classes(lib).Sub(**td, z=torch.ones(4, 5), batch_size=BATCH)),
    case("ttd_field_read", lambda lib, td: _state(lib, td).a),
    case("ttd_str_field_read", lambda lib, td: _classes(lib).Named(a=td["a"], name="x", batch_size=BATCH).name),
    case("ttd_str_field_get", lambda lib, td: _classes(lib).Named(a=td["a"], name="x", batch_size=BATCH)["name"]),
    case(
        "ttd_str_field_index",
        lambda lib, td: _classes(lib).Named(a=td["a"], name="x", batch_size=BATCH)[1].name,
    ),
    case("ttd_nested_read", lambda lib, td: _state(lib, td).nested),
    case("ttd_key_read", lambda lib, td: _state(lib, td)["nested", "c"]),
    case("ttd_field_write", lambda lib, td: setattr(_state(lib, td), "b", torch.zeros(4, 5))),
    case("ttd_keys", lambda lib, td: sorted(_state(lib, td).keys())),
    case("ttd_default", lambda lib, td: _classes(lib).WithDefault(a=td["a"], batch_size=BATCH).extra),
    case("ttd_clone", lambda lib, td: _state(lib, td).clone()),
    case("ttd_index", lambda lib, td: _state(lib, td)[1]),
    case("ttd_slice", lambda lib, td: _state(lib, td)[1:3, ::2]),
    case("ttd_mask", lambda lib, td: _state(lib, td)[torch.tensor([True, False, True, True])]),
    case("ttd_add", lambda lib, td: _state(lib, td) + 1),
    case("ttd_apply", lambda lib, td: _state(lib, td).apply(lambda x: x * 2)),
    case("ttd_to", lambda lib, td: _state(lib, td).to(torch.float64)),
    case("ttd_unbind", lambda lib, td: _state(lib, td).unbind(1)),
    case("ttd_split", lambda lib, td: _state(lib, td).split(2, 1)),
    case("ttd_stack", lambda lib, td: torch.stack([_state(lib, td), _state(lib, td)], 1)),
    case("ttd_cat", lambda lib, td: torch.cat([_state(lib, td), _state(lib, td)], 0)),
    case("ttd_reshape", lambda lib, td: _state(lib, td).reshape(20)),
    case("ttd_unsqueeze", lambda lib, td: _state(lib, td).unsqueeze(0)),
    case("ttd_expand", lambda lib, td: _state(lib, td).expand(2, 4, 5)),
    case("ttd_select", lambda lib, td: _state(lib, td).select("a", ("nested", "c"))),
    case("ttd_exclude", lambda lib, td: _state(lib, td).exclude("b")),
    case("ttd_detach", lambda lib, td: _state(lib, td).detach()),
    case("ttd_float", lambda lib, td: _state(lib, td).double()),
    case("ttd_update", lambda lib, td: _state(lib, td).update({"a": torch.zeros(4, 5, 3)})),
    case("ttd_set", lambda lib, td: _state(lib, td).set(("nested", "c"), torch.zeros(4, 5, 2))),
    case("ttd_zero_", lambda lib, td: _state(lib, td).zero_()),
    case("ttd_apply_", lambda lib, td: _state(lib, td).apply_(lambda x: x + 1)),
    case("ttd_where", lambda lib, td: _state(lib, td).where(torch.ones(4, 5, dtype=torch.bool), 0.0)),
    case("ttd_new_zeros", lambda lib, td: _state(lib, td).new_zeros(3)),
    case("ttd_rename_key", lambda lib, td: _state(lib, td).clone().rename_key_("b", "bb")),
    case("ttd_named_apply", lambda lib, td: _state(lib, td).named_apply(lambda k, x: x * 0)),
    case("ttd_empty", lambda lib, td: _state(lib, td).empty()),
    case("ttd_masked_fill", lambda lib, td: _state(lib, td).masked_fill(torch.ones(4, 5, dtype=torch.bool), 1.0)),
    case("ttd_iter", lambda lib, td: next(iter(_state(lib, td)))),
    case("ttd_to_tensordict", lambda lib, td: _state(lib, td).to_tensordict()),
    case("ttd_state_dict", lambda lib, td: _state(lib, td).state_dict()),
    case("ttd_spread", lambda lib, td: dict(**_state(lib, td))),
    case("ttd_lazy_backend", lambda lib, td: _state(lib, lib.lazy_stack([td[0], td[1]], 0))[1]),
    case("ttd_lazy_of_typed", lambda lib, td: lib.lazy_stack([_state(lib, td[0]), _state(lib, td[1])], 0)[1]),
    case("ttd_sum", lambda lib, td: _state(lib, td).sum(0)),
    case("ttd_amax", lambda lib, td: _state(lib, td).amax(0)),
    case("ttd_torch_mean", lambda lib, td: torch.mean(_state(lib, td), 0)),
    case("ttd_eq", lambda lib, td: _state(lib, td) == _state(lib, td)),
    case("ttd_lt", lambda lib, td: _state(lib, td) < 0),
    # errors
    case("ttd_missing", lambda lib, td: _classes(lib).State(a=td["a"], batch_size=BATCH), raises=TypeError),
    case("ttd_extra", lambda lib, td: _classes(lib).State(**td, zz=td["b"], batch_size=BATCH), raises=TypeError),
    case("ttd_batch_mismatch", lambda lib, td: _classes(lib).State(**td, batch_size=[5]), raises=RuntimeError),
    case("ttd_check", lambda lib, td: _classes(lib).State.from_tensordict(td.exclude("b")), raises=TypeError),
    case(
        "ttd_unset_field",
        lambda lib, td: _classes(lib).State.from_tensordict(td.exclude("b"), check=False).b,
        raises=AttributeError,
    ),
    case(
        "ttd_frozen_write",
        lambda lib, td: setattr(_classes(lib).Frozen(a=td["a"], batch_size=BATCH), "a", torch.zeros(4, 5, 3)),
        raises=RuntimeError,
    ),
]


def _shadowing(lib: Any, td: Any) -> Any:
    class Bad(lib.TypedTensorDict):
        batch_size: Tensor

    return Bad


TYPED.append(case("ttd_shadow", _shadowing, raises=AttributeError))


@pytest.mark.parametrize(("fn", "kw"), TYPED)
def test_typed(run_both, fn, kw):
    run_both(_quiet(fn), **kw)


# --------------------------------------------------------------------------------------------------
# TensorClass
# --------------------------------------------------------------------------------------------------
TENSORCLASS = [
    case("tc_construct", lambda lib, td: _tc(_make_tc(lib, td))),
    case("tc_wrap", lambda lib, td: _tc(_classes(lib).TC.from_tensordict(td))),
    case("tc_field_read", lambda lib, td: _make_tc(lib, td).a),
    case("tc_nested_read", lambda lib, td: _make_tc(lib, td).nested),
    case("tc_write_live", lambda lib, td: setattr(_classes(lib).TC.from_tensordict(td), "a", torch.ones(4, 5, 3))),
    case("tc_get_nested", lambda lib, td: _make_tc(lib, td).get(("nested", "deep", "d"))),
    case("tc_set_nested", lambda lib, td: _tc(_make_tc(lib, td).set(("nested", "c"), torch.ones(4, 5, 2)))),
    case("tc_clone", lambda lib, td: _tc(_make_tc(lib, td).clone())),
    case("tc_index", lambda lib, td: _tc(_make_tc(lib, td)[2])),
    case("tc_slice", lambda lib, td: _tc(_make_tc(lib, td)[:, 1:3])),
    case("tc_add", lambda lib, td: _tc(_make_tc(lib, td) + 1)),
    case("tc_apply", lambda lib, td: _tc(_make_tc(lib, td).apply(lambda x: x * 3))),
    case("tc_stack", lambda lib, td: _tc(torch.stack([_make_tc(lib, td), _make_tc(lib, td)], 0))),
    case("tc_cat", lambda lib, td: _tc(torch.cat([_make_tc(lib, td), _make_tc(lib, td)], 1))),
    case("tc_unbind", lambda lib, td: _tc(_make_tc(lib, td).unbind(0))),
    case("tc_reshape", lambda lib, td: _tc(_make_tc(lib, td).reshape(-1))),
    case("tc_to", lambda lib, td: _tc(_make_tc(lib, td).to(torch.float64))),
    case("tc_sum", lambda lib, td: _tc(_make_tc(lib, td).sum(1))),
    case("tc_eq", lambda lib, td: _tc(_make_tc(lib, td) == _make_tc(lib, td))),
    case("tc_to_tensordict", lambda lib, td: _make_tc(lib, td).to_tensordict()),
    case("tc_state_dict", lambda lib, td: _make_tc(lib, td).state_dict()),
    case("tc_fields", lambda lib, td: [f.name for f in dataclasses.fields(_classes(lib).TC)]),
    case("tc_len_iter", lambda lib, td: (len(_make_tc(lib, td)), _tc(list(_make_tc(lib, td))[1]))),
    case("tc_label", lambda lib, td: _labeled(lib, td).label),
    case("tc_label_index", lambda lib, td: _labeled(lib, td)[0, 1].label),
    case(
        "tc_label_stack",
        lambda lib, td: torch.stack([_labeled(lib, td), _labeled(lib, td)]).label,
        difference("stacking identical non-tensor values gives one value (tensordict: a list of them)"),
    ),
    case(
        "tc_to_namedtuple",
        lambda lib, td: _labeled(lib, td).to_namedtuple(),
        difference("a TensorClass's to_namedtuple is a namedtuple with the field names (tensordict: a plain tuple)"),
    ),
    case("tc_optional_none", lambda lib, td: _labeled(lib, td).mask),
    case("tc_optional_set", lambda lib, td: _tc(_set(_labeled(lib, td), "mask", torch.ones(4, 5)))),
    case("tc_label_to_tensordict", lambda lib, td: _labeled(lib, td).to_tensordict()),
    case("tc_from_tensordict_missing", lambda lib, td: _classes(lib).Labeled.from_tensordict(td.select("a")).label),
    # errors
    case(
        "tc_batch_mismatch",
        lambda lib, td: _classes(lib).Labeled(a=td["a"], label="x", batch_size=[3]),
        raises=RuntimeError,
    ),
    case("tc_missing_arg", lambda lib, td: _classes(lib).Labeled(a=td["a"], batch_size=BATCH), raises=TypeError),
    case("tc_unknown_attr", lambda lib, td: setattr(_labeled(lib, td), "zz", 1), raises=AttributeError),
    case("tc_getitem_str", lambda lib, td: _labeled(lib, td)["a"], raises=ValueError),
    case("tc_not_a_td", lambda lib, td: _classes(lib).TC.from_tensordict({"a": td["a"]}), raises=RuntimeError),
    case("tc_extra_keys", lambda lib, td: _classes(lib).Labeled.from_tensordict(td), raises=ValueError),
    case(
        "tc_frozen",
        lambda lib, td: setattr(_classes(lib).FrozenTC(a=td["a"], batch_size=BATCH), "a", td["a"]),
        raises=AttributeError,
    ),
    case(
        "tc_str_in_tensor_field",
        lambda lib, td: _classes(lib).TC(a="x", b=td["b"], nested=td["nested"], batch_size=BATCH).a,
        difference("a str given to a Tensor field raises TypeError (tensordict stores it and reads back the str)"),
    ),
    case("tc_autocast_fails", lambda lib, td: _classes(lib).CastTC(a="abc", batch_size=[]), raises=TypeError),
    # a class's cast_filter: the default of its dtype casts (cast_filter=None given: every leaf)
    case("tc_cast_filter_bfloat16", lambda lib, td: _dtypes(_filtered(lib, td).bfloat16())),
    case("tc_cast_filter_given_none", lambda lib, td: _dtypes(_filtered(lib, td).double(cast_filter=None))),
    case("tc_cast_filter_to", lambda lib, td: _tc(_filtered(lib, td).to(torch.float16))),
    case("tc_cast_filter_to_device", lambda lib, td: _tc(_filtered(lib, td).to("cpu"))),
    case("tc_cast_filter_type", lambda lib, td: _dtypes(_filtered(lib, td).type(torch.float64))),
    case("tc_cast_filter_inherited", lambda lib, td: _dtypes(_filtered(lib, td, "FilteredSub").half())),
    case(
        "tc_cast_filter_decorator",
        lambda lib, td: _dtypes(_classes(lib).FilteredDecorated(a=td["a"], b=td["b"], batch_size=BATCH).double()),
    ),
    # state_dict records each TensorClass level's class and non-tensor fields; load_state_dict sets them back
    case(
        "tc_state_dict_meta", lambda lib, td: (list(_outer(lib, td).state_dict()), _meta(_outer(lib, td).state_dict()))
    ),
    case("tc_state_dict_meta_nested", lambda lib, td: _meta(_outer(lib, td).state_dict(flatten=False))),
    case("tc_state_dict_meta_prefix", lambda lib, td: _meta(_outer(lib, td).state_dict(prefix="p."))),
    case(
        "tc_state_dict_in_td", lambda lib, td: _meta(lib.TensorDict(o=_outer(lib, td), batch_size=BATCH).state_dict())
    ),
    case("tc_load_state_dict", lambda lib, td: _loaded(lib, td)),
    case("tc_load_state_dict_nested", lambda lib, td: _loaded(lib, td, flatten=False)),
    case(
        "tc_load_state_dict_in_td",
        lambda lib, td: (
            (
                lambda dest: (
                    dest.load_state_dict(lib.TensorDict(o=_outer(lib, td), batch_size=BATCH).state_dict()),
                    dest,
                )
            )(lib.TensorDict(o=_outer(lib, td, label="x", tag="y"), batch_size=BATCH))[1]["o"].inner.label
        ),
    ),
    case("tc_to_tensordict_retain_none", lambda lib, td: _labeled(lib, td).to_tensordict(retain_none=True)),
    case("tc_to_tensordict_retain_none_false", lambda lib, td: _labeled(lib, td).to_tensordict(retain_none=False)),
    case(
        "tc_cast_filter_nested",
        lambda lib, td: _dtypes(lib.TensorDict(f=_filtered(lib, td), batch_size=BATCH).double()["f"]),
    ),
]


def _set(obj: Any, name: str, value: Any) -> Any:
    setattr(obj, name, value)
    return obj


def _tc_shadowing(lib: Any, td: Any) -> Any:
    class Bad(lib.TensorClass):
        apply: Tensor

    return Bad


TENSORCLASS.append(case("tc_shadow", _tc_shadowing, raises=AttributeError))


def _list_field(value: Any, batch: list[int], option: str | None = None, assign: bool = False) -> Any:
    """A list given to a field annotated ``Any``: read as a TensorDict reads it (a tensor or a stack of items)."""

    def fn(lib: Any, td: Any) -> Any:
        base = lib.TensorClass[option] if option else lib.TensorClass

        class Holder(base):  # type: ignore[misc, valid-type]
            x: Tensor
            y: Any = None

        if assign:
            obj = Holder(x=torch.zeros(3), batch_size=batch)
            obj.y = value
        else:
            obj = Holder(x=torch.zeros(3), y=value, batch_size=batch)
        y, kept = obj.y, obj._tensordict.get("y")
        first = obj[0].y if batch else None
        as_list = y.tolist() if hasattr(y, "tolist") else y
        return type(y).__name__, type(kept).__name__, as_list, first

    return fn


TENSORCLASS += [
    case("tc_list_ints", _list_field([1, 2, 3], [3])),
    case("tc_list_ints_unbatched", _list_field([1, 2, 3], [])),
    case("tc_list_strs", _list_field(["a", "b", "c"], [3])),
    case("tc_list_strs_unbatched", _list_field(["a", "b", "c"], [])),
    case("tc_list_dicts", _list_field([{"k": 1}, {"k": 2}, {"k": 3}], [3])),
    case("tc_list_assign", _list_field([4, 5, 6], [3], assign=True)),
    case("tc_list_nocast", _list_field(["a", "b", "c"], [3], "nocast")),
    case("tc_list_autocast", _list_field([1, 2, 3], [3], "autocast")),
    case("tc_any_int_unbatched", _list_field(1, [])),
    case("tc_any_float_unbatched", _list_field(2.5, [])),
    case("tc_any_bool_assign_unbatched", _list_field(True, [], assign=True)),
    case("tc_any_int_nocast", _list_field(1, [], "nocast")),
    case("tc_any_int_autocast", _list_field(1, [], "autocast")),
    case(
        "tc_any_int_batched",
        _list_field(1, [3]),
        difference("a number given to an Any field in a non-empty batch is kept as one value (tensordict raises)"),
    ),
    case(
        "tc_list_misfit",
        _list_field([1.0, 2.0], [3]),
        difference("a list that does not fit the batch size is kept as one value (tensordict raises)"),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), TENSORCLASS)
def test_tensorclass(run_both, fn, kw):
    run_both(_quiet(fn), **kw)


def test_composition(run_both):
    def fn(lib: Any, td: Any) -> Any:
        classes = _classes(lib)
        tc = classes.TC.from_tensordict(_state(lib, td))
        back = classes.State.from_tensordict(tc._tensordict)
        back.a = torch.zeros(4, 5, 3)  # writes go through both wrappers to td
        return _tc(tc[0]), back[1:]

    run_both(_quiet(fn))


@pytest.mark.parametrize("option", [None, "skip_post_init_on_rebuild"])
def test_post_init_runs_on_rebuilds_unless_skipped(ref, tb, option):
    def counts(lib):
        calls = []
        base = lib.TensorClass[option] if option else lib.TensorClass

        class Foo(base):
            x: Tensor

            def __post_init__(self):
                calls.append(1)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = Foo(x=torch.zeros(3), batch_size=[3])
            steps = [len(calls)]
            for op in (lambda: f[0], lambda: f + 1, lambda: torch.stack([f, f]), f.clone):
                op()
                steps.append(len(calls))
            Foo.from_tensordict(f.to_tensordict())
            steps.append(len(calls))
        return steps

    expected = counts(ref)
    assert expected[-1] > expected[0]  # the premise: from_tensordict runs it in both modes
    assert counts(tb) == expected


def _to_dict_none(**kwargs: Any) -> Any:
    """A TensorClass's to_dict keeps the fields that hold None, as tensordict."""

    def fn(lib: Any, td: Any) -> Any:
        class Outer(lib.TensorClass):
            x: Tensor
            y: Optional[Tensor] = None  # noqa: UP045
            s: str = "q"

        full = Outer(x=torch.zeros(2), y=torch.ones(2), batch_size=[2])
        empty = Outer(x=torch.zeros(2), batch_size=[2])
        return full.to_dict(**kwargs), empty.to_dict(**kwargs)

    return fn


TENSORCLASS += [
    case("tc_to_dict_none", _to_dict_none()),
    case("tc_to_dict_none_dropped", _to_dict_none(retain_none=False)),
    case("tc_to_dict_none_lists", _to_dict_none(convert_tensors=True)),
]
