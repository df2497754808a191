"""UnbatchedTensor: a leaf without the batch dims; batch ops leave its data alone, value ops apply to it."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch

from tensorbatch import TensorDict, UnbatchedTensor, parse_tensor_dict_string


def _td() -> TensorDict:
    return TensorDict(
        u=UnbatchedTensor(torch.arange(12.0).reshape(3, 4)),
        b=torch.arange(30.0).reshape(2, 5, 3),
        n=TensorDict(v=UnbatchedTensor(torch.tensor([1, 2, 3])), batch_size=[2, 5]),
        batch_size=[2, 5],
    )


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape


# ------------------------------------------------------------------------------------------ the leaf itself
def test_construction():
    u = UnbatchedTensor([1.0, 2.0])
    assert type(u) is UnbatchedTensor and u.tolist() == [1.0, 2.0] and u.batch_size == torch.Size([])
    assert UnbatchedTensor(u) is u
    v = UnbatchedTensor(u, batch_size=[4])
    assert v.batch_size == torch.Size([4]) and _same_data(u, v) and u.batch_size == torch.Size([])
    data = torch.zeros(2, 3)
    assert _same_data(UnbatchedTensor(data), data)


def test_torch_functions_return_unbatched_with_the_batch_size():
    u = UnbatchedTensor(torch.arange(6.0).reshape(2, 3), batch_size=[5])
    for out in (
        u + 1,
        torch.add(u, torch.ones(3)),
        u.sum(0),
        u[1:],
        u.reshape(3, 2),
        u.to(torch.int64),
        torch.stack([u, u]),
        u.clone(),
    ):
        assert type(out) is UnbatchedTensor and out.batch_size == torch.Size([5])
    assert (u * 2).tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    values, indices = u.max(1)
    assert type(values) is UnbatchedTensor and indices.tolist() == [2, 2]
    assert u[1, 2].item() == 5.0 and str(u[0]) == "tensor([0., 1., 2.])"
    assert repr(u[0]) == "UnbatchedTensor(tensor([0., 1., 2.]))"


def test_list_ops_wrap_only_the_unbatched_items():
    plain, u = torch.ones(2), UnbatchedTensor(torch.zeros(3))
    out = torch._foreach_add([plain, u], 1)
    assert [type(t) for t in out] == [torch.Tensor, UnbatchedTensor]
    assert out[0].tolist() == [2.0, 2.0] and out[1].tolist() == [1.0, 1.0, 1.0]


def test_autograd_goes_through():
    x = torch.ones(3, requires_grad=True)
    u = UnbatchedTensor(x)
    assert u.requires_grad
    (u * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_pickle_keeps_class_values_and_batch_size():
    u = UnbatchedTensor(torch.arange(3.0), batch_size=[2])
    back = pickle.loads(pickle.dumps(u))
    assert type(back) is UnbatchedTensor and back.tolist() == [0.0, 1.0, 2.0] and back.batch_size == torch.Size([2])
    td = pickle.loads(pickle.dumps(_td()))
    assert type(td["u"]) is UnbatchedTensor and td["u"].batch_size == torch.Size([2, 5])


# ------------------------------------------------------------------------------------------ in a TensorDict
def test_stored_with_any_shape_and_stamped():
    data = torch.zeros(7)
    td = TensorDict(b=torch.zeros(2, 5), batch_size=[2, 5])
    td["u"] = UnbatchedTensor(data)
    td.set(("x", "w"), UnbatchedTensor(data))
    assert type(td["u"]) is UnbatchedTensor and td["u"].batch_size == torch.Size([2, 5])
    assert _same_data(td["u"], data) and td["x", "w"].batch_size == torch.Size([2, 5])
    assert td["x"].batch_size == torch.Size([2, 5])


def test_plain_tensor_still_must_fit():
    td = _td()
    with pytest.raises(RuntimeError, match="'w'"):
        td.set("w", torch.zeros(7))
    assert "w" not in td.keys()


@pytest.mark.parametrize(
    "index",
    [
        1,
        (1, 3),
        slice(0, 1),
        (slice(None), 2),
        torch.tensor([1, 0, 1]),
        [0, 1],
        torch.tensor([True, False]),
        ...,
        None,
        (None, 0),
        torch.tensor([[True, False, True, True, False], [False] * 5]),
    ],
)
def test_indexing_keeps_the_data(index):
    td = _td()
    out = td[index]
    assert _same_data(out["u"], td["u"]) and _same_data(out["n", "v"], td["n", "v"])
    assert out["u"].batch_size == out.batch_size == td["b"][index].shape[:-1]


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.reshape(10),
        lambda td: td.view(-1),
        lambda td: td.flatten(0, 1),
        lambda td: td.unflatten(1, (5, 1)),
        lambda td: td.unsqueeze(0),
        lambda td: td.unsqueeze(-1).squeeze(-1),
        lambda td: td.permute(1, 0),
        lambda td: td.transpose(0, 1),
        lambda td: td.expand(3, 2, 5),
        lambda td: td.flip(0),
        lambda td: td.roll(1, 1),
        lambda td: td.repeat(2, 1),
        lambda td: td.gather(1, torch.zeros(2, 3, dtype=torch.long)),
        lambda td: td.sum(0),
        lambda td: td.mean(),
        lambda td: td.std(1),
        lambda td: td.max(0).values,
        lambda td: td.apply(lambda x: x[0], batch_size=[5]),
    ],
    ids=[
        "reshape",
        "view",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "permute",
        "transpose",
        "expand",
        "flip",
        "roll",
        "repeat",
        "gather",
        "sum",
        "mean",
        "std",
        "max",
        "apply_batch_size",
    ],
)
def test_batch_ops_keep_the_data(op):
    td = _td()
    out = op(td)
    assert _same_data(out["u"], td["u"]) and _same_data(out["n", "v"], td["n", "v"])
    assert out["u"].batch_size == out.batch_size and out["n", "v"].batch_size == out["n"].batch_size


def test_unbind_split_stack_cat_keep_the_data():
    td = _td()
    for piece in (*td.unbind(1), *td.split([1, 1], 0), *td.chunk(5, 1)):
        assert _same_data(piece["u"], td["u"]) and piece["u"].batch_size == piece.batch_size
    for out in (torch.stack([td, td], 1), torch.cat([td, td], 0)):
        assert _same_data(out["u"], td["u"]) and out["u"].batch_size == out.batch_size


def test_max_indices_keep_the_unbatched_leaf():
    td = _td()
    _, indices = td.max(0)
    assert indices["b"].shape == (5, 3) and _same_data(indices["u"], td["u"])


def test_stacking_different_data_keeps_the_first_and_warns():
    td, other = _td(), _td()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = torch.stack([td, td[:]])  # the same storage: no warning
    assert _same_data(out["u"], td["u"])
    with pytest.warns(UserWarning, match=r"'u' hold their data in different storage"):
        out = torch.stack([td, other])  # equal values in other storage: warned, as tensordict
    assert _same_data(out["u"], td["u"])
    other["u"].add_(1)
    with pytest.warns(UserWarning, match=r"'u'.*first one's"):
        out = torch.cat([td, other])
    assert out["u"].tolist() == td["u"].tolist()


def test_stacking_with_a_plain_leaf_is_refused():
    td = _td()
    other = td.clone()
    other["u"] = torch.zeros(2, 5)
    with pytest.raises(RuntimeError, match="'u' is an UnbatchedTensor in the first TensorDict"):
        torch.stack([td, other])


def test_value_ops_apply_to_it():
    td = _td()
    for out, expected in (
        (td + 1, td["u"] + 1),
        (td.apply(lambda x: x * 2), td["u"] * 2),
        (td.exp(), td["u"].exp()),
        (td.clone(), td["u"]),
        (td.to(torch.float64), td["u"].double()),
        (td * td, td["u"] ** 2),
    ):
        assert type(out["u"]) is UnbatchedTensor and out["u"].batch_size == torch.Size([2, 5])
        assert torch.equal(torch.Tensor(out["u"]), torch.Tensor(expected))
    assert not _same_data(td.clone()["u"], td["u"])
    td.mul_(2)
    assert td["u"][0].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_apply_returning_a_plain_tensor_must_fit():
    with pytest.raises(RuntimeError, match="'u'"):
        _td().apply(lambda x: torch.zeros(x.shape))


def test_in_place_writes():
    td = _td()
    td.set_("u", torch.ones(3, 4))
    td.update_({"u": UnbatchedTensor(torch.full((3, 4), 2.0))})
    assert type(td["u"]) is UnbatchedTensor and td["u"].sum().item() == 24.0
    with pytest.raises(RuntimeError, match="'u'"):
        td.set_("u", torch.ones(2, 4))


def test_setitem_at_index_writes_the_unbatched_leaf_whole():
    td = _td()
    other = td[0].apply(lambda x: x + 1)
    td[0] = other
    assert td["u"].tolist() == (torch.arange(12.0).reshape(3, 4) + 1).tolist()
    assert td["b"][1].tolist() == torch.arange(15.0, 30.0).reshape(5, 3).tolist()
    td[1] = 0.0  # a scalar at a batch index: not the shared data
    assert td["u"][0, 0].item() == 1.0 and td["b"][1].sum().item() == 0.0
    before = td.clone()
    bad = td[0].clone()
    bad["u"] = UnbatchedTensor(torch.zeros(2))
    bad["b"] = torch.full((5, 3), 9.0)
    with pytest.raises(RuntimeError, match="UnbatchedTensor 'u' of shape"):
        td[0] = bad
    assert (td == before).all()  # nothing written


def test_batch_size_changes_restamp():
    td = _td()
    td.batch_size = [2]
    assert td["u"].batch_size == torch.Size([2])
    td = TensorDict(u=UnbatchedTensor(torch.zeros(3, 4)), b=torch.zeros(2, 5)).auto_batch_size_()
    assert td.batch_size == torch.Size([2, 5]) and td["u"].batch_size == torch.Size([2, 5])


def test_repr_names_it_and_parses_back():
    td = _td()
    text = repr(td)
    assert "u: UnbatchedTensor(shape=[3, 4]" in text and "b: Tensor(shape=[2, 5, 3]" in text
    back = parse_tensor_dict_string(text)
    assert type(back["u"]) is UnbatchedTensor and back["u"].shape == (3, 4) and back["n", "v"].dtype == torch.int64


# ------------------------------------------------------------------------------------------ persistence
def _check_loaded(out: TensorDict, td: TensorDict) -> None:
    assert type(out["u"]) is UnbatchedTensor and out["u"].batch_size == torch.Size([2, 5])
    assert out["u"].tolist() == td["u"].tolist() and out["n", "v"].tolist() == [1, 2, 3]
    assert out["b"].tolist() == td["b"].tolist()


@pytest.mark.parametrize("how", ["memmap", "memmap_", "save", "archive"])
def test_memmap_round_trip(tmp_path, how):
    td = _td()
    if how == "memmap":
        out = td.memmap(tmp_path / "m")
        assert out.is_memmap() and out["u"].untyped_storage().filename is not None
    elif how == "memmap_":
        out = td.clone().memmap_(tmp_path / "m")
    elif how == "save":
        td.save(tmp_path / "m")
    else:
        td.memmap(tmp_path / "m.tdz")
    _check_loaded(
        out
        if how in ("memmap", "memmap_")
        else TensorDict.load_memmap(tmp_path / ("m.tdz" if how == "archive" else "m")),
        td,
    )
    _check_loaded(TensorDict.load_memmap(tmp_path / ("m.tdz" if how == "archive" else "m")), td)


def test_memmap_like_keeps_it_unbatched(tmp_path):
    out = _td().memmap_like(tmp_path / "m")
    assert type(out["u"]) is UnbatchedTensor and out["u"].shape == (3, 4) and out["u"].sum().item() == 0.0


def test_consolidate_round_trip(tmp_path):
    td = _td()
    _check_loaded(td.consolidate(), td)
    _check_loaded(pickle.loads(pickle.dumps(td.consolidate())), td)
    td.consolidate(tmp_path / "c.bin")
    from tensorbatch import from_consolidated

    _check_loaded(from_consolidated(tmp_path / "c.bin"), td)


def test_safetensors_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    from tensorbatch import from_safetensors, to_safetensors

    td = _td()
    to_safetensors(td, tmp_path / "f.st")
    _check_loaded(from_safetensors(tmp_path / "f.st"), td)


def test_hdf5_refuses_it_and_writes_no_file(tmp_path):
    pytest.importorskip("h5py")
    with pytest.raises(NotImplementedError, match="UnbatchedTensor at 'u'"):
        _td().to_h5(tmp_path / "f.h5")
    assert not (tmp_path / "f.h5").exists()


def test_pad_sequence_passes_it_through():
    from tensorbatch import pad_sequence

    td = _td()
    out = pad_sequence([td[0], td[1, :3]], return_mask=True)
    assert out.batch_size == torch.Size([2, 5]) and _same_data(out["u"], td["u"])
    assert out["u"].batch_size == torch.Size([2, 5]) and ("masks", "u") not in out.keys(True)


def test_pack_refuses_it_by_name():
    with pytest.raises(TypeError, match=r"cannot pack the UnbatchedTensor entry \('n', 'v'\)"):
        _td().pack()
    flat, _ = _td().exclude("u", ("n", "v")).pack()
    assert flat.shape == (2, 5, 3)


def test_attrs_keeps_it_and_to_attrs_leaves_it_alone():
    attrs = _td().attrs()
    assert type(attrs["u"]) is UnbatchedTensor and attrs["u"].shape == (3, 4)
    target = _td().apply(lambda x: x.to(torch.float64))
    out = target.to(attrs)
    assert out["b"].dtype == torch.float32 and out["u"].dtype == torch.float64 and type(out["u"]) is UnbatchedTensor


def test_lazy_stack_repr_and_parse_back():
    from tensorbatch import lazy_stack

    text = repr(lazy_stack([_td(), _td()]))
    assert "u: UnbatchedTensor(shape=[3, 4]" in text and "b: Tensor(shape=[2, 2, 5, 3]" in text
    back = parse_tensor_dict_string(text)
    assert back["u"].shape == (3, 4) and back["u"].batch_size == torch.Size([2, 2, 5])


def test_compiled_ops_of_an_unbatched_tensor_do_not_replay_each_other():
    """No graph break in its ``__torch_function__`` (one there compiles that frame with no guard on the op)."""
    import torch._dynamo

    torch._dynamo.reset()
    u = UnbatchedTensor(torch.randn(7), batch_size=[4])
    explained = torch._dynamo.explain(lambda x: x * 2)(u)
    assert explained.graph_break_count == 0
    as_float = torch.compile(lambda x: x.float(), backend="eager")(u)
    ndim = torch.compile(lambda x: x.ndim, backend="eager")(u)  # gave the first function's result
    assert type(as_float) is UnbatchedTensor and as_float.batch_size == torch.Size([4])
    assert ndim == 1 and type(ndim) is int
    td = TensorDict({"a": torch.randn(4, 3), "u": u}, batch_size=[4])

    def step(t):
        return t.apply(lambda x: x.sum(-1) if x.ndim > 1 else x * 3)

    got = torch.compile(step, backend="eager")(td)
    assert type(got["u"]) is UnbatchedTensor and got["u"].batch_size == torch.Size([4])
    torch.testing.assert_close(got["u"].as_subclass(torch.Tensor), u.as_subclass(torch.Tensor) * 3)
    torch.testing.assert_close(got["a"], td["a"].sum(-1))
    torch._dynamo.reset()
