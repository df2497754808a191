"""Differential tests, package-level names of issue 16 item 3: options, predicates, helpers, converters.

Each test runs the same calls on ``tb`` (tensorbatch) and ``ref`` (tensordict 0.15.3) and compares
what users observe. Deliberate differences are strict xfails through ``DIFFERENCES`` (conftest.py).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _both(tb: Any, ref: Any, fn: Any) -> tuple[Any, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(tb), fn(ref)


# ------------------------------------------------------------------------------------------ options
def test_get_defaults_to_none_off_raises_key_error(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(a=torch.zeros(2), batch_size=[2])
        m.set_get_defaults_to_none(False)
        try:
            out = [m.get_defaults_to_none()]
            for call in (lambda: td.get("b"), lambda: td.get_at("b", 0), lambda: td.get(("x", "y"))):
                try:
                    out.append(call())
                except KeyError:
                    out.append("KeyError")
            out += [td.get("b", None), td.get("b", 1), td.get_at("a", 0).item()]
        finally:
            m.set_get_defaults_to_none(True)
        return [*out, m.get_defaults_to_none(), td.get("b")]

    mine, theirs = _both(tb, ref, run)
    assert mine == theirs == [False, "KeyError", "KeyError", "KeyError", None, 1, 0.0, True, None]


def test_get_defaults_to_none_setters_warn(tb: Any, ref: Any) -> None:
    for m in (tb, ref):
        with pytest.warns(DeprecationWarning, match=r"set_get_defaults_to_none\(\) is deprecated"):
            m.set_get_defaults_to_none(True)
        with pytest.warns(DeprecationWarning, match=r"get_defaults_to_none\(\) is deprecated"):
            m.get_defaults_to_none()


def test_list_to_stack_off_stores_the_list_as_one_value(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        with pytest.warns(DeprecationWarning, match=r"set_list_to_stack\(False\) is deprecated"):
            off = m.set_list_to_stack(False)
        with off:
            td = m.TensorDict(batch_size=[2])
            td["x"] = ["a", "b"]
            td["n"] = [1, 2]
            inside = m.list_to_stack()
        td["s"] = ["a", "b"]
        x = td.get("x")
        return (
            inside,
            m.list_to_stack(),
            type(x).__name__,
            list(td["x"]),
            list(x.batch_size),
            type(td.get("n")).__name__,
            type(td.get("s")).__name__,
            list(td["s"]),
        )

    mine, theirs = run(tb), run(ref)
    assert mine == theirs == (False, True, "NonTensorData", ["a", "b"], [2], "Tensor", "NonTensorStack", ["a", "b"])


def test_capture_non_tensor_stack_off_gives_stacks(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        with m.set_capture_non_tensor_stack(False):
            flag = m.capture_non_tensor_stack()
            plain = torch.stack([m.NonTensorData("a"), m.NonTensorData("a")])
            nested = torch.stack([m.TensorDict(s="a"), m.TensorDict(s="a")]).get("s")
        return flag, type(plain).__name__, plain.tolist(), type(nested).__name__, nested.tolist()

    assert run(tb) == run(ref) == (False, "NonTensorStack", ["a", "a"], "NonTensorStack", ["a", "a"])


def test_capture_non_tensor_stack_default(tb: Any, ref: Any) -> None:
    assert tb.capture_non_tensor_stack() == ref.capture_non_tensor_stack() is False


def test_lazy_legacy_false(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        with m.set_lazy_legacy(False):
            inside = m.lazy_legacy()
        td = m.TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
        return inside, m.lazy_legacy(), type(td.unsqueeze(0)).__name__, type(torch.stack([td, td])).__name__

    assert run(tb) == run(ref) == (False, False, "TensorDict", "TensorDict")


def test_lazy_legacy_true_is_refused(tb: Any, ref: Any) -> None:
    # deliberate difference (strict xfail): tensordict warns and turns the legacy mode on
    for m in (tb, ref):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with m.set_lazy_legacy(True):
                pass


def test_printoptions_values_and_errors(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        out = [m.get_printoptions()]
        with m.set_printoptions(show_grad=True):
            out.append(m.get_printoptions())
        with m.set_printoptions(compact=True, plain=True, verbose=False):
            out.append(m.get_printoptions())
        m.set_printoptions(sort_keys=None).set()
        out.append(m.get_printoptions()["sort_keys"])
        m.set_printoptions(sort_keys="alphabetical").set()
        with pytest.raises(TypeError):
            m.set_printoptions(nope=1)
        return [*out, m.get_printoptions()]

    assert run(tb) == run(ref)


def test_repr_hides_what_the_options_hide(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(a=torch.zeros(3, dtype=torch.int16), batch_size=[3])
        with m.set_printoptions(compact=False, show_dtype=False, show_field_device=False):
            text = repr(td)
        with m.set_printoptions(compact=False, show_grad=True, show_storage_size=True):
            detailed = repr(td)
        return (
            "int16" in text,
            "device=cpu" in text,
            "shape=" in text,
            "requires_grad=False" in detailed,
            "storage_size=6" in detailed,
            "is_shared=False" in detailed,
        )

    assert run(tb) == run(ref) == (False, False, True, True, True, True)


# ------------------------------------------------------------------------------------------ predicates
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.complex64, torch.int64, torch.uint8, torch.bool]
)
def test_dtype_predicates(tb: Any, ref: Any, dtype: torch.dtype) -> None:
    t = torch.zeros(2, dtype=dtype)
    for name in ("is_bool", "is_floating", "is_integer", "is_inexact"):
        assert getattr(tb, name)(t) == getattr(ref, name)(t), name
        assert getattr(tb, name)("key", t) == getattr(ref, name)("key", t), name


def test_predicates_in_apply(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(x=torch.zeros(3), i=torch.zeros(3, dtype=torch.long), batch_size=[3])
        out = td.apply(lambda v: v.double() if m.is_floating(v) else v)
        return out["x"].dtype, out["i"].dtype

    assert run(tb) == run(ref) == (torch.float64, torch.int64)


def _classes(m: Any) -> list[type]:
    return [
        torch.Tensor,
        torch.nn.Parameter,
        m.MemoryMappedTensor,
        int,
        str,
        m.NonTensorData,
        m.NonTensorStack,
        m.TensorDict,
        m.LazyStackedTensorDict,
        m.TensorClass,
    ]


def test_is_leaf_predicates(tb: Any, ref: Any) -> None:
    for fn in ("default_is_leaf", "is_leaf_nontensor"):
        mine = [getattr(tb, fn)(c) for c in _classes(tb)]
        theirs = [getattr(ref, fn)(c) for c in _classes(ref)]
        assert mine == theirs, fn

    def run(m: Any) -> Any:
        td = m.TensorDict(a={}, b="a string!", c=torch.zeros(()), n={"d": torch.zeros(()), "e": "x"})
        return (
            sorted(map(str, td.keys(True, True, is_leaf=m.default_is_leaf))),
            sorted(map(str, td.keys(True, True, is_leaf=m.is_leaf_nontensor))),
        )

    assert run(tb) == run(ref)


# ------------------------------------------------------------------------------------------ utils
def test_isin_and_remove_duplicates(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(x=torch.tensor([[1, 2], [3, 4], [1, 2], [5, 6]]), y=torch.arange(4), batch_size=[4])
        reference = m.TensorDict(x=torch.tensor([[1, 2], [5, 6]]), batch_size=[2])
        found = m.utils.isin(td, reference, key="x")
        out, idx = m.utils.remove_duplicates(td, key="x", return_indices=True)
        td2 = m.TensorDict(x=torch.tensor([[7, 1, 7], [3, 3, 1]]), batch_size=[2, 3])
        along = m.utils.remove_duplicates(td2, key="x", dim=1)
        errors = []
        for call in (
            lambda: m.utils.isin(td, reference, key="z"),
            lambda: m.utils.isin(td, td2, key="x"),
            lambda: m.utils.remove_duplicates(td, key="x", dim=1),
            lambda: m.utils.remove_duplicates(td, key="nope"),
        ):
            try:
                call()
            except Exception as err:
                errors.append(type(err).__name__)
        return (
            found.tolist(),
            out["x"].tolist(),
            out["y"].tolist(),
            idx.tolist(),
            along["x"].tolist(),
            list(along.batch_size),
            errors,
        )

    assert run(tb) == run(ref)


def test_deprecated_key_and_index_helpers(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        with pytest.warns(DeprecationWarning, match="unravel_keys is deprecated"):
            keys = (m.utils.unravel_keys("a", ("b", ("c",))), m.utils.unravel_keys(("a",)))
        with pytest.warns(DeprecationWarning, match="convert_ellipsis_to_idx is deprecated"):
            idx = [
                m.utils.convert_ellipsis_to_idx(i, [2, 3, 4, 5])
                for i in ((..., 0), ..., (0, ..., None, 1), 3, (slice(1), ...))
            ]
        return keys, idx, m.KEY_SEPARATOR

    assert run(tb) == run(ref)


def test_print_directory_tree(tb: Any, ref: Any, tmp_path: Any) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.bin").write_bytes(b"x" * 1500)
    (tmp_path / "d" / "sub" / "b.txt").write_text("hi")
    mine = tb.utils.print_directory_tree(tmp_path / "d")
    theirs = ref.utils.print_directory_tree(str(tmp_path / "d"))
    assert mine == theirs
    assert mine.splitlines()[0] == "Directory size: 1.47 KB"
    assert tb.utils.print_directory_tree(
        str(tmp_path / "d"), indent="> ", display_metadata=False
    ) == ref.utils.print_directory_tree(str(tmp_path / "d"), indent="> ", display_metadata=False)


# ------------------------------------------------------------------------------------------ converters
def test_from_consolidated(tb: Any, ref: Any, tmp_path: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(a=torch.arange(3.0), b={"c": torch.ones(3, 2)}, batch_size=[3])
        td.consolidate(filename=str(tmp_path / f"{m.__name__}.bin"))
        out = m.from_consolidated(str(tmp_path / f"{m.__name__}.bin"))
        return type(out).__name__, out["a"].tolist(), out["b", "c"].shape, list(out.batch_size)

    assert run(tb) == run(ref)


@dataclasses.dataclass
class _Sample:
    obs: torch.Tensor
    reward: torch.Tensor
    name: str = "s"


def test_from_dataclass(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        cls = m.from_dataclass(_Sample)
        inst = m.from_dataclass(_Sample(torch.ones(4, 2), torch.zeros(4)), auto_batch_size=True)
        made = cls(obs=torch.zeros(2, 1), reward=torch.zeros(2), batch_size=[2])
        with pytest.raises(TypeError):
            m.from_dataclass(3)
        return (
            cls.__name__,
            m.is_tensorclass(cls),
            m.from_dataclass(cls) is cls,
            type(inst).__name__,
            list(inst.batch_size),
            inst.obs.tolist(),
            inst.name,
            made.name,
            list(made[0].batch_size),
        )

    assert run(tb) == run(ref)


def _in_place_class(m: Any) -> tuple[type, Any]:
    @dataclasses.dataclass
    class Step:
        obs: torch.Tensor
        reward: torch.Tensor = None
        name: str = "s"

        def doubled(self) -> torch.Tensor:
            return self.obs * 2

    return Step, m.from_dataclass(Step, inplace=True)


def test_from_dataclass_inplace_changes_the_class(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        cls, out = _in_place_class(m)
        made = cls(obs=torch.arange(6.0).reshape(3, 2), reward=torch.ones(3), batch_size=[3])
        stacked = torch.stack([made, made])
        with pytest.raises(RuntimeError) as info:
            made.obs = torch.zeros(4)
        return (
            out is cls,
            cls.__bases__ == (object,),
            cls.__name__,
            m.is_tensorclass(cls),
            m.is_tensorclass(made),
            isinstance(made, cls),
            type(made).__name__,
            m.from_dataclass(cls, inplace=True) is cls,
            [f.name for f in dataclasses.fields(cls)],
            isinstance(cls.from_tensordict(m.TensorDict(obs=torch.zeros(2, 1), batch_size=[2])), cls),
            (made.name, list(made.batch_size)),
            made.doubled().tolist(),
            (type(made[1:]).__name__, isinstance(made[1:], cls), made[1:].obs.tolist()),
            (isinstance(stacked, cls), list(stacked.batch_size), stacked[1, 2].obs.tolist()),
            {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in made.to_dict().items()},
            str(info.value),
            cls(torch.zeros(2), batch_size=[2]).name,
        )

    assert run(tb) == run(ref)


def test_from_dataclass_inplace_subclasses_are_tensorclasses(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        cls, _ = _in_place_class(m)

        class Sub(cls):
            def tripled(self) -> torch.Tensor:
                return self.obs * 3

        made = Sub(obs=torch.ones(3, 2), batch_size=[3])
        return (
            m.is_tensorclass(Sub),
            (isinstance(made, Sub), isinstance(made, cls), type(made).__name__),
            (made.tripled().tolist(), made.doubled().tolist(), made.name),
            (type(made[1:]).__name__, isinstance(torch.stack([made, made]), Sub)),
        )

    assert run(tb) == run(ref)


def test_from_dataclass_inplace_instances_are_of_the_class(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        cls, _ = _in_place_class(m)
        return type(cls(obs=torch.zeros(2), batch_size=[2])) is cls

    assert run(tb) == run(ref)


def test_from_dataclass_inplace_keeps_the_options(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        @dataclasses.dataclass
        class Frozen:
            x: torch.Tensor

        @dataclasses.dataclass(frozen=True)
        class FrozenDataclass:
            x: torch.Tensor

        out = []
        for cls, options in ((Frozen, {"frozen": True}), (FrozenDataclass, {})):
            m.from_dataclass(cls, inplace=True, **options)
            item = cls(x=torch.zeros(2), batch_size=[2])
            with pytest.raises(dataclasses.FrozenInstanceError) as info:
                item.x = torch.ones(2)
            out.append((item.x.tolist(), item.is_locked, str(info.value)))
        return out

    assert run(tb) == run(ref)


def test_parse_tensor_dict_string_round_trips_each_librarys_repr(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(
            obs=torch.ones(3, 4),
            next={"done": torch.ones(3, 1, dtype=torch.bool)},
            i=torch.ones(3, dtype=torch.int32),
            batch_size=[3],
        )
        out = m.parse_tensor_dict_string(repr(td))
        return (
            sorted(map(str, out.keys(True, True))),
            list(out.batch_size),
            {str(k): (v.dtype, tuple(v.shape), v.count_nonzero().item()) for k, v in out.items(True, True)},
        )

    assert run(tb) == run(ref)
    # the same environment-visible mode switches in both (spawned workers inherit them)
    assert os.environ.get("LIST_TO_STACK") in (None, "True")


# ------------------------------------------------------------------------------------------ base classes
def _instances(m: Any) -> dict[str, Any]:
    @m.tensorclass
    class Point:
        x: torch.Tensor

    class Data(m.TensorClass):
        x: torch.Tensor

    td = m.TensorDict(a=torch.zeros(2), batch_size=[2])
    return {
        "td": td,
        "lazy": m.lazy_stack([td[0], td[1]]),
        "nested": td.unsqueeze(0),
        "data": m.NonTensorData("s"),
        "meta": m.MetaData("s"),
        "stack": m.NonTensorStack("a", "b"),
        "subclass": Data(x=torch.zeros(2)),
        "attrs": m.TensorAttrs.from_tensor(torch.zeros(2)),
        "tensor": torch.zeros(2),
        "dict": {"a": 1},
    }


def test_isinstance_of_the_base_classes(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        bases = ("TensorCollection", "NonTensorDataBase", "TensorDictBase", "TensorClass")
        return {name: [isinstance(obj, getattr(m, b)) for b in bases] for name, obj in _instances(m).items()}

    mine, theirs = run(tb), run(ref)
    # tensordict's NonTensorData/MetaData are TensorClasses and its TensorAttrs none of TensorDictBase; ours
    # are TensorDictBase leaves: compare the classes users check (TensorCollection, NonTensorDataBase)
    assert {k: v[:2] for k, v in mine.items()} == {k: v[:2] for k, v in theirs.items()}
    assert isinstance(tb.MetaData("s"), tb.NonTensorData) == isinstance(ref.MetaData("s"), ref.NonTensorData)
    for m in (tb, ref):
        with pytest.raises(NotImplementedError, match="abstract base class"):
            m.TensorCollection()


def test_metadata_under_batch_ops(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        config = {"lr": 0.1}
        td = m.TensorDict(cfg=m.MetaData(config, batch_size=[2]), x=torch.zeros(2), batch_size=[2])
        same = torch.stack([td, td])
        other = torch.stack(
            [td, m.TensorDict(cfg=m.MetaData({"lr": 0.2}, batch_size=[2]), x=torch.zeros(2), batch_size=[2])]
        )
        return (
            type(td[0].get("cfg")).__name__,
            td[0]["cfg"] is config,
            type(td.unsqueeze(0).get("cfg")).__name__,
            type(same.get("cfg")).__name__,
            list(same.get("cfg").batch_size),
            type(other.get("cfg")).__name__,
            type(td.reshape(2, 1).get("cfg")).__name__,
        )

    assert run(tb) == run(ref)


def test_typed_metadata(tb: Any, ref: Any) -> None:
    for m in (tb, ref):
        typed = m.MetaData[int]
        assert typed(3).data == 3 and typed.__name__ == "MetaData[int]" and m.MetaData[int] is typed
        with pytest.raises(TypeError, match="int"):
            typed("x")


def test_tensor_attrs(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        full = m.TensorAttrs.from_tensor(torch.zeros(2, 3, dtype=torch.int32))
        part = m.TensorAttrs.from_tensor(torch.zeros(2), fields=("dtype",))
        empty = m.TensorAttrs()
        return (
            full.tgt_device,
            full.tgt_dtype,
            full.tgt_shape,
            list(full.batch_size),
            part.tgt_dtype,
            part.tgt_shape,
            part.tgt_device,
            empty.tgt_dtype,
            m.is_tensorclass(full),
        )

    assert run(tb) == run(ref)


def test_metadata_memmap_interop(tb: Any, ref: Any, tmp_path: Any) -> None:
    ours = tb.TensorDict(m=tb.MetaData({"a": 1}, batch_size=[2]), batch_size=[2])
    ours.memmap(tmp_path / "ours")
    theirs = ref.TensorDict(m=ref.MetaData({"a": 1}, batch_size=[2]), batch_size=[2])
    theirs.memmap(tmp_path / "theirs")
    for m, folder in ((tb, "theirs"), (ref, "ours"), (tb, "ours")):
        loaded = m.TensorDict.load_memmap(tmp_path / folder).get("m")
        assert type(loaded).__name__ == "MetaData" and loaded.data == {"a": 1}, (m.__name__, folder)


# ------------------------------------------------------------------------------------------ dim names on set
def test_a_tensordict_set_into_a_named_one_takes_its_names_on_a_copy(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4], names=["x", "y"])
        out = []
        for key, make, how in (
            ("s", lambda: m.TensorDict(b=torch.zeros(3, 4, 2), batch_size=[3, 4]), "setitem"),
            ("l", lambda: m.TensorDict(b=torch.zeros(3, 4, 2), batch_size=[3, 4, 2]), "set"),
            ("same", lambda: m.TensorDict(b=torch.zeros(3, 4), batch_size=[3, 4], names=["x", "y"]), "setitem"),
            ("part", lambda: m.TensorDict(b=torch.zeros(3, 4), batch_size=[3, 4], names=["x", None]), "update"),
            ("lazy", lambda: m.lazy_stack([m.TensorDict(b=torch.zeros(4), batch_size=[4])] * 3), "setitem"),
            ("bad", lambda: m.TensorDict(b=torch.zeros(3, 4), batch_size=[3, 4], names=["p", "q"]), "setitem"),
        ):
            sub = make()
            before = sub.names
            try:
                if how == "set":
                    td.set(key, sub)
                elif how == "update":
                    td.update({key: sub})
                else:
                    td[key] = sub
            except RuntimeError as err:
                out.append((key, "RuntimeError", str(err).split(":")[0], key in td.keys()))
                continue
            out.append((key, td[key].names, td[key] is sub, sub.names == before, type(td[key]).__name__))
        sub = m.TensorDict(b=torch.zeros(3, 4), batch_size=[3, 4])
        built = m.TensorDict({"s": sub}, batch_size=[3, 4], names=["x", "y"])
        unnamed = m.TensorDict(batch_size=[3, 4])
        unnamed["s"] = sub
        out.append(("ctor", built["s"].names, built["s"] is sub, sub.names, unnamed["s"] is sub))
        return out

    mine, theirs = _both(tb, ref, run)
    assert mine == theirs
    assert mine[0] == ("s", ["x", "y"], False, True, "TensorDict")
    assert mine[-2] == ("bad", "RuntimeError", "refine_names", False)


# ------------------------------------------------------------------------------------------ key views
def test_nested_keys_are_a_live_view(tb: Any, ref: Any) -> None:
    def run(m: Any) -> Any:
        td = m.TensorDict(a={"b": torch.zeros(2)}, c=torch.zeros(2), batch_size=[2])
        lazy = m.lazy_stack([td.clone(), td.clone()])
        views = [td.keys(True), td.keys(True, True), td.keys(False, True), lazy.keys(True), lazy.keys(True, True)]
        td["z"] = torch.ones(2)
        td["a", "y"] = torch.ones(2)
        for member in lazy.tensordicts:
            member["w"] = torch.ones(2)
        return [
            (list(v), len(v), ("a", "y") in v, "z" in v, "w" in v, bool(v), sorted(map(str, set(v))))  # (("a",) in a
            # leaves-only view: a pinned difference of its own)
            for v in views
        ]

    mine, theirs = _both(tb, ref, run)
    assert mine == theirs
    assert mine[0][0] == [("a", "b"), ("a", "y"), "a", "c", "z"]
