"""Two processes exchange TensorDicts over torch.distributed (see docs/distributed.md).

Run ``torchrun --nproc_per_node 2 docs/distributed_example.py`` (gloo, CPU), or add ``--backend nccl``
(one GPU per process).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from tensorbatch import TensorDict


def main() -> None:
    """A cold start, a transfer refused for its structure then one accepted, and an all_reduce."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    backend = parser.parse_args().backend
    dist.init_process_group(backend)  # torchrun sets the rank, world size and address
    rank = dist.get_rank()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)

    # 1. Cold start: rank 1 knows nothing of the structure; init_remote sends it with the data.
    if rank == 0:
        batch = TensorDict({"obs": torch.zeros(4, 3), "next": {"reward": torch.ones(4, 1)}},
                           batch_size=[4], device=device).consolidate()  # one buffer, reused by every send
        batch.init_remote(dst=1, device=device)
        for step in range(3):
            batch["obs"].fill_(step)  # writes into the consolidated buffer
            batch.send(dst=1, consolidated=True)  # one message
    else:
        batch = TensorDict.from_remote_init(src=0, device=device)
        for step in range(3):
            batch.recv(src=0, consolidated=True)  # lands in batch's own buffer: no allocation
            assert bool((batch["obs"] == step).all())
        print(f"rank 1 received {list(batch.keys(include_nested=True, leaves_only=True))}")

    # 2. Leaf by leaf into a TensorDict of the same structure, checked before any data moves: a mismatch
    #    raises on both ranks (naming the key and both shapes) and writes nothing.
    if rank == 0:
        sent = TensorDict(a=torch.arange(3.0, device=device), batch_size=[3])
        try:
            sent.send(dst=1)
        except RuntimeError as err:
            print(f"rank 0: {err}")
        sent.send(dst=1)
    else:
        try:
            TensorDict(a=torch.zeros(5, device=device), batch_size=[5]).recv(src=0)
        except RuntimeError as err:
            print(f"rank 1: {err}")
        right = TensorDict(a=torch.zeros(3, device=device), batch_size=[3])
        right.recv(src=0)
        print(f"rank 1 got a = {right['a'].tolist()}")

    # 3. Collectives: every rank calls them.
    grads = TensorDict(w=torch.full((2,), rank + 1.0, device=device), batch_size=[2])
    grads.all_reduce()
    print(f"rank {rank}: all_reduce sum = {grads['w'].tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
