"""torch.export, vmap(out_dims=(0,)) and compile(vmap(to_module)) against tensordict 0.15.3 (issue 31).

The same cases (``_export_runner.py``) run with each library in a fresh interpreter (tensordict patches torch's
vmap when imported), and give the same class names, batch sizes and values: strict and non-strict export, static
and dynamic batch dims (one and two; ``ShapesCollection`` names the dynamic dims by tensor, a form both libraries
take), of TensorDict, TensorClass and TypedTensorDict; an output whose batch size is one SymInt; vmap with a
1-tuple out_dims over one TensorDict, lazy stack, TensorClass, TypedTensorDict; compile(vmap) over to_module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.differential

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("_export_runner.py")


def _run(lib: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(RUNNER), lib], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def results(ref: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return _run("tensordict"), _run(os.environ.get("TB_DIFF_SUBJECT", "tensorbatch"))


def test_every_case_gives_tensordicts_result(results: tuple[dict[str, Any], dict[str, Any]]) -> None:
    theirs, ours = results
    assert set(theirs) == set(ours)
    assert len(ours) == 31
    raised = {name: out for name, out in theirs.items() if isinstance(out, str)}
    assert not raised, f"the reference raised (the cases pin what it does): {raised}"
    differ = {name: (theirs[name], ours[name]) for name in theirs if theirs[name] != ours[name]}
    assert not differ, differ
    assert ours["export-typed-2d-strict-dynamic"]["batch_size"] == [6, 7]  # the dynamic dims took other sizes
    assert ours["compile-vmap-to_module"] == [4, True]
