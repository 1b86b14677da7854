"""The page-program executor (runtime/fastpath.py's step-by-step concern): a call too large for the one-shot
path runs its Schedule's program for this rank (runtime/pageplan.py compiles it into Moves, a destination
chunk and its chain of sources, and PutOps, with the rounds each waits for): `slots` above the inline
limit (the chains walk cache-sized pieces, and a peer's interlink.empty input is read in place),
`two_phase`, `slots_pipelined` and `peer_buffers` (from and into the ranks' own buffers, mapped when they
live in an interlink.empty arena, else by cross-memory attach). Ranks publish their progress through a
word of their slot header. The program's ops are bound once per call shape and call facts (_bind).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..ops import finish_avg
from ..transport import cma, stream
from ..transport.shm import HEADERS
from .pageplan import IN, LOCAL, OUT, ROUND_STRIDE, SCR, PutOp
from .pageproto import A2A, AG, AR, BC, DESC, RD, RS, Small, _META, _NOMAP

def _push_form(prog: Any) -> Optional[tuple]:
    """(offset, count, pushes, waits, end) when a rank's page program is one round of one plain copy of its
    input into its output, pushed into every peer's output (the peer_buffers all_gather), with nothing read from
    its buffers, mapped or in the slots: FastPath._push runs it inlined; else None (FastPath._program)."""
    if len(prog.rounds) != 1 or prog.readers or prog.maps or prog.slot_readers or prog.scratch \
            or not prog.out_addr:
        return None
    rnd = prog.rounds[0]
    if rnd.before or rnd.early or len(rnd.ops) != 1 or not rnd.publish or rnd.first != 0:
        return None
    op = rnd.ops[0]
    if isinstance(op, PutOp) or len(op.srcs) != 1 or op.buf != OUT or op.elide or op.hazard or not op.pushes:
        return None
    s = op.srcs[0]
    if s.peer != LOCAL or s.buf != IN or s.reduce or s.off != 0 or set(rnd.waits) != {i for i, _ in op.pushes}:
        return None
    return op.off, op.count, op.pushes, tuple((i, rnd.end) for i in rnd.waits), rnd.end


class PageProgram:
    """The page-program executor (a mixin of FastPath)."""

    def _program(self, sc: Small, a: np.ndarray, out: Optional[np.ndarray], f: int, pos: int, seq: int,
                 timeout: float, resume: Optional[tuple] = None) -> None:
        """A call too large for a slot (peer_buffers), run step by step from its Schedule's program for this rank
        (runtime/pageplan.py): every rank publishes the addresses of its input and output with its header;
        each Move walks its destination a cache-sized piece at a time through its sources (this rank's
        buffers; a peer's input mapped in place when it lives in an interlink.empty arena; else the peer's
        memory by cross-memory attach), each PutOp writes into a peer's output by cross-memory attach.
        Between rounds a rank waits only for the peers the next round touches; it returns when every peer
        that reads its buffers is done. ``resume`` (stage, round): the rest of a call the compiled core began
        (ccore.make_prog; its input not mapped): stage 0, its header published (the peers' headers, then
        every round); stage 1, the headers checked and no peer's input mapped, rounds before ``round`` done."""
        q = pos & 1  # the call's parity: its slot header (descriptors, progress words)
        h = f % HEADERS  # its call header
        prog = sc.program
        flat = a.reshape(-1)
        o = flat if out is None else out.reshape(-1)
        kind = sc.kind
        # in place: the input is the output's chunk the Schedule's no-op copies say (those are skipped);
        # the addresses are read only where the buffers overlap at all, or peers push into the output
        overlap = o is flat or (kind in (AG, RS) and np.may_share_memory(flat, o))
        check = overlap and prog.noops and kind in (AG, RS)
        op_ = cma.address(o) if prog.out_addr or check else 0
        desc = prog.readers or prog.slot_readers or prog.out_addr  # peers may read my buffers' addresses
        ia = cma.address(flat) if check or (desc and sc.sends) else 0  # my input's address, read once
        inplace = kind in (AR, BC) or (check and (
            (kind == AG and op_ + self.me * flat.nbytes == ia) or (kind == RS and ia + self.me * o.nbytes == op_)))
        reg = self._arena(sc, flat, ia) if desc and resume is None else None
        serial = reg[0] if reg is not None else 0
        rounds = prog.rounds
        base = ROUND_STRIDE * f
        rd = self.my_d[q] + RD
        # the ops bound for this position in the slots and these facts of the call (_bind): whether the
        # input is read in place, the call runs in place, and the input and output overlap at all
        key = (pos, serial != 0, inplace, overlap)
        bound = sc.bound.get(key)
        if bound is None:
            if len(sc.bound) > 8 * sc.npos:
                sc.bound.clear()
            bound = sc.bound[key] = ({},) + self._bind(sc, pos, key, (), a.dtype.itemsize, early=True)
        by_map, early, slot = bound
        bufs = (flat, o, slot)
        skip = 1 if rounds and not rounds[0].ops and not rounds[0].before and not rounds[0].waits else 0
        late = None
        if resume is None:
            # the first round's local steps (into this rank's own slot and output) before the header: when
            # they are the whole round, its end is published with the header (one publish, as the one-shot path).
            # An all_to_all through the ranks' own buffers (no slot) copies its own block after its header
            # instead: no peer reads that block, the peers' puts go to the others, and its header is what they
            # wait for (4 ranks, 64 MiB, a barrier then 4 calls, inputs written before each: a rank's wait for the
            # peers' headers 2.1-3.0 ms -> 0.02-0.7 ms, the call 14.0-18.3 -> 13.8-15.0 ms; benchmarks/RESULTS.md)
            if kind == A2A and not prog.scratch and not skip:
                late = early
            else:
                for run in early:
                    run(bufs, None)
            if skip and rounds[0].publish:
                self.W[rd] = base + rounds[0].end
            if prog.readers or prog.out_addr or serial:  # peers read or write my buffers: their addresses
                self._announce(sc, ia, f, seq, reg, op_)
            else:  # the header alone (peers read my slot only: my input is not mapped)
                if desc:
                    self.W[self.my_d[q] + DESC + 2] = 0
                _META.pack_into(self.page.mm, self.hoff[h], seq, sc.crc, sc.nbytes, sc.head)
                self._set(self.my_w[h], f)
        W, slot_w = self.W, self.slot_w
        if late:  # the own block, while the peers publish
            for run in late:
                run(bufs, None)
        if resume is not None:
            self.resumes[resume[0]] += 1
        if resume is not None and resume[0] == 1:
            shared, skip = (), resume[1]  # the core checked the headers and found no peer's input mapped
        else:
            self._gather_headers(sc, f, h, seq, timeout)
            # the peers whose input lives in an interlink.empty arena (a serial in their header) are mapped
            shared = [i for i in prog.maps if W[slot_w[i][q] + DESC + 2]] if prog.maps else ()
        if shared:
            mapped = {i: self._shared_input(i, q, a.dtype, sc.count) for i in shared}
            mk = tuple(i for i in shared if mapped[i] is not None)
        else:
            mapped, mk = _NOMAP, ()
        steps = by_map.get(mk)
        if steps is None:
            if len(by_map) > 16:  # as many sets of mapped peers as calls have shown (few in practice)
                by_map.clear()
            steps = by_map[mk] = self._bind(sc, pos, key, mk, a.dtype.itemsize)
        for k in range(skip, len(rounds)):  # rounds first..end-1 of the Schedule; the progress word counts them
            rnd = rounds[k]
            if rnd.before:
                self._await_round(rnd.before, q, base, seq, sc, timeout)
            for run in steps[k]:
                run(bufs, mapped)
            if rnd.publish:  # only where a peer waits for it (a publish may wake a sleeping peer)
                self._set(rd, base + rnd.end)
            if rnd.waits:
                self._await_round(tuple((i, rnd.end) for i in rnd.waits), q, base, seq, sc, timeout)
        self._set(self.done_w, f)
        readers = prog.readers + prog.slot_readers if serial else prog.readers
        if readers:  # my buffers must outlive every reader's copy (my input too, when read in place)
            self._await_readers(f, seq, sc, timeout, list(readers))
        if sc.avg:  # the sums, divided once every reader has them (each rank divides the same bits)
            finish_avg(o, self.n)
        if resume is not None:  # a call the compiled core began: its end, where the core's leader timed it
            self.core.finish(sc.cprog)

    def _push(self, sc: Small, a: np.ndarray, out: np.ndarray, f: int, pos: int, seq: int, timeout: float) -> None:
        """A push program (_push_form: the peer_buffers all_gather) run inlined, out of place: the same words and
        the same order as _program (publish the header with this rank's output address; copy the input
        into its place in the output a piece at a time, each piece pushed into every peer's output while it
        is in cache; publish the round; wait for the peers' pushes into this rank's output; done), without
        the general executor's per-call decisions (2 ranks, 1 MiB of output: 20-30 us a call less)."""
        off, count, pushes, waits, end = sc.push
        q, h = pos & 1, f % HEADERS  # the slot header (descriptors, progress) and the call header
        flat, o = a.reshape(-1), out.reshape(-1)
        W = self.W
        mw = self.my_d[q]
        W[mw + DESC] = self.pids[self.me]
        W[mw + DESC + 6] = cma.address(o)  # where the peers push
        W[mw + DESC + 2] = 0  # not read in place: nobody maps it (nor reads its address, DESC + 1)
        _META.pack_into(self.page.mm, self.hoff[h], seq, sc.crc, sc.nbytes, sc.head)
        self._set(self.my_w[h], f)  # publish
        dst = o[off:off + count]
        step = max(1, self.push_piece // flat.dtype.itemsize)
        cross = self._cross
        # outputs too large for the cache (policy.stream_min_bytes): this rank's block goes into its output with
        # streaming stores and is pushed from the input, which that copy has just read into the cache; else the
        # copy is pushed (in cache)
        streamed = stream.available and o.nbytes * self.n >= self._stream_min(sc)
        for lo in range(0, count, step):
            src = flat[lo:lo + step]
            piece = dst[lo:lo + step]
            if streamed:
                stream.copy(piece, src)
            else:
                piece[...] = src
                src = piece
            if lo == 0:  # the first piece was copied while the peers published
                self._gather_headers(sc, f, h, seq, timeout)
            for peer, at in pushes:
                cross(peer, q, DESC + 6, at + lo, src, True)
        if not count:
            self._gather_headers(sc, f, h, seq, timeout)
        base = ROUND_STRIDE * f
        self._set(mw + RD, base + end)
        self._await_round(waits, q, base, seq, sc, timeout)
        self._set(self.done_w, f)

    def _stream_min(self, sc: Small) -> int:
        """The host's bytes from which this shape's copies stream: the rule's (policy.stream_min_bytes), or
        a measured shape's forced choice (Small.stream: every copy of at least stream.MIN_BYTES, or none)."""
        return self.stream_min if sc.stream is None else 0 if sc.stream else 1 << 62

    def _bind(self, sc: Small, pos: int, key: tuple, mk: tuple, isz: int, early: bool = False) -> Any:
        """The call shape's program bound for one slot parity and the facts of a call that decide what its
        ops do: key = (parity, input read in place, in place, input and output overlap), mk = the peers
        whose input is mapped in place. early: (the first round's early ops, this rank's slot); else the
        ops of each round. Each op is a callable (buffers, mapped) -> None. What is the same on every such
        call is decided here once: the ops that do nothing (empty, elided, no-op in place) go; a slot's
        view (this rank's, a peer's) is made here; a copy or a chain whose sources all lie in this rank's
        buffers or the peers' slots runs as a few slices and ufunc calls. An op that reads a peer's own
        buffer (mapped, or by cross-memory attach), writes into one, or whose source may overlap its
        destination in this call runs through _op."""
        _, serial, inplace, overlap = key
        prog = sc.program
        stack = sc.stack[pos] if prog.scratch else None
        # the outputs of the host's ranks in this call: copies into them stream when they are too large
        # to be in cache (policy.stream_min_bytes)
        smin = self._stream_min(sc)
        streamed = stream.available and self.host_outputs(sc.kind, sc.count * isz) >= smin
        slot_streamed = stream.available and sc.count * isz * self.n >= smin  # the inputs, into the slots

        def bind(op: Any) -> Any:
            generic = (lambda bufs, mapped, op=op: self._op(sc, op, bufs, mapped, pos, serial, inplace))
            if isinstance(op, PutOp):
                return generic if op.count else None
            if op.pushes:
                return generic
            n = op.count
            if n == 0 or (op.elide and serial) or (op.noop and inplace):
                return None
            if any(s.peer != LOCAL and (s.buf != SCR or (s.alt >= 0 and s.peer in mk) or stack is None)
                   for s in op.srcs):
                return generic  # a peer's own buffer (or its input, mapped, in place of its slot)
            if op.hazard and (overlap or any(s.peer == LOCAL and s.buf == op.buf and s.off < op.off + n
                                             and op.off < s.off + n for s in op.srcs)):
                return generic  # a local source may overlap the destination in this call

            def spec(buf: int, peer: int, off: int) -> tuple:  # (fixed view, None) or (None, (buf, lo, hi))
                if peer != LOCAL:
                    return stack[peer][off:off + n], None
                if buf == SCR:
                    return stack[self.me][off:off + n], None
                return None, (buf, off, off + n)

            dv, du = spec(op.buf, LOCAL, op.off)
            srcs = [spec(s.buf, s.peer, s.off) + (s.reduce,) for s in op.srcs]
            fn = sc.fn
            if len(srcs) == 1 and not srcs[0][2]:  # one copy
                sv, su, _ = srcs[0]
                if du is not None and du[0] == OUT and streamed and n * isz >= stream.MIN_BYTES:
                    # into an output too large to be in cache: streaming stores (transport/stream.py)
                    if sv is not None:
                        def run(bufs, mapped, s=sv, lo=du[1], hi=du[2], copy=stream.copy):
                            copy(bufs[OUT][lo:hi], s)
                    else:
                        def run(bufs, mapped, lo=du[1], hi=du[2], sb=su[0], slo=su[1], shi=su[2], copy=stream.copy):
                            copy(bufs[OUT][lo:hi], bufs[sb][slo:shi])
                    return run
                if dv is not None and sv is None and slot_streamed and n * isz >= stream.MIN_BYTES:
                    # into this rank's slot, when the host's slots hold that much in this call: their lines
                    # are not in cache either (the peers read them from memory, as after the slot's rotation)
                    def run(bufs, mapped, d=dv, b=su[0], lo=su[1], hi=su[2], copy=stream.copy):
                        copy(d, bufs[b][lo:hi])
                    return run
                if dv is not None and sv is not None:
                    def run(bufs, mapped, d=dv, s=sv):
                        d[...] = s
                elif dv is not None:
                    def run(bufs, mapped, d=dv, b=su[0], lo=su[1], hi=su[2]):
                        d[...] = bufs[b][lo:hi]
                elif sv is not None:
                    def run(bufs, mapped, s=sv, b=du[0], lo=du[1], hi=du[2]):
                        bufs[b][lo:hi] = s
                else:
                    def run(bufs, mapped, b=du[0], lo=du[1], hi=du[2], sb=su[0], slo=su[1], shi=su[2]):
                        bufs[b][lo:hi] = bufs[sb][slo:shi]
                return run
            # a chain, walked a piece at a time (the destination stays in cache across its sources), as _op
            step = max(1, 2 * self.chunk // isz)
            step = n if n <= step else step
            pieces = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
            pair = len(srcs) > 1 and not srcs[0][2] and srcs[1][2]

            def run(bufs, mapped, dv=dv, du=du, srcs=srcs, pieces=pieces, pair=pair, fn=fn):
                dst = dv if dv is not None else bufs[du[0]][du[1]:du[2]]
                views = [v if v is not None else bufs[u[0]][u[1]:u[2]] for v, u, _ in srcs]
                for lo, hi in pieces:
                    acc = dst[lo:hi]
                    j = 0
                    if pair:
                        fn(views[0][lo:hi], views[1][lo:hi], out=acc)
                        j = 2
                    for k in range(j, len(srcs)):
                        if srcs[k][2]:
                            fn(acc, views[k][lo:hi], out=acc)
                        else:
                            acc[...] = views[k][lo:hi]
            return run

        rounds = prog.rounds
        if early:
            return (tuple(r for r in (bind(op) for op in (rounds[0].early if rounds else ())) if r is not None),
                    stack[self.me] if stack is not None else None)
        return [tuple(r for r in (bind(op) for op in rnd.ops) if r is not None) for rnd in rounds]

    def _cross(self, i: int, q: int, word: int, off: int, buf: np.ndarray, write: bool) -> None:
        """buf <-> rank i's buffer (its input: word DESC + 1, its output: DESC + 6) from element off, by
        cross-memory attach in pieces of 64 chunks; PeerClosed naming rank i when it fails."""
        W = self.W
        isz = buf.dtype.itemsize
        piece = self.cma_piece // isz
        w = self.slot_w[i][q]
        pid, base = W[w + DESC], W[w + word] + off * isz
        move = cma.write if write else cma.read
        try:
            if buf.size <= piece:
                move(pid, base, cma.address(buf), buf.nbytes)
            else:
                at = cma.address(buf)
                for lo in range(0, buf.size, piece):
                    move(pid, base + lo * isz, at + lo * isz, min(piece, buf.size - lo) * isz)
        except OSError as e:
            from ..transport.base import PeerClosed

            raise PeerClosed(self.members[i], f"({'writing into' if write else 'reading'} its buffer failed: "
                                              f"{e})") from None

    def _op(self, sc: Small, op: Any, bufs: tuple, mapped: Optional[dict], pos: int, serial: int,
            inplace: bool) -> None:
        """One operation of a page program (pageplan.Move or PutOp) on this call's buffers (input, output,
        slot); mapped: the peers' inputs mapped in place; pos: the call's place in the slots (its parity
        pos & 1); serial: this rank's input is read in place; inplace: the call's input is its output's
        chunk (the Schedule's no-op copies are skipped)."""
        q = pos & 1
        if isinstance(op, PutOp):
            if op.count:
                self._cross(op.peer, q, DESC + 6, op.dst_off, bufs[op.buf][op.off:op.off + op.count], True)
            return
        n = op.count
        if n == 0 or (op.elide and serial) or (op.noop and inplace):
            if n and op.noop and inplace and op.pushes:  # already there: only the pushes remain
                dst = bufs[op.buf][op.off:op.off + n]
                for peer, at in op.pushes:
                    self._cross(peer, q, DESC + 6, at, dst, True)
            return  # nothing to do, the peers read this part of my input in place, or it is already there
        dst = bufs[op.buf][op.off:op.off + n]
        srcs = op.srcs
        if len(srcs) == 1 and not srcs[0].reduce and not op.pushes:  # one copy
            s = srcs[0]
            if s.peer == LOCAL:
                dst[...] = bufs[s.buf][s.off:s.off + n]
                return
            view, far = self._source(sc, s, n, mapped, pos)
            if view is None:
                self._cross(far[0], q, far[1], far[2], dst, False)
            else:
                dst[...] = view
            return
        srcs = [self._source(sc, s, n, mapped, pos) + (s.reduce,) if s.peer != LOCAL else
                (bufs[s.buf][s.off:s.off + n], None, s.reduce) for s in srcs]
        aligned: set = set()
        save = False
        if op.hazard:
            for j, (view, _, _) in enumerate(srcs):  # a local source that overlaps the destination otherwise
                if view is not None and np.may_share_memory(view, dst) and \
                        view.__array_interface__["data"][0] != dst.__array_interface__["data"][0]:
                    srcs[j] = (view.copy(), None, srcs[j][2])  # than element for element: read it first
            # a source that is the destination itself (in place: this rank's own chunk) is read from a copy
            # of each piece when an earlier source has written over it
            aligned = {j for j, (view, _, _) in enumerate(srcs) if view is not None and np.may_share_memory(view, dst)}
            save = any(j > 0 for j in aligned)
        # a chain: the destination a piece at a time (it stays in cache across the sources)
        isz = dst.dtype.itemsize
        fn = sc.fn
        step = max(1, 2 * self.chunk // isz)
        if op.pushes and len(srcs) == 1 and not srcs[0][2] and srcs[0][0] is not None:
            step = max(1, self.push_piece // isz)  # a plain copy pushed out: fewer, larger writes
        # a copy then a reduction, both readable in place: one operation (acc = s0 op s1)
        pair = len(srcs) > 1 and not srcs[0][2] and srcs[1][2] and srcs[0][0] is not None and \
            srcs[1][0] is not None and not (aligned & {0, 1})
        far_any = save or any(view is None for view, _, _ in srcs)
        if not far_any and n <= step:
            step = n  # one piece, no scratch: every source is readable in place
        # a reduction whose destination lies 1-31 bytes past a source modulo 4 KiB (two arrays allocated one
        # after the other from the heap) runs every load into the store just made (4K aliasing,
        # transport/cma.py): each piece is then reduced in a staging buffer 2 KiB off it and copied out
        # (2-rank reduce_scatter 4 MiB, output 16 bytes past the input: 1856 -> 900 us). Plain copies of
        # pieces this large take glibc's non-temporal path, which does not suffer it (staging cost them
        # 0.62-0.95x)
        stage = not aligned and not save and n * isz >= cma.BOUNCE_MIN and any(red for _, _, red in srcs) and any(
            view is not None and cma.aliased(cma.address(dst), cma.address(view)) for view, _, _ in srcs)
        first_reduces = not pair and srcs[0][2]
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            out_piece = acc = dst[lo:hi]
            if stage:
                acc = self._staging(out_piece)
                if first_reduces:  # the destination holds the first operand (in place: this rank's input)
                    acc[...] = out_piece
            if far_any:
                both = self._scratch(2 * (hi - lo) * isz).view(dst.dtype)
                tmp = both[:hi - lo]
            if save:
                saved = both[hi - lo:]
                saved[...] = acc
            if pair:
                fn(srcs[0][0][lo:hi], srcs[1][0][lo:hi], out=acc)
            for j, (view, far, red) in enumerate(srcs):
                if pair and j < 2:
                    continue
                if view is not None:
                    if j in aligned:
                        if j == 0 and not red:
                            continue  # the destination already holds it
                        src = saved if j > 0 else acc
                    else:
                        src = view[lo:hi]
                    if red:
                        fn(acc, src, out=acc)
                    else:
                        acc[...] = src
                elif not red:
                    self._cross(far[0], q, far[1], far[2] + lo, acc, False)
                else:
                    self._cross(far[0], q, far[1], far[2] + lo, tmp, False)
                    fn(acc, tmp, out=acc)
            if stage:
                out_piece[...] = acc
            for peer, at in op.pushes:  # the piece is final: into the peers' outputs while it is in cache
                self._cross(peer, q, DESC + 6, at + lo, acc, True)

    def _source(self, sc: Small, s: Any, n: int, mapped: dict, pos: int) -> tuple:
        """A peer's source chunk: (a view to read, None), or (None, (peer, word, offset)) to read by
        cross-memory attach. A peer's slot is shared memory, or its input itself where it skipped the copy
        into the slot; its input (or its output, when that is its input) is read in place when mapped."""
        if s.buf == SCR:
            v = mapped.get(s.peer) if s.alt >= 0 else None
            return (sc.stack[pos][s.peer][s.off:s.off + n] if v is None else v[s.alt:s.alt + n]), None
        v = mapped.get(s.peer)
        if v is not None and s.buf == OUT:  # a peer's output is its mapped input only when they are one
            w = self.slot_w[s.peer][pos & 1] + DESC
            if self.W[w + 6] != self.W[w + 1]:
                v = None
        if v is not None:
            return v[s.off:s.off + n], None
        return None, (s.peer, DESC + 1 if s.buf == IN else DESC + 6, s.off)

    def _staging(self, piece: np.ndarray) -> np.ndarray:
        """A buffer for one piece of a destination, 2 KiB off it modulo 4 KiB (kept between calls)."""
        need = piece.nbytes + 8192
        if self._stage is None or self._stage.nbytes < need:
            self._stage = np.empty(need, dtype=np.uint8)
        off = (cma.address(piece) + 2048 - cma.address(self._stage)) & 4095
        return self._stage[off:off + piece.nbytes].view(piece.dtype)

    def _scratch(self, nbytes: int) -> np.ndarray:
        """nbytes of this rank's scratch (kept between calls: fresh pages fault)."""
        if self._piece is None or self._piece.nbytes < nbytes:
            self._piece = np.empty(nbytes, dtype=np.uint8)
        return self._piece[:nbytes]
