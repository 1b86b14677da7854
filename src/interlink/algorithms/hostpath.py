"""Which host-page path a call of an all-local group takes: the limits, named once, and one pure function.

The host page's paths are the Schedules of :mod:`interlink.algorithms.hostpage`. Which of them a call
runs (or whether it goes over the channels instead) depends on the collective, the bytes of a rank's
input, the ranks on the host, a handful of sizes (:class:`HostLimits`) and a few facts of the call and
the host (:func:`host_path`'s keywords). The runtime (runtime/fastpath.py: ``FastPath.takes``,
``FastPath.small``), the cost model (``model.cost._host_page``), calibration (bench/calibrate.py records the
limits with the profile) and the bench all read this module, so the choice is written once.

Every limit has a field here, its environment variable (read by ``runtime.policy.host_limits``), its
default and the cost model's parameter that records it (``Profile`` key): :data:`LIMITS`. The
measurements behind each default are in runtime/policy.py's functions of the same limits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Optional

from .hostpage import measured_band, pipe_max, pipe_scratch

KiB, MiB = 1 << 10, 1 << 20

#: the paths, by what they do (algorithms/hostpage.py registers each as a Schedule)
SLOTS = "slots"  # every writer copies its payload once into its slot; every reader reads every slot
SLOTS_ONCE = "slots_once"  # the one-shot all_reduce reduced once (by the last rank to publish) for all
TWO_PHASE = "two_phase"  # all_reduce in the slots: reduce-scatter, then all-gather, in place
PEER_BUFFERS = "peer_buffers"  # one copy from and into the ranks' own buffers (mapped, or cross-memory attach)
SLOTS_PIPELINED = "slots_pipelined"  # a broadcast too large for a slot, through it in chunks, double-buffered
PATHS = (SLOTS, SLOTS_ONCE, TWO_PHASE, PEER_BUFFERS, SLOTS_PIPELINED)

#: the names the paths had before; accepted wherever an algorithm is named (INTERLINK_ALGO, algorithm=)
ALIASES = {"fast": SLOTS, "fast_once": SLOTS_ONCE, "fast2": TWO_PHASE, "fastd": PEER_BUFFERS,
           "fastp": SLOTS_PIPELINED}

#: the collectives a slot path moves without reducing them all (their slots limit: HostLimits.slots_limit)
MOVES = ("broadcast", "all_gather", "reduce_scatter", "all_to_all")


def canonical(algorithm: str) -> str:
    """A path's name from its name or its former name (``fastd`` -> ``peer_buffers``); other names as given."""
    return ALIASES.get(algorithm, algorithm)


@dataclass(frozen=True)
class Limit:
    """One named limit: its environment variable (None: not settable), default and the model parameter that
    records it in a profile (None: not recorded)."""

    env: Optional[str]
    default: int
    param: Optional[str]
    what: str


#: field of HostLimits -> its environment variable, default and profile parameter
LIMITS: dict[str, Limit] = {
    "oneshot_max": Limit("INTERLINK_FAST_MAX_BYTES", 256 * KiB, "host.fast.max_bytes",
                         "largest input of the one-shot path (slots, slots_once); 0 disables the host page"),
    "all_reduce_oneshot_max": Limit("INTERLINK_SHM_AR_ONESHOT_MAX_BYTES", 32 * KiB, "host.fast.all_reduce_max_bytes",
                                    "largest all_reduce of the one-shot slots path where every rank has a core (at "
                                    "most oneshot_max); above it two_phase"),
    "all_reduce_oneshot_max_2": Limit(
        "INTERLINK_SHM_AR_ONESHOT_MAX_BYTES_2", 8 * KiB, "host.fast.all_reduce_max_bytes_2",
        "on 2 ranks the one-shot all_reduce's largest input (at most all_reduce_oneshot_max); above it two_phase"),
    "inline_max": Limit("INTERLINK_FAST_INLINE_MAX_BYTES", 2 * MiB, None,
                        "largest broadcast, all_gather, reduce_scatter or all_to_all the inlined executor runs "
                        "through the slots (never below oneshot_max); above it the same Schedule runs step by step"),
    "slot_bytes": Limit("INTERLINK_SHM_DIRECT_MAX_BYTES", 4 * MiB, "host.fast2.max_bytes",
                        "the size of a slot on the host page: the largest payload the slots carry"),
    "peer_buffers_all_reduce_min": Limit(
        "INTERLINK_SHM_AR_DIRECT_MIN_BYTES", 2 * MiB, "host.fastd.min_bytes",
        "all_reduce reads the ranks' own buffers (peer_buffers) above this; on 2 ranks two_phase stops here"),
    "slots_max_2": Limit("INTERLINK_SHM_SLOTS_MAX_BYTES_2", 2 * MiB, "host.slots.max_bytes_2",
                         "on 2 ranks broadcast, all_gather, reduce_scatter and all_to_all leave the slots above this"),
    "slots_max_2_all_gather": Limit("INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG", 256 * KiB,
                                    "host.slots.max_bytes_2_all_gather",
                                    "on 2 ranks all_gather leaves the slots above this input (at most slots_max_2)"),
    "slots_max_all_gather": Limit("INTERLINK_SHM_SLOTS_MAX_BYTES_AG", 4 * MiB, "host.slots.max_bytes_all_gather",
                                  "on 3+ ranks all_gather leaves the slots above this input where the host's "
                                  "outputs stream (default: the slot size); else all_gather_max_cached"),
    "all_gather_max_cached": Limit(None, 1 * MiB, None,
                                   "on 3+ ranks all_gather's slots limit where the host's outputs do not stream "
                                   "(INTERLINK_SHM_SLOTS_MAX_BYTES_AG sets it too)"),
    "slots_max_all_to_all": Limit("INTERLINK_SHM_SLOTS_MAX_BYTES_A2A", 1 * MiB, "host.slots.max_bytes_all_to_all",
                                  "on 3+ ranks all_to_all leaves the slots above this input"),
    "stream_min": Limit("INTERLINK_STREAM_MIN_BYTES", 16 * MiB, "host.stream.min_bytes",
                        "copies into the outputs stream where the host's outputs in a call reach this "
                        "(0: never; default half the last-level cache)"),
    "two_phase_min_ranks": Limit(None, 2, "host.fast2.min_ranks", "two_phase runs from this many local ranks"),
}


@dataclass(frozen=True)
class HostLimits:
    """The sizes (bytes of a rank's input unless said otherwise) at which a host-page call changes path.
    Defaults: :data:`LIMITS`; the runtime's from the environment (``runtime.policy.host_limits``), the
    model's from a profile (:meth:`from_params`)."""

    oneshot_max: int = LIMITS["oneshot_max"].default
    all_reduce_oneshot_max: int = LIMITS["all_reduce_oneshot_max"].default
    all_reduce_oneshot_max_2: int = LIMITS["all_reduce_oneshot_max_2"].default
    inline_max: int = LIMITS["inline_max"].default
    slot_bytes: int = LIMITS["slot_bytes"].default
    peer_buffers_all_reduce_min: int = LIMITS["peer_buffers_all_reduce_min"].default
    slots_max_2: int = LIMITS["slots_max_2"].default
    slots_max_2_all_gather: int = LIMITS["slots_max_2_all_gather"].default
    slots_max_all_gather: int = LIMITS["slots_max_all_gather"].default
    all_gather_max_cached: int = LIMITS["all_gather_max_cached"].default
    slots_max_all_to_all: int = LIMITS["slots_max_all_to_all"].default
    stream_min: int = LIMITS["stream_min"].default  # 0: copies never stream
    two_phase_min_ranks: int = LIMITS["two_phase_min_ranks"].default

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, stream_min: int = 0, streams: bool = True) -> "HostLimits":
        """The limits an environment sets (unset or empty variables: the defaults); ``stream_min``: the
        streaming threshold where INTERLINK_STREAM_MIN_BYTES is unset (the host's, from its cache), 0 or
        ``streams`` False: never. The derived defaults and clamps are the runtime's policy: inline_max at
        least oneshot_max, the slot at least oneshot_max (0 when oneshot_max is 0), slots_max_2_all_gather
        at most slots_max_2, slots_max_all_gather and slots_max_all_to_all at most the slot."""
        def get(name: str, default: int) -> int:
            v = environ.get(LIMITS[name].env or "")
            return int(v) if v else default

        oneshot = get("oneshot_max", LIMITS["oneshot_max"].default)
        slot = 0 if oneshot <= 0 else max(oneshot, get("slot_bytes", LIMITS["slot_bytes"].default))
        smin = get("stream_min", -1)
        smin = stream_min if smin < 0 else smin
        smin = smin if streams and smin > 0 else 0
        two = get("slots_max_2", LIMITS["slots_max_2"].default)
        ag_env = environ.get(LIMITS["slots_max_all_gather"].env or "")
        return cls(
            oneshot_max=oneshot,
            all_reduce_oneshot_max=get("all_reduce_oneshot_max", LIMITS["all_reduce_oneshot_max"].default),
            all_reduce_oneshot_max_2=get("all_reduce_oneshot_max_2", LIMITS["all_reduce_oneshot_max_2"].default),
            inline_max=max(oneshot, get("inline_max", LIMITS["inline_max"].default)),
            slot_bytes=slot,
            peer_buffers_all_reduce_min=get("peer_buffers_all_reduce_min",
                                            LIMITS["peer_buffers_all_reduce_min"].default),
            slots_max_2=two,
            slots_max_2_all_gather=min(get("slots_max_2_all_gather", LIMITS["slots_max_2_all_gather"].default), two),
            slots_max_all_gather=min(int(ag_env), slot) if ag_env else slot,
            all_gather_max_cached=min(int(ag_env), slot) if ag_env else LIMITS["all_gather_max_cached"].default,
            slots_max_all_to_all=min(get("slots_max_all_to_all", LIMITS["slots_max_all_to_all"].default), slot),
            stream_min=smin)

    @classmethod
    def from_params(cls, params: Any) -> "HostLimits":
        """The limits a cost-model profile records (``params.value(key)``; its defaults: :data:`LIMITS`)."""
        kw = {name: int(params.value(lim.param)) for name, lim in LIMITS.items() if lim.param is not None}
        return cls(**kw)

    def to_params(self) -> dict[str, float]:
        """The profile's parameters of these limits (what calibration records with the fit)."""
        return {lim.param: float(getattr(self, name)) for name, lim in LIMITS.items() if lim.param is not None}

    def with_slot(self, slot_bytes: int) -> "HostLimits":
        """These limits on a host page whose slots hold ``slot_bytes`` (the page's own size)."""
        return replace(self, slot_bytes=slot_bytes)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    # ---- the sizes derived for p local ranks ----------------------------------------------------------
    def oneshot(self) -> int:
        """The one-shot path's largest input (at most the slot)."""
        return min(self.slot_bytes, self.oneshot_max)

    def all_reduce_oneshot(self, p: int, reduce_once: bool = False) -> int:
        """The one-shot all_reduce's largest input on p local ranks: on a host with more than two ranks a core
        (reduced once, slots_once) the one-shot limit; else at most all_reduce_oneshot_max, on 2 ranks at most
        all_reduce_oneshot_max_2 (above it two_phase, whose ranks each reduce 1/p of the payload and read half
        as much of it across cores at a time: 2 ranks, 16-32 KiB, 0.62-0.99 of the one-shot path's time,
        benchmarks/RESULTS.md, "The one-shot all_reduce on 2 ranks")."""
        if reduce_once:
            return self.oneshot()
        top = min(self.oneshot(), self.all_reduce_oneshot_max)
        return min(top, self.all_reduce_oneshot_max_2) if p == 2 else top

    def inline(self) -> int:
        """The inlined executor's largest broadcast, all_gather, reduce_scatter or all_to_all input."""
        return min(self.slot_bytes, max(self.oneshot(), self.inline_max))

    def two_phase_max(self, p: int) -> int:
        """two_phase all_reduce's largest input: the slot; on 2 ranks where peer_buffers takes over."""
        if p >= 3:
            return self.slot_bytes
        return max(self.oneshot(), min(self.slot_bytes, self.peer_buffers_all_reduce_min))

    def slots_max(self, p: int) -> int:
        """broadcast, all_gather, reduce_scatter and all_to_all through the slots up to this input (without
        cross-memory attach; with it all_gather and all_to_all leave earlier: :meth:`slots_limit`)."""
        return min(self.slot_bytes, self.slots_max_2) if p == 2 else self.slot_bytes

    def slots_limit(self, collective: str, p: int, cma: bool = True) -> int:
        """The input above which a broadcast, all_gather, reduce_scatter or all_to_all of p local ranks leaves
        the slots for peer_buffers (all_gather and all_to_all leave early only where cross-memory attach works)."""
        top = self.slots_max(p)
        if not cma or collective not in ("all_gather", "all_to_all"):
            return top
        if collective == "all_gather":
            if p == 2:
                return min(top, self.slots_max_2_all_gather)
            streams = 0 < self.stream_min <= p * p * MiB  # every all_gather above 1 MiB of input streams
            return min(top, self.slots_max_all_gather if streams else self.all_gather_max_cached)
        return top if p == 2 else min(top, self.slots_max_all_to_all)

    def measured_band(self, collective: str, p: int, cma: bool = True) -> tuple[int, int]:
        """The inputs (lo, hi] of an all_gather, all_to_all or broadcast for which the runtime measures the
        slots (a broadcast larger than a slot: slots_pipelined) against peer_buffers on its first calls
        (``runtime.fastpath``'s autotuning); (0, 0) for other collectives. Where autotuning is on."""
        if collective not in ("all_gather", "all_to_all", "broadcast") or p < 2:
            return 0, 0
        top = pipe_max(self.slot_bytes) if collective == "broadcast" else self.slots_max(p)
        lo, hi = measured_band(self.slots_limit(collective, p, cma), top)
        return max(lo, self.oneshot()), hi


def takes(collective: str, nbytes: int, p: int, limits: HostLimits, *, cma: bool = True) -> bool:
    """Whether a call with nbytes of a rank's input goes through the host page (the slots, or the ranks'
    own buffers), not the channels. The same on every rank (sizes and agreed facts only)."""
    if collective == "barrier":
        return True
    if collective == "all_reduce":  # one-shot or two-phase in the slots, else from the ranks' own buffers
        top = limits.two_phase_max(p)
        return nbytes <= top or (cma and nbytes > max(top, limits.peer_buffers_all_reduce_min))
    if nbytes <= 0:
        return False
    return nbytes <= limits.slots_max(p) or cma


def host_path(collective: str, nbytes: int, p: int, limits: HostLimits, *, cma: bool = True,
              reduce_once: bool = False, itemsize: int = 1, direct: Optional[bool] = None) -> Optional[str]:
    """The host-page path (one of :data:`PATHS`) a call takes, or None where it goes over the channels.

    collective, nbytes (a rank's input), p (the host's ranks, all in the group), limits; the call's facts:
    ``cma`` (cross-memory attach works between every pair of local ranks), ``reduce_once`` (more than two
    local ranks a core: the one-shot all_reduce is reduced once), ``itemsize`` (a broadcast through the slot
    in chunks needs two chunks of whole elements), ``direct`` (a measured shape's forced side: True the
    ranks' own buffers, False the slots; None: the limits decide)."""
    if direct is None and not takes(collective, nbytes, p, limits, cma=cma):
        return None
    return page_path(collective, nbytes, p, limits, cma=cma, reduce_once=reduce_once, itemsize=itemsize,
                     direct=direct)


def page_path(collective: str, nbytes: int, p: int, limits: HostLimits, *, cma: bool = True,
              reduce_once: bool = False, itemsize: int = 1, direct: Optional[bool] = None) -> str:
    """:func:`host_path` for a call known to go through the host page (:func:`takes`): its path."""
    if collective == "barrier":
        return SLOTS
    big = nbytes > limits.oneshot()
    if collective == "all_reduce":
        big = nbytes > limits.all_reduce_oneshot(p, reduce_once and p > 1)
    two_phase = big and collective == "all_reduce" and nbytes <= limits.two_phase_max(p)
    if direct is None:
        direct = big and not two_phase and (collective == "all_reduce" or nbytes > limits.slots_limit(collective, p, cma))
    if direct:
        return PEER_BUFFERS
    if collective == "broadcast" and nbytes > limits.slot_bytes:
        count = -(-nbytes // max(1, itemsize))
        return SLOTS_PIPELINED if pipe_scratch(count) * itemsize <= limits.slot_bytes else PEER_BUFFERS
    if two_phase:
        return TWO_PHASE
    if collective == "all_reduce" and not big and reduce_once and p > 1:
        return SLOTS_ONCE
    return SLOTS


def inlined(collective: str, nbytes: int, path: str, limits: HostLimits) -> bool:
    """Whether a call on ``path`` runs in the inlined one-shot executor (else step by step from its
    Schedule, runtime/pageplan.py): the one-shot sizes, and a broadcast, all_gather, reduce_scatter or
    all_to_all through the slots up to :meth:`HostLimits.inline`."""
    if collective == "all_reduce":
        return path in (SLOTS, SLOTS_ONCE)
    if nbytes <= limits.oneshot():
        return True
    return collective in MOVES and path == SLOTS and nbytes <= limits.inline()


def path_range(accepts: Any, limits: HostLimits) -> tuple[float, float]:
    """The inputs (lo, hi] for which ``accepts(nbytes)`` holds, for a predicate built on :func:`host_path`
    (an interval: every path runs from one limit to the next). Its ends are limits, so it is read off
    the limits and the sizes just past them; (0, 0) where it never holds, hi infinite where it holds
    beyond every limit."""
    edges = {0}
    for v in asdict(limits).values():
        edges.update((v, 2 * v, 4 * v, v // 2))
    edges.add(pipe_max(limits.slot_bytes))
    pts = sorted({e + d for e in edges for d in (0, 1) if e + d >= 0} | {1 << 62})
    hit = [x for x in pts if accepts(x)]
    if not hit:
        return 0.0, 0.0
    return float(hit[0] - 1), (float("inf") if hit[-1] == 1 << 62 else float(hit[-1]))
