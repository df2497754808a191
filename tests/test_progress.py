"""Progress bars (tqdm) where a user waits: off by default, on per call or globally, same results either way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensorbatch
from tensorbatch import TensorDict, get_progress, set_progress
from tensorbatch import _progress as progress_mod

pytest.importorskip("tqdm", reason="tqdm (the progress extra) is not installed")


def _td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.rand(64, 1024, generator=g),
            "b": torch.arange(64, dtype=torch.int16),
            "n": {"c": torch.rand(64, 3, generator=g, dtype=torch.float64), "s": "text"},
        },
        batch_size=[64],
    )


NBYTES = 64 * 1024 * 4 + 64 * 2 + 64 * 3 * 8  # the tensor leaves' bytes


def _of(nbytes: int) -> str:
    """``done/total`` as tqdm shows a finished byte count."""
    from tqdm import tqdm

    size = tqdm.format_sizeof(nbytes, divisor=1024)
    return f"{size}/{size}"


def _final(err: str, desc: str) -> str:
    """The last state tqdm drew of the bar named ``desc`` (it redraws with carriage returns)."""
    states = [s for s in re.split(r"[\r\n]", err) if s.startswith(f"{desc}:")]
    assert states, f"no {desc!r} bar in {err!r}"
    return states[-1]


def _closed(line: str) -> str:
    """A closed bar's name and percentage (tqdm ends a closed bar's line)."""
    return line.rpartition("\r")[2].partition("|")[0].replace(" ", "").replace(":", ": ")


def _assert_same(x: TensorDict, y: TensorDict) -> None:
    assert x.batch_size == y.batch_size
    assert set(x.keys(True, True)) == set(y.keys(True, True))
    for key in x.keys(True, True):
        a, b = x.get(key), y.get(key)
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), key
        else:
            assert a.tolist() == b.tolist(), key


# ---------------------------------------------------------------------------------------- off by default
def test_no_bar_by_default(tmp_path, capsys) -> None:
    td = _td()
    assert get_progress() is False
    m = td.memmap(tmp_path / "m", num_threads=2)
    TensorDict.load_memmap(tmp_path / "m")
    td.memmap_like(tmp_path / "l")
    td.consolidate(num_threads=2)
    assert capsys.readouterr().err == ""
    _assert_same(m, td)


def test_no_bar_is_a_shared_no_op_and_loops_are_handed_back() -> None:
    pairs = [("a", torch.zeros(3))]
    assert progress_mod.entries(pairs, None, "to_h5") is pairs
    assert progress_mod.items(pairs, False, "from_pandas", "column") is pairs
    bar = progress_mod.bar(None, "memmap", 10)
    assert bar is progress_mod.NO_BAR
    bar.update(5)
    progress_mod.finish(bar)
    assert bar.n == 0


# ---------------------------------------------------------------------------------------- memmap and load
@pytest.mark.parametrize("num_threads", [0, 4])
def test_memmap_bar_reaches_the_bytes_written(tmp_path, capsys, num_threads) -> None:
    td = _td()
    with_bar = td.memmap(tmp_path / "bar", num_threads=num_threads, progress=True)
    state = _final(capsys.readouterr().err, "memmap")
    assert state.startswith("memmap: 100%") and _of(NBYTES) in state, state
    without = td.memmap(tmp_path / "plain", num_threads=num_threads)
    assert capsys.readouterr().err == ""
    _assert_same(with_bar, td)
    _assert_same(with_bar, without)
    for name in ("a.memmap", "b.memmap", "n/c.memmap", "meta.json", "n/meta.json"):
        assert (tmp_path / "bar" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name


def test_memmap_and_memmap_like_bars_count_bytes(tmp_path, capsys) -> None:
    td = _td()
    td.memmap_(tmp_path / "inplace", progress=True)
    assert _final(capsys.readouterr().err, "memmap").startswith("memmap: 100%")
    big = TensorDict(x=torch.zeros(3, 32, 32, dtype=torch.uint8)).expand(1000)
    like = big.memmap_like(tmp_path / "like", num_threads=2, progress=True)
    state = _final(capsys.readouterr().err, "memmap_like")
    assert state.startswith("memmap_like: 100%") and _of(3 * 32 * 32 * 1000) in state, state
    assert like["x"].shape == (1000, 3, 32, 32) and not like["x"].any()


def test_load_memmap_bar_counts_the_bytes_mapped(tmp_path, capsys) -> None:
    td = _td()
    td.memmap(tmp_path / "m")
    capsys.readouterr()
    loaded = TensorDict.load_memmap(tmp_path / "m", progress=True)
    state = _final(capsys.readouterr().err, "load_memmap")
    assert state.startswith("load_memmap: 100%") and _of(NBYTES) in state, state
    _assert_same(loaded, td)
    _assert_same(tensorbatch.load_memmap(tmp_path / "m", progress=False), td)
    assert capsys.readouterr().err == ""


def test_archive_bars_count_the_bytes_packed(tmp_path, capsys) -> None:
    td = _td()
    out = td.memmap(tmp_path / "x.tdz", progress=True)
    assert _final(capsys.readouterr().err, "memmap").startswith("memmap: 100%")
    _assert_same(out, td)
    like = td.memmap_like(tmp_path / "l.tdz", progress=True)
    assert _final(capsys.readouterr().err, "memmap_like").startswith("memmap_like: 100%")
    assert not like["a"].any()
    td.memmap(tmp_path / "saved")
    capsys.readouterr()
    packed = tensorbatch.pack_memmap(tmp_path / "saved", tmp_path / "p.tdz", compression="deflate", progress=True)
    assert _final(capsys.readouterr().err, "pack_memmap").startswith("pack_memmap: 100%")
    _assert_same(TensorDict.load_memmap(packed), td)
    tensorbatch.pack_memmap(tmp_path / "saved", tmp_path / "q.tdz")
    assert capsys.readouterr().err == ""
    assert (tmp_path / "q.tdz").stat().st_size > (tmp_path / "p.tdz").stat().st_size  # (the deflated one)


# ---------------------------------------------------------------------------------------- consolidate
@pytest.mark.parametrize(("num_threads", "progress"), [(0, True), (3, False), (3, True)])
def test_consolidate_leaf_by_leaf_gives_the_same_buffer(num_threads, progress, capsys, tmp_path) -> None:
    from tensorbatch._io.consolidate import state

    td = _td()
    plain = td.consolidate()
    out = td.consolidate(num_threads=num_threads, progress=progress)
    err = capsys.readouterr().err
    if progress:
        assert _final(err, "consolidate").startswith("consolidate: 100%")
    else:
        assert err == ""
    _assert_same(out, td)
    assert out.is_consolidated()
    assert torch.equal(state(out)[0], state(plain)[0])  # alignment gaps zeroed too
    to_file = td.consolidate(tmp_path / "c.bin", num_threads=num_threads, progress=progress)
    _assert_same(to_file, td)
    _assert_same(TensorDict.from_consolidated(tmp_path / "c.bin"), td)


def test_consolidate_with_threads_keeps_errors_and_devices() -> None:
    td = TensorDict(a=torch.zeros(2), b={"c": torch.ones(2, 3)}, batch_size=[2])
    out = td.consolidate(num_threads=2, device="cpu")
    assert out.device == torch.device("cpu") and out["b", "c"].tolist() == [[1.0] * 3] * 2


# ---------------------------------------------------------------------------------------- the global switch
def test_set_progress_block_and_global(tmp_path, capsys) -> None:
    td = _td()
    with set_progress(True):
        assert get_progress() is True
        td.memmap(tmp_path / "a")
        td.consolidate()
        td.memmap(tmp_path / "b", progress=False)  # a call's own choice wins
    assert get_progress() is False
    err = capsys.readouterr().err
    assert [_closed(line) for line in err.split("\n") if line] == ["memmap: 100%", "consolidate: 100%"]  # one bar each
    td.memmap(tmp_path / "c")
    assert capsys.readouterr().err == ""
    try:
        set_progress(True)  # as torch.set_grad_enabled: a call sets the mode for the rest of the program
        assert get_progress() is True
        td.memmap(tmp_path / "d")
        assert _final(capsys.readouterr().err, "memmap").startswith("memmap: 100%")
    finally:
        set_progress(False)
    assert get_progress() is False


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("yes", True), ("0", False), ("", False)])
def test_environment_variable_sets_the_default(value, expected) -> None:
    env = {**os.environ, "TENSORBATCH_PROGRESS": value}
    out = subprocess.run(
        [sys.executable, "-c", "import tensorbatch; print(tensorbatch.get_progress())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    assert out.stdout.strip() == str(expected)


# ---------------------------------------------------------------------------------------- without tqdm
def test_without_tqdm_a_wanted_bar_names_the_extra(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    td = _td()
    with pytest.raises(ImportError, match=r"memmap\(progress=True\).*tensorbatch\[progress\]"):
        td.memmap(tmp_path / "m", progress=True)
    assert not (tmp_path / "m").exists()  # nothing left behind (the save is atomic)
    with pytest.raises(ImportError, match=r"consolidate\(progress=True\).*tensorbatch\[progress\]"):
        td.consolidate(progress=True)
    _assert_same(td.memmap(tmp_path / "m"), td)  # no bar wanted: tqdm is never imported
    _assert_same(td.consolidate(num_threads=2), td)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------- h5, store, tables
def test_to_h5_bar(tmp_path, capsys) -> None:
    pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")
    td = _td().exclude(("n", "s"))
    with td.to_h5(tmp_path / "x.h5", progress=True) as out:
        state = _final(capsys.readouterr().err, "to_h5")
        assert state.startswith("to_h5: 100%") and _of(NBYTES) in state, state
        _assert_same(out.to_tensordict(), td)
    with td.to_h5(tmp_path / "y.h5") as out:
        assert capsys.readouterr().err == ""
        _assert_same(out.to_tensordict(), td)


def test_to_store_bar(capsys) -> None:
    pytest.importorskip("redis", reason="redis (the redis extra) is not installed")
    from _redis_server import shared_server

    td = _td().exclude(("n", "s"))
    with td.to_store(**shared_server().kwargs(), progress=True) as store:
        state = _final(capsys.readouterr().err, "to_store")
        assert state.startswith("to_store: 100%"), state
        _assert_same(store.to_tensordict(), td)


def test_table_reads_count_columns(tmp_path, capsys) -> None:
    pd = pytest.importorskip("pandas", reason="pandas (the tabular extra) is not installed")
    pytest.importorskip("pyarrow", reason="pyarrow (the tabular extra) is not installed")
    frame = pd.DataFrame({"x": [1.0, 2.0], "y": [3, 4], "s": ["a", "b"]})
    plain = tensorbatch.from_pandas(frame)
    assert capsys.readouterr().err == ""
    _assert_same(tensorbatch.from_pandas(frame, progress=True), plain)
    assert _final(capsys.readouterr().err, "from_pandas").startswith("from_pandas: 100%|")
    frame.to_csv(tmp_path / "t.csv", index=False)
    _assert_same(tensorbatch.from_csv(tmp_path / "t.csv", progress=True), plain)
    assert "3/3" in _final(capsys.readouterr().err, "from_pandas")
    plain.to_parquet(tmp_path / "t.parquet")
    _assert_same(TensorDict.from_parquet(tmp_path / "t.parquet", progress=True), plain)
    assert "3/3" in _final(capsys.readouterr().err, "from_parquet")
    import pyarrow as pa

    _assert_same(tensorbatch.from_arrow(pa.table({"x": [1.0, 2.0]}), progress=True), plain.select("x"))
    assert "1/1" in _final(capsys.readouterr().err, "from_arrow")
    with set_progress(True):
        tensorbatch.from_json(_json(tmp_path, frame))
    assert "3/3" in _final(capsys.readouterr().err, "from_pandas")


def _json(tmp_path: Path, frame) -> Path:
    path = tmp_path / "t.json"
    frame.to_json(path, orient="records")
    return path
