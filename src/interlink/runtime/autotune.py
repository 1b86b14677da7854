"""The measured band of the host page (runtime/fastpath.py's autotuning concern): where a fixed limit of
algorithms/hostpath.py is a guess, a call shape's first calls run both paths in blocks, the host's first
rank times them, publishes the faster in the host page's choice table, and every rank keeps it
(policy.autotune, INTERLINK_AUTOTUNE; the same for streaming against plain copies near policy.stream_min_bytes).
"""

from __future__ import annotations

import zlib
from typing import Any, Optional

import numpy as np

from ..ops import ReduceOp
from ..transport import shm
from . import policy
from .pageproto import NAMES, BAR, Small

#: the first calls of a measured call shape: PROBE_WARM calls by the limits' path (the user's buffers'
#: first touches), then four blocks of PROBE_BLOCK calls, the paths in turn, the first PROBE_SKIP calls of
#: each block untimed (they find the other path's lines in the caches): 2 ranks, 1.5 MiB all_gather output,
#: a path's first calls after the other's took 1.5-2x its later ones (benchmarks/RESULTS.md)
PROBE_WARM, PROBE_BLOCK, PROBE_SKIP, PROBE_BLOCKS = 2, 8, 2, 4
PROBE_CALLS = PROBE_WARM + PROBE_BLOCKS * PROBE_BLOCK
#: a re-measurement (policy.autotune_reprobe): four blocks, the other path's first, then the chosen one's, in
#: turn, so that every block follows a block of the other path (the chosen path's block first, warm, and the
#: other's after it, cold, kept the choice whatever the timings: 4 ranks, all_reduce of 1 MiB, plain copies
#: 200-250 us a call and streaming ones 340-440, jobs that had switched to streaming on one noisy block kept it
#: to their end: benchmarks/RESULTS.md, "Re-measurements in turn"); the first rank switches when the other's
#: mean block median is below REPROBE_SWITCH of the chosen one's (a margin, so that noise does not flip the
#: choice back and forth); the interval doubles after each, up to REPROBE_GROWTH times the first
REPROBE_CALLS = PROBE_BLOCKS * PROBE_BLOCK
REPROBE_SWITCH = 0.9
REPROBE_GROWTH = 32


def probe_path(i: int) -> int:
    """Which path (0: the limits', 1: the other) probe call i of a shape takes."""
    return 0 if i < PROBE_WARM else ((i - PROBE_WARM) // PROBE_BLOCK) & 1


def choose(blocks: list, split: tuple = ()) -> int:
    """The path whose block medians (the median of each block's timed calls) average lower; 0 (the limits')
    on a tie or without timings. A path in ``split`` ran its two blocks with its two copies into the slot
    (plain, then streaming: Autotune._force_copies): its cost is its better block's median, the copy its
    measurement of the copies then keeps (Autotune._seed). Medians per block: a burst of noise moves one block's median, not every
    call's weight. Their mean, not their best: the best of two blocks favours the noisier path (4 ranks,
    broadcast of 16 MiB in compare.py's warm-up: peer_buffers's blocks 2413 and 3171 us, slots_pipelined's 2452 and 2777;
    the best block kept peer_buffers, 3184 us a call once timed against slots_pipelined's 2478-2551; benchmarks/RESULTS.md). A path's first block can still be warming up (2 ranks, 1 MiB of all_gather output: the
    slots' first block 57-62 us, its second 34-40, peer_buffers 50-61 in both): the mean still takes the slots."""
    meds: list[list[float]] = [[], []]
    for b, ts in enumerate(blocks):
        if len(ts) > 1:
            meds[b & 1].append(float(np.median(ts)))
    if not meds[0] or not meds[1]:
        return 0
    cost = [min(m) if p in split else sum(m) / len(m) for p, m in enumerate(meds)]
    return 1 if cost[1] < cost[0] else 0


def rechoose(blocks: list, current: int) -> int:
    """A re-measurement's choice: blocks 0 and 2 timed the other path, 1 and 3 the chosen path ``current``
    (reprobe_path); the other when the mean of its block medians is below REPROBE_SWITCH of the chosen one's,
    else ``current`` (also where either path has no block of two timings)."""
    meds: list[list[float]] = [[], []]  # [the other's, the chosen one's]
    for b, ts in enumerate(blocks):
        if len(ts) > 1:
            meds[b & 1].append(float(np.median(ts)))
    if not meds[0] or not meds[1]:
        return current
    other, chosen = (sum(m) / len(m) for m in meds)
    return 1 - current if other < REPROBE_SWITCH * chosen else current


def reprobe_path(w: int, current: int) -> int:
    """The path call w of a re-measurement takes: blocks of PROBE_BLOCK calls, the other path's first."""
    return current if (w // PROBE_BLOCK) & 1 else 1 - current


class TuneState:
    """The measurement of one call signature (shared by its cached shapes: a flat and an N-d array of
    the same call count as one): calls so far (every entry counts each call once: FastPath.pick, and the
    compiled core's Bind for a chosen shape), the host's first rank's timings per block of the window in
    progress, the choice, and when it is measured again."""

    __slots__ = ("key", "calls", "times", "choice", "last", "path", "until", "period")

    def __init__(self, key: int, period: int = 0) -> None:
        self.key = key  # the signature's CRC, non-zero: its entry in the host page's choice table
        self.calls = 0
        self.times: list[list] = [[] for _ in range(PROBE_BLOCKS)]  # the first rank's, per block
        self.choice: Optional[int] = None
        self.last = -1  # the probe call in flight: its index in its window
        self.path = -1  # the path (0, 1) of the probe call in flight; -1: not a probe call
        # the call from which the next re-measurement runs (the compiled core leaves the shape to pick
        # from there); never where period is 0
        self.until = 1 << 62
        self.period = period  # calls from a choice to the next re-measurement (0: none)


class Tune:
    """A cached call shape in the band where both paths are measured: alts[0] the fixed limits' path, alts[1]
    the other, and the signature's shared TuneState."""

    __slots__ = ("alts", "state")

    def __init__(self, alts: tuple, state: TuneState) -> None:
        self.alts = alts
        self.state = state


class Autotune:
    """The measured band's calls (a mixin of FastPath)."""

    def stream_tuned(self, kind: int, nbytes: int) -> bool:
        """Whether a call of this kind and input size measures streaming against plain copies into its
        outputs and its slot (policy.stream_band around stream_min, down to policy.PAGE_STREAM_MEASURE_MIN:
        where the ranks' cores share no cache a plain copy into the slot takes every line back from the
        peers that read it, at any size; only a Schedule run step by step streams, the inlined calls are
        the compiled core's, runtime/_hotcore.c slot_lead)."""
        if not self.autotune_stream or kind == BAR:
            return False
        lo, hi = policy.stream_band(self.stream_min)
        return min(lo, policy.PAGE_STREAM_MEASURE_MIN) < self.host_outputs(kind, nbytes) <= hi

    # ---- the measured band: the slots or peer_buffers, chosen by the host's first rank's timings ---------------
    def _tuned(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: ReduceOp, root: int, group: str,
               alts: Optional[tuple] = None) -> Small:
        """A shape in a measured band: a Small carrying both paths' Smalls (the rule's choice first: the
        limits', or ``alts``: the rule's copies and the other copies into the outputs) and its signature's
        TuneState, shared by every cached shape of that signature (a shape lies in one band only)."""
        if alts is None:
            first = a.nbytes > self._limit(kind)
            alts = (self.small(kind, a, out, op, root, group, first),
                    self.small(kind, a, out, op, root, group, not first))
        key = zlib.crc32(f"{NAMES[kind]} {a.dtype} n={a.size} {op.name} root={root} {group}".encode()) | 1 << 32
        st = self.tuning.get(key)
        if st is None:
            if len(self.tuning) > 4096:  # the same calls on every rank: cleared at the same call everywhere
                self.tuning.clear()
            st = self.tuning[key] = TuneState(key, self.reprobe)
        sc = Small(kind, alts[0].sigb, alts[0].nbytes, alts[0].sends)
        sc.tune = Tune(alts, st)
        return sc

    def pick(self, tn: Tune) -> Small:
        """The Small this call of a measured shape runs. The first PROBE_CALLS calls take the two paths in
        blocks, in turn (``probe_path``); at the start of the last of them the host's first rank (local rank 0)
        compares the mean of each path's block medians it measured (``timed``, ``choose``) and writes the faster
        path into the host page's choice table before it publishes that call; at the next call every rank (the
        first too) reads the table, after every rank has seen that publication (every call of the host page
        waits for every peer's header), and keeps the choice. Another shape's choice in the same entry (a key
        that differs) means the limits' path, on every rank alike. From ``period`` calls later
        (policy.autotune_reprobe) the shape is measured again: four blocks, the other path's and the chosen
        one's in turn (``reprobe_path``, ``rechoose``), published and read the same way; the interval then
        doubles. Every rank counts the same calls, so every rank takes the same path at every call."""
        st = tn.state
        i = st.calls
        st.calls = i + 1
        if st.choice is None:
            if i < PROBE_CALLS:
                if i == PROBE_CALLS - 1 and self.me == 0:
                    self._publish_choice(st.key, choose(st.times, self._split(tn)))
                st.last = i
                st.path = probe_path(i)
                if self.me == 0 and i >= PROBE_WARM:
                    self._force_copies(tn, i)
                return tn.alts[st.path]
            if self.me == 0:
                self._seed(tn)
            return tn.alts[self._chosen(st, i)]
        if i < st.until:
            st.path = -1
            return tn.alts[st.choice]
        w = i - st.until  # a re-measurement: the other path's block, the chosen one's, in turn
        if w < REPROBE_CALLS:
            if w == 0:
                st.times = [[] for _ in range(PROBE_BLOCKS)]
            if w == REPROBE_CALLS - 1 and self.me == 0:
                self._publish_choice(st.key, rechoose(st.times, st.choice))
            st.last = w
            st.path = reprobe_path(w, st.choice)
            return tn.alts[st.path]
        return tn.alts[self._chosen(st, i)]

    # ---- a path's copies into the slot, measured with the path ----------------------------------------------
    # A path through the slots whose copies into the slot rank 0 measures (plain against streaming stores,
    # runtime/_hotcore.c slot_lead) would run its first measured calls on plain copies, where the cores share
    # no cache four times the streaming ones' cost, and lose the path's measurement on a copy it does not keep
    # (2 ranks, all_gather of 1 MiB: the slots' blocks 69-112 us against peer_buffers's 65-83, peer_buffers
    # kept at 70 us a call, where the slots with streaming copies run in 58: benchmarks/RESULTS.md). So while
    # the paths are measured, that path's first block makes plain copies and its second streaming ones; its
    # cost is its better block, and its copy measurement starts from the two blocks' medians.

    def _lead(self, alt: Small) -> Any:
        """The compiled core's form of this path (Shape or Prog) where rank 0 measures its copies into the
        slot; else None."""
        core = self.core
        if core is None:
            return None
        obj = alt.ccore if alt.ccore is not None else alt.cprog
        return obj if obj is not None and core.leads(obj) else None

    def _split(self, tn: Tune) -> tuple:
        """The paths of a measured shape whose blocks ran with the two copies into the slot."""
        return tuple(p for p in (0, 1) if self._lead(tn.alts[p]) is not None)

    def _force_copies(self, tn: Tune, i: int) -> None:
        """Probe call i on rank 0: the copy into the slot of its path's block (its first block plain, its
        second streaming) where that path's copies are measured."""
        b = (i - PROBE_WARM) // PROBE_BLOCK
        lead = self._lead(tn.alts[b & 1])
        if lead is not None:
            lead.force = 1 if b < 2 else 2

    def _seed(self, tn: Tune) -> None:
        """After the paths' measurement, rank 0: each split path's copy measurement from its blocks'
        medians (plain: its first block, streaming: its second); where a block has too few timings, its own
        measurement from the start (slot_lead)."""
        st = tn.state
        for p in (0, 1):
            lead = self._lead(tn.alts[p])
            if lead is None:
                continue
            plain, streamed = st.times[p], st.times[p + 2]
            if len(plain) > 1 and len(streamed) > 1:
                lead.seed(float(np.median(plain)) * 1e9, float(np.median(streamed)) * 1e9)
            else:
                lead.force = 0

    def _chosen(self, st: TuneState, i: int) -> int:
        """Call i, the one after a window: every rank reads the first rank's choice; the next re-measurement
        is set (the first ``period`` calls on, then twice the last interval, up to REPROBE_GROWTH times)."""
        again = st.choice is not None
        st.choice = self._read_choice(st.key)
        if self.me == 0:
            self.pending.pop(st.key, None)  # every rank has read it once this rank finishes this call
        st.path = -1
        if st.period:
            if again:
                st.period = min(2 * st.period, REPROBE_GROWTH * self.reprobe)
            st.until = i + 1 + st.period
        return st.choice

    def _publish_choice(self, key: int, choice: int) -> None:
        """The first rank writes a shape's choice into the table: the first entry from key % entries on
        that no other shape's choice still waits to be read in (``pending``; all waiting: that one, and
        its shape takes the limits' path), the key's older entry cleared (one entry per key)."""
        W, n = self.W, shm.TUNE_ENTRIES
        busy = set(self.pending.values())
        start = key % n
        e = next(((start + k) % n for k in range(n) if (start + k) % n not in busy), start)
        for k in range(n):
            w = self.page.tune_word(k)
            if k != e and W[w] == key:
                W[w] = 0
        w = self.page.tune_word(e)
        W[w + 1] = choice + 1
        W[w] = key
        self.pending[key] = e

    def _read_choice(self, key: int) -> int:
        """A shape's choice from the table (every rank, the first too): 0, the limits' path, where no entry
        holds its key."""
        W, n = self.W, shm.TUNE_ENTRIES
        for k in range(n):
            w = self.page.tune_word((key + k) % n)
            if W[w] == key:
                c = int(W[w + 1]) - 1
                return c if c in (0, 1) else 0
        return 0

    def timed(self, tn: Tune, seconds: float) -> None:
        """The host's first rank notes a probe call's time (not the warm-up calls, nor the first PROBE_SKIP
        of each block)."""
        st = tn.state
        if self.me != 0 or st.path < 0:
            return
        k = st.last - PROBE_WARM if st.choice is None else st.last
        if k >= 0 and k % PROBE_BLOCK >= PROBE_SKIP:
            st.times[k // PROBE_BLOCK].append(seconds)
