"""Memmap archives (``.tdz``), ``pack`` and safetensors files: tensorbatch vs tensordict, side by side.

    .venv/bin/python benchmarks/archive.py [--mb 64] [--leaves 16] [--repeats 5]

Cases (medians of interleaved repeats, time in ms and the tensorbatch/tensordict ratio; < 1 is faster):
- save_tdz:    ``td.memmap("x.tdz")`` of ``--mb`` MB of float32 leaves (written once, into the archive)
- load_tdz:    ``TensorDict.load_memmap("x.tdz")`` plus a sum over every leaf (maps, then reads every page)
- pack_memmap: a saved folder packed into an archive; unpack_memmap: the archive extracted to a folder
- to_st / from_st: ``to_safetensors`` / ``from_safetensors`` plus a sum over every leaf
- pack:        ``td.pack()`` (one ``torch.cat``) and ``layout.unpack(flat)`` (views)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensorbatch

try:
    import tensordict
except ImportError:  # the comparison column is skipped
    tensordict = None


def _build(lib: Any, mb: int, leaves: int) -> Any:
    rows = mb * 2**20 // 4 // leaves // 64
    g = torch.Generator().manual_seed(0)
    return lib.TensorDict(
        {f"group{i % 4}": {f"leaf{i}": torch.randn(rows, 64, generator=g)} for i in range(leaves)}, batch_size=[rows]
    )


def _touch(td: Any) -> float:
    return float(sum(v.sum() for v in td.values(True, True)))


def _cases(lib: Any, td: Any, tmp: Path) -> dict[str, Callable[[], Any]]:
    folder = tmp / "folder"
    td.memmap(folder)
    td.memmap(tmp / "x.tdz")
    lib.to_safetensors(td, tmp / "x.safetensors")
    flat, layout = td.pack()

    def unpack_memmap() -> None:
        shutil.rmtree(tmp / "out", ignore_errors=True)
        lib.unpack_memmap(tmp / "x.tdz", tmp / "out")

    return {
        "save_tdz": lambda: td.memmap(tmp / "y.tdz"),
        "load_tdz": lambda: _touch(lib.TensorDict.load_memmap(tmp / "x.tdz")),
        "pack_memmap": lambda: lib.pack_memmap(folder, tmp / "z.tdz"),
        "unpack_memmap": unpack_memmap,
        "to_st": lambda: lib.to_safetensors(td, tmp / "y.safetensors"),
        "from_st": lambda: _touch(lib.from_safetensors(tmp / "x.safetensors")),
        "pack": lambda: td.pack(),
        "unpack": lambda: layout.unpack(flat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--leaves", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    libs = {"tensorbatch": tensorbatch, **({"tensordict": tensordict} if tensordict is not None else {})}
    with tempfile.TemporaryDirectory() as root:
        cases = {}
        for name, lib in libs.items():
            (Path(root) / name).mkdir()
            cases[name] = _cases(lib, _build(lib, args.mb, args.leaves), Path(root) / name)
        print(f"{args.mb} MB in {args.leaves} float32 leaves, median of {args.repeats} interleaved repeats")
        print(f"{'case':<14}" + "".join(f"{name + ' ms':>16}" for name in libs) + f"{'ratio':>8}")
        for case in cases["tensorbatch"]:
            times: dict[str, list[float]] = {name: [] for name in libs}
            for _ in range(args.repeats):
                for name in libs:
                    start = time.perf_counter()
                    cases[name][case]()
                    times[name].append(time.perf_counter() - start)
            ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            ratio = f"{ms['tensorbatch'] / ms['tensordict']:>8.2f}" if "tensordict" in ms else ""
            print(f"{case:<14}" + "".join(f"{ms[name]:>16.2f}" for name in libs) + ratio)


if __name__ == "__main__":
    main()
