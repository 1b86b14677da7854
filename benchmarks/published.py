"""The model and the simulator against the published nccl-tests figures (interlink.model.published).

    python benchmarks/published.py                 # every row: published, predict, simulate, error
    python benchmarks/published.py A18-5 C22       # only these rows

One markdown row per published figure, as tests/test_model_published.py checks them (within 15%; rows with a
``miss`` reason are the strict xfails). A row of 1,440 ranks takes about a minute on 2 cores.
"""

from __future__ import annotations

import sys
import time

from interlink.model import predict
from interlink.model.published import PUBLISHED
from interlink.sim import simulate_collective


def main(ids: list[str]) -> None:
    print("| id | topology | size | published | predict | simulate | seconds |")
    print("|---|---|---|---|---|---|---|")
    for r in PUBLISHED:
        if ids and r.id not in ids:
            continue
        t = time.time()
        pr = predict(r.collective, r.nbytes, r.topology, algorithm=r.algorithm, nranks=r.nranks)
        sm = simulate_collective(r.collective, r.nbytes, r.topology, algorithm=r.algorithm or pr.best.algorithm,
                                 nranks=r.nranks)
        where = r.topology + ("" if r.nranks is None else f", {r.nranks} ranks")
        size = f"{r.nbytes / (1 << 30):g}G"
        p, s = pr.best.busbw_gbps, sm.busbw_gbps
        print(f"| {r.id} | {where} | {size} | {r.busbw_gbps:g} | {p:.1f} ({pr.best.algorithm}) "
              f"{100 * (p / r.busbw_gbps - 1):+.1f}% | {s:.1f} {100 * (s / r.busbw_gbps - 1):+.1f}%"
              f"{' (not yet)' if r.miss else ''} | {time.time() - t:.0f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
