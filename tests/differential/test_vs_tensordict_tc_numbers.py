"""Differential tests: TensorClass fields annotated ``int``/``float``/``bool`` against tensordict 0.15.3.

tensordict 0.15 stores a Python number given to such a field as a 0-d tensor when the batch size is empty
(with a ``FutureWarning`` when the number is of the annotated kind), converts lists and arrays as for a
tensor field, and keeps every value under the ``nocast`` option.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.differential


def _summary(lib: Any, annotation: Any, value: Any, batch: list[int], option: str | None, assign: bool) -> Any:
    klass = lib.TensorClass[option] if option else lib.TensorClass
    namespace = {"__annotations__": {"n": annotation}}
    A = type("A", (klass,), namespace)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            if assign:
                obj = A(n=None, batch_size=batch)
                obj.n = value
            else:
                obj = A(n=value, batch_size=batch)
        except Exception as err:
            return ("raises", type(err).__name__)
    got = obj.n
    warned = [w.category.__name__ for w in record if "field" in str(w.message) or "'n'" in str(w.message)]
    if isinstance(got, torch.Tensor):
        return ("tensor", got.dtype, got.tolist(), warned)
    return (type(got).__name__, got if not isinstance(got, np.ndarray) else got.tolist(), warned)


CASES = [
    ("int_empty_batch", int, 2, [], None),
    ("float_empty_batch", float, 1.5, [], None),
    ("bool_empty_batch", bool, True, [], None),
    ("optional_int", Optional[int], 3, [], None),  # noqa: UP045  (the Optional spelling must work too)
    ("bool_in_int", int, True, [], None),
    ("int_in_float", float, 1, [], None),
    ("bool_in_float", float, True, [], None),
    ("float_in_int", int, 1.5, [], None),
    ("int_in_bool", bool, 1, [], None),
    ("int_batch_3", int, 2, [3], None),
    ("float_batch_1", float, 2.0, [1], None),
    ("list_batch_2", int, [1, 2], [2], None),
    ("list_empty_batch", int, [1, 2], [], None),
    ("array_batch_2", float, np.zeros(2), [2], None),
    ("list_batch_mismatch", int, [1, 2, 3], [2], None),
    ("numpy_scalar", int, np.int64(2), [], None),
    ("str_in_int", int, "x", [], None),
    ("tensor_in_int", int, torch.tensor(4), [], None),
    ("nocast", int, 2, [], "nocast"),
    ("nocast_float", float, 2.5, [], "nocast"),
    ("autocast", int, 2, [], "autocast"),
]


@pytest.mark.parametrize("assign", [False, True], ids=["init", "assign"])
@pytest.mark.parametrize(("annotation", "value", "batch", "option"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_number_field(ref: Any, tb: Any, annotation: Any, value: Any, batch: list[int], option: Any, assign: bool):
    if assign and option == "autocast":
        pytest.skip("autocast's None default is refused by both")
    if assign:  # built empty (None), then the value assigned
        annotation = Optional[annotation]  # noqa: UP045
    expected = _summary(ref, annotation, value, batch, option, assign)
    assert _summary(tb, annotation, value, batch, option, assign) == expected


def test_the_cases_reach_each_outcome(ref: Any) -> None:
    """The reference's results cover a 0-d tensor with and without a warning, a kept value and an error."""
    outcomes = {c[0]: _summary(ref, *c[1:], assign=False) for c in CASES}
    assert outcomes["int_empty_batch"] == ("tensor", torch.int64, 2, ["FutureWarning"])
    assert outcomes["float_in_int"] == ("tensor", torch.get_default_dtype(), 1.5, [])
    assert outcomes["int_batch_3"] == ("int", 2, [])
    assert outcomes["nocast"] == ("int", 2, [])
    assert outcomes["list_batch_mismatch"] == ("raises", "RuntimeError")
