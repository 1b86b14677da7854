"""The host page's path choice (algorithms/hostpath.py): the limits named once, one pure function that the
runtime (runtime/fastpath.py), the model (model/cost.py) and calibration read."""

from __future__ import annotations

import pytest

from interlink.algorithms import hostpath
from interlink.algorithms.hostpage import pipe_scratch
from interlink.algorithms.hostpath import LIMITS, HostLimits, host_path, inlined, takes

KiB, MiB = 1 << 10, 1 << 20
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier")


def _former(coll: str, nbytes: int, n: int, lim: HostLimits, cma: bool, once: bool, direct):
    """The rules runtime/fastpath.py held before the choice moved into hostpath (FastPath.__init__, takes,
    _limit, small), written out as they were, and one rule since (the one-shot all_reduce up to
    all_reduce_oneshot_max where it is not reduced once, on 2 ranks all_reduce_oneshot_max_2, two_phase above): the
    oracle host_path must agree with."""
    slot = lim.slot_bytes
    mx = min(slot, lim.oneshot_max)
    direct_max = slot if n >= 3 else max(mx, min(slot, lim.peer_buffers_all_reduce_min))
    move_max = min(slot, lim.slots_max_2) if n == 2 else slot
    streams = 0 < lim.stream_min <= n * n * MiB
    ag = min(move_max, lim.slots_max_2_all_gather if n == 2 else
             (lim.slots_max_all_gather if streams else lim.all_gather_max_cached))
    a2a = move_max if n == 2 else min(move_max, lim.slots_max_all_to_all)
    limit = ag if coll == "all_gather" and cma else a2a if coll == "all_to_all" and cma else move_max
    if direct is None:
        if coll == "barrier":
            ok = True
        elif coll == "all_reduce":
            ok = nbytes <= direct_max or (cma and nbytes > max(direct_max, lim.peer_buffers_all_reduce_min))
        else:
            ok = nbytes > 0 and (nbytes <= move_max or cma)
        if not ok:
            return None
    big = nbytes > mx
    if coll == "all_reduce" and not (once and n > 1):  # since: the one-shot all_reduce up to its own limit
        big = nbytes > min(mx, lim.all_reduce_oneshot_max)
        if n == 2:  # and since: on 2 ranks up to all_reduce_oneshot_max_2
            big = nbytes > min(mx, lim.all_reduce_oneshot_max, lim.all_reduce_oneshot_max_2)
    two_phase = big and coll == "all_reduce" and nbytes <= direct_max
    if direct is None:
        direct = big and not two_phase and (coll == "all_reduce" or nbytes > limit)
    piped = coll == "broadcast" and not direct and nbytes > slot
    if piped and pipe_scratch(nbytes // 4) * 4 > slot:
        piped, direct = False, True
    once = coll == "all_reduce" and not big and once and n > 1
    return "fastd" if direct else "fastp" if piped else "fast2" if two_phase else "fast_once" if once else "fast"


def _sizes(lim: HostLimits) -> list[int]:
    edges = {4, 64, 4 * KiB} | set(lim.as_dict().values())
    return sorted({max(0, e + d) // 4 * 4 for e in edges | {2 * e for e in edges} | {4 * e for e in edges}
                   for d in (-4, 0, 4) if e + d < 1 << 40})


LIMIT_SETS = [HostLimits(), HostLimits(stream_min=0), HostLimits(stream_min=64 * MiB),
              HostLimits(oneshot_max=64 * KiB, inline_max=128 * KiB, slot_bytes=1 * MiB, slots_max_2=512 * KiB,
                         slots_max_2_all_gather=128 * KiB, slots_max_all_gather=1 * MiB, slots_max_all_to_all=256 * KiB,
                         peer_buffers_all_reduce_min=256 * KiB)]


@pytest.mark.parametrize("lim", LIMIT_SETS)
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_host_path_is_the_runtimes_former_rules(lim: HostLimits, n: int) -> None:
    """Behaviour kept: on every side of every limit, with and without cross-memory attach, reduce-once and a
    measured shape's forced side, host_path names the path the runtime's own rules took (old names)."""
    for coll in COLLECTIVES:
        for nbytes in ([0] if coll == "barrier" else _sizes(lim)):  # a barrier moves no payload
            for cma in (True, False):
                for once in (False, True):
                    for direct in ((None,) if coll == "barrier" else (None, True, False)):
                        want = _former(coll, nbytes, n, lim, cma, once, direct)
                        got = host_path(coll, nbytes, n, lim, cma=cma, reduce_once=once, itemsize=4, direct=direct)
                        assert (hostpath.ALIASES.get(want, want) if want else None) == got, \
                            (coll, nbytes, n, cma, once, direct, want, got)
                        if direct is None:
                            assert takes(coll, nbytes, n, lim, cma=cma) == (got is not None)


def test_inlined_runs_the_one_shot_sizes_and_the_slots_up_to_inline() -> None:
    lim = HostLimits()
    assert inlined("all_reduce", lim.oneshot(), hostpath.SLOTS, lim)
    assert not inlined("all_reduce", lim.oneshot() + 4, hostpath.TWO_PHASE, lim)
    for coll in hostpath.MOVES:
        assert inlined(coll, lim.inline(), hostpath.SLOTS, lim)
        assert not inlined(coll, lim.inline() + 4, hostpath.SLOTS, lim)
        assert not inlined(coll, lim.oneshot() + 4, hostpath.PEER_BUFFERS, lim)


@pytest.mark.parametrize("name", [k for k, v in LIMITS.items() if v.env])
def test_every_limit_is_read_from_its_environment_variable(name: str) -> None:
    env = {LIMITS[name].env: str(3 * KiB * 1024 // 8)}  # 384 KiB: within every clamp of the defaults
    got = HostLimits.from_env(env, stream_min=16 * MiB)
    assert getattr(got, name) == 384 * KiB
    base = HostLimits.from_env({}, stream_min=16 * MiB)
    assert base == HostLimits(), "the defaults are LIMITS'"


def test_the_policy_reads_the_limits(monkeypatch) -> None:
    from interlink.runtime import policy

    monkeypatch.setenv("INTERLINK_SHM_SLOTS_MAX_BYTES_A2A", str(512 * KiB))
    monkeypatch.setenv("INTERLINK_FAST_MAX_BYTES", str(128 * KiB))
    lim = policy.host_limits()
    assert lim.slots_max_all_to_all == policy.slots_max_bytes_all_to_all() == 512 * KiB
    assert lim.oneshot_max == policy.fast_small_bytes() == 128 * KiB
    monkeypatch.setenv("INTERLINK_FAST_MAX_BYTES", "0")
    assert policy.host_limits().slot_bytes == policy.fast_max_bytes() == 0


def test_the_profile_records_the_limits_and_the_model_reads_them_back() -> None:
    from interlink.model.params import default_params

    lim = HostLimits(oneshot_max=128 * KiB, slots_max_all_to_all=512 * KiB, stream_min=0)
    params = default_params().replace(lim.to_params(), "test")
    back = HostLimits.from_params(params)
    for name, spec in LIMITS.items():
        if spec.param is not None:
            assert getattr(back, name) == getattr(lim, name), name
    assert HostLimits.from_params(default_params()).slot_bytes == HostLimits().slot_bytes


def test_old_names_are_aliases() -> None:
    assert {hostpath.canonical(k) for k in hostpath.ALIASES} == set(hostpath.PATHS)
    assert hostpath.canonical("ring") == "ring"


def test_former_names_still_name_the_paths() -> None:
    """INTERLINK_ALGO, algorithm= and the model accept the former names (fast, fast_once, fast2, fastd, fastp)."""
    from interlink.algorithms import registry
    from interlink.model import predict
    from interlink.model.tuner import parse_algo_env

    assert parse_algo_env("all_reduce:fastd,broadcast:fastp") == {"all_reduce": "peer_buffers",
                                                                  "broadcast": "slots_pipelined"}
    assert parse_algo_env("fast2") == {"all_reduce": "two_phase"}
    for former, name in hostpath.ALIASES.items():
        assert registry.canonical(former) == name
    assert registry.get_schedule("all_reduce", "fastd", 2, 8).algorithm == "peer_buffers"
    assert predict("all_reduce", 8, "cpu-host", nranks=2, algorithm="fast", profile=False).algorithm == "slots"
