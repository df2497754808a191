"""Compare one function of the library between tensordict and tensorbatch (the nn differential tests).

``check(ref, tb, fn)`` runs ``fn(lib)`` once per library after the same seed and compares summaries: per
tensor its shape, dtype, values (NaN and infinities included) and whether it requires grad; per TensorDict its
class name, batch size and leaves; for an exception its type and message; the warnings raised from either
library or the test, with category and message (the library's name in messages reads ``LIB``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn


def summary(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        values = value.detach().double().flatten().tolist()
        rounded = [("nan" if math.isnan(v) else v if math.isinf(v) else round(v, 5)) for v in values]
        return ("tensor", tuple(value.shape), str(value.dtype), value.requires_grad, rounded)
    if hasattr(value, "batch_size") and hasattr(value, "items"):
        leaves = {str(k): summary(v) for k, v in value.items(True, True)}
        return (type(value).__name__, tuple(value.batch_size), leaves)
    if isinstance(value, nn.Module):
        return (
            "module",
            type(value).__name__,
            sorted(value._parameters),
            sorted(value._buffers),
            {k: summary(v) for k, v in value.state_dict(keep_vars=True).items()},
        )
    if isinstance(value, (list, tuple)):
        return [summary(v) for v in value]
    if isinstance(value, dict):
        return {str(k): summary(v) for k, v in value.items()}
    if isinstance(value, torch.Size):
        return ("size", tuple(value))
    return value


def run(lib: Any, fn: Any) -> Any:
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = summary(fn(lib))
        except Exception as e:  # the error type and message are part of the behaviour
            out = ("raises", type(e).__name__, str(e).replace(f"{lib.__name__}.", "LIB."))
    mine = [
        (w.category.__name__, str(w.message).replace(f"{lib.__name__}.", "LIB."))
        for w in caught
        if "tensordict" in w.filename or "tensorbatch" in w.filename or "test_vs" in w.filename
    ]
    return out, mine


def check(ref: Any, tb: Any, fn: Any) -> None:
    want, got = run(ref, fn), run(tb, fn)
    assert got == want, f"\n got: {got}\nwant: {want}"
