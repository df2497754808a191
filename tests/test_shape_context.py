"""Shape operations, ``to`` and ``flatten_keys``/``unflatten_keys`` as context managers.

Inside ``with td.permute(1, 0) as t:`` the block works on ``t``; on exit the inverse operation runs on ``t``
and its entries replace ``td``'s (new keys are added, deleted keys stay); a block that raises writes nothing.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack, tensorclass


def _td(*batch: int) -> TensorDict:
    n = 1
    for size in batch:
        n *= size
    return TensorDict(
        {"a": torch.arange(float(n)).reshape(batch), "nested": {"c": torch.zeros(*batch, 2)}}, batch_size=batch
    )


@pytest.mark.parametrize(
    ("op", "batch"),
    [
        (lambda td: td.unsqueeze(0), (2, 3)),
        (lambda td: td.unsqueeze(-1), (2, 3)),
        (lambda td: td.squeeze(1), (2, 1, 3)),
        (lambda td: td.view(-1), (2, 3)),
        (lambda td: td.transpose(0, 1), (2, 3)),
        (lambda td: td.swapaxes(1, 0), (2, 3)),
        (lambda td: td.swapdims(0, 1), (2, 3)),
        (lambda td: td.permute(2, 0, 1), (2, 3, 4)),
        (lambda td: td.movedim(0, -1), (2, 3, 4)),
        (lambda td: td.moveaxis(2, 0), (2, 3, 4)),
        (lambda td: td.flip(0), (2, 3)),
        (lambda td: td.fliplr(), (2, 3)),
        (lambda td: td.flipud(), (2, 3)),
        (lambda td: td.roll((1, -1), (0, 1)), (2, 3)),
        (lambda td: td.rot90(), (3, 3)),
        (lambda td: td.rot90(k=3, dims=(1, 0)), (2, 3)),
        (lambda td: td.atleast_3d(), (3,)),
        (lambda td: td.flatten(), (2, 3, 4)),
        (lambda td: td.flatten(1, 2), (2, 3, 4)),
        (lambda td: td.unflatten(1, (3, 1)), (2, 3)),
        (lambda td: td.to(torch.float64), (2, 3)),
    ],
    ids=[
        "unsqueeze", "unsqueeze_neg", "squeeze", "view", "transpose", "swapaxes", "swapdims", "permute", "movedim",
        "moveaxis", "flip", "fliplr", "flipud", "roll", "rot90", "rot90_k3", "atleast_3d", "flatten", "flatten_tail",
        "unflatten", "to",
    ],
)  # fmt: skip
def test_block_writes_back(op, batch):
    td = _td(*batch)
    a0, nested0 = td["a"], td["nested"]
    expected = td["a"] * 2 + 1
    with op(td) as t:
        t["a"] = t["a"] * 2 + 1
        t["nested", "c"] = t["nested", "c"] + 1
        t["new"] = torch.ones(t.batch_size)
    assert td.batch_size == torch.Size(batch)
    assert torch.equal(td["a"], expected)
    assert td["a"] is not a0 and torch.equal(a0, torch.arange(float(a0.numel())).reshape(batch))  # replaced
    assert td["nested"] is nested0  # nested TensorDicts are updated, not replaced
    assert torch.equal(td["nested", "c"], torch.ones(*batch, 2))
    assert torch.equal(td["new"], torch.ones(batch))
    assert td["a"].dtype == torch.float32


def test_the_result_is_what_the_block_gets():
    td = _td(2, 3)
    result = td.permute(1, 0)
    with result as t:
        assert t is result
        assert t.batch_size == torch.Size([3, 2])


def test_deleted_keys_stay():
    td = _td(2, 3)
    with td.unsqueeze(0) as t:
        del t["a"]
        del t["nested"]
    assert set(td.keys(True, True)) == {"a", ("nested", "c")}


def test_a_raising_block_writes_nothing():
    td = _td(2, 3)
    a0 = td["a"]

    def block():
        with td.permute(1, 0) as t:
            t["a"] = t["a"] + 1
            t["new"] = torch.zeros(3, 2)
            raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        block()
    assert td["a"] is a0
    assert "new" not in td.keys()


def test_a_raising_block_still_undoes_a_lock():
    td = _td(2, 3)
    with pytest.raises(ValueError, match="inside"), td.lock_():
        raise ValueError("inside")
    assert not td.is_locked


def test_squeeze_without_dim_raises_on_exit():
    td = _td(2, 1, 3)
    a0 = td["a"]
    with pytest.raises(RuntimeError, match=r"squeeze\(\) without a dim"), td.squeeze() as t:
        t["a"] = t["a"] + 1
    assert td["a"] is a0


def test_squeeze_of_a_dim_not_of_size_one():
    td = _td(2, 3)
    with td.squeeze(0) as t:
        t["a"] = t["a"] + 1
    assert torch.equal(td["a"], torch.arange(6.0).reshape(2, 3) + 1)  # t is td itself


def test_locked_source():
    td = _td(2, 3).lock_()
    with td.permute(1, 0) as t:
        assert t.is_locked
        t["a"].add_(1)  # in place: allowed
    assert torch.equal(td["a"], torch.arange(6.0).reshape(2, 3) + 1)
    with pytest.raises(RuntimeError, match="locked"), td.unsqueeze(0) as t:
        t["a"] = t["a"] + 1
    with pytest.raises(RuntimeError, match="locked"), td.to(torch.float64):
        pass
    assert td.is_locked
    assert td["a"].dtype == torch.float32


def test_to_restores_dtypes_of_existing_keys_only():
    td = TensorDict({"a": torch.zeros(2), "i": torch.ones(2, dtype=torch.long)}, [2])
    with td.to(torch.float64) as t:
        assert t["i"].dtype == torch.float64
        t["a"] = t["a"].to(torch.float16) + 1
        t["new"] = torch.ones(2, dtype=torch.float64)
    assert td["a"].dtype == torch.float32 and td["a"].tolist() == [1.0, 1.0]
    assert td["i"].dtype == torch.long
    assert td["new"].dtype == torch.float64


def test_to_device_only_keeps_new_dtypes():
    td = TensorDict({"a": torch.zeros(2)}, [2])
    with td.to("cpu") as t:
        t["a"] = t["a"].to(torch.float16)
    assert td["a"].dtype == torch.float16


def test_flatten_keys():
    td = TensorDict({"a": {"b": torch.zeros(2)}, "c": torch.zeros(2)}, [2])
    with td.flatten_keys() as t:
        assert sorted(t.keys()) == ["a.b", "c"]
        t["a.b"] = t["a.b"] + 1
        t["x.y"] = torch.ones(2)
    assert set(td.keys(True, True)) == {("a", "b"), "c", ("x", "y")}
    assert td["a", "b"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_flatten_keys_separator(how):
    td = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
    with td.flatten_keys("/") if how == "positional" else td.flatten_keys(separator="/") as t:
        t["a/b"] = t["a/b"] + 1
    assert list(td.keys(True, True)) == [("a", "b")]
    assert td["a", "b"].tolist() == [1.0, 1.0]


def test_unflatten_keys():
    td = TensorDict({"a.b": torch.zeros(2)}, [2])
    with td.unflatten_keys() as t:
        t["a", "b"] = t["a", "b"] + 1
        t["x", "y"] = torch.ones(2)
    assert sorted(td.keys()) == ["a.b", "x.y"]
    assert td["a.b"].tolist() == [1.0, 1.0]


def test_nested_blocks():
    td = _td(2, 3)
    with td.unsqueeze(0) as t, t.permute(0, 2, 1) as u:
        u["a"] = u["a"] * 10
    assert torch.equal(td["a"], torch.arange(6.0).reshape(2, 3) * 10)


def test_a_freed_source_raises():
    result = _td(2, 3).unsqueeze(0)
    gc.collect()
    with pytest.raises(RuntimeError, match=r"unsqueeze\(\) was called on no longer exists"), result:
        pass


def test_the_result_does_not_keep_its_source_alive():
    td = _td(2, 3)
    ref = weakref.ref(td)
    result = td.permute(1, 0)
    del td
    gc.collect()
    assert ref() is None
    assert result.batch_size == torch.Size([3, 2])


def test_inplace_flatten_is_undone_in_place():
    td = _td(2, 3, 4)
    a0 = td["a"]
    with td.flatten(0, 1, inplace=True) as t:
        assert t is td and td.batch_size == torch.Size([6, 4])
        t["a"] = t["a"] + 1
    assert td.batch_size == torch.Size([2, 3, 4])
    assert torch.equal(td["a"], a0 + 1)
    with td.unflatten(-1, (2, 2), inplace=True) as t:
        assert t is td and td.batch_size == torch.Size([2, 3, 2, 2])
    assert td.batch_size == torch.Size([2, 3, 4])


def test_inplace_flatten_keys_is_undone_in_place():
    td = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
    with td.flatten_keys(inplace=True) as t:
        assert t is td and list(td.keys()) == ["a.b"]
    assert list(td.keys(True, True)) == [("a", "b")]


def test_lazy_stack():
    td = lazy_stack([TensorDict({"a": torch.arange(3.0) + i}, [3]) for i in range(2)])
    with td.permute(1, 0) as t:
        t["a"] = t["a"] * 10
    assert isinstance(td, LazyStackedTensorDict)
    assert td["a"].tolist() == [[0.0, 10.0, 20.0], [10.0, 20.0, 30.0]]


def test_tensorclass():
    @tensorclass
    class Pair:
        x: torch.Tensor

    pair = Pair(x=torch.zeros(2, 3), batch_size=[2, 3])
    with pair.permute(1, 0) as p:
        p.x = p.x + torch.arange(2.0)
    assert pair.x.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    "op",
    [lambda td: td.permute(1, 0), lambda td: td.unsqueeze(0), lambda td: td.to(torch.float64)],
    ids=["permute", "unsqueeze", "to"],
)
def test_a_block_in_a_compiled_function_writes_back(op):
    def fn(td):
        with op(td) as t:
            t["a"] = t["a"] + 1
        return td["a"] * 2

    td = _td(2, 3)
    out = torch.compile(fn, fullgraph=True, backend="eager")(td)  # (fullgraph: recording breaks no graph)
    expected = torch.arange(6.0).reshape(2, 3) + 1
    assert torch.equal(td["a"], expected)
    assert torch.equal(out, expected * 2)


def test_flatten_keys_in_a_compiled_function():
    def fn(td):
        with td.flatten_keys() as t:
            t["nested.c"] = t["nested.c"] + 1
        return td["nested", "c"].sum()

    out = torch.compile(fn, fullgraph=True, backend="eager")(_td(2, 3))
    assert out.item() == 12.0


def test_inplace_flatten_of_the_last_dims_stays_flat_and_warns():
    td = _td(2, 3, 4)
    match = r"leaves the batch size flattened \(\[2, 12\]\)"
    with pytest.warns(FutureWarning, match=match) as caught, td.flatten(1, 2, inplace=True):
        pass
    assert caught[0].filename == __file__
    assert td.batch_size == torch.Size([2, 12])


def test_inplace_flatten_keys_with_a_dotted_key_keeps_it():
    td = TensorDict({"a": {"b": torch.zeros(2)}, "c.d": torch.ones(2)}, [2])
    with td.flatten_keys(inplace=True):
        pass
    assert set(td.keys(True, True)) == {"c.d", "a.b", ("a", "b"), ("c", "d")}  # as tensordict: no exact undo


def test_hdf5_source_without_weak_references(tmp_path):
    pytest.importorskip("h5py")
    h5 = TensorDict({"x": torch.zeros(3, 4)}, [3, 4]).to_h5(str(tmp_path / "data.h5"))
    try:
        with pytest.raises(TypeError):
            weakref.ref(h5)  # (the record holds it itself)
        with h5.permute(1, 0) as t:
            t["x"] = t["x"] + 1
            t["y"] = torch.ones(4, 3)
        assert torch.equal(h5["x"], torch.ones(3, 4))
        assert h5["y"].shape == torch.Size([3, 4])
    finally:
        h5.close()
