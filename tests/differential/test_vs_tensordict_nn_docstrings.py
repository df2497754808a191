"""tensordict.nn's own docstring examples run on tensorbatch behind the switch (``tensorbatch.compat.install()``).

The examples are read at run time from the installed tensordict 0.15.3 (``doctest.DocTestFinder`` over the
modules of ``tensordict.nn``), then run twice, each time in a fresh interpreter running ``_doc_runner.py``: once
with the real tensordict, once with the switch on. An example that passes on tensordict must pass under the
switch; TensorDict reprs are compared by content (tensorbatch prints a tree on purpose, see README "Differences").
"""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import pytest
import torch

from ._doc_runner import collect, modules, run

pytestmark = pytest.mark.differential

# Docstrings not run, by name ("<module>.<qualname>"), each with the reason. None today: tensordict 0.15.3's nn
# docstrings hold no example of the deprecated functional_modules/make_functional and none that needs the
# network, and the examples that need CUDA (CudaGraphModule's) carry doctest's own "+SKIP" directive, which both
# runs honour.
SKIPS: dict[str, str] = {}


def _docstrings(ref: Any) -> list[dict[str, Any]]:
    return [d for d in collect(modules("tensordict.nn")) if d["name"] not in SKIPS]


@pytest.fixture(scope="module")
def outcomes(ref: Any) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    docs = _docstrings(ref)
    return docs, run("tensordict", docs), run("tensorbatch", docs)


def test_examples_found(outcomes: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]) -> None:
    docs, on_ref, _ = outcomes
    # 0.15.3: 51 docstrings, 547 examples, all passing on tensordict
    assert len(docs) >= 45 and sum(len(d["examples"]) for d in docs) >= 500
    assert sum(r["status"] == "passed" for r in on_ref.values()) >= 45


def test_skips_name_real_docstrings(ref: Any) -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {t.name for n in modules("tensordict.nn") for t in finder.find(importlib.import_module(n), n)}
    assert set(SKIPS) <= found, sorted(set(SKIPS) - found)


def test_examples_that_pass_on_tensordict_pass_on_tensorbatch(
    outcomes: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]],
) -> None:
    _, on_ref, on_tb = outcomes
    failures = []
    for name, result in sorted(on_ref.items()):
        if result["status"] != "passed" or on_tb[name]["status"] == "passed":
            continue
        tb = on_tb[name]
        failures.append(
            f"{name}:\n  >>> {tb['source'].strip()}\n  want: {tb['want'].strip()[:300]}\n"
            f"  got:  {tb['got'].strip()[:300]}"
        )
    assert not failures, f"{len(failures)} examples fail under the switch:\n" + "\n".join(failures)


def _pair(
    lib: Any,
    *,
    shape: tuple[int, ...] = (3, 4),
    dtype: torch.dtype = torch.float32,
    key: str = "x",
    batch: tuple[int, ...] = (3,),
) -> Any:
    inner = lib.TensorDict(c=torch.zeros(3, 2, 5, dtype=torch.int64), batch_size=[3, 2])
    return lib.TensorDict(
        {key: torch.zeros(*shape, dtype=dtype), "w*(x+1)+b": torch.ones(3), "nested": inner, "s": "text"},
        batch_size=batch,
    )


def test_repr_checker_compares_content(ref: Any, tb: Any) -> None:
    from ._doc_runner import Checker

    check = Checker().check_output
    want = repr(_pair(ref))
    assert "fields={" in want  # tensordict's compact repr
    assert check(want + "\n", repr(_pair(tb)) + "\n", doctest.ELLIPSIS)
    assert check(f"TensorDictParams(params={want})\n", f"TensorDictParams(params={_pair(tb)!r})\n", 0)
    for changed in ({"shape": (3, 5)}, {"dtype": torch.float64}, {"key": "y"}, {"batch": ()}):
        assert not check(want + "\n", repr(_pair(tb, **changed)) + "\n", 0), changed
    assert not check("out: " + want + "\n", repr(_pair(tb)) + "\n", 0)
    stacked_ref = ref.LazyStackedTensorDict(*_pair(ref).unbind(0), stack_dim=0)
    stacked_tb = tb.LazyStackedTensorDict(*_pair(tb).unbind(0), stack_dim=0)
    assert check(repr(stacked_ref) + "\n", repr(stacked_tb) + "\n", 0)
    assert not check(repr(stacked_ref) + "\n", repr(_pair(tb)) + "\n", 0)
