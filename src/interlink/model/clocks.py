"""Dependency-driven timing of a Schedule's rounds: one clock per (rank, channel).

The Schedule's semantics (see :mod:`interlink.algorithms.schedule`): a rank-channel pair runs its rounds
in order; its round k starts when its round k - 1 is done; a send is eager (its bytes leave when the
sender starts the round, buffered at the receiver until it gets there). So, with ``T[e]`` the time
entry e = (rank, channel) finished its last round, one round is::

    start(m)  = T[src(m), ch(m)]                      for every message m of the round
                (and T[src(m), c'] too when m sends a chunk channel c' handed over)
    comm[e]   = max(T[e], start(m) + tx(m)   for m sent by e,          (its bytes are out)
                       start(m) + arr(m)  for m received by e)          (its bytes are in)
    T'[e]     = comm[e] + red[e] - overlap x min(comm[e] - T[e], red[e])   (the reduction after it,
                                                                          partly hidden under it)

``tx`` and ``arr`` (transfer end and arrival, relative to the message's start) come from the caller (the
simulator: the max-min fair sharing of the round's flows plus the path latency). Entries a round does not
touch keep their clock: a tree's leaves wait for nothing while the root works, a pipelined chain's ranks
start as soon as their segment is in.

Repeated rounds. A run of ``repeat`` identical rounds is a map ``T -> F(T)`` applied ``repeat`` times.
F is shift-invariant (``F(T + c) = F(T) + c``), so once ``T_k - T_{k-q} = c`` is the same constant on
every entry the run touches, the run is periodic from there on (``T_{k+j} = T_{k-q+j} + c``, by
induction) and the rest is extrapolated exactly. A ring whose hops have a few latency classes (NVLink
inside a host, the NIC across) becomes periodic with period ``q`` = the pattern's length after a few
rounds; the check looks at periods up to ``max_period`` (as many as ``history_bytes`` of kept clocks
allow). Entries may also settle at rates of their own (a pipelined tree's reduce and broadcast flows on
channels of their own, the slower falling behind): once ``T_k - T_{k-q} = T_{k-q} - T_{k-2q} = c``, c per
entry, and no term of the round's maxima comes from an entry whose clock grows faster than its target's
(such a term, not setting the target's clock now, could catch up later), the run goes on as
``T_{k+j} = T_{k-q+j} + c``: the terms that set each clock repeat with period q and the others fall
further behind, so this is exact too (a generalized period). A block of distinct rounds repeated in a row
(NVLS's rounds are three phases each) is one map too (:meth:`Clocks.run_block`): the same periods apply. A run with no period after ``settle`` rounds (a latency-bound ring whose hop pattern does not
repeat along it, e.g. the last leaf switch partly filled: its critical cycle is the whole ring) goes on
at one rate per channel, the mean increment of the channel's entries over the last window of W rounds
(``RunResult.period = -W``): in max-plus terms every entry of a ring grows at the critical cycle's mean
in the long run, and averaged over all the ring's entries a window's increments are that mean (each
entry's window covers other hops of the same ring). Each entry keeps its own offset, so the time is off
by about one window's spread of increments, not by that per round. ``settle=None``: always exact.

``barrier=True`` starts every round on every entry at the latest clock (rounds as global barriers: the
model of simulators before this one, kept to compare).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["Clocks", "RunResult"]

_TOL = 1e-9  # relative: clocks are equal when they differ by less than this (times are sums of floats)


@dataclass
class RunResult:
    """What one run of identical rounds did. ``start``/``end``: (rows, entries touched) clocks before and
    after; ``first``: after the first round; ``rounds_evaluated``: rounds computed (the rest extrapolated);
    ``period``: the period found (0: none, every round evaluated; -W: the rest at the mean rate of the
    last W rounds)."""

    entries: np.ndarray
    start: np.ndarray
    first: np.ndarray
    end: np.ndarray
    rounds_evaluated: int
    period: int


@dataclass
class _Round:
    """A prepared round (:meth:`Clocks.prepare`): the entries it touches (sorted), its map on their clocks
    (``step(T, landing=True)``), what lands from a given start (``land``), and the terms of its maxima as
    (source, target) positions among ``ent`` (``edges``)."""

    ent: np.ndarray
    step: object
    land: object
    edges: tuple


class Clocks:
    """``rows`` independent sets of clocks (the simulator keeps two: with contention and without) over
    ``nranks x nchannels`` entries (entry = rank x nchannels + channel)."""

    def __init__(self, nranks: int, nchannels: int = 1, rows: int = 2, start: float = 0.0,
                 barrier: bool = False, max_period: int = 256, settle: int | None = 128,
                 history_bytes: float = 256e6) -> None:
        self.p = int(nranks)
        self.C = max(1, int(nchannels))
        self.T = np.full((rows, self.p * self.C), float(start))
        self.landed = np.full(rows, float(start))  # the latest arrival nobody waits for (per row)
        self.barrier = bool(barrier)
        self.max_period = int(max_period)
        self.settle = settle
        self.history_bytes = float(history_bytes)

    def makespan(self, row: int = 0) -> float:
        return max(float(self.T[row].max(initial=0.0)), float(self.landed[row]))

    def run(self, src: np.ndarray, dst: np.ndarray, ch: np.ndarray | None, tx: np.ndarray, arr: np.ndarray,
            red: np.ndarray | None, overlap: float, repeat: int, recv_elems: np.ndarray | None = None,
            wait: bool = True, after: np.ndarray | None = None, gate: np.ndarray | None = None) -> RunResult:
        """Apply ``repeat`` identical rounds (arguments: :meth:`prepare`)."""
        return self.run_block([self.prepare(src, dst, ch, tx, arr, red, overlap, recv_elems, wait, after, gate)],
                              repeat)

    def prepare(self, src: np.ndarray, dst: np.ndarray, ch: np.ndarray | None, tx: np.ndarray, arr: np.ndarray,
                red: np.ndarray | None, overlap: float, recv_elems: np.ndarray | None = None,
                wait: bool = True, after: np.ndarray | None = None, gate: np.ndarray | None = None) -> "_Round":
        """One round, ready to run (:meth:`run_block`). ``src``/``dst``/``ch``: per message (``ch`` None: channel 0);
        ``tx``/``arr``: (rows, messages) transfer end and arrival relative to the message's start;
        ``red``: per rank, the time its reductions of one round take (split over its channels by the
        elements each receives, ``recv_elems`` per message; a rank that reduces without receiving does it
        on channel 0); ``overlap``: the fraction of a reduction that can hide under the round's
        communication. ``wait=False``: the receivers do not wait for these messages (one-sided writes
        nothing reads afterwards): their arrivals only have to fall within the makespan. ``after``: per
        message, another channel of its sender that it also waits for (a chunk handed over from that
        channel; -1: none). ``gate``: per message, the receiver's channel whose clock waits for it (the
        channel that reads the chunk next; -1: none, it only lands; None: the message's own)."""
        C = self.C
        chv = np.zeros(src.size, np.int64) if ch is None else ch.astype(np.int64)
        s_e = src.astype(np.int64) * C + chv
        d_e = dst.astype(np.int64) * C + chv
        red_e = red_v = None
        if red is not None and np.any(red > 0):
            w = recv_elems if recv_elems is not None else np.ones(src.size)
            per_e = np.bincount(d_e, weights=w.astype(np.float64), minlength=self.p * C)
            per_r = per_e.reshape(self.p, C).sum(axis=1)
            share = np.zeros((self.p, C))
            has = per_r > 0
            share[has] = per_e.reshape(self.p, C)[has] / per_r[has, None]
            share[~has, 0] = 1.0
            full = (share * red[: self.p, None] if red.size >= self.p else
                    share * np.concatenate([red, np.zeros(self.p - red.size)])[:, None]).ravel()
            red_e = np.flatnonzero(full > 0)
            red_v = full[red_e]
        landing = None
        kept = np.arange(src.size)  # the messages whose arrival a receiver's clock waits for
        if gate is not None:  # the receiver's channel that waits for each message (-1: none)
            d_e = dst.astype(np.int64) * C + np.maximum(gate, 0)
            if (gate < 0).any():
                kept = np.flatnonzero(gate >= 0)
                landing = (np.flatnonzero(gate < 0), arr[:, gate < 0])
                d_e, arr = d_e[kept], arr[:, kept]
        if not wait:  # the receivers' clocks ignore them; the latest arrival is kept (per row)
            landing = (np.arange(src.size), arr if gate is None or landing is None else
                       np.concatenate([arr, landing[1]], axis=1)[:, np.argsort(np.r_[kept, landing[0]])])
            kept = kept[:0]
            d_e = d_e[:0]
            arr = arr[:, :0]
        a_e = None
        if after is not None and (after >= 0).any():
            a_e = np.where(after >= 0, src.astype(np.int64) * C + np.maximum(after, 0), s_e)
        # the entries the round touches, sorted, and each one's position among them: a mask over the
        # p x C entries and a position map (O(entries), not the sorts of np.unique and searchsorted)
        npc = self.p * C
        pos = np.zeros(npc, np.int64)
        if self.barrier:
            ent = np.arange(npc)
        else:
            seen = np.zeros(npc, bool)
            for part in (s_e, d_e, red_e, a_e):
                if part is not None:
                    seen[part] = True
            ent = np.flatnonzero(seen)
        pos[ent] = np.arange(ent.size)
        sp = pos[s_e]
        dp = pos[d_e]
        tgt = np.concatenate([sp, dp])
        order = np.argsort(tgt, kind="stable")
        tsorted = tgt[order]
        starts = np.flatnonzero(np.r_[True, tsorted[1:] != tsorted[:-1]]) if tsorted.size else np.zeros(0, np.int64)
        uniq = tsorted[starts]
        off = np.concatenate([tx, arr], axis=1)[:, order] if tsorted.size else None
        src_of = np.concatenate([sp, sp[kept]])[order]
        ap = pos[a_e] if a_e is not None else None
        aft_of = np.concatenate([ap, ap[kept]])[order] if ap is not None else None
        # every term of the round's maxima, as (source entry, target entry) positions: what the rates check
        # of a generalized period looks at (a source no faster than its target never overtakes it)
        tgt_of = np.repeat(uniq, np.diff(np.r_[starts, tsorted.size])) if tsorted.size else np.zeros(0, np.int64)
        edges = (np.concatenate([src_of] + ([aft_of] if aft_of is not None else [])),
                 np.concatenate([tgt_of] + ([tgt_of] if aft_of is not None else [])))
        land_off = landing[1] if landing is not None else None
        lsp = sp[landing[0]] if landing is not None else sp  # the senders of the messages that only land
        lap = ap[landing[0]] if landing is not None and ap is not None else None
        redp = None
        if red_v is not None:
            redp = np.zeros(ent.size)
            redp[pos[red_e]] = red_v
        ov = float(overlap)

        def land(Tp: np.ndarray) -> None:  # the arrivals nobody waits for, of a round started at Tp
            if land_off is not None and land_off.size:
                st = Tp[:, lsp] if lap is None else np.maximum(Tp[:, lsp], Tp[:, lap])
                np.maximum(self.landed, (st + land_off).max(axis=1), out=self.landed)

        def step(Tp: np.ndarray, landing: bool = True) -> np.ndarray:
            if self.barrier:
                Tp = np.broadcast_to(Tp.max(axis=1, keepdims=True), Tp.shape).copy()
            if landing:
                land(Tp)
            c = Tp.copy()
            if off is not None:
                st = Tp[:, src_of] if aft_of is None else np.maximum(Tp[:, src_of], Tp[:, aft_of])
                m = np.maximum.reduceat(st + off, starts, axis=1)
                c[:, uniq] = np.maximum(c[:, uniq], m)
            if redp is not None:
                c = c + redp - ov * np.minimum(c - Tp, redp)
            return c

        return _Round(ent, step, land, edges)

    def run_block(self, rounds: "list[_Round]", repeat: int) -> RunResult:
        """Apply ``repeat`` times the block of rounds (one after the other, each as :meth:`prepare` made it):
        a Schedule whose steady state cycles through several distinct rounds (NVLS's rounds are three
        phases: into the switch, out of its multicast, out of its reduction) repeats as a whole, and the
        block map is shift-invariant as a round's is, so the same periods apply. ``entries``: the union of
        the rounds' entries; ``first``: after the first block."""
        if len(rounds) == 1:
            ent = rounds[0].ent
            parts = [(rounds[0], None)]
            edges = rounds[0].edges
        else:
            seen = np.zeros(self.p * self.C, bool)
            for r in rounds:
                seen[r.ent] = True
            ent = np.flatnonzero(seen)
            pos = np.zeros(self.p * self.C, np.int64)
            pos[ent] = np.arange(ent.size)
            parts = [(r, pos[r.ent]) for r in rounds]
            edges = (np.concatenate([pos[r.ent][r.edges[0]] for r in rounds]),
                     np.concatenate([pos[r.ent][r.edges[1]] for r in rounds]))

        def step(Tp: np.ndarray, landing: bool = True) -> np.ndarray:
            if len(parts) == 1:
                return parts[0][0].step(Tp, landing)
            Tp = Tp.copy()
            for r, ix in parts:
                Tp[:, ix] = r.step(Tp[:, ix], landing)
            return Tp

        T0 = self.T[:, ent]
        # periods up to max_period, as far as the history fits in history_bytes
        qmax = min(self.max_period, int(self.history_bytes // max(1, T0.nbytes)) - 1)  # < 1: no periods
        hist: deque[np.ndarray] = deque([T0], maxlen=max(1, qmax) + 1)
        Tp = T0
        first = None
        done = 0
        period = 0
        last_start = None
        sample = np.unique(np.linspace(0, ent.size - 1, min(ent.size, 48)).astype(np.int64))
        hs: deque[np.ndarray] = deque([T0[:, sample]], maxlen=max(1, qmax) + 1)
        while done < repeat:
            Tp = step(Tp)
            done += 1
            if first is None:
                first = Tp
            if done == repeat or repeat <= 2 or not ent.size or qmax < 1:
                hist.append(Tp)
                continue
            ts = Tp[:, sample]
            q = self._period(hist, hs, Tp, ts, qmax) or self._rates(hist, hs, Tp, ts, qmax, edges)
            hist.append(Tp)
            hs.append(ts)
            if not q and self.settle is not None and done >= max(self.settle, qmax) and repeat - done > qmax:
                # no exact period (the hops' pattern does not repeat along the ring, e.g. a partly filled
                # leaf switch): every entry goes on at its mean rate over the last qmax rounds. Off by at
                # most the spread of a window's increments, not per round (see the module docstring)
                hl = list(hist)
                W = len(hl) - 1
                g = (hl[-1] - hl[0]) / W  # per entry, its mean increment over the window
                ch = ent % self.C
                rate = np.zeros_like(g)
                for c in np.unique(ch).tolist():  # a channel's ring: one rate, the mean over its entries
                    m = ch == c
                    rate[:, m] = g[:, m].mean(axis=1, keepdims=True)
                Tp = hl[-1] + (repeat - done) * rate
                last_start = Tp - rate
                period = -W
                break
            if q:
                # periodic from round done - q on: T_{done-q+j} = history, plus whole periods of c
                hl = list(hist)  # hl[-1] = T_done, hl[-1-q] = T_{done-q}
                c = hl[-1] - hl[-1 - q]
                left = repeat - (done - q)
                a, b = divmod(left, q)
                Tp = hl[-1 - q + b] + a * c
                a1, b1 = divmod(left - 1, q)  # the last round's start, for what lands in it
                last_start = hl[-1 - q + b1] + a1 * c
                period = q
                break
        if last_start is not None:  # what lands in the last block, from its start
            if len(parts) == 1:
                parts[0][0].land(last_start)
            else:
                S = last_start.copy()
                for r, ix in parts:
                    r.land(S[:, ix])
                    S[:, ix] = r.step(S[:, ix], False)
        self.T[:, ent] = Tp
        return RunResult(ent, T0, first if first is not None else T0, Tp, done, period)

    @staticmethod
    def _rates(hist: deque, hs: deque, Tp: np.ndarray, ts: np.ndarray, qmax: int,
               edges: tuple[np.ndarray, np.ndarray]) -> int:
        """A generalized period: the smallest q with ``T_k - T_{k-q} = T_{k-q} - T_{k-2q} = c``, c per entry
        (each entry at its own rate: a pipeline's reduce and broadcast flows on channels of their own, the
        slower one falling behind), provided no term of the round's maxima comes from an entry faster than
        its target (``c[source] <= c[target]``): a term that does not set its target's clock then never
        will, the terms that do repeat with period q, and the run goes on as ``T_{k+j} = T_{k-q+j} + c``
        (exactly, as the uniform case). 0: none."""
        n = len(hist)
        m = min(qmax, n // 2)
        if m < 1:
            return 0
        tol = float(np.abs(Tp).max(initial=0.0)) * _TOL + 1e-9
        old = np.stack(list(hs)[::-1][: 2 * m])  # old[q - 1] = sample of T_{k-q}
        qs = np.arange(1, m + 1)
        # the sampled entries first, every q at once (as _period does): the candidates' full check below
        d = np.abs(ts[None] - 2 * old[qs - 1] + old[2 * qs - 1]).reshape(m, -1).max(axis=1, initial=0.0)
        for q in (np.flatnonzero(d <= 2 * tol) + 1).tolist():
            c = Tp - hist[-q]
            if float(np.abs(c - (hist[-q] - hist[-2 * q])).max(initial=0.0)) > 2 * tol:
                continue
            src, tgt = edges
            if src.size and bool((c[:, src] > c[:, tgt] + 2 * tol).any()):
                return 0  # a faster source would catch up with its target: no extrapolation
            return q
        return 0

    @staticmethod
    def _period(hist: deque, hs: deque, Tp: np.ndarray, ts: np.ndarray, qmax: int) -> int:
        """The smallest q <= qmax with T_k - T_{k-q} the same on every entry (per row); 0: none.
        ``hs`` holds the sampled entries of ``hist`` (checked first, all at once)."""
        n = len(hist)
        if n == 0:
            return 0
        tol = float(np.abs(Tp).max(initial=0.0)) * _TOL + 1e-9
        old = np.stack(list(hs)[::-1][: min(qmax, n)])  # old[q - 1] = sample of T_{k-q}
        d = ts[None] - old
        spread = (d.max(axis=2) - d.min(axis=2)).max(axis=1)
        for q in (np.flatnonzero(spread <= tol) + 1).tolist():
            d = Tp - hist[-q]
            if float((d.max(axis=1) - d.min(axis=1)).max()) <= tol:
                return q
        return 0
