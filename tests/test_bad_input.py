"""Bad input: the error type matches tensordict 0.15.3, the message names the key path and the shapes,
and the container is left exactly as it was (STYLE.md R6, "no half-applied updates").

Each case in ``CASES`` is an action ``f(lib, td)`` on ``make(lib)``. ``test_bad_input`` runs it on
tensorbatch (type + message + unchanged); ``test_reference_type`` runs it on tensordict (when
installed) to keep the hard-coded types honest. Cases where tensorbatch is wrong are strict xfails
whose reason starts with ``BUG:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest
import torch

import tensorbatch

try:
    import tensordict
except ImportError:  # pragma: no cover - the reference is optional
    tensordict = None


# ------------------------------------------------------------------ fixtures & helpers
def make(lib: Any = tensorbatch) -> Any:
    """batch [3]: a f32[4], b i64[2], next: {obs f32[5], rew f32[]}; every value distinct and non-zero."""
    return lib.TensorDict(
        {
            "a": torch.arange(1, 13, dtype=torch.float32).reshape(3, 4),
            "b": torch.arange(1, 7).reshape(3, 2),
            "next": {
                "obs": torch.arange(1, 16, dtype=torch.float32).reshape(3, 5) * 4,
                "rew": torch.tensor([1.0, 4.0, 9.0]),
            },
        },
        batch_size=[3],
    )


def make_locked(lib: Any = tensorbatch) -> Any:
    return make(lib).lock_()


def make_two_nested(lib: Any = tensorbatch) -> Any:
    return lib.TensorDict({"n1": {"x": torch.ones(3, 5)}, "n2": {"y": torch.ones(3)}}, batch_size=[3])


def make_lazy(lib: Any = tensorbatch) -> Any:
    """``make()``'s rows as a lazy stack of three members (stack dim 0)."""
    return lib.lazy_stack(list(make(lib).unbind(0)), 0)


def make_nested_only(lib: Any = tensorbatch) -> Any:
    return make(lib).exclude("a", "b")


def _clone(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _clone(v) for k, v in tree.items()}
    return tree.clone() if isinstance(tree, torch.Tensor) else tree


def snapshot(td: Any) -> dict[str, Any]:
    """Keys (nodes included), every node's batch size, lock state and cloned leaf values."""
    nodes = {str(k): list(v.batch_size) for k, v in td.items(include_nested=True) if hasattr(v, "batch_size")}
    return {
        "keys": sorted(str(k) for k in td.keys(include_nested=True)),
        "batch_size": list(td.batch_size),
        "nodes": nodes,
        "locked": td.is_locked,
        "values": _clone(td.to_dict()),
    }


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = [f"{path}/{k}: only before" for k in a.keys() - b.keys()]
        out += [f"{path}/{k}: only after" for k in b.keys() - a.keys()]
        for k in a.keys() & b.keys():
            out += _diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
        return [] if same else [f"{path}: {a.dtype}{list(a.shape)} -> {b.dtype}{list(b.shape)} (values differ)"]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def assert_unchanged(td: Any, before: dict[str, Any]) -> None:
    diffs = _diff(before, snapshot(td))
    assert not diffs, "container changed by a failed call: " + "; ".join(diffs)


def P(*parts: str) -> str:
    """A regex matching the literal ``parts`` in order (anywhere, across lines: notes included)."""
    return "(?s)" + ".*".join(re.escape(p) for p in parts)


def BM(batch_size: str, key: str, shape: str) -> str:
    """The batch-size mismatch of a value (tensordict's text, the full key path in its key slot)."""
    return P(
        f"batch dimension mismatch, got self.batch_size=torch.Size({batch_size}) and "
        f"value.shape=torch.Size({shape}) for key {key}. The leading dimensions of a value must match the batch size."
    )


def BR(key: str, shape: str, batch_size: str, kind: str = "Tensor") -> str:
    """The ``batch_size`` setter's refusal (tensordict's text, the full key path in its key slot)."""
    return P(
        f"the {kind} {key} has shape torch.Size({shape}) which is incompatible with the batch-size "
        f"torch.Size({batch_size})."
    )


def A(*parts: str) -> str:
    """A regex requiring every literal in ``parts``, in any order."""
    return "(?s)^" + "".join(f"(?=.*{re.escape(p)})" for p in parts)


LOCKED = P("Cannot modify locked TensorDict")


def setitem(td: Any, key: Any, value: Any) -> None:
    td[key] = value


def delitem(td: Any, key: Any) -> None:
    del td[key]


def with_leaf(td: Any, key: Any, value: Any, plus: float = 1) -> Any:
    """A copy of ``td`` (values + ``plus``) whose leaf ``key`` is replaced by ``value``."""
    out = td.clone() + plus if plus else td.clone()
    out[key] = value
    return out


class Case(NamedTuple):
    id: str
    action: Any
    exc: type[BaseException]  # the type tensordict 0.15.3 raises
    match: str
    bug: str | None = None  # tensorbatch is wrong: strict xfail with this reason
    ref: bool = True  # run against tensordict too (False: tensordict does not raise here)
    build: Any = make


def rename_key(td: Any, old: Any, new: Any, **kw: Any) -> None:
    td.rename_key_(old, new, **kw)


def node_at_a(td: Any) -> Any:
    """A copy of ``td`` whose leaf 'a' is a nested TensorDict ``{"z": ...}`` instead."""
    out = td.clone()
    del out["a"]
    out["a"] = {"z": torch.ones(3)}
    return out


def bad_obs(td: Any, n: int = 7, batch: int = 3) -> Any:
    """A copy of ``td`` (+1) whose ('next', 'obs') leaf has the trailing dim ``n`` instead of 5."""
    return with_leaf(td, ("next", "obs"), torch.ones(batch, n))


Z, ONES, B = torch.zeros, torch.ones, torch.bool
OBS = ("next", "obs")

# fmt: off
CASES = [
    # ---- construction with wrong batch dims: both shapes and the full key path
    Case("ctor-flat", lambda L, td: L.TensorDict({"a": Z(3), "x": Z(4, 2)}, batch_size=[3]),
         RuntimeError, BM("[3]", "'x'", "[4, 2]")),
    Case("ctor-nested", lambda L, td: L.TensorDict({"next": {"obs": Z(4, 2)}}, batch_size=[3]),
         RuntimeError, BM("[3]", "('next', 'obs')", "[4, 2]")),
    Case("ctor-tuple-key", lambda L, td: L.TensorDict({OBS: Z(4, 2)}, batch_size=[3]),
         RuntimeError, BM("[3]", "('next', 'obs')", "[4, 2]")),
    Case("ctor-bad-batch-size", lambda L, td: L.TensorDict({}, batch_size="x"), ValueError, P("batch_size")),
    Case("ctor-source-not-mapping", lambda L, td: L.TensorDict([1, 2], batch_size=[]), ValueError, P("list")),
    # ---- setting a leaf of the wrong shape
    Case("set-new", lambda L, td: setitem(td, "x", Z(4, 2)), RuntimeError, BM("[3]", "'x'", "[4, 2]")),
    Case("set-existing", lambda L, td: setitem(td, "a", Z(4, 2)),
         RuntimeError, BM("[3]", "'a'", "[4, 2]")),
    Case("set-nested", lambda L, td: setitem(td, OBS, Z(2, 5)), RuntimeError,
         BM("[3]", "('next', 'obs')", "[2, 5]")),
    Case("set-nested-new", lambda L, td: setitem(td, ("next", "new"), Z(2, 5)), RuntimeError,
         BM("[3]", "('next', 'new')", "[2, 5]")),
    Case("set-creates-level", lambda L, td: setitem(td, ("z", "y"), Z(2, 5)), RuntimeError,
         BM("[3]", "('z', 'y')", "[2, 5]")),
    Case("set-method-creates-level", lambda L, td: td.set(("z", "y"), Z(2, 5)), RuntimeError,
         BM("[3]", "('z', 'y')", "[2, 5]")),
    Case("set-method-nested", lambda L, td: td.set(OBS, Z(2, 5)),
         RuntimeError, BM("[3]", "('next', 'obs')", "[2, 5]")),
    Case("set-list", lambda L, td: setitem(td, "x", [1, 2]), RuntimeError, BM("[3]", "'x'", "[2]")),
    Case("setdefault", lambda L, td: td.setdefault("x", Z(4)), RuntimeError, BM("[3]", "'x'", "[4]")),
    # ---- batch_size setter
    Case("batch-size-set", lambda L, td: setattr(td, "batch_size", [4]), RuntimeError,
         BR("a", "[3, 4]", "[4]")),
    Case("batch-size-set-2d", lambda L, td: setattr(td, "batch_size", [3, 4]), RuntimeError,
         BR("b", "[3, 2]", "[3, 4]")),
    Case("batch-size-set-nested", lambda L, td: setattr(td, "batch_size", [3, 5]), RuntimeError,
         BR("('next', 'rew')", "[3]", "[3, 5]"), build=make_nested_only),
    Case("batch-size-set-two-nested", lambda L, td: setattr(td, "batch_size", [3, 5]), RuntimeError,
         BR("('n2', 'y')", "[3]", "[3, 5]"), build=make_two_nested),
    Case("names-length", lambda L, td: setattr(td, "names", ["x", "y"]), ValueError, P("['x', 'y']")),
    # ---- missing keys: KeyError naming the full path
    Case("get-missing", lambda L, td: td["missing"], KeyError,
         P('key "missing" not found', "with keys", "next")),
    Case("get-nested-missing", lambda L, td: td["next", "missing"], KeyError,
         P('key "missing" not found', '["obs", "rew"]', '(key path ("next", "missing"))')),
    Case("get-missing-level", lambda L, td: td["nope", "missing"], KeyError, P('key "nope" not found')),
    Case("get-through-leaf", lambda L, td: td["a", "x"], ValueError, P("('a', 'x')", "'a' is a Tensor")),
    Case("get-method-through-leaf", lambda L, td: td.get(("a", "x")), ValueError, P("'a' is a Tensor")),
    Case("del-missing", lambda L, td: delitem(td, "missing"), KeyError, P('"missing"')),
    Case("del-nested-missing", lambda L, td: delitem(td, ("next", "missing")),
         KeyError, P('("next", "missing")')),
    Case("pop-missing", lambda L, td: td.pop("missing"), KeyError, P('key "missing" not found')),
    Case("pop-nested-missing", lambda L, td: td.pop(("next", "missing")),
         KeyError, P('key "missing" not found', '("next", "missing")')),
    Case("set_-missing", lambda L, td: td.set_("missing", Z(3)), KeyError, P('key "missing" not found')),
    Case("set_-nested-missing", lambda L, td: td.set_(("next", "missing"), Z(3)), KeyError,
         P('key "missing" not found', '(key path ("next", "missing"))')),
    Case("set_-bad-shape", lambda L, td: td.set_(OBS, Z(3, 7)),
         ValueError, P("[3, 7]", "('next', 'obs')", "[3, 5]")),
    Case("select-missing", lambda L, td: td.select("a", "missing"), KeyError, P('key "missing" not found')),
    Case("select-nested-missing", lambda L, td: td.select(("next", "missing")),
         KeyError, P('("next", "missing")')),
    Case("rename-missing", lambda L, td: rename_key(td, "missing", "z"),
         KeyError, P('key "missing" not found')),
    Case("rename-safe-exists", lambda L, td: rename_key(td, "a", "b", safe=True), KeyError,
         P("'b' already present")),
    Case("rename-into-leaf", lambda L, td: rename_key(td, OBS, ("a", "x")), KeyError, P("'a'")),
    Case("where-missing", lambda L, td: td.where(ONES(3, dtype=B), td.exclude("a")), KeyError, P('"a"')),
    # ---- indexing
    Case("index-int", lambda L, td: td[5],
         IndexError, P("index 5 is out of bounds for dimension 0 with size 3")),
    Case("index-neg", lambda L, td: td[-4],
         IndexError, P("index -4 is out of bounds for dimension 0 with size 3")),
    Case("index-nested-td", lambda L, td: td["next"][5], IndexError, P("index 5", "size 3")),
    Case("lazy-index-tensor-oob", lambda L, td: td[torch.tensor([0, 5])], IndexError,
         P("index 5 is out of bounds for the stack dim", "size 3"), build=make_lazy),
    Case("lazy-index-list-neg", lambda L, td: td[[0, -4]], IndexError, P("index -4", "size 3"), build=make_lazy),
    # tensordict lets a list lookup fail there (TypeError); a float index is an IndexError for tensors
    Case("lazy-index-float", lambda L, td: td[torch.tensor([0.5])], IndexError, P("must be long", "float32"),
         build=make_lazy, ref=False),
    Case("index-2d", lambda L, td: td.unsqueeze(0)[0, 5],
         IndexError, P("index 5", "dimension 1 with size 3")),
    Case("index-2d-slice", lambda L, td: td.unsqueeze(0)[:, 5],
         IndexError, P("index 5", "dimension 1 with size 3")),
    Case("index-too-many", lambda L, td: td[0, 0], IndexError, P("too many indices")),
    Case("index-0d", lambda L, td: td[0][0], RuntimeError, P("not permitted")),
    Case("index-mask-shape", lambda L, td: td[torch.tensor([True, False])], IndexError, P("mask [2]", "[3")),
    Case("index-mask-ndim", lambda L, td: td[ONES(3, 2, dtype=B)], IndexError, P("too many indices")),
    Case("setindex-oob", lambda L, td: setitem(td, 5, td[0]), IndexError, P("index 5", "size 3")),
    # ---- locked: RuntimeError and nothing changed
    Case("locked-new", lambda L, td: setitem(td, "x", Z(3)), RuntimeError, LOCKED, build=make_locked),
    Case("locked-new-nested", lambda L, td: setitem(td, ("next", "x"), Z(3)), RuntimeError, LOCKED,
         build=make_locked),
    Case("locked-del", lambda L, td: delitem(td, "a"), RuntimeError, LOCKED, build=make_locked),
    Case("locked-del-nested", lambda L, td: delitem(td, OBS), RuntimeError, LOCKED, build=make_locked),
    Case("locked-pop", lambda L, td: td.pop("a"), RuntimeError, LOCKED, build=make_locked),
    Case("locked-clear", lambda L, td: td.clear(), RuntimeError, LOCKED, build=make_locked),
    Case("locked-rename", lambda L, td: rename_key(td, "a", "z"), RuntimeError, LOCKED, build=make_locked),
    Case("locked-update-new", lambda L, td: td.update({"a": Z(3, 4), "x": Z(3)}), RuntimeError, LOCKED,
         build=make_locked),
    Case("locked-update-nested-new", lambda L, td: td.update({"next": {"new": Z(3)}}), RuntimeError, LOCKED,
         build=make_locked),
    # tensordict writes 'a' before refusing 'x' here; tensorbatch validates first
    Case("locked-update-inplace-new", lambda L, td: td.update({"a": Z(3, 4), "x": Z(3)}, inplace=True),
         RuntimeError, LOCKED, build=make_locked),
    Case("locked-setindex-new", lambda L, td: setitem(td, 0, {"new": Z(())}), RuntimeError, LOCKED,
         build=make_locked),
    # ---- binary ops with mismatched key sets: KeyError naming the keys
    Case("binop-missing", lambda L, td: td + td.exclude("a"), KeyError, P("mismatch", "{'a'}")),
    Case("binop-extra", lambda L, td: td + td.clone().set("extra", Z(3)), KeyError, P("'extra'")),
    Case("binop-nested-missing", lambda L, td: td + td.exclude(("next", "rew")),
         KeyError, P("'next'", "'rew'")),
    Case("binop-nested-extra", lambda L, td: td + td.clone().set(("next", "extra"), Z(3)), KeyError,
         P("'next'", "'extra'")),
    Case("binop-nested-renamed", lambda L, td: td * td.clone().rename_key_(("next", "rew"), ("next", "rex")),
         KeyError, P("'next'", "'rew'", "'rex'")),
    Case("inplace-binop-missing", lambda L, td: td.add_(td.exclude("b")), KeyError, P("mismatch", "{'b'}")),
    # ---- a value that is no mapping: tensordict lets `.items()` fail (AttributeError); ours is a TypeError too
    Case("update-not-mapping", lambda L, td: td.update(5), AttributeError, P("update expects a mapping", "int")),
    Case("update-list", lambda L, td: td.update([("a", Z(3, 4))]), AttributeError, P("update expects", "list")),
    Case("update_-not-mapping", lambda L, td: td.update_(5), TypeError, P("update_ expects", "int")),
    Case("update_at_-not-mapping", lambda L, td: td.update_at_(5, 0), AttributeError, P("update_at_ expects", "int")),
    # ---- a leaf in one, a node in the other: a key mismatch under that key (tensordict: AttributeErrors
    #      from stack/cat; where() broadcasts the leaf into the node; apply() hands the node to fn)
    Case("binop-leaf-vs-node", lambda L, td: td + node_at_a(td), KeyError, P("mismatch under 'a'", "{'z'}")),
    Case("binop-node-vs-leaf", lambda L, td: node_at_a(td) - td, KeyError, P("mismatch under 'a'", "{'z'}")),
    Case("inplace-binop-leaf-vs-node", lambda L, td: td.add_(node_at_a(td)), KeyError,
         P("mismatch under 'a'", "{'z'}")),
    Case("stack-leaf-vs-node", lambda L, td: torch.stack([td, node_at_a(td)]), RuntimeError,
         P("different keys", "under 'a'", "{'z'}"), ref=False),
    Case("cat-leaf-vs-node", lambda L, td: torch.cat([td, node_at_a(td)]), KeyError,
         P("mismatch under 'a'", "{'z'}"), ref=False),
    Case("where-node-vs-leaf", lambda L, td: node_at_a(td).where(torch.ones(3, dtype=torch.bool), td), KeyError,
         P("mismatch under 'a'", "{'z'}"), ref=False),
    Case("where-leaf-vs-node", lambda L, td: td.where(torch.ones(3, dtype=torch.bool), node_at_a(td)), KeyError,
         P("mismatch under 'a'", "{'z'}"), ref=False),
    Case("apply-leaf-vs-node", lambda L, td: td.apply(lambda x, y: x, node_at_a(td)), KeyError,
         P("mismatch under 'a'", "{'z'}"), ref=False),
    # ---- leaf-wise torch errors keep their type and gain "while ... at key ..."
    Case("binop-leaf-shape", lambda L, td: td + bad_obs(td), RuntimeError,
         P("(5)", "(7)", "while add at key ('next', 'obs')")),
    Case("eq-leaf-shape", lambda L, td: td == bad_obs(td),
         RuntimeError, P("while eq at key ('next', 'obs')")),
    Case("binop-tensor", lambda L, td: td.add(ONES(4)), RuntimeError, P("4", "while add at key 'a'")),
    Case("apply-view", lambda L, td: td.apply(lambda x: x.view(7)), RuntimeError,
         P("shape '[7]' is invalid", "while applying fn at key 'a'")),
    Case("apply-nested", lambda L, td: td.apply(lambda x: x.view(3, -1, 2) if x.shape[-1] == 5 else x),
         RuntimeError, P("while applying fn at key ('next', 'obs')")),
    Case("apply-others", lambda L, td: td.apply(torch.add, bad_obs(td)), RuntimeError,
         P("while applying fn at key ('next', 'obs')")),
    Case("apply-batch-size", lambda L, td: td.apply(lambda x: x[:2], batch_size=[3]), RuntimeError,
         BM("[3]", "'a'", "[2, 4]")),
    Case("where-leaf-shape", lambda L, td: td.where(ONES(3, dtype=B), bad_obs(td)), RuntimeError,
         P("while where at key ('next', 'obs')")),
    Case("clamp-leaf-shape", lambda L, td: td.clamp(bad_obs(td), None),
         RuntimeError, A("('next', 'obs')", "7"),
         ref=False),
    Case("addcmul-leaf-shape", lambda L, td: td.addcmul(bad_obs(td), bad_obs(td)), RuntimeError,
         A("('next', 'obs')", "7")),
    Case("view-dtype", lambda L, td: td.view(torch.float16), RuntimeError, BM("[3]", "('next', 'rew')", "[6]")),
    # ---- update / update_ / set_at_ / update_at_ / td[idx] = ...: validated before any write
    Case("update-3rd-flat", lambda L, td: td.update({"a": Z(3, 4), "new": Z(3), "bad": Z(4, 5)}),
         RuntimeError, BM("[3]", "'bad'", "[4, 5]")),
    Case("update-3rd-nested",
         lambda L, td: td.update({"a": Z(3, 4), "new": Z(3), "next": {"rew": Z(3), "obs": Z(4, 5)}}),
         RuntimeError, BM("[3]", "('next', 'obs')", "[4, 5]")),
    Case("update-3rd-td",
         lambda L, td: td.update(L.TensorDict({"a": Z(3, 4), "new": Z(3), "bad": Z(4, 5)}, batch_size=[])),
         RuntimeError, BM("[3]", "'bad'", "[4, 5]")),
    Case("update-creates-level", lambda L, td: td.update({"z": {"y": Z(2, 5)}}), RuntimeError,
         BM("[3]", "('z', 'y')", "[2, 5]")),
    Case("update_-trailing-shape", lambda L, td: td.update_({"a": Z(3, 4), "next": {"obs": Z(3, 9)}}),
         RuntimeError, A("('next', 'obs')", "[3, 9]", "[3, 5]")),
    Case("copy_-trailing-shape", lambda L, td: td.copy_(bad_obs(td)),
         RuntimeError, A("('next', 'obs')", "[3, 7]", "[3, 5]")),
    Case("setindex-td-nested", lambda L, td: setitem(td, slice(0, 2), bad_obs(td[0:2], batch=2)),
         RuntimeError,
         P("[2, 7]", "('next', 'obs')", "[2, 5]")),
    Case("setindex-td-first",
         lambda L, td: setitem(td, slice(0, 2), with_leaf(td[0:2], "b", ONES(2, 7).long())),
         RuntimeError, P("[2, 7]", "'b'", "[2, 2]")),
    Case("setindex-td-int", lambda L, td: setitem(td, 0, with_leaf(td[0], OBS, ONES(7))), RuntimeError,
         P("[7]", "('next', 'obs')", "[5]")),
    Case("setindex-tensor", lambda L, td: setitem(td, slice(0, 2), Z(3)),
         RuntimeError, P("[3]", "'a'", "[2, 4]")),
    Case("set_at_", lambda L, td: td.set_at_(OBS, ONES(9), 0),
         RuntimeError, P("[9]", "('next', 'obs')", "[5]")),
    Case("update_at_", lambda L, td: td.update_at_({"a": ONES(4), OBS: ONES(9)}, 0), RuntimeError,
         P("[9]", "('next', 'obs')", "[5]")),
    # ---- a non-tensor where a tensor (or TensorDict) is required
    Case("add-str", lambda L, td: td.add("str"), TypeError, P("str")),
    Case("sub-str", lambda L, td: td.sub("x"), TypeError, P("str")),
    Case("op-str", lambda L, td: td + "str", TypeError, P("str")),
    Case("torch-stack-str", lambda L, td: torch.stack([td, "x"]), TypeError, P("str")),
    Case("torch-cat-str", lambda L, td: torch.cat([td, "x"]), TypeError, P("str")),
    # ---- stack / cat
    Case("stack-batch", lambda L, td: torch.stack([td, td[:2]]), RuntimeError, P("[2]", "[3]")),
    Case("stack-keys", lambda L, td: torch.stack([td, td.exclude("a")]), RuntimeError, P("'a'")),
    Case("stack-keys-nested", lambda L, td: torch.stack([td, td.exclude(("next", "rew"))]), RuntimeError,
         P("'next'", "'rew'")),
    Case("stack-leaf-shape", lambda L, td: torch.stack([td, bad_obs(td)]), RuntimeError, P("('next', 'obs')")),
    Case("stack-dim", lambda L, td: torch.stack([td, td], 3), IndexError, P("3")),
    Case("cat-batch-ndim", lambda L, td: torch.cat([td, td.unsqueeze(1)]), RuntimeError, P("[3, 1]", "[3]")),
    Case("cat-batch", lambda L, td: torch.cat([td.unsqueeze(1), td.unsqueeze(1).expand(3, 2)]), RuntimeError,
         P("[3, 2]", "[3, 1]")),
    Case("cat-keys", lambda L, td: torch.cat([td, td.exclude("a")]), KeyError, P("'a'")),
    Case("cat-keys-nested", lambda L, td: torch.cat([td, td.exclude(("next", "rew"))]), KeyError, P("'rew'")),
    Case("cat-leaf-shape", lambda L, td: torch.cat([td, bad_obs(td)]), RuntimeError, P("('next', 'obs')")),
    Case("cat-dim", lambda L, td: torch.cat([td, td], 2), RuntimeError, P("2")),
    # ---- shape ops
    Case("reshape", lambda L, td: td.reshape(4), RuntimeError, P("[4]", "[3]")),
    Case("reshape-infer", lambda L, td: td.reshape(2, -1), RuntimeError, P("[2, -1]", "[3]")),
    Case("reshape-two-infer", lambda L, td: td.reshape(-1, -1), RuntimeError, P("only one dimension")),
    Case("view", lambda L, td: td.view(4), RuntimeError, P("[4]", "[3]")),
    Case("permute-repeat", lambda L, td: td.unsqueeze(1).permute(0, 0), ValueError, P("[0, 0]")),
    Case("permute-range", lambda L, td: td.unsqueeze(1).permute(0, 2), ValueError, P("2", "[3, 1]")),
    Case("permute-neg-range", lambda L, td: td.unsqueeze(1).permute(-3, 0), ValueError, P("-3", "[3, 1]")),
    Case("transpose-range", lambda L, td: td.transpose(0, 3), ValueError, P("3", "[3]")),
    Case("unsqueeze", lambda L, td: td.unsqueeze(3), RuntimeError, P("3", "[3]")),
    Case("unsqueeze-neg", lambda L, td: td.unsqueeze(-3), RuntimeError, P("-3", "[3]")),
    Case("squeeze", lambda L, td: td.squeeze(2), IndexError, P("2", "[3]")),
    Case("squeeze-neg", lambda L, td: td.squeeze(-2), IndexError, P("-2", "[3]")),
    Case("unbind", lambda L, td: td.unbind(2), IndexError, P("2", "[3]")),
    Case("sum-dim", lambda L, td: td.sum(3), IndexError, P("3", "[3]")),
    Case("flatten-order", lambda L, td: td.unsqueeze(1).flatten(1, 0), ValueError, P("1", "0")),
    Case("unflatten", lambda L, td: td.unflatten(0, (2, 2)), RuntimeError, P("[2, 2]", "3")),
    Case("split", lambda L, td: td.split([1, 1], 0), RuntimeError, P("[1, 1]", "3")),
    Case("expand", lambda L, td: td.expand(4), RuntimeError, P("[3]", "[4]")),
    Case("expand-fewer", lambda L, td: td.unsqueeze(1).expand(3), RuntimeError, P("[3]", "[3, 1]")),
    Case("masked-fill", lambda L, td: td.masked_fill(ONES(2, dtype=B), 1.0), RuntimeError, P("[2]", "[3]")),
    Case("masked-fill_", lambda L, td: td.masked_fill_(ONES(2, dtype=B), 1.0), RuntimeError, P("[2]", "[3]")),
]
# fmt: on


def _params(cases: list[Case], with_bugs: bool) -> list[Any]:
    out = []
    for c in cases:
        marks = [pytest.mark.xfail(reason=c.bug, strict=True)] if (c.bug and with_bugs) else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.parametrize("case", _params(CASES, with_bugs=True))
def test_bad_input(case: Case) -> None:
    td = case.build(tensorbatch)
    before = snapshot(td)
    with pytest.raises(case.exc, match=case.match):
        case.action(tensorbatch, td)
    assert_unchanged(td, before)


@pytest.mark.skipif(tensordict is None, reason="tensordict (the reference) is not installed")
@pytest.mark.filterwarnings("ignore::FutureWarning")  # tensordict 0.15.3 warns on stack dims past the batch
@pytest.mark.parametrize("case", _params([c for c in CASES if c.ref], with_bugs=False))
def test_reference_type(case: Case) -> None:
    """tensordict 0.15.3 raises the type written in the case (messages and atomicity not compared)."""
    with pytest.raises(case.exc):
        case.action(tensordict, case.build(tensordict))


def test_not_a_mapping_is_a_type_error_too() -> None:
    with pytest.raises(TypeError, match="update expects a mapping or a TensorDict, got int"):
        make().update(5)


@pytest.mark.parametrize("method", ["update", "update_"])
def test_update_with_none_does_nothing(method: str) -> None:
    """As in tensordict: None is taken for an empty mapping."""
    td = make()
    before = snapshot(td)
    assert getattr(td, method)(None) is td
    assert_unchanged(td, before)


# ------------------------------------------------------------------ in-place ops that fail midway
def _fails_midway(td: Any, action: Any, exc: type[BaseException], match: str | None) -> None:
    before = snapshot(td)
    with pytest.raises(exc, match=match):
        action(td)
    assert_unchanged(td, before)


def test_add_inplace_bad_second_leaf() -> None:
    td = make()
    other = with_leaf(td, "b", torch.ones(3, 9, dtype=torch.int64))
    _fails_midway(td, lambda t: t.add_(other), RuntimeError, A("'b'", "[3, 9]", "[3, 2]"))


def test_add_inplace_bad_nested_leaf() -> None:
    td = make()
    other = with_leaf(td, ("next", "rew"), torch.ones(3, 9))
    _fails_midway(td, lambda t: t.add_(other), RuntimeError, A("('next', 'rew')", "[3, 9]", "[3]"))


def test_add_inplace_dtype_failure() -> None:
    td = make()
    _fails_midway(td, lambda t: t.add_(t.clone() + 0.5), RuntimeError, A("'b'", "float32", "int64"))


def test_iadd_bad_leaf() -> None:
    td = make()
    other = with_leaf(td, "b", torch.ones(3, 9, dtype=torch.int64))

    def iadd(t: Any) -> None:
        t += other

    _fails_midway(td, iadd, RuntimeError, A("'b'", "[3, 9]"))


def test_mul_inplace_scalar_dtype_failure() -> None:
    _fails_midway(make(), lambda t: t.mul_(1.5), RuntimeError, A("'b'", "int64"))


def test_unary_inplace_failure_modifies_nothing() -> None:
    # tensordict sqrt's 'a' and then fails on the int64 'b'; an early tensorbatch sqrt'ed 'a' twice
    _fails_midway(make(), lambda t: t.sqrt_(), RuntimeError, A("'b'", "int64"))


def test_apply_inplace_failure_midway() -> None:
    _fails_midway(
        make(),
        lambda t: t.apply_(lambda x: x + 1 if x.dtype != torch.int64 else x.view(99)),
        RuntimeError,
        P("'[99]'", "while applying fn at key 'b'"),
    )


def test_update_inplace_trailing_shape_atomic() -> None:
    _fails_midway(
        make(),
        lambda t: t.update_({"a": torch.zeros(3, 4), "next": {"obs": torch.zeros(3, 9)}}),
        RuntimeError,
        None,
    )


def test_batch_size_setter_atomic() -> None:
    _fails_midway(make_two_nested(), lambda t: setattr(t, "batch_size", [3, 5]), RuntimeError, None)


def test_lerp_inplace_failure_midway() -> None:
    td = make()
    _fails_midway(td, lambda t: t.lerp_(t.clone() + 1, 0.5), RuntimeError, A("'b'"))


# ------------------------------------------------------------------ notes, get defaults, devices
def test_note_is_added_once_at_the_innermost_frame() -> None:
    inner = make()

    def outer_fn(x: torch.Tensor) -> torch.Tensor:
        inner.apply(lambda y: y.view(7))  # fails at inner key 'a'
        return x

    with pytest.raises(RuntimeError) as info:
        make().apply(outer_fn)
    notes = [n for n in getattr(info.value, "__notes__", []) if n.startswith("while ")]
    assert notes == ["while applying fn at key 'a'"]


def test_error_in_nested_leaf_note_names_full_path() -> None:
    td = make()
    with pytest.raises(ZeroDivisionError, match=P("while applying fn at key ('next', 'rew')")):
        td.apply(lambda x: x if x.ndim > 1 else 1 // 0)


def test_get_missing_returns_default_like_tensordict() -> None:
    td = make()
    before = snapshot(td)
    assert td.get("missing") is None
    assert td.get(("next", "missing")) is None
    sentinel = object()
    assert td.get(("next", "missing"), sentinel) is sentinel
    assert_unchanged(td, before)
    if tensordict is not None:
        ref = make(tensordict)
        assert ref.get("missing") is None
        assert ref.get(("next", "missing")) is None


def test_meta_device_moves_leaves_instead_of_raising() -> None:
    # tensordict moves a leaf on another device to td.device; it does not raise. Checked with "meta"
    # so that it runs on CPU-only machines.
    td = tensorbatch.TensorDict({"a": torch.zeros(3)}, batch_size=[3], device="meta")
    assert td["a"].device.type == "meta"
    td["x"] = torch.zeros(3)
    assert td["x"].device.type == "meta"
    with pytest.raises(RuntimeError, match=BM("[3]", "'y'", "[4]")):
        td["y"] = torch.zeros(4)
    assert sorted(td.keys()) == ["a", "x"]


def test_unknown_device_string() -> None:
    with pytest.raises(RuntimeError, match="nope"):
        tensorbatch.TensorDict({"a": torch.zeros(3)}, batch_size=[3], device="nope")
    with pytest.raises(RuntimeError, match="nope"):
        make().to("nope")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA)")
def test_cuda_device_moves_leaves() -> None:
    td = tensorbatch.TensorDict({"a": torch.zeros(3)}, batch_size=[3], device="cuda")
    td["x"] = torch.zeros(3)
    assert td["x"].device.type == "cuda"
    before = snapshot(td)
    with pytest.raises(RuntimeError, match=BM("[3]", "('n', 'y')", "[4]")):
        td["n", "y"] = torch.zeros(4)
    assert_unchanged(td, before)


def test_locked_set_inplace_still_allowed() -> None:
    td = make_locked()
    td.set_("a", torch.zeros(3, 4))
    assert torch.equal(td["a"], torch.zeros(3, 4))
