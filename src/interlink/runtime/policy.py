"""The runtime's policy: the sizes at which a call changes how it moves its bytes, and the settings it
hands the transports. Transports move bytes and know no thresholds; what is worth doing at which size
is decided here (each figure with the measurement behind it, benchmarks/RESULTS.md), read by the
executor (one-copy transfers), the shared-page fast paths, the mesh (ring geometry, page slot size) and
``Group.path_thresholds``. Every value can be overridden by its environment variable.
"""

from __future__ import annotations

import os

from ..algorithms.hostpage import measured_band
from ..algorithms.hostpath import HostLimits
from ..transport import cuda_ipc, stream


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v else default


def auth_timeout_s() -> float:
    """How long rank 0's listener gives an incoming connection to complete the authentication handshake
    before closing it (INTERLINK_AUTH_TIMEOUT_S, 10 s): a stranger that connects and stays silent costs
    its own accept thread this long, never the real ranks' joins."""
    v = os.environ.get("INTERLINK_AUTH_TIMEOUT_S")
    return max(0.1, float(v)) if v else 10.0


# ---- the channels' transfers ----------------------------------------------------------------------

def cma_threshold(collective: str = "") -> int:
    """Messages a receiver stores go by cross-memory attach (one copy) from this many bytes, where the
    channel can (shm with CMA allowed: ``Op.bulk``). all_gather from 256 KiB
    (INTERLINK_CMA_ALLGATHER_MIN_BYTES): there the one copy wins from 256 KiB on two cores (1 MiB on 2
    ranks: 121 -> 100 us out of place, 91 -> 49 us in place); everything else from 2 MiB
    (INTERLINK_CMA_MIN_BYTES): below it, the pipelined two-copy ring uses both cores and wins
    (all_reduce 1 MiB: 152 us with it, 229 us with CMA from 256 KiB; benchmarks/RESULTS.md)."""
    if collective == "all_gather":
        return env_int("INTERLINK_CMA_ALLGATHER_MIN_BYTES", 256 * 1024)
    return env_int("INTERLINK_CMA_MIN_BYTES", 2 * 1024 * 1024)


def ring_params() -> tuple[int, int]:
    """(slot bytes, slots) of each shared-memory ring direction (INTERLINK_SHM_SLOT_BYTES, whole pages,
    at least one; INTERLINK_SHM_SLOTS, at least 2): 16 x 256 KiB."""
    slot = env_int("INTERLINK_SHM_SLOT_BYTES", 256 * 1024)
    nslots = env_int("INTERLINK_SHM_SLOTS", 16)
    slot = max(4096, (slot // 4096) * 4096)
    return slot, max(2, nslots)


MAX_LANES = 16


def tcp_lanes(nics: int) -> int:
    """How many data connections (lanes) this rank asks for toward each TCP peer, published at init:
    INTERLINK_TCP_LANES (1..MAX_LANES), else one per NIC it listens on (INTERLINK_IFNAME's list) or
    INTERLINK_CHANNELS, whichever is more, so that every ring channel has a connection of its own (one
    per NIC, rail-aligned, where a host has several; several streams on one NIC otherwise). A bad value
    is an error at init, before any byte moves."""
    v = os.environ.get("INTERLINK_TCP_LANES", "").strip()
    if v:
        try:
            n = int(v)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_LANES:
            raise ValueError(f"INTERLINK_TCP_LANES={v!r}: expected a whole number from 1 to {MAX_LANES}")
        return n
    from ..model.tuner import env_channels

    return max(1, min(MAX_LANES, max(int(nics), env_channels())))


def pair_lanes(a: dict, b: dict) -> int:
    """The lanes a pair of ranks opens, from what both published at init (``lanes``; both compute the
    same): the fewer of the two asks, so a host with one NIC is not dialled on rails it lacks."""
    return max(1, min(int(a.get("lanes", 1) or 1), int(b.get("lanes", 1) or 1), MAX_LANES))


def transport_params() -> dict[str, int]:
    """What the mesh hands every transport's connect (PairSetup.params)."""
    slot, nslots = ring_params()
    return {"shm.slot_bytes": slot, "shm.slots": nslots}


# ---- the shared-page paths of an all-local group (runtime/fastpath.py) ----------------------------

def host_limits() -> HostLimits:
    """The host page's limits here: algorithms.hostpath.HostLimits from the environment (each limit's
    variable and default: hostpath.LIMITS), the streaming threshold from this host's cache where
    INTERLINK_STREAM_MIN_BYTES is unset. The functions below read their limit from it; the measurements
    behind each default are in their docstrings."""
    return HostLimits.from_env(os.environ, stream_min=last_level_cache_bytes() // 2, streams=stream.available)


def fast_small_bytes() -> int:
    """Largest payload of the one-shot shared-page path (INTERLINK_FAST_MAX_BYTES): 256 KiB. all_reduce takes it
    only up to hostpath's all_reduce_oneshot_max (32 KiB, INTERLINK_SHM_AR_ONESHOT_MAX_BYTES) where every rank has
    a core: with the page programs in the compiled core, two_phase wins from 64 KiB (2 ranks 7.8 against
    9.2-12.0 us, 4 ranks 32-34 against 40-41 us; 8-32 KiB the one-shot path wins, 2 ranks 3.5-6.1 against
    6.0-9.2 us). Measured before that, with two_phase in Python: the
    one-shot all_reduce (every rank writes its slot, every rank reduces every slot) beat the next path:
    in-process A/B, inputs rewritten before each call, default path / one-shot at 128 and 256 KiB:
    2 ranks (the ring) 1.82 and 1.38, 3 ranks (two_phase) 1.79 and 1.37, 4 ranks 1.47 and 1.14, 8 ranks on
    2 cores (slots_once against two_phase) 2.12 and 1.33; at 512 KiB 2 and 3 ranks still gain (1.16, 1.18) but
    4 ranks lose (0.95), at 1 MiB 2 ranks are even (0.98) (benchmarks/RESULTS.md). Broadcast,
    all_gather and reduce_scatter go further inline (:func:`fast_inline_max_bytes`)."""
    return host_limits().oneshot_max


def fast_inline_max_bytes() -> int:
    """Largest payload of a broadcast, all_gather, reduce_scatter or all_to_all that the inlined executor runs
    through the slots (INTERLINK_FAST_INLINE_MAX_BYTES, 2 MiB; never below :func:`fast_small_bytes`); above
    it, up to the slots' limit, the runtime runs the same ``slots`` Schedule step by step
    (runtime/pageplan.py), which walks a reduction a cache-sized piece at a time and reads a peer's
    ``interlink.empty`` input in place. The inlined executor is the faster up to 2 MiB on a 2-core x86 VM:
    ``python3 benchmarks/env_ab.py --env INTERLINK_FAST_INLINE_MAX_BYTES=524288 --collectives
    broadcast,all_gather,reduce_scatter,all_to_all --sizes 1M,2M,4M --ranks 2,4 --turns 3`` (step by step
    from 512 KiB against inlined, time ratio): 1 MiB 1.08-1.61 (2 ranks broadcast 86 against 138 us, 4 ranks
    all_to_all 480 against 626 us), 2 MiB 0.92-1.30, 4 MiB 0.94-1.11 (even: the limit stays at 2 MiB).
    benchmarks/RESULTS.md has the figures against the MPIs."""
    return host_limits().inline_max


def fast_max_bytes() -> int:
    """Slot size on the host page: the largest all_reduce done in place in shared memory
    (INTERLINK_SHM_DIRECT_MAX_BYTES; 0 disables the shared-page paths)."""
    return host_limits().slot_bytes


def slots_max_bytes_two_ranks() -> int:
    """On 2 ranks, broadcast, all_gather and reduce_scatter larger than this read the peer's own buffer by
    cross-memory attach instead of going through the slots (INTERLINK_SHM_SLOTS_MAX_BYTES_2, 2 MiB).
    Since the slots' rotation, two user-space copies through them beat one kernel copy from 512 KiB to
    2 MiB (a cross-memory copy of 2 MiB runs at 13 GB/s against 47 for a numpy copy that stays in L3):
    2 ranks, in-process A/B, inputs rewritten before each call, 1 MiB: all_gather 77 -> 52 us,
    reduce_scatter 107 -> 56, broadcast 83 -> 39 (benchmarks/RESULTS.md)."""
    return host_limits().slots_max_2


def slots_max_bytes_two_ranks_all_gather() -> int:
    """On 2 ranks, an all_gather whose per-rank input is larger than this reads the peer's input by
    cross-memory attach (peer_buffers) instead of going through the slots, where cross-memory attach works
    (INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG, 256 KiB; at most :func:`slots_max_bytes_two_ranks`). The
    all_gather's output is twice its input, so the slots' copies leave the cache earlier than a
    broadcast's: in-process A/B, inputs rewritten before each call (benchmarks/README.md: slots_cma_ab), slots / peer_buffers at 1, 2, 3, 4 MiB of output: 0.78, 1.04, 1.40, 1.81 (1.40-2.85 in the VM's
    slow mode, 1 MiB output included), while broadcast and reduce_scatter keep the slots up to 2 MiB
    (0.55-0.70); since peer_buffers's push runs inlined (FastPath._push, benchmarks/RESULTS.md) 0.89-0.95 at 1 MiB
    and 1.09 at 2 MiB of output; the same A/B three jobs later (medians of 8 turns): 768 KiB of output 1.71, 1.79, 1.02; 1 MiB
    1.91, 2.03, 1.23 (peer_buffers never slower), 512 KiB 1.00: so 256 KiB of input (512 KiB was)."""
    return host_limits().slots_max_2_all_gather


def slots_max_bytes_all_to_all() -> int:
    """On 3 or more ranks, an all_to_all whose input is larger than this puts its blocks into the peers'
    outputs by cross-memory attach (peer_buffers) instead of going through the slots, where cross-memory attach
    works (INTERLINK_SHM_SLOTS_MAX_BYTES_A2A, default 1 MiB; at most the slot size). In-process A/B on a
    2-core x86 VM (benchmarks/README.md: a2a_slots_ab), slots / peer_buffers by input: 3 ranks 1 MiB 0.77, 1.5 MiB 1.11, 2 MiB 1.22,
    3 MiB 1.28; 4 ranks 1 MiB 0.79-0.93, 1.5 MiB 1.22, 2 MiB 1.20-1.32, 3 MiB 1.31. On 2 ranks the slots win
    up to 2 MiB (0.69-0.79) and all_to_all keeps :func:`slots_max_bytes_two_ranks`."""
    return host_limits().slots_max_all_to_all


def slots_max_bytes_all_gather(nlocal: int | None = None) -> int:
    """On 3 or more ranks, an all_gather whose per-rank input is larger than this reads the peers' inputs by
    cross-memory attach (peer_buffers) instead of going through the slots, where cross-memory attach works
    (INTERLINK_SHM_SLOTS_MAX_BYTES_AG; at most the slot size, :func:`fast_max_bytes`). Broadcast and
    reduce_scatter keep the slots up to the slot size. With streaming copies out of the slots
    (transport/stream.py, :func:`stream_min_bytes`) the all_gather keeps them too: in-process A/B
    (`interlink run -n P benchmarks/README.md (stream_ab) all_gather ... --slots --peer_buffers`, benchmarks/RESULTS.md), slots
    (streaming) / peer_buffers by per-rank input of 1, 2, 4 MiB: 3 ranks 1.14, 0.90, 0.99; 4 ranks 0.79, 0.84,
    0.90; 8 ranks 0.75, 0.83, 0.96 (slots faster below 1). Without them (another architecture) 1 MiB:
    slots / peer_buffers then (benchmarks/RESULTS.md) 3 ranks 0.95-1.21, 1.30-1.34, -; 4 ranks 0.99-1.10, 1.16-1.19,
    1.19-1.25; 8 ranks (2 MiB, 4 MiB) 1.06, 1.21.
    With ``nlocal`` (the host's ranks), the slot size only where every all_gather above 1 MiB of input
    streams (its outputs on the host, nlocal^2 x the input, reach :func:`stream_min_bytes`): on a host
    whose cache is large the slots' plain copies lose to peer_buffers there (an Intel Xeon with 300 MiB of L3, 4
    ranks, 16 MiB of output: 2708 against 2393 us), so the limit stays 1 MiB."""
    lim = host_limits()
    streams = lim.stream_min > 0 and (nlocal is None or lim.stream_min <= nlocal * nlocal * (1 << 20))
    return lim.slots_max_all_gather if streams else lim.all_gather_max_cached


def autotune() -> bool:
    """Whether the host page measures, per call shape, which of its two paths is faster where the fixed
    limits above are a guess (INTERLINK_AUTOTUNE, 1; 0: the limits alone decide). An all_gather, an
    all_to_all or a broadcast whose input lies within a factor of its limit, from half of it to 4x it
    (algorithms.hostpage.measured_band), runs its first calls through the slots (a broadcast larger than a
    slot: through it in chunks, ``slots_pipelined``) and through cross-memory attach in turn,
    the host's first rank times them and publishes the faster on the host page, and every rank takes it
    from then on (runtime.fastpath.FastPath.pick). The crossover moves with the machine and its state: on
    a 2-core x86 VM, 2 ranks, 1 MiB of all_gather output, slots / peer_buffers measured 1.2-2.0 one day
    and 0.65-0.74 another (benchmarks/RESULTS.md), so no fixed limit suits both.
    Intel MPI's run-time autotuner (I_MPI_TUNING_MODE=auto) works the same way. The same switch measures
    streaming against plain copies near :func:`stream_min_bytes` (:func:`stream_band`)."""
    return os.environ.get("INTERLINK_AUTOTUNE", "1").strip() != "0"


def autotune_reprobe() -> int:
    """Calls of a measured shape between its choice and its first re-measurement (INTERLINK_AUTOTUNE_REPROBE,
    128, rounded down to a power of two, at most 2**15; 0: never again). A shape's first calls can
    mislead: 4 ranks on 2 cores, all_to_all of 1 MiB, the slots' first blocks took 250-890 us a call
    (their places and the slot copies' own measuring still warming up) against 125-165 us once warm, and one
    job in five kept peer_buffers (290 us) for good; and the machine's state moves under a running job (the
    2-core VM's cores share a cache one minute and not the next). After the interval the shape runs one
    block of its chosen path and one of the other (autotune.REPROBE_CALLS calls), the first rank switches
    when the other's median is below 0.9 of the chosen one's, and the interval doubles, up to 32 times
    the first."""
    v = env_int("INTERLINK_AUTOTUNE_REPROBE", 128)
    return 0 if v <= 0 else 1 << min(15, v.bit_length() - 1)


def ar_direct_min_bytes() -> int:
    """all_reduce of an all-local group reads the ranks' own buffers above this size
    (INTERLINK_SHM_AR_DIRECT_MIN_BYTES; 2 ranks with plain numpy buffers: 1 MiB 155 us by the ring vs
    277 us, 4 MiB 605 vs 480 us; 4 ranks 16 MiB 7.9 vs 5.3 ms; in interlink.empty buffers it wins from
    256 KiB). On 2 ranks it is also where the two-phase all_reduce in the slots (two_phase) stops: below it
    two_phase beats the ring over the channels (benchmarks/README.md: fast2_ab, in-process A/B, ring / two_phase at
    512 KiB, 1 and 2 MiB: 1.29-1.30, 1.47-1.51, 1.48-1.60; at 4 MiB peer_buffers beats two_phase 1.8x;
    benchmarks/RESULTS.md)."""
    return host_limits().peer_buffers_all_reduce_min


def host_page_populate() -> bool:
    """Map the host page with every page present at init (INTERLINK_SHM_POPULATE, 1; 0: as the slots are
    first touched). Each of the up to 64 places a call shape's payload rotates through was faulted in, in
    every rank, on its first use: 2 ranks, all_reduce of 16 KiB, calls 2-32 took 2.1x the steady state's
    time, 1.2-1.6x with the page present (64 KiB: 2.1-3.4x against 1.0-1.2x; measured on the
    project's 2-core VM). It commits the page's memory at init: 2 x (local ranks + 1) slots of INTERLINK_SHM_DIRECT_MAX_BYTES
    (4 MiB): 24 MiB on 2 local ranks, 72 MiB on 8."""
    return os.environ.get("INTERLINK_SHM_POPULATE", "1").strip() != "0"


def slot_rotation_bytes() -> int:
    """Successive calls of one shape put their payload at successive places of the slots, cycling
    through about this many bytes (INTERLINK_SLOT_ROTATION_BYTES, 2 MiB; 0: always at the start), so that
    a slot line is written again only after the readers' caches have let it go: writing lines another core
    holds ran at 6 GB/s against 40 for a local copy on a 2-core x86 VM (benchmarks/README.md: coherence;
    runtime.fastpath.FastPath._rotation)."""
    return env_int("INTERLINK_SLOT_ROTATION_BYTES", 2 << 20)


def slot_rotation_min_bytes() -> int:
    """Payloads below this many bytes stay at the start of the slots (INTERLINK_SLOT_ROTATION_MIN_BYTES,
    16 KiB): a few lines cost little to invalidate, and each place is a view kept per call shape."""
    return env_int("INTERLINK_SLOT_ROTATION_MIN_BYTES", 16 << 10)


def stream_min_bytes() -> int:
    """Copies out of the slots into a call's output use streaming stores (transport/stream.py) when the
    outputs every local rank writes in that call add up to at least this many bytes
    (INTERLINK_STREAM_MIN_BYTES; 0: never): half the host's last-level cache (sysfs; 16 MiB where it
    cannot be read). Outputs that large are not in cache when the call writes them, where a plain copy
    reads every line before writing it; below, the lines may still be in cache from the last call and a
    streaming copy, which evicts them, is slower. In-process A/B (benchmarks/README.md: stream_ab), plain / streaming, all_gather by the outputs of the host's ranks: 4 ranks
    8 MiB 1.05, 16 MiB 1.47, 64 MiB 1.28; 2 ranks 4 MiB 0.74, 8 MiB 1.11, 16 MiB 1.44."""
    return HostLimits.from_env(os.environ, stream_min=last_level_cache_bytes() // 2).stream_min or 1 << 62


#: the copy into a rank's slot from which the compiled core may use streaming stores (slot_stream). 4 KiB: where
#: the cores share no cache a 4 KiB call already pays for taking its slot's lines back (2 ranks on the 2-core AMD
#: EPYC VM, alternating jobs of 9,000 calls, 16 KiB / 4 KiB: broadcast of 4 KiB 2.8-3.0 / 1.3-1.5 us, all_reduce of
#: 4 KiB 3.9-4.2 / 2.3-3.1, of 8 KiB 6.3-6.7 / 3.5-4.3; where they share one, 8 pairs: all_reduce 1.6-1.7 against
#: 1.7, broadcast 1.2-1.3 against 1.2-1.3). At 1 KiB streaming gained nothing (broadcast 1.2 / 1.1 us, reduce_scatter
#: 1.0 / 1.5 where the cores share no cache)
SLOT_STREAM_MIN_BYTES = 4 << 10
_SLOT_STREAM_MODES = {"0": 0, "never": 0, "1": 1, "always": 1, "auto": 2, "": 2}


def slot_stream() -> tuple[int, int]:
    """(bytes, mode) for the compiled core's copies into a rank's own slot (runtime/_hotcore.c ``slot_lead``):
    a call shape whose copy is at least ``bytes`` (INTERLINK_SLOT_STREAM_MIN_BYTES, default 4 KiB) makes it
    with streaming stores never (mode 0, INTERLINK_SLOT_STREAM=0), always (1, INTERLINK_SLOT_STREAM=1) or as
    measured (2, the default, ``auto``): the host's first rank times each shape's calls with each copy, the
    others follow its choice, and the other copy is tried again every 100 x (cost ratio, at most 4)^2 calls
    (docs/collectives.md, "Copies into the slots"). Why measured: the slot's lines sit in the caches of the peers that read
    them last, and a plain store takes each back first. Where the cores share a cache that is cheap and the
    peers then read from it (2 ranks, all_to_all of 1 MiB: 38 us plain, 56-75 us streaming); where they do
    not (two dies or sockets, or the cores of a shared VM placed so, which changed by the minute on the 2-core
    AMD EPYC VM) the plain copy is 4-7x slower (250-285 us against 56) and streaming stores win. Only where
    transport/stream.py's streaming copy exists (x86-64); the choice changes no byte of a result."""
    mode = os.environ.get("INTERLINK_SLOT_STREAM", "auto").strip().lower()
    if mode not in _SLOT_STREAM_MODES:
        raise ValueError(f"INTERLINK_SLOT_STREAM must be auto, 0 or 1, got {mode!r}")
    raw = os.environ.get("INTERLINK_SLOT_STREAM_MIN_BYTES", "")
    at = int(raw) if raw.strip() else SLOT_STREAM_MIN_BYTES
    return (at, _SLOT_STREAM_MODES[mode] if stream.available and at > 0 else 0)


#: the host's outputs of a call run step by step (a page program) from which its first calls measure streaming
#: against plain copies (FastPath.stream_tuned) even far below stream_min_bytes: the copies into the slots are
#: the reason. 2 ranks, two_phase all_reduce of 1 MiB on the 2-core AMD EPYC VM: plain 73 us and streaming
#: 166 us where the cores share a cache, 482-507 and 111-120 where they do not
PAGE_STREAM_MEASURE_MIN = 256 << 10


def stream_band(stream_min: int) -> tuple[int, int]:
    """The outputs of the host's ranks in one call, (lo, hi] bytes, for which the host page measures its
    copies into the outputs with streaming stores against plain ones (the first calls of each shape, as
    for the slots' limit: runtime.fastpath.FastPath.pick), where :func:`stream_min_bytes` is a guess: half
    of it to 4x it. Why: on a 2-core x86 VM the plain / streaming ratio at the same outputs moved with the
    day: 4 ranks, broadcast of 4 MiB (16 MiB of outputs, the threshold) 0.65-0.70 in one hour,
    no difference later, 0.62 on another day; all_gather of 4 MiB output 0.87-0.90, of 16 MiB 1.27-1.51
    (benchmarks/RESULTS.md). (0, 0) where the rule says never."""
    if stream_min >= 1 << 61:
        return 0, 0
    return measured_band(stream_min, 1 << 62)  # the slots' band's rule, without a top


def last_level_cache_bytes() -> int:
    """The size of the largest CPU cache sysfs reports for cpu0 (the L3 on x86 servers), 32 MiB where it
    cannot be read."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            try:
                with open(os.path.join(base, d, "size")) as f:
                    txt = f.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
            num = txt[:-1] if txt[-1:] in "KMG" else txt
            if num.isdigit():
                best = max(best, int(num) * mult)
    except OSError:
        pass
    return best or 32 << 20


def fast_chunk_bytes() -> int:
    """The host page's base piece (INTERLINK_FAST_CHUNK_BYTES, at least 4 KiB): 128 KiB; a page program's
    chain reduces twice that at a time (runtime/pageplan.py), cross-memory attach moves 64 times it a call."""
    return max(4096, env_int("INTERLINK_FAST_CHUNK_BYTES", 128 * 1024))


# The device path (cuda-ipc): GPU buffers of ranks that share a host are read in place by their peers
# (runtime.device_exec runs these Schedules as pulls). Each collective's Schedule there: the fewest
# rounds (every round costs a signal and a stream synchronisation), each byte copied once.
DEVICE_ALGO = {"all_reduce": "twoshot", "broadcast": "direct", "reduce": "direct", "all_gather": "direct",
               "reduce_scatter": "direct", "gather": "direct", "scatter": "direct", "all_to_all": "pairwise"}


def cuda_ipc_min_bytes() -> int:
    """Below this many bytes (the call's largest buffer) device arrays take the staged path, whose
    per-call cost is lower: INTERLINK_CUDA_IPC_MIN_BYTES, else the crossover measured on an H100 with 4
    ranks on one GPU (benchmarks/RESULTS.md): 8 MiB when the processes are time-sliced (no MPS: ~2-3 ms
    a call on cuda-ipc against ~0.5 ms/MiB staged), 1 MiB under MPS (~0.4-0.6 ms a call). The same on
    every rank of a host (the MPS daemon is the host's), so every rank takes the same path."""
    env = os.environ.get("INTERLINK_CUDA_IPC_MIN_BYTES")
    if env is not None:
        return int(env)
    return CUDA_IPC_MIN_BYTES_MPS if cuda_ipc.mps_active() else CUDA_IPC_MIN_BYTES


CUDA_IPC_MIN_BYTES = 8 << 20
CUDA_IPC_MIN_BYTES_MPS = 1 << 20
