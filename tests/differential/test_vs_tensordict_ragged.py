"""Issue 31, ragged lazy stacks and non-tensor stack values, each run on both libraries.

Ragged lazy stacks (members whose leaves differ in shape): ``get_item_shape`` (``-1`` where they differ),
``densify`` (nested tensors), value operations on a TensorDict holding one, ``from_list`` with
``auto_batch_size``, repr. Non-tensor stacks: ``td[key]`` is tensordict's list type (``LinkedList``,
with ``.tolist()``), whose item assignments write into the stack.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _both(ref: Any, tb: Any, fn: Any) -> tuple[Any, Any]:
    return fn(ref), fn(tb)


# ------------------------------------------------------------------------------------ non-tensor stacks
def _names(lib: Any) -> Any:
    return lib.TensorDict(nm=lib.NonTensorStack("a", "b"), batch_size=[2])


def _grid(lib: Any) -> Any:
    stack = lib.NonTensorStack(lib.NonTensorStack("a", "b"), lib.NonTensorStack("c", "d"))
    return lib.TensorDict(n=stack, batch_size=[2, 2])


READS = {
    "getitem": lambda lib: _names(lib)["nm"],
    "get_non_tensor": lambda lib: _names(lib).get_non_tensor("nm"),
    "nested_getitem": lambda lib: lib.TensorDict(a=_names(lib), batch_size=[2])["a", "nm"],
    "lazy_stack_getitem": lambda lib: lib.lazy_stack([lib.TensorDict(s="x"), lib.TensorDict(s="y")])["s"],
    "dense_stack_getitem": lambda lib: torch.stack([lib.TensorDict(s="x"), lib.TensorDict(s="y")])["s"],
    "two_dims": lambda lib: _grid(lib)["n"],
    "two_dims_row": lambda lib: _grid(lib)["n"][0],
    "ints": lambda lib: lib.TensorDict(n=lib.NonTensorStack(1, 2), batch_size=[2])["n"],
    "stack_tolist_linked": lambda lib: lib.NonTensorStack("a", "b").tolist(as_linked_list=True),
    "data_tolist_linked": lambda lib: lib.NonTensorData("a", batch_size=[2]).tolist(as_linked_list=True),
    "td_tolist_linked": lambda lib: _names(lib).tolist(as_linked_list=True),
}


@pytest.mark.parametrize("case", sorted(READS))
def test_stack_reads_give_the_linked_list_type(ref: Any, tb: Any, case: str) -> None:
    mine, theirs = _both(ref, tb, READS[case])
    assert type(mine).__name__ == type(theirs).__name__ == "LinkedList"
    assert isinstance(theirs, list)
    assert repr(mine) == repr(theirs)
    assert mine.tolist() == theirs.tolist()
    assert type(theirs.tolist()) is list
    assert theirs == list(theirs)


PLAIN = {
    "get_tolist": lambda lib: _names(lib).get("nm").tolist(),
    "get_type": lambda lib: type(_names(lib).get("nm")).__name__,
    "to_dict": lambda lib: _names(lib).to_dict()["nm"],
    "td_tolist": lambda lib: _names(lib).tolist(),
    "non_tensor_data": lambda lib: lib.TensorDict(n="a", batch_size=[2])["n"],
    "two_dims_tolist": lambda lib: _grid(lib)["n"].tolist(),
    "pickled": lambda lib: pickle.loads(pickle.dumps(_names(lib)["nm"])),
    "copied": lambda lib: copy.copy(_names(lib)["nm"]),
    "added": lambda lib: _names(lib)["nm"] + ["c"],
    "sliced": lambda lib: _names(lib)["nm"][:1],
}


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_stack_values_elsewhere(ref: Any, tb: Any, case: str) -> None:
    mine, theirs = _both(ref, tb, PLAIN[case])
    assert type(mine).__name__ == type(theirs).__name__
    assert repr(mine) == repr(theirs)


WRITES = {
    "item": lambda values: values.__setitem__(0, "z"),
    "negative": lambda values: values.__setitem__(-1, "z"),
    "slice": lambda values: values.__setitem__(slice(1, None), ["q"]),
    "int_value": lambda values: values.__setitem__(0, 3),
    "same_value": lambda values: values.__setitem__(0, "b"),
    "unlinked_by_append": lambda values: (values.append("w"), values.__setitem__(0, "k")),
    "unlinked_by_pop": lambda values: (values.pop(), values.__setitem__(0, "k")),
}


@pytest.mark.parametrize("case", sorted(WRITES))
def test_item_assignment_writes_into_the_stack(ref: Any, tb: Any, case: str) -> None:
    def run(lib: Any) -> tuple[Any, ...]:
        td = _names(lib)
        values = td["nm"]
        WRITES[case](values)
        return list(values), td.get("nm").tolist(), type(td.get("nm")).__name__

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_item_assignment_out_of_range_changes_nothing(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        td = _names(lib)
        values = td["nm"]
        with pytest.raises(IndexError):
            values[5] = "x"
        assert values == ["a", "b"]
        assert td.get("nm").tolist() == ["a", "b"]


def test_two_dims_write_rows_and_items(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> tuple[Any, ...]:
        td = _grid(lib)
        values = td["n"]
        values[0][1] = "Z"
        values[1] = ["p", "q"]
        return values.tolist(), td.get("n").tolist(), type(values[1]).__name__

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs == ([["a", "Z"], ["p", "q"]], [["a", "Z"], ["p", "q"]], "list")


@pytest.mark.parametrize("value", ["z", 3, "nt"])
def test_stack_setitem_at_an_index(ref: Any, tb: Any, value: Any) -> None:
    def run(lib: Any) -> Any:
        stack = lib.NonTensorStack("a", "b")
        stack[0] = lib.NonTensorData("z") if value == "nt" else value
        return stack.tolist(), type(stack).__name__

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_tensorclass_field_reads_a_linked_list(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> tuple[Any, ...]:
        class C(lib.TensorClass):
            name: str
            x: torch.Tensor

        c = torch.stack([C(name="a", x=torch.zeros(())), C(name="b", x=torch.zeros(()))])
        values = c.name
        values[0] = "z"
        return type(values).__name__, c.name.tolist(), type(c.get("name")).__name__

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs
