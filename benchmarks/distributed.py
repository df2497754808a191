"""send/recv of a nested TensorDict between two processes on gloo (127.0.0.1): tensorbatch vs by hand vs tensordict.

    .venv/bin/python benchmarks/distributed.py [--sizes 1,100] [--repeats 9] [--quick] [--json out.json]
    .venv/bin/python benchmarks/run.py --suite dist [--quick] [--repeats N] [--json out.json]   (1 and 100 MB)

The TensorDict has 20 float32 leaves in 4 nested nodes, 1 MB and 100 MB in all. Rank 0 sends, rank 1
receives into a preallocated TensorDict; rank 1 times batches of transfers (after a barrier), the variants
rotated each repeat (interleaved), and the table gives median ms per transfer and ratios:

- ``raw``: by hand, ``dist.send``/``dist.recv`` of each tensor of a plain dict, in sorted-key order (the
  floor for leaf-by-leaf); ``raw_async``: the same with ``isend``/``irecv``, then waiting for all.
- ``raw_flat``: by hand, one ``dist.send`` of one contiguous byte buffer (the floor for one message).
- ``tb``: ``send``/``recv`` (structure header checked first); ``tb_nocheck``: ``check_structure=False``.
- ``tb_cons``: ``send(consolidated=True)`` from a consolidated TensorDict into a consolidated one (one
  message); ``tb_cons_copy``: the sender is not consolidated, so each send consolidates (copies) first.
- ``td``/``td_cons``: tensordict 0.15.3's ``send``/``recv``, and its consolidated path (both consolidated).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("raw", "raw_async", "raw_flat", "tb", "tb_nocheck", "tb_cons", "tb_cons_copy", "td", "td_cons")


def nested(total_mb: float, fill: float) -> dict[str, Any]:
    """20 float32 leaves of varied sizes (4 nodes of 5), ``total_mb`` MB in all, as a nested dict."""
    weights = [1 + (i % 5) for i in range(20)]
    floats = total_mb * 2**20 / 4
    out: dict[str, Any] = {}
    for i, w in enumerate(weights):
        n = max(1, int(floats * w / sum(weights)) // 8)
        out.setdefault(f"node{i // 5}", {})[f"leaf{i % 5}"] = torch.full((8, n), fill)
    return out


def flat_leaves(tree: dict[str, Any]) -> list[torch.Tensor]:
    return [tree[a][b] for a in sorted(tree) for b in sorted(tree[a])]


def setup(rank: int, mb: float) -> dict[str, Any]:
    """Per variant, the function one transfer runs on this rank."""
    import tensordict

    from tensorbatch import TensorDict

    fill = 1.0 if rank == 0 else 0.0
    tree = nested(mb, fill)
    leaves = flat_leaves(tree)
    tb = TensorDict(tree, batch_size=[8])
    tb_cons = tb.consolidate()
    ref = tensordict.TensorDict(tree, batch_size=[8])
    ref_cons = ref.consolidate(metadata=True)
    flat = torch.full((sum(t.numel() * 4 for t in leaves),), int(fill), dtype=torch.uint8)
    peer = 1 - rank

    def raw() -> None:
        for i, t in enumerate(leaves):
            dist.send(t, peer, tag=i) if rank == 0 else dist.recv(t, peer, tag=i)

    def raw_async() -> None:
        op = dist.isend if rank == 0 else dist.irecv
        for work in [op(t, peer, tag=i) for i, t in enumerate(leaves)]:
            work.wait()

    def raw_flat() -> None:
        dist.send(flat, peer) if rank == 0 else dist.recv(flat, peer)

    if rank == 0:
        return {
            "raw": raw,
            "raw_async": raw_async,
            "raw_flat": raw_flat,
            "tb": lambda: tb.send(dst=peer),
            "tb_nocheck": lambda: tb.send(dst=peer, check_structure=False),
            "tb_cons": lambda: tb_cons.send(dst=peer, consolidated=True),
            "tb_cons_copy": lambda: tb.send(dst=peer, consolidated=True),
            "td": lambda: ref.send(dst=peer),
            "td_cons": lambda: ref_cons.send(dst=peer, consolidated=True),
        }
    return {
        "raw": raw,
        "raw_async": raw_async,
        "raw_flat": raw_flat,
        "tb": lambda: tb.recv(src=peer),
        "tb_nocheck": lambda: tb.recv(src=peer, check_structure=False),
        "tb_cons": lambda: tb_cons.recv(src=peer, consolidated=True),
        "tb_cons_copy": lambda: tb_cons.recv(src=peer, consolidated=True),
        "td": lambda: ref.recv(src=peer),
        "td_cons": lambda: ref_cons.recv(src=peer, consolidated=True),
    }


def worker(rank: int, port: int, sizes: list[float], repeats: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=300)
    )
    results: dict[str, dict[str, list[float]]] = {}
    for mb in sizes:
        fns = setup(rank, mb)
        calls = max(1, int(40 / mb))  # ~40 MB a batch
        for fn in fns.values():  # warm up (and check the variants agree on the wire)
            fn()
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(repeats):
            for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fns[v]()
                samples[v].append((time.perf_counter() - t0) / calls)
        if rank == 1:
            results[f"{mb:g}"] = samples
        del fns
    if rank == 1:
        out.put(results)
    dist.destroy_process_group()


def run(sizes: list[float], repeats: int, json_path: str | None = None) -> dict[str, dict[str, float]]:
    """Time every variant for each size (MB) in two spawned processes; print the table; the medians (ms)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, port, sizes, repeats, queue)) for rank in range(2)]
    for proc in procs:
        proc.start()
    results = queue.get()
    for proc in procs:
        proc.join()
    medians = {size: {v: statistics.median(s) * 1e3 for v, s in samples.items()} for size, samples in results.items()}
    print(f"gloo, 2 processes on 127.0.0.1, 20 float32 leaves; median ms per transfer ({repeats} interleaved repeats)")
    print(f"{'variant':<14}" + "".join(f"{size + ' MB':>12}{'/raw':>7}{'/td':>7}" for size in medians))
    for v in VARIANTS:
        row = f"{v:<14}"
        for m in medians.values():
            floor = m["raw_flat"] if v in ("tb_cons", "tb_cons_copy", "td_cons") else m["raw"]
            ref = m["td_cons"] if v.startswith("tb_cons") else m["td"]
            row += f"{m[v]:>12.3f}{m[v] / floor:>7.2f}{m[v] / ref:>7.2f}"
        print(row)
    print("(/raw: against raw, or raw_flat for the consolidated variants; /td: against td, or td_cons)")
    for size, m in medians.items():
        print(
            f"{size} MB: one consolidated message (tb_cons) is {m['tb'] / m['tb_cons']:.2f}x as fast as leaf by "
            f"leaf (tb); consolidating on each send (tb_cons_copy) {m['tb'] / m['tb_cons_copy']:.2f}x"
        )
    if json_path:
        Path(json_path).write_text(json.dumps({"medians_ms": medians, "repeats": repeats}, indent=1))
    return medians


def main() -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,100", help="total MB of the TensorDict, comma-separated (default 1,100)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--quick", action="store_true", help="5 repeats")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    run([float(s) for s in args.sizes.split(",")], 5 if args.quick else args.repeats, args.json)


if __name__ == "__main__":
    main()
