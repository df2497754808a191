"""The global options (``tensorbatch/_options.py``): each setter as a block, a decorator and ``.set()``,
and what each option changes (get's default, lists on set, stacks of equal non-tensor values, the repr).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import tensorbatch
from tensorbatch import (
    NonTensorData,
    NonTensorStack,
    TensorDict,
    capture_non_tensor_stack,
    get_defaults_to_none,
    get_printoptions,
    lazy_legacy,
    lazy_stack,
    list_to_stack,
    set_capture_non_tensor_stack,
    set_get_defaults_to_none,
    set_lazy_legacy,
    set_list_to_stack,
    set_printoptions,
    tensorclass,
)


@pytest.fixture
def raising_get():
    """``set_get_defaults_to_none(False)`` for one test (it is a global setter only, as in tensordict)."""
    with pytest.warns(DeprecationWarning, match="set_get_defaults_to_none"):
        set_get_defaults_to_none(False)
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        set_get_defaults_to_none(True)


# ------------------------------------------------------------------------------------------ get's default
def test_get_without_default_gives_none_by_default() -> None:
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    assert td.get("b") is None
    assert td.get(("x", "y")) is None
    assert td.get_at("b", 0) is None
    with pytest.warns(DeprecationWarning, match="get_defaults_to_none"):
        assert get_defaults_to_none() is True


def test_get_raises_for_a_missing_key_when_the_default_is_off(raising_get) -> None:
    td = TensorDict(a=torch.zeros(2), n={"b": torch.zeros(2)}, batch_size=[2])
    with pytest.warns(DeprecationWarning, match=r"get_defaults_to_none\(\) is deprecated"):
        assert get_defaults_to_none() is False
    with pytest.raises(KeyError, match='key "b" not found'):
        td.get("b")
    with pytest.raises(KeyError, match='key "x" not found'):
        td.get(("n", "x"))
    with pytest.raises(KeyError, match='key "z" not found'):
        td.get(("z", "x"))
    with pytest.raises(KeyError, match='key "b" not found'):
        td.get_at("b", 0)
    # a default given explicitly, None included, is still returned
    assert td.get("b", None) is None
    assert td.get("b", default=3) == 3
    assert td.get_at("b", 0, 7) == 7
    assert td.get("a").shape == (2,)
    assert td.get_at("a", 1) == 0


def test_get_raises_on_lazy_stacks_and_tensorclasses_when_the_default_is_off(raising_get) -> None:
    stack = lazy_stack([TensorDict(a=torch.zeros(1)), TensorDict(a=torch.zeros(2))])
    with pytest.raises(KeyError):
        stack.get("b")
    with pytest.raises(KeyError):
        stack.get("b", as_list=True)
    assert stack.get("b", None, as_list=True) is None
    assert [t.shape for t in stack.get("a", as_list=True)] == [(1,), (2,)]

    @tensorclass
    class Point:
        x: torch.Tensor
        tag: str | None = None

    p = Point(x=torch.zeros(2), batch_size=[2])
    assert p.get("tag") is None  # a field holding None is no missing key
    with pytest.raises(AttributeError, match="'Point' object has no attribute or field 'nope'"):
        p.get("nope")
    assert p.get("nope", 1) == 1


# ------------------------------------------------------------------------------------------ list_to_stack
def test_list_to_stack_as_block_decorator_and_global_setter() -> None:
    assert list_to_stack() is True
    with pytest.warns(DeprecationWarning, match="set_non_tensor"):
        off = set_list_to_stack(False)
    with off:
        assert list_to_stack() is False
        assert os.environ["LIST_TO_STACK"] == "False"  # spawned workers start in the same mode
        td = TensorDict(batch_size=[2])
        td["x"] = ["a", "b"]
        td.set("y", [{"k": 1}, 2])
        td["n"] = [1, 2]  # a list torch reads as a tensor stays a tensor
        built = TensorDict({"z": ["a", "b"]}, batch_size=[2])
    assert list_to_stack() is True
    assert "LIST_TO_STACK" not in os.environ or os.environ["LIST_TO_STACK"] != "False"
    assert type(td.get("x")) is NonTensorData and td["x"].tolist() == ["a", "b"]  # numpy's array, as tensordict
    assert type(td.get("y")) is NonTensorData and td["y"].tolist() == [{"k": 1}, 2]  # (an object array)
    assert type(td.get("n")) is torch.Tensor
    assert type(built.get("z")) is NonTensorData and built["z"].tolist() == ["a", "b"]
    td["s"] = ["a", "b"]
    assert type(td.get("s")) is NonTensorStack

    @off
    def store(td: TensorDict) -> None:
        assert list_to_stack() is False
        td["w"] = ["c", "d"]

    store(td)
    assert type(td.get("w")) is NonTensorData and list_to_stack() is True
    off.set()
    try:
        assert list_to_stack() is False
    finally:
        set_list_to_stack(True).set()
    assert list_to_stack() is True


def test_a_block_restores_the_mode_when_the_body_raises() -> None:
    with pytest.raises(ZeroDivisionError), set_capture_non_tensor_stack(True):
        1 / 0  # noqa: B018
    assert capture_non_tensor_stack() is False


# ------------------------------------------------------------------------------------------ capture
def test_capture_non_tensor_stack_decides_what_stacks_of_equal_values_give() -> None:
    assert capture_non_tensor_stack() is False  # tensordict's default
    stack = torch.stack([NonTensorData("a"), NonTensorData("a")])
    nested = torch.stack([TensorDict(s="a"), TensorDict(s="a")])
    assert type(stack) is NonTensorStack and stack.tolist() == ["a", "a"]
    assert type(nested.get("s")) is NonTensorStack and nested.get("s").batch_size == (2,)
    with set_capture_non_tensor_stack(True):
        assert capture_non_tensor_stack() is True
        assert type(torch.stack([NonTensorData("a"), NonTensorData("a")])) is NonTensorData
    cat = torch.cat([TensorDict(s=NonTensorData("a", batch_size=[1]), batch_size=[1])] * 2)
    assert type(cat.get("s")) is NonTensorData and cat.get("s").batch_size == (2,)  # cat keeps one value (tensordict)
    # different values give a stack in both modes
    assert type(torch.stack([NonTensorData("a"), NonTensorData("b")])) is NonTensorStack


# ------------------------------------------------------------------------------------------ lazy_legacy
def test_lazy_legacy_false_works_and_true_raises_naming_the_readme_entry() -> None:
    assert lazy_legacy() is False
    with set_lazy_legacy(False):
        assert lazy_legacy() is False
    set_lazy_legacy(False).set()

    @set_lazy_legacy(False)
    def fn() -> bool:
        return lazy_legacy()

    assert fn() is False
    with pytest.raises(NotImplementedError, match=r"Legacy lazy mode.*README\.md.*lazy_stack"):
        set_lazy_legacy(True)


def test_the_readme_has_the_entry_the_lazy_legacy_error_names() -> None:
    readme = os.path.dirname(os.path.dirname(__file__)) + "/README.md"
    with open(readme, encoding="utf-8") as f:
        assert "Legacy lazy mode" in f.read()


# ------------------------------------------------------------------------------------------ print options
def _td() -> TensorDict:
    return TensorDict(
        z=torch.zeros(3, 4), n={"b": torch.ones(3, dtype=torch.int64), "a": torch.ones(3)}, batch_size=[3]
    )


def test_printoptions_defaults_are_tensordicts() -> None:
    assert get_printoptions() == {
        "show_batch_size": True,
        "show_device": True,
        "show_is_shared": True,
        "show_shape": True,
        "show_field_device": True,
        "show_dtype": True,
        "show_field_is_shared": True,
        "show_grad": False,
        "show_is_contiguous": False,
        "show_is_view": False,
        "show_storage_size": False,
        "plain": False,
        "sort_keys": "alphabetical",
        "compact": True,
        "html": True,
    }
    options = get_printoptions()
    options["compact"] = False  # a copy
    assert get_printoptions()["compact"] is True


def test_repr_sorts_keys_by_default_and_follows_sort_keys() -> None:
    assert repr(_td()).splitlines() == [
        "TensorDict(batch_size=[3], device=None)",
        "|-- n: TensorDict(batch_size=[3])",
        "|   |-- a: Tensor(shape=[3], dtype=float32, device=cpu)",
        "|   `-- b: Tensor(shape=[3], dtype=int64, device=cpu)",
        "`-- z: Tensor(shape=[3, 4], dtype=float32, device=cpu)",
    ]
    with set_printoptions(sort_keys="insertion"):
        assert [line.split(":")[0] for line in repr(_td()).splitlines()[1:]] == [
            "|-- z",
            "`-- n",
            "    |-- b",
            "    `-- a",
        ]
    with set_printoptions(sort_keys={"z": 0, "n": 1, "a": 2, "b": 3}.get):
        assert [line.split(":")[0] for line in repr(_td()).splitlines()[1:]] == [
            "|-- z",
            "`-- n",
            "    |-- a",
            "    `-- b",
        ]


def test_repr_hides_and_shows_what_the_options_say() -> None:
    with set_printoptions(show_batch_size=False, show_device=False, show_dtype=False, show_field_device=False):
        assert repr(_td()).splitlines()[:3] == ["TensorDict()", "|-- n: TensorDict()", "|   |-- a: Tensor(shape=[3])"]
    with set_printoptions(show_shape=False, verbose=False):
        assert repr(_td()).splitlines()[2] == "|   |-- a: Tensor()"
    td = TensorDict(a=torch.tensor([1.0, 3.0]), i=torch.tensor([2, 5]), batch_size=[2])
    with set_printoptions(
        show_grad=True, show_is_contiguous=True, show_is_view=True, show_storage_size=True, plain=True
    ):
        assert get_printoptions()["compact"] is False  # a detailed-only option turns the compact form off
        lines = repr(td).splitlines()
    assert lines[0] == "TensorDict(batch_size=[2], device=None, is_shared=False)"
    assert lines[1] == (
        "|-- a: Tensor(shape=[2], dtype=float32, device=cpu, is_shared=False, requires_grad=False, "
        "is_contiguous=True, is_view=False, storage_size=8, mean=2, std=1.414)"
    )
    assert lines[2].endswith("storage_size=16, min=2, max=5)")
    with set_printoptions(compact=True, show_grad=True):  # compact given: the detailed facts stay hidden
        assert "requires_grad" not in repr(td)
    assert get_printoptions()["show_grad"] is False and get_printoptions()["compact"] is True


def test_set_printoptions_refuses_unknown_options_and_works_as_decorator_and_setter() -> None:
    with pytest.raises(TypeError, match=r"unknown print options \['show_colour'\]"):
        set_printoptions(show_colour=True)

    @set_printoptions(show_dtype=False)
    def show() -> str:
        return repr(TensorDict(a=torch.zeros(1), batch_size=[1]))

    assert "dtype" not in show() and "dtype" in repr(TensorDict(a=torch.zeros(1), batch_size=[1]))
    old = get_printoptions()
    set_printoptions(show_device=False).set()
    try:
        assert repr(TensorDict()) == "TensorDict(batch_size=[])"
    finally:
        set_printoptions(**old).set()
    assert get_printoptions() == old


def test_same_instance_entered_twice_restores_in_order() -> None:
    block = set_printoptions(show_dtype=False)
    with block:
        with set_printoptions(show_dtype=True), block:
            assert get_printoptions()["show_dtype"] is False
        assert get_printoptions()["show_dtype"] is False
    assert get_printoptions()["show_dtype"] is True


def test_package_and_utils_export_the_options() -> None:
    for name in (
        "set_printoptions",
        "get_printoptions",
        "set_list_to_stack",
        "list_to_stack",
        "set_capture_non_tensor_stack",
        "capture_non_tensor_stack",
        "set_lazy_legacy",
        "lazy_legacy",
    ):
        assert getattr(tensorbatch, name) is getattr(tensorbatch.utils, name)
        assert name in tensorbatch.__all__
