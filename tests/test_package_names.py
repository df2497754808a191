"""Package-level helpers of issue 16 item 3: parse_tensor_dict_string, from_dataclass, from_consolidated,
the is_leaf and dtype predicates, and tensorbatch.utils' helpers (values and error messages).
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import warnings

import pytest
import torch

import tensorbatch
from tensorbatch import (
    KEY_SEPARATOR,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    default_is_leaf,
    from_consolidated,
    from_dataclass,
    is_leaf_nontensor,
    is_tensorclass,
    lazy_stack,
    parse_tensor_dict_string,
    set_printoptions,
)
from tensorbatch.utils import convert_ellipsis_to_idx, isin, print_directory_tree, remove_duplicates, unravel_keys


# ------------------------------------------------------------------------------------------ parse
def _sample() -> TensorDict:
    return TensorDict(
        z=torch.ones(3, 4),
        n={"b": torch.ones(3, dtype=torch.int64), "m": {"c": torch.ones(3, 2, 1)}},
        s="hi",
        st=["a", "b", "c"],
        e={},
        batch_size=[3],
    )


def test_parse_rebuilds_keys_shapes_dtypes_and_non_tensor_values() -> None:
    out = parse_tensor_dict_string(repr(_sample()))
    assert out.batch_size == (3,)
    assert sorted(map(str, out.keys(True))) == sorted(map(str, _sample().keys(True)))
    assert out["n", "b"].dtype == torch.int64 and out["n", "m", "c"].shape == (3, 2, 1)
    assert out["z"].sum() == 0
    assert out["s"] == "hi" and type(out.get("st")) is NonTensorStack and out["st"] == ["a", "b", "c"]
    assert out["e"].batch_size == (3,)
    with set_printoptions(sort_keys=None, show_dtype=False, show_field_device=False):
        text = repr(_sample())
    hidden = parse_tensor_dict_string(text)
    assert hidden["n", "b"].dtype == torch.float32  # a hidden dtype reads as the default


def test_parse_a_lazy_stack_gives_a_dense_stack_of_its_members() -> None:
    members = [TensorDict(a=torch.ones(2), batch_size=[2]), TensorDict(a=torch.ones(2), batch_size=[2])]
    out = parse_tensor_dict_string(repr(lazy_stack(members, 1)))
    assert type(out) is TensorDict and out.batch_size == (2, 2) and out["a"].shape == (2, 2)
    hetero = lazy_stack([TensorDict(a=torch.ones(1)), TensorDict(b=torch.ones(1))])
    with pytest.raises(ValueError, match="members hold different keys"):
        parse_tensor_dict_string(repr(hetero))


def test_parse_errors_name_the_line() -> None:
    with pytest.raises(ValueError, match="'hello' is not the first line"):
        parse_tensor_dict_string("hello")
    with pytest.raises(ValueError, match="'oops' is not an entry"):
        parse_tensor_dict_string("TensorDict(batch_size=[2], device=None)\noops")
    with set_printoptions(show_shape=False):
        text = repr(TensorDict(a=torch.zeros(2), batch_size=[2]))
    with pytest.raises(ValueError, match="has no shape"):
        parse_tensor_dict_string(text)
    value = object()  # printed as its str: read back as that text
    assert parse_tensor_dict_string(repr(TensorDict(o=NonTensorData(value))))["o"] == str(value)


# ------------------------------------------------------------------------------------------ converters
@dataclasses.dataclass
class Step:
    obs: torch.Tensor
    tags: list = dataclasses.field(default_factory=list)
    note: str = "n"


def test_from_dataclass_type_and_instance() -> None:
    cls = from_dataclass(Step, frozen=True)
    assert cls.__name__ == "Step_tc" and is_tensorclass(cls) and cls._frozen
    item = cls(obs=torch.zeros(2), batch_size=[2])
    assert item.tags == [] and item.note == "n"
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.note = "m"
    source = Step(torch.ones(3, 2), note="x")
    inst = from_dataclass(source, batch_size=[3])
    assert type(inst).__name__ == "Step_tc" and inst.batch_size == (3,) and inst.note == "x"
    assert inst.obs is not source.obs and torch.equal(inst.obs, source.obs)  # a deep copy, as asdict
    into = from_dataclass(source, dest_cls=cls, auto_batch_size=True)
    # (as tensordict: the empty list is read as an empty tensor at batch [], so no batch dim is shared)
    assert type(into) is cls and into.batch_size == () and torch.equal(into.tags, torch.zeros(0))
    with pytest.raises(TypeError, match="expects a dataclass type or instance, got int"):
        from_dataclass(3)
    with pytest.raises(TypeError, match="got the class dict"):
        from_dataclass(dict)
    with pytest.raises(TypeError, match="exclude each other"):
        from_dataclass(source, auto_batch_size=True, batch_size=[3])


@dataclasses.dataclass
class InPlace:  # made a tensorclass by the test below (module level: its instances pickle by name)
    obs: torch.Tensor
    tags: list = dataclasses.field(default_factory=list)
    note: str = "n"

    def __post_init__(self) -> None:
        if isinstance(self.note, str):  # (it runs on rebuilds too: a stack's note is a list)
            self.note = self.note.upper()

    def __repr__(self) -> str:  # the class's own: kept
        return f"InPlace({self.note})"

    def doubled(self) -> torch.Tensor:
        return self.obs * 2


def test_from_dataclass_inplace_changes_the_class_itself() -> None:
    assert from_dataclass(InPlace, inplace=True) is InPlace
    assert InPlace.__bases__ == (object,) and is_tensorclass(InPlace) and dataclasses.is_dataclass(InPlace)
    item = InPlace(torch.arange(6.0).reshape(3, 2), batch_size=[3])
    assert isinstance(item, InPlace) and type(item).__name__ == "InPlace" and is_tensorclass(item)
    assert item.tags == [] and item.note == "N" and repr(item) == "InPlace(N)"  # default factory, __post_init__
    assert torch.equal(item.doubled(), item.obs * 2)
    assert isinstance(item[1:], InPlace) and item[1:].batch_size == (2,)
    stacked = torch.stack([item, item])
    assert isinstance(stacked, InPlace) and stacked.batch_size == (2, 3)
    again = pickle.loads(pickle.dumps(item))
    assert isinstance(again, InPlace) and torch.equal(again.obs, item.obs) and again.note == "N"
    assert [f.name for f in dataclasses.fields(InPlace)] == ["obs", "tags", "note"]
    built = InPlace.from_tensordict(TensorDict(obs=torch.zeros(2, 1), batch_size=[2]))
    assert isinstance(built, InPlace) and built.batch_size == (2,)
    assert from_dataclass(InPlace, inplace=True) is InPlace  # already one
    with pytest.raises(RuntimeError, match=r"value\.shape=torch\.Size\(\[4\]\) for key 'obs'"):
        item.obs = torch.zeros(4)
    assert item.obs.shape == (3, 2)


def test_from_dataclass_inplace_subclass_and_class_hooks() -> None:
    seen = []

    @dataclasses.dataclass
    class Base:
        x: torch.Tensor

        def __init_subclass__(cls, **kwargs: object) -> None:  # the class's own hook still runs
            super().__init_subclass__(**kwargs)
            seen.append(cls.__name__)

    from_dataclass(Base, inplace=True)

    class Sub(Base):
        def total(self) -> torch.Tensor:
            return self.x.sum()

    assert is_tensorclass(Sub) and Sub.__bases__ == (Base,) and seen == ["Sub"]
    sub = Sub(x=torch.ones(3), batch_size=[3])
    assert isinstance(sub, Sub) and isinstance(sub, Base) and sub.total() == 3
    assert isinstance(sub[:2], Sub) and isinstance(
        Sub.from_tensordict(TensorDict(x=torch.ones(2), batch_size=[2])), Sub
    )
    assert isinstance(Base(x=torch.ones(2), batch_size=[2]), Base) and not isinstance(Base(torch.ones(1)), Sub)


def test_from_dataclass_inplace_frozen_and_slots() -> None:
    @dataclasses.dataclass(frozen=True)
    class Point:
        xy: torch.Tensor

    from_dataclass(Point, inplace=True)
    point = Point(torch.zeros(4, 2), batch_size=[4])
    assert point.batch_size == (4,) and point.xy.shape == (4, 2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'xy'"):
        point.xy = torch.ones(4, 2)  # the dataclass's own refusal (the TensorDict is not locked, as tensordict)
    assert not point.is_locked and torch.equal(point.xy, torch.zeros(4, 2))
    assert Point.__dataclass_params__.frozen

    @dataclasses.dataclass(slots=True)
    class Slotted:
        x: torch.Tensor

    with pytest.raises(TypeError, match="Slotted has __slots__"):
        from_dataclass(Slotted, inplace=True)


def test_from_consolidated(tmp_path) -> None:
    td = TensorDict(a=torch.arange(3.0), b={"c": torch.ones(3)}, batch_size=[3])
    td.consolidate(filename=tmp_path / "td.bin")
    out = from_consolidated(tmp_path / "td.bin")
    assert type(out) is TensorDict and out.batch_size == (3,)
    assert torch.equal(out["a"], td["a"]) and torch.equal(out["b", "c"], td["b", "c"])


# ------------------------------------------------------------------------------------------ predicates
def test_is_leaf_predicates() -> None:
    assert [default_is_leaf(c) for c in (torch.Tensor, int, NonTensorData, TensorDict)] == [True, True, False, False]
    assert [is_leaf_nontensor(c) for c in (torch.Tensor, int, NonTensorStack, TensorDict)] == [True, False, True, False]
    td = TensorDict(a={}, b="text", c=torch.zeros(()))
    assert list(td.keys(leaves_only=True, is_leaf=is_leaf_nontensor)) == ["b", "c"]
    assert KEY_SEPARATOR == "." and set(TensorDict(a={"b": torch.zeros(())}).flatten_keys().keys()) == {"a.b"}


# ------------------------------------------------------------------------------------------ utils
def test_isin_and_remove_duplicates_errors_name_the_key_and_dim() -> None:
    td = TensorDict(x=torch.tensor([3, 1, 3]), s="text", batch_size=[3])
    with pytest.raises(KeyError, match="key 'y' is missing"):
        isin(td, td, "y")
    with pytest.raises(KeyError, match="key 's' is a NonTensorData, not a tensor"):
        remove_duplicates(td, "s")
    with pytest.raises(ValueError, match=r"dim 1 is not a batch dim of batch_size \[3\]"):
        remove_duplicates(td, "x", dim=1)
    with pytest.raises(ValueError, match="same number of batch dims"):
        isin(td, TensorDict(x=torch.zeros(1, 1), batch_size=[1, 1]), "x")
    assert isin(td, td[:1], "x").tolist() == [True, False, True]
    out = remove_duplicates(td, "x", dim=-1)
    assert out["x"].tolist() == [1, 3] and out["s"] == "text"


def test_deprecated_helpers_warn() -> None:
    with pytest.warns(DeprecationWarning, match="unravel_keys"):
        assert unravel_keys(("a", ("b",))) == ("a", "b")
    with pytest.warns(DeprecationWarning, match="convert_ellipsis_to_idx"):
        assert convert_ellipsis_to_idx((torch.ones(2, 3, dtype=torch.bool), ...), [2, 3, 4])[1:] == (slice(None),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(IndexError, match="single ellipsis"):
            convert_ellipsis_to_idx((..., ...), [2])


def test_print_directory_tree_logs_each_line(tmp_path, caplog) -> None:
    (tmp_path / "f.txt").write_text("abc")
    with caplog.at_level(logging.INFO, logger="tensorbatch"):
        text = print_directory_tree(tmp_path)
    assert text.splitlines() == ["Directory size: 3.00 B", f"{tmp_path.name}/", "    f.txt"]
    assert [r.getMessage() for r in caplog.records] == text.splitlines()


def test_names_are_exported() -> None:
    for name in (
        "from_dataclass",
        "from_consolidated",
        "default_is_leaf",
        "is_leaf_nontensor",
        "is_bool",
        "is_floating",
        "is_integer",
        "is_inexact",
        "parse_tensor_dict_string",
        "KEY_SEPARATOR",
        "set_get_defaults_to_none",
        "get_defaults_to_none",
    ):
        assert name in tensorbatch.__all__ and hasattr(tensorbatch, name)
    from tensorbatch.tensorclass import from_dataclass as from_module

    assert from_module is from_dataclass


# ------------------------------------------------------------------------------------------ base classes
def test_tensor_collection_and_non_tensor_bases() -> None:
    from tensorbatch import MetaData, NonTensorDataBase, TensorAttrs, TensorCollection

    @tensorbatch.tensorclass
    class P:
        x: torch.Tensor

    for obj in (
        TensorDict(),
        lazy_stack([TensorDict(), TensorDict()]),
        NonTensorData(1),
        NonTensorStack(1, 2),
        MetaData(1),
        P(x=torch.zeros(1)),
        TensorAttrs(),
    ):
        assert isinstance(obj, TensorCollection), type(obj)
    assert not isinstance(torch.zeros(1), TensorCollection) and not isinstance({}, TensorCollection)
    with pytest.raises(NotImplementedError, match="abstract"):  # (tensordict's error)
        TensorCollection()
    assert isinstance(MetaData(1), NonTensorDataBase) and isinstance(NonTensorData(1), NonTensorDataBase)
    assert not isinstance(MetaData(1), NonTensorData) and not isinstance(NonTensorStack(1, 2), NonTensorDataBase)
    assert not isinstance(NonTensorData(1), MetaData)


def test_metadata_keeps_its_class_and_stacks_by_identity(tmp_path) -> None:
    import pickle

    from tensorbatch import MetaData

    config = {"lr": 0.1}
    td = TensorDict(cfg=MetaData(config, batch_size=[2]), batch_size=[2])
    for out in (
        td[0],
        td.unsqueeze(1),
        td.expand(3, 2),
        td.clone(),
        pickle.loads(pickle.dumps(td)),
        torch.stack([td, td]),
        torch.cat([td, td]),
    ):
        assert type(out.get("cfg")) is MetaData, out
    assert td[1]["cfg"] is config
    equal = TensorDict(cfg=MetaData({"lr": 0.1}, batch_size=[2]), batch_size=[2])
    assert type(torch.stack([td, equal]).get("cfg")) is NonTensorStack  # equal, not the same object (tensordict too)
    different = TensorDict(cfg=MetaData({"lr": 0.2}, batch_size=[2]), batch_size=[2])
    assert type(torch.stack([td, different]).get("cfg")) is NonTensorStack
    td.memmap(tmp_path / "m")
    assert type(TensorDict.load_memmap(tmp_path / "m").get("cfg")) is MetaData
    assert repr(MetaData("a")) == "MetaData(data=a, batch_size=torch.Size([]), device=None)"
    with pytest.raises(TypeError, match=r"Expected data of type str, got int"):
        MetaData[str](1)
    with pytest.raises(TypeError, match="cannot give a value type"):
        MetaData[str][int]
