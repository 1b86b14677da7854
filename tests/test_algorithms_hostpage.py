"""The runtime's shared-memory paths as Schedules (algorithms/hostpage.py): fast, two_phase and peer_buffers verify
over ranks and counts, in one-sided and two-sided form; a mutated one fails verification; the host-page
executor's reading of a Schedule (host_plan) takes the split the Schedule says and refuses a Schedule it
cannot run, before any byte moves."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import get_schedule, hostpage, one_sided, two_sided, verify_schedule
from interlink.algorithms.hostpage import HOST_PAGE, host_plan
from interlink.algorithms.schedule import Builder, Chunk, Copy, Get, Reduce, Round, Schedule, inp, out
from interlink.errors import ScheduleError, VerificationError
from interlink.runtime.pageplan import LOCAL, Move, PutOp, compile_page

CASES = [("all_reduce", "slots"), ("broadcast", "slots"), ("all_gather", "slots"), ("reduce_scatter", "slots"),
         ("barrier", "slots"), ("all_reduce", "slots_once"), ("all_reduce", "two_phase"), ("all_reduce", "peer_buffers"), ("broadcast", "peer_buffers"),
         ("all_gather", "peer_buffers"), ("reduce_scatter", "peer_buffers"), ("broadcast", "slots_pipelined")]


@pytest.mark.parametrize("coll,algo", CASES)
def test_host_page_schedules_verify(coll: str, algo: str) -> None:
    for p in (1, 2, 3, 4, 5, 8):
        for n in ([0] if coll == "barrier" else [0, 1, 7, 13, 2 * p + 1, 61]):
            # slots_once: every rank as the reducer (the runtime takes whichever publishes last)
            for root in (range(p) if algo == "slots_once" else sorted({0, p - 1})):
                s = get_schedule(coll, algo, p, n, root)
                verify_schedule(s, dtypes=(np.float32, np.int32))
                verify_schedule(one_sided(s), dtypes=(np.float64,))
                verify_schedule(two_sided(s), dtypes=(np.int64,))
                for r in range(p):
                    if algo != "slots_once":  # every path but the reduced-once one runs step by step above 64 KiB
                        compile_page(s, r)
                    if algo in ("slots", "slots_once"):  # the one-shot latency path reads their form
                        host_plan(s, r)
    assert {a for _, a in CASES} == set(HOST_PAGE)


def _mutate(s: Schedule, r: int, k: int, fn) -> Schedule:
    ranks = [list(prog) for prog in s.ranks]
    ranks[r][k] = Round(tuple(fn(list(ranks[r][k].steps))))
    return Schedule(s.collective, s.algorithm, s.nranks, s.count, s.root, dict(s.buffers),
                    tuple(tuple(prog) for prog in ranks), dict(s.meta))


def test_a_dropped_read_fails_verification() -> None:
    s = get_schedule("all_reduce", "two_phase", 3, 10)
    bad = _mutate(s, 1, 1, lambda st: [x for x in st if not (isinstance(x, Get) and x.peer == 2)])
    with pytest.raises(VerificationError):
        verify_schedule(bad)
    s = get_schedule("all_gather", "peer_buffers", 3, 5)
    bad = _mutate(s, 0, 0, lambda st: st[:-2])  # rank 0's last push and its signal
    with pytest.raises((VerificationError, ScheduleError)):
        verify_schedule(bad)


def test_fastp_overwrites_a_slot_half_only_after_every_receiver_read_it() -> None:
    """The pipelined broadcast reuses each half of the root's slot every other chunk: the host page's program
    of the root waits, before the round that overwrites a half, for every receiver to have finished the round
    that read it (compile_page derives it from the Schedule; nothing in the runtime adds it), and each
    receiver reads chunk k only after the root finished the round that wrote it. A Schedule whose receiver
    reads a chunk from the wrong half fails verification."""
    from interlink.algorithms.hostpage import PIPE_CHUNKS

    p, n, root = 3, 80, 1
    s = get_schedule("broadcast", "slots_pipelined", p, n, root)
    assert s.nrounds == PIPE_CHUNKS + 1 and s.buffers["scratch"] == 2 * (n // PIPE_CHUNKS)
    prog = compile_page(s, root)
    befores = {r.first: dict(r.before) for r in prog.rounds}
    for k in range(2, PIPE_CHUNKS):  # round k writes the half that receivers read in round k - 1
        assert befores[k] == {0: k, 2: k}, (k, befores)
    for r in (0, 2):
        rp = compile_page(s, r)
        for rnd in rp.rounds:
            if rnd.first >= 1:
                assert dict(rnd.before) == {root: rnd.first}, (r, rnd.first, rnd.before)
    wrong = _mutate(s, 0, 3, lambda st: [Get(x.peer, Chunk("scratch", (x.src.offset + 10) % 20, x.src.count), x.dst)
                                         if isinstance(x, Get) else x for x in st])
    with pytest.raises((VerificationError, ScheduleError)):
        verify_schedule(wrong)


def test_host_plan_reads_the_one_shot_form_and_refuses_what_it_cannot_run() -> None:
    assert host_plan(get_schedule("all_reduce", "slots_once", 4, 10, 3), 1)["reducer"] == 3
    for algo in ("two_phase", "peer_buffers"):  # these run step by step (runtime/pageplan.py)
        with pytest.raises(ScheduleError, match="step by step"):
            host_plan(get_schedule("all_reduce", algo, 3, 10), 0)
    with pytest.raises(ScheduleError, match="not a host-page Schedule"):
        host_plan(get_schedule("all_reduce", "ring", 3, 10), 0)
    # a fast all_reduce that reads one peer twice and another not at all
    f = get_schedule("all_reduce", "slots", 3, 4)
    twice = _mutate(f, 0, 1, lambda st: [Get(1, x.src, x.dst, x.reduce) if isinstance(x, Get) else x for x in st])
    with pytest.raises(ScheduleError, match="host-page executor cannot run"):
        host_plan(twice, 0)
    # the executor reduces the slots in rank order, its own in its place: a Schedule that says another order
    # (its own reduced after the reads, not inline; the peers swapped) is refused, though its sum verifies
    s4 = get_schedule("all_reduce", "slots", 4, 6)
    own_last = _mutate(s4, 2, 1, lambda st: [x for x in st if isinstance(x, Get)] +
                       [Reduce(x.src, x.dst) for x in st if isinstance(x, Reduce)])
    verify_schedule(own_last, dtypes=(np.int32,))
    with pytest.raises(ScheduleError, match="rank order"):
        host_plan(own_last, 2)
    swapped = _mutate(s4, 0, 1, lambda st: [st[0], st[2], st[1], st[3]])
    with pytest.raises(ScheduleError, match="rank order"):
        host_plan(swapped, 0)
    for coll in ("all_reduce", "reduce_scatter"):  # every rank's chain is in rank order
        for r in range(5):
            host_plan(get_schedule(coll, "slots", 5, 10), r)


def test_host_paths_compile_into_the_steps_of_their_schedule() -> None:
    """compile_page keeps the reference interpreter's order (one-sided steps, then local ones), fuses the
    steps into one destination into one chain, and waits only on the Schedule's dependencies."""
    # broadcast peer_buffers, 4 ranks, root 2, 10 elements: the receivers pull [0, 8), the root pushes [8, 10)
    s = get_schedule("broadcast", "peer_buffers", 4, 10, 2)
    root = compile_page(s, 2)
    assert [type(op) for op in root.rounds[0].ops] == [PutOp] * 3
    assert [(op.peer, op.off, op.count, op.dst_off) for op in root.rounds[0].ops] == [(0, 8, 2, 8), (1, 8, 2, 8),
                                                                                      (3, 8, 2, 8)]
    assert root.readers == (0, 1, 3) and root.rounds[0].waits == ()
    recv = compile_page(s, 0)
    (mv,) = recv.rounds[0].ops
    assert (mv.buf, mv.off, mv.count) == (1, 0, 8) and mv.srcs[0].peer == 2 and not mv.srcs[0].reduce
    assert recv.rounds[0].waits == (2,) and recv.readers == () and recv.maps == (2,)
    # reduce_scatter peer_buffers, 3 ranks: rank 1's block from rank 0 (copied), rank 2 (reduced), its own
    # (reduced) last; the second round reads inputs only, so it runs on from the first as one chain
    rs = compile_page(get_schedule("reduce_scatter", "peer_buffers", 3, 5), 1)
    (chain,) = rs.rounds[0].ops
    assert [(x.peer, x.off, x.reduce) for x in chain.srcs] == [(0, 5, False), (2, 5, True), (LOCAL, 5, True)]
    # all_reduce peer_buffers, 3 ranks: reduce the own slice from the peers' inputs, then put it into their
    # outputs. Nobody else touches those chunks, so the puts wait for nothing and the three rounds run as
    # one, ending when both peers' puts have landed
    ar = compile_page(get_schedule("all_reduce", "peer_buffers", 3, 10), 0)
    assert [(rnd.first, rnd.end, rnd.before, rnd.waits) for rnd in ar.rounds] == [(0, 3, (), (1, 2))]
    # the first round's copy of the own slice joins the chain that reduces into it; all_reduce runs in
    # place, so the chain starts from what the destination holds: the peers' slices reduced into it; the
    # puts of the finished slice become the chain's pushes (each piece written out while in cache)
    (chain,) = ar.rounds[0].ops
    assert not ar.rounds[0].early and [(x.peer, x.reduce) for x in chain.srcs] == [(1, True), (2, True)]
    assert not chain.hazard and chain.pushes == ((1, 0), (2, 0)) and (chain.off, chain.count) == (0, 4)
    # all_gather peer_buffers: the copy of the own block into the own output leaves the early steps and carries
    # the puts of that block (the same chunk of the input) as pushes: the input is read once
    for p in (2, 4):
        ag = compile_page(get_schedule("all_gather", "peer_buffers", p, 7), 1)
        ((cp,),) = [rnd.ops for rnd in ag.rounds]
        assert not ag.rounds[0].early and (cp.buf, cp.off, cp.count) == (1, 7, 7)
        assert cp.pushes == tuple((j, 7) for j in range(p) if j != 1) and cp.noop
    # the two-phase form (two_phase's, on the own buffers) instead waits for each owner's slice before copying
    tp = compile_page(hostpage.two_phase("peer_buffers", 3, 10), 0)
    assert [(rnd.first, rnd.end, rnd.before) for rnd in tp.rounds] == [(0, 2, ()), (2, 3, ((1, 2), (2, 2)))]
    # reduce_scatter may run out of place: its sunk copy stays the chain's first source
    rs2 = compile_page(get_schedule("reduce_scatter", "slots", 3, 4), 0)
    (chain,) = rs2.rounds[1].ops
    assert [(x.peer, x.reduce) for x in chain.srcs] == [(LOCAL, False), (1, True), (2, True)] and chain.hazard
    assert ar.readers == (1, 2)
    # two_phase, 3 ranks, in the slots: round 1 reads the peers' slots written in their round 0 (only the two
    # slices the peers reduce); round 2 reads the slices they wrote back in their round 1; the round-0 copies
    # may be skipped when the input is shared (the peers then read it in place: nothing writes those slices
    # of the slot again)
    f2 = compile_page(get_schedule("all_reduce", "two_phase", 3, 10), 1)
    assert [(rnd.first, rnd.end, rnd.before) for rnd in f2.rounds] == [(0, 1, ()), (1, 2, ((0, 1), (2, 1))),
                                                                       (2, 3, ((0, 2), (2, 2)))]
    assert f2.scratch == 10 and f2.readers == () and [op.elide for op in f2.rounds[0].early] == [True, True]
    assert [(op.off, op.count) for op in f2.rounds[0].early] == [(0, 4), (7, 3)]
    # streamed all_gather in the slots: the copy into the slot may be skipped when the input is shared
    ag = compile_page(get_schedule("all_gather", "slots", 3, 4), 0)
    assert [op.elide for op in ag.rounds[0].early] == [True, False] and ag.slot_readers == (1, 2)
    assert all(src.alt == 0 for op in ag.rounds[1].ops for src in op.srcs) and ag.maps == (1, 2)
    # what the host page cannot run is refused before any byte moves
    with pytest.raises(ScheduleError, match="host page runs"):
        compile_page(get_schedule("all_reduce", "ring", 3, 10), 0)


def test_a_schedule_that_overwrites_what_a_peer_reads_in_the_same_round_is_refused() -> None:
    s = get_schedule("all_gather", "slots", 3, 4)
    # rank 0 writes its slot again in round 1, while ranks 1 and 2 read it
    bad = _mutate(s, 0, 1, lambda st: st + [Copy(Chunk("input", 0, 4), Chunk("scratch", 0, 4))])
    with pytest.raises(ScheduleError, match="same round"):
        compile_page(bad, 0)


def test_a_put_waits_for_what_touches_its_chunk_and_nothing_else() -> None:
    """pageplan's rule for a Put into peer j's output chunk d in round k: j must have finished its last
    earlier round that touches d, every other rank its earlier rounds that read d from j; a read of d in
    the same round is refused; with nobody touching d the put waits for nobody (it may fuse with the
    rounds before it)."""
    def prog(touch: str):
        b = Builder("all_gather", "t", 3, 4, 0)
        b.copy(0, 0, inp(0, 4), out(0, 4))
        if touch == "owner":  # rank 1 itself writes the chunk in round 0
            b.copy(0, 1, inp(0, 4), out(4, 4))
        elif touch == "reader":  # rank 2 reads rank 1's chunk in round 0
            b.get(0, 2, 1, out(4, 4), out(8, 4))
        elif touch == "race":  # ... in the round of the put
            b.get(1, 2, 1, out(4, 4), out(8, 4))
        elif touch == "other":  # rank 1 writes another chunk (its own input is chunk d in place: not that)
            b.get(0, 1, 2, inp(0, 4), out(8, 4))
        elif touch == "alias":  # rank 1 reads its input, which is chunk d when it runs in place
            b.copy(0, 1, inp(0, 4), out(8, 4))
        b.get(1, 0, 2, inp(0, 4), out(8, 4))
        b.put(1, 0, 1, inp(0, 4), out(4, 4))
        b.signal(1, 0, 1)
        return b.build()

    assert [r.before for r in compile_page(prog("owner"), 0).rounds] == [(), ((1, 1),)]
    assert [r.before for r in compile_page(prog("reader"), 0).rounds] == [(), ((2, 1),)]
    assert [r.before for r in compile_page(prog("alias"), 0).rounds] == [(), ((1, 1),)]
    with pytest.raises(ScheduleError, match="puts into .* while rank 2 reads it in the same round"):
        compile_page(prog("race"), 0)
    for touch in ("other", "none"):
        (rnd,) = compile_page(prog(touch), 0).rounds
        assert rnd.before == () and (rnd.first, rnd.end) == (0, 2)
