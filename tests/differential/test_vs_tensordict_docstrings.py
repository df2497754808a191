"""tensordict's own docstring examples outside ``tensordict.nn`` run on tensorbatch behind the switch.

As ``test_vs_tensordict_nn_docstrings.py`` does for ``tensordict.nn``: the examples are read at run time from the
installed tensordict 0.15.3 (``doctest.DocTestFinder`` over every module of the package but ``tensordict.nn``)
and run twice in fresh interpreters (``_doc_runner.py``), once with the real tensordict and once with the switch
on. A docstring of a private module (``tensordict._td``, ``tensordict._base.shape``, ``tensordict.store._lazy``)
runs in the namespace of ``tensordict`` itself: its examples are what users type after ``import tensordict``, and
the switch gives no alias for tensordict's private modules.

Each docstring that passes on tensordict must pass under the switch, except those listed in ``KNOWN_FAILURES``
(each with the reason); a listed one that passes fails the test too, so the list stays true.
"""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import pytest

from ._doc_runner import collect, modules, run

# one subprocess per library over 368 docstrings (2,423 examples): about 20 s in all, so not marked slow
pytestmark = pytest.mark.differential

# Docstrings not run, by name ("<module>.<qualname>"), each with the reason.
SKIPS: dict[str, str] = {
    "tensordict._lazy._PermutedTensorDict": "a legacy lazy view class (set_lazy_legacy(True)), which tensorbatch "
    "does not have (README, Differences: legacy lazy mode)",
    "tensordict._lazy._UnsqueezedTensorDict": "a legacy lazy view class (set_lazy_legacy(True)), which tensorbatch "
    "does not have (README, Differences: legacy lazy mode)",
}

# Docstrings that pass on tensordict 0.15.3 but not under the switch, each with the reason.
KNOWN_FAILURES: dict[str, str] = {
    "tensordict._base.convert._Conversion.from_zarr": "a zarr TensorDict is a StoredTensorDict (README: tensordict's "
    "is a PersistentTensorDict), so its repr's class differs",
    "tensordict._base.convert._Conversion.to_zarr": "to_zarr returns a StoredTensorDict (README: tensordict's is a "
    "PersistentTensorDict); the example prints the class name",
    "tensordict._base.convert._Conversion.to_namedtuple": "a TensorClass's to_namedtuple is a namedtuple with the "
    "field names (README, Differences: tensordict's is a plain tuple)",
    "tensordict._base.convert._Conversion.to_tensordict": "a lazy stack's to_tensordict keeps its stack dim's name "
    "(README, Differences: tensordict drops it)",
    "tensordict._base.serialization._Serialization.consolidate": "consolidate() keeps the source's lock state "
    "(tensordict locks an in-memory result only; pinned in tests/test_consolidate.py)",
    "tensordict._base.serialization._Serialization.load_memmap_": "load_memmap_ copies the saved values into the "
    "leaves and keeps the keys the save lacks (tensordict replaces the content with memory-mapped leaves; pinned "
    "in test_vs_tensordict_memmap.py, mm_load_memmap_)",
    "tensordict._indexing.convert_ellipsis_to_idx": "a private helper of a private module (tensordict._indexing), "
    "which the switch does not provide",
    "tensordict._td._SubTensorDict._clone": "a private class and method (_SubTensorDict, _get_sub_tensordict) that "
    "tensorbatch does not have",
    "tensordict.base.TensorDictBase._transform_keys": "a private method (TensorDictBase._transform_keys) that "
    "tensorbatch does not have",
    "tensordict.base.TensorDictBase.contiguous": "a lazy stack's contiguous() keeps its stack dim's name (README, "
    "Differences: tensordict drops it)",
    "tensordict.base.TensorDictBase.entry_class": "the class printed is tensorbatch's (tensorbatch._td.TensorDict): "
    "the switch aliases modules, not class paths",
    "tensordict.prototype.fx.symbolic_trace": "tensordict.prototype (fx tracing of modules) has no counterpart",
    "tensordict.tensorclass.NonTensorData": "memmap() of a value JSON cannot hold needs allow_pickle=True (README, "
    "Differences: tensordict pickles it silently)",
    "tensordict.utils._KeyDependentDefaultDict": "a private helper of tensordict.utils that no user code reaches",
    "tensordict.utils._cache_while_locked": "a private helper of tensordict.utils that no user code reaches",
    "tensordict.utils._import_and_wrap_functorch": "a private helper of tensordict.utils that no user code reaches",
    "tensordict.utils._int_generator": "a private helper of tensordict.utils that no user code reaches",
    "tensordict.utils._sub_index": "a private helper of tensordict.utils that no user code reaches",
    "tensordict.utils.set_printoptions": "repr prints a tree (README, Differences): compact=False's output differs in "
    "form",
}


def _namespace(module: str) -> str:
    return "tensordict" if any(part.startswith("_") for part in module.split(".")) else module


def _names() -> list[str]:
    return [n for n in modules("tensordict") if n != "tensordict.nn" and not n.startswith("tensordict.nn.")]


@pytest.fixture(scope="module")
def outcomes(ref: Any) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    docs = [d for d in collect(_names(), _namespace) if d["name"] not in SKIPS]
    return docs, run("tensordict", docs, timeout=600), run("tensorbatch", docs, timeout=600)


def test_examples_found(outcomes: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]) -> None:
    docs, on_ref, _ = outcomes
    # 0.15.3: 368 docstrings run (SKIPS left out), 367 of them passing on tensordict
    assert len(docs) >= 350 and sum(len(d["examples"]) for d in docs) >= 2000
    assert sum(r["status"] == "passed" for r in on_ref.values()) >= 360


def test_lists_name_real_docstrings(ref: Any) -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {t.name for n in _names() for t in finder.find(importlib.import_module(n), n) if t.examples}
    assert set(SKIPS) <= found, sorted(set(SKIPS) - found)
    assert set(KNOWN_FAILURES) <= found, sorted(set(KNOWN_FAILURES) - found)
    assert not set(SKIPS) & set(KNOWN_FAILURES)


def test_examples_that_pass_on_tensordict_pass_on_tensorbatch(
    outcomes: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]],
) -> None:
    _, on_ref, on_tb = outcomes
    failures, stale = [], []
    for name, result in sorted(on_ref.items()):
        if result["status"] != "passed":
            continue
        tb = on_tb[name]
        if tb["status"] == "passed":
            if name in KNOWN_FAILURES:
                stale.append(name)
            continue
        if name not in KNOWN_FAILURES:
            failures.append(
                f"{name}:\n  >>> {tb['source'].strip()}\n  want: {tb['want'].strip()[:300]}\n"
                f"  got:  {tb['got'].strip()[:300]}"
            )
    assert not failures, f"{len(failures)} docstrings fail under the switch:\n" + "\n".join(failures)
    assert not stale, f"listed in KNOWN_FAILURES but passing now (remove them): {stale}"


def test_known_failures_pass_on_tensordict(
    outcomes: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]],
) -> None:
    _, on_ref, _ = outcomes
    assert not [n for n in KNOWN_FAILURES if on_ref.get(n, {}).get("status") != "passed"]
