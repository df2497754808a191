"""TensorClass and @tensorclass: fields, construction, field access, forwarding, backends, bad input."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import warnings
from typing import Optional

import pytest
import torch
from _messages import batch_mismatch
from torch import Tensor

from tensorbatch import (
    LazyStackedTensorDict,
    TensorClass,
    TensorDict,
    TypedTensorDict,
    is_tensor_collection,
    is_tensorclass,
    lazy_stack,
    set_capture_non_tensor_stack,
    tensorclass,
)


class MyTC(TensorClass):
    a: Tensor
    b: Tensor


class MyTTD(TypedTensorDict):
    a: Tensor
    b: Tensor


class Sample(TensorClass):
    obs: Tensor
    label: str
    mask: Optional[Tensor] = None  # noqa: UP045  (the Optional spelling must work too)
    weight: float = 1.0
    tags: list = dataclasses.field(default_factory=list)


class Pair(TensorClass):
    x: Tensor
    y: Tensor


class Outer(TensorClass):
    inner: Pair
    extra: TensorDict
    name: str = "outer"


def make_sample(n: int = 4) -> Sample:
    return Sample(obs=torch.arange(n * 3.0).reshape(n, 3), label="hi", batch_size=[n])


def make_outer(n: int = 3) -> Outer:
    inner = Pair(x=torch.zeros(n, 2), y=torch.ones(n), batch_size=[n])
    return Outer(inner=inner, extra=TensorDict(z=torch.zeros(n, 5), batch_size=[n]), batch_size=[n])


# ------------------------------------------------------------------------------------------ the seed's table
def _data() -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(4, 3, generator=g), "b": torch.randn(4, 5, generator=g)}


def _td_backend(tmp_path):
    return TensorDict(_data(), batch_size=[4])


def _lazy_backend(tmp_path):
    data = _data()
    return lazy_stack([TensorDict(a=data["a"][i], b=data["b"][i]) for i in range(4)], 0)


def _memmap_backend(tmp_path):
    return TensorDict(_data(), batch_size=[4]).memmap_(tmp_path / "mm")


def _typed_backend(tmp_path):
    return MyTTD(**_data(), batch_size=[4])


BACKENDS = [
    pytest.param(_td_backend, id="TensorDict"),
    pytest.param(_lazy_backend, id="LazyStackedTensorDict"),
    pytest.param(_memmap_backend, id="memmap"),
    pytest.param(_typed_backend, id="TypedTensorDict"),
]
LOCKED = {"_memmap_backend"}  # memmap TensorDicts are locked: set_() and update_() write in place


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    return request.param.__name__, request.param(tmp_path)


class TestSeedTable:
    """Build, Read, Write, Index, Clone, Stack, Iter, Update: yes for every backend we have."""

    def test_build(self, backend):
        _, td = backend
        tc = MyTC.from_tensordict(td)
        assert type(tc) is MyTC
        assert tc._tensordict is td
        assert tc.batch_size == torch.Size([4])

    def test_read(self, backend):
        _, td = backend
        tc = MyTC.from_tensordict(td)
        assert torch.equal(tc.a, td["a"])
        assert tc.b.shape == torch.Size([4, 5])
        assert torch.equal(tc.get("a"), td["a"])

    def test_write_is_live(self, backend):
        name, td = backend
        tc = MyTC.from_tensordict(td)
        if name in LOCKED:
            with pytest.raises(RuntimeError, match="field 'a'"):
                tc.a = torch.ones(4, 3)
            tc.set_("a", torch.ones(4, 3))
        else:
            tc.a = torch.ones(4, 3)
        assert (td["a"] == 1).all()
        assert (tc.a == 1).all()

    def test_index(self, backend):
        _, td = backend
        tc = MyTC.from_tensordict(td)
        assert type(tc[0]) is MyTC
        assert tc[0].a.shape == torch.Size([3])
        assert tc[1:3].batch_size == torch.Size([2])
        assert torch.equal(tc[1:3].b, td["b"][1:3])

    def test_clone(self, backend):
        _, td = backend
        tc = MyTC.from_tensordict(td)
        out = tc.clone()
        assert type(out) is MyTC
        assert torch.equal(out.a, tc.a)
        out.a = torch.zeros(4, 3)
        assert not torch.equal(td["a"], out.a) or not td["a"].any()

    def test_stack(self, backend):
        _, td = backend
        tc = MyTC.from_tensordict(td)
        out = torch.stack([tc, tc], 0)
        assert type(out) is MyTC
        assert out.batch_size == torch.Size([2, 4])
        assert torch.equal(out.a[1], td["a"])

    def test_iter(self, backend):
        _, td = backend
        items = list(MyTC.from_tensordict(td))
        assert len(items) == 4
        assert all(type(x) is MyTC for x in items)
        assert torch.equal(items[2].a, td["a"][2])

    def test_update(self, backend):
        name, td = backend
        tc = MyTC.from_tensordict(td)
        new = {"a": torch.full((4, 3), 7.0)}
        assert (tc.update_(new) if name in LOCKED else tc.update(new)) is tc
        assert (td["a"] == 7).all()


# ------------------------------------------------------------------------------------------ class building
class TestFields:
    def test_dataclass_fields(self):
        names = [f.name for f in dataclasses.fields(Sample)]
        assert names == ["obs", "label", "mask", "weight", "tags"]
        with pytest.warns(DeprecationWarning, match=r"dataclasses\.fields\(cls\)"):
            assert Sample.fields() == dataclasses.fields(Sample)
        assert dataclasses.is_dataclass(Sample)

    def test_signature(self):
        import inspect

        params = inspect.signature(Sample).parameters
        assert list(params)[:5] == ["obs", "label", "mask", "weight", "tags"]
        assert params["weight"].default == 1.0
        assert params["batch_size"].kind is inspect.Parameter.KEYWORD_ONLY

    def test_defaults_and_factories(self):
        s = make_sample()
        assert s.mask is None
        assert s.weight == 1.0
        assert s.tags == []
        assert s.tags is not make_sample().tags

    def test_positional_construction(self):
        s = Sample(torch.zeros(2, 3), "lbl", batch_size=[2])
        assert s.label == "lbl"

    def test_inheritance_adds_fields(self):
        class Child(Pair):
            z: Tensor

        c = Child(x=torch.zeros(2), y=torch.zeros(2), z=torch.ones(2), batch_size=[2])
        assert [f.name for f in dataclasses.fields(Child)] == ["x", "y", "z"]
        assert type(c[0]) is Child

    def test_string_annotations_resolve(self):
        class Scores(TensorClass):
            strict: torch.Tensor | None
            loose: torch.Tensor | None

        s = Scores(strict=torch.zeros(3), loose=None, batch_size=[3])
        assert s.loose is None
        assert Scores._field_specs["strict"].tensor

    def test_empty_class(self):
        class Nothing(TensorClass):
            pass

        assert Nothing(batch_size=[3]).batch_size == torch.Size([3])

    def test_is_tensorclass(self):
        assert is_tensorclass(Sample)
        assert is_tensorclass(make_sample())
        assert not is_tensorclass(TensorDict())
        assert is_tensor_collection(make_sample())


class TestDecorator:
    def test_plain_decorator(self):
        @tensorclass
        class Point:
            xy: Tensor
            tag: str = "p"

            def norm(self):
                return self.xy.norm(dim=-1)

        p = Point(xy=torch.ones(5, 2), batch_size=[5])
        assert p.norm().shape == torch.Size([5])
        assert p.tag == "p"
        assert isinstance(p, TensorClass)
        assert type(p[0]) is Point

    def test_options(self):
        @tensorclass(frozen=True)
        class Frozen:
            x: Tensor

        f = Frozen(x=torch.zeros(2), batch_size=[2])
        assert f.is_locked
        with pytest.raises(dataclasses.FrozenInstanceError, match="'x'"):
            f.x = torch.ones(2)

    def test_zero_argument_super_keeps_working(self):
        @tensorclass
        class WithSuper:
            x: Tensor

            def __repr__(self):
                return "custom:" + super().__repr__().split("(")[0]

        assert repr(WithSuper(x=torch.zeros(1), batch_size=[1])) == "custom:WithSuper"

    def test_base_class_options(self):
        class A(TensorClass["autocast"]):
            x: Tensor

        class B(TensorClass, nocast=True):
            x: Tensor

        assert A._autocast
        assert not B._autocast
        assert B._nocast
        assert TensorClass["autocast"] is TensorClass["autocast"]
        with pytest.raises(ValueError, match="unknown TensorClass option"):
            TensorClass["fast"]
        with pytest.raises(ValueError, match="exclude each other"):

            class C(TensorClass, autocast=True, nocast=True):
                x: Tensor


class TestCasting:
    def test_number_fields_are_0d_tensors_in_an_empty_batch_as_tensordict_015(self):
        class A(TensorClass):
            x: Tensor
            n: int
            f: float
            s: str

        with pytest.warns(FutureWarning, match="field 'n' of A is annotated int .* nocast option"):
            a = A(x=1, n=2, f=1.0, s="k", batch_size=[])
        assert isinstance(a.x, Tensor)
        assert type(a.n) is Tensor and a.n.dtype == torch.int64 and a.n.item() == 2
        assert a.f.dtype == torch.get_default_dtype()
        assert type(a.s) is str
        with pytest.warns(FutureWarning, match="annotated int"):
            a.n = 5
        assert a.n.item() == 5
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b = A(x=torch.zeros(3), n=2, f=0.5, s="k", batch_size=[3])  # a number fits no batch dim: kept
            assert type(b.n) is int and type(b.f) is float
            assert torch.equal(A(x=torch.zeros(2), n=[1, 2], f=1.5, s="k", batch_size=[2]).n, torch.tensor([1, 2]))
        with pytest.warns(FutureWarning) as record:
            c = A(x=0, n=1.5, f=0.5, s="k")
        assert c.n.dtype == torch.get_default_dtype()  # a tensor, and no warning for 'n': not the annotated kind
        assert [str(w.message)[:9] for w in record] == ["field 'f'"]

    def test_nocast_keeps_python_values_of_number_fields(self):
        class A(TensorClass["nocast"]):
            n: int
            f: float

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            a = A(n=2, f=1.0, batch_size=[])
        assert type(a.n) is int and a.n == 2 and type(a.f) is float

    def test_autocast(self):
        class A(TensorClass["autocast"]):
            x: Tensor
            n: int
            f: float
            s: str

        a = A(x=[1, 2], n=torch.tensor(2), f=3, s=4, batch_size=[2])
        assert torch.equal(a.x, torch.tensor([1, 2]))
        assert (type(a.n), type(a.f), type(a.s)) == (int, float, str)
        a.n = "7"
        assert a.n == 7

    def test_nocast_keeps_numbers_as_python_values(self):
        class A(TensorClass["nocast"]):
            x: Tensor
            n: int

        a = A(x=1, n=2, batch_size=[])
        assert type(a.x) is int
        assert type(a.n) is int

    def test_tensor_given_to_a_non_tensor_field_is_stored(self):
        s = Sample(obs=torch.zeros(2, 3), label=torch.ones(2), batch_size=[2])
        assert isinstance(s.label, Tensor)


# ------------------------------------------------------------------------------------------ field access
class TestFieldAccess:
    def test_tensor_fields_read_from_the_tensordict_dict(self):
        s = make_sample()
        assert s.__dict__ is s._tensordict._tensordict  # the fast path: no Python call on read
        assert s.obs is s._tensordict["obs"]

    def test_fast_path_survives_in_place_operations(self):
        s = make_sample()
        s.zero_()
        s.update({"obs": torch.ones(4, 3)})
        s.apply_(lambda x: x * 2)
        s.lock_().unlock_()
        assert s.__dict__ is s._tensordict._tensordict
        assert (s.obs == 2).all()

    def test_non_tensor_field(self):
        s = make_sample()
        assert s.label == "hi"
        s.label = "bye"
        assert s._tensordict["label"] == "bye"

    def test_none_means_absent(self):
        s = make_sample()
        s.mask = torch.ones(4, dtype=torch.bool)
        assert "mask" in s._tensordict
        s.mask = None
        assert "mask" not in s._tensordict
        assert s.mask is None
        del s.label
        assert s.label is None

    def test_nested_tensorclass_field(self):
        o = make_outer()
        assert type(o.inner) is Pair
        assert type(o._tensordict["inner"]) is TensorDict  # stored as its TensorDict, read back as Pair
        assert type(o[0].inner) is Pair
        assert type(o.extra) is TensorDict
        o.inner.x = torch.full((3, 2), 4.0)  # the re-wrapped Pair writes through
        assert (o._tensordict["inner", "x"] == 4).all()

    def test_get_and_set_with_nested_keys(self):
        o = make_outer()
        assert torch.equal(o.get(("inner", "y")), torch.ones(3))
        assert o.get(("extra", "z")).shape == torch.Size([3, 5])
        o.set(("inner", "y"), torch.zeros(3))
        assert not o.inner.y.any()
        o.set(("extra", "w"), torch.ones(3))
        assert o.extra["w"].shape == torch.Size([3])
        assert o.get("name") == "outer"
        assert o.get("missing_field_of_backend", "dflt") == "dflt"

    def test_unknown_attribute(self):
        s = make_sample()
        with pytest.raises(AttributeError, match="zzz"):
            s.zzz  # noqa: B018
        with pytest.raises(AttributeError, match="Cannot set the attribute 'zzz'"):
            s.zzz = 1
        with pytest.raises(AttributeError, match="Cannot set the attribute 'zzz': Sample has no such field"):
            s.set("zzz", torch.zeros(4))

    def test_string_index_is_refused(self):
        s = make_sample()
        with pytest.raises(ValueError, match="use the attribute"):
            s["obs"]
        with pytest.raises(ValueError, match="use the attribute"):
            s["obs"] = torch.zeros(4, 3)

    def test_class_attribute_access(self):
        assert Sample.weight == 1.0
        with pytest.raises(AttributeError):
            Sample.obs  # noqa: B018


# ------------------------------------------------------------------------------------------ from/to TensorDict
class TestFromTensorDict:
    def test_missing_fields_read_as_none(self):
        tc = Sample.from_tensordict(TensorDict(obs=torch.zeros(2, 3), batch_size=[2]))
        assert tc.label is None
        assert tc.mask is None

    def test_non_tensordict(self):
        td = TensorDict(obs=torch.zeros(2, 3), batch_size=[2])
        tc = Sample.from_tensordict(td, {"label": "x", "mask": torch.ones(2)})
        assert tc.label == "x"
        assert "label" not in td  # kept beside the TensorDict, as tensordict does
        assert "mask" in td
        assert tc[0].label == "x"

    def test_safe(self):
        with pytest.raises(RuntimeError, match="Expected a TensorDictBase"):
            Sample.from_tensordict({"obs": torch.zeros(2, 3)})
        tc = Sample.from_tensordict({"obs": torch.zeros(2, 3)}, safe=False)
        assert tc.obs.shape == torch.Size([2, 3])
        with pytest.raises(ValueError, match=r"\['zz'\]"):
            Sample.from_tensordict(TensorDict(obs=torch.zeros(2, 3), zz=torch.zeros(2), batch_size=[2]))

    def test_check(self):
        empty = TensorDict(batch_size=[5])
        assert Sample.from_tensordict(empty).batch_size == torch.Size([5])
        with pytest.raises(TypeError, match=r"missing required field.*label, obs"):
            Sample.from_tensordict(empty, check=True)

    def test_to_tensordict_copies(self):
        s = make_sample()
        td = s.to_tensordict()
        assert type(td) is TensorDict
        assert td["label"] == "hi"
        td["obs"].zero_()
        assert s.obs.any()

    def test_to_tensordict_of_a_lazy_backend_is_dense(self):
        tc = MyTC.from_tensordict(_lazy_backend(None))
        assert type(tc.to_tensordict()) is TensorDict

    def test_composition_with_typed(self):
        ttd = MyTTD(**_data(), batch_size=[4])
        tc = MyTC.from_tensordict(ttd)
        back = MyTTD.from_tensordict(tc._tensordict)
        assert back._source is ttd._source  # one level of wrapping over the same storage
        assert type(tc[0]) is MyTC
        assert type(tc._tensordict[0]) is MyTTD
        tc.a = torch.zeros(4, 3)
        assert not back.a.any()


# ------------------------------------------------------------------------------------------ the forwarded API
class TestForwarding:
    @pytest.mark.parametrize(
        "op",
        [
            lambda t: t.clone(),
            lambda t: t[1:3],
            lambda t: t.reshape(2, 2),
            lambda t: t.unsqueeze(0),
            lambda t: t + 1,
            lambda t: t * t,
            lambda t: t.apply(lambda x: x * 2),
            lambda t: t.to(torch.float64),
            lambda t: t.detach(),
            lambda t: t.sum(0),
            lambda t: t == t,
            lambda t: t.expand(2, 4),
            lambda t: t.select("obs"),
            lambda t: t.exclude("obs"),
            lambda t: t.contiguous(),
            lambda t: t.cpu(),
            lambda t: t.new_zeros(2),
            lambda t: copy.copy(t),
            lambda t: copy.deepcopy(t),
            lambda t: torch.cat([t, t]),
            lambda t: torch.stack([t, t], 1),
        ],
        ids=[
            "clone",
            "slice",
            "reshape",
            "unsqueeze",
            "add",
            "mul",
            "apply",
            "to",
            "detach",
            "sum",
            "eq",
            "expand",
            "select",
            "exclude",
            "contiguous",
            "cpu",
            "new_zeros",
            "copy",
            "deepcopy",
            "cat",
            "stack",
        ],
    )
    def test_results_are_wrapped(self, op):
        s = make_sample()
        out = op(s)
        assert type(out) is Sample

    def test_non_tensor_fields_follow_batch_ops(self):
        s = make_sample()
        assert s[0].label == "hi"
        assert torch.stack([s, s]).label == [["hi"] * 4] * 2  # a stack of the values, as tensordict
        with set_capture_non_tensor_stack(True):
            assert torch.stack([s, s]).label == "hi"  # (the option: equal values stay one value)
        assert s.reshape(2, 2).label == "hi"

    def test_in_place_ops_return_self(self):
        s = make_sample()
        assert s.zero_() is s
        assert s.apply_(lambda x: x + 1) is s
        s += 1
        assert type(s) is Sample
        assert (s.obs == 2).all()

    def test_unbind_split_chunk(self):
        s = make_sample()
        assert [type(x) for x in s.unbind(0)] == [Sample] * 4
        assert [x.batch_size[0] for x in s.split(3)] == [3, 1]
        assert all(type(x) is Sample for x in torch.unbind(s))
        assert all(type(x) is Sample for x in s.chunk(2))

    def test_setitem_with_an_index(self):
        s = make_sample()
        item = s[3].clone()
        item.obs = torch.full((3,), -1.0)
        item.label = "hi"
        s[0] = item
        assert (s.obs[0] == -1).all() and s[0].label == "hi"
        s[1:3] = s[2:4].clone()
        assert torch.equal(s.obs[1], make_sample().obs[2])

    def test_keys_and_queries(self):
        s = make_sample()
        assert set(s.keys()) == {"obs", "label", "weight", "tags"}  # defaults are stored; None is absence
        assert s.numel() == 4
        assert len(s) == 4
        assert s.ndim == 1
        assert s.shape == torch.Size([4])
        assert "obs" in s

    def test_state_dict_round_trip(self):
        s = make_sample()
        sd = s.state_dict()
        assert set(sd) == {"obs"}
        other = make_sample()
        other.zero_()
        other.load_state_dict(sd)
        assert torch.equal(other.obs, s.obs)

    def test_pickle(self):
        s = make_sample()
        s2 = Sample.from_tensordict(s._tensordict.exclude("tags"), {"tags": ["x"]})
        back = pickle.loads(pickle.dumps(s2))
        assert type(back) is Sample
        assert back.label == "hi"
        assert back.tags == ["x"]
        assert torch.equal(back.obs, s.obs)
        assert back.__dict__ is back._tensordict._tensordict

    def test_lazy_stack_and_maybe_dense_stack(self):
        s = make_sample()
        ls = Sample.lazy_stack([s, s])
        assert type(ls) is Sample
        assert isinstance(ls._tensordict, LazyStackedTensorDict)
        assert ls[1].label == "hi"
        assert type(Sample.maybe_dense_stack([s, s])) is Sample

    def test_repr(self):
        text = repr(make_outer())
        assert text.splitlines()[0] == "Outer(batch_size=[3], device=None)"
        assert "inner: Pair(batch_size=[3])" in text
        assert "name: 'outer'" in text

    def test_vmap(self):
        p = Pair(x=torch.ones(3, 2), y=torch.ones(3), batch_size=[3])
        out = torch.vmap(lambda t: t * 2)(p)
        assert type(out) is Pair
        assert out.batch_size == torch.Size([3])
        assert (out.x == 2).all()

    def test_stored_in_a_tensordict(self):
        p = Pair(x=torch.ones(3, 2), y=torch.ones(3), batch_size=[3])
        td = TensorDict(p=p, batch_size=[3])
        assert td["p"] is p
        assert td["p", "x"].shape == torch.Size([3, 2])
        assert td[0]["p", "y"] == 1
        assert type(td.clone()["p"]) is Pair  # nested wrappers are rebuilt as themselves (as tensordict)
        assert type(td[0]["p"]) is Pair
        assert type(torch.stack([td, td])["p"]) is Pair
        assert type(td.apply(lambda v: v + 1)["p"]) is Pair
        assert td.reshape(3, 1)["p"].batch_size == torch.Size([3, 1])

    def test_gradients(self):
        p = Pair(x=torch.ones(2, requires_grad=True), y=torch.ones(2), batch_size=[2])
        (p.x * 3).sum().backward()
        assert torch.equal(p.x.grad, torch.full((2,), 3.0))
        assert type(p.detach()) is Pair


# ------------------------------------------------------------------------------------------ bad input
class TestBadInput:
    def test_leading_dims_must_match_batch_size(self):
        with pytest.raises(RuntimeError, match=batch_mismatch([4], "obs", [3, 3])):
            Sample(obs=torch.zeros(3, 3), label="x", batch_size=[4])
        s = make_sample()
        with pytest.raises(RuntimeError, match=batch_mismatch([4], "obs", [5])):
            s.obs = torch.zeros(5)

    def test_unknown_field_in_constructor(self):
        with pytest.raises(TypeError, match="unexpected keyword argument 'zz'"):
            Sample(obs=torch.zeros(2, 3), label="x", zz=1, batch_size=[2])

    def test_missing_field_in_constructor(self):
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'label'"):
            Sample(obs=torch.zeros(2, 3), batch_size=[2])

    def test_wrong_type_for_a_tensor_field(self):
        with pytest.raises(TypeError, match="field 'obs' of Sample is annotated Tensor but got a str"):
            Sample(obs="abc", label="x", batch_size=[])
        s = make_sample()
        with pytest.raises(TypeError, match="field 'obs'"):
            s.obs = object()

    def test_wrong_type_when_casting(self):
        class Strict(TensorClass["autocast"]):
            x: Tensor
            n: int

        with pytest.raises(TypeError, match="field 'x' of Strict is annotated Tensor"):
            Strict(x="abc", n=1, batch_size=[])
        s = Strict(x=torch.zeros(()), n=1, batch_size=[])
        with pytest.raises(TypeError, match="field 'n' of Strict is annotated int"):
            s.n = "not a number"

    def test_frozen_assignment(self):
        class Frozen(TensorClass["frozen"]):
            x: Tensor

        f = Frozen(x=torch.zeros(2), batch_size=[2])
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
            f.x = torch.ones(2)
        with pytest.raises(dataclasses.FrozenInstanceError, match="'x'"):
            f.set("x", torch.ones(2))
        f.set_("x", torch.ones(2))  # in-place writes stay allowed, as for a locked TensorDict
        assert (f.x == 1).all()

    def test_shadowing_a_member_needs_the_option(self):
        with pytest.raises(AttributeError, match=r"\['sum'\].*shadow=True"):

            class Bad(TensorClass):
                sum: Tensor

        class Ok(TensorClass["shadow"]):
            sum: Tensor

        assert (Ok(sum=torch.ones(2), batch_size=[2]).sum == 1).all()

    def test_reserved_names(self):
        with pytest.raises(AttributeError, match="reserved"):

            class Bad(TensorClass["shadow"]):
                batch_size: Tensor

    def test_non_default_after_default(self):
        with pytest.raises(TypeError, match="non-default field 'y' follows field 'x'"):

            class Bad(TensorClass):
                x: Tensor = None  # type: ignore[assignment]
                y: Tensor

    def test_locked_backend_names_the_field(self, tmp_path):
        tc = MyTC.from_tensordict(_memmap_backend(tmp_path))
        with pytest.raises(RuntimeError, match=r"cannot assign to field 'b'.*set_"):
            tc.b = torch.zeros(4, 5)


# ------------------------------------------------------------------------------------------ fields only
class TestFieldsOnly:
    """Writes that would add keys that are not fields are refused, as by tensordict 0.15.3's tensorclass."""

    def test_update_with_a_dict_of_non_fields_raises_and_writes_nothing(self):
        p = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3])
        with pytest.raises(
            ValueError,
            match=r"^Pair.update\(\): key\(s\) \['bad', 'worse'\] are not fields of Pair "
            r"\(its fields are \['x', 'y'\]\)",
        ):
            p.update({"x": torch.full((3,), 5.0), "bad": torch.zeros(3), "worse": torch.zeros(3)})
        assert torch.equal(p.x, torch.zeros(3))
        assert sorted(p._tensordict.keys()) == ["x", "y"]

    def test_update_with_a_nested_key_under_a_non_field_raises(self):
        o = make_outer()
        with pytest.raises(ValueError, match=r"key\(s\) \['bad'\] are not fields of Outer"):
            o.update({("bad", "z"): torch.zeros(3)})
        assert "bad" not in o._tensordict

    def test_update_with_fields_and_nested_keys_under_fields(self):
        o = make_outer()
        out = o.update({"inner": {"x": torch.ones(3, 2)}, ("extra", "w"): torch.full((3,), 2.0)})
        assert out is o
        assert type(o.inner) is Pair
        assert torch.equal(o.inner.x, torch.ones(3, 2))
        assert torch.equal(o.extra["w"], torch.full((3,), 2.0))
        assert torch.equal(o.inner.y, torch.ones(3))

    def test_update_with_a_tensorclass_of_the_same_class(self):
        p = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3])
        assert p.update(Pair(x=torch.full((3,), 4.0), y=torch.zeros(3), batch_size=[3])) is p
        assert torch.equal(p.x, torch.full((3,), 4.0))

    def test_update_with_a_tensordict_of_non_fields_writes_with_a_deprecation_warning(self):
        p = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3])
        with pytest.warns(DeprecationWarning, match=r"Pair.update\(\) writes key\(s\) \['z'\] that are not fields"):
            p.update(TensorDict(x=torch.full((3,), 2.0), z=torch.ones(3), batch_size=[3]))
        assert torch.equal(p.x, torch.full((3,), 2.0))
        assert torch.equal(p.get("z"), torch.ones(3))  # written, as tensordict 0.15.3 does

    def test_update_of_a_locked_instance_reports_the_lock(self):
        p = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3]).lock_()
        with pytest.raises(RuntimeError, match="locked"):
            p.update({"bad": torch.zeros(3)})

    def test_flatten_keys_of_nested_fields_raises(self):
        o = make_outer()
        with pytest.raises(
            ValueError,
            match=r"^Outer.flatten_keys\(separator='/'\): key\(s\) \['extra/z', 'inner/x', "
            r"'inner/y'\] are not fields of Outer .*flatten its to_tensordict\(\)",
        ):
            o.flatten_keys("/")
        with pytest.raises(ValueError, match=r"key\(s\) \['extra.z', 'inner.x', 'inner.y'\] are not fields of Outer"):
            o.flatten_keys(inplace=True)
        assert sorted(o._tensordict.keys()) == ["extra", "inner", "name"]
        assert type(o.inner) is Pair

    def test_flatten_keys_without_nested_fields(self):
        p = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3])
        flat = p.flatten_keys()
        assert type(flat) is Pair
        assert flat is not p
        assert torch.equal(flat.y, torch.ones(3))
        assert p.flatten_keys(inplace=True) is p

    def test_flatten_keys_in_place_of_a_locked_instance_reports_the_lock(self):
        o = make_outer().lock_()
        with pytest.raises(RuntimeError, match="locked"):
            o.flatten_keys(inplace=True)

    def test_flatten_keys_of_to_tensordict(self):
        flat = make_outer().to_tensordict().flatten_keys()
        assert type(flat) is TensorDict
        assert sorted(flat.keys()) == ["extra.z", "inner.x", "inner.y", "name"]


def test_index_with_tuples_of_ints_is_a_batch_index():
    p = Pair(x=torch.arange(12.0).reshape(3, 4), y=torch.zeros(3, 4), batch_size=[3, 4])
    out = p[(0, 2), (1, 3)]
    assert type(out) is Pair
    assert torch.equal(out.x, torch.tensor([1.0, 11.0]))
    p[(0, 2), (1, 3)] = Pair(x=torch.full((2,), -1.0), y=torch.ones(2), batch_size=[2])
    assert p.x[0, 1] == -1.0
    assert p.x[2, 3] == -1.0


def test_fromkeys_builds_the_class_and_refuses_keys_that_are_not_fields() -> None:
    pair = Pair.fromkeys(["x", "y"], 3)
    assert type(pair) is Pair and pair.x.tolist() == 3 and pair.y.dtype == torch.int64
    with pytest.raises(
        ValueError,
        match=r"Pair.fromkeys\(\): key\(s\) \['zz'\] are not fields of Pair "
        r"\(its fields are \['x', 'y'\]\)",
    ):
        Pair.fromkeys(["x", "zz"])


def test_from_dict_returns_the_class():
    class Point(TensorClass):
        x: Tensor
        label: str = "p"

    with pytest.warns(FutureWarning, match="label"):  # a missing field with a default is None (as tensordict 0.15)
        p = Point.from_dict({"x": torch.zeros(3, 2)}, batch_size=[3])
    assert type(p) is Point and p.batch_size == (3,) and p.label is None
    q = Point.from_dict({"x": torch.zeros(3, 2), "label": "q"}, auto_batch_size=True)
    assert q.batch_size == (3, 2) and q.label == "q"
    with pytest.raises(ValueError, match="zz"):
        Point.from_dict({"x": torch.zeros(3), "label": "q", "zz": torch.zeros(3)})
