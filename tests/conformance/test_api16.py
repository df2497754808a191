"""Issue 16 methods on every flavour: the tensor-like batch-dim maps, softmax/logsumexp/scans/quantiles,
the new casts, structure edits, leaf facts and the ``inplace=`` forms, each checked against torch leaf by
leaf (the reference content has batch [3, 4])."""

from __future__ import annotations

import pytest
import torch
from _flavours import BATCH, FLOAT_KEYS, assert_leaves, assert_op, assert_same_content, leaves, requires


def _ones(x):
    return [1] * (x.ndim - 2)


# id -> (op on the TensorDict, the same op on a leaf of batch [3, 4], expected batch size)
OPS = {
    "flip": (lambda td: td.flip(1), lambda x: x.flip(1), [3, 4]),
    "flip_both": (lambda td: td.flip((0, -1)), lambda x: x.flip(0, 1), [3, 4]),
    "fliplr": (lambda td: td.fliplr(), lambda x: x.flip(1), [3, 4]),
    "flipud": (lambda td: td.flipud(), lambda x: x.flip(0), [3, 4]),
    "roll_flat": (lambda td: td.roll(5), lambda x: x.flatten(0, 1).roll(5, 0).reshape(x.shape), [3, 4]),
    "roll_dim": (lambda td: td.roll(-1, 1), lambda x: x.roll(-1, 1), [3, 4]),
    "movedim": (lambda td: td.movedim(0, 1), lambda x: x.transpose(0, 1), [4, 3]),
    "moveaxis": (lambda td: td.moveaxis(-1, 0), lambda x: x.transpose(0, 1), [4, 3]),
    "swapaxes": (lambda td: td.swapaxes(0, 1), lambda x: x.transpose(0, 1), [4, 3]),
    "swapdims": (lambda td: td.swapdims(1, 0), lambda x: x.transpose(0, 1), [4, 3]),
    "narrow": (lambda td: td.narrow(1, 1, 2), lambda x: x[:, 1:3], [3, 2]),
    "tile": (lambda td: td.tile((2, 1)), lambda x: x.repeat(2, 1, *_ones(x)), [6, 4]),
    "tile_new_dim": (lambda td: td.tile((2, 1, 1)), lambda x: x.repeat(2, 1, 1, *_ones(x)), [2, 3, 4]),
    "rot90": (lambda td: td.rot90(), lambda x: x.rot90(1, (0, 1)), [4, 3]),
    "broadcast_to": (lambda td: td.broadcast_to((2, 3, 4)), lambda x: x.expand(2, *x.shape), [2, 3, 4]),
    "atleast_3d": (lambda td: td.atleast_3d(), lambda x: x[None], [1, 3, 4]),
    "pad": (
        lambda td: td.float().pad([0, 1, 1, 0]),
        lambda x: torch.nn.functional.pad(x.float(), [0, 0] * (x.ndim - 2) + [1, 0, 0, 1]),
        [4, 5],
    ),
    "softmax": (lambda td: td.float().softmax(0), lambda x: x.float().softmax(0), [3, 4]),
    "logsumexp": (lambda td: td.float().logsumexp(1), lambda x: x.float().logsumexp(1), [3]),
    "cummax_values": (lambda td: td.float().cummax(1).values, lambda x: x.float().cummax(1).values, [3, 4]),
    "cummin_indices": (lambda td: td.float().cummin(0).indices, lambda x: x.float().cummin(0).indices, [3, 4]),
    "quantile": (lambda td: td.float().quantile(0.25, 0), lambda x: x.float().quantile(0.25, 0), [4]),
    "mod": (lambda td: td.float().mod(0.75), lambda x: x.float().remainder(0.75), [3, 4]),
    "rsub": (lambda td: td.float().rsub(2.0), lambda x: 2.0 - x.float(), [3, 4]),
    "complex64": (lambda td: td.float().complex64(), lambda x: x.float().to(torch.complex64), [3, 4]),
    "uint16": (lambda td: td.int().uint16(), lambda x: x.int().to(torch.uint16), [3, 4]),
    "type": (lambda td: td.type(torch.float64), lambda x: x.to(torch.float64), [3, 4]),
    "as_tensor": (lambda td: td.as_tensor(), lambda x: x, [3, 4]),
    "torch_flip": (lambda td: torch.flip(td, (0,)), lambda x: x.flip(0), [3, 4]),
    "torch_roll": (lambda td: torch.roll(td, 1, 0), lambda x: x.roll(1, 0), [3, 4]),
}


@pytest.mark.parametrize("case", OPS, ids=list(OPS))
def test_op(tdf, case):
    td_op, leaf_op, batch_size = OPS[case]
    td = tdf
    # reductions may sum in another order over a member or a strided view: equal up to rounding
    tol = {"rtol": 1e-6, "atol": 1e-6} if case in ("softmax", "logsumexp", "quantile") else {}
    assert_op(td, td_op, leaf_op, batch_size=batch_size, **tol)
    assert_same_content(td)  # out of place: the input is untouched


def test_tensor_split(tdf):
    td = tdf
    parts = td.tensor_split(3, 1)
    assert [p.batch_size for p in parts] == [torch.Size([3, 2]), torch.Size([3, 1]), torch.Size([3, 1])]
    for part, (start, stop) in zip(parts, [(0, 2), (2, 3), (3, 4)], strict=True):
        assert_leaves(td, lambda x, a=start, b=stop: x[:, a:b], part)


def test_bad_dims_raise(tdf):
    td = tdf
    for call in (
        lambda: td.flip(2),
        lambda: td.roll(1, 2),
        lambda: td.narrow(2, 0, 1),
        lambda: td.softmax(-3),
        lambda: td.movedim(0, 2),
        lambda: td.to_lazystack(2),
    ):
        with pytest.raises(IndexError, match="Incompatible dim"):
            call()
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        td.narrow(0, 2, 2)
    assert_same_content(td)


def test_facts(tdf):
    td = tdf
    want = leaves(td)
    assert td.bytes() == sum(x.numel() * x.element_size() for x in want.values())
    assert td.param_count() == sum(x.numel() for x in want.values())
    assert td.is_floating_point() is False  # "b" is int64 and "c" bool
    assert td.select(*FLOAT_KEYS).is_floating_point() is True
    assert (td.is_cpu, td.is_cuda, td.is_meta) == (td.device is not None, False, False)
    arrays = td.numpy()
    torch.testing.assert_close(torch.as_tensor(arrays["nested"]["d"]), want[("nested", "d")])
    assert td.densify().batch_size == BATCH


def test_structure_edits(flavour, tdf):
    requires(flavour, "mapping_mutation")
    requires(flavour, "new_keys")
    td = tdf
    renamed = td.rename_keys({"a": "x"})
    assert_leaves(td, lambda x: x, renamed.rename_keys({"x": "a"}))
    assert_same_content(td)
    moved = td.separates("a")
    assert list(moved.keys()) == ["a"]
    assert "a" not in td
    td.create_nested(("n", "m"))
    assert td.get(("n", "m")).batch_size == BATCH
    td.filter_empty_()
    assert "n" not in td


@pytest.mark.parametrize("case", ["reshape", "roll", "to"])
def test_inplace(flavour, tdf, case):
    requires(flavour, "mapping_mutation")
    requires(flavour, "new_keys")
    td = tdf
    before = {p: x.clone() for p, x in leaves(td).items()}
    if "lazy" in flavour.caps and case == "reshape":  # the members keep their batch size
        with pytest.raises(RuntimeError, match="not supported on a lazy stack"):
            td.reshape(-1, inplace=True)
        assert_same_content(td)
        return
    call = {
        "reshape": lambda t: t.reshape(-1, inplace=True),
        "roll": lambda t: t.roll(1, 0, inplace=True),
        "to": lambda t: t.to(torch.float64, inplace=True),
    }[case]
    leaf = {
        "reshape": lambda x: x.reshape(12, *x.shape[2:]),
        "roll": lambda x: x.roll(1, 0),
        "to": lambda x: x.to(torch.float64),
    }[case]
    assert call(td) is td
    assert_leaves(before, leaf, td)


def test_inplace_locked(flavour, tdf):
    requires(flavour, "lock")
    td = tdf.lock_()
    for call in (
        lambda: td.reshape(-1, inplace=True),
        lambda: td.roll(1, inplace=True),
        lambda: td.to(torch.float64, inplace=True),
    ):
        with pytest.raises(RuntimeError, match="locked"):
            call()
    td.unlock_()
    assert_same_content(td)
