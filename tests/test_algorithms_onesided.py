"""One-sided steps in the IR: Get (read a peer's chunk as it is at the start of the round). Every
registered algorithm's one-sided form verifies, back and forth, with the same traffic; the JSON form
round-trips; broken one-sided Schedules fail validation or verification."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import Get, get_schedule, one_sided, registry, two_sided, verify_schedule
from interlink.algorithms.schedule import ROOTED, Chunk, Recv, Round, Schedule, Send, has_switch_steps
from interlink.algorithms.traffic import from_schedule
from interlink.errors import ScheduleError, VerificationError


def _cases():
    for e in registry.entries():
        for p in (1, 2, 3, 5, 8):
            params = {"local_size": 2 if p % 2 == 0 else 1} if "local_size" in e.params else {}
            for n in (0, 1, 7, 13):
                yield e.collective, e.algorithm, p, n, (p - 1 if e.collective in ROOTED else 0), params


@pytest.mark.parametrize("collective,algorithm", sorted({(e.collective, e.algorithm) for e in registry.entries()}))
def test_every_algorithm_in_one_sided_form(collective: str, algorithm: str) -> None:
    for c, a, p, n, root, params in _cases():
        if (c, a) != (collective, algorithm):
            continue
        s = get_schedule(c, a, p, n, root, **params)
        o = one_sided(s)
        assert not any(isinstance(st, (Send, Recv)) for prog in o.ranks for rnd in prog for st in rnd.steps)
        verify_schedule(o, dtypes=(np.float32, np.int32))
        back = two_sided(o)
        verify_schedule(back, dtypes=(np.int64,))
        if has_switch_steps(s):
            # in-switch steps are lowered (executors of this form have no reducing switch): no switch step
            # is left for an executor to skip, and the lowering computes the same result (verified above)
            assert not has_switch_steps(o) and not has_switch_steps(back)
            continue
        assert o.sent_per_rank() == s.sent_per_rank() and o.recv_per_rank() == s.recv_per_rank()
        assert o.comm_rounds == s.comm_rounds and o.max_sent_per_round() == s.max_sent_per_round()
        assert o.reduced_per_round() == s.reduced_per_round()
        ta, tb = from_schedule(s), from_schedule(o)
        # the same bytes between the same ranks (a put's Signal is a message of no bytes: its latency)
        assert [(sorted((a, b, e) for a, b, e in zip(x.src, x.dst, x.elems) if e), x.repeat) for x in ta.phases] == \
            [(sorted((a, b, e) for a, b, e in zip(x.src, x.dst, x.elems) if e), x.repeat) for x in tb.phases]


def test_one_sided_json_round_trip() -> None:
    o = one_sided(get_schedule("all_reduce", "ring", 4, 10))
    back = Schedule.from_json(o.dumps())
    assert back.ranks == o.ranks and back.meta.get("form") == "one-sided"


def _mutate(s: Schedule, r: int, k: int, fn) -> Schedule:
    ranks = [list(prog) for prog in s.ranks]
    ranks[r][k] = Round(tuple(fn(list(ranks[r][k].steps))))
    return Schedule(s.collective, s.algorithm, s.nranks, s.count, s.root, dict(s.buffers),
                    tuple(tuple(prog) for prog in ranks), dict(s.meta))


def test_a_get_of_the_wrong_chunk_fails_verification() -> None:
    o = one_sided(get_schedule("all_gather", "ring", 4, 6))
    k = next(k for k, rnd in enumerate(o.ranks[1])
             if any(isinstance(st, Get) and st.src.buffer == "output" for st in rnd.steps))

    def shift(steps):
        i = next(i for i, st in enumerate(steps) if isinstance(st, Get) and st.src.buffer == "output")
        g = steps[i]
        src = Chunk(g.src.buffer, (g.src.offset + 6) % 24, g.src.count)  # another rank's block
        steps[i] = Get(g.peer, src, g.dst, g.reduce)
        return steps

    bad = _mutate(o, 1, k, shift).validate()
    with pytest.raises(VerificationError):
        verify_schedule(bad, dtypes=(np.float32,))


def test_a_reducing_get_turned_plain_fails_verification() -> None:
    o = one_sided(get_schedule("all_reduce", "ring", 3, 9))
    k = next(k for k, rnd in enumerate(o.ranks[0]) if any(isinstance(st, Get) and st.reduce for st in rnd.steps))

    def plain(steps):
        i = next(i for i, st in enumerate(steps) if isinstance(st, Get) and st.reduce)
        g = steps[i]
        steps[i] = Get(g.peer, g.src, g.dst, False)
        return steps

    with pytest.raises(VerificationError):
        verify_schedule(_mutate(o, 0, k, plain), dtypes=(np.float32,))


def test_owner_writing_a_chunk_peers_read_in_the_same_round_is_refused() -> None:
    buffers = {"input": 4, "output": 4}
    # rank 1 reads rank 0's output[0:2] while rank 0 plainly stores into output[0:2] from rank 1
    r0 = (Round((Get(1, Chunk("input", 0, 2), Chunk("output", 0, 2)),)),)
    r1 = (Round((Get(0, Chunk("output", 0, 2), Chunk("output", 2, 2)),)),)
    with pytest.raises(ScheduleError, match="read by a peer"):
        Schedule("all_gather", "bad", 2, 2, 0, buffers, (r0, r1)).validate()


@pytest.mark.parametrize("step,word", [
    (Get(0, Chunk("input", 0, 2), Chunk("output", 0, 2)), "itself"),
    (Get(5, Chunk("input", 0, 2), Chunk("output", 0, 2)), "out of range"),
    (Get(1, Chunk("input", 0, 2), Chunk("output", 0, 3)), "get of 2 elements into 3"),
    (Get(1, Chunk("input", 0, 2), Chunk("input", 0, 2)), "writes the input"),
])
def test_malformed_gets_are_refused(step, word) -> None:
    buffers = {"input": 4, "output": 4}
    with pytest.raises(ScheduleError, match=word):
        Schedule("all_gather", "bad", 2, 2, 0, buffers, ((Round((step,)),), (Round(()),))).validate()
