"""The one-shot latency path, inlined (runtime/fastpath.py's one-shot executor): `slots` up to the one-shot
size (and broadcast, all_gather, reduce_scatter and all_to_all through the slots up to the inline limit,
algorithms/hostpath.py), `slots_once` and the barrier. Every rank writes its payload once into its own
slot on the host page and publishes it; every reader then takes all ranks' payloads as one strided array
(all_to_all: its column of them; all_reduce reduces them in rank order, so every rank gets bit-identical
results). Its views come from the Schedule's form (``hostpage.host_plan`` refuses a Schedule of another
form). On an oversubscribed host (more than two local ranks a core) the all_reduce is reduced once, by
the last rank to publish, into a shared result slot that every rank copies (_reduce_once).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ..errors import CollectiveMismatchError
from ..ops import finish_avg
from ..transport.shm import HEADERS
from .pageproto import A2A, AG, AR, BC, CRC, GSEQ, RS, SIG_BYTES, SIG_OFF, Small, _META

class OneShot:
    """The inlined one-shot executor (a mixin of FastPath)."""

    def hot(self, sc: Small, a: np.ndarray, out: Optional[np.ndarray], seq: int, timeout: float) -> None:
        """One call through the slots, every step inlined: copy in, publish, wait, check, read (reductions
        in rank order: identical bits on every rank), mark done. Above the one-shot size: the call shape's
        page program (_program). A shape the compiled core takes (sc.ccore, runtime/ccore.py) runs there;
        where the core stops (the slot not yet free: nothing done; the peers' headers not all there or not
        matching: published) the call goes on here from that point."""
        cs = sc.ccore
        if cs is not None:
            r = self.core.hot(cs, a, out, seq)
            if r is None:
                return
            if r[0] == 2:
                return self._resume(sc, a, out, r[1], r[2], seq, timeout)
        if self.pend:  # the last calls were a broadcast's root that did not wait: its receivers' headers first
            if sc.kind == BC and sc.sends and self.last == sc.lid and sc.depth > 2:
                self._settle(None)  # the root's run goes on: those whose receivers have published
            else:
                self._settle(time.monotonic() + timeout)
        self.f = f = self.f + 1
        q = f % HEADERS  # this call's header entry
        pos = f % sc.npos  # where this call's payload lies (its parity: f & 1)
        W, B = self.W, self.B
        need = self._need(sc, f)
        if need > 0 and self.safe < need:  # every peer must have finished reading the calls that used my places
            self._await_done(need, seq, sc, timeout)
        if sc.program is not None:
            if sc.push is not None and out is not None and not np.may_share_memory(a, out):
                return self._push(sc, a, out, f, pos, seq, timeout)
            cp = sc.cprog  # a program through the slots alone, in the compiled core (ccore.make_prog)
            if cp is not None and ((out is None) if sc.kind in (AR, BC) else
                                   (out is not None and not np.may_share_memory(a, out))):
                r = self.core.prog(cp, a, out, f, pos, seq)
                if r is None:
                    return
                if r[0] >= 0:  # the core stopped at a wait: the rest here
                    return self._program(sc, a, out, f, pos, seq, timeout, resume=r)
            return self._program(sc, a, out, f, pos, seq, timeout)
        if sc.kind == A2A or (sc.kind == RS and not np.may_share_memory(a, out)):
            # every block but this rank's own into its slot, in place (the blocks before it, the blocks after it):
            # its own an all_to_all copies out directly, a reduce_scatter reduces from its input (_rs_parts)
            mine, flat, lo, hi = sc.mine[pos].reshape(-1), a.reshape(-1), self.me * sc.block, (self.me + 1) * sc.block
            if lo:
                mine[:lo] = flat[:lo]
            if hi < flat.size:
                mine[hi:] = flat[hi:]
        elif sc.sends:
            sc.mine[pos][...] = a
        _META.pack_into(self.page.mm, self.hoff[q], seq, sc.crc, sc.nbytes, sc.head)
        W[self.my_w[q]] = f  # publish last
        wake = self.wake
        for flag, bell in wake:
            if B[flag]:
                bell.ring()
        if sc.res is not None:
            return self._reduce_once(sc, a, f, pos, seq, timeout)
        crc = sc.crc
        kind = sc.kind
        if kind == BC and not sc.sends:  # a broadcast's receiver reads the root's slot alone: waits for it alone
            rw = self.head_w[sc.root][q]
            if W[rw] < f or W[rw + GSEQ] != seq or W[rw + CRC] != crc:
                self._await_root(sc, f, q, seq, timeout)
            else:
                self._peers_seen(f, q, seq, crc, sc.sigb)
            if self.traced:
                self.t1 = time.perf_counter()
            a[...] = sc.parts[pos][0]
            W[self.done_w] = f
            for flag, bell in wake:
                if B[flag]:
                    bell.ring()
            return
        for pw in self.peer_w[q]:  # every peer's header published and of this call (else wait or raise there)
            if W[pw] < f or W[pw + GSEQ] != seq or W[pw + CRC] != crc:
                if kind == BC and sc.sends and W[pw] < f and self._unwaited(f, q, seq, crc):
                    # a broadcast's root reads nothing: it returns without waiting for its receivers; their
                    # headers are checked at a later call (_settle), its done word written then
                    if not self.pend:
                        self.pend = f
                    self.pend_hi = f
                    if self.traced:
                        self.t1 = time.perf_counter()
                    return
                self._gather_headers(sc, f, q, seq, timeout)
                break
        else:
            self.safe = f - 1  # a peer publishes call f only after finishing call f-1
        if self.traced:  # INTERLINK_TRACE: the end of the call's transfer phase (runtime/recorder.py)
            self.t1 = time.perf_counter()
        if kind == AR or kind == RS:
            dst = a if kind == AR else out
            parts = sc.parts[pos] if kind == AR else self._rs_parts(sc, pos, a, out)
            fn = sc.fn
            if len(parts) > 1:  # (out passed by position: a ufunc parses a keyword in 0.25 us more)
                fn(parts[0], parts[1], dst)
                for k in range(2, len(parts)):
                    fn(dst, parts[k], dst)
            else:
                dst[...] = parts[0]
            if sc.avg:
                finish_avg(dst, self.n)
        elif kind == BC:
            if not sc.sends:
                a[...] = sc.parts[pos][0]
        elif kind == AG:
            out.reshape(sc.oshape)[...] = sc.stack[pos]
        elif kind == A2A:
            col = sc.stack[pos]
            o2 = out.reshape(col.shape)
            for j in self.peers:
                o2[j] = col[j]
            o2[self.me] = a.reshape(col.shape)[self.me]
        if self.pend:  # a root's earlier calls of this run: checked before its done word passes them
            self._settle(time.monotonic() + timeout)
        W[self.done_w] = f
        for flag, bell in wake:
            if B[flag]:
                bell.ring()

    def _unwaited(self, f: int, q: int, seq: int, crc: int) -> bool:
        """Whether a broadcast's root may return before its receivers publish call f: every peer that has
        published it shows this call (one that shows another raises in _gather_headers now). Of ranks that
        all took themselves for the root, the last to publish sees the others' headers here."""
        W = self.W
        for pw in self.peer_w[q]:
            if W[pw] >= f and (W[pw + GSEQ] != seq or W[pw + CRC] != crc):
                return False
        return True

    def _await_root(self, sc: Small, f: int, q: int, seq: int, timeout: float) -> None:
        """A broadcast's receiver (it reads the root's slot alone): wait until the root has published call f,
        check its header, then _peers_seen."""
        W, root = self.W, sc.root
        rw = self.head_w[root][q]
        if W[rw] < f:
            self._wait(lambda: W[rw] >= f, lambda: [root], time.monotonic() + timeout, seq, sc.sigb)
        self._check(root, q, seq, sc.crc, sc.sigb)
        self._peers_seen(f, q, seq, sc.crc, sc.sigb)

    def _peers_seen(self, f: int, q: int, seq: int, crc: int, sig: bytes) -> None:
        """A broadcast's receiver, the root's header checked: every other peer that has published call f
        checked too (a mismatch raises now; one not yet published is checked by the root at a later call,
        OneShot._settle). `safe` stays: the root publishes call f before it has checked its receivers'
        headers of the calls before, so its publishing f does not say it has finished reading them."""
        W = self.W
        for i, pw in zip(self.peers, self.peer_w[q]):
            if W[pw] >= f and (W[pw + GSEQ] != seq or W[pw + CRC] != crc):
                self._check(i, q, seq, crc, sig)

    def _need(self, sc: Small, f: int) -> int:
        """The last call every rank must have finished reading before call f of shape sc writes its places:
        f - 2 in general (the call before last used this parity's half of the slots); f - depth for a shape
        whose payload rotates through depth places (Small.depth) where the calls since f - depth were all of
        this shape (each in a place of its own; the call before them may have used any place); f - HEADERS for
        a call that writes no payload (only its header entry). Notes this call as the last one."""
        run = self.run if self.last == sc.lid else 0
        d = sc.depth if not sc.sends else max(2, min(sc.depth, run + 1))
        self.last, self.run = sc.lid, run + 1
        return f - d

    def _await_done(self, need: int, seq: int, sc: Small, timeout: float) -> None:
        """Wait until every rank has finished reading call need (this rank's own pending root calls settled
        meanwhile, as their receivers publish); `safe` moves on to what every rank has finished."""
        done = self.page.done
        m = int(done.min())
        if m < need:
            if self.pend:
                def ready() -> bool:
                    self._settle(None)
                    return int(done.min()) >= need
            else:
                def ready() -> bool:
                    return int(done.min()) >= need
            self._wait(ready, lambda: [i for i in self.peers if int(done[i]) < need], time.monotonic() + timeout,
                       seq, sc.sigb)
            m = int(done.min())
        if m > self.safe:
            self.safe = m

    def _own_call(self, q: int) -> tuple[int, int, bytes]:
        """(group seq, crc, signature) of this rank's call in header entry q."""
        W, page = self.W, self.page
        mw = self.my_w[q]
        off = page.header_offset(self.me, q) + SIG_OFF
        return W[mw + GSEQ], W[mw + CRC], bytes(page.mm[off:off + SIG_BYTES]).rstrip(b"\0")

    def _check_root_call(self, g: int) -> None:
        """Every peer's header of this rank's pending root call g against this rank's own (they have all
        published it): CollectiveMismatchError naming both calls where one differs."""
        q = g % HEADERS
        seq, crc, sig = self._own_call(q)
        for i in self.peers:
            self._check(i, q, seq, crc, sig)

    def _settled(self, g: int) -> None:
        """Root call g checked: this rank's done word passes it, and the pending range moves on."""
        hi = self.pend_hi
        if g >= hi:
            self.pend = self.pend_hi = 0
        else:
            self.pend = g + 1
        self._set(self.done_w, g)

    def _settle(self, deadline: Optional[float]) -> None:
        """The pending calls of a broadcast's root (self.pend..self.pend_hi, which returned without waiting
        for their receivers), oldest first: for each, wait until every peer has published it (each does on
        entering it), check their headers against this rank's own, then write this rank's done word for it.
        A mismatch raises CollectiveMismatchError naming that call; a peer that never publishes it,
        TimeoutError. ``deadline`` None: no wait, stop at the first call a peer has not yet published."""
        W = self.W
        while self.pend:
            g = self.pend
            q = g % HEADERS
            if not self._all_published(g, q):
                if deadline is None:
                    return
                seq, _, sig = self._own_call(q)
                peer_w = self.peer_w[q]
                self._wait(lambda: self._all_published(g, q),
                           lambda: [i for i, x in zip(self.peers, peer_w) if W[x] < g], deadline, seq, sig)
            self._check_root_call(g)
            self._settled(g)

    def settle_at_exit(self, wait: float = 2.0) -> None:
        """At destroy: the pending root calls' receivers checked (waiting at most `wait` seconds for them to
        publish; one that has not by then is not held up for, unless it is gone: PeerLostError)."""
        try:
            self._settle(time.monotonic() + wait)
        except TimeoutError:
            return

    def _resume(self, sc: Small, a: np.ndarray, out: Optional[np.ndarray], f: int, pos: int, seq: int,
                timeout: float) -> None:
        """The rest of call f that the compiled core published (all_reduce, reduce_scatter, broadcast or
        all_gather, one-shot): wait for the peers' headers and check them as hot does, then read."""
        kind = sc.kind
        if self.pend:  # a root's earlier calls of this run (the core left them pending): checked first
            self._settle(time.monotonic() + timeout)
        if kind == BC and not sc.sends:
            self._await_root(sc, f, f % HEADERS, seq, timeout)
        else:
            self._gather_headers(sc, f, f % HEADERS, seq, timeout)
        if kind == AR or kind == RS:
            dst = a if kind == AR else out
            parts = sc.parts[pos] if kind == AR else self._rs_parts(sc, pos, a, out)
            fn = sc.fn
            if len(parts) > 1:
                fn(parts[0], parts[1], dst)
                for k in range(2, len(parts)):
                    fn(dst, parts[k], dst)
            else:
                dst[...] = parts[0]
            if sc.avg:
                finish_avg(dst, self.n)
        elif kind == BC:
            if not sc.sends:
                a[...] = sc.parts[pos][0]
        elif kind == AG:
            out.reshape(sc.oshape)[...] = sc.stack[pos]
        elif kind == A2A:
            col = sc.stack[pos]
            o2 = out.reshape(col.shape)
            for j in self.peers:
                o2[j] = col[j]
            o2[self.me] = a.reshape(col.shape)[self.me]
        self._set(self.done_w, f)
        self.core.finish(sc.ccore)  # the call's end: its time, where the core's leader timed it (Core.finish)

    def _rs_parts(self, sc: Small, pos: int, a: np.ndarray, out: np.ndarray) -> list:
        """A one-shot reduce_scatter's parts in rank order: every peer's block of its slot, and this rank's own
        block of its input, in its place (the Schedule's inline local step: the call copies only its peers'
        blocks into its slot, hot and the compiled core alike). An output that overlaps the input (in place)
        reads its own block from the slot, which then holds the whole input: the reduction writes the output
        before it reads the later parts."""
        parts = sc.parts[pos]
        if np.may_share_memory(a, out):
            return parts
        parts = list(parts)
        lo = self.me * sc.block
        parts[self.me] = a.reshape(-1)[lo:lo + sc.block].reshape(parts[self.me].shape)
        return parts

    def _reduce_once(self, sc: Small, a: np.ndarray, f: int, pos: int, seq: int, timeout: float) -> None:
        """The one-shot all_reduce of an oversubscribed host (this rank has published): the rank that
        finds every peer published reduces every slot, in rank order, and writes the result into the
        shared result slot; the others wait for it and copy it out. Two ranks publishing at once may
        both reduce: they write the same bits. The signature check runs on every rank."""
        W, q = self.W, f % HEADERS
        rw = self.ready_w[pos & 1]
        if self._all_published(f, q):
            try:
                self._gather_headers(sc, f, q, seq, timeout)
            except CollectiveMismatchError:
                self._set(rw, f)  # the waiters check the signatures themselves
                raise
            parts, fn = sc.parts[pos], sc.fn
            fn(parts[0], parts[1], a)
            for k in range(2, len(parts)):
                fn(a, parts[k], a)
            if sc.avg:
                finish_avg(a, self.n)
            sc.res[pos][...] = a
            self._set(rw, f)
        else:
            if W[rw] < f:
                peer_w = self.peer_w[q]
                self._wait(lambda: W[rw] >= f, lambda: [i for i, x in zip(self.peers, peer_w) if W[x] < f],
                           time.monotonic() + timeout, seq, sc.sigb)
            self._gather_headers(sc, f, q, seq, timeout)  # every peer has published: no wait
            a[...] = sc.res[pos]
        self._set(self.done_w, f)
