"""Differential tests, nested (jagged) tensor leaves (issue 12, item 4): TensorDicts holding
``torch.nested`` tensors of both layouts, through indexing, splitting, stacking, copies, consolidation,
memory-mapped folders and padding, against tensordict 0.15.3.

Results are compared as plain structures: every nested tensor by its layout, dtype and components.
Where tensordict fails and tensorbatch works (strided slices and splits, strided consolidation, saving a
jagged tensor), the case is a strict xfail listed in ``conftest.DIFFERENCES``.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ._diff import builtin_bases

pytestmark = [pytest.mark.differential, pytest.mark.filterwarnings("ignore")]

LAYOUTS = {"njt": torch.jagged, "nst": torch.strided}
LENGTHS = (2, 1, 3, 2)


def _nested(layout: torch.layout, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    start = 0
    comps = []
    for n in LENGTHS:
        comps.append(torch.arange(start, start + 2 * n, dtype=dtype).reshape(n, 2))
        start += 2 * n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout is "prototype" and says so
        return torch.nested.nested_tensor(comps, layout=layout)


def _td(lib: Any, layout: torch.layout) -> Any:
    return lib.TensorDict(
        {"nt": _nested(layout), "x": torch.arange(8.0).reshape(4, 2), "n": {"nt2": _nested(layout, torch.float64)}},
        batch_size=[4],
    )


def describe(obj: Any) -> Any:
    """A plain structure for comparing results: nested tensors by layout, dtype and components."""
    if isinstance(obj, torch.Tensor):
        obj = obj.as_subclass(torch.Tensor) if not obj.is_nested else obj
        if obj.is_nested:
            return ("nested", str(obj.layout), str(obj.dtype), [c.tolist() for c in obj.unbind(0)])
        return ("tensor", str(obj.dtype), list(obj.shape), obj.tolist())
    if hasattr(obj, "batch_size") and hasattr(obj, "items"):
        leaves = {k: describe(v) for k, v in obj.items(include_nested=True, leaves_only=True)}
        return ("td", list(obj.batch_size), dict(sorted(leaves.items(), key=lambda kv: str(kv[0]))))
    if isinstance(obj, (list, tuple)):
        return [describe(x) for x in obj]
    return obj


def _outcome(lib: Any, layout: torch.layout, fn: Any, tmp: Path) -> tuple[Any, BaseException | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return describe(fn(lib, _td(lib, layout), tmp / lib.__name__)), None
        except Exception as err:  # errors are compared too
            return None, err


def _memmap_round_trip(lib: Any, td: Any, folder: Path) -> Any:
    td.memmap(folder)
    return lib.TensorDict.load_memmap(folder)


CASES = {
    "index_int": lambda L, td, _: td[1],
    "index_neg_int": lambda L, td, _: td[-1],
    "index_slice": lambda L, td, _: td[1:3],
    "index_slice_open": lambda L, td, _: td[2:],
    "index_list": lambda L, td, _: td[[3, 0]],
    "index_tensor": lambda L, td, _: td[torch.tensor([2, 0, 2])],
    "index_mask": lambda L, td, _: td[torch.tensor([True, False, True, True])],
    "unbind": lambda L, td, _: td.unbind(0),
    "split": lambda L, td, _: td.split(3),
    "split_sizes": lambda L, td, _: td.split([1, 3]),
    "chunk": lambda L, td, _: td.chunk(2),
    "cat": lambda L, td, _: torch.cat([td, td[:2] if td["nt"].layout is torch.jagged else td], 0),
    "stack": lambda L, td, _: torch.stack([td, td], 0),
    "clone": lambda L, td, _: td.clone(),
    "to_double": lambda L, td, _: td.to(torch.float64),
    "apply": lambda L, td, _: td.apply(lambda x: x * 2),
    "pickle": lambda L, td, _: pickle.loads(pickle.dumps(td)),
    "eq": lambda L, td, _: td == td.clone(),
    "select": lambda L, td, _: td.select("nt", ("n", "nt2")),
    "update": lambda L, td, _: L.TensorDict({"x": torch.zeros(4, 2)}, [4]).update(td),
    "zero_": lambda L, td, _: td.clone().zero_(),
    "set_": lambda L, td, _: td.clone().set_("nt", td["nt"] * 2),
    "update_": lambda L, td, _: td.clone().update_(td.apply(lambda x: x + 1)),
    "copy_": lambda L, td, _: td.clone().copy_(td.apply(lambda x: x * 3)),
    "reshape_same": lambda L, td, _: td.reshape(4),
    "auto_batch_size": lambda L, td, _: L.TensorDict({"nt": td["nt"], "x": td["x"]}).auto_batch_size_(),
    "batch_size_setter": lambda L, td, _: setattr(td, "batch_size", [3]),
    "consolidate": lambda L, td, _: td.consolidate(),
    "consolidate_pickle": lambda L, td, _: pickle.loads(pickle.dumps(td.consolidate())),
    "memmap": lambda L, td, tmp: td.memmap(tmp),
    "memmap_round_trip": lambda L, td, tmp: _memmap_round_trip(L, td, tmp),
    "to_padded_tensor": lambda L, td, _: td.to_padded_tensor(),
    "to_padded_tensor_value": lambda L, td, _: td.to_padded_tensor(padding=-1.0),
}
# tensordict's own limits on the strided layout (torch cannot slice it): cases it fails, listed in
# conftest.DIFFERENCES as strict xfails (tensorbatch does them), plus the jagged save tensordict refuses
# and in-place copies of whole TensorDicts (torch has no foreach copy for nested tensors)
DIFFERENT = {
    "nst-index_slice",
    "nst-index_slice_open",
    "nst-index_list",
    "nst-index_tensor",
    "nst-index_mask",
    "nst-split",
    "nst-split_sizes",
    "nst-chunk",
    "nst-consolidate",
    "nst-consolidate_pickle",
    "njt-memmap",
    "njt-memmap_round_trip",
    "nst-update_",
    "njt-update_",
    "nst-copy_",
    "njt-copy_",
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_nested_leaves(ref, tb, tmp_path, layout, case):
    fn = CASES[case]
    theirs, their_err = _outcome(ref, LAYOUTS[layout], fn, tmp_path)
    ours, our_err = _outcome(tb, LAYOUTS[layout], fn, tmp_path)
    if their_err is not None or our_err is not None:
        assert their_err is not None, f"tensordict succeeds, tensorbatch raises {our_err!r}"
        assert our_err is not None, f"tensordict raises {their_err!r}, tensorbatch succeeds"
        assert builtin_bases(type(our_err)) == builtin_bases(type(their_err)), (their_err, our_err)
        return
    assert ours == theirs


# ---------------------------------------------------------------- where tensordict fails, we do better
def _as_layout(described: Any, layout: torch.layout) -> Any:
    """``described`` with every nested tensor given as ``layout`` (same components)."""
    if isinstance(described, tuple) and described and described[0] == "nested":
        return ("nested", str(layout), *described[2:])
    if isinstance(described, tuple) and described and described[0] == "td":
        return ("td", described[1], {k: _as_layout(v, layout) for k, v in described[2].items()})
    if isinstance(described, list):
        return [_as_layout(x, layout) for x in described]
    return described


# what tensordict computes without the in-place copy it cannot do for nested leaves
OUT_OF_PLACE = {
    "update_": lambda L, td, _: td.apply(lambda x: x + 1),
    "copy_": lambda L, td, _: td.apply(lambda x: x * 3),
}


@pytest.mark.parametrize("case", sorted(DIFFERENT))
def test_nested_where_tensordict_fails(ref, tb, tmp_path, case):
    """tensordict raises; tensorbatch gives what tensordict gives for the other layout (or out of place)."""
    layout, name = case.split("-")
    if name in OUT_OF_PLACE:
        theirs, their_err = _outcome(ref, LAYOUTS[layout], OUT_OF_PLACE[name], tmp_path)
    else:
        theirs, their_err = _outcome(ref, LAYOUTS["njt" if layout == "nst" else "nst"], CASES[name], tmp_path)
    assert their_err is None, their_err
    ours, our_err = _outcome(tb, LAYOUTS[layout], CASES[name], tmp_path)
    assert our_err is None, our_err
    assert ours == _as_layout(theirs, LAYOUTS[layout])


def test_stack_refusal_carries_the_reference_phrase(ref, tb):
    for lib in (ref, tb):
        td = _td(lib, torch.jagged)
        with pytest.raises(RuntimeError, match=re.escape("Cannot stack the tensordicts")):
            torch.stack([td, td], 0)


# ---------------------------------------------------------------- memory-mapped folders, across libraries
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_our_nested_folder_loads_in_reference(ref, tb, tmp_path, layout):
    _td(tb, LAYOUTS[layout]).memmap(tmp_path / "ours")
    theirs = ref.TensorDict.load_memmap(tmp_path / "ours")
    expected = describe(_td(tb, torch.strided))  # tensordict loads every nested tensor strided
    assert describe(theirs.apply(lambda x: x.as_subclass(torch.Tensor) if not x.is_nested else x)) == expected


def test_reference_nested_folder_loads_in_ours(ref, tb, tmp_path):
    _td(ref, torch.strided).memmap(tmp_path / "theirs")
    ours = tb.TensorDict.load_memmap(tmp_path / "theirs")
    assert describe(ours) == describe(_td(tb, torch.strided))
    assert not ours.is_locked  # (as tensordict's load_memmap)
    assert (tmp_path / "theirs" / "nt.shape.memmap").exists()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_same_files_as_reference(ref, tb, tmp_path, layout):
    """Strided: byte-identical files. Jagged (tensordict cannot save it): the files of its strided twin."""
    _td(ref, torch.strided).memmap(tmp_path / "theirs")
    _td(tb, LAYOUTS[layout]).memmap(tmp_path / "ours")
    for name in ("nt.memmap", "nt.shape.memmap", "n/nt2.memmap", "n/nt2.shape.memmap"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes(), name
