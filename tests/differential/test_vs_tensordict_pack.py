"""Differential tests, ``td.pack()`` / ``PackLayout``: the same packed tensor, layout and unpacked TensorDict."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ._diff import builtin_bases

pytestmark = pytest.mark.differential


def _cases(lib: Any) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "flat": lib.TensorDict(p=torch.randn(5, generator=g), v=torch.randn(5, 3, generator=g), batch_size=[5]),
        "nested": lib.TensorDict(
            {
                "z": torch.randn(4, 2, generator=g),
                "a": {"b": torch.randn(4, 2, 2, generator=g), "c": torch.randn(4, generator=g)},
            },
            batch_size=[4],
        ),
        "deep_batch": lib.TensorDict(
            a=torch.randn(2, 3, generator=g),
            n=lib.TensorDict(x=torch.randn(2, 3, 4, generator=g), batch_size=[2, 3]),
            batch_size=[2],
        ),
        "two_dims": lib.TensorDict(
            a=torch.randn(2, 3, 4, generator=g), b=torch.randn(2, 3, generator=g), batch_size=[2, 3]
        ),
        "no_batch": lib.TensorDict(a=torch.randn(3, generator=g), b=torch.randn(2, 2, generator=g)),
        "lazy": lib.lazy_stack(
            [lib.TensorDict(a=torch.randn(2, generator=g)), lib.TensorDict(a=torch.randn(2, generator=g))]
        ),
        "empty": lib.TensorDict(batch_size=[3]),
    }


def _plain_layout(layout: Any) -> tuple:
    return (
        layout.keys,
        layout.shapes,
        layout.dim,
        tuple((k, s) for k, s, _ in layout.nested),
        layout.offsets,
        layout.numel,
        layout.device,
    )


def _leaves(td: Any) -> dict:
    return {key: (tuple(td.batch_size), value.tolist()) for key, value in td.items(True, True, sort=True)}


@pytest.mark.parametrize("case", ["flat", "nested", "deep_batch", "two_dims", "no_batch", "lazy", "empty"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_pack_matches(ref, tb, case, dim):
    r_flat, r_layout = _cases(ref)[case].pack(dim)
    s_flat, s_layout = _cases(tb)[case].pack(dim)
    assert torch.equal(s_flat, r_flat) and s_flat.stride() == r_flat.stride()
    assert _plain_layout(s_layout) == _plain_layout(r_layout)
    assert _leaves(s_layout.unpack(s_flat)) == _leaves(r_layout.unpack(r_flat))


@pytest.mark.parametrize("bad", ["dtypes", "non_tensor", "dim", "layout_keys", "layout_shape", "lazy_keys"])
def test_pack_refusals_match(ref, tb, bad):
    def attempt(lib: Any) -> type:
        td = lib.TensorDict(a=torch.zeros(2), b=torch.zeros(2, 3), batch_size=[2])
        _, layout = td.pack()
        try:
            if bad == "dtypes":
                td.set("b", torch.zeros(2, dtype=torch.long)).pack()
            elif bad == "non_tensor":
                td.set_non_tensor("s", "x").pack()
            elif bad == "dim":
                td.pack(-3)
            elif bad == "layout_keys":
                td.exclude("a").pack(layout=layout)
            elif bad == "layout_shape":
                td.set("b", torch.zeros(2, 4)).pack(layout=layout)
            else:
                lib.lazy_stack([lib.TensorDict(a=torch.zeros(1)), lib.TensorDict(c=torch.zeros(1))]).pack()
        except Exception as err:  # the type is what is compared
            return type(err)
        return type(None)

    theirs, ours = attempt(ref), attempt(tb)
    assert theirs is not type(None)
    assert builtin_bases(ours) == builtin_bases(theirs)
