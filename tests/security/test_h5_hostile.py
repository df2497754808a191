"""HDF5 files whose entries reach other files: external links, external raw storage, virtual datasets.

Refused by default in every mode, naming the file and the entry, before the other file is opened; followed
with ``allow_external=True``; soft links inside the file are fine (docs/security.md, "HDF5 files"). Every
probe runs in ``tmp_path``, and the outside files are fingerprinted before and after.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tensorbatch import from_h5
from tensorbatch.persistent import PersistentTensorDict

from ._files import digest

h5py = pytest.importorskip("h5py", reason="h5py (the h5 extra) is not installed")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """``main.h5`` (a plain leaf ``a`` and entries reaching outside), ``secret.h5`` and ``raw.bin`` next to it."""
    secret, raw, main = tmp_path / "secret.h5", tmp_path / "raw.bin", tmp_path / "main.h5"
    with h5py.File(secret, "w") as f:
        f["d"] = np.arange(4.0)
        f["g/e"] = np.arange(4, dtype=np.int64)
    raw.write_bytes(np.arange(4.0).tobytes())
    with h5py.File(main, "w") as f:
        f["a"] = np.ones(4)
        f["inside"] = h5py.SoftLink("/a")
        f["link"] = h5py.ExternalLink(str(secret), "/d")
        f["group"] = h5py.ExternalLink(str(secret), "/g")
        f["through"] = h5py.SoftLink("/link")  # a soft link that leaves the file through the external link
        f["missing"] = h5py.ExternalLink(str(tmp_path / "nowhere.h5"), "/d")
        f.create_dataset("storage", shape=(4,), dtype="f8", external=[(str(raw), 0, 32)])
        layout = h5py.VirtualLayout(shape=(4,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(secret), "d", shape=(4,))
        f.create_virtual_dataset("virtual", layout)
        layout = h5py.VirtualLayout(shape=(4,), dtype="f8")
        layout[:] = h5py.VirtualSource(".", "a", shape=(4,))
        f.create_virtual_dataset("virtual_inside", layout)
    return {"main": main, "secret": secret, "raw": raw, "nowhere": tmp_path / "nowhere.h5"}


OUTSIDE = {
    "link": "external link to '/d' in the file",
    "group": "external link to '/g' in the file",
    "through": "leads into the file",
    "missing": "external link to '/d' in the file",
    "storage": "stored in the outside file(s)",
    "virtual": "virtual dataset mapping the file(s)",
}


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_outside_entries_are_refused_naming_file_and_key(files, mode):
    before = {name: digest(files[name]) for name in ("secret", "raw")}
    with from_h5(files["main"], mode=mode) as td:
        assert td.batch_size == torch.Size([4])  # the refused entries do not decide the batch size
        assert td["a"].tolist() == [1.0] * 4
        assert td["inside"].tolist() == [1.0] * 4
        assert td["virtual_inside"].tolist() == [1.0] * 4
        for key, why in OUTSIDE.items():
            with pytest.raises(PermissionError, match="allow_external=True") as info:
                td[key]
            message = str(info.value)
            for part in (f"'/{key}'", repr(str(files["main"])), why):
                assert part in message, message
        reads = (
            td.to_tensordict,
            lambda: td[1:3].to_tensordict(),
            lambda: td[[0, 2]].to_tensordict(),
            lambda: td["group", "e"],
        )
        for read in reads:
            with pytest.raises(PermissionError, match="outside this file"):
                read()
        if mode == "r+":
            for key in ("link", "storage", "virtual", "through"):
                with pytest.raises(PermissionError, match="allow_external"):
                    td.set_(key, torch.full((4,), 7.0))
                with pytest.raises(PermissionError, match="allow_external"):
                    td[key] = torch.full((4,), 7.0)  # replacing needs a look at what is there, refused too
            with pytest.raises(PermissionError, match="allow_external"):
                td[0] = {"link": torch.tensor(7.0)}
            with pytest.raises(PermissionError, match="allow_external"):
                td["group", "e"] = torch.zeros(4, dtype=torch.int64)
            del td["link"]  # deleting removes the link only
            assert "link" not in td
    assert not files["nowhere"].exists()
    assert {name: digest(files[name]) for name in ("secret", "raw")} == before


def test_allow_external_follows_them(files):
    with from_h5(files["main"], mode="r+", allow_external=True) as td:
        assert td["link"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert td["through"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert td["storage"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert td["virtual"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert td["group", "e"].tolist() == [0, 1, 2, 3]
        assert td[[2, 0]]["link"].tolist() == [2.0, 0.0]
        td.set_("storage", torch.full((4,), 5.0))
        td.clone(False).set_("link", torch.full((4,), 6.0))  # (a shallow copy keeps the opt-in)
    assert np.frombuffer(files["raw"].read_bytes(), dtype="f8").tolist() == [5.0] * 4
    with h5py.File(files["secret"], "r") as f:
        assert f["d"][()].tolist() == [6.0] * 4
    with PersistentTensorDict(filename=files["main"], mode="r", allow_external=True) as td:
        assert td["link"].tolist() == [6.0] * 4


def test_row_reads_of_a_read_only_file_read_each_file(files):
    """With the opt-in, a dataset of another file is never read at its offsets in this file."""
    with h5py.File(files["secret"], "a") as f:
        f.create_dataset("big", data=np.arange(40.0).reshape(10, 4))
    with h5py.File(files["main"], "a") as f:
        del f["a"], f["inside"], f["virtual_inside"]
        f["big"] = h5py.ExternalLink(str(files["secret"]), "/big")
        for key in OUTSIDE:
            del f[key]
    with from_h5(files["main"], allow_external=True) as td:
        assert td[[7, 1, 3]]["big"].tolist() == np.arange(40.0).reshape(10, 4)[[7, 1, 3]].tolist()


def test_mode_a_refuses_too(files):
    with (
        PersistentTensorDict(filename=files["main"], mode="a", batch_size=None) as td,
        pytest.raises(PermissionError, match="external link"),
    ):
        td["link"]
    assert os.path.getsize(files["secret"]) > 0
