"""Differential tests, zarr: the same zarr work done with each library gives the same results.

Each case runs ``fn(lib, folder)`` once with tensordict and once with tensorbatch, in separate folders, and
compares what comes out as plain Python values. Cases where tensorbatch deliberately differs are strict xfails
(``conftest.DIFFERENCES``, README "Differences").
"""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.differential, pytest.mark.filterwarnings("ignore")]
zarr = pytest.importorskip("zarr", reason="zarr (the zarr extra) is not installed")


def _td(lib: Any) -> Any:
    return lib.TensorDict(
        {
            "a": torch.arange(24, dtype=torch.float32).view(6, 4),
            "i": torch.arange(6) * 10,
            "n": {"b": torch.ones(6, 2, dtype=torch.float64), "deep": {"c": torch.arange(6, dtype=torch.int16)}},
            "s": lib.NonTensorData("hello", batch_size=[6]),
        },
        batch_size=[6],
        names=["t"],
    )


def _plain(td: Any) -> dict[str, Any]:
    """A TensorDict as plain values: batch size, names, and every leaf (tensors as lists with their dtype)."""
    out: dict[str, Any] = {"batch_size": list(td.batch_size), "names": list(td.names)}
    for key in td.keys(include_nested=True, leaves_only=True):
        value = td[key]
        name = "/".join(key) if isinstance(key, tuple) else key
        out[name] = (value.tolist(), str(value.dtype)) if isinstance(value, torch.Tensor) else value
    return out


def case_round_trip(lib: Any, folder: Path) -> Any:
    _td(lib).to_zarr(str(folder / "d.zarr"))
    return _plain(lib.TensorDict.from_zarr(str(folder / "d.zarr")))


def case_written_result(lib: Any, folder: Path) -> Any:
    return _plain(_td(lib).to_zarr(str(folder / "d.zarr")))


def case_layout_on_disk(lib: Any, folder: Path) -> Any:
    _td(lib).to_zarr(str(folder / "d.zarr"))
    root = zarr.open_group(str(folder / "d.zarr"), mode="r")
    out = {"root": dict(root.attrs)}
    for name in ("a", "i", "n/b", "n/deep/c", "s"):
        array = root[name]
        out[name] = (array.shape, str(array.dtype), array.chunks, dict(array.attrs))
    out["n"] = dict(root["n"].attrs)
    return out


def case_chunks_option(lib: Any, folder: Path) -> Any:
    _td(lib).to_zarr(str(folder / "d.zarr"), chunks=(2,))
    root = zarr.open_group(str(folder / "d.zarr"), mode="r")
    return [root[name].chunks for name in ("a", "i", "n/b")]


def case_rows_and_slices(lib: Any, folder: Path) -> Any:
    stored = _td(lib).to_zarr(str(folder / "d.zarr"))
    return [
        stored[1]["a"].tolist(),
        stored[2:5]["n", "b"].tolist(),
        stored[torch.tensor([4, 0, 4])]["i"].tolist(),
        stored[torch.tensor([True, False] * 3)]["n", "deep", "c"].tolist(),
        stored[-1]["s"],
    ]


def case_writes_through_views(lib: Any, folder: Path) -> Any:
    stored = _td(lib).to_zarr(str(folder / "d.zarr"))
    stored[1:3]["i"] = torch.tensor([-1, -2])
    stored[torch.tensor([5, 0])] = stored[torch.tensor([0, 5])].to_tensordict()
    stored["n", "b"] = torch.zeros(6, 2, dtype=torch.float64)
    return _plain(lib.TensorDict.from_zarr(str(folder / "d.zarr")))


def case_reopen_read_write(lib: Any, folder: Path) -> Any:
    _td(lib).to_zarr(str(folder / "d.zarr"))
    rw = lib.TensorDict.from_zarr(str(folder / "d.zarr"), mode="r+")
    rw["extra"] = torch.arange(6.0)
    del rw["i"]
    return _plain(lib.TensorDict.from_zarr(str(folder / "d.zarr")))


def case_json_values(lib: Any, folder: Path) -> Any:
    td = lib.TensorDict({"j": lib.NonTensorData({"k": [1, 2.5, "x"]}), "t": lib.NonTensorData([1, 2])}, [])
    td.to_zarr(str(folder / "j.zarr"))
    back = lib.TensorDict.from_zarr(str(folder / "j.zarr"))
    return [back["j"], back["t"]]


def case_string_stack(lib: Any, folder: Path) -> Any:
    td = lib.TensorDict({"st": lib.NonTensorStack("p", "qq", "r"), "x": torch.zeros(3)}, [3])
    td.to_zarr(str(folder / "s.zarr"))
    back = lib.TensorDict.from_zarr(str(folder / "s.zarr"))
    return [list(back["st"]), back[1]["st"], list(back.get("st").batch_size)]


def _raw_store(folder: Path) -> str:
    root = zarr.open_group(str(folder / "raw.zarr"), mode="w")  # written by hand: no recorded batch size
    root.create_array("x", data=np.zeros((4, 3, 2), dtype=np.float32))
    root.create_group("g").create_array("y", data=np.zeros((4, 3), dtype=np.int64))
    return str(folder / "raw.zarr")


def case_inferred_batch(lib: Any, folder: Path) -> Any:
    inferred = lib.TensorDict.from_zarr(_raw_store(folder))
    return [list(inferred.batch_size), list(inferred["g"].batch_size)]


def case_given_batch_reaches_unrecorded_groups(lib: Any, folder: Path) -> Any:
    given = lib.TensorDict.from_zarr(_raw_store(folder), batch_size=[4])
    return [list(given.batch_size), list(given["g"].batch_size)]


def case_batch_dims_without_auto(lib: Any, folder: Path) -> Any:
    return list(lib.TensorDict.from_zarr(_raw_store(folder), batch_dims=1).batch_size)


def case_auto_batch_size(lib: Any, folder: Path) -> Any:
    lib.TensorDict({"a": torch.zeros(3, 4)}, [3]).to_zarr(str(folder / "d.zarr"))
    return list(lib.TensorDict.from_zarr(str(folder / "d.zarr"), auto_batch_size=True).batch_size)


def case_memory_url(lib: Any, folder: Path) -> Any:
    url = f"memory://diff-{uuid.uuid4().hex}"
    _td(lib).to_zarr(url)
    return _plain(lib.TensorDict.from_zarr(url))


def case_pickled_value_default(lib: Any, folder: Path) -> Any:
    lib.TensorDict({"o": lib.NonTensorData({1, 2})}, []).to_zarr(str(folder / "p.zarr"))
    return lib.TensorDict.from_zarr(str(folder / "p.zarr"))["o"]


def case_pickled_value_allowed(lib: Any, folder: Path) -> Any:
    lib.TensorDict({"o": lib.NonTensorData({1, 2})}, []).to_zarr(str(folder / "p.zarr"))
    return lib.TensorDict.from_zarr(str(folder / "p.zarr"), allow_pickle=True)["o"]


def case_bfloat16(lib: Any, folder: Path) -> Any:
    td = lib.TensorDict({"h": torch.tensor([1.5, -2.25], dtype=torch.bfloat16)}, [2])
    td.to_zarr(str(folder / "b.zarr"))
    back = lib.TensorDict.from_zarr(str(folder / "b.zarr"))["h"]
    return back.tolist(), str(back.dtype)


CASES = {name.removeprefix("case_"): fn for name, fn in dict(globals()).items() if name.startswith("case_")}


def _outcome(lib: Any, folder: Path, fn: Any) -> Any:
    folder.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ("ok", fn(lib, folder))
        except Exception as err:  # compared: the same error type on both sides is agreement
            return ("raises", type(err).__name__)


@pytest.mark.parametrize("case", sorted(CASES))
def test_zarr(ref, tb, tmp_path, case):
    want = _outcome(ref, tmp_path / "ref", CASES[case])
    got = _outcome(tb, tmp_path / "tb", CASES[case])
    assert want[0] == "ok", f"tensordict raised {want[1]}: the case must succeed on the reference"
    assert got == want
