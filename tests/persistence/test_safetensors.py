"""``to_safetensors`` / ``from_safetensors``: round trips, structure, refusals naming the key, plain checkpoints."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tensorbatch import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    from_safetensors,
    lazy_stack,
    tensorclass,
    to_safetensors,
)

safetensors = pytest.importorskip("safetensors", reason="the safetensors extra is not installed")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_for_bit(tmp_path, dtype):
    values = torch.arange(-3, 3).to(dtype)
    to_safetensors(TensorDict(x=values, batch_size=[6]), tmp_path / "x.safetensors")
    loaded = from_safetensors(tmp_path / "x.safetensors")
    assert loaded["x"].dtype == dtype and loaded.batch_size == (6,)
    assert loaded["x"].view(torch.uint8).tolist() == values.view(torch.uint8).tolist()


def test_structure_round_trips(tmp_path):
    td = TensorDict(
        {
            "w": torch.arange(6.0).view(2, 3),
            "layer": {"b": torch.zeros(2, 3, 4), "tag": "x"},
            "cfg": NonTensorData({"lr": 0.1, "steps": [1, 2]}),
        },
        batch_size=[2, 3],
        names=["b", "t"],
    )
    to_safetensors(td, tmp_path / "x.safetensors")
    loaded = from_safetensors(tmp_path / "x.safetensors")
    assert loaded.batch_size == (2, 3) and loaded.names == ["b", "t"] and loaded.device is None
    assert loaded["layer"].batch_size == (2, 3) and loaded["layer", "b"].shape == (2, 3, 4)
    assert torch.equal(loaded["w"], td["w"]) and loaded["layer", "tag"] == "x"
    assert loaded["cfg"] == {"lr": 0.1, "steps": [1, 2]}
    with safe_open(tmp_path / "x.safetensors", "pt") as f:  # nested keys are dotted, as in a state_dict
        assert sorted(f.keys()) == ["layer.b", "w"]
        doc = json.loads(f.metadata()["tensordict"])
    assert doc["version"] == 1 and doc["root"]["batch_size"] == [2, 3]
    assert doc["root"]["keys"]["layer"]["td"]["keys"]["tag"] == {"non_tensor": "x"}


def test_lazy_stack_round_trips(tmp_path):
    stack = lazy_stack([TensorDict(x=torch.zeros(3)), TensorDict(x=torch.ones(3))], dim=0)
    to_safetensors(stack, tmp_path / "s.safetensors")
    loaded = from_safetensors(tmp_path / "s.safetensors")
    assert isinstance(loaded, LazyStackedTensorDict) and loaded.stack_dim == 0
    assert loaded["x"].tolist() == [[0.0] * 3, [1.0] * 3]


def test_lazy_stack_with_different_keys_is_refused(tmp_path):
    stack = lazy_stack([TensorDict(x=torch.zeros(3)), TensorDict(y=torch.ones(3))], dim=0)
    with pytest.raises(TypeError, match=r"lazy stack at the root.*different keys"):
        to_safetensors(stack, tmp_path / "s.safetensors")


@tensorclass
class _Layer:
    weight: torch.Tensor
    name: str


def test_tensorclass_round_trips_and_unknown_class_is_named(tmp_path):
    layer = _Layer(weight=torch.ones(2, 3), name="fc", batch_size=[2])
    to_safetensors(layer, tmp_path / "l.safetensors")
    loaded = from_safetensors(tmp_path / "l.safetensors")
    assert type(loaded) is _Layer and loaded.name == "fc" and torch.equal(loaded.weight, layer.weight)
    with safe_open(tmp_path / "l.safetensors", "pt") as f:
        doc = json.loads(f.metadata()["tensordict"])
    doc["root"]["class"] = "<class 'nowhere.Missing'>"
    save_file({"weight": torch.ones(2, 3)}, tmp_path / "m.safetensors", metadata={"tensordict": json.dumps(doc)})
    with pytest.raises(RuntimeError, match=r"tensorclass <class 'nowhere\.Missing'>.*import the module"):
        from_safetensors(tmp_path / "m.safetensors")


def test_plain_checkpoint_loads_nested_and_fits_a_module(tmp_path):
    module = torch.nn.Sequential(torch.nn.Linear(3, 4))
    save_file({k: v.detach() for k, v in module.state_dict().items()}, tmp_path / "m.safetensors")
    params = from_safetensors(tmp_path / "m.safetensors")
    assert params.batch_size == () and params["0", "weight"].shape == (4, 3)
    target = torch.nn.Sequential(torch.nn.Linear(3, 4))
    params.to_module(target)
    assert torch.equal(target[0].weight, module[0].weight)


def test_device_argument(tmp_path):
    to_safetensors(TensorDict(x=torch.ones(2), batch_size=[2]), tmp_path / "x.safetensors")
    loaded = from_safetensors(tmp_path / "x.safetensors", device="cpu")
    assert loaded.device == torch.device("cpu") and loaded["x"].device == torch.device("cpu")


def test_overlapping_views_are_saved_as_copies(tmp_path):
    base = torch.arange(6.0)
    td = TensorDict(a=base, b=base[2:], c=base[:2].clone())
    to_safetensors(td, tmp_path / "x.safetensors")
    loaded = from_safetensors(tmp_path / "x.safetensors")
    assert loaded["b"].tolist() == [2.0, 3.0, 4.0, 5.0] and loaded["a"].tolist() == base.tolist()


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (NonTensorData(object()), TypeError, r"non-tensor value at \('n', 'bad'\).*its type object is not a JSON"),
        (NonTensorData((1, 2)), TypeError, r"\('n', 'bad'\).*tuple"),
        (NonTensorStack("a", "b"), TypeError, r"non-tensor stack at \('n', 'bad'\)"),
        (torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]), TypeError, r"tensor at \('n', 'bad'\).*nested"),
        (torch.zeros(2).to_sparse(), TypeError, r"tensor at \('n', 'bad'\).*sparse"),
    ],
)
def test_what_the_format_cannot_hold_is_refused_naming_the_key(tmp_path, value, error, match):
    td = TensorDict({"ok": torch.zeros(2), "n": {"bad": value}}, batch_size=[2] if value.ndim != 0 else [])
    with pytest.raises(error, match=match):
        to_safetensors(td, tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary file left


def test_colliding_dotted_names_and_bare_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"safetensors name 'a\.b'"):
        to_safetensors(TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.zeros(1)}}), tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="not a NonTensorData"):
        to_safetensors(NonTensorData("x"), tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_foreign_version_and_unlisted_tensors_are_refused(tmp_path):
    doc = {"version": 2, "root": {"batch_size": [], "names": None, "keys": {}}}
    save_file({"x": torch.zeros(1)}, tmp_path / "v.safetensors", metadata={"tensordict": json.dumps(doc)})
    with pytest.raises(ValueError, match="version 2"):
        from_safetensors(tmp_path / "v.safetensors")
    doc["version"] = 1
    save_file({"x": torch.zeros(1)}, tmp_path / "u.safetensors", metadata={"tensordict": json.dumps(doc)})
    with pytest.raises(ValueError, match=r"\['x'\].*not in its tensordict structure"):
        from_safetensors(tmp_path / "u.safetensors")


def test_a_clear_error_without_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ImportError, match=r"pip install 'tensorbatch\[safetensors\]'"):
        to_safetensors(TensorDict(x=torch.zeros(1)), tmp_path / "x.safetensors")
