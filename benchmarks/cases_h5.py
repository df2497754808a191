"""Small HDF5 cases for ``instructions.py`` (an A/B of two trees by instructions per call, which load cannot move).

``run.py --suite h5`` times the large files of ``h5.py`` against tensordict and raw h5py; these read a small
file (1,000 rows, written once by h5py, so every tree reads the same bytes) where the library's own work, not
HDF5's, is most of a call. Each case is ``factory(lib) -> callable`` (``lib`` None: the raw h5py code).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

N = 1_000
_rng = np.random.default_rng(7)
ROWS = _rng.permutation(N)[:100]  # unsorted, unique
_FOLDER: list[Path] = []


def _file(name: str) -> str:
    """A file of ``obs`` [N, 16], ``reward`` [N, 1] and ``nested/action`` [N, 4] (float32), written with h5py."""
    import h5py

    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="tb-h5-instr-")))
    path = _FOLDER[0] / f"{name}-{len(list(_FOLDER[0].iterdir()))}.h5"  # (a file per call: one handle each)
    with h5py.File(path, "w") as f:
        f["obs"] = _rng.random((N, 16), dtype=np.float32)
        f["reward"] = _rng.random((N, 1), dtype=np.float32)
        f["nested/action"] = _rng.random((N, 4), dtype=np.float32)
    return str(path)


def _read(fn: Callable[[Any], Any], raw: Callable[[Any], Any] | None = None) -> Callable[[Any], Callable[[], Any]]:
    def factory(lib: Any) -> Callable[[], Any]:
        path = _file(fn.__name__)
        if lib is None:
            import h5py

            f = h5py.File(path, "r")
            assert raw is not None
            return lambda: raw(f)
        td = lib.PersistentTensorDict.from_h5(path)
        return lambda: fn(td)

    return factory


def _raw_all(f: Any, index: Any) -> dict[str, Any]:
    return {"obs": f["obs"][index], "reward": f["reward"][index], "nested": {"action": f["nested/action"][index]}}


def h5_slice(td: Any) -> Any:
    return td[400:500].to_tensordict()


def h5_int(td: Any) -> Any:
    return td[7].to_tensordict()


def h5_rows(td: Any) -> Any:
    return td[_INDEX].to_tensordict()


def h5_get(td: Any) -> Any:
    return td["nested", "action"]


def h5_totd(td: Any) -> Any:
    return td.to_tensordict()


def h5_keys(td: Any) -> Any:
    return list(td.keys(True, True))


_INDEX = torch.from_numpy(ROWS)
_SORTED = np.sort(ROWS)


def h5_write_rows(lib: Any) -> Callable[[], Any]:
    path = _file("write")
    if lib is None:
        import h5py

        f = h5py.File(path, "r+")
        value = np.ones((len(ROWS), 16), dtype=np.float32)
        return lambda: f["obs"].__setitem__(_SORTED, value)
    td = lib.PersistentTensorDict.from_h5(path, mode="r+")
    value = lib.TensorDict({"obs": torch.ones(len(ROWS), 16)}, [len(ROWS)])
    return lambda: td.__setitem__(_INDEX, value)


def h5_open(lib: Any) -> Callable[[], Any]:
    path = _file("open")
    if lib is None:
        import h5py

        return lambda: h5py.File(path, "r").close()
    return lambda: lib.PersistentTensorDict.from_h5(path).close()


def h5_to_h5(lib: Any) -> Callable[[], Any]:
    """``td.to_h5(path)`` of 100 rows (two leaves and a nested one), then close: a whole TensorDict written."""
    path = _file("to")
    leaves = {"obs": torch.ones(100, 16), "reward": torch.ones(100, 1), "action": torch.ones(100, 4)}
    if lib is None:
        import h5py

        def raw() -> None:
            with h5py.File(path, "w") as f:
                f["obs"], f["reward"] = leaves["obs"].numpy(), leaves["reward"].numpy()
                f["nested/action"] = leaves["action"].numpy()

        return raw
    td = lib.TensorDict(
        {"obs": leaves["obs"], "reward": leaves["reward"], "nested": {"action": leaves["action"]}}, [100]
    )
    return lambda: td.to_h5(path).close()


def h5_schema(lib: Any) -> Callable[[], Any]:
    """``from_schema(storage="h5")`` of the three leaves over 1,000 rows, then close: allocation without data."""
    path = _file("schema")
    schema = {"obs": ([16], torch.float32), "reward": ([1], torch.float32), ("nested", "action"): ([4], torch.float32)}
    if lib is None:
        import h5py

        def raw() -> None:
            with h5py.File(path, "w") as f:
                for name, (shape, _) in schema.items():
                    f.create_dataset("/".join(name) if isinstance(name, tuple) else name, (N, *shape), "f4")

        return raw
    return lambda: lib.TensorDict.from_schema(schema, batch_size=[N], storage="h5", filename=path).close()


CASES: dict[str, Callable[[Any], Callable[[], Any]]] = {
    "h5_slice": _read(h5_slice, lambda f: _raw_all(f, slice(400, 500))),
    "h5_int": _read(h5_int, lambda f: _raw_all(f, 7)),
    "h5_rows": _read(h5_rows, lambda f: _raw_all(f, _SORTED)),
    "h5_get": _read(h5_get, lambda f: f["nested/action"][()]),
    "h5_totd": _read(h5_totd, lambda f: _raw_all(f, ())),
    "h5_keys": _read(h5_keys, lambda f: list(f.keys())),
    "h5_write_rows": h5_write_rows,
    "h5_open": h5_open,
    "h5_to_h5": h5_to_h5,
    "h5_schema": h5_schema,
}
