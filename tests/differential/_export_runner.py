"""Run the export and vmap/compile cases of issue 31 with one library (``tensordict`` or ``tensorbatch``).

Run as ``python _export_runner.py LIB``, one fresh interpreter per library (tensordict patches torch's vmap when
imported: the libraries must not share a process). Prints one JSON object: per case, what it gave (the class
name, the batch size and every leaf's values) or the type of the error it raised.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.export import Dim, ShapesCollection, export
from torch.utils._pytree import tree_leaves

lib = importlib.import_module(sys.argv[1])
nn_lib = importlib.import_module(f"{sys.argv[1]}.nn")
TensorDict = lib.TensorDict


class Pair(lib.TensorClass):  # type: ignore[misc,name-defined]
    obs: torch.Tensor
    reward: torch.Tensor


class State(lib.TypedTensorDict):  # type: ignore[misc,name-defined]
    obs: torch.Tensor
    reward: torch.Tensor


def _data(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, 3, generator=g), torch.randn(*shape, generator=g)


MAKERS: dict[str, Callable[..., Any]] = {
    "td": lambda *s: TensorDict({"obs": _data(*s)[0], "nested": {"reward": _data(*s)[1]}}, batch_size=list(s)),
    "tc": lambda *s: Pair(obs=_data(*s)[0], reward=_data(*s)[1], batch_size=list(s)),
    "typed": lambda *s: State(obs=_data(*s)[0], reward=_data(*s)[1], batch_size=list(s)),
}


def summary(out: Any, with_type: bool = True) -> Any:
    if isinstance(out, torch.Tensor):
        return out.tolist()
    leaves = out.to_dict() if hasattr(out, "to_dict") else out
    return {
        "type": type(out).__name__ if with_type else None,
        "batch_size": list(out.batch_size),
        "values": [x.tolist() for x in tree_leaves(leaves)],
    }


class Scale(torch.nn.Module):
    def forward(self, t: Any) -> Any:
        return t * 2 + 1


class Build(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return TensorDict({"y": x * 2, "s": {"z": x.sum(-1)}}, batch_size=x.shape[0])


def _dynamic(example: Any, nd: int) -> ShapesCollection:
    dims = [Dim(f"d{i}", min=2, max=64) for i in range(nd)]
    shapes = ShapesCollection()
    for leaf in tree_leaves(example):
        shapes[leaf] = {i: dims[i] for i in range(nd)}
    return shapes


def export_case(kind: str, shape: tuple[int, ...], strict: bool, dynamic: bool) -> Any:
    make = MAKERS[kind]
    example = make(*shape)
    ep = export(Scale(), (example,), strict=strict, dynamic_shapes=_dynamic(example, len(shape)) if dynamic else None)
    other = tuple(s + 2 for s in shape) if dynamic else shape
    return summary(ep.module()(make(*other)))


def build_case(strict: bool) -> Any:
    ep = export(Build(), (torch.randn(4, 3),), strict=strict, dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    return summary(ep.module()(torch.arange(18.0).view(6, 3)))


def out_dims_case(source: str) -> Any:
    def write(t: Any) -> Any:
        if isinstance(t, Pair):
            t.reward = t.obs.sum(-1)
        else:
            t["reward"] = t["obs"].sum(-1)
        return t

    if source == "lazy":
        members = [TensorDict({"obs": torch.full((3,), float(i)), "reward": torch.zeros(())}, []) for i in range(2)]
        data = lib.lazy_stack(members)
    else:
        data = MAKERS[source](2)
    # (a lazy stack comes back a TensorDict here, a lazy stack there: the values and batch size are compared)
    return summary(torch.vmap(write, (0,), (0,))(data), with_type=source != "lazy")


def compiled_vmap_to_module_case() -> Any:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 5))
    td = TensorDict.from_module(module)
    params = nn_lib.TensorDictParams(td.data.expand(4).clone())

    def call(x: torch.Tensor, p: Any) -> torch.Tensor:
        with p.to_module(module):
            return module(x)

    vmapped = torch.vmap(call, (None, 0))
    x = torch.arange(6.0).view(2, 3)
    vmapped(x, params)
    out = torch.compile(vmapped, backend="eager", fullgraph=True)(x, params)
    return [out.shape[0], bool((TensorDict.from_module(module) == td).all())]


CASES: dict[str, Callable[[], Any]] = {}
for _kind in MAKERS:
    for _shape in ((4,), (4, 5)):
        for _strict in (True, False):
            for _dynamic_dims in (False, True):
                CASES[
                    f"export-{_kind}-{len(_shape)}d-{'strict' if _strict else 'non_strict'}-"
                    f"{'dynamic' if _dynamic_dims else 'static'}"
                ] = lambda k=_kind, s=_shape, st=_strict, d=_dynamic_dims: export_case(k, s, st, d)
for _strict in (True, False):
    CASES[f"build-symint-batch-{'strict' if _strict else 'non_strict'}"] = lambda st=_strict: build_case(st)
for _source in ("td", "lazy", "tc", "typed"):
    CASES[f"vmap-out_dims-tuple-{_source}"] = lambda s=_source: out_dims_case(s)
CASES["compile-vmap-to_module"] = compiled_vmap_to_module_case


def main() -> None:
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES)
    results = {}
    for name in names:
        try:
            results[name] = CASES[name]()
        except Exception as err:  # (compared by type with the other library)
            results[name] = f"raised {type(err).__name__}: {str(err)[:200]}"
    print(json.dumps(results))


if __name__ == "__main__":
    main()
