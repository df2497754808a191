"""torch.compile(fullgraph=True) over the TensorDict API: zero graph breaks, one frame, eager's values (issue 15.3).

Every case runs on the ``eager`` and ``aot_eager`` backends; a representative subset also on ``inductor``.
A case is ``(make, fn)``: ``fn(make())`` is compiled and compared with eager on a fresh input
(see ``_compile_cases.check_fullgraph``). Each ``fn`` does at least one tensor op, so one graph means one frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _compile_cases import (
    SKIP_INDUCTOR,
    Labelled,
    Pair,
    State,
    check_fullgraph,
    make_labelled,
    make_lazy,
    make_pair,
    make_state,
    make_td,
    make_td2,
    make_with_text,
)
from torch import nn

from tensorbatch import LazyStackedTensorDict, MetaData, NonTensorData, TensorDict, lazy_stack, maybe_dense_stack

pytestmark = pytest.mark.slow

Case = tuple[Callable[[], Any], Callable[..., Any]]


def _set(td: Any, key: Any, value: Any) -> Any:
    td[key] = value
    return td


def _setattr(obj: Any, name: str, value: Any) -> Any:
    setattr(obj, name, value)
    return obj


def _iadd(td: Any, other: Any) -> Any:
    td += other
    return td


def _del(td: Any, key: Any) -> Any:
    del td[key]
    return td["a"] * 1


def _sum_of_a(td: Any) -> Any:
    out = 0
    for key in td.keys():  # (iterating keys() is the case)
        if key == "a":
            out = out + td[key].sum()
    return out


def _isub(td: Any, other: Any) -> Any:
    td -= other
    return td


def _imul(td: Any, other: Any) -> Any:
    td *= other
    return td


BUILD: dict[str, Case] = {
    "td": (make_td, lambda td: TensorDict({"x": td["a"] * 2, "y": {"z": td["nested", "b"]}}, batch_size=[4])),
    "td_batch_of_input": (make_td, lambda td: TensorDict({"x": td["a"] + 1}, batch_size=td.batch_size)),
    "td_kwargs": (make_td, lambda td: TensorDict(x=td["a"].exp(), batch_size=[4])),
    "tensorclass": (make_td, lambda td: Pair(obs=td["a"] * 2, reward=td["nested", "b"][:, 0], batch_size=[4])),
    "tensorclass_positional": (make_td, lambda td: Pair(td["a"] - 1, td["nested", "b"][:, 1], batch_size=[4])),
    "typed": (make_td, lambda td: State(obs=td["a"] * 2, reward=td["nested", "b"][:, 0], batch_size=[4])),
}

GET_SET: dict[str, Case] = {
    "get_plain": (make_td, lambda td: td["a"] + 1),
    "get_nested_tuple": (make_td, lambda td: td["nested", "b"] * 3),
    "get_nested_chain": (make_td, lambda td: td["nested"]["b"] - td.get(("nested", "b")).exp()),
    "get_method": (make_td, lambda td: td.get("a").sum(-1) + 1),
    "get_default": (make_td, lambda td: td.get("missing", td["a"]) * 2),
    "set_plain": (make_td, lambda td: td.set("c", td["a"] + 1)),
    "set_nested": (make_td, lambda td: td.set(("nested", "c"), td["a"] * 2)),
    "set_new_node": (make_td, lambda td: _set(td, ("new", "x"), td["a"].exp())),
    "setitem_key": (make_td, lambda td: _set(td, "c", td["a"].neg())),
    "set_inplace": (make_td, lambda td: td.set_("a", td["a"] * 0)),
    "setitem_row": (make_td, lambda td: _set(td, 0, td[1] * 2)),
    "setitem_slice": (make_td, lambda td: _set(td, slice(1, 3), td[:2] + 1)),
    "update": (make_td, lambda td: td.update({"c": td["a"] * 2, "nested": {"d": td["a"]}})),
    "select": (make_td, lambda td: td.select("a", ("nested", "b")) * 2),
    "exclude": (make_td, lambda td: td.exclude("a") * 2),
    "pop": (make_td, lambda td: td.pop("a") * 2),
    "del_nested": (make_td, lambda td: _del(td, ("nested", "b"))),
    "keys_loop": (make_td, _sum_of_a),
    "items_nested": (make_td, lambda td: sum(v.sum() for _, v in td.items(True, True))),
    "contains_nested": (make_td, lambda td: td["a"] * (2 if ("nested", "b") in td.keys(True) else 3)),
    "set_through_node": (make_td, lambda td: _set(td["nested"], "c", td["a"] * 2)),
    "flatten_keys": (make_td, lambda td: td.flatten_keys(".")["nested.b"] * 2),
    "unflatten_keys": (make_td, lambda td: td.flatten_keys(".").unflatten_keys(".") * 2),
    "set_at": (make_td, lambda td: td.set_at_("a", td["a"][0] * 0, 1)),
    "get_at": (make_td, lambda td: td.get_at("a", 1) * 2),
    "update_inplace": (make_td, lambda td: td.update_({"a": td["a"] * 2})),
    "empty_then_set": (make_td, lambda td: td.empty().set("x", td["a"] * 2)),
    "rename_key": (make_td, lambda td: td.rename_key_("a", "z") * 2),
}

INDEX: dict[str, Case] = {
    "int": (make_td, lambda td: td[0] * 2),
    "int_negative": (make_td, lambda td: td[-1] * 2),
    "slice": (make_td, lambda td: td[1:3] * 2),
    "slice_step": (make_td, lambda td: td[::2] * 2),
    "slice_open": (make_td, lambda td: td[1:] * 2),
    "tensor": (make_td, lambda td: td[torch.tensor([0, 2])] * 2),
    "tensor_repeats": (make_td, lambda td: td[torch.tensor([3, 3, 0])] * 2),
    "bool_mask": (make_td, lambda td: td[td["a"][:, 0] > 0] * 2),
    "ellipsis": (make_td2, lambda td: td[..., 1] * 2),
    "ellipsis_alone": (make_td, lambda td: td[...]["a"] * 2),
    "none": (make_td, lambda td: td[None] * 2),
    "tuple": (make_td2, lambda td: td[1, 1:3] * 2),
    "tuple_tensor": (make_td2, lambda td: td[:, torch.tensor([0, 3])] * 2),
    "tuple_none_slice": (make_td2, lambda td: td[None, :2, 1] * 2),
    "tuple_mask_2d": (make_td2, lambda td: td[td["nested", "b"] > 0] * 2),
    "list": (make_td, lambda td: td[[0, 2]] * 2),
    "range": (make_td, lambda td: td[range(2)] * 2),
    "ellipsis_none": (make_td, lambda td: td[..., None] * 2),
    "bool_tensor": (make_td, lambda td: td[torch.tensor([True, False, True, True])] * 2),
    "int_tensor_0d": (make_td, lambda td: td[torch.tensor(1)] * 2),
    "setitem_mask_number": (make_td, lambda td: _set(td, td["a"][:, 0] > 0, 0.0)),
    "setitem_mask_td": (make_td, lambda td: _set(td, td["a"][:, 0] > 0, td[td["a"][:, 0] > 0] * 0)),
    "setitem_tensor": (make_td, lambda td: _set(td, torch.tensor([0, 2]), td[torch.tensor([1, 3])])),
    "setitem_tuple": (make_td2, lambda td: _set(td, (slice(None), 1), td[:, 2] + 1)),
    "setitem_slice_number": (make_td, lambda td: _set(td, slice(0, 2), 0.0)),
    "masked_fill": (make_td, lambda td: td.masked_fill(td["a"][:, 0] > 0, 0.0)),
    "gather": (make_td, lambda td: torch.gather(td, 0, torch.tensor([0, 1]))),
}

POINTWISE: dict[str, Case] = {
    "add_scalar": (make_td, lambda td: td + 1),
    "radd_scalar": (make_td, lambda td: 1 + td),
    "rsub_scalar": (make_td, lambda td: 2 - td),
    "truediv_scalar": (make_td, lambda td: td / 2),
    "pow_scalar": (make_td, lambda td: td**2),
    "neg": (make_td, lambda td: -td),
    "add_td": (make_td, lambda td: td + td),
    "mul_td": (make_td, lambda td: td * (td + 1)),
    "sub_tensor_method": (make_td, lambda td: td.sub(td["a"][:, 0])),
    "mul_tensor_operator": (make_td, lambda td: td * td["nested", "b"][:, :1]),
    "add_tensor_operator": (make_td, lambda td: td + torch.tensor(0.5)),
    "tensor_radd_operator": (make_td, lambda td: td["nested", "b"][:, :1] + td),
    "tensor_rsub_operator": (make_td, lambda td: torch.tensor(0.5) - td),
    "tensor_rdiv_operator": (make_td, lambda td: torch.tensor(0.5) / (td.abs() + 1)),
    "lt_tensor_operator": (make_td, lambda td: td < torch.tensor(0.5)),
    "eq_tensor_operator": (make_td, lambda td: (td * 0) == torch.tensor(0.0)),
    # td <op> tensor: dynamo calls the tensor's reflected method (Tensor.__rsub__(tensor, td)...), Python-level
    # for these five
    "sub_tensor_operator": (make_td, lambda td: td - td["a"][:, 0]),
    "truediv_tensor_operator": (make_td, lambda td: td / torch.tensor(2.0)),
    "truediv_batch_tensor_operator": (make_td, lambda td: td / (td["a"][:, 0].abs() + 1)),
    "pow_tensor_operator": (make_td, lambda td: td.abs() ** torch.tensor(2.0)),
    "floordiv_tensor_operator": (make_td, lambda td: td // torch.tensor(0.3)),
    "mod_tensor_operator": (make_td, lambda td: td % torch.tensor(0.3)),
    "tensor_rpow_operator": (make_td, lambda td: torch.tensor(2.0) ** td),
    "tensor_rfloordiv_operator": (make_td, lambda td: torch.tensor(3.0) // (td.abs() + 1)),
    "tensor_rmod_operator": (make_td, lambda td: torch.tensor(3.0) % (td.abs() + 1)),
    "tensor_rmul_batch_operator": (make_td, lambda td: td["a"][:, 0] * td),
    "sub_inplace_operator": (make_td, lambda td: _isub(td, torch.tensor(0.5))),
    "chain_tensor_operators": (make_td, lambda td: (td - td["a"][:, 0]) / torch.tensor(2.0) ** torch.tensor(1.0)),
    "exp": (make_td, lambda td: td.exp()),
    "clamp": (make_td, lambda td: td.clamp(min=0)),
    "sigmoid": (make_td, lambda td: td.sigmoid()),
    "compare": (make_td, lambda td: (td > 0) & (td < 1)),
    "where": (make_td, lambda td: td.where(td["a"][:, 0] > 0, 0.0)),
    "add_inplace_scalar": (make_td, lambda td: td.add_(1.0)),
    "mul_inplace_scalar": (make_td, lambda td: td.mul_(2)),
    "add_inplace_td": (make_td, lambda td: td.add_(td * 2)),
    "mul_inplace_td": (make_td, lambda td: td.mul_(td)),
    # (an operand that is not a view of a leaf: written in place while read, eager's values depend on the order)
    "sub_inplace_tensor": (make_td, lambda td: td.sub_(torch.arange(4.0))),
    "iadd_scalar": (make_td, lambda td: _iadd(td, 1.0)),
    "imul_td": (make_td, lambda td: _imul(td, td)),
    "exp_inplace": (make_td, lambda td: td.exp_()),
    "clamp_inplace": (make_td, lambda td: td.clamp_(min=0)),
    "lerp_inplace": (make_td, lambda td: td.lerp_(td * 2, 0.5)),
}

REDUCE: dict[str, Case] = {
    "sum_dim": (make_td, lambda td: td.sum(0)),
    "mean_dim": (make_td, lambda td: td.mean(dim=0)),
    "amax_dim": (make_td, lambda td: td.amax(0)),
    "std_dim": (make_td, lambda td: td.std(0)),
    "sum_all_dims": (make_td2, lambda td: td.sum(dim=(0, 1))),
    "mean_keepdim": (make_td2, lambda td: td.mean(1, keepdim=True)),
    "norm": (make_td, lambda td: td.norm()),
    "max_dim": (make_td, lambda td: td.max(dim=0)),
    "min_dim": (make_td, lambda td: td.min(dim=0)),
    "prod_dim": (make_td, lambda td: td.prod(0)),
    "var_dim": (make_td, lambda td: td.var(0)),
    "all_dim": (make_td, lambda td: (td > 0).all(0)),
    "any_dim": (make_td, lambda td: (td > 0).any(0)),
    "nansum": (make_td, lambda td: td.nansum(0)),
    "logsumexp": (make_td, lambda td: td.logsumexp(0)),
    "sum_reduce": (make_td, lambda td: td.sum(reduce=True)),
    "torch_sum": (make_td, lambda td: torch.sum(td, 0)),
    "torch_mean": (make_td, lambda td: torch.mean(td, 0)),
    "softmax": (make_td, lambda td: td.softmax(0)),
}

STACK_CAT: dict[str, Case] = {
    "stack_0": (make_td, lambda td: torch.stack([td, td * 2], 0)),
    "stack_1": (make_td, lambda td: torch.stack([td, td + 1], 1)),
    "cat": (make_td, lambda td: torch.cat([td, td * 2], 0)),
    "cat_dim1": (make_td2, lambda td: torch.cat([td, td], 1) * 2),
    "unbind": (make_td, lambda td: td.unbind(0)[1] * 2),
    "split": (make_td, lambda td: td.split(2)[1] * 2),
    "chunk": (make_td, lambda td: td.chunk(2)[0] * 2),
    "maybe_dense_stack": (make_td, lambda td: maybe_dense_stack([td, td * 2])),
    "stack_out": (make_td, lambda td: torch.stack([td, td], 0, out=torch.stack([td, td]).zero_())),
    "unbind_1": (make_td2, lambda td: td.unbind(1)[2] * 2),
    "split_sizes": (make_td, lambda td: td.split([1, 3])[1] * 2),
    "torch_split": (make_td, lambda td: torch.split(td, 2)[0] * 2),
    "stack_tc_dim1": (make_pair, lambda t: torch.stack([t, t * 2], 1)),
    "cat_tc": (make_pair, lambda t: torch.cat([t, t * 2])),
    "cat_typed": (make_state, lambda t: torch.cat([t, t + 1])),
}

APPLY: dict[str, Case] = {
    "relu": (make_td, lambda td: td.apply(torch.relu)),
    "lambda": (make_td, lambda td: td.apply(lambda x: x * 2 + 1)),
    "two_tds": (make_td, lambda td: td.apply(lambda x, y: x * y, td + 1)),
    "batch_size": (make_td, lambda td: td.apply(lambda x: x.sum(0), batch_size=[])),
    "named_apply": (make_td, lambda td: td.named_apply(lambda key, x: x * 2)),
    "after_ops": (make_td, lambda td: (td * 2).apply(torch.relu)[1:]),
    "named_nested_keys": (make_td, lambda td: td.named_apply(lambda k, x: x * 2, nested_keys=True)),
    "filter_empty": (make_td, lambda td: td.apply(lambda x: x * 2, filter_empty=False)),
    "inplace": (make_td, lambda td: td.apply_(lambda x: x * 2)),
    "returns_none": (make_td, lambda td: td.apply(lambda x: x * 2 if x.shape[-1] == 3 else None)),
    "default": (make_td, lambda td: td.apply(lambda x, y: x + y, td.exclude("a"), default=0)),
    "call_on_nested": (make_td, lambda td: td.apply(lambda x: x * 2, call_on_nested=False)),
    "out": (make_td, lambda td: td.apply(torch.sin, out=td.clone().zero_())),
}

SHAPE: dict[str, Case] = {
    "reshape": (make_td, lambda td: td.reshape(2, 2) * 1),
    "reshape_-1": (make_td2, lambda td: td.reshape(-1) * 1),
    "view": (make_td, lambda td: td.view(2, 2).view(-1) * 1),
    "permute": (make_td2, lambda td: td.permute(1, 0) * 1),
    "transpose": (make_td2, lambda td: td.transpose(0, 1) * 1),
    "unsqueeze": (make_td, lambda td: td.unsqueeze(0) * 1),
    "unsqueeze_-1": (make_td, lambda td: td.unsqueeze(-1) * 1),
    "squeeze": (make_td, lambda td: td.unsqueeze(0).squeeze(0) * 1),
    "flatten": (make_td2, lambda td: td.flatten(0, 1) * 1),
    "unflatten": (make_td, lambda td: td.unflatten(0, (2, 2)) * 1),
    "expand": (make_td, lambda td: td.expand(3, 4) * 1),
    "clone": (make_td, lambda td: td.clone() * 1),
    "squeeze_all": (make_td, lambda td: td.unsqueeze(1).squeeze() * 1),
    "movedim": (make_td2, lambda td: td.movedim(0, 1) * 1),
    "flip": (make_td, lambda td: td.flip(0) * 1),
    "repeat": (make_td, lambda td: td.repeat(2) * 1),
    "repeat_interleave": (make_td, lambda td: td.repeat_interleave(2, dim=0) * 1),
    "expand_contiguous": (make_td, lambda td: td.expand(2, 4).contiguous() * 1),
    "transpose_negative": (make_td2, lambda td: td.transpose(-1, -2) * 1),
    "to_dtype": (make_td, lambda td: td.to(torch.float64) * 1),
    "double": (make_td, lambda td: td.double() * 1),
    "detach": (make_td, lambda td: td.detach() * 1),
    "zero_": (make_td, lambda td: td.zero_()),
    "zeros_like": (make_td, lambda td: torch.zeros_like(td) + 1),
}

WRAPPERS: dict[str, Case] = {
    "tc_attr": (make_pair, lambda t: t.obs * 2 + t.reward[:, None]),
    "tc_get": (make_pair, lambda t: t.get("obs") * 2),
    "tc_mul": (make_pair, lambda t: t * 2),
    "tc_add_inplace": (make_pair, lambda t: t.add_(1.0)),
    "tc_index": (make_pair, lambda t: t[1:] * 2),
    "tc_index_int": (make_pair, lambda t: t[0].obs * 2),
    "tc_apply": (make_pair, lambda t: t.apply(torch.relu)),
    "tc_reshape": (make_pair, lambda t: t.reshape(2, 2) * 1),
    "tc_stack": (make_pair, lambda t: torch.stack([t, t * 2])),
    "tc_clone": (make_pair, lambda t: t.clone() * 1),
    "tc_setattr": (make_pair, lambda t: _setattr(t, "obs", t.obs * 2)),
    "tc_sum": (make_pair, lambda t: t.sum(0)),
    "tc_nontensor_field": (make_labelled, lambda t: Labelled(obs=t.obs * 2, label=t.label, batch_size=[4])),
    "typed_attr": (make_state, lambda t: t.obs * 2 + t.reward[:, None]),
    "typed_getitem": (make_state, lambda t: t["obs"] * 2),
    "typed_mul": (make_state, lambda t: t * 2),
    "typed_add_inplace": (make_state, lambda t: t.add_(1.0)),
    "typed_index": (make_state, lambda t: t[1:] * 2),
    "typed_apply": (make_state, lambda t: t.apply(torch.relu)),
    "typed_stack": (make_state, lambda t: torch.stack([t, t * 2])),
    "typed_setattr": (make_state, lambda t: _setattr(t, "obs", t.obs * 2)),
    "tc_set": (make_pair, lambda t: t.set("obs", t.obs + 1)),
    "tc_to_tensordict": (make_pair, lambda t: t.to_tensordict() * 2),
    "tc_unbind": (make_pair, lambda t: t.unbind(0)[1].obs * 2),
    "tc_cat": (make_pair, lambda t: torch.cat([t, t], 0)),
    "tc_values": (make_pair, lambda t: sum(v.sum() for v in t.values())),
    "tc_index_mask": (make_pair, lambda t: t[t.reward > 0].obs * 2),
    "tc_where": (make_pair, lambda t: t.where(t.reward > 0, 0.0)),
    "tc_update": (make_pair, lambda t: t.update({"obs": t.obs * 2})),
    "tc_add_tc": (make_pair, lambda t: t + t * 2),
    "tc_add_inplace_tc": (make_pair, lambda t: t.add_(t * 2)),
    "typed_get": (make_state, lambda t: t.get("reward") * 2),
    "typed_sum": (make_state, lambda t: t.sum(0)),
    "typed_reshape": (make_state, lambda t: t.reshape(2, 2) * 1),
    "typed_clone": (make_state, lambda t: t.clone() * 1),
    "typed_to_tensordict": (make_state, lambda t: t.to_tensordict() * 2),
    "typed_index_mask": (make_state, lambda t: t[t.reward > 0] * 2),
    "typed_unbind": (make_state, lambda t: t.unbind(0)[0].obs * 2),
    "typed_update_typed": (make_state, lambda t: t.update_(t * 2)),
}

LAZY: dict[str, Case] = {
    "in_mul": (make_lazy, lambda lz: lz * 2),
    "in_get": (make_lazy, lambda lz: lz["a"] + 1),
    "in_index_member": (make_lazy, lambda lz: lz[0] * 2),
    "in_index_inner": (make_lazy, lambda lz: lz[:, 1:3] * 2),
    "in_apply": (make_lazy, lambda lz: lz.apply(torch.relu)),
    "out": (make_td, lambda td: lazy_stack([td, td + 1])),
    "out_dim1": (make_td, lambda td: lazy_stack([td * 2, td], 1)),
    "out_class": (make_td, lambda td: LazyStackedTensorDict(td[:2] * 2, td[2:], stack_dim=0)),
    "roundtrip_dense": (make_td, lambda td: lazy_stack([td, td * 2]).to_tensordict() + 1),
    "in_add_lazy": (make_lazy, lambda lz: lz + lz),
    "in_sum": (make_lazy, lambda lz: lz.sum(1)),
    "in_to_tensordict": (make_lazy, lambda lz: lz.to_tensordict() * 2),
    "in_unbind": (make_lazy, lambda lz: lz.unbind(0)[1] * 2),
    "in_nested_get": (make_lazy, lambda lz: lz["nested", "b"] * 2),
    "in_set": (make_lazy, lambda lz: lz.set("c", lz["a"] * 2)),
    "in_setitem_member": (make_lazy, lambda lz: _set(lz, 0, lz[1] * 2)),
    "in_members": (make_lazy, lambda lz: lz.tensordicts[0]["a"] * 2),
    "in_reshape": (make_lazy, lambda lz: lz[:, :2].reshape(-1) * 2),
    "in_inplace": (make_lazy, lambda lz: lz.mul_(2)),
    "in_stack": (make_lazy, lambda lz: torch.stack([lz, lz * 2])),
    "out_of_lazy": (make_td, lambda td: lazy_stack([lazy_stack([td, td]), lazy_stack([td, td * 2])])),
    "out_tc": (make_pair, lambda t: lazy_stack([t, t * 2])),
    "out_heterogeneous": (make_td, lambda td: lazy_stack([td * 2, td.exclude("a")])),
}

NON_TENSOR: dict[str, Case] = {
    "build": (make_td, lambda td: TensorDict({"a": td["a"] * 2, "text": "hi"}, batch_size=[4])),
    "in_read": (make_with_text, lambda td: td["a"] * 2 if td["text"] == "hello" else td["a"]),
    "in_mul": (make_with_text, lambda td: td * 2),
    "in_index": (make_with_text, lambda td: td[1:] * 2),
    "set_non_tensor": (make_td, lambda td: td.set_non_tensor("text", "x").set("c", td["a"] * 2)),
    "wrapped": (make_td, lambda td: td.set("t", NonTensorData("x", batch_size=[4])).set("c", td["a"] * 2)),
    "get_non_tensor": (make_with_text, lambda td: td["a"] * (2 if td.get_non_tensor("text") == "hello" else 3)),
    "metadata": (make_td, lambda td: td.set("m", MetaData("x", batch_size=[4])).set("c", td["a"] * 2)),
    "stack_same": (make_with_text, lambda td: torch.stack([td, td * 2])),
    "stack_different": (
        make_td,
        lambda td: torch.stack([td.set_non_tensor("t", "x"), (td * 2).set_non_tensor("t", "y")]),
    ),
    "in_apply": (make_with_text, lambda td: td.apply(torch.relu)),
    "in_reshape": (make_with_text, lambda td: td.reshape(2, 2) * 1),
    "in_clone": (make_with_text, lambda td: td.clone() * 1),
    "tc_field": (make_labelled, lambda t: t[1:].obs * (2 if t.label == "hi" else 3)),
}

GROUPS = {
    "build": BUILD,
    "get_set": GET_SET,
    "index": INDEX,
    "pointwise": POINTWISE,
    "reduce": REDUCE,
    "stack_cat": STACK_CAT,
    "apply": APPLY,
    "shape": SHAPE,
    "wrappers": WRAPPERS,
    "lazy": LAZY,
    "non_tensor": NON_TENSOR,
}
ALL: dict[str, Case] = {f"{group}-{name}": case for group, cases in GROUPS.items() for name, case in cases.items()}

# What dynamo cannot trace, with the reason (a strict xfail; README, Differences).
BROKEN: dict[str, pytest.MarkDecorator] = {
    "index-setitem_mask_td": pytest.mark.xfail(
        strict=True,
        raises=torch._dynamo.exc.UserError,
        reason="LIMITATION (README, Differences): td[mask] = other_td under compile: the rows the mask selects "
        "and the other's rows are two data-dependent sizes, and checking that they agree cannot be traced "
        "(a number, td[mask] = 0.0, compiles)",
    ),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("case", [pytest.param(c, id=n, marks=BROKEN.get(n, ())) for n, c in ALL.items()])
def test_fullgraph(case: Case, backend: str) -> None:
    make, fn = case
    check_fullgraph(fn, make, backend)


INDUCTOR = [
    "build-tensorclass",
    "build-typed",
    "get_set-set_nested",
    "index-bool_mask",
    "index-tuple",
    "pointwise-add_inplace_scalar",
    "pointwise-mul_td",
    "reduce-sum_dim",
    "stack_cat-stack_1",
    "apply-relu",
    "shape-permute",
    "wrappers-tc_mul",
    "wrappers-typed_index",
    "lazy-in_mul",
    "lazy-out",
    "non_tensor-in_mul",
    "pointwise-chain_tensor_operators",
    "wrappers-tc_cat",
    "lazy-in_inplace",
]


@SKIP_INDUCTOR
@pytest.mark.parametrize("name", INDUCTOR)
def test_fullgraph_inductor(name: str) -> None:
    make, fn = ALL[name]
    check_fullgraph(fn, make, "inductor")


# ------------------------------------------------------------------------------------------ to_module
def _module_and_params() -> tuple[nn.Module, TensorDict]:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    params = TensorDict.from_module(module)
    return module, params.apply(lambda p: p.detach() * 2)  # other values than the module's own


@pytest.mark.parametrize("backend", ["eager", "aot_eager", pytest.param("inductor", marks=SKIP_INDUCTOR)])
def test_to_module_inside_compiled_function(backend: str) -> None:
    module, params = _module_and_params()
    before = module[0].weight.detach().clone()

    def fn(p: TensorDict, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(module):
            return module(x)

    x = torch.randn(5, 3)
    want = fn(params, x)
    torch.testing.assert_close(want, torch.func.functional_call(module, dict(params.flatten_keys(".").items()), x))
    check_fullgraph(lambda x: fn(params, x), lambda: x, backend)
    torch.testing.assert_close(module[0].weight, before)  # restored after the block


def test_inplace_error_under_compile_leaves_the_input_unchanged() -> None:
    # under compile the dtype check before the writes is skipped (dynamo cannot trace torch.result_type):
    # the write that cannot work fails the trace, before anything runs
    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(3, dtype=torch.long)}, [3])
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"in-place ops are not possible|can't be cast|cannot be cast"):
        torch.compile(lambda t: t.add_(1.5), backend="eager", fullgraph=True)(td)
    assert td["a"].eq(0).all()
    assert td["b"].eq(0).all()
    with pytest.raises(RuntimeError, match=r"add_: result type torch\.float32 cannot be written in place into leaf"):
        td.add_(1.5)  # eager: the check names the leaf
