"""Differential tests: shape operations, ``to`` and ``flatten_keys`` as context managers.

Both libraries run the same ``with`` block on the result of an operation (entries changed, added, deleted,
nested ones too) and the TensorDict the operation was called on is compared after the block: its values,
keys and batch size, and whether its leaves were replaced (not copied into) and its nested TensorDicts kept.
"""

from __future__ import annotations

import pytest
import torch

from ._diff import case

pytestmark = pytest.mark.differential

_G = torch.Generator().manual_seed(0)
_SCALAR = {  # batch size []
    "a": torch.randn(3, generator=_G),
    "b": torch.randn((), generator=_G),
    "nested": {"c": torch.randn(2, generator=_G), "deep": {"d": torch.randn((), generator=_G)}},
}
_FLAT = {"a": torch.randn(4, 5, 3, generator=_G), "nested.c": torch.randn(4, 5, 2, generator=_G)}  # dotted keys
_SLASHED = {"a": _FLAT["a"], "nested/c": _FLAT["nested.c"]}


def _block(op, *, delete=True, new=True):
    """``fn(lib, td)``: ``with op(lib, td) as x`` changing ``a`` and ``nested.c``, adding and deleting keys."""

    def fn(lib, td):
        a0, nested0 = td["a"], td["nested"]
        with op(lib, td) as x:
            x["a"] = x["a"] * 2 + 1
            x["nested", "c"] = x["nested", "c"] - 1
            if new:
                x["new"] = torch.ones(x.batch_size)
                x["nested", "new"] = torch.full(x.batch_size, 3.0)
            if delete:
                del x["b"]
        return td, td["a"] is a0, td["nested"] is nested0, sorted(map(str, td.keys(True, True)))

    return fn


OPS = {
    "unsqueeze0": (lambda lib, td: td.unsqueeze(0), {}),
    "unsqueeze_last": (lambda lib, td: td.unsqueeze(-1), {}),
    "unsqueeze_kw": (lambda lib, td: td.unsqueeze(dim=1), {}),
    "squeeze_dim": (lambda lib, td: td.squeeze(1), {"batch_size": (4, 1, 5)}),
    "squeeze_dim_kw": (lambda lib, td: td.squeeze(dim=-2), {"batch_size": (4, 1, 5)}),
    "squeeze_not_one": (lambda lib, td: td.squeeze(0), {}),
    "view_flat": (lambda lib, td: td.view(-1), {}),
    "view_shape": (lambda lib, td: td.view(2, 10), {}),
    "view_same": (lambda lib, td: td.view(4, 5), {}),
    "transpose": (lambda lib, td: td.transpose(0, 1), {}),
    "transpose_neg": (lambda lib, td: td.transpose(-1, 0), {}),
    "swapaxes": (lambda lib, td: td.swapaxes(0, 1), {}),
    "swapdims": (lambda lib, td: td.swapdims(1, 0), {}),
    "permute": (lambda lib, td: td.permute(1, 0), {}),
    "permute_seq": (lambda lib, td: td.permute([1, 0]), {}),
    "permute_kw": (lambda lib, td: td.permute(dims=(1, 0)), {}),
    "permute_3d": (lambda lib, td: td.permute(2, 0, 1), {"batch_size": (2, 3, 4)}),
    "permute_3d_neg": (lambda lib, td: td.permute(-1, 0, -2), {"batch_size": (2, 3, 4)}),
    "permute_identity": (lambda lib, td: td.permute(0, 1), {}),
    "movedim": (lambda lib, td: td.movedim(0, 2), {"batch_size": (2, 3, 4)}),
    "moveaxis": (lambda lib, td: td.moveaxis(-1, 0), {"batch_size": (2, 3, 4)}),
    "flip": (lambda lib, td: td.flip(0), {}),
    "flip_dims": (lambda lib, td: td.flip([0, 1]), {}),
    "fliplr": (lambda lib, td: td.fliplr(), {}),
    "flipud": (lambda lib, td: td.flipud(), {}),
    "roll": (lambda lib, td: td.roll(1, 0), {}),
    "roll_tuple": (lambda lib, td: td.roll((1, 2), (0, 1)), {}),
    "roll_kw": (lambda lib, td: td.roll(shifts=-2, dims=1), {}),
    "rot90": (lambda lib, td: td.rot90(), {"batch_size": (4, 4)}),
    "rot90_k2": (lambda lib, td: td.rot90(k=2), {}),
    "rot90_dims": (lambda lib, td: td.rot90(-1, (1, 0)), {"batch_size": (4, 4)}),
    "atleast_3d": (lambda lib, td: td.atleast_3d(), {}),
    "atleast_2d": (lambda lib, td: td.atleast_2d(), {"batch_size": (4,)}),
    "atleast_1d_0d": (lambda lib, td: td.atleast_1d(), {"batch_size": (), "data": _SCALAR}),
    "atleast_noop": (lambda lib, td: td.atleast_1d(), {}),
    "flatten": (lambda lib, td: td.flatten(), {}),
    "flatten_dims": (lambda lib, td: td.flatten(0, 1), {"batch_size": (2, 3, 4)}),
    "flatten_tail": (lambda lib, td: td.flatten(1, 2), {"batch_size": (2, 3, 4)}),
    "flatten_kw": (lambda lib, td: td.flatten(start_dim=-2), {"batch_size": (2, 3, 4)}),
    "flatten_0d": (lambda lib, td: td.flatten(), {"batch_size": (), "data": _SCALAR}),
    "unflatten": (lambda lib, td: td.unflatten(1, (5, 1)), {}),
    "unflatten_neg": (lambda lib, td: td.unflatten(-1, (1, 5)), {}),
    "unflatten_first": (lambda lib, td: td.unflatten(0, (2, 2)), {}),
    "to_dtype": (lambda lib, td: td.to(torch.float64), {}),
    "to_dtype_kw": (lambda lib, td: td.to(dtype=torch.float16), {}),
    "to_device": (lambda lib, td: td.to("cpu"), {}),
    "to_device_dtype": (lambda lib, td: td.to("cpu", torch.float64), {}),
}
CASES = [case(name, _block(op), **kw) for name, (op, kw) in OPS.items()]


@pytest.mark.parametrize(("fn", "kw"), CASES)
def test_with_block_writes_back(run_both, fn, kw):
    run_both(fn, **kw)


def _keys_block(op, key, value_key):
    def fn(lib, td):
        with op(lib, td) as x:
            x[value_key] = x[value_key] + 1
            x[key] = torch.zeros(4, 5)
        return td, sorted(map(str, td.keys(True, True)))

    return fn


KEY_CASES = [
    case("flatten_keys", _keys_block(lambda lib, td: td.flatten_keys(), "new.x", "nested.c")),
    case("flatten_keys_sep", _keys_block(lambda lib, td: td.flatten_keys("/"), "new/x", "nested/deep/d")),
    case("unflatten_keys", _keys_block(lambda lib, td: td.unflatten_keys(), ("new", "x"), ("nested", "c")), data=_FLAT),
    case(
        "flatten_keys_sep_kw",
        _keys_block(lambda lib, td: td.flatten_keys(separator="/"), "new/x", "nested/deep/d"),
    ),
    case(
        "unflatten_keys_sep_kw",
        _keys_block(lambda lib, td: td.unflatten_keys(separator="/"), ("new", "x"), ("nested", "c")),
        data=_SLASHED,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), KEY_CASES)
def test_keys_with_block_writes_back(run_both, fn, kw):
    run_both(fn, **kw)


def test_unflatten_keys_of_flat_keys(ref, tb):
    outs = []
    for lib in (ref, tb):
        td = lib.TensorDict({"x.y": torch.zeros(2), "z": torch.ones(2)}, [2])
        with td.unflatten_keys() as x:
            x["x", "y"] = x["x", "y"] + 1
            x["w", "v"] = torch.ones(2)
        outs.append({str(k): v.tolist() for k, v in td.items(True, True)})
    assert outs[1] == outs[0]


def test_to_new_key_keeps_its_dtype(run_both):
    def fn(lib, td):
        with td.to(torch.float64) as x:
            x["new"] = torch.ones(4, 5, dtype=torch.float16)
            x["a"] = x["a"].to(torch.float16)  # an existing key: back to float32
        return td["new"].dtype, td["a"].dtype, td["b"].dtype

    run_both(fn)


def test_view_as_dtype(run_both):
    def fn(lib, td):
        with td.view(torch.int32) as x:
            x["b"] = x["b"] + 1
        return td

    run_both(fn)


def _raising(op):
    def fn(lib, td):
        a0 = td["a"]
        try:
            with op(td) as x:
                x["a"] = x["a"] + 1
                x["new"] = torch.zeros(x.batch_size)
                raise ValueError("in the block")
        except ValueError:
            pass
        return td, td["a"] is a0, sorted(map(str, td.keys()))

    return fn


@pytest.mark.parametrize(
    "op",
    [lambda td: td.permute(1, 0), lambda td: td.unsqueeze(0), lambda td: td.to(torch.float64)],
    ids=["permute", "unsqueeze", "to"],
)
def test_block_that_raises_writes_nothing(run_both, op):
    run_both(_raising(op))


def test_squeeze_without_dim_raises_on_exit(run_both):
    def fn(lib, td):
        with td.squeeze() as x:
            x["a"] = x["a"] + 1

    run_both(fn, batch_size=(4, 1, 5), raises=RuntimeError)


def test_locked_source_in_place_changes(run_both):
    def fn(lib, td):
        with td.lock_().permute(1, 0) as x:
            x["a"].add_(1)
        with td.unsqueeze(0) as x:
            x["b"].mul_(2)
        return td, td.is_locked

    run_both(fn)


@pytest.mark.parametrize("op", [lambda td: td.permute(1, 0), lambda td: td.unsqueeze(0)], ids=["permute", "unsqueeze"])
def test_locked_source_refuses_a_new_value(run_both, op):
    def fn(lib, td):
        td.lock_()
        with op(td) as x:
            x["a"] = x["a"] + 1

    run_both(fn, raises=RuntimeError)


def test_locked_source_to_raises_on_exit(run_both):
    def fn(lib, td):
        with td.lock_().to(torch.float64):
            pass

    run_both(fn, raises=RuntimeError)


def _inplace(op, **kw):
    def fn(lib, td):
        with op(td) as x:
            same = x is td
            x["a"] = x["a"] + 1
        return td, same, sorted(map(str, td.keys(True, True)))

    return case(kw.pop("id"), fn, **kw)


@pytest.mark.parametrize(
    ("fn", "kw"),
    [
        _inplace(lambda td: td.flatten(0, 1, inplace=True), id="flatten", batch_size=(2, 3, 4)),
        _inplace(lambda td: td.flatten(start_dim=1, inplace=True), id="flatten_tail", batch_size=(2, 3, 4)),
        _inplace(lambda td: td.unflatten(1, (5, 1), inplace=True), id="unflatten"),
        _inplace(lambda td: td.unflatten(-1, (1, 5), inplace=True), id="unflatten_neg"),
        _inplace(lambda td: td.to(torch.float64, inplace=True), id="to"),
    ],
)
@pytest.mark.filterwarnings("ignore:.*flatten.*inplace=True:FutureWarning")  # flatten_tail: both warn (as tested)
def test_inplace_forms(run_both, fn, kw):
    run_both(fn, **kw)


@pytest.mark.parametrize("op", ["flatten_keys", "unflatten_keys"])
def test_inplace_keys_forms(ref, tb, op):
    outs = []
    for lib in (ref, tb):
        td = lib.TensorDict({"a": {"b": torch.zeros(2)}, "c.d": torch.ones(2)}, [2])
        with getattr(td, op)(inplace=True) as x:
            same = x is td
        outs.append((same, {str(k): v.tolist() for k, v in td.items(True, True)}))
    assert outs[1] == outs[0]


def test_nested_blocks(run_both):
    def fn(lib, td):
        with td.unsqueeze(0) as x, x.permute(0, 2, 1) as y, y.flatten(1, 2) as z:
            z["a"] = z["a"] * 3
            z["new"] = torch.ones(z.batch_size)
        return td

    run_both(fn)


def test_twice_on_one_result(run_both):
    def fn(lib, td):
        r = td.permute(1, 0)
        for _ in range(2):
            with r:
                r["a"] = r["a"] + 1
        return td

    run_both(fn)


LAZY_OPS = {
    "permute": lambda t: t.permute(1, 0, 2),
    "unsqueeze": lambda t: t.unsqueeze(-1),
    "unsqueeze_stack_dim": lambda t: t.unsqueeze(0),
    "transpose": lambda t: t.transpose(0, 2),
    "movedim": lambda t: t.movedim(0, 2),
    "flip": lambda t: t.flip(1),
    "roll": lambda t: t.roll(1, 0),
    "view": lambda t: t.view(-1),
    "flatten": lambda t: t.flatten(0, 1),
    "unflatten": lambda t: t.unflatten(2, (2, 2)),
    "atleast_3d": lambda t: t.atleast_3d(),
    "to": lambda t: t.to(torch.float64),
    "flatten_keys": lambda t: t.flatten_keys(),
}


@pytest.mark.parametrize("op", LAZY_OPS.values(), ids=LAZY_OPS.keys())
def test_lazy_stack(ref, tb, op):
    outs = []
    for lib in (ref, tb):
        members = [
            lib.TensorDict({"a": torch.arange(12.0).view(3, 4) + i, "n": {"b": torch.zeros(3, 4)}}, [3, 4])
            for i in range(2)
        ]
        td = lib.lazy_stack(members)
        with op(td) as x:
            key = "n.b" if op is LAZY_OPS["flatten_keys"] else ("n", "b")
            x[key] = x[key] + 1
            x["a"] = x["a"] * 2
        outs.append(
            (
                type(td).__name__,
                td.batch_size,
                td["a"].tolist(),
                td["n", "b"].tolist(),
                [m["a"].tolist() for m in td.tensordicts],
            )
        )
    assert outs[1] == outs[0]


TC_OPS = {
    "permute": lambda t: t.permute(1, 0),
    "transpose": lambda t: t.transpose(0, 1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "squeeze_not_one": lambda t: t.squeeze(0),
    "view": lambda t: t.view(-1),
    "flatten": lambda t: t.flatten(),
    "flip": lambda t: t.flip(0),
    "atleast_3d": lambda t: t.atleast_3d(),
    "to": lambda t: t.to(torch.float64),
}


@pytest.mark.parametrize("op", TC_OPS.values(), ids=TC_OPS.keys())
def test_tensorclass(ref, tb, op):
    outs = []
    for lib in (ref, tb):

        @lib.tensorclass
        class Pair:
            x: torch.Tensor
            y: torch.Tensor

        pair = Pair(x=torch.arange(6.0).view(2, 3), y=torch.zeros(2, 3, 4), batch_size=[2, 3])
        with op(pair) as p:
            p.x = p.x * 2
            p.y = p.y + 1
        outs.append((pair.batch_size, pair.x.tolist(), pair.x.dtype, pair.y.sum().item()))
    assert outs[1] == outs[0]


def test_result_of_a_freed_tensordict(run_both):
    def fn(lib, td):
        with td.unsqueeze(1).squeeze(1) as x:  # the unsqueezed TensorDict is freed before the block ends
            x["a"] = x["a"] + 1

    run_both(fn, raises=AttributeError)


def test_block_in_a_compiled_function(run_both):
    def block(td):
        with td.permute(1, 0) as x:
            x["a"] = x["a"] + 1
        with td.unsqueeze(0) as x:
            x["b"] = x["b"] * 2
        return td["a"].sum() + td["b"].sum()

    def fn(lib, td):
        torch._dynamo.reset()
        return torch.compile(block, backend="eager")(td), td  # (tensordict's permute undo breaks a full graph)

    run_both(fn)
