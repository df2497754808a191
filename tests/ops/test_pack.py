"""``td.pack()`` and ``PackLayout``: columns, dims, views, layouts, nested nodes, tensorclasses and refusals."""

from __future__ import annotations

import pytest
import torch

from tensorbatch import NonTensorData, PackLayout, TensorDict, lazy_stack, tensorclass


def _td() -> TensorDict:
    return TensorDict(
        p=torch.arange(5.0), v=torch.arange(15.0).view(5, 3), n={"s": torch.arange(45.0).view(5, 3, 3)}, batch_size=[5]
    )


def test_columns_follow_sorted_keys():
    td = _td()
    flat, layout = td.pack()
    assert flat.shape == (5, 13) and flat.is_contiguous()
    assert layout.keys == (("n", "s"), "p", "v") and layout.offsets == (0, 9, 10) and layout.numel == 13
    assert layout.shapes == (torch.Size([3, 3]), torch.Size([]), torch.Size([3]))
    assert torch.equal(flat[:, :9], td["n", "s"].flatten(1)) and torch.equal(flat[:, 9], td["p"])
    assert torch.equal(flat[:, 10:], td["v"])


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_unpack_inverts_pack_for_any_dim(dim):
    td = TensorDict(a=torch.randn(2, 3, 4), b=torch.randn(2, 3), batch_size=[2, 3])
    flat, layout = td.pack(dim)
    assert flat.shape[dim] == 5 and flat.is_contiguous() and layout.dim == (dim if dim < 0 else dim - 3)
    out = layout.unpack(flat)
    assert out.batch_size == (2, 3) and torch.equal(out["a"], td["a"]) and torch.equal(out["b"], td["b"])


def test_unpack_gives_views_and_takes_new_batch_dims():
    flat, layout = _td().pack()
    out = layout.unpack(flat)
    assert out["p"].data_ptr() == flat.data_ptr() + 9 * flat.element_size()
    picked = layout.unpack(flat.index_select(0, torch.tensor([0, 2])))
    assert picked.batch_size == (2,) and picked["v"].tolist() == [[0.0, 1.0, 2.0], [6.0, 7.0, 8.0]]
    batched = layout.unpack(flat.expand(4, 5, 13))
    assert batched.batch_size == (4, 5) and batched["n", "s"].shape == (4, 5, 3, 3)


def test_layout_is_a_frozen_hashable_value():
    _, a = _td().pack()
    _, b = _td().pack(1)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.dim = 0  # type: ignore[misc]
    built = PackLayout(keys=("x", "y"), shapes=([2], ()))
    assert built.shapes == (torch.Size([2]), torch.Size([])) and built.offsets == (0, 2) and built.numel == 3


def test_packing_into_a_layout_reorders_and_checks():
    td = _td()
    _, layout = td.pack()
    shuffled = TensorDict(v=td["v"], n={"s": td["n", "s"]}, p=td["p"], batch_size=[5])
    assert torch.equal(shuffled.pack(layout=layout)[0], td.pack()[0])
    custom = PackLayout(keys=("v", "p", ("n", "s")), shapes=([3], [], [3, 3]))
    flat, same = td.pack(layout=custom)
    assert same.keys == custom.keys and same.offsets == (0, 3, 4) and torch.equal(flat[:, :3], td["v"])
    with pytest.raises(KeyError, match="differ from the layout's keys"):
        td.exclude("p").pack(layout=layout)
    with pytest.raises(ValueError, match="feature shapes differ"):
        td.set("v", torch.zeros(5, 4)).pack(layout=layout)
    with pytest.raises(ValueError, match="with a layout packed along dim -1"):
        td.pack(0, layout=layout)


def test_nested_batch_dims_are_kept():
    td = TensorDict(a=torch.zeros(2), n=TensorDict(x=torch.ones(2, 3, 4), batch_size=[2, 3]), batch_size=[2])
    flat, layout = td.pack()
    assert layout.nested == ((("n"), torch.Size([3]), None),) and flat.shape == (2, 13)
    out = layout.unpack(flat)
    assert out["n"].batch_size == (2, 3) and torch.equal(out["n", "x"], td["n", "x"])


@tensorclass
class _Pair:
    x: torch.Tensor
    y: torch.Tensor


@tensorclass
class _Tagged:
    x: torch.Tensor
    tag: str


def test_tensorclasses_come_back_with_their_class():
    pair = _Pair(x=torch.zeros(4, 2), y=torch.ones(4), batch_size=[4])
    flat, layout = pair.pack()
    assert layout.cls is _Pair and type(layout.unpack(flat)) is _Pair
    assert torch.equal(layout.unpack(flat).x, pair.x)
    td = TensorDict(a=torch.zeros(4), pair=pair, batch_size=[4])
    flat, layout = td.pack()
    assert layout.nested == (("pair", torch.Size([]), _Pair),) and type(layout.unpack(flat)["pair"]) is _Pair
    with pytest.raises(TypeError, match="non-tensor entry 'tag'"):
        _Tagged(x=torch.zeros(2), tag="t", batch_size=[2]).pack()


def test_lazy_stacks_pack_as_dense():
    stack = lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(2))])
    flat, layout = stack.pack()
    assert flat.tolist() == [[0.0, 0.0], [1.0, 1.0]] and layout.keys == ("a",)
    with pytest.raises(RuntimeError, match="members have different keys"):
        lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(b=torch.ones(2))]).pack()


def test_refusals_name_the_key():
    with pytest.raises(TypeError, match=r"different dtypes: torch.float32 and torch.int64 at 'b'"):
        TensorDict(a=torch.zeros(2), b=torch.zeros(2, dtype=torch.long), batch_size=[2]).pack()
    with pytest.raises(TypeError, match=r"non-tensor entry \('n', 's'\)"):
        TensorDict(a=torch.zeros(2), n={"s": NonTensorData("x")}, batch_size=[2]).pack()
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        TensorDict(a=torch.zeros(2), batch_size=[2]).pack(2)


def test_empty_and_unpack_errors():
    flat, layout = TensorDict(batch_size=[3]).pack()
    assert flat.shape == (3, 0) and layout.numel == 0 and layout.unpack(flat).batch_size == (3,)
    _, layout = _td().pack()
    with pytest.raises(ValueError, match="expected 13 entries along dim -1"):
        layout.unpack(torch.zeros(5, 12))
    with pytest.raises(IndexError, match="out of range"):
        layout.unpack(torch.zeros(()))
