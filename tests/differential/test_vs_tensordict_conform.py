"""Differential tests, issue 16 item 5: the names and parameter names that ``tests/conformance/test_names.py``
found missing, called as a user of tensordict 0.15.3 calls them (by the reference's keywords).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from ._diff import case

pytestmark = pytest.mark.differential


@dataclasses.dataclass
class _Point:
    xy: torch.Tensor
    w: torch.Tensor


def _lazy(lib, td):
    return lib.LazyStackedTensorDict.lazy_stack(list(td.unbind(0)), 0)


KEYWORDS = [
    case("stack_input", lambda lib, td: lib.stack(input=[td, td], dim=1)),
    case("cat_input", lambda lib, td: lib.cat(input=[td, td], dim=0)),
    case("from_dict_d", lambda lib, td: lib.from_dict(d={"a": torch.zeros(3, 2)}, batch_size=[3])),
    case(
        "is_non_tensor_data",
        lambda lib, td: (lib.is_non_tensor(data=td), lib.is_non_tensor(data=lib.NonTensorData("x"))),
    ),
    case(
        "is_tensor_collection_datatype",
        lambda lib, td: (
            lib.is_tensor_collection(datatype=td),
            lib.is_tensor_collection(datatype=type(td)),
            lib.is_tensor_collection(datatype=torch.zeros(1)),
        ),
    ),
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
        opened = [
            lib.from_h5(h5_file=str(path)),
            lib.TensorDict.from_h5(filename=str(path), mode="r"),
            lib.TensorDictBase.from_h5(str(path)),
        ]
        for data in opened:
            assert type(data).__name__ == "PersistentTensorDict", lib.__name__
            assert data["a"].tolist() == [0.0, 1.0, 2.0], lib.__name__
            data.close()


# --------------------------------------------------------------------------------------------------
# constructors and clear_device_ on every class
# --------------------------------------------------------------------------------------------------
def _point_class(lib):
    @lib.tensorclass
    class Point:
        x: torch.Tensor

    return Point


def _with_point(lib, td):
    return lib.TensorDict(a=td["a"], p=_point_class(lib)(x=td["a"], batch_size=[4]), batch_size=[4])


def _from_dict_instance(lib, td, **kwargs):
    mine = _with_point(lib, td)
    data = {"a": torch.ones(4, 5), "p": {"x": torch.ones(4, 5)}, "z": {"q": torch.zeros(4)}}
    out = mine.from_dict_instance(data, **kwargs)
    return type(out).__name__, type(out["p"]).__name__, type(out["z"]).__name__, out.batch_size, out["p"].batch_size


CONSTRUCT = [
    case(
        "fromkeys_tensor",
        lambda lib, td: (lambda out: (out, out["a"] is out["b", "c"]))(
            lib.TensorDict.fromkeys(["a", ("b", "c")], torch.zeros(3))
        ),
    ),
    case("fromkeys_number", lambda lib, td: lib.TensorDictBase.fromkeys(["a", ("b", "c")], 1)),
    case("fromkeys_default", lambda lib, td: lib.LazyStackedTensorDict.fromkeys(["a"])),
    case("fromkeys_instance", lambda lib, td: td.fromkeys(["x"], 2.0)),
    case("from_dict_instance", lambda lib, td: _from_dict_instance(lib, td)),
    case("from_dict_instance_batch", lambda lib, td: _from_dict_instance(lib, td, batch_size=[4])),
    case("from_dict_instance_auto", lambda lib, td: _from_dict_instance(lib, td, auto_batch_size=True)),
    case(
        "from_dict_instance_lazy",
        lambda lib, td: _lazy(lib, td).from_dict_instance({"a": torch.ones(4, 5)}, batch_size=[4]),
    ),
    case(
        "from_dict_instance_both",
        lambda lib, td: td.from_dict_instance({"a": torch.ones(4)}, batch_size=[4], batch_dims=1),
        raises=ValueError,
    ),
    case(
        "from_schema_base",
        lambda lib, td: lib.TensorDictBase.from_schema(
            {"obs": ([2], torch.uint8), ("n", "r"): ([], torch.float32)}, batch_size=[3]
        ),
    ),
    case(
        "from_schema_memmap",
        lambda lib, td: (lambda t: (t.is_memmap(), t.is_locked, t.to_tensordict(), type(t["obs"]).__name__))(
            lib.TensorDict.from_schema(
                {"obs": ([2], torch.int64), ("n", "r"): ([], torch.float32)}, batch_size=[3], storage="memmap"
            )
        ),
    ),
    case(
        "from_lazy_dict_stack_dim_name",
        lambda lib, td: (lambda s: (type(s).__name__, s.batch_size, s.names, [m["a"] for m in s.tensordicts]))(
            lib.LazyStackedTensorDict.from_dict([{"a": torch.zeros(3)}, {"a": torch.ones(4)}], stack_dim_name="t")
        ),
    ),
    case(
        "from_lazy_dict_stack_dim",
        lambda lib, td: lib.LazyStackedTensorDict.from_dict(
            [{"a": torch.zeros(3)}, {"a": torch.ones(3)}], batch_size=[3], stack_dim=1
        ),
    ),
    case(
        "from_lazy_dict_names_and_stack_name",
        lambda lib, td: lib.LazyStackedTensorDict.from_dict(
            [{"a": torch.zeros(3)}], batch_size=[3], names=["x"], stack_dim_name="t"
        ),
        raises=ValueError,
    ),
    case(
        "from_dataclass_as_tensorclass",
        lambda lib, td: (lambda t: (type(t).__name__, t.batch_size, t.to_tensordict()))(
            lib.TensorDict.from_dataclass(
                _Point(xy=torch.ones(3, 2), w=torch.zeros(3)), as_tensorclass=True, auto_batch_size=True
            )
        ),
    ),
    case(
        "from_schema_lazy",
        lambda lib, td: lib.LazyStackedTensorDict.from_schema({"obs": ([2], torch.int64)}, batch_size=[3]),
    ),
    case(
        "clear_device",
        lambda lib, td: (lambda t: (t.clear_device_() is t, t.device, t["nested"].device, t["a"].device))(td.to("cpu")),
    ),
    case(
        "clear_device_lazy",
        lambda lib, td: (lambda s: (s.clear_device_() is s, s.device, [m.device for m in s.tensordicts]))(
            _lazy(lib, td.to("cpu"))
        ),
    ),
    case(
        "clear_device_tensorclass",
        lambda lib, td: (lambda t: (t.clear_device_() is t, t.device, t["p"].device))(_with_point(lib, td).to("cpu")),
    ),
]


@pytest.mark.parametrize(("fn", "kw"), CONSTRUCT)
def test_constructors(run_both, fn, kw):
    run_both(fn, **kw)


def test_tensorclass_constructors(ref, tb):
    for lib in (ref, tb):
        point = _point_class(lib)(x=torch.zeros(3), batch_size=[3])
        out = point.from_dict_instance({"x": torch.ones(3)})
        assert type(out) is type(point), lib.__name__
        assert out.x.tolist() == [1.0, 1.0, 1.0], lib.__name__
        assert out.batch_size == torch.Size([]), lib.__name__
        assert type(type(point).fromkeys(["x"])) is type(point), lib.__name__
        assert point.to("cpu").clear_device_().device is None, lib.__name__


# --------------------------------------------------------------------------------------------------
# deprecated members: LazyStackedTensorDict.valid_keys/hook_in/hook_out/get_nestedtensor,
# MemoryMappedTensor.from_handler/parent_shape
# --------------------------------------------------------------------------------------------------
def _ragged(lib):
    return lib.LazyStackedTensorDict.lazy_stack(
        [lib.TensorDict(a=torch.zeros(4), b=torch.zeros(4)), lib.TensorDict(a=torch.ones(5))], 0
    )


def _nested_values(t):
    return [x.tolist() for x in t.unbind()], t.layout


DEPRECATED = [
    case("valid_keys", lambda lib, td: sorted(_lazy(lib, td).valid_keys(True, True), key=str)),
    case("valid_keys_sort", lambda lib, td: list(_lazy(lib, td).valid_keys(include_nested=True, sort=True))),
    case("hooks", lambda lib, td: (_lazy(lib, td).hook_in, _lazy(lib, td).hook_out)),
    case("get_nestedtensor", lambda lib, td: _nested_values(_ragged(lib).get_nestedtensor("a"))),
    case("get_nestedtensor_jagged", lambda lib, td: _ragged(lib).get_nestedtensor("a", layout=torch.jagged).layout),
    case(
        "get_nestedtensor_tensor_default",
        lambda lib, td: _nested_values(_ragged(lib).get_nestedtensor("b", default=torch.ones(3))),
    ),
    case("get_nestedtensor_other_default", lambda lib, td: _ragged(lib).get_nestedtensor("b", None)),
    case("get_nestedtensor_missing", lambda lib, td: _ragged(lib).get_nestedtensor("b"), raises=KeyError),
    case(
        "get_nestedtensor_nested_key", lambda lib, td: _nested_values(_lazy(lib, td).get_nestedtensor(("nested", "c")))
    ),
    case(
        "get_nestedtensor_stack_dim_1",
        lambda lib, td: lib.LazyStackedTensorDict.lazy_stack(list(td.unbind(1)), 1).get_nestedtensor("a"),
        raises=RuntimeError,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), DEPRECATED)
def test_deprecated(run_both, fn, kw):
    with pytest.warns(DeprecationWarning, match="deprecated"):
        run_both(fn, **kw)


def test_memmap_parent_shape_and_from_handler(ref, tb, tmp_path):
    source = ref.MemoryMappedTensor.from_tensor(torch.arange(6.0).view(2, 3))  # shared memory: has a handler
    for lib in (ref, tb):
        mm = lib.MemoryMappedTensor.from_tensor(torch.arange(6.0).view(2, 3), filename=tmp_path / lib.__name__)
        with pytest.warns(DeprecationWarning, match="parent_shape"):
            shapes = [mm.parent_shape, mm[1:].parent_shape, mm[1].parent_shape]
        assert shapes == [torch.Size([2, 3])] * 3, lib.__name__
        with pytest.warns(DeprecationWarning, match="from_handler"):
            out = lib.MemoryMappedTensor.from_handler(source._handler, torch.float32, (2, 3), index=1)
        assert isinstance(out, lib.MemoryMappedTensor), lib.__name__
        assert out.tolist() == [3.0, 4.0, 5.0], lib.__name__
        with pytest.warns(DeprecationWarning, match="parent_shape"):
            parent = out.parent_shape
        assert parent == torch.Size([2, 3]), lib.__name__


# --------------------------------------------------------------------------------------------------
# package-level names: from_module(s), TensorDictParams, stores, collate, the alias modules
# --------------------------------------------------------------------------------------------------
def _module():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())


PACKAGE = [
    case("from_module", lambda lib, td: (lambda p: (p, p.is_locked))(lib.from_module(_module()))),
    case("from_module_unlocked", lambda lib, td: lib.from_module(_module(), lock=False).is_locked),
    case("from_module_as_module", lambda lib, td: type(lib.from_module(_module(), as_module=True)).__name__),
    case("from_modules", lambda lib, td: (lambda p: (p, p.is_locked))(lib.from_modules(_module(), _module()))),
    case(
        "from_modules_expand", lambda lib, td: lib.from_modules(_module(), _module(), expand_identical=True, lock=False)
    ),
    case(
        "tensordict_params",
        lambda lib, td: type(lib.TensorDictParams(lib.TensorDict(w=torch.zeros(2)))).__mro__[1].__name__,
    ),
    case("collate_tds", lambda lib, td: lib.collate([td[0], td[1]])),
    case("collate_lazy", lambda lib, td: type(lib.collate([td[0], td[1, :2]])).__name__),
    case("collate_tuple", lambda lib, td: lib.collate([(td[0], 1), (td[1], 2)])),
    case("collate_mapping", lambda lib, td: lib.collate([{"x": td[0], "y": torch.zeros(2)}] * 3)),
    case("collate_not_a_list", lambda lib, td: lib.collate(td) is td),
    case(
        "collate_pad",
        lambda lib, td: lib.collate(
            [lib.TensorDict(ids=torch.ones(n, dtype=torch.long), s=torch.tensor(float(n))) for n in (2, 3)],
            pad_keys={"ids": 7},
            mask_key="mask",
        ),
    ),
    case(
        "collate_nested",
        lambda lib, td: (lambda b: (b["s"], b["p"].is_nested, [x.tolist() for x in b["p"].unbind()]))(
            lib.collate(
                [lib.TensorDict(p=torch.ones(n, 2) * n, s=torch.tensor(float(n))) for n in (2, 3)], nested_keys=["p"]
            )
        ),
    ),
    case("collate_mask_without_pad", lambda lib, td: lib.collate([td[0]], mask_key="m"), raises=ValueError),
    case("collate_pad_batch_dims", lambda lib, td: lib.collate([td[0]], pad_keys={"a": 0}), raises=ValueError),
    case(
        "collate_pad_and_nested",
        lambda lib, td: lib.collate([lib.TensorDict(a=torch.zeros(2))], pad_keys={"a": 0}, nested_keys=["a"]),
        raises=ValueError,
    ),
    case(
        "collate_missing_key",
        lambda lib, td: lib.collate([lib.TensorDict(a=torch.zeros(2))], pad_keys={"b": 0}),
        raises=KeyError,
    ),
    case(
        "collate_mask_is_entry",
        lambda lib, td: lib.collate([lib.TensorDict(a=torch.zeros(2))], pad_keys={"a": 0}, mask_key="a"),
        raises=ValueError,
    ),
    case(
        "collate_nested_ragged_rest",
        lambda lib, td: lib.collate(
            [lib.TensorDict(p=torch.ones(n), q=torch.ones(n)) for n in (2, 3)], nested_keys=["p"]
        ),
        raises=ValueError,
    ),
]


@pytest.mark.parametrize(("fn", "kw"), PACKAGE)
def test_package_names(run_both, fn, kw):
    run_both(fn, **kw)


def test_collate_in_a_dataloader(ref, tb):
    from torch.utils.data import DataLoader

    for lib in (ref, tb):
        samples = [(lib.TensorDict(x=torch.full((3,), float(i))), i) for i in range(10)]
        batch, label = next(iter(DataLoader(samples, batch_size=4, collate_fn=lib.collate)))
        assert type(batch).__name__ == "TensorDict", lib.__name__
        assert batch.batch_size == torch.Size([4]), lib.__name__
        assert batch["x"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0], lib.__name__
        assert label.tolist() == [0, 1, 2, 3], lib.__name__


def test_alias_modules_and_stores(ref, tb):
    for lib in (ref, tb):
        assert lib.tensordict.TensorDict is lib.TensorDict, lib.__name__
        assert lib.tensordict.LazyStackedTensorDict is lib.LazyStackedTensorDict, lib.__name__
        assert lib.typedtensordict.TypedTensorDict is lib.TypedTensorDict, lib.__name__
        assert issubclass(lib.TensorDictStore, lib.TensorDictBase), lib.__name__
        assert issubclass(lib.LazyStackedTensorDictStore, lib.TensorDictBase), lib.__name__
        assert issubclass(lib.TensorDictParams, torch.nn.Module), lib.__name__


# --------------------------------------------------------------------------------------------------
# NestedKey in isinstance checks; assert_close(intersection=, msg=, prefix=)
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["a", ("a", "b"), ("a", ("b",)), ("a", 1), (), ("a", ()), ["a"], b"a", 1], ids=repr)
def test_nested_key_isinstance(ref, tb, value):
    assert isinstance(value, tb.NestedKey) == isinstance(value, ref.NestedKey)


def _pair(lib):
    return lib.TensorDict(x=torch.zeros(3), y=torch.ones(3)), lib.TensorDict(x=torch.zeros(3))


ASSERT_CLOSE = [
    case("assert_close", lambda lib, td: lib.assert_close(td, td.clone())),
    case("assert_close_keys_differ", lambda lib, td: lib.assert_close(*_pair(lib)), raises=KeyError),
    case("assert_close_intersection", lambda lib, td: lib.assert_close(*_pair(lib), intersection=True)),
    case(
        "assert_close_intersection_positional",
        lambda lib, td: lib.assert_allclose_td(*_pair(lib), None, None, True, True, "msg", ("p",)),
    ),
    case(
        "assert_close_values_differ",
        lambda lib, td: lib.assert_close(td, td + 1, prefix=("p",), msg="MSG"),
        raises=AssertionError,
    ),
    case("assert_close_tolerance", lambda lib, td: lib.assert_close(td, td + 0.01, atol=0.1, rtol=0)),
    case("assert_close_message", lambda lib, td: _first_line(lib, torch.zeros(4), torch.tensor([0, 0, 0, 0.2]))),
    case(
        "assert_close_message_int",
        lambda lib, td: _first_line(lib, torch.zeros(2, 2).long(), torch.tensor([[0, 3]] * 2)),
    ),
    case("assert_close_ragged_lazy", lambda lib, td: lib.assert_close(*[_ragged_holder(lib) for _ in range(2)])),
    case(
        "assert_close_ragged_lazy_differ",
        lambda lib, td: lib.assert_close(_ragged_holder(lib), _ragged_holder(lib, 1.0)),
        raises=AssertionError,
    ),
]


def _first_line(lib, a, b):
    """The first line of assert_close's message for leaves ``a`` and ``b`` (the key and the error's size)."""
    try:
        lib.assert_close(lib.TensorDict(x=a), lib.TensorDict(x=b))
    except AssertionError as err:
        return str(err).splitlines()[0]
    raise AssertionError("assert_close passed")


def _ragged_holder(lib, shift=0.0):
    """A TensorDict holding a lazy stack of members of different shapes."""
    ragged = lib.lazy_stack(
        [lib.TensorDict(a=torch.zeros(3) + shift), lib.TensorDict(a=torch.ones(4), b=torch.ones(2))]
    )
    return lib.TensorDict(r=ragged)


@pytest.mark.parametrize(("fn", "kw"), ASSERT_CLOSE)
def test_assert_close(run_both, fn, kw):
    run_both(fn, **kw)


def test_assert_close_message_names_prefix_and_msg(tb):
    td = tb.TensorDict(x=torch.zeros(3))
    with pytest.raises(AssertionError, match=r"(?s)\(.p., .x.\).*MSG"):
        tb.assert_close(td, td + 1, prefix="p", msg="MSG")
    with pytest.raises(KeyError, match=r"The first TD has keys \{.y.\}.*MSG"):
        tb.assert_close(td.clone().set("y", torch.zeros(3)), td, msg="MSG")


@pytest.mark.parametrize("storage", ["h5", "zarr"])
def test_indexed_stored_views_keep_dim_names(ref, tb, tmp_path, storage):
    pytest.importorskip("h5py" if storage == "h5" else "zarr")

    def run(lib: Any, where: str) -> Any:
        td = lib.TensorDict(
            a=torch.arange(12.0).view(3, 4),
            n=lib.TensorDict(b=torch.zeros(3, 4, 2), batch_size=[3, 4]),
            batch_size=[3, 4],
            names=["x", "y"],
        )
        stored = td.to_h5(str(tmp_path / where)) if storage == "h5" else td.to_zarr(str(tmp_path / where))
        indexes = (0, slice(1, None), (slice(None), 1), torch.tensor([0, 2]), torch.tensor([True, False, True]))
        out = [(stored[i].names, stored[i].to_tensordict().names, stored[i]["n"].names) for i in indexes]
        return out, stored.names

    mine, theirs = run(tb, "tb"), run(ref, "ref")
    assert mine == theirs
    assert mine[0][0] == (["y"], ["y"], ["y"])
