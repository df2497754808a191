"""Differential tests, ``UnbatchedTensor``: the same ops on a TensorDict holding one, in both libraries.

Each case builds ``td`` (batch size ``[2, 5]``: an unbatched ``"u"`` of shape ``[3, 4]``, a plain ``"b"``
and a nested ``"n"`` holding another unbatched ``"v"``), runs the op and compares a summary of the
result: for every leaf its class name, shape, dtype, values and (for unbatched leaves) ``batch_size``,
plus the batch size of every node. Where tensordict 0.15.3 differs on purpose (README, Differences),
the case is a strict xfail.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.differential


def _td(lib: Any) -> Any:
    u = lib.UnbatchedTensor(torch.arange(12.0).reshape(3, 4))
    v = lib.UnbatchedTensor(torch.tensor([1, 2, 3]))
    return lib.TensorDict(
        u=u,
        b=torch.arange(30.0).reshape(2, 5, 3),
        n=lib.TensorDict(v=v, c=torch.ones(2, 5), batch_size=[2, 5]),
        batch_size=[2, 5],
    )


def summary(lib: Any, value: Any) -> Any:
    """What is compared: the nodes' batch sizes, the leaves' classes, shapes, values and batch sizes."""
    if isinstance(value, (tuple, list)):
        return [summary(lib, v) for v in value]
    if isinstance(value, lib.TensorDictBase):
        out: dict[str, Any] = {"batch_size": tuple(value.batch_size)}
        for key in value.keys():  # (iterating a TensorDict walks its batch dim)
            out[key] = summary(lib, value.get(key))
        return out
    if isinstance(value, torch.Tensor):
        unbatched = isinstance(value, lib.UnbatchedTensor)
        return {
            "cls": type(value).__name__,
            "shape": tuple(value.shape),
            "dtype": value.dtype,
            "values": torch.Tensor(value.detach()).tolist() if not unbatched else value.detach().tolist(),
            "batch_size": tuple(value.batch_size) if unbatched else None,
        }
    return value


MASK = torch.tensor([[True, False, True, True, False], [False, True, True, False, True]])

OPS = {
    # indexing, every form
    "int": lambda lib, td: td[1],
    "int_int": lambda lib, td: td[1, 3],
    "slice": lambda lib, td: td[:1],
    "slice_int": lambda lib, td: td[:, 2],
    "step": lambda lib, td: td[:, ::2],
    "ellipsis": lambda lib, td: td[...],
    "none": lambda lib, td: td[None],
    "none_int": lambda lib, td: td[None, 0],
    "long": lambda lib, td: td[torch.tensor([1, 0, 1])],
    "list": lambda lib, td: td[[0, 1]],
    "bool_dim0": lambda lib, td: td[torch.tensor([True, False])],
    "bool_full": lambda lib, td: td[MASK],
    "int_list": lambda lib, td: td[0, [1, 2]],
    # shape ops
    "reshape": lambda lib, td: td.reshape(10),
    "reshape_-1": lambda lib, td: td.reshape(-1, 2),
    "view": lambda lib, td: td.view(10),
    "flatten": lambda lib, td: td.flatten(0, 1),
    "unflatten": lambda lib, td: td.unflatten(1, (5, 1)),
    "unsqueeze": lambda lib, td: td.unsqueeze(0),
    "unsqueeze_-1": lambda lib, td: td.unsqueeze(-1),
    "squeeze": lambda lib, td: td.unsqueeze(1).squeeze(1),
    "permute": lambda lib, td: td.permute(1, 0),
    "transpose": lambda lib, td: td.transpose(0, 1),
    "expand": lambda lib, td: td.expand(3, 2, 5),
    "repeat": lambda lib, td: td.repeat(2, 1),
    "repeat_interleave": lambda lib, td: td.repeat_interleave(2, dim=0),
    "roll": lambda lib, td: td.roll(1, 0),
    "flip": lambda lib, td: td.flip(0),
    "gather": lambda lib, td: td.gather(1, torch.tensor([[0, 2, 4], [1, 1, 3]])),
    "masked_select": lambda lib, td: td.masked_select(MASK),
    "unbind": lambda lib, td: td.unbind(1),
    "split": lambda lib, td: td.split([2, 3], 1),
    "chunk": lambda lib, td: td.chunk(2, 0),
    # stacks
    "stack": lambda lib, td: torch.stack([td, td], 0),
    "stack_1": lambda lib, td: torch.stack([td, td], 1),
    "cat": lambda lib, td: torch.cat([td, td], 0),
    "cat_1": lambda lib, td: torch.cat([td, td], 1),
    "pad": lambda lib, td: lib.pad(td, [0, 1, 0, 0]),
    "pad_sequence": lambda lib, td: lib.pad_sequence([td[0], td[1, :3]]),
    # lazy stacks
    "lazy_stack": lambda lib, td: lib.lazy_stack([td, td.clone()]),
    "lazy_stack_1": lambda lib, td: lib.lazy_stack([td, td], 1),
    "lazy_get": lambda lib, td: lib.lazy_stack([td, td])["u"],
    "lazy_index_member": lambda lib, td: lib.lazy_stack([td, td])[1],
    "lazy_index_inner": lambda lib, td: lib.lazy_stack([td, td])[:, 0],
    "lazy_reshape": lambda lib, td: lib.lazy_stack([td, td]).reshape(-1),
    "lazy_add": lambda lib, td: lib.lazy_stack([td, td]) + 1,
    "lazy_dense": lambda lib, td: lib.lazy_stack([td, td]).contiguous(),
    "lazy_unbind": lambda lib, td: lib.lazy_stack([td, td]).unbind(1),
    "lazy_set": lambda lib, td: lib.lazy_stack([td, td]).set("w", lib.UnbatchedTensor(torch.zeros(2))),
    # value ops
    "add": lambda lib, td: td + 1,
    "mul_td": lambda lib, td: td * td,
    "exp": lambda lib, td: td.exp(),
    "clone": lambda lib, td: td.clone(),
    "to_dtype": lambda lib, td: td.to(torch.float64),
    "to_device": lambda lib, td: td.to("cpu"),
    "float": lambda lib, td: td.float(),
    "int_cast": lambda lib, td: td.int(),
    "apply": lambda lib, td: td.apply(lambda x: x * 2),
    "apply_two": lambda lib, td: td.apply(lambda x, y: x + y, td),
    "apply_batch_size": lambda lib, td: td.apply(lambda x: x[0], batch_size=[5]),
    "named_apply": lambda lib, td: td.named_apply(lambda k, x: x + 1),
    "zero_": lambda lib, td: td.zero_(),
    "mul_": lambda lib, td: td.mul_(2),
    "detach": lambda lib, td: td.detach(),
    "eq": lambda lib, td: td == td.clone(),
    "zeros_like": lambda lib, td: torch.zeros_like(td),
    # reductions over batch dims leave it alone
    "sum": lambda lib, td: td.sum(),
    "sum_0": lambda lib, td: td.sum(0),
    "mean_1": lambda lib, td: td.mean(dim=1),
    "std_0": lambda lib, td: td.std(0),
    # keys, batch size, construction
    "select": lambda lib, td: td.select("u"),
    "exclude": lambda lib, td: td.exclude("b"),
    "items": lambda lib, td: sorted(type(v).__name__ for _, v in td.items(True, True)),
    "numel": lambda lib, td: td.numel(),
    "get_nested": lambda lib, td: td["n", "v"],
    "set_nested": lambda lib, td: td.set(("x", "w"), lib.UnbatchedTensor(torch.zeros(7))),
    "setitem": lambda lib, td: td.__setitem__("w", lib.UnbatchedTensor(torch.zeros(7))) or td,
    "set_plain_mismatch": lambda lib, td: td.set("w", torch.zeros(7)),
    "set_": lambda lib, td: td.set_("u", lib.UnbatchedTensor(torch.ones(3, 4))),
    "set__plain": lambda lib, td: td.set_("u", torch.ones(3, 4)),
    "update": lambda lib, td: td.update({"u": lib.UnbatchedTensor(torch.ones(3, 4))}),
    "update_": lambda lib, td: td.update_({"u": torch.ones(3, 4)}),
    "setitem_index": lambda lib, td: td.__setitem__(0, td[0].apply(lambda x: x + 1)) or td,
    "setitem_index_lacking": lambda lib, td: (
        td.__setitem__(
            0, lib.TensorDict(b=torch.ones(5, 3), n=lib.TensorDict(c=torch.zeros(5), batch_size=[5]), batch_size=[5])
        )
        or td
    ),
    "ctor_no_batch_size": lambda lib, td: lib.TensorDict(u=lib.UnbatchedTensor(torch.zeros(3, 4)), b=torch.zeros(2, 5)),
    "auto_batch_size": lambda lib, td: lib.TensorDict(
        u=lib.UnbatchedTensor(torch.zeros(3, 4)), b=torch.zeros(2, 5)
    ).auto_batch_size_(),
    "batch_size_setter": lambda lib, td: setattr(td, "batch_size", [2]) or td,
    "setitem_scalar": lambda lib, td: td.__setitem__(0, 7.0) or td,
    "max_0": lambda lib, td: td.max(0),
    "flatten_keys": lambda lib, td: td.flatten_keys(),
    "bytes": lambda lib, td: td.bytes(),
    "to_dict": lambda lib, td: summary(lib, td.to_dict()["n"]["v"]),
    "attrs": lambda lib, td: summary(lib, td.attrs()["u"]),
    "to_attrs": lambda lib, td: td.apply(lambda x: x.to(torch.float64)).to(td.attrs()),
    "pickle": lambda lib, td: __import__("pickle").loads(__import__("pickle").dumps(td)),
    # the leaf itself
    "leaf_add": lambda lib, td: td["u"] + 1,
    "leaf_torch_add": lambda lib, td: torch.add(td["u"], torch.ones(4)),
    "leaf_sum": lambda lib, td: td["u"].sum(0),
    "leaf_index": lambda lib, td: td["u"][1:],
    "leaf_unbind": lambda lib, td: td["u"].unbind(0),
    "leaf_reshape": lambda lib, td: td["u"].reshape(2, 6),
    "leaf_stack": lambda lib, td: torch.stack([td["u"], td["u"]]),
    "leaf_to": lambda lib, td: td["u"].to(torch.int64),
    "leaf_repr": lambda lib, td: repr(td["n", "v"]),
    "leaf_item": lambda lib, td: td["u"][1, 2].item(),
    "leaf_tolist": lambda lib, td: td["n", "v"].tolist(),
    "leaf_bare": lambda lib, td: lib.UnbatchedTensor([1.0, 2.0]),
    "leaf_batch_size_arg": lambda lib, td: lib.UnbatchedTensor(torch.zeros(2), batch_size=[4]),
}

# tensordict 0.15.3 behaviour that we change on purpose (README, Differences)
DIFFERENT = {
    "pad": "pad stamps the unbatched entries with the padded batch size (tensordict keeps the old one)",
    "auto_batch_size": "a batch size change re-stamps the unbatched entries' batch_size (tensordict keeps the old one)",
    "batch_size_setter": "a batch size change re-stamps the unbatched entries' batch_size (tensordict keeps the old "
    "one)",
    "setitem_scalar": "td[idx] = scalar leaves unbatched entries alone (tensordict writes the scalar into the "
    "entry's own data at idx, as if it were batched)",
    "max_0": "max(dim) keeps unbatched entries in values and indices (tensordict drops them from values and "
    "puts them under an empty key in indices)",
    "bytes": "bytes() counts unbatched entries (tensordict 0.15.3 recurses without end)",
    "set__plain": "set_ copies a plain tensor into an unbatched entry, as update_ does (tensordict's set_ refuses "
    "it with a batch-size error, its update_ accepts it)",
}


def _run(lib: Any, op: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return summary(lib, op(lib, _td(lib)))
        except Exception as err:  # the error's type is compared
            return ("raised", type(err).__name__)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=DIFFERENT[name])) if name in DIFFERENT else name
        for name in OPS
    ],
)
def test_same_as_tensordict(ref: Any, tb: Any, name: str) -> None:
    assert _run(tb, OPS[name]) == _run(ref, OPS[name])


@pytest.mark.parametrize("writer", ["ref", "tb"])
def test_safetensors_files_cross(ref: Any, tb: Any, tmp_path: Any, writer: str) -> None:
    pytest.importorskip("safetensors")
    src, dst = (ref, tb) if writer == "ref" else (tb, ref)
    src.to_safetensors(_td(src), tmp_path / "f.safetensors")
    loaded = dst.from_safetensors(tmp_path / "f.safetensors")
    assert summary(dst, loaded) == summary(src, _td(src))


@pytest.mark.parametrize("other", ["same_object", "equal_copy", "different"])
def test_stacking_warns_when_the_storage_differs(ref, tb, other):
    def warned(lib):
        td = lib.TensorDict(a=torch.zeros(3), u=lib.UnbatchedTensor(torch.ones(2)), batch_size=[3])
        second = {"same_object": td, "equal_copy": td.clone(), "different": td.clone().apply(lambda x: x + 1)}[other]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            out = torch.stack([td, second])
        return out["u"].tolist(), [w.category.__name__ for w in record if "UnbatchedTensor" in str(w.message)]

    assert warned(tb) == warned(ref)
