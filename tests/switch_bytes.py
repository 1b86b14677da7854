"""The bytes each rank sends into a reducing switch and receives from it, summed over a Traffic (the
switch endpoints are the ids >= nranks: ``Traffic.on_switches``)."""

from __future__ import annotations

import numpy as np


def switch_bytes(tr, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(up, down): elements each of the p ranks sends to a switch, and receives from one."""
    up = np.zeros(p, np.int64)
    down = np.zeros(p, np.int64)
    for ph in tr.phases:
        for s_, d_, e in zip(ph.src.tolist(), ph.dst.tolist(), ph.elems.tolist()):
            if d_ >= p:
                up[s_] += e * ph.repeat
            if s_ >= p:
                down[d_] += e * ph.repeat
    return up, down
