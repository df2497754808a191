"""TorchRL 0.14.1 on tensorbatch through ``tensorbatch.compat.install()``.

Each script in ``scripts/`` runs twice in fresh interpreters, at once: with the real tensordict, and with ``--switch``
(tensordict resolved to tensorbatch); the numbers they print must agree. Each run stays under ~20 s of CPU.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math

import pytest

from ._run import SCRIPTS, check_output, run_scripts_in_parallel

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchrl") is None,
    reason="torchrl (0.14.1, installed with --no-deps by scripts/test.sh) is missing",
)

TORCHRL_PACKAGES = [
    "torchrl",
    "torchrl.data",
    "torchrl.envs",
    "torchrl.modules",
    "torchrl.collectors",
    "torchrl.objectives",
    "torchrl.objectives.value",
    "torchrl.trainers",
]


def test_import_torchrl() -> None:
    out = check_output(
        f"""
        import importlib, sys
        import tensorbatch.compat
        tensorbatch.compat.install()
        for name in {TORCHRL_PACKAGES!r}:
            importlib.import_module(name)
        import tensordict, tensorbatch
        assert tensordict.TensorDict is tensorbatch.TensorDict
        real = [n for n, m in sys.modules.items() if n.startswith("tensordict") and "site-packages" in str(
            getattr(m, "__file__", "") or "")]
        print("real tensordict modules:", real)
    """,
        timeout=180,
    )
    assert out.strip() == "real tensordict modules: []"


def _numbers(stdout: str) -> dict[str, float]:
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):  # (a line of words, not a name and a number)
                out[parts[0]] = float(parts[1])
    return out


@pytest.mark.parametrize("script", ["ppo.py", "dqn_sac.py", "envs_buffers.py", "transforms_rnn.py"])
def test_same_numbers_as_tensordict(script: str) -> None:
    runs = {}
    results = run_scripts_in_parallel({flag: (SCRIPTS / script, (flag,)) for flag in ("--reference", "--switch")})
    for flag, done in results.items():
        assert done.returncode == 0, f"{script} {flag} failed:\n{done.stderr[-6000:]}"
        assert done.stdout.rstrip().endswith("done"), done.stdout[-2000:]
        runs[flag] = _numbers(done.stdout)
    want, got = runs["--reference"], runs["--switch"]
    assert want, "the reference run printed no numbers"
    assert got.keys() == want.keys()
    bad = {k: (got[k], want[k]) for k in want if not math.isclose(got[k], want[k], rel_tol=1e-4, abs_tol=1e-6)}
    assert not bad, f"tensorbatch (got) differs from tensordict (want): {bad}"
