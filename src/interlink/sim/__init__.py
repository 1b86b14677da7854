"""The simulator: a Schedule's messages as flows over a Topology's links, shared max-min fairly.

    from interlink.sim import simulate, simulate_collective
    r = simulate_collective("all_reduce", 1 << 30, "128xdgx-h100", algorithm="ring")
    r.time_us, r.busbw_gbps, r.top_links(5)

Layering: imports interlink.errors, algorithms, topology and (for the reduction rate) model.
"""

from .engine import (PER_RANK_SPLIT, PhaseResult, SimError, SimResult, max_min_rates, simulate,
                     simulate_collective)
from .trace import chrome_trace, write_trace

__all__ = ["simulate", "simulate_collective", "SimResult", "PhaseResult", "SimError", "max_min_rates",
           "PER_RANK_SPLIT", "chrome_trace", "write_trace"]
