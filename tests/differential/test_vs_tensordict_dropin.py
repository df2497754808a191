"""Issue 31, first slice: tensordict's documented behaviours that differed, each run on both libraries.

rename(None), rename_keys dropping the nodes it empties, split_keys (lists, dicts, callables, inplace,
default, reproduce_struct), NonTensorData.where, non_tensor_items as a tuple, norm/sum(key_transform=...),
update_(**entries), utils.timeit, NonTensorData.maybe_to_stack, lazy_stack(stack_dim_name=...).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _both(ref: Any, tb: Any, fn: Any) -> tuple[Any, Any]:
    return fn(ref), fn(tb)


def _keys(td: Any) -> list[Any]:
    return sorted(td.keys(True), key=str)


def _sample(lib: Any) -> Any:
    td = lib.TensorDict
    return td(
        a=torch.zeros(2),
        b=torch.ones(2),
        n=td(c=torch.zeros(2), d=torch.zeros(2, 3), batch_size=[2]),
        e=td(batch_size=[2]),
        s="txt",
        batch_size=[2],
    )


def test_rename_none_clears_every_name(ref: Any, tb: Any) -> None:
    mine, theirs = _both(ref, tb, lambda lib: lib.TensorDict(batch_size=[1, 2], names=["a", "b"]).rename(None).names)
    assert mine == theirs == [None, None]
    td = tb.TensorDict(batch_size=[1, 2], names=["a", "b"])
    td.rename_(None)
    assert td.names == [None, None]


@pytest.mark.parametrize(
    "mapping",
    [{("raw", "p"): "p"}, {("raw", "deep", "p"): "p"}, {("raw", "p"): ("raw", "z")}, {("raw", "p"): ("other", "z")}],
)
def test_rename_keys_drops_the_nodes_it_empties(ref: Any, tb: Any, mapping: dict[Any, Any]) -> None:
    def run(lib: Any) -> list[Any]:
        source = (
            {"raw": {"deep": {"p": torch.zeros(2)}}}
            if ("raw", "deep", "p") in mapping
            else {"raw": {"p": torch.zeros(2)}}
        )
        return _keys(lib.TensorDict({**source, "e": {}}, [2]).rename_keys(mapping))

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


SPLITS = {
    "lists": lambda td: td.split_keys(["a"], [("n", "c")]),
    "dict_renames": lambda td: td.split_keys({"a": "x", ("n", "c"): ("m", "y")}),
    "callable": lambda td: td.split_keys(lambda key, value: value.ndim == 2),
    "callable_after_list": lambda td: td.split_keys(["a"], lambda key, value: True),
    "lenient_missing": lambda td: td.split_keys(["zz", "a"], strict=False),
    "reproduce_struct": lambda td: td.split_keys(["a"], reproduce_struct=True),
    "whole_node": lambda td: td.split_keys(["n"]),
    "non_tensor_by_name": lambda td: td.split_keys(["s"]),
}


@pytest.mark.parametrize("case", sorted(SPLITS))
def test_split_keys(ref: Any, tb: Any, case: str) -> None:
    mine, theirs = _both(ref, tb, lambda lib: [_keys(out) for out in SPLITS[case](_sample(lib))])
    assert mine == theirs


def test_split_keys_callable_sees_tensor_leaves_by_path(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> list[Any]:
        seen: list[Any] = []
        _sample(lib).split_keys(lambda key, value: seen.append((key, tuple(value.shape))) or False)
        return seen

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs == [(("a",), (2,)), (("b",), (2,)), (("n", "c"), (2,)), (("n", "d"), (2, 3))]


def test_split_keys_inplace_returns_itself_last(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> tuple[bool, list[Any]]:
        td = _sample(lib)
        outs = td.split_keys([("n", "c"), ("n", "d")], inplace=True)
        return outs[-1] is td, [_keys(o) for o in outs]

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs
    assert mine[0] is True


def test_split_keys_missing_keys(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        with pytest.raises(KeyError, match="zz"):
            _sample(lib).split_keys(["zz"])
        with pytest.raises(KeyError, match='"a"'):  # a key an earlier set took is missing for the next one
            _sample(lib).split_keys(["a"], ["a"])
    mine, theirs = _both(
        ref, tb, lambda lib: _sample(lib).split_keys(["zz", "a"], strict=False, default=torch.full((2,), 7.0))[0]
    )
    assert _keys(mine) == _keys(theirs) == ["a", "zz"]
    assert torch.equal(mine["zz"], theirs["zz"])


def test_non_tensor_data_where_picks_per_element(ref: Any, tb: Any) -> None:
    mask = torch.tensor([True, False, True])

    def run(lib: Any) -> tuple[str, list[Any], str]:
        a, b = lib.NonTensorData("a", batch_size=[3]), lib.NonTensorData("b", batch_size=[3])
        out = a.where(mask, b)
        same = a.where(mask, lib.NonTensorData("a", batch_size=[3]))
        return type(out).__name__, out.tolist(), type(same).__name__

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs == ("NonTensorStack", ["a", "b", "a"], "NonTensorData")


def test_non_tensor_items_is_a_tuple(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> tuple[type, list[Any], list[Any]]:
        td = lib.TensorDict(a=torch.zeros(2), s="x", n={"t": "y"}, batch_size=[2])
        return (
            type(td.non_tensor_items()),
            [k for k, _ in td.non_tensor_items()],
            [(k, v.data) for k, v in td.non_tensor_items(True)],
        )

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


@pytest.mark.parametrize("op", ["norm", "sum", "mean"])
def test_reductions_take_key_transform(ref: Any, tb: Any, op: str) -> None:
    def run(lib: Any) -> list[Any]:
        td = lib.TensorDict(a=torch.full((3, 4), 2.0), b=lib.TensorDict(c=torch.ones(3)), batch_size=[3])
        out = getattr(td, op)(key_transform=lambda key: f"{key}_x")
        return [(k, out[k].tolist()) for k in out.keys(True, True)]

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_update_inplace_takes_entries_as_keywords(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> list[float]:
        td = lib.TensorDict(a=torch.ones(2), b=torch.ones(2), batch_size=[2])
        td.update_(a=torch.zeros(2))
        td.update_({"b": torch.full((2,), 3.0)}, a=torch.full((2,), 5.0))
        return td["a"].tolist() + td["b"].tolist()

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs == [5.0, 5.0, 3.0, 3.0]
    with pytest.raises(KeyError):
        tb.TensorDict(a=torch.ones(2), batch_size=[2]).update_(zz=torch.zeros(2))


def test_timeit(ref: Any, tb: Any) -> None:
    for lib in (ref, tb):
        timeit = __import__(f"{lib.__name__}.utils", fromlist=["timeit"]).timeit
        timeit.erase()

        @timeit("dropin-step")
        def step() -> int:
            return 3

        assert step() == 3
        with timeit("dropin-step"):
            pass
        mean, total, count = timeit._REG["dropin-step"]
        assert count == 2
        assert total >= mean >= 0.0
        timeit.erase()
        assert timeit._REG["dropin-step"] == [0.0, 0.0, 0]


def test_maybe_to_stack(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> list[Any]:
        one = lib.NonTensorData("a", batch_size=[2, 2]).maybe_to_stack()
        bare = lib.NonTensorData("a")
        stack = lib.NonTensorStack("x", "y").maybe_to_stack()
        return [
            type(one).__name__,
            one.tolist(),
            one.batch_size,
            bare.maybe_to_stack() is bare,
            type(stack).__name__,
            stack.tolist(),
        ]

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_lazy_stack_names_its_dim(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> tuple[list[Any], torch.Size]:
        s = lib.lazy_stack([lib.TensorDict(a=torch.zeros(2), batch_size=[2])] * 3, dim=1, stack_dim_name="s")
        return s.names, s.batch_size

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs == ([None, "s"], torch.Size([2, 3]))


def test_reprs_of_leaves(ref: Any, tb: Any) -> None:
    def run(lib: Any) -> list[str]:
        return [
            repr(lib.MemoryMappedTensor.from_tensor(torch.arange(3.0))),
            repr(lib.MemoryMappedTensor.from_tensor(torch.zeros(2, 3))[1:]),
            repr(lib.NonTensorData("a", batch_size=[2])),
            repr(lib.NonTensorData(["a"])),
            repr(lib.MetaData("m")),
            repr(lib.NonTensorStack("a", "b")),
        ]

    mine, theirs = _both(ref, tb, run)
    assert mine == theirs


def test_error_messages(ref: Any, tb: Any) -> None:
    import dataclasses

    def messages(lib: Any) -> list[str]:
        td = lib.TensorDict
        utils = __import__(f"{lib.__name__}.utils", fromlist=["assert_close"])

        @lib.tensorclass(frozen=True)
        class Frozen:
            a: torch.Tensor

        out = []
        for call, kind in (
            (lambda: lib.MetaData[str](1), TypeError),
            (
                lambda: setattr(Frozen(a=torch.zeros(2), batch_size=[2]), "a", torch.ones(2)),
                dataclasses.FrozenInstanceError,
            ),
            (lambda: td(a=torch.zeros(2), batch_size=[2]) + td(b=torch.zeros(2), batch_size=[2]), KeyError),
            (
                lambda: utils.assert_close(td(a=torch.zeros(2), batch_size=[2]), td(a=torch.ones(2), batch_size=[2])),
                AssertionError,
            ),
        ):
            with pytest.raises(kind) as info:
                call()
            out.append(str(info.value))
        return out

    mine, theirs = _both(ref, tb, messages)
    assert mine == theirs
