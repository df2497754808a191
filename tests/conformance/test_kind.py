"""Results keep the kind of their source: an operation on a TensorClass (or TypedTensorDict) gives back
an instance of the same class, re-wrapping the backend's result; on any other flavour, a TensorDict."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from _flavours import BATCH, LEAF_KEYS, assert_same_content, assert_same_kind, requires

from tensorbatch import TensorDictBase
from tensorbatch._delegation import WRAPPER_TYPES

MASK = torch.tensor([[True, False, True, True], [False, False, False, False], [True, True, False, True]])

# id -> an operation giving one collection
SINGLE = {
    "clone": lambda td: td.clone(),
    "clone_shallow": lambda td: td.clone(False),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "float": lambda td: td.float(),
    "to_dtype": lambda td: td.to(torch.float64),
    "contiguous": lambda td: td.contiguous(),
    "detach": lambda td: td.detach(),
    "data": lambda td: td.data,
    "index_int": lambda td: td[0],
    "index_slice": lambda td: td[1:],
    "index_mask": lambda td: td[MASK],
    "index_tensor": lambda td: td[torch.tensor([2, 0])],
    "select": lambda td: td.select("a", ("nested", "d")),
    "exclude": lambda td: td.exclude("b"),
    "empty": lambda td: td.empty(),
    "apply": lambda td: td.apply(lambda x: x + 1),
    "named_apply": lambda td: td.named_apply(lambda k, x: x),
    "reshape": lambda td: td.reshape(-1),
    "permute": lambda td: td.permute(1, 0),
    "unsqueeze": lambda td: td.unsqueeze(0),
    "expand": lambda td: td.expand(2, 3, 4),
    "masked_fill": lambda td: td.masked_fill(MASK, 0),
    "masked_select": lambda td: td.masked_select(MASK),
    "where": lambda td: td.where(MASK, 0),
    "torch_where": lambda td: torch.where(MASK, td, td),
    "add": lambda td: td.float() + 1,
    "radd": lambda td: 1 + td.float(),
    "eq": lambda td: td == td,
    "neg": lambda td: -td.float(),
    "torch_exp": lambda td: torch.exp(td.float()),
    "sum_dim": lambda td: td.float().sum(0),
    "mean_dim": lambda td: td.float().mean(dim=1),
    "zeros_like": torch.zeros_like,
    "new_zeros": lambda td: td.new_zeros(2),
    "stack": lambda td: torch.stack([td, td], 0),
    "cat": lambda td: torch.cat([td, td], 1),
    "flatten_keys": lambda td: td.exclude("nested").flatten_keys(),  # a TensorClass refuses non-field flat keys
    "gather": lambda td: td.gather(1, torch.tensor([[0], [1], [2]])),
}

# id -> an operation giving a tuple or list of collections
SEVERAL = {
    "unbind": lambda td: td.unbind(1),
    "split": lambda td: td.split(2, 1),
    "chunk": lambda td: td.chunk(3, 0),
    "torch_unbind": lambda td: torch.unbind(td, 0),
    "max_dim": lambda td: td.float().max(dim=0),
    "min_dim": lambda td: tuple(td.float().min(dim=1)),
}

# id -> an in-place operation, which returns its source itself
INPLACE = {
    "zero_": lambda td: td.zero_(),
    "apply_": lambda td: td.apply_(lambda x: x),
    "update_": lambda td: td.update_(td.clone()),
    "copy_": lambda td: td.copy_(td.clone()),
    "set_": lambda td: td.set_("a", torch.ones(3, 4, 5)),
    "masked_fill_": lambda td: td.masked_fill_(MASK, 1),
    "lock_unlock": lambda td: td.lock_().unlock_(),
}


@pytest.mark.parametrize("case", SINGLE, ids=list(SINGLE))
def test_result_is_of_the_source_kind(tdf, case):
    out = SINGLE[case](tdf)
    assert_same_kind(tdf, out)
    assert out is not tdf


@pytest.mark.parametrize("move", ["to", "cpu"])
def test_move_to_the_cpu_is_of_the_source_kind(tdf, move):
    out = tdf.to("cpu") if move == "to" else tdf.cpu()
    assert_same_kind(tdf, out)
    if tdf.device == torch.device("cpu"):  # already there: itself (as tensordict)
        assert out is tdf


@pytest.mark.parametrize("case", SEVERAL, ids=list(SEVERAL))
def test_results_are_of_the_source_kind(tdf, case):
    out = SEVERAL[case](tdf)
    assert len(out) > 1
    for item in out:
        assert_same_kind(tdf, item)


@pytest.mark.parametrize("case", INPLACE, ids=list(INPLACE))
def test_inplace_returns_the_source(flavour, tdf, case):
    requires(flavour, "inplace")
    assert INPLACE[case](tdf) is tdf


def test_pickle_keeps_the_kind(flavour, tdf):
    requires(flavour, "pickle")
    back = pickle.loads(pickle.dumps(tdf))
    assert_same_kind(tdf, back)
    assert_same_content(back)


def test_key_reads_are_not_rewrapped(tdf):
    """A key read gives the backend's own value: a nested node is a plain TensorDict, a leaf a tensor."""
    for key in ("nested", ("nested", "deep")):
        node = tdf.get(key)
        assert isinstance(node, TensorDictBase)
        assert type(node) not in WRAPPER_TYPES
        assert node.batch_size == BATCH
    for path in LEAF_KEYS:
        assert isinstance(tdf.get(path), torch.Tensor)
