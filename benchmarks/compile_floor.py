"""What bounds the compile time of ``compiled.py``'s step: the same step on trees that are not TensorDicts.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_floor.py [--repeats 11] [--backend inductor]

The target for the compile time of the TensorDict step is 1.25x the plain-dict step's (``compiled.py``). This times one
compile (first call after ``torch._dynamo.reset()``, warm on-disk caches, implementations interleaved per
repeat, as ``compiled.py``) of the same work on five trees, each step from the one before changing one thing:

- ``raw``: ``compiled.step_raw``, two dict comprehensions (the update fused with ``* LR``);
- ``dicts_3``: three comprehensions, one per operation of the TensorDict step (grads, ``* LR``, ``-``);
- ``dicts_walk``: the three operations as a library has to write them (the depth of a tree is data): a
  recursive walk over nested plain dicts, the operation passed as a function, a node built per call;
- ``object_1``: that walk over nodes that are objects of a slotted class with one attribute (the dict);
- ``object_5``: the same with five attributes (dict, batch size, device, names, lock), as a TensorDict node;
- ``tb``: ``compiled.step_td`` on a TensorDict.

Measured (torch 2.13, 2-core box, quiet, medians of 11, three runs): raw 1.00, dicts_3 1.05-1.06,
dicts_walk 1.30-1.37, object_1 1.53-1.57, object_5 1.54-1.59, tb 1.82-1.83 (``run.py --suite compile``:
1.70-1.72). Each operation walked as a library must walk it is past the target already over plain dicts,
and a tree of objects, whatever its attributes, is 1.5x raw: dynamo traces a user-defined object through
its attribute reads and writes, guards its attributes and rebuilds every returned one from its writes,
where a dict is one variable it knows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compiled


class Node1:
    """A tree node with one attribute: its dict of children."""

    __slots__ = ("d",)


class Node5:
    """A tree node with a TensorDict node's five attributes."""

    __slots__ = ("batch", "d", "device", "locked", "names")


def node1(d: dict) -> Node1:
    n = object.__new__(Node1)
    n.d = d
    return n


def node5(d: dict) -> Node5:
    n = object.__new__(Node5)
    n.d = d
    n.batch = ()
    n.device = None
    n.names = None
    n.locked = False
    return n


def dicts_3(tree: dict) -> dict:
    scale = tree["small"]["0"].mean()
    grads = {g: {k: compiled._act(p, scale) for k, p in sub.items()} for g, sub in tree.items()}
    scaled = {g: {k: p * compiled.LR for k, p in sub.items()} for g, sub in grads.items()}
    return {g: {k: p - scaled[g][k] for k, p in sub.items()} for g, sub in tree.items()}


def _walk(d: dict, fn: Callable, make: Callable) -> Any:
    out = {}
    for k, v in d.items():
        out[k] = fn(v) if type(v) is torch.Tensor else _walk(v if make is None else v.d, fn, make)
    return out if make is None else make(out)


def _walk2(d: dict, o: dict, fn: Callable, make: Callable) -> Any:
    out = {}
    for k, v in d.items():
        w = o[k]
        out[k] = (
            fn(v, w)
            if type(v) is torch.Tensor
            else (_walk2(v, w, fn, make) if make is None else _walk2(v.d, w.d, fn, make))
        )
    return out if make is None else make(out)


def walked(make: Callable | None) -> Callable:
    """The step as three walks over a tree whose nodes ``make`` builds (None: plain dicts)."""

    def step(tree: Any) -> Any:
        d = tree if make is None else tree.d
        scale = (d["small"]["0"] if make is None else d["small"].d["0"]).mean()
        grads = _walk(d, lambda p: compiled._act(p, scale), make)
        scaled = _walk(grads if make is None else grads.d, lambda p: p * compiled.LR, make)
        return _walk2(d, scaled if make is None else scaled.d, lambda a, b: a - b, make)

    return step


def of_nodes(tree: dict, make: Callable) -> Any:
    return make({k: of_nodes(v, make) if isinstance(v, dict) else v for k, v in tree.items()})


def as_dicts(tree: Any) -> Any:
    """A result as nested plain dicts (nodes unwrapped), for checking the trees compute the same step."""
    tree = getattr(tree, "d", tree)
    return {k: as_dicts(v) for k, v in tree.items()} if isinstance(tree, dict) else tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--backend", default="inductor")
    args = parser.parse_args()
    import tensorbatch

    plain = compiled.make_data
    impls: dict[str, tuple[Callable, Any]] = {
        "raw": (compiled.step_raw, plain(None)),
        "dicts_3": (dicts_3, plain(None)),
        "dicts_walk": (walked(None), plain(None)),
        "object_1": (walked(node1), of_nodes(plain(None), node1)),
        "object_5": (walked(node5), of_nodes(plain(None), node5)),
        "tb": (compiled.step_td, plain(tensorbatch)),
    }
    fns = {name: compiled.own_code(fn, name) for name, (fn, _) in impls.items()}
    want = compiled.leaves(compiled.step_raw(plain(None)))
    for name, (_, data) in impls.items():  # one untimed compile each: torch's on-disk caches equally warm
        out = compiled.compile_once(fns[name], data, args.backend)[0](data)
        got = compiled.leaves(out if name == "tb" else as_dicts(out))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, msg=f"{name} differs from raw")
    order = list(impls)
    samples: dict[str, list[float]] = {name: [] for name in order}
    for r in range(args.repeats):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            samples[name].append(compiled.compile_once(fns[name], impls[name][1], args.backend)[1])
    raw = statistics.median(samples["raw"])
    print(f"{'tree':<12}{'compile ms':>11}{'(min)':>8}{'x raw':>8}")
    for name, s in samples.items():
        med = statistics.median(s)
        print(f"{name:<12}{med * 1e3:>11.1f}{min(s) * 1e3:>8.1f}{med / raw:>8.2f}")


if __name__ == "__main__":
    main()
