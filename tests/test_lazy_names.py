"""LazyStackedTensorDict dim names: the stack dim's name lives on the stack, the others on the members.

Checked against tensordict 0.15.3's behaviour: ``refine_names``/``names =``/``rename`` name the members
too, indexing keeps the names of the dims it keeps, ``names = None`` clears everything.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from tensorbatch import LazyStackedTensorDict, TensorDict, lazy_stack


def stack(stack_dim: int = 0, k: int = 2, n: int = 3) -> LazyStackedTensorDict:
    return lazy_stack([TensorDict(a=torch.arange(float(n)) + i, batch_size=[n]) for i in range(k)], stack_dim)


def nested_stack() -> LazyStackedTensorDict:
    tds = [TensorDict(a=TensorDict(b=torch.zeros(3, 4), batch_size=[3, 4]), batch_size=[3]) for _ in range(2)]
    return lazy_stack(tds)


def test_unnamed_by_default():
    s = stack()
    assert s.names == [None, None]
    assert s._maybe_names() is None


def test_refine_names_names_the_stack_and_the_members():
    s = stack()
    out = s.refine_names("x", "y")
    assert out is s
    assert s.names == ["x", "y"]
    assert [td.names for td in s.tensordicts] == [["y"], ["y"]]


def test_names_stack_dim_1():
    s = stack(stack_dim=1)
    s.names = ["x", "y"]
    assert s.names == ["x", "y"]
    assert [td.names for td in s.tensordicts] == [["x"], ["x"]]
    assert s[0].names == ["y"]
    assert s[:, 0].names == ["x"]


def test_indexing_keeps_the_names_of_kept_dims():
    s = stack(k=3).refine_names("x", "y")
    assert type(s[0]) is TensorDict
    assert s[0].names == ["y"]
    assert s[:, 0].names == ["x"]
    assert s[:2].names == ["x", "y"]
    assert s[:, :2].names == ["x", "y"]
    assert s[torch.tensor([0, 2])].names == ["x", "y"]
    assert s[torch.tensor([True, False, True])].names == ["x", "y"]


def test_rename_is_a_copy_rename_renames_in_place():
    s = stack().refine_names("x", "y")
    r = s.rename("p", "q")
    assert r.names == ["p", "q"]
    assert s.names == ["x", "y"]
    assert [td.names for td in s.tensordicts] == [["y"], ["y"]]
    assert s.rename(x="xx").names == ["xx", "y"]
    assert s.names == ["x", "y"]
    s.rename_(x="xx")
    assert s.names == ["xx", "y"]


def test_names_none_clears_stack_and_members():
    s = stack().refine_names("x", "y")
    s.names = None
    assert s.names == [None, None]
    assert [td.names for td in s.tensordicts] == [[None], [None]]


def test_partial_names():
    s = stack()
    s.names = ["x", None]
    assert s.names == ["x", None]
    assert [td.names for td in s.tensordicts] == [[None], [None]]
    s.names = [None, "y"]
    assert s.names == [None, "y"]
    assert [td.names for td in s.tensordicts] == [["y"], ["y"]]


def test_refine_names_ellipsis():
    s = stack().refine_names("x", "y")
    assert s.refine_names(..., "z").names == ["x", "z"]


def test_names_come_from_named_members():
    s = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3], names=["z"]) for _ in range(2)])
    assert s.names == [None, "z"]


def test_dim_where_members_disagree_reads_unnamed():
    a = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4], names=["p", "w"])
    b = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4], names=["q", "w"])
    s = lazy_stack([a, b])
    assert s.names == [None, None, "w"]
    s.names = ["x", "y", "w"]
    assert a.names == ["y", "w"]
    assert b.names == ["y", "w"]


def test_wrong_length_raises():
    s = stack()
    with pytest.raises(ValueError, match=r"names \['x'\] must have one entry per batch dim \(batch_size \[2, 3\]\)"):
        s.names = ["x"]
    assert s.names == [None, None]


def test_duplicate_names_raise():
    s = stack()
    with pytest.raises(ValueError, match=r"names must be unique, got \['x', 'x'\]"):
        s.names = ["x", "x"]
    assert [td.names for td in s.tensordicts] == [[None], [None]]


def test_value_operations_keep_names():
    s = stack().refine_names("x", "y")
    for out in (s.clone(), s + 1, s.exclude("a"), s.apply(lambda x: x * 2), s.empty(), s.detach()):
        assert type(out) is LazyStackedTensorDict
        assert out.names == ["x", "y"]
    torch.testing.assert_close((s + 1)["a"], torch.tensor([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]))


def test_dense_results_keep_names():
    s = stack().refine_names("x", "y")
    td = s.to_tensordict()
    assert type(td) is TensorDict
    assert td.names == ["x", "y"]
    assert s.contiguous().names == ["x", "y"]
    assert s.densify().names == ["x", "y"]
    assert s.unsqueeze(0).names == [None, "x", "y"]
    assert s.permute(1, 0).names == ["y", "x"]


def test_nested_stack_gets_the_names():
    s = nested_stack().refine_names("x", "y")
    sub = s["a"]
    assert type(sub) is LazyStackedTensorDict
    assert sub.names == ["x", "y", None]
    assert [td["a"].names for td in s.tensordicts] == [["y", None], ["y", None]]


def test_naming_a_tensordict_names_its_nested_lazy_stack():
    inner = stack()
    td = TensorDict({"s": inner}, batch_size=[2])
    td.names = ["x"]
    assert td.names == ["x"]
    assert inner.names == ["x", None]


def test_pickle_keeps_names():
    s = stack().refine_names("x", "y")
    out = pickle.loads(pickle.dumps(s))
    assert type(out) is LazyStackedTensorDict
    assert out.names == ["x", "y"]


def test_memmap_round_trip_keeps_names(tmp_path):
    s = stack().refine_names("x", "y")
    s.memmap(tmp_path / "s")
    out = TensorDict.load_memmap(tmp_path / "s")
    assert type(out) is LazyStackedTensorDict
    assert out.names == ["x", "y"]


def test_append_keeps_the_stack_name():
    s = stack().refine_names("x", "y")
    s.append(TensorDict(a=torch.zeros(3), batch_size=[3], names=["y"]))
    assert s.names == ["x", "y"]
    s.append(TensorDict(a=torch.zeros(3), batch_size=[3]))  # an unnamed member: its dim reads unnamed
    assert s.names == ["x", None]


def test_batch_size_change_of_dims_drops_names():
    s = lazy_stack([TensorDict(a=torch.zeros(3, 4), batch_size=[3]) for _ in range(2)]).refine_names("x", "y")
    s.batch_size = [2, 3]
    assert s.names == ["x", "y"]
    s.batch_size = [2, 3, 4]
    assert s.names == [None, None, None]


def test_constructor_names_and_stack_dim_name():
    tds = [TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)]
    assert LazyStackedTensorDict(*tds, stack_dim_name="s").names == ["s", None]
    s = LazyStackedTensorDict(*tds, names=["s", "t"])
    assert s.names == ["s", "t"]
    assert [td.names for td in tds] == [["t"], ["t"]]
    with pytest.raises(ValueError, match=r"stack_dim_name 't' is already the name of a member dim: \[None, 't'\]"):
        LazyStackedTensorDict(*tds, stack_dim_name="t")


def test_empty_stack_names_only_its_stack_dim():
    s = LazyStackedTensorDict(batch_size=[0, 3], stack_dim_name="s")
    assert s.names == ["s", None]
    with pytest.raises(ValueError, match=r"a lazy stack without members can only name its stack dim \(dim 0\)"):
        s.names = ["s", "t"]


class _NoNames(TensorDict):
    """A member whose names cannot be set."""

    __slots__ = ()

    @property
    def names(self) -> list[str | None]:
        return [None] * self.batch_dims


def test_member_refusing_names_changes_nothing():
    a = TensorDict(a=torch.zeros(3), batch_size=[3])
    b = _NoNames(a=torch.zeros(3), batch_size=[3])
    s = lazy_stack([a, b])
    with pytest.raises(AttributeError) as info:
        s.names = ["x", "y"]
    assert "while naming member 1 (_NoNames) of a lazy stack: nothing was renamed" in info.value.__notes__
    assert a.names == [None]
    assert s.names == [None, None]


def test_indexing_along_the_stack_dim_reads_no_member_names(monkeypatch):
    """Picking members must not scan every member's names (it made ``s[10:20]`` of 100 members 3x slower)."""
    calls = []
    original = TensorDict._maybe_names

    def counting(self):
        calls.append(self)
        return original(self)

    s = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(50)])
    monkeypatch.setattr(TensorDict, "_maybe_names", counting)
    assert s[10:20].batch_size == (10, 3)
    assert s[torch.tensor([1, 2])].batch_size == (2, 3)
    assert calls == []
