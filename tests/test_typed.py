"""TypedTensorDict: schema from annotations, construction, live wrapping of any backend, bad input."""

from __future__ import annotations

import pickle
from collections.abc import MutableMapping
from typing import ClassVar, NotRequired

import pytest
import torch
from _messages import batch_mismatch
from torch import Tensor

from tensorbatch import (
    LazyStackedTensorDict,
    TensorClass,
    TensorDict,
    TensorDictBase,
    TypedTensorDict,
    lazy_stack,
)


class State(TypedTensorDict):
    x: Tensor
    y: Tensor


class Extended(State):
    z: Tensor


class WithDefaults(TypedTensorDict):
    x: Tensor
    y: Tensor = torch.zeros(())
    w: NotRequired[Tensor]
    counter: ClassVar[int] = 0
    _private: int = 0


class Inner(TypedTensorDict):
    v: Tensor


class Outer(TypedTensorDict):
    inner: Inner
    plain: TensorDictBase


class StateTC(TensorClass):
    x: Tensor
    y: Tensor


def _data() -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"x": torch.randn(4, 3, generator=g), "y": torch.randn(4, 5, generator=g)}


def make_state() -> State:
    return State(**_data(), batch_size=[4])


# ------------------------------------------------------------------------------------------ the seed's table
def _td_backend(tmp_path):
    return TensorDict(_data(), batch_size=[4])


def _lazy_backend(tmp_path):
    data = _data()
    return lazy_stack([TensorDict(x=data["x"][i], y=data["y"][i]) for i in range(4)], 0)


def _memmap_backend(tmp_path):
    return TensorDict(_data(), batch_size=[4]).memmap_(tmp_path / "mm")


def _tensorclass_backend(tmp_path):
    return StateTC(**_data(), batch_size=[4])._tensordict


BACKENDS = [
    pytest.param(_td_backend, id="TensorDict"),
    pytest.param(_lazy_backend, id="LazyStackedTensorDict"),
    pytest.param(_memmap_backend, id="memmap"),
    pytest.param(_tensorclass_backend, id="TensorClass._tensordict"),
]
LOCKED = {"_memmap_backend"}


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    return request.param.__name__, request.param(tmp_path)


class TestSeedTable:
    """Build, Read, Write, Index, Clone, Stack, Iter, Update: yes for every backend we have."""

    def test_build(self, backend):
        _, td = backend
        state = State.from_tensordict(td)
        assert type(state) is State
        assert state._source is td  # zero-copy
        assert isinstance(state, TensorDictBase)

    def test_read(self, backend):
        _, td = backend
        state = State.from_tensordict(td)
        assert torch.equal(state.x, td["x"])
        assert torch.equal(state["y"], td["y"])

    def test_write_is_live(self, backend):
        name, td = backend
        state = State.from_tensordict(td)
        if name in LOCKED:
            with pytest.raises(RuntimeError, match="field 'x'"):
                state.x = torch.ones(4, 3)
            state.set_("x", torch.ones(4, 3))
        else:
            state.x = torch.ones(4, 3)
        assert (td["x"] == 1).all()

    def test_index(self, backend):
        _, td = backend
        state = State.from_tensordict(td)
        assert type(state[0]) is State
        assert state[0].x.shape == torch.Size([3])
        assert state[1:3].batch_size == torch.Size([2])

    def test_clone(self, backend):
        _, td = backend
        out = State.from_tensordict(td).clone()
        assert type(out) is State
        assert torch.equal(out.x, td["x"])
        out.x.zero_()
        assert td["x"].any()

    def test_stack(self, backend):
        _, td = backend
        state = State.from_tensordict(td)
        out = torch.stack([state, state], 0)
        assert type(out) is State
        assert out.batch_size == torch.Size([2, 4])

    def test_iter(self, backend):
        _, td = backend
        items = list(State.from_tensordict(td))
        assert [type(i) for i in items] == [State] * 4

    def test_update(self, backend):
        name, td = backend
        state = State.from_tensordict(td)
        new = {"y": torch.full((4, 5), 3.0)}
        assert (state.update_(new) if name in LOCKED else state.update(new)) is state
        assert (td["y"] == 3).all()


# ------------------------------------------------------------------------------------------ schema
class TestSchema:
    def test_keys_sets(self):
        assert State.__expected_keys__ == State.__required_keys__ == {"x", "y"}
        assert Extended.__required_keys__ == {"x", "y", "z"}
        assert WithDefaults.__required_keys__ == {"x"}
        assert WithDefaults.__optional_keys__ == {"y", "w"}
        assert "counter" not in WithDefaults.__expected_keys__
        assert "_private" not in WithDefaults.__expected_keys__

    def test_defaults_are_read_time_fallbacks(self):
        d = WithDefaults(x=torch.zeros(3), batch_size=[3])
        assert list(d.keys()) == ["x"]
        assert torch.equal(d.y, torch.zeros(()))
        with pytest.raises(AttributeError, match="'w' declared but not set"):
            d.w  # noqa: B018

    def test_inheritance_composes(self):
        e = Extended(**_data(), z=torch.zeros(4), batch_size=[4])
        assert isinstance(e, State)
        assert type(e[0]) is Extended
        assert e.z.shape == torch.Size([4])

    def test_nested_typed_fields_are_wrapped_when_read(self):
        o = Outer(inner=Inner(v=torch.zeros(2), batch_size=[2]), plain=TensorDict(batch_size=[2]), batch_size=[2])
        assert type(o.inner) is Inner
        assert type(o["inner"]) is TensorDict  # a key read gives the stored value
        assert type(o.plain) is TensorDict

    def test_options(self):
        class Frozen(TypedTensorDict["frozen"]):
            x: Tensor

        class Shadow(TypedTensorDict, shadow=True):
            sum: Tensor

        assert Frozen(x=torch.zeros(1), batch_size=[1]).is_locked
        assert (Shadow(sum=torch.ones(2), batch_size=[2]).sum == 1).all()
        assert TypedTensorDict["frozen"] is TypedTensorDict["frozen"]
        with pytest.raises(ValueError, match="unknown TypedTensorDict option"):
            TypedTensorDict["bogus"]


# ------------------------------------------------------------------------------------------ construction
class TestConstruction:
    def test_direct_construction_is_in_memory(self):
        s = make_state()
        assert type(s._source) is TensorDict
        assert s.x.shape == torch.Size([4, 3])

    def test_state_spreading(self):
        s = make_state()
        s2 = State(**s, batch_size=[4])
        assert type(s2) is State
        assert s2.x is s.x
        e = Extended(**s, z=torch.ones(4), batch_size=[4])
        assert set(e.keys()) == {"x", "y", "z"}

    def test_positional_mapping(self):
        s = State(_data(), batch_size=[4])
        assert s.y.shape == torch.Size([4, 5])

    def test_mutable_mapping_protocol(self):
        s = make_state()
        assert isinstance(s, MutableMapping)
        assert dict(s).keys() == {"x", "y"}
        s["extra"] = torch.zeros(4)  # extra keys are allowed after construction, as in tensordict
        assert "extra" in s
        assert len(s.keys()) == 3
        del s["extra"]
        assert s.pop("y").shape == torch.Size([4, 5])
        s.setdefault("y", torch.ones(4, 5))
        assert (s.get("y") == 1).all()
        assert next(iter(s.items()))[0] == "x"

    def test_from_tensordict_check(self):
        with pytest.raises(TypeError, match=r"State.from_tensordict\(\) missing required field\(s\): x, y"):
            State.from_tensordict(TensorDict(batch_size=[3]))
        partial = State.from_tensordict(TensorDict(batch_size=[3]), check=False)
        with pytest.raises(AttributeError, match="'x' declared but not set"):
            partial.x  # noqa: B018
        partial[0] = State(x=torch.ones(2), y=torch.ones(()), batch_size=[])  # keys appear on first write
        assert partial.x.shape == torch.Size([3, 2])

    def test_from_tensordict_rejects_other_types(self):
        with pytest.raises(TypeError, match="expects a TensorDict"):
            State.from_tensordict({"x": torch.zeros(1)})


# ------------------------------------------------------------------------------------------ the forwarded API
class TestForwarding:
    @pytest.mark.parametrize(
        "op",
        [
            lambda s: s.clone(),
            lambda s: s[0],
            lambda s: s + 1,
            lambda s: s.apply(lambda x: x),
            lambda s: s.to(torch.float64),
            lambda s: s.unbind(0)[0],
            lambda s: s.reshape(2, 2),
            lambda s: s.select("x"),
            lambda s: s.exclude("x"),
            lambda s: s.expand(2, 4),
            lambda s: s.detach(),
            lambda s: s.split(2)[1],
            lambda s: s.empty(),
            lambda s: torch.cat([s, s]),
            lambda s: s.data,
            lambda s: s.cpu(),
        ],
        ids=[
            "clone",
            "index",
            "add",
            "apply",
            "to",
            "unbind",
            "reshape",
            "select",
            "exclude",
            "expand",
            "detach",
            "split",
            "empty",
            "cat",
            "data",
            "cpu",
        ],
    )
    def test_results_keep_the_subclass(self, op):
        assert type(op(make_state())) is State

    @pytest.mark.parametrize(
        "op",
        [
            lambda s: s.sum(0),
            lambda s: s.mean(),
            lambda s: s.amax(0),
            lambda s: s.max(0).values,
            lambda s: s == s,
            lambda s: s < 1,
            lambda s: torch.sum(s, 0),
            lambda s: (s > 0).any(0),
            lambda s: (s > 0).logical_and(s > 0),
        ],
        ids=["sum", "mean", "amax", "max_values", "eq", "lt", "torch_sum", "any", "logical_and"],
    )
    def test_reductions_and_comparisons_are_plain(self, op):
        out = op(make_state())  # (as tensordict: their values do not follow the schema's types)
        assert type(out) is TensorDict
        assert set(out.keys()) == {"x", "y"}

    def test_in_place_ops_return_self(self):
        s = make_state()
        assert s.zero_() is s
        assert s.update({"x": torch.ones(4, 3)}) is s
        assert s.set("y", torch.ones(4, 5)) is s

    def test_to_tensordict_is_plain(self):
        assert type(make_state().to_tensordict()) is TensorDict
        assert type(State.from_tensordict(_lazy_backend(None)).to_tensordict()) is TensorDict

    def test_lazy_stack_of_typed_members_hands_them_out(self):
        s1, s2 = make_state(), make_state()
        ls = LazyStackedTensorDict(s1, s2, stack_dim=0)
        assert isinstance(ls[0], State)
        assert ls[0] is s1
        assert type(lazy_stack([s1, s2])[1]) is State

    def test_pickle(self):
        back = pickle.loads(pickle.dumps(make_state()))
        assert type(back) is State
        assert torch.equal(back.x, make_state().x)

    def test_vmap(self):
        out = torch.vmap(lambda s: s * 2)(make_state())
        assert type(out) is State
        assert out.batch_size == torch.Size([4])

    def test_repr(self):
        assert repr(make_state()).splitlines()[0] == "State(batch_size=[4], device=None)"

    def test_field_read_is_a_dict_lookup_for_in_memory_sources(self):
        s = make_state()
        assert vars(s) is s._source._tensordict  # tensor fields read straight from the backend's dict
        part = s[1:3]
        assert vars(part) is part._source._tensordict
        lazy = State.from_tensordict(_lazy_backend(None))
        assert vars(lazy) == {}  # other backends: the field descriptor reads through _get_str
        assert torch.equal(lazy.x, _data()["x"])

    def test_tensor_field_holding_a_non_tensor_reads_as_its_wrapper_as_tensordict(self):
        s = make_state()
        s.x = "text"
        assert type(s.x).__name__ == "NonTensorData"
        assert s.x.data == "text"
        assert s["x"] == "text"

    def test_plain_attributes_stay_out_of_the_backend(self):
        s = make_state()
        s.note = "hello"
        assert s.note == "hello"
        assert "note" not in s
        del s.note
        with pytest.raises(AttributeError, match="has no attribute 'note'"):
            _ = s.note
        with pytest.raises(AttributeError, match="has no attribute 'other'"):
            del s.other

    def test_field_writes_are_validated_and_fields_cannot_be_deleted(self):
        s = make_state()
        with pytest.raises(RuntimeError, match=batch_mismatch([4], "x", [2])):
            s.x = torch.zeros(2)
        assert s.x.shape == (4, 3)
        with pytest.raises(AttributeError, match="cannot delete field 'x' of State"):
            del s.x
        assert "x" in s

    def test_backend_keys_named_like_methods_do_not_shadow_them(self):
        td = TensorDict(_data(), sum=torch.ones(4), batch_size=[4])
        s = State.from_tensordict(td)
        assert callable(s.sum)
        assert torch.equal(s.sum()["x"], td.sum()["x"])
        s2 = make_state()
        s2.set("keys", torch.ones(4))  # added through the wrapper: the dict is no longer read
        assert callable(s2.keys)
        assert sorted(s2.keys()) == ["keys", "x", "y"]
        s3 = make_state()
        s3.update({"mean": torch.ones(4)})
        assert callable(s3.mean)
        s4 = make_state()
        s4["max", "inner"] = torch.ones(4)  # a nested key creates the top-level key "max"
        assert callable(s4.max)
        assert torch.equal(s2.x, s2["x"])


# ------------------------------------------------------------------------------------------ bad input
class TestBadInput:
    def test_missing_field(self):
        with pytest.raises(TypeError, match=r"State\(\) missing required field\(s\): y"):
            State(x=torch.zeros(4, 3), batch_size=[4])

    def test_unknown_field(self):
        with pytest.raises(TypeError, match=r"State\(\) got unexpected field\(s\): q, z"):
            State(**_data(), z=1, q=2, batch_size=[4])

    def test_leading_dims_must_match(self):
        with pytest.raises(RuntimeError, match=batch_mismatch([4], "x", [3, 3])):
            State(x=torch.zeros(3, 3), y=torch.zeros(4), batch_size=[4])
        s = make_state()
        with pytest.raises(RuntimeError, match=batch_mismatch([4], "y", [2])):
            s.y = torch.zeros(2)

    def test_frozen_assignment_names_the_field(self):
        class Frozen(TypedTensorDict["frozen"]):
            x: Tensor

        f = Frozen(x=torch.zeros(2), batch_size=[2])
        with pytest.raises(RuntimeError, match=r"cannot assign to field 'x' of Frozen.*frozen"):
            f.x = torch.ones(2)
        f.set_("x", torch.ones(2))
        assert (f.x == 1).all()

    def test_shadowing_needs_the_option(self):
        with pytest.raises(AttributeError, match=r"\['batch_size'\].*TypedTensorDict\['shadow'\]"):

            class Bad(TypedTensorDict):
                batch_size: Tensor


def test_nested_typed_tensordict_keeps_its_class_through_parent_ops():
    class Inner(TypedTensorDict):
        a: torch.Tensor

    td = TensorDict(s=Inner(a=torch.arange(3.0), batch_size=[3]), batch_size=[3])
    for out in (td[0], td[1:], td.clone(), td.reshape(3, 1), td + 1, torch.stack([td, td])):
        assert type(out.get("s")) is Inner
    assert (td + 1)["s", "a"].tolist() == [1.0, 2.0, 3.0]
