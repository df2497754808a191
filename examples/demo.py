"""The 30-second tour of tensorbatch: one batch of nested tensors that behaves like a tensor."""

import torch

from tensorbatch import TensorDict


def main() -> None:
    """Build a nested batch and show slicing, stacking, arithmetic, nested keys and reshape."""
    torch.manual_seed(0)
    td = TensorDict(
        {
            "obs": torch.randn(32, 128),
            "action": torch.randint(0, 4, (32,)),
            "reward": torch.randn(32),
            "next": {"obs": torch.randn(32, 128)},
        },
        batch_size=[32],
    )
    print("batch:", td)

    mini = td[:8]  # slices every leaf
    print("td[:8]:", mini)
    print("td[:8].shape:", mini.shape)

    stacked = torch.stack([td, td], 0)
    print("torch.stack([td, td], 0).shape:", stacked.shape)

    scaled = td * 0.5  # arithmetic on the whole structure
    print('(td * 0.5)["reward"][:3]:', scaled["reward"][:3])
    print("td + td:", td + td)  # leaf-wise TensorDict arithmetic

    print('td["next", "obs"].shape:', td["next", "obs"].shape)
    print("td.reshape(4, 8).batch_size:", td.reshape(4, 8).batch_size)


if __name__ == "__main__":
    main()
