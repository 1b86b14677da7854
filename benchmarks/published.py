"""The model and the simulator against the published nccl-tests figures (interlink.model.published).

    python benchmarks/published.py                 # every row: published, predict, simulate, error
    python benchmarks/published.py A18-5 C22       # only these rows
    python benchmarks/published.py --small         # small messages (8 B-64 KiB): published nccl-tests times

One markdown row per published figure, as tests/test_model_published.py checks them (within 15%; rows with a
``miss`` reason are the strict xfails). A row of 1,440 ranks takes about a minute on 2 cores. ``--small``: the
rows of interlink.model.published.SMALL as tests/test_model_small_gpu.py checks them (within 25%): what nccl-tests
would print for NCCL's pick (interlink.model.nccl) as the model prices it, next to the best Schedule on paper.
"""

from __future__ import annotations

import sys
import time

from interlink.model import predict
from interlink.model.published import PUBLISHED
from interlink.sim import simulate_collective


def small(ids: list[str]) -> None:
    from interlink.model import default_params
    from interlink.model.cost import fit_ranks, resolve_topology
    from interlink.model.nccl import nccl_default, nccl_tests_us
    from interlink.model.published import SMALL

    prm = default_params()
    print("| id | system | topology | -g | size | published us | NCCL's pick | model us | error | best on paper us "
          "| error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in SMALL:
        if ids and r.id not in ids:
            continue
        topo = fit_ranks(resolve_topology(r.topology), r.nranks or resolve_topology(r.topology).nranks)
        if r.algorithm:
            c = predict(r.collective, r.nbytes, r.topology, nranks=r.nranks, algorithm=r.algorithm, params=prm,
                        profile=False).best
            what, dev = f"{c.algorithm}/{c.protocol} (forced)", c.time_us
        else:
            d = nccl_default(r.collective, r.nbytes, r.topology, nranks=r.nranks, params=prm)
            what, dev = f"{d.algorithm}/{d.protocol}", d.time_us
        m = nccl_tests_us(dev, topo, gpus_per_thread=r.gpus_per_thread, params=prm)
        b = predict(r.collective, r.nbytes, r.topology, nranks=r.nranks, params=prm, profile=False).best
        bt = nccl_tests_us(b.time_us, topo, gpus_per_thread=r.gpus_per_thread, params=prm)
        tag = " (fitted)" if r.fitted else " (not yet)" if r.miss else ""
        where = r.topology + (f", {r.nranks} ranks" if r.nranks else "")
        print(f"| {r.id} | {r.system} | {where} | {r.gpus_per_thread} | {r.nbytes} | {r.time_us:g} | {what} | "
              f"{m:.1f} | {100 * (m / r.time_us - 1):+.1f}%{tag} | {bt:.1f} ({b.algorithm}/{b.protocol}) | "
              f"{100 * (bt / r.time_us - 1):+.1f}% |", flush=True)


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
    ap.add_argument("--small", action="store_true", help="the small-message rows (interlink.model.published.SMALL)")
    a = ap.parse_args()
    small(a.ids) if a.small else main(a.ids)
