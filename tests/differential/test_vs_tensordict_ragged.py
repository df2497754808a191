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


# ------------------------------------------------------------------------------------- ragged lazy stacks
def _stack(lib: Any, *tds: Any, dim: int = 0) -> Any:
    return lib.lazy_stack(list(tds), dim)


RAGGED = {
    "leaf": lambda lib: _stack(lib, lib.TensorDict(a=torch.zeros(3)), lib.TensorDict(a=torch.ones(4))),
    "nested": lambda lib: _stack(
        lib, lib.TensorDict(n=lib.TensorDict(b=torch.zeros(3, 2))), lib.TensorDict(n=lib.TensorDict(b=torch.ones(4, 2)))
    ),
    "stack_dim_1": lambda lib: _stack(
        lib,
        lib.TensorDict(a=torch.zeros(2, 3), batch_size=[2]),
        lib.TensorDict(a=torch.ones(2, 4), batch_size=[2]),
        dim=1,
    ),
    "two_ragged_dims": lambda lib: _stack(lib, lib.TensorDict(a=torch.zeros(3, 5)), lib.TensorDict(a=torch.ones(4, 6))),
    "ndims_differ": lambda lib: _stack(lib, lib.TensorDict(a=torch.zeros(3)), lib.TensorDict(a=torch.ones(4, 6))),
    "batch_differs": lambda lib: _stack(
        lib, lib.TensorDict(a=torch.zeros(3), batch_size=[3]), lib.TensorDict(a=torch.ones(4), batch_size=[4])
    ),
    "nested_batch_differs": lambda lib: _stack(
        lib,
        lib.TensorDict(n=lib.TensorDict(b=torch.zeros(3), batch_size=[3])),
        lib.TensorDict(n=lib.TensorDict(b=torch.ones(4), batch_size=[4])),
    ),
    "non_tensor": lambda lib: _stack(lib, lib.TensorDict(s="x"), lib.TensorDict(s="y")),
}
SHAPES = [
    ("leaf", "a"),
    ("nested", ("n", "b")),
    ("nested", "n"),
    ("stack_dim_1", "a"),
    ("two_ragged_dims", "a"),
    ("ndims_differ", "a"),
    ("batch_differs", "a"),
    ("nested_batch_differs", "n"),
    ("nested_batch_differs", ("n", "b")),
    ("non_tensor", "s"),
]


@pytest.mark.parametrize(("case", "key"), SHAPES)
def test_get_item_shape(ref: Any, tb: Any, case: str, key: Any) -> None:
    mine, theirs = _both(ref, tb, lambda lib: RAGGED[case](lib).get_item_shape(key))
    assert mine == theirs
    assert type(theirs) is torch.Size


def test_get_item_shape_of_a_missing_key_raises(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        s = _stack(lib, lib.TensorDict(a=torch.zeros(3), b=torch.zeros(1)), lib.TensorDict(a=torch.ones(4)))
        with pytest.raises(KeyError):
            s.get_item_shape("b")


def _describe(value: Any) -> Any:
    """Type, batch size and leaves (nested tensors as their layout and components) of a densified result."""
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return ("nested", str(value.layout), [c.tolist() for c in value.unbind()])
        return ("tensor", value.tolist())
    if type(value).__name__ in ("NonTensorStack", "NonTensorData"):
        return (type(value).__name__, value.tolist())
    return (type(value).__name__, list(value.batch_size), {k: _describe(value.get(k)) for k in sorted(value.keys())})


@pytest.mark.parametrize("layout", ["strided", "jagged"])
@pytest.mark.parametrize(
    "case",
    [
        "leaf",
        "nested",
        "batch_differs",
        "nested_batch_differs",
        "non_tensor",
        "two_ragged_dims_strided",
        "exclusive_key",
        "uniform_stack_dim_1",
        "in_a_td",
    ],
)
def test_densify(ref: Any, tb: Any, case: str, layout: str) -> None:
    lay = getattr(torch, layout)
    if case == "two_ragged_dims_strided" and layout == "jagged":
        pytest.skip("a jagged tensor has one ragged dim (torch raises in both)")

    def run(lib: Any) -> Any:
        if case == "two_ragged_dims_strided":
            s = RAGGED["two_ragged_dims"](lib)
        elif case == "exclusive_key":
            s = _stack(lib, lib.TensorDict(a=torch.zeros(3), b=torch.ones(2, 5)), lib.TensorDict(a=torch.ones(4)))
        elif case == "uniform_stack_dim_1":
            s = _stack(
                lib,
                lib.TensorDict(a=torch.zeros(2, 3), batch_size=[2]),
                lib.TensorDict(a=torch.ones(2, 3), batch_size=[2]),
                dim=1,
            )
        elif case == "in_a_td":
            s = lib.TensorDict(lazy=RAGGED["leaf"](lib), b=torch.zeros(()))
        else:
            s = RAGGED[case](lib)
        return _describe(s.densify(layout=lay))

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


@pytest.mark.parametrize("case", ["stack_dim_1", "ndims_differ"])
def test_densify_refusals(ref: Any, tb: Any, case: str) -> None:
    errors = []
    for lib in (ref, tb):
        with pytest.raises(RuntimeError) as info:
            RAGGED[case](lib).densify()
        errors.append(type(info.value))
    assert errors[0] is errors[1]


VALUE_OPS = {
    "clone": lambda td: td.clone(),
    "clone_no_recurse": lambda td: td.clone(False),
    "add": lambda td: td + 1,
    "apply": lambda td: td.apply(lambda x: x * 2),
    "apply_two": lambda td: td.apply(lambda x, y: x + y, td),
    "named_apply": lambda td: td.named_apply(lambda key, x: x - 1),
    "to_dtype": lambda td: td.to(torch.float64),
    "detach": lambda td: td.detach(),
    "eq": lambda td: td == td,
    "add_td": lambda td: td + td,
    "float": lambda td: td.float(),
}


_NOT_YET = {  # fast paths that read the stack's stacked leaves first (foreach on flat leaves, first_leaf, copy_nodes)
    "add": "td + scalar reads the first leaf through the stack",
    "add_td": "td + td flattens the leaves for foreach",
    "clone_no_recurse": "clone(False) copies the nodes by reading the stack's entries",
}


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(op, marks=pytest.mark.xfail(strict=True, reason=_NOT_YET[op])) if op in _NOT_YET else op
        for op in sorted(VALUE_OPS)
    ],
)
def test_value_ops_on_a_td_holding_a_ragged_stack(ref: Any, tb: Any, op: str) -> None:
    def run(lib: Any) -> Any:
        td = lib.TensorDict(lazy=_stack(lib, lib.TensorDict(a=torch.arange(3.0)), lib.TensorDict(a=torch.arange(4.0))))
        out = VALUE_OPS[op](td)
        lazy = out.get("lazy")
        return (
            type(out).__name__,
            type(lazy).__name__,
            list(lazy.batch_size),
            lazy.get_item_shape("a"),
            [m["a"].tolist() for m in lazy.tensordicts],
            lazy is td.get("lazy"),
        )

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_clone_copies_the_members(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        td = lib.TensorDict(lazy=RAGGED["leaf"](lib))
        out = td.clone()
        out.get("lazy").tensordicts[0]["a"] += 1
        assert td.get("lazy").tensordicts[0]["a"].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("auto", [True, False])
@pytest.mark.parametrize("case", ["ragged", "same", "nested", "batch_dims"])
def test_from_list(ref: Any, tb: Any, case: str, auto: bool) -> None:
    items = {
        "ragged": [{"a": torch.zeros(3)}, {"a": torch.ones(4)}],
        "same": [{"a": torch.zeros(3, 2)}, {"a": torch.ones(3, 2)}],
        "nested": [{"a": {"b": torch.zeros(3)}}, {"a": {"b": torch.ones(4)}}],
        "batch_dims": [{"a": torch.zeros(3, 2)}, {"a": torch.ones(4, 2)}],
    }[case]

    def run(lib: Any) -> Any:
        kwargs = {"batch_dims": 2} if case == "batch_dims" and auto else {"auto_batch_size": auto}
        s = lib.LazyStackedTensorDict.from_list(items, **kwargs)
        return (
            type(s).__name__,
            list(s.batch_size),
            [list(m.batch_size) for m in s.tensordicts],
            s.get_item_shape("a"),
        )

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_repr_of_a_ragged_stack_shows_minus_one(ref: Any, tb: Any) -> None:
    del ref
    s = _stack(
        tb,
        tb.TensorDict(a=torch.zeros(3), n=tb.TensorDict(b=torch.zeros(2, 5))),
        tb.TensorDict(a=torch.zeros(4), n=tb.TensorDict(b=torch.zeros(3, 5))),
    )
    text = repr(s)
    assert "a: Tensor(shape=[2, -1], dtype=float32" in text
    assert "b: Tensor(shape=[2, -1, 5], dtype=float32" in text
    assert "lazy: LazyStackedTensorDict(batch_size=[2])" in repr(tb.TensorDict(lazy=s))
