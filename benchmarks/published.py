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
    rows = [r for r in PUBLISHED if not ids or r.id in ids]
    print("| id | topology | size | published | predict | simulate | seconds |")
    print("|---|---|---|---|---|---|---|")
    start = time.time()
    for k, r in enumerate(rows):
        # progress on stderr (stdout is the table): which row, and the time so far
        print(f"published.py: [{k + 1}/{len(rows)}] {r.id} on {r.topology} ({time.time() - start:.0f} s so far; the "
              f"1,440-GPU row takes 1-3 minutes)", file=sys.stderr, flush=True)
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
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ids", nargs="*", help="only these rows (ids of interlink.model.published, e.g. A5 C22)")
    main(ap.parse_args().ids)
