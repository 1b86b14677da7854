"""The host page measures its two paths where the fixed limits are a guess (FastPath.pick, policy.autotune).

An all_gather or all_to_all whose input lies in the band around its limit runs its first calls through the
slots and by cross-memory attach in turn; the host's first rank compares its timings, publishes the faster
path in the host page's choice table, and every rank takes it from then on. What can go wrong, and is
checked here against numpy and against the other ranks' flight records: a rank that counts a signature's
calls differently (its calls come through other entries: N-d views, async, torch tensors), a rank that
does not follow the published choice (a mismatch), a choice that does not follow the timings, another
shape's choice in the same table entry, and the switch turned off.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from mp import run_ranks

# small limits, so that small arrays exercise the band: the one-shot path to 1 KiB, inlined slots to 4 KiB,
# slots of 32 KiB; all_gather and all_to_all (3+ ranks) leave the slots at 4 KiB of input, so their band is
# (2 KiB, 16 KiB]; on 2 ranks all_to_all keeps the slots to 32 KiB, its band (16 KiB, 32 KiB]
ENV = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "4096",
       "INTERLINK_FAST_CHUNK_BYTES": "4096", "INTERLINK_SHM_DIRECT_MAX_BYTES": str(32 << 10),
       "INTERLINK_SHM_SLOTS_MAX_BYTES_2": str(32 << 10), "INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG": "4096",
       "INTERLINK_SHM_SLOTS_MAX_BYTES_AG": "4096", "INTERLINK_SHM_SLOTS_MAX_BYTES_A2A": "4096"}
STEPS = 40


def shapes(world: int) -> list[tuple[str, type, int]]:
    """(collective, dtype, input elements): below the band, in it on both sides of the limit, above it."""
    a2a = 3000 if world == 2 else 900  # 24 KB on 2 ranks (band 16-32 KB), 10.8 KB on 3 (band 2-16 KB)
    return [("all_gather", np.float32, 300), ("all_gather", np.float32, 700), ("all_gather", np.float32, 2049),
            ("all_gather", np.float64, 1001), ("all_gather", np.float32, 4000), ("all_gather", np.float32, 9000),
            ("all_to_all", np.float32, a2a * world)]


def _force(fp, rank: int, force) -> None:
    """The first rank's timings make path ``force`` (0: the rule's) faster by a second a call; a triple
    (a, b, c): path a while the shape has had at most c calls, then b; None: real."""
    if force is None or rank != 0:
        return
    orig = fp.timed

    def timed(tn, seconds):
        fast = force if isinstance(force, int) else force[0] if tn.state.calls <= force[2] else force[1]
        orig(tn, seconds + (1.0 if tn.state.path != fast else 0.0))

    fp.timed = timed


def _suite(rank: int, world: int, force, entries: int, steps: int = STEPS) -> tuple[list[str], dict, list]:
    import interlink as dist
    import interlink.transport.shm as shm

    if entries:
        shm.TUNE_ENTRIES = entries  # every rank alike: the page's layout and every shape in one entry
    g = dist.init(timeout=60)
    fp = g._fast
    _force(fp, rank, force)
    try:
        import torch
    except ImportError:
        torch = None
    fails: list[str] = []
    paths: dict = {}
    for step in range(steps):
        for coll, dt, n in shapes(world):
            # the same calls, through different entries on different ranks and steps: a flat array (the hot
            # path's cache), an N-d view (another cache key), async (the regular entry), a torch tensor
            mode = ("plain", "nd", "async", "torch")[(step + rank) % 4]
            if mode == "torch" and torch is None:
                mode = "plain"
            if coll == "all_gather":
                x = ((np.arange(n) * (rank + 2) + step) % 251).astype(dt)
                want = np.concatenate([((np.arange(n) * (j + 2) + step) % 251).astype(dt) for j in range(world)])
                out = np.full(n * world, -1, dt)
                o, i = (out.reshape(world, n), x.reshape(1, n)) if mode == "nd" else (out, x)
                call = dist.all_gather_into_tensor
            else:
                b = n // world
                x = ((np.arange(n) * (rank + 3) + np.repeat(np.arange(world), b) * 7 + step) % 113).astype(dt)
                # block `rank` of rank j's input
                want = np.concatenate([((np.arange(b) + rank * b) * (j + 3) + rank * 7 + step) % 113
                                       for j in range(world)]).astype(dt)
                out = np.full(n, -1, dt)
                o, i = (out.reshape(world, b), x.reshape(world, b)) if mode == "nd" else (out, x)
                call = dist.all_to_all_single
            if mode == "async":
                call(o, i, async_op=True).wait()
            elif mode == "torch":
                call(torch.from_numpy(o), torch.from_numpy(i))
            else:
                call(o, i)
            if not np.array_equal(out, want):
                fails.append(f"rank {rank} step {step} {coll} {np.dtype(dt)} n={n} {mode}: {out[:5]} != {want[:5]}")
            sig = g.recorder[-1].plan.sigb.decode()
            paths.setdefault(f"{coll} {np.dtype(dt)} {n}", []).append(sig.split()[0].split(":")[1])
    lo, hi = fp.band(2)
    dist.destroy()
    return fails, paths, [lo, hi, fp.autotune]


def _check(world: int, force, entries: int = 0, env: dict | None = None, steps: int = STEPS) -> dict:
    res = run_ranks(world, _suite, force, entries, steps, env={**ENV, **(env or {})}, timeout=240)
    fails = [f for fl, _, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    first = res[0][1]
    for r, (_, paths, _) in enumerate(res):  # every rank ran every call by the same path
        assert paths == first, (r, paths, first)
    return {"paths": first, "band": res[0][2]}


def _limits_path(coll: str, nbytes: int, world: int) -> str:
    limit = 4096 if coll == "all_gather" or world > 2 else 32 << 10
    return "peer_buffers" if nbytes > limit else "slots"


@pytest.mark.parametrize("world,force", [(2, 1), (3, 1), (3, 0)])
def test_the_band_measures_both_paths_and_every_rank_takes_the_first_ranks_choice(world: int, force: int) -> None:
    import interlink.transport.cma as cma

    got = _check(world, force)
    lo, hi, on = got["band"]
    if not cma.available:  # no peer_buffers: nothing to choose between
        assert not on
        return
    assert (lo, hi) == (2048, 16384)
    from interlink.runtime.fastpath import PROBE_CALLS, probe_path

    tuned = 0
    for name, seq in got["paths"].items():
        coll, dt, n = name.split()
        nbytes = int(n) * np.dtype(dt).itemsize
        default = _limits_path(coll, nbytes, world)
        other = "slots" if default == "peer_buffers" else "peer_buffers"
        band = (16 << 10, 32 << 10) if coll == "all_to_all" and world == 2 else (lo, hi)
        if not band[0] < nbytes <= band[1]:
            assert seq == [default] * STEPS, (name, seq)
            continue
        tuned += 1
        probe = [(default, other)[probe_path(k)] for k in range(PROBE_CALLS)]
        assert seq[:PROBE_CALLS] == probe, (name, seq)
        assert seq[PROBE_CALLS:] == [(default, other)[force]] * (STEPS - PROBE_CALLS), (name, seq)
    assert tuned == 5, got["paths"]  # 4 all_gather sizes in the band (one of float64), the all_to_all


def test_the_choice_is_the_lower_mean_of_block_medians() -> None:
    """choose: blocks alternate path 0 (the limits'), path 1; each block's median, averaged per path. The
    cases measured on the project's 2-core VM: a noisy path with one fast block loses to a
    steadier faster one (4 ranks, broadcast 16 MiB: the best block would have kept peer_buffers); a path whose first
    block still warms up keeps winning when its average is lower (2 ranks, all_gather 1 MiB output); no
    timings or a tie: the limits'."""
    from interlink.runtime.fastpath import choose

    def blocks(*meds):
        return [[m * 0.99, m, m * 1.01, m] for m in meds]  # four timed calls a block around each median

    assert choose(blocks(2413, 2452, 3171, 2777)) == 1
    assert choose(blocks(60, 55, 37, 55)) == 0
    assert choose(blocks(55, 60, 55, 37)) == 1
    assert choose([[], [], [], []]) == 0 and choose(blocks(50, 50, 50, 50)) == 0
    assert choose(blocks(50, 40) + [[], []]) == 1  # one block each: still compared


def test_a_split_path_costs_its_better_copy() -> None:
    """A path whose two blocks ran its two copies into the slot (plain, streaming) costs its better block: the
    slots with plain copies where the cores share no cache (250 us) and streaming ones (55) against
    peer_buffers's 70 take the slots, where the mean (152) would not; unsplit, the mean as before."""
    from interlink.runtime.fastpath import choose

    def blocks(*meds):
        return [[m * 0.99, m, m * 1.01, m] for m in meds]

    assert choose(blocks(70, 250, 70, 55)) == 0
    assert choose(blocks(70, 250, 70, 55), split=(1,)) == 1
    assert choose(blocks(250, 70, 55, 70), split=(0,)) == 0
    assert choose(blocks(60, 65, 60, 65), split=(0, 1)) == 0
    assert choose(blocks(80, 55, 60, 70), split=(0, 1)) == 1
    assert choose([[], [], [], []], split=(1,)) == 0


def _copies_suite(rank: int, world: int) -> dict:
    """A 2-rank all_gather in the band (the slots through the compiled core, a page program of ENV's sizes, whose
    copies into the slot rank 0 measures) for 60 calls, every result against numpy; rank 0's Shape of the slots path: its copies during
    the probe, its forced copy after it, its measurement's state."""
    import interlink as dist

    g = dist.init(timeout=60)
    fp = g._fast
    n = 3000  # 12 KB of input: in the band (4 KiB, 16 KiB] of ENV; the slot copy measured from 4 KiB
    fails, seen = [], []
    for step in range(60):
        x = (np.arange(n, dtype=np.float32) * (rank + 3) + step) % 1021
        out = np.empty(n * world, np.float32)
        dist.all_gather_into_tensor(out, x)
        want = np.concatenate([(np.arange(n, dtype=np.float32) * (r + 3) + step) % 1021 for r in range(world)])
        if not np.array_equal(out, want):
            fails.append(step)
        sc = next(v for v in fp.shapes.values() if v and v.tune is not None)
        lead = fp._lead(sc.tune.alts[1]) if rank == 0 else None
        seen.append(None if lead is None else (lead.force, lead.streamed, lead.ncalls))
    sc = next(v for v in fp.shapes.values() if v and v.tune is not None)
    leads = [fp._lead(a) is not None for a in sc.tune.alts]
    out = {"fails": fails, "seen": seen, "leads": leads, "choice": sc.tune.state.choice,
           "cost": [(lead.cost_plain, lead.cost_streamed) for lead in map(fp._lead, sc.tune.alts) if lead is not None]}
    dist.destroy()
    return out


@pytest.mark.skipif(not __import__("interlink.runtime.ccore", fromlist=["built"]).built(),
                    reason="the compiled core is not built here")
def test_the_slots_path_is_measured_with_both_its_copies() -> None:
    """While the paths are measured, the slots path's first block makes plain copies into the slot and its
    second streaming ones (rank 0 forces them: Prog.force 1, then 2, its own measurement not counting them);
    after the probe the copy measurement starts from the two blocks' medians (Prog.seed: past its first
    blocks, nothing forced), and every result is right on every rank."""
    from interlink.runtime.autotune import PROBE_BLOCK, PROBE_CALLS, PROBE_WARM
    from interlink.transport import cma, stream

    if not stream.available or not cma.available:
        pytest.skip("no streaming copy or no cross-memory attach here: nothing to measure")
    env = dict(ENV, INTERLINK_SLOT_STREAM="auto", INTERLINK_SLOT_STREAM_MIN_BYTES="4096", INTERLINK_NO_CCORE="0")
    res = run_ranks(2, _copies_suite, env=env, timeout=120)
    for r in res:
        assert not r["fails"], r
    r0 = res[0]
    assert r0["leads"] == [False, True], r0  # peer_buffers (the rule's above 4 KiB) has no slot; the slots do
    seen = r0["seen"]
    # calls PROBE_WARM + PROBE_BLOCK .. + 2 PROBE_BLOCK - 1: the slots' first block, plain (force 1), nothing
    # streamed; its second block (calls from PROBE_WARM + 3 PROBE_BLOCK) streams every call (force 2)
    first = PROBE_WARM + PROBE_BLOCK
    assert all(seen[k][0] == 1 and seen[k][1] == 0 for k in range(first, first + PROBE_BLOCK)), seen[:PROBE_CALLS]
    second = PROBE_WARM + 3 * PROBE_BLOCK
    assert all(seen[k][0] == 2 for k in range(second, PROBE_CALLS)), seen[:PROBE_CALLS]
    assert seen[PROBE_CALLS - 1][1] >= PROBE_CALLS - second, seen[:PROBE_CALLS]
    # the measurement counted none of those calls, then was seeded: nothing forced, past its first blocks
    assert seen[PROBE_CALLS - 1][2] == 0, seen[:PROBE_CALLS]
    assert all(v[0] == 0 and v[2] >= 32 for v in seen[PROBE_CALLS:]), seen[PROBE_CALLS:]
    plain, streamed = r0["cost"][0]
    assert plain > 0 and streamed > 0, r0


def test_a_choice_overwritten_in_the_table_means_the_limits_path_on_every_rank() -> None:
    """One table entry for every shape: all probes end in the same step, each shape's first rank writes its
    choice over the last one's, and only the last shape finds its own key when the next call reads it;
    every other shape takes the limits' path, the first rank included (it reads the table too)."""
    import interlink.transport.cma as cma

    if not cma.available:
        pytest.skip("no cross-memory attach: nothing to choose between")
    got = _check(2, 1, entries=1)
    from interlink.runtime.fastpath import PROBE_CALLS

    after = {name: seq[PROBE_CALLS:] for name, seq in got["paths"].items()}
    # in the band on 2 ranks: all_gather 700, 2049, 4000 x f32 and 1001 x f64 (2-16 KB), all_to_all 24 KB
    # (16-32 KB); the all_to_all is called last in each step, so its choice (forced: not the limits') is the
    # one left in the entry
    assert after["all_to_all float32 6000"] == ["peer_buffers"] * (STEPS - PROBE_CALLS), after
    assert after["all_gather float32 700"] == ["slots"] * (STEPS - PROBE_CALLS), after
    assert after["all_gather float32 2049"] == ["peer_buffers"] * (STEPS - PROBE_CALLS), after
    assert after["all_gather float64 1001"] == ["peer_buffers"] * (STEPS - PROBE_CALLS), after
    assert after["all_gather float32 4000"] == ["peer_buffers"] * (STEPS - PROBE_CALLS), after


def test_autotune_off_leaves_the_limits_alone() -> None:
    got = _check(3, 1, env={"INTERLINK_AUTOTUNE": "0"})
    assert not got["band"][2]
    for name, seq in got["paths"].items():
        coll, dt, n = name.split()
        nbytes = int(n) * np.dtype(dt).itemsize
        import interlink.transport.cma as cma

        want = _limits_path(coll, nbytes, 3) if cma.available else "slots"
        assert seq == [want] * STEPS, (name, seq)


def _thresholds(rank: int, world: int) -> dict:
    import interlink as dist

    from interlink.runtime.fastpath import BC

    g = dist.init(timeout=30)
    t = g.path_thresholds()
    if g._fast is not None:  # the broadcast's band (not a sweep threshold: its top is 4 slots, 16 MiB)
        t["tune.broadcast.lo"], t["tune.broadcast.hi"] = g._fast.band(BC)
    dist.destroy()
    return t


@pytest.mark.parametrize("world", [2, 3, 4])
def test_predict_names_the_band_the_runtime_measures(world: int) -> None:
    """`interlink predict` prices the limit's path and says where the runtime measures instead: its band
    (model.cost.measured_band_for, from the host.slots.* parameters and host.stream.min_bytes, which this
    host's calibration records) is the running ranks' (FastPath.band, `Group.path_thresholds`), with the
    default limits: on 3+ ranks the all_gather's limit is the slot size only where local ranks^2 MiB reach
    the streaming threshold (policy.slots_max_bytes_all_gather(nlocal)), else 1 MiB."""
    import interlink.transport.cma as cma
    from interlink.model import predict
    from interlink.model.cost import measured_band_for
    from interlink.model.params import default_params

    from interlink.bench.calibrate import shm_limits

    t = run_ranks(world, _thresholds, timeout=60)[0]
    params = default_params().replace({"host.stream.min_bytes": float(shm_limits().stream_min)}, "this host")
    for coll in ("all_gather", "all_to_all", "broadcast"):
        band = measured_band_for(coll, world, params)
        if cma.available:
            assert (t[f"tune.{coll}.lo"], t[f"tune.{coll}.hi"]) == band, (coll, t, band)
        lo, hi = band
        for payload, inside in ((lo, False), (lo + 4096, True), (hi, True), (hi + 4096, False)):
            size = payload * world if coll == "all_gather" else payload
            pred = predict(coll, size, None, nranks=world, params=params, profile=False)
            said = any(re.search(r"measures (slots|slots_pipelined) against peer_buffers", n) for n in pred.notes)
            assert said == inside, (coll, payload, pred.algorithm, pred.notes)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_predict_prices_either_measured_path_by_name_inside_the_band(world: int) -> None:
    """Inside the band the runtime may run either path, so asked for by name (`interlink bench` prices the
    path a row ran) the model prices the slots (`slots`) and `peer_buffers` there, and refuses each outside its own
    range: at 4 ranks a 4 MiB-a-rank all_gather that ran peer_buffers once showed N/A in bench's model column."""
    from interlink.model import ModelError, predict
    from interlink.model.cost import measured_band_for
    from interlink.model.params import default_params

    params = default_params()
    slots = int(params.value("host.fast2.max_bytes"))
    for coll in ("all_gather", "all_to_all", "broadcast"):
        lo, hi = measured_band_for(coll, world, params)
        per = world if coll == "all_gather" else 1
        for payload in (lo + 4096, min(hi, slots)):
            for algo in ("slots", "peer_buffers"):
                pr = predict(coll, payload * per, "cpu-host", nranks=world, algorithm=algo, params=params,
                             profile=False)
                assert pr.algorithm == algo and pr.time_us > 0, (coll, payload, algo)
        with pytest.raises(ModelError, match="outside"):  # below the band: the slots only
            predict(coll, lo * per, "cpu-host", nranks=world, algorithm="peer_buffers", params=params, profile=False)
        with pytest.raises(ModelError, match="outside"):  # above a slot: never the one-shot slots
            predict(coll, (slots + 4096) * per, "cpu-host", nranks=world, algorithm="slots", params=params,
                    profile=False)


# ---- streaming against plain copies into the outputs (policy.stream_band) ----------------------------

# The limits above and streaming from 32 KiB of the host's outputs: its band is (16, 128] KiB of outputs.
# Per rank count, (collective, input elements of float32, whether the rule streams, whether it is measured).
# Broadcasts stay at or under 16 KiB of input, below the slots' band (a broadcast's limit is the 32 KiB slot).
# 2 ranks: a broadcast through the slots of 16 KiB (32 KiB of outputs: the rule streams) and one of 12 KiB
# (24 KiB, copied plainly by the rule), the peer_buffers all_gather's push (20 KiB of input, above the slots-or-peer_buffers
# band: 80 KiB of outputs), the two-phase all_reduce (24 KiB, in place: 48 KiB), and an all_gather above the
# band (40 KiB of input: 160 KiB of outputs, streamed, never measured). 3 ranks: broadcasts of 12 KiB (36 KiB)
# and 8 KiB (24 KiB, plain by the rule), the two-phase all_reduce (72 KiB), an all_gather in the slots' band
# (6 KB of input: 54 KB of outputs; the slots and peer_buffers are measured, each streaming by the rule) and one
# above the streaming band (20 KiB: 180 KiB).
STREAM_ENV = {**ENV, "INTERLINK_STREAM_MIN_BYTES": str(32 << 10)}
STREAM_SHAPES = {2: [("broadcast", 4096, True, True), ("broadcast", 3000, False, True),
                     ("all_gather", 5000, True, True), ("all_reduce", 6000, True, True),
                     ("all_gather", 10000, True, False)],
                 3: [("broadcast", 3000, True, True), ("broadcast", 2000, False, True),
                     ("all_reduce", 6000, True, True), ("all_gather", 1500, True, False),
                     ("all_gather", 5000, True, False)]}


def _stream_suite(rank: int, world: int, force: int | None) -> tuple[list[str], dict]:
    import interlink.transport.stream as stream

    count = [0]
    copy = stream.copy

    def spy(dst, src):  # every streaming copy of this rank
        count[0] += 1
        copy(dst, src)

    stream.copy = spy
    import interlink as dist

    g = dist.init(timeout=60)
    fp = g._fast
    _force(fp, rank, force)
    fails: list[str] = []
    streamed: dict = {}
    core = getattr(fp, "core", None)  # page programs in the compiled core count their streaming copies there

    def copies() -> int:
        return count[0] + (core.prog_streamed if core is not None else 0)

    for step in range(STEPS):
        for coll, n, _, _ in STREAM_SHAPES[world]:
            x = ((np.arange(n) * (rank + 2) + step) % 251).astype(np.float32)
            before = copies()
            if coll == "broadcast":
                want = ((np.arange(n) * 2 + step) % 251).astype(np.float32)  # rank 0's
                dist.broadcast(x, 0)
                got = x
            elif coll == "all_gather":
                want = np.concatenate([((np.arange(n) * (j + 2) + step) % 251).astype(np.float32)
                                       for j in range(world)])
                got = np.full(n * world, -1, np.float32)
                dist.all_gather_into_tensor(got, x)
            else:
                want = sum(((np.arange(n) * (j + 2) + step) % 251).astype(np.float32) for j in range(world))
                dist.all_reduce(x)
                got = x
            if not np.array_equal(got, want):
                fails.append(f"rank {rank} step {step} {coll} n={n}: {got[:5]} != {want[:5]}")
            streamed.setdefault(f"{coll} {n}", []).append(copies() > before)
    dist.destroy()
    return fails, streamed


@pytest.mark.parametrize("world,force", [(2, 0), (2, 1), (3, 1)])
def test_streaming_is_measured_against_plain_copies_near_its_threshold(world: int, force: int) -> None:
    """A shape whose outputs on the host lie in the streaming band runs its first calls with streaming and
    with plain copies into its outputs in turn (probe_path: the rule's first), and every call after the
    probe the way the first rank's timings chose (forced either way here), on every rank; results exact
    on every call. Outside the band, and in the slots' band (a shape is measured in one band only), the
    rule alone decides how copies go."""
    from interlink.runtime.fastpath import PROBE_CALLS, probe_path
    from interlink.transport import stream

    if not stream.available:
        pytest.skip(f"no streaming copy here: {stream.why_not}")
    res = run_ranks(world, _stream_suite, force, env=STREAM_ENV, timeout=240)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    for coll, n, rule, tuned in STREAM_SHAPES[world]:
        name = f"{coll} {n}"
        if not tuned:
            want = [rule] * STEPS
        else:
            probe = [(rule, not rule)[probe_path(k)] for k in range(PROBE_CALLS)]
            want = probe + [(rule, not rule)[force]] * (STEPS - PROBE_CALLS)
        # a broadcast's root copies nothing into its output (its input is the output)
        for r in range(1 if coll == "broadcast" else 0, world):
            assert res[r][1][name] == want, (r, name, res[r][1][name])


def test_streaming_band_off_with_autotune_off() -> None:
    from interlink.transport import stream

    if not stream.available:
        pytest.skip(f"no streaming copy here: {stream.why_not}")
    res = run_ranks(2, _stream_suite, None, env={**STREAM_ENV, "INTERLINK_AUTOTUNE": "0"}, timeout=240)
    assert not [f for fl, _ in res for f in fl]
    for coll, n, rule, _ in STREAM_SHAPES[2]:
        for r in ([1] if coll == "broadcast" else [0, 1]):
            assert res[r][1][f"{coll} {n}"] == [rule] * STEPS, (r, coll, n)


# ---- a broadcast larger than a slot: peer_buffers, or through the slot in chunks (slots_pipelined) ----------------------

def _bcast_suite(rank: int, world: int, force: int, root: int) -> tuple[list[str], dict]:
    import interlink as dist
    from interlink.runtime import fastpath

    g = dist.init(timeout=60)
    fp = g._fast
    _force(fp, rank, force)
    fails: list[str] = []
    paths: dict = {}
    # (dtype, elements): 20-120 KB, counts not divisible by the chunks, below the band and above the slot
    shapes = [(np.float32, 20001), (np.int64, 10007), (np.float16, 40001), (np.uint8, 131071), (np.float64, 3001)]
    for step in range(STEPS):
        for dt, n in shapes:
            x = ((np.arange(n) * (rank + 3) + step) % 97).astype(dt)
            want = ((np.arange(n) * (root + 3) + step) % 97).astype(dt)
            dist.broadcast(x, root)
            if not np.array_equal(x, want):
                bad = np.flatnonzero(x != want)
                fails.append(f"rank {rank} step {step} {np.dtype(dt)} n={n}: {bad.size} wrong from {bad[0]}")
            sig = g.recorder[-1].plan.sigb.decode()
            paths.setdefault(f"{np.dtype(dt)} {n}", []).append(sig.split()[0].split(":")[1])
    band = fp.band(fastpath.BC)
    dist.destroy()
    return fails, {"paths": paths, "band": band}


@pytest.mark.parametrize("world,force,root", [(2, 1, 1), (3, 1, 2), (3, 0, 0)])
def test_a_broadcast_larger_than_a_slot_measures_fastd_against_the_slot_in_chunks(world: int, force: int,
                                                                                   root: int) -> None:
    """The broadcast's band runs to PIPE_CHUNKS / 2 slots (128 KiB here): above the slot (32 KiB) its other
    path is ``slots_pipelined``, the payload through the root's slot in chunks, two halves in turn. Every call right on
    every rank (odd counts, several dtypes, a root that is not rank 0), the probe takes both, every rank
    keeps the first rank's choice; 128 KiB and more: peer_buffers alone."""
    import interlink.transport.cma as cma
    from interlink.runtime.fastpath import PROBE_CALLS, probe_path

    if not cma.available:
        pytest.skip("no cross-memory attach: no peer_buffers to measure against")
    res = run_ranks(world, _bcast_suite, force, root, env=ENV, timeout=240)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    first = res[0][1]["paths"]
    assert all(r[1]["paths"] == first for r in res), [r[1]["paths"] for r in res]
    lo, hi = res[0][1]["band"]
    assert (lo, hi) == (16 << 10, 128 << 10)
    for name, seq in first.items():
        dt, n = name.split()
        nbytes = int(n) * np.dtype(dt).itemsize
        rule = "peer_buffers" if nbytes > 32 << 10 else "slots"
        other = "slots_pipelined" if nbytes > 32 << 10 else "peer_buffers"
        if not lo < nbytes <= hi:
            assert seq == [rule] * STEPS, (name, seq)
            continue
        probe = [(rule, other)[probe_path(k)] for k in range(PROBE_CALLS)]
        assert seq == probe + [(rule, other)[force]] * (STEPS - PROBE_CALLS), (name, seq)


def test_a_measured_shape_is_measured_again_and_follows_the_faster_path() -> None:
    """INTERLINK_AUTOTUNE_REPROBE=4: a chosen shape is measured again 4 calls after its choice (four blocks, the
    other path's first, the chosen one's in turn), then 8 after the next, 16 ...; the first rank's timings say
    the other path (1) is faster for the first 75 calls of a shape and the limits' path (0) from then on. Every
    rank takes the same path at every call whichever entry the call comes through (the compiled core counts
    the calls it takes, FastPath.pick the others), every result is numpy's, and the choice follows the
    timings: kept at the first re-measurement (calls 39-70), switched at the second (80-111)."""
    import interlink.transport.cma as cma

    if not cma.available:
        pytest.skip("no cross-memory attach: nothing to choose between")
    from interlink.runtime.fastpath import PROBE_CALLS, probe_path

    steps = 130
    got = _check(3, (1, 0, 75), env={"INTERLINK_AUTOTUNE_REPROBE": "4"}, steps=steps)
    again = [0] * 8 + [1] * 8 + [0] * 8 + [1] * 8  # a re-measurement with 1 chosen: 0's block first, in turn
    want = ([probe_path(k) for k in range(PROBE_CALLS)]  # calls 0-33; the choice read at call 34
            + [1] * 5  # 34-38: the choice (1); measured again from 34 + 1 + 4
            + again  # 39-70: 1 still faster: kept
            + [1] * 9  # 71-79: read at 71; the interval doubles to 8
            + again  # 80-111: now 0 is faster: switched
            + [0] * 17  # 112-128: read at 112, interval 16
            + [1])  # 129: the next re-measurement's first block, the other path's (now 1)
    assert len(want) == steps
    tuned = 0
    for name, seq in got["paths"].items():
        coll, dt, n = name.split()
        nbytes = int(n) * np.dtype(dt).itemsize
        default = _limits_path(coll, nbytes, 3)
        other = "slots" if default == "peer_buffers" else "peer_buffers"
        if not 2048 < nbytes <= 16384:
            assert seq == [default] * steps, (name, seq)
            continue
        tuned += 1
        assert seq == [(default, other)[k] for k in want], (name, seq)
    assert tuned == 5, got["paths"]


def test_a_reprobe_keeps_the_choice_within_its_margin() -> None:
    """rechoose: blocks 0 and 2 are the other path's, 1 and 3 the chosen one's (reprobe_path); the other's mean
    block median must be below 0.9 of the chosen one's to take over; without two timings in a block of either
    path the choice stays."""
    from interlink.runtime.autotune import PROBE_BLOCK, rechoose, reprobe_path

    assert [reprobe_path(w, 1) for w in range(0, 4 * PROBE_BLOCK, PROBE_BLOCK)] == [0, 1, 0, 1]
    assert [reprobe_path(w, 0) for w in (0, PROBE_BLOCK - 1, PROBE_BLOCK, 3 * PROBE_BLOCK)] == [1, 1, 0, 0]
    assert rechoose([[95, 95, 95], [100, 100, 100], [95, 95], [100, 100]], 0) == 0
    assert rechoose([[85, 85, 85], [100, 100, 100], [85, 85], [100, 100]], 0) == 1
    assert rechoose([[85, 85, 85], [100, 100, 100], [85, 85], [100, 100]], 1) == 0
    assert rechoose([[100, 100], [], [100], []], 1) == 1
    # one fast block of the other path is not enough where its other block is slow: the mean decides
    assert rechoose([[80, 80, 80], [100, 100, 100], [130, 130, 130], [100, 100, 100]], 0) == 0
    # the measured case: 4 ranks, all_reduce of 1 MiB, plain copies (chosen, 1) against streaming ones (0)
    assert rechoose([[444, 523, 232, 595, 271, 461], [230, 219, 325, 146, 279, 345],
                     [485, 490, 263, 534, 457, 971], [146, 293, 140, 298, 156, 333]], 1) == 1


def _reprobe_of(rank: int, world: int, values: list) -> int:
    import os

    os.environ["INTERLINK_AUTOTUNE_REPROBE"] = values[rank]
    import interlink as dist

    g = dist.init(timeout=60)
    got = g._fast.reprobe if g._fast is not None else -1
    dist.destroy()
    return got


@pytest.mark.parametrize("values,want", [(["64", "64", "64"], 64), (["100", "64", "127"], 64), (["0", "128", "128"], 0),
                                         (["4", "8", "8"], 0)])
def test_the_reprobe_interval_is_the_same_on_every_rank(values: list, want: int) -> None:
    """The interval is a power of two (rounded down) agreed through the host page at init: every rank takes
    the same, whatever each was given (the AND of the exponents: ranks set alike get their value; 0 on any
    rank, or exponents that share no bit, mean never)."""
    import interlink.transport.cma as cma

    got = run_ranks(3, _reprobe_of, values, env=ENV, timeout=120)
    assert len(set(got)) == 1, got
    if cma.available:  # the host page's paths (without cross-memory attach the band is off, the value still agreed)
        assert got[0] == want, got
