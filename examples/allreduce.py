"""Sum a vector across ranks, torch.distributed style.

    interlink run -n 4 examples/allreduce.py
"""

import numpy as np

import interlink as dist


def main(n: int = 1_000_000) -> float:
    dist.init()
    rank, world = dist.get_rank(), dist.get_world_size()
    x = np.full(n, float(rank), dtype=np.float32)
    dist.all_reduce(x)  # in place, SUM
    expected = sum(range(world))
    assert np.all(x == expected), (x[:4], expected)
    out = np.empty(world, dtype=np.int64)
    dist.all_gather_into_tensor(out, np.array([rank], dtype=np.int64))
    print(f"rank {rank}/{world}: all_reduce -> {x[0]:.0f}, all_gather -> {out.tolist()}")
    dist.destroy()
    return float(x[0])


if __name__ == "__main__":
    main()
