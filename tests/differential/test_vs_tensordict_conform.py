"""Differential tests, issue 16 item 5: the names and parameter names that ``tests/conformance/test_names.py``
found missing, called as a user of tensordict 0.15.3 calls them (by the reference's keywords).
"""

from __future__ import annotations

import pytest
import torch

from ._diff import case

pytestmark = pytest.mark.differential


def _lazy(lib, td):
    return lib.LazyStackedTensorDict.lazy_stack(list(td.unbind(0)), 0)


KEYWORDS = [
    case("stack_input", lambda lib, td: lib.stack(input=[td, td], dim=1)),
    case("cat_input", lambda lib, td: lib.cat(input=[td, td], dim=0)),
    case("from_dict_d", lambda lib, td: lib.from_dict(d={"a": torch.zeros(3, 2)}, batch_size=[3])),
    case("is_non_tensor_data", lambda lib, td: (lib.is_non_tensor(data=td), lib.is_non_tensor(
        data=lib.NonTensorData("x")))),
    case("is_tensor_collection_datatype", lambda lib, td: (lib.is_tensor_collection(datatype=td),
                                                           lib.is_tensor_collection(datatype=type(td)),
                                                           lib.is_tensor_collection(datatype=torch.zeros(1)))),
    case("extend_tensordict", lambda lib, td: (lambda s: (s.extend(tensordict=[td[0], td[1]]), s))(_lazy(lib, td))),
    case("extend_one_tensordict", lambda lib, td: (lambda s: (s.extend(td[:2]), s))(_lazy(lib, td))),
]


@pytest.mark.parametrize(("fn", "kw"), KEYWORDS)
def test_reference_keywords(run_both, fn, kw):
    run_both(fn, **kw)


def test_from_h5_keywords(ref, tb, tmp_path):
    pytest.importorskip("h5py")
    path = tmp_path / "data.h5"
    tb.TensorDict(a=torch.arange(3.0), batch_size=[3]).to_h5(path).close()
    for lib in (ref, tb):
        opened = [lib.from_h5(h5_file=str(path)), lib.TensorDict.from_h5(filename=str(path), mode="r"),
                  lib.TensorDictBase.from_h5(str(path))]
        for data in opened:
            assert type(data).__name__ == "PersistentTensorDict", lib.__name__
            assert data["a"].tolist() == [0.0, 1.0, 2.0], lib.__name__
            data.close()
