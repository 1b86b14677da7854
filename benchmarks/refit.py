"""Refit saved calibration samples with this tree's cost model and print how well it predicts them.

    python benchmarks/refit.py benchmarks/results/calibration_samples_2026-11-26.json [--cores 2] [-v]

A profile written by ``interlink bench --calibrate`` keeps its raw samples (``meta.samples``). This fits
them again with :func:`interlink.model.calibrate.fit` (no measuring, deterministic) and prints the
fitted host-page rates (``host.page.*``), the fit's error per transport, and per host-page path
(slots, slots_once, two_phase, peer_buffers) the median and worst |predicted / measured - 1|; ``-v`` prints every
point. So a change of the model can be judged on the very samples an older model was fitted to.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from interlink.algorithms import registry
from interlink.model.calibrate import Sample, fit
from interlink.model.cost import cpu_topology, predict
from interlink.model.params import default_params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", help="a profile JSON with meta.samples")
    ap.add_argument("--cores", type=int, default=None, help="the measured host's cores (default: the profile's)")
    ap.add_argument("-v", action="store_true", help="print every host-page point")
    args = ap.parse_args(argv)
    prof = json.load(open(args.profile))
    cores = args.cores or int(prof["meta"].get("cores") or 2)
    samples = [Sample(**d) for d in prof["meta"]["samples"]]
    params, quality = fit(samples, cores)
    for k in sorted(params):
        if k.startswith("host.page.") or k in ("host.oversub_byte_factor", "host.llc_bytes", "host.dram_factor"):
            print(f"{k:<32} {params[k]:12.4f}")
    for t, q in sorted(quality.items()):
        print(f"fit {t:<5}: {q['samples']:3d} samples, median |error| {100 * q['median_rel_err']:.1f}%, "
              f"worst {100 * q['max_rel_err']:.1f}%")
    table = default_params().replace(params, "refit")
    per: dict[str, list] = {}
    for s in samples:
        if registry.canonical(s.algorithm) not in ("slots", "slots_once", "two_phase", "peer_buffers"):
            continue
        t = predict(s.collective, s.nbytes, cpu_topology(s.nranks, cores=cores), algorithm=s.algorithm,
                    params=table).time_us
        per.setdefault(s.algorithm, []).append((s.nranks, s.nbytes, s.seconds * 1e6, t))
    for algo, pts in per.items():
        e = [abs(t / m - 1.0) for _, _, m, t in pts]
        print(f"{algo:<9} {len(pts):3d} samples, median |error| {100 * float(np.median(e)):.1f}%, worst {100 * max(e):.1f}%")
        if args.v:
            for p, n, m, t in pts:
                print(f"    {p} ranks {n:>10} B  measured {m:10.1f} us  predicted {t:10.1f} us  {t / m:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
