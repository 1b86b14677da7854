/* The compiled core of the host page's one-shot path (runtime/oneshot.py's OneShot.hot, `slots`): one call
 * of a cached call shape, in C. It executes the offsets that FastPath.small derived from the Schedule's
 * views (pageproto.Small: mine / parts / stack), with the page protocol of runtime/pageproto.py: payload,
 * header, publish last, bells; the peers' headers checked (group seq and signature CRC); reductions in
 * rank order (every rank gets identical bits); done word, bells.
 *
 * It never raises for the protocol: where the Python path would wait longer than a spin, sleep, or raise
 * (a peer not done with the slot, a peer not yet published, a signature mismatch), it returns a code and
 * runtime/oneshot.py continues that call in Python from the same point (the same waits, timeouts, blame
 * and CollectiveMismatchError). INTERLINK_NO_CCORE=1 turns it off (runtime/ccore.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define MAXR 64
/* streaming stores into the slot, measured: see slot_lead */
#define SLOT_WARM 8
#define SLOT_BLOCK 6
#define SLOT_SKIP 3
#define SLOT_BLOCKS 4
#define SLOT_MARGIN 0.9
#define SLOT_PROBE_EVERY 100
#define HDR 16 /* call headers a rank keeps (transport/shm.py HEADERS): call f's is entry f % HDR */
enum { AR = 0, BC = 1, AG = 2, RS = 3, A2A = 5 };
enum { OP_SUM = 0, OP_PROD = 1, OP_MIN = 2, OP_MAX = 3, OP_COPY = 9 };
enum { T_F32 = 0, T_F64 = 1, T_I32 = 2, T_I64 = 3, T_NONE = 9 };
/* return codes: 0 done; 1 nothing done (the slot is not free yet: run the whole call in Python);
 * 2 published, the peers' headers are not all there or do not match (continue in Python from
 * _gather_headers) */
#define SIG_BYTES 80
#define SEQ_GSEQ 2
#define SEQ_CRC 3

static inline uint64_t ld(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct {
    PyObject_HEAD
    Py_buffer view;   /* the host page */
    int have_view;
    char *base;
    int n, me, npeers;
    Py_ssize_t my_w[HDR];           /* this rank's call headers (u64 index of the published call number) */
    Py_ssize_t peer_w[HDR][MAXR];   /* the peers' call headers, per entry */
    Py_ssize_t done_w;              /* this rank's done word (u64 index) */
    Py_ssize_t done_all[MAXR];      /* every rank's done word (u64 index) */
    Py_ssize_t hoff[HDR];           /* byte offset of this rank's header (group seq word) per entry */
    Py_ssize_t sleep_w[MAXR];       /* peers' sleeping flags (u32 index) */
    Py_ssize_t bell_w[MAXR];        /* peers' doorbell counters (u32 index) */
    long spin, yield_after;
    long long spin_wall_ns;         /* the longest a wait spins (runtime/engine.py SPIN_WALL_S): a loaded core's
                                     * yields can each cost a timeslice */
    long long slot_stream_min;      /* a shape whose copy into this rank's slot is at least this many bytes may
                                     * use streaming stores (runtime/policy.py slot_stream) */
    int slot_stream_mode;           /* 0 never, 1 always (from slot_stream_min), 2 measured (slot_lead) */
    unsigned long long stream_calls; /* calls whose copy into the slot streamed (tests read it) */
    unsigned long long f, safe;     /* FastPath.f and FastPath.safe live here when the core is on */
    unsigned long long pend, pend_hi; /* FastPath.pend..pend_hi: a broadcast root's calls whose peers' headers
                                     * are not yet checked (0: none); its done word passes each once they are */
    unsigned long long last, run;   /* FastPath.last, .run: the last call's shape (Small.lid), calls in a row of it */
    unsigned long long root_copy_ns; /* a broadcast receiver's last call: its root's copy into the slot (ns) */
    unsigned long long calls;       /* calls the core completed (tests read it) */
    unsigned long long prog_calls;  /* page-program calls the core completed (core_prog) */
    unsigned long long prog_streamed; /* copies of those programs made with streaming stores (tests read it) */
} Core;

/* streaming stores into the slot, measured (slot_lead), per call shape (a Shape's, a Prog's): its call time (ns)
 * with plain (0) and streaming (1) copies into the slot, the current block's timed calls; calls of the shape,
 * calls left in the current block, calls since the last block, the block's timed calls, calls that streamed */
typedef struct {
    double cost[2], bt[SLOT_BLOCK];
    unsigned int ncalls, left, since, bn, streamed;
    int block;           /* the copy of the block being timed (-1: none) */
    int follow;          /* another rank's: the copy the leader made in the last call of this shape */
    int force;           /* the leader's: 1 plain, 2 streaming copies on every call, untimed (runtime/autotune.py
                          * measures a path's two copies while it measures the path); 0 measured (slot_lead) */
    int pend_arm;        /* a timed call that went on in Python (Core.finish times it to its end): its copy, */
    long long pend_t0;   /* its start (ns, CLOCK_MONOTONIC; 0: none) */
    uint64_t pend_f;     /* and its call number */
} Lead;

typedef struct {
    PyObject_HEAD
    int kind, op, dtype, sends, avg, npos, nparts, depth;
    unsigned long long lid; /* the Small's number (Core.last) */
    int rootk;           /* a broadcast: the root's index among the peers (-1: this rank is the root) */
    Py_ssize_t count, itemsize, nbytes;
    Py_ssize_t rowbytes; /* a rank's block: all_gather's input, all_to_all's and reduce_scatter's 1/n of it */
    unsigned long long crc;
    unsigned char head[SIG_BYTES];
    Py_ssize_t *mine;    /* [npos] byte offset of this rank's payload */
    Py_ssize_t *parts;   /* [npos * nparts] byte offsets of the parts read, rank order */
    Lead lead;           /* its copies into the slot, measured (slot_lead) */
} Shape;

/* ---------------------------------------------------------------------------------------------- */
/* a full barrier (store -> load ordering for the doorbell's Dekker handshake): on x86-64 a locked add to
 * the stack, which orders ordinary memory as mfence does at a fraction of its cost (Linux's smp_mb) */
static inline void full_barrier(void) {
#if defined(__x86_64__)
    __asm__ __volatile__("lock; addl $0,-8(%%rsp)" ::: "memory", "cc");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* CLOCK_MONOTONIC in ns (Python's time.monotonic and perf_counter read the same clock here) */
static inline long long mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void ring(Core *c) {
    uint32_t *B = (uint32_t *)c->base;
    full_barrier();
    for (int k = 0; k < c->npeers; k++) {
        if (__atomic_load_n(&B[c->sleep_w[k]], __ATOMIC_ACQUIRE)) {
            uint32_t *w = &B[c->bell_w[k]];
            __atomic_store_n(w, *w + 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
        }
    }
}

/* 1 every rank has finished reading call need (safe moves on to what they all have), else 0 */
static int done_ready(Core *c, uint64_t need) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < c->n; i++) {
        uint64_t d = ld(&W[c->done_all[i]]);
        if (d < need) return 0;
        if (d < m) m = d;
    }
    if (m > c->safe) c->safe = m;
    return 1;
}

/* 1: every peer published call f with this seq and crc; 0: not yet; -1: a peer published another call */
static int peers_ready(Core *c, int q, uint64_t f, uint64_t seq, uint64_t crc) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    for (int k = 0; k < c->npeers; k++) {
        Py_ssize_t pw = c->peer_w[q][k];
        if (ld(&W[pw]) < f) return 0;
        if (W[pw + SEQ_GSEQ] != seq || W[pw + SEQ_CRC] != crc) return -1;
    }
    return 1;
}

/* the root of a broadcast alone (peer index k): 1 published call f with this seq and crc; 0 not yet; -1 another */
static int root_ready(Core *c, int q, int k, uint64_t f, uint64_t seq, uint64_t crc) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    Py_ssize_t pw = c->peer_w[q][k];
    if (ld(&W[pw]) < f) return 0;
    return (W[pw + SEQ_GSEQ] != seq || W[pw + SEQ_CRC] != crc) ? -1 : 1;
}

/* a broadcast's receiver, the root's header checked: every other peer that has published call f shows this
 * call (-1: one shows another); 1 all published, 0 not all yet */
static int others_seen(Core *c, int q, uint64_t f, uint64_t seq, uint64_t crc) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    int all = 1;
    for (int k = 0; k < c->npeers; k++) {
        Py_ssize_t pw = c->peer_w[q][k];
        if (ld(&W[pw]) < f) { all = 0; continue; }
        if (W[pw + SEQ_GSEQ] != seq || W[pw + SEQ_CRC] != crc) return -1;
    }
    return all;
}

/* the pending root calls pend..pend_hi (FastPath.pend), oldest first: each that every peer has published with
 * this rank's header is checked, done written for it, and the range moves on. 1 all settled; 0 one not yet
 * published by every peer; -1 a peer published another call (OneShot._settle raises naming it) */
static int settle_some(Core *c) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    int r = 1, moved = 0;
    while (c->pend) {
        uint64_t g = c->pend;
        int q = (int)(g % HDR);
        const uint64_t *h = (const uint64_t *)(c->base + c->hoff[q]);
        r = peers_ready(c, q, g, h[0], h[1]);
        if (r != 1) break;
        if (g >= c->pend_hi) c->pend = c->pend_hi = 0;
        else c->pend = g + 1;
        st(&W[c->done_w], g);
        moved = 1;
    }
    if (moved) ring(c);
    return c->pend ? r : 1;
}

/* every rank finished reading call need, this rank's pending root calls settled meanwhile: 1, 0 not yet, -1 a
 * pending call mismatched */
static int done_after(Core *c, uint64_t need) {
    if (c->pend && settle_some(c) < 0) return -1;
    return done_ready(c, need);
}

/* numpy's minimum/maximum: a NaN operand wins (the first if both), ties give the second */
#define FMIN_ ((isnan(x) || x < y) ? x : y)
#define FMAX_ ((isnan(x) || x > y) ? x : y)
#define IMIN_ (x < y ? x : y)
#define IMAX_ (x > y ? x : y)

/* d = x op y, element by element (d may be x): numpy's ufunc on the same operands gives the same bits */
#define COMB_LOOP(T, OPX)                                                                              \
    do {                                                                                               \
        T *D_ = (T *)d;                                                                                \
        const T *X_ = (const T *)xs, *Y_ = (const T *)ys;                                              \
        for (Py_ssize_t j = 0; j < cnt; j++) { T x = X_[j], y = Y_[j]; D_[j] = OPX; }                  \
    } while (0)
#define COMB(T, EXPR_SUM, EXPR_PROD, MINX, MAXX)                                                       \
    do {                                                                                               \
        switch (op) {                                                                                  \
        case OP_SUM: COMB_LOOP(T, EXPR_SUM); break;                                                    \
        case OP_PROD: COMB_LOOP(T, EXPR_PROD); break;                                                  \
        case OP_MIN: COMB_LOOP(T, MINX); break;                                                        \
        default: COMB_LOOP(T, MAXX); break;                                                            \
        }                                                                                              \
    } while (0)

static void combine(int dtype, int op, char *d, const char *xs, const char *ys, Py_ssize_t cnt) {
    switch (dtype) {
    case T_F32: COMB(float, x + y, x * y, FMIN_, FMAX_); break;
    case T_F64: COMB(double, x + y, x * y, FMIN_, FMAX_); break;
    case T_I32:
        COMB(int32_t, (int32_t)((uint32_t)x + (uint32_t)y), (int32_t)((uint32_t)x * (uint32_t)y), IMIN_, IMAX_);
        break;
    case T_I64:
        COMB(int64_t, (int64_t)((uint64_t)x + (uint64_t)y), (int64_t)((uint64_t)x * (uint64_t)y), IMIN_, IMAX_);
        break;
    }
}

/* a SUM turned into an AVG in place (floats: ccore refuses the core an integer AVG), as ops.finish_avg */
static void divide_avg(int dtype, char *dst, Py_ssize_t cnt, int n) {
    if (dtype == T_F32) {
        float *d = (float *)dst, m = (float)n;
        for (Py_ssize_t j = 0; j < cnt; j++) d[j] = d[j] / m;
    } else {
        double *d = (double *)dst, m = (double)n;
        for (Py_ssize_t j = 0; j < cnt; j++) d[j] = d[j] / m;
    }
}

/* dst = ((p0 op p1) op p2) ... in rank order, one pass per part, as the Python path's ufunc calls do (the same
 * operations on every element in the same order: the same bits) */
static void reduce(Core *c, Shape *s, const Py_ssize_t *P, char *dst, Py_ssize_t cnt, const char *own) {
    int np = s->nparts;
    /* part k: the slot at P[k], or for k == me with `own` (a reduce_scatter: this rank's block of its input,
     * which it does not copy into its slot) that block */
#define PART(k) ((own && (k) == c->me) ? own : c->base + P[k])
    if (np == 1) {
        memmove(dst, PART(0), (size_t)(cnt * s->itemsize));
    } else {
        combine(s->dtype, s->op, dst, PART(0), PART(1), cnt);
        for (int k = 2; k < np; k++) combine(s->dtype, s->op, dst, dst, PART(k), cnt);
    }
#undef PART
    if (s->avg && c->n > 1) divide_avg(s->dtype, dst, cnt, c->n);
}

static int get_buf(PyObject *o, Py_buffer *b, int writable, Py_ssize_t need) {
    if (PyObject_GetBuffer(o, b, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (b->len != need) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_ValueError, "buffer size does not match the call shape");
        return -1;
    }
    return 0;
}

/* r = EXPR until it is not 0, at most c->spin times: pause, and from yield_after on yield the core with the GIL
 * released (ranks sharing a core let their peer run; other threads of this process run meanwhile) */
#define SPIN_UNTIL(r, EXPR)                                                                            \
    do {                                                                                               \
        long spins_ = 0;                                                                               \
        long long t0_ = 0;                                                                             \
        PyThreadState *ts_ = NULL;                                                                     \
        while (((r) = (EXPR)) == 0) {                                                                  \
            if (++spins_ >= c->spin) break;                                                            \
            if (spins_ > c->yield_after) {                                                             \
                if (!ts_) ts_ = PyEval_SaveThread();                                                   \
                sched_yield();                                                                         \
                if (!(spins_ & 31)) {                                                                  \
                    long long now_ = mono_ns();                                                        \
                    if (!t0_) t0_ = now_;                                                              \
                    else if (now_ - t0_ > c->spin_wall_ns) break;                                      \
                }                                                                                      \
            } else {                                                                                   \
                cpu_relax();                                                                           \
            }                                                                                          \
        }                                                                                              \
        if (ts_) PyEval_RestoreThread(ts_);                                                            \
    } while (0)

/* call f of a shape (its number lid, its depth, whether it writes a payload) may use its places once every rank
 * has finished reading the calls that used them (OneShot._need, _await_done): f-2 in general, f-depth in a run
 * of this shape, f-depth (HDR) for a call that writes no payload. 1: free, and the call noted as this rank's
 * latest (f, last, run); 0: not within the spin (nothing noted: Python runs the whole call) */
static int places_free(Core *c, unsigned long long lid, int depth, int sends, uint64_t f) {
    uint64_t run = c->last == lid ? c->run : 0, d = (uint64_t)depth;
    if (sends && d > 2) {
        if (run + 1 < d) d = run + 1;
        if (d < 2) d = 2;
    }
    if (f > d && c->safe < f - d && !done_ready(c, f - d)) {
        int ok;
        SPIN_UNTIL(ok, done_after(c, f - d));
        if (ok != 1) return 0;
    }
    c->last = lid;
    c->run = run + 1;
    c->f = f;
    return 1;
}

/* A copy into this rank's slot. The slot's lines were last read by the peers (the previous calls through it),
 * so they sit in the peers' caches: a plain store first takes each line back from them (a read for
 * ownership across cores, slow where the cores share no cache: 2 ranks, 256 KiB, 118 us against 12 us with
 * streaming stores). From slot_stream_min bytes the copy uses streaming stores instead (whole lines straight
 * to memory, the peers' copies invalidated), fenced before the call publishes. */
static void slot_copy(int streamed, char *dst, const char *src, size_t n) {
#if defined(__x86_64__)
    size_t head = (size_t)((16 - ((uintptr_t)dst & 15)) & 15);
    if (streamed && n >= head + 64) { /* the head to a 16-byte boundary, whole lines streamed, the tail */
        if (head) { memcpy(dst, src, head); dst += head; src += head; n -= head; }
        size_t body = n & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            __m128i x0 = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i x1 = _mm_loadu_si128((const __m128i *)(src + i + 16));
            __m128i x2 = _mm_loadu_si128((const __m128i *)(src + i + 32));
            __m128i x3 = _mm_loadu_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), x0);
            _mm_stream_si128((__m128i *)(dst + i + 16), x1);
            _mm_stream_si128((__m128i *)(dst + i + 32), x2);
            _mm_stream_si128((__m128i *)(dst + i + 48), x3);
        }
        if (n > body) memcpy(dst + body, src + body, n - body);
        _mm_sfence();
        return;
    }
#endif
    (void)streamed;
    memcpy(dst, src, n);
}

/* Which copy into the slot a call of shape s makes (1: streaming stores). Where the cores share a cache the
 * plain copy is faster (the peers then read the payload from that cache: 2 ranks, all_to_all of 1 MiB,
 * 38 us against 56-75 with streaming stores); where they do not (two dies, two sockets, or a VM's cores
 * placed so, which on a shared VM changes by the minute) the plain copy is 4-7x slower (250-285 us against
 * 56). A call waits for every rank's copy, so one rank switching alone shows nothing: the host's first rank
 * (local rank 0) measures and decides for all, and puts the copy it made into its call header (the word
 * after the byte count); every other rank makes the copy rank 0 made in the last call of the same shape (it
 * reads it with rank 0's header in that call; a plain copy before the first, or where rank 0 ran that call
 * in Python). Rank 0, per shape (mode 2): its first SLOT_WARM calls plain
 * and not timed (first touches, cold caches); then SLOT_BLOCKS blocks of SLOT_BLOCK calls, plain and
 * streaming in turn, each block's median the copy's cost; from then on the cheaper copy (streaming where it
 * costs less than SLOT_MARGIN of the plain one), its cost a moving average of its calls (each at most twice it), and after every
 * SLOT_PROBE_EVERY x (cost ratio, at most 4)^2 of them a block of the other copy, whose median replaces
 * that one's cost (the host may have changed since). A block's first SLOT_SKIP calls
 * and the call after it are not timed (the other ranks follow one call late; the lines are where the other
 * copy left them). A broadcast's root does not wait for its readers, so its calls do not show what its copy
 * costs them: there the first rank that is not the root decides (it times its calls, which wait for the
 * root's copy and read it), and the root makes the copy that rank made in its newest call of the shape
 * the root can see (its header). The choice changes no byte of any result, only where the payload's lines
 * are when the peers read them. */
static int slot_eligible(Core *c, Shape *s) {
    if (c->slot_stream_mode == 0 || c->slot_stream_min <= 0 || c->n < 2) return 0;
    /* the bytes a rank copies into its slot (a broadcast: its root's payload, the same on every rank) */
    Py_ssize_t bytes = s->kind == A2A || s->kind == RS ? s->rowbytes * (c->n - 1)
                       : s->kind == BC ? s->count * s->itemsize : s->nbytes;
    return bytes >= c->slot_stream_min;
}

/* who decides a shape's copy: rank 0, but for a broadcast the first rank that is not its root (the root
 * does not wait for its readers, so its calls do not show what its copy costs them) */
static int slot_leader(Core *c, Shape *s) {
    if (s->kind != BC) return c->me == 0;
    if (s->sends) return 0;
    int root = s->rootk < c->me ? s->rootk : s->rootk + 1;
    return c->me == (root == 0 ? 1 : 0);
}

/* the leader's choice for this call of shape s (timed: whether to time it) */
static int slot_lead(Lead *s, int *timed) {
    *timed = 0;
    if (s->force) return s->force - 1; /* forced by a path probe (autotune.py): untimed, not counted */
    unsigned k = s->ncalls++;
    if (k < SLOT_WARM) return 0;
    k -= SLOT_WARM;
    if (k < SLOT_BLOCK * SLOT_BLOCKS) { /* the first blocks: plain, streaming, plain, streaming */
        s->block = (int)((k / SLOT_BLOCK) & 1);
        s->left = SLOT_BLOCK - 1 - k % SLOT_BLOCK;
        *timed = k % SLOT_BLOCK >= SLOT_SKIP;
        return s->block;
    }
    int best = s->cost[1] < SLOT_MARGIN * s->cost[0]; /* streaming where clearly cheaper */
    if (s->left) { /* in a block of the other copy */
        s->left--;
        *timed = SLOT_BLOCK - 1 - s->left >= SLOT_SKIP;
        return s->block;
    }
    if (s->block >= 0) { /* the call after a block: not timed */
        s->block = -1;
        return best;
    }
    double ratio = s->cost[!best] / (s->cost[best] > 0 ? s->cost[best] : 1.0);
    if (ratio < 1) ratio = 1;
    if (ratio > 4) ratio = 4;
    if (++s->since >= (unsigned)(SLOT_PROBE_EVERY * ratio * ratio)) {
        s->since = 0;
        s->block = !best;
        s->left = SLOT_BLOCK - 1;
        return s->block;
    }
    *timed = 1;
    return best;
}

/* a timed call of the leader's (dt ns, with copy arm): a block's median replaces the copy's cost when the block
 * ends; out of a block, a moving average */
static void lead_time(Lead *s, int arm, double dt) {
    if (s->block >= 0) {
        if (s->bn < SLOT_BLOCK) s->bt[s->bn++] = dt;
        if (s->left == 0) {
            double *t = s->bt;
            for (unsigned i = 1; i < s->bn; i++) /* insertion sort of a few */
                for (unsigned j = i; j > 0 && t[j - 1] > t[j]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
            s->cost[arm] = s->bn % 2 ? t[s->bn / 2] : 0.5 * (t[s->bn / 2 - 1] + t[s->bn / 2]);
            s->bn = 0;
        }
    } else {
        /* a call slowed by something else (its core taken away, a peer late) counts as twice the cost at most:
         * one spike moves the estimate by a fifth, not past the other copy's, whose estimate is refreshed only
         * by its next block (up to SLOT_PROBE_EVERY x 16 calls away); a real change still moves it in a few calls */
        double c0 = s->cost[arm];
        if (c0 > 0 && dt > 2 * c0) dt = 2 * c0;
        s->cost[arm] = 0.8 * c0 + 0.2 * dt;
    }
}

/* a timed call (started at t0 ns, with copy arm) that goes on in Python: Core.finish times it to its end */
static void lead_pend(Lead *s, int timed, long long t0, int arm, uint64_t f) {
    if (!timed) return;
    s->pend_t0 = t0;
    s->pend_arm = arm;
    s->pend_f = f;
}

/* a broadcast receiver's call f: its root's copy into the slot (ns, from the root's header; 0 where not timed,
 * or where the root's entry already holds a later call: one timing sample, never a byte of a result) */
static uint64_t root_copy(Core *c, Shape *s, uint64_t f) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    Py_ssize_t pw = c->peer_w[f % HDR][s->rootk];
    return ld(&W[pw]) == f ? W[pw + 5] >> 8 : 0;
}

static int run_call_arm(Core *c, Shape *s, int streamed, uint64_t seq, Py_buffer *a, Py_buffer *o, uint64_t *fo,
                        int *po);

/* the leader's measurement taken as done with these costs (ns, plain and streaming copies: a path probe's blocks
 * of each, runtime/autotune.py): the next calls take the cheaper copy, and its blocks of the other copy go on
 * as after slot_lead's first blocks; the forced copy ends */
static PyObject *lead_seed(Lead *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "seed(cost_plain_ns, cost_streamed_ns)"); return NULL; }
    double c0 = PyFloat_AsDouble(args[0]), c1 = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (!(c0 > 0) || !(c1 > 0)) { PyErr_SetString(PyExc_ValueError, "costs must be positive"); return NULL; }
    s->cost[0] = c0;
    s->cost[1] = c1;
    if (s->ncalls < SLOT_WARM + SLOT_BLOCK * SLOT_BLOCKS) s->ncalls = SLOT_WARM + SLOT_BLOCK * SLOT_BLOCKS;
    s->block = -1;
    s->left = 0;
    s->bn = 0;
    s->since = 0;
    s->force = 0;
    Py_RETURN_NONE;
}

/* One call of shape s with its buffers: 0 done; 1 nothing done (the slot is not free yet); 2 published, the
 * peers' headers not all there or not matching (*fo, *po: the call and its position). The copy into the slot
 * as slot_lead has it (its leader timing the call), then run_call_arm. */
static int run_call(Core *c, Shape *s, uint64_t seq, Py_buffer *a, Py_buffer *o, uint64_t *fo, int *po) {
    if (!slot_eligible(c, s)) return run_call_arm(c, s, 0, seq, a, o, fo, po);
    int timed = 0, arm;
    s->lead.pend_t0 = 0; /* (a call that went on in Python and raised) */
    if (c->slot_stream_mode == 1) arm = 1;
    else if (slot_leader(c, s)) arm = slot_lead(&s->lead, &timed);
    else if (s->kind == BC && s->sends) {
        /* a root: the copy its leader chose in the latest call of this shape the leader has published (the
         * root runs ahead of its readers: up to HDR calls); the leader is peer 0 of the root (rank 1 where
         * the root is rank 0) */
        volatile uint64_t *W = (volatile uint64_t *)c->base;
        for (uint64_t k = 1; k <= HDR && k <= c->f; k++) { /* the newest entry of the leader's with this shape */
            uint64_t g = c->f + 1 - k;
            Py_ssize_t pw = c->peer_w[g % HDR][0];
            if (ld(&W[pw]) == g && W[pw + SEQ_CRC] == s->crc) {
                s->lead.follow = (W[pw + 5] & 0xff) == 2;
                break;
            }
        }
        arm = s->lead.follow;
    } else arm = s->lead.follow; /* the copy the leader made in the last call of this shape (run_call_arm) */
    long long t0 = timed ? mono_ns() : 0;
    int r = run_call_arm(c, s, arm, seq, a, o, fo, po);
    if (r != 0) {
        /* published, the rest in Python: a call slowed by a wait is as much the copy's as a fast one (the
         * copy can be what the peers wait for), so Python's end of it (Core.finish) times it too */
        if (r == 2) lead_pend(&s->lead, timed, t0, arm, *fo);
        return r;
    }
    if (arm && (s->kind != BC || s->sends)) { /* a broadcast's readers copy nothing in */
        c->stream_calls++;
        s->lead.streamed++;
    }
    if (timed) {
        double dt = (double)(mono_ns() - t0);
        /* a broadcast's leader: the call costs the host the root's copy too, which its own time does not show
         * (the root runs ahead) */
        if (s->kind == BC) dt += (double)c->root_copy_ns;
        lead_time(&s->lead, arm, dt);
    }
    return 0;
}

static int run_call_arm(Core *c, Shape *s, int streamed, uint64_t seq, Py_buffer *a, Py_buffer *o, uint64_t *fo,
                        int *po) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    uint64_t f = c->f + 1;
    int same = c->last == s->lid;
    if (c->pend) { /* the last calls were a broadcast's root that did not wait for its receivers: their headers
                    * (they publish on entering those calls); a root whose run of this broadcast goes on takes
                    * those there are and goes on; any other call settles them all, else Python waits and
                    * checks (OneShot._settle) */
        int r;
        if (s->kind == BC && s->sends && same && s->depth > 2) {
            r = settle_some(c);
            if (r < 0) return 1;
        } else {
            SPIN_UNTIL(r, settle_some(c)); /* ranks sharing a core: the receiver runs meanwhile */
            if (r != 1) return 1;
        }
    }
    int q = (int)(f % HDR);
    int pos = (int)(f % (uint64_t)s->npos);
    uint64_t copy_ns = 0;
    if (!places_free(c, s->lid, s->depth, s->sends, f)) return 1;
    *fo = f;
    *po = pos;
    if (s->kind == A2A || s->kind == RS) {
        /* every block but this rank's own into its slot, in place (the blocks before it, the blocks after it):
         * its own an all_to_all copies out directly, a reduce_scatter reduces from its input */
        size_t lo = (size_t)(s->rowbytes * c->me), hi = lo + (size_t)s->rowbytes;
        if (lo) slot_copy(streamed, c->base + s->mine[pos], a->buf, lo);
        if (hi < (size_t)s->nbytes)
            slot_copy(streamed, c->base + s->mine[pos] + hi, (char *)a->buf + hi, (size_t)s->nbytes - hi);
    } else if (s->sends) {
        /* a broadcast's root whose copy is measured times it: its readers' leader counts it (run_call) */
        int tc = s->kind == BC && c->slot_stream_mode == 2 && slot_eligible(c, s);
        long long t0 = tc ? mono_ns() : 0;
        slot_copy(streamed, c->base + s->mine[pos], a->buf, (size_t)s->nbytes);
        if (tc) {
            long long ns = mono_ns() - t0;
            copy_ns = ns > 0 ? (uint64_t)ns : 1;
        }
    }
    /* the header from word 2: group seq, crc, nbytes, the copy made (low byte: 1 plain, 2 streaming; above it a
     * broadcast root's copy time in ns, 0 where not timed), signature (pageproto._META) */
    {
        uint64_t *h = (uint64_t *)(c->base + c->hoff[q]);
        h[0] = seq; h[1] = s->crc; h[2] = (uint64_t)s->nbytes;
        h[3] = (uint64_t)(streamed + 1) | (copy_ns < (1ULL << 55) ? copy_ns : (1ULL << 55) - 1) << 8;
        memcpy(h + 4, s->head, SIG_BYTES);
    }
    st(&W[c->my_w[q]], f); /* publish last */
    ring(c);
    /* an all_gather's own block: from its input in round 0, as the Schedule has it (all_gather_fast), after the
     * header that tells the peers its slot is written (the copy touches no slot: they read meanwhile) */
    if (s->kind == AG && s->sends)
        memcpy((char *)o->buf + (Py_ssize_t)c->me * s->rowbytes, a->buf, (size_t)s->rowbytes);
    else if (s->kind == A2A) /* the same for an all_to_all's own block */
        memcpy((char *)o->buf + (Py_ssize_t)c->me * s->rowbytes, (char *)a->buf + (Py_ssize_t)c->me * s->rowbytes,
               (size_t)s->rowbytes);
    if (s->kind == BC && !s->sends && s->rootk >= 0) { /* a receiver reads the root's slot alone */
        int r = root_ready(c, q, s->rootk, f, seq, s->crc);
        if (r == 0) {
            SPIN_UNTIL(r, root_ready(c, q, s->rootk, f, seq, s->crc));
        }
        if (r != 1) return 2; /* the root not published yet, or another call: Python waits or raises */
        int seen = others_seen(c, q, f, seq, s->crc);
        if (seen < 0) return 2;
        c->root_copy_ns = root_copy(c, s, f);
        /* (safe stays: a broadcast's root publishes call f before it has checked its receivers' headers of
         * the calls before, so its publishing f does not say it has finished reading them) */
        memcpy(a->buf, c->base + s->parts[(Py_ssize_t)pos * s->nparts], (size_t)(s->count * s->itemsize));
        st(&W[c->done_w], f);
        ring(c);
        c->calls++;
        return 0;
    }
    int r = peers_ready(c, q, f, seq, s->crc);
    if (s->kind == BC && s->sends && r == 0) {
        /* a broadcast's root reads nothing: it returns without waiting for its receivers' headers. They are
         * checked at its next call (settle), and its done word written then; each receiver checks the
         * root's header, and of ranks that all took themselves for the root the last to publish sees the
         * others' (the fence in ring) */
        if (!c->pend) c->pend = f;
        c->pend_hi = f;
        c->calls++;
        return 0;
    }
    if (r == 0) {
        SPIN_UNTIL(r, peers_ready(c, q, f, seq, s->crc));
    }
    if (r != 1) return 2;
    c->safe = f - 1; /* a peer publishes call f only after finishing call f-1 */
    if (c->me != 0) /* rank 0's copy (its header, just checked) */
        s->lead.follow = (W[c->peer_w[q][0] + 5] & 0xff) == 2;
    const Py_ssize_t *P = s->parts + (Py_ssize_t)pos * s->nparts;
    switch (s->kind) {
    case AR:
        reduce(c, s, P, (char *)a->buf, s->count, NULL);
        break;
    case RS: /* its own block from its input (the output never overlaps it here: take_bufs) */
        reduce(c, s, P, (char *)o->buf, s->count / c->n, (char *)a->buf + s->rowbytes * c->me);
        break;
    case BC:
        if (!s->sends) memcpy(a->buf, c->base + P[0], (size_t)(s->count * s->itemsize));
        break;
    case AG: /* every peer's block out of its slot (this rank's own: copied from its input above), from the next
              * rank on (me+1, me+2, ...): in rank order every rank read the same lines first, rank 0's slot */
        for (int d = 1; d < s->nparts; d++) {
            int k = (c->me + d) % s->nparts;
            memcpy((char *)o->buf + (Py_ssize_t)k * s->rowbytes, c->base + P[k], (size_t)s->rowbytes);
        }
        break;
    case A2A: /* block j of the output: block `me` of rank j's slot (this rank's own: copied from its input above) */
        for (int k = 0; k < s->nparts; k++)
            if (k != c->me) memcpy((char *)o->buf + (Py_ssize_t)k * s->rowbytes, c->base + P[k], (size_t)s->rowbytes);
        break;
    }
    if (c->pend) { /* a root's earlier calls of this run: every peer has published them (it has published f) */
        int r2 = settle_some(c);
        if (r2 != 1) return 2; /* Python settles them (and raises) before it finishes call f */
    }
    st(&W[c->done_w], f);
    ring(c);
    c->calls++;
    return 0;
}

/* the call's buffers as the shape needs them: 0, or -1 (no error set) when the core cannot take them as they
 * are (not contiguous, read-only, another size): the Python path then runs (and raises where the call is
 * wrong); an output that overlaps the input, too */
static int take_bufs(Core *c, Shape *s, PyObject *ao, PyObject *oo, Py_buffer *a, Py_buffer *o) {
    /* all_reduce and broadcast take a writable input on every rank (Group._hot), reduce_scatter and
     * all_gather a writable output */
    int wa = s->kind == AR || s->kind == BC;
    if (get_buf(ao, a, wa, s->count * s->itemsize) < 0) { PyErr_Clear(); return -1; }
    if (s->kind == AG || s->kind == RS || s->kind == A2A) {
        Py_ssize_t need = s->kind == AG ? s->count * s->itemsize * c->n
                          : s->kind == A2A ? s->count * s->itemsize : (s->count / c->n) * s->itemsize;
        if (oo == Py_None || get_buf(oo, o, 1, need) < 0) { PyErr_Clear(); PyBuffer_Release(a); return -1; }
        char *a0 = a->buf, *o0 = o->buf;
        if (a0 < o0 + o->len && o0 < a0 + a->len) { PyBuffer_Release(o); PyBuffer_Release(a); return -1; }
    }
    return 0;
}

static void drop_bufs(Shape *s, Py_buffer *a, Py_buffer *o) {
    PyBuffer_Release(a);
    if (s->kind == AG || s->kind == RS || s->kind == A2A) PyBuffer_Release(o);
}

/* Core.hot(shape, a, out, seq): None when done, else (code, f, pos): continue in Python */
static PyObject *core_hot(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "hot(shape, a, out, seq)"); return NULL; }
    Shape *s = (Shape *)args[0];
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[3]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_buffer a, o;
    if (take_bufs(c, s, args[1], args[2], &a, &o) < 0) return Py_BuildValue("(iKi)", 1, 0ULL, 0);
    uint64_t f = 0;
    int pos = 0;
    int r = run_call(c, s, seq, &a, &o, &f, &pos);
    drop_bufs(s, &a, &o);
    if (r == 0) Py_RETURN_NONE;
    return Py_BuildValue("(iKi)", r, (unsigned long long)f, pos);
}

/* ---------------------------------------------------------------------------------------------------
 * Page programs through the slots (runtime/pageexec.py's PageProgram._program, in C): a call too large for the
 * one-shot path whose Schedule's program for this rank (runtime/pageplan.py) reads and writes only this rank's
 * buffers and the ranks' slots: the two-phase all_reduce (`two_phase`), and `slots` above the inline limit. The
 * program comes encoded from runtime/ccore.py (make_prog): its moves (a destination chunk, its chain of sources)
 * and its rounds (the peers' progress each waits for, whether it publishes its end). The words are the Python
 * executor's: the call header, the descriptor word that says the input is not mapped, the progress word
 * (ROUND_STRIDE * call + rounds finished), the done word. Where a wait runs longer than a spin, or a peer's
 * header is not there or does not match, or a peer's input is mapped in place of its slot, the call goes on in
 * Python from that point (OneShot.hot: _program's resume). */
enum { B_IN = 0, B_OUT = 1, B_SCR = 2 };
#define ROUND_STRIDE 16
#define DESC_W 16 /* pageproto.DESC */
#define RD_W 23   /* pageproto.RD */

typedef struct {
    PyObject_HEAD
    int dtype, op, avg, npos, desc, nmaps, skip, pub0, same_out;
    Py_ssize_t itemsize, count, outcount, nbytes, piece, stream_min, end0;
    int stream_out, stream_slot;   /* copies into the outputs, into this rank's slot stream (ccore.make_prog) */
    unsigned long long lid;        /* its Small's number (Core.last) */
    int depth, sends;              /* Small.depth, Small.sends (OneShot._need) */
    int measured;                  /* copies into the slot measured (slot_lead) instead of stream_slot */
    Py_ssize_t slot_bytes;         /* bytes a call copies into this rank's slot from its own buffers */
    Lead lead;
    int arm;                       /* this call's copies into the slot stream */
    unsigned long long crc;
    unsigned char head[SIG_BYTES];
    Py_ssize_t *stack;             /* [npos][n] byte offset of every rank's slot at each place */
    Py_ssize_t slot_w[2][MAXR];    /* every rank's slot header (u64 word) per parity */
    Py_ssize_t maps[MAXR];         /* peers whose input may be mapped in place of their slot */
    Py_ssize_t *code;              /* early moves, then the rounds from `skip` (ccore.make_prog) */
    Py_ssize_t ncode;
    unsigned long long calls;      /* calls of this program the core completed */
} Prog;

static char *prog_buf(Core *c, Prog *p, Py_ssize_t buf, Py_ssize_t peer, int pos, char *in, char *out) {
    if (peer >= 0) return c->base + p->stack[(Py_ssize_t)pos * c->n + peer]; /* a peer's slot */
    if (buf == B_IN) return in;
    if (buf == B_OUT) return out;
    return c->base + p->stack[(Py_ssize_t)pos * c->n + c->me];
}

/* one move: [dst, off, count, nsrcs, skip, (peer, buf, off, reduce) x nsrcs] (skip: a copy that is a no-op
 * in place); returns the next move's code */
static const Py_ssize_t *prog_move(Core *c, Prog *p, const Py_ssize_t *m, int pos, char *in, char *out) {
    Py_ssize_t dst = m[0], off = m[1], cnt = m[2], ns = m[3], isz = p->itemsize;
    const Py_ssize_t *S = m + 5;
    const Py_ssize_t *next = S + 4 * ns;
    if (cnt == 0 || ns == 0 || m[4]) return next;
    char *D = prog_buf(c, p, dst, -1, pos, in, out) + off * isz;
    if (ns == 1 && !S[3]) { /* one copy: streamed into an output too large for the cache, or into this rank's
                             * slot from its own buffers, as PageProgram._bind decides */
        const char *src = prog_buf(c, p, S[1], S[0], pos, in, out) + S[2] * isz;
        size_t nb = (size_t)(cnt * isz);
        int streamed = (Py_ssize_t)nb >= p->stream_min &&
                       ((dst == B_OUT && p->stream_out) || (dst == B_SCR && S[0] < 0 && S[1] != B_SCR && p->arm));
        if (src == D) return next;
        if (streamed) { slot_copy(1, D, src, nb); c->prog_streamed++; }
        else memmove(D, src, nb);
        return next;
    }
    /* a chain, walked a piece at a time (the destination stays in cache across its sources) */
    for (Py_ssize_t lo = 0; lo < cnt; lo += p->piece) {
        Py_ssize_t k = 0, mcnt = cnt - lo < p->piece ? cnt - lo : p->piece;
        char *acc = D + lo * isz;
        if (!S[3]) { /* the first a copy: with a reduction after it, one pass (acc = s0 op s1) */
            const char *s0 = prog_buf(c, p, S[1], S[0], pos, in, out) + (S[2] + lo) * isz;
            if (ns > 1 && S[7]) {
                const char *s1 = prog_buf(c, p, S[5], S[4], pos, in, out) + (S[6] + lo) * isz;
                combine(p->dtype, p->op, acc, s0, s1, mcnt);
                k = 2;
            } else {
                if (s0 != acc) memmove(acc, s0, (size_t)(mcnt * isz));
                k = 1;
            }
        }
        for (; k < ns; k++) {
            const Py_ssize_t *s = S + 4 * k;
            const char *src = prog_buf(c, p, s[1], s[0], pos, in, out) + (s[2] + lo) * isz;
            if (s[3]) combine(p->dtype, p->op, acc, acc, src, mcnt);
            else if (src != acc) memmove(acc, src, (size_t)(mcnt * isz));
        }
    }
    return next;
}

/* 1 every (peer, rounds) of a round's waits has finished that many rounds of call f, else 0 */
static int prog_before(Core *c, Prog *p, const Py_ssize_t *b, Py_ssize_t nb, int q, uint64_t base) {
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    for (Py_ssize_t k = 0; k < nb; k++)
        if (ld(&W[p->slot_w[q][b[2 * k]] + RD_W]) < base + (uint64_t)b[2 * k + 1]) return 0;
    return 1;
}

/* the call's buffers as a program needs them: 0, or -1 (no error set) where the core cannot take them as they are
 * (not contiguous, read-only, another size; an output given to all_reduce or broadcast, whose input is their
 * output; an output that overlaps the input): the Python path then runs (and raises where the call is wrong) */
static int prog_take(Prog *p, PyObject *ao, PyObject *oo, Py_buffer *a, Py_buffer *o) {
    int has_out = !p->same_out;
    if (p->same_out ? oo != Py_None : oo == Py_None) return -1;
    if (get_buf(ao, a, !has_out, p->count * p->itemsize) < 0) { PyErr_Clear(); return -1; }
    if (has_out) {
        if (get_buf(oo, o, 1, p->outcount * p->itemsize) < 0) { PyErr_Clear(); PyBuffer_Release(a); return -1; }
        char *a0 = a->buf, *o0 = o->buf;
        if (a0 < o0 + o->len && o0 < a0 + a->len) { PyBuffer_Release(o); PyBuffer_Release(a); return -1; }
    }
    return 0;
}

static void prog_drop(Prog *p, Py_buffer *a, Py_buffer *o) {
    PyBuffer_Release(a);
    if (!p->same_out) PyBuffer_Release(o);
}

/* whether a program's copies into this rank's slot are measured (slot_lead) rather than set (stream_slot): a
 * measured shape whose copies into the slot reach slot_stream_min, where the copies can stream at all */
static int prog_eligible(Core *c, Prog *p) {
    return p->measured && c->slot_stream_mode && c->slot_stream_min > 0 && c->n > 1 && p->slot_bytes >= c->slot_stream_min;
}

/* call f (its place pos) of program p, this rank's f, `last` and `safe` set: 0 done; 3 the header is published,
 * the peers' headers not all there, not matching, or a peer's input mapped (Python gathers the headers and runs
 * every round); 4 the headers checked, no peer's input mapped, rounds before *round done (Python runs from it) */
static int prog_run(Core *c, Prog *p, Py_buffer *a, Py_buffer *o, uint64_t f, int pos, uint64_t seq,
                    Py_ssize_t *round) {
    char *in = (char *)a->buf, *out = p->same_out ? in : (char *)o->buf;
    volatile uint64_t *W = (volatile uint64_t *)c->base;
    int q = pos & 1, h = (int)(f % HDR), me = c->me;
    /* the copies into the slot: measured as the one-shot path's (run_call: rank 0 decides, the others make the
     * copy it made in the last call of this shape) where the shape is measured and copies enough; else as set */
    int timed = 0;
    p->lead.pend_t0 = 0; /* (a call that went on in Python and raised) */
    if (prog_eligible(c, p)) {
        if (c->slot_stream_mode == 1) p->arm = 1;
        else if (me == 0) p->arm = slot_lead(&p->lead, &timed);
        else p->arm = p->lead.follow;
    } else p->arm = p->stream_slot;
    long long t0 = timed ? mono_ns() : 0;
    uint64_t base = (uint64_t)ROUND_STRIDE * f;
    Py_ssize_t rd = p->slot_w[q][me] + RD_W;
    const Py_ssize_t *m = p->code;
    Py_ssize_t nearly = *m++;
    for (Py_ssize_t k = 0; k < nearly; k++) m = prog_move(c, p, m, pos, in, out);
    if (p->skip && p->pub0) st(&W[rd], base + (uint64_t)p->end0);
    if (p->desc) W[p->slot_w[q][me] + DESC_W + 2] = 0; /* the input is not mapped: peers read the slot */
    {
        uint64_t *hd = (uint64_t *)(c->base + c->hoff[h]);
        hd[0] = seq; hd[1] = p->crc; hd[2] = (uint64_t)p->nbytes; hd[3] = (uint64_t)(p->arm + 1); /* the copy made */
        memcpy(hd + 4, p->head, SIG_BYTES);
    }
    st(&W[c->my_w[h]], f); /* publish */
    ring(c);
    int r = peers_ready(c, h, f, seq, p->crc);
    if (r == 0) { SPIN_UNTIL(r, peers_ready(c, h, f, seq, p->crc)); }
    if (r != 1) { lead_pend(&p->lead, timed, t0, p->arm, f); return 3; }
    c->safe = f - 1; /* a peer publishes call f only after finishing call f-1 */
    if (me != 0) /* rank 0's copy (its header, just checked) */
        p->lead.follow = (W[c->peer_w[h][0] + 5] & 0xff) == 2;
    for (int k = 0; k < p->nmaps; k++)
        if (W[p->slot_w[q][p->maps[k]] + DESC_W + 2]) { lead_pend(&p->lead, timed, t0, p->arm, f); return 3; }
    Py_ssize_t nrounds = *m++;
    for (Py_ssize_t k = 0; k < nrounds; k++) {
        Py_ssize_t end = m[0], publish = m[1], nb = m[2];
        const Py_ssize_t *b = m + 3;
        m = b + 2 * nb;
        if (nb && !prog_before(c, p, b, nb, q, base)) {
            int ok;
            SPIN_UNTIL(ok, prog_before(c, p, b, nb, q, base));
            if (!ok) { *round = p->skip + k; lead_pend(&p->lead, timed, t0, p->arm, f); return 4; }
        }
        Py_ssize_t nops = *m++;
        for (Py_ssize_t j = 0; j < nops; j++) m = prog_move(c, p, m, pos, in, out);
        if (publish) { st(&W[rd], base + (uint64_t)end); ring(c); }
    }
    st(&W[c->done_w], f);
    ring(c);
    if (p->avg && c->n > 1) divide_avg(p->dtype, out, p->outcount, c->n); /* once every reader has the sums */
    p->calls++;
    c->prog_calls++;
    if (p->arm && p->slot_bytes) p->lead.streamed++;
    if (timed) {
        lead_time(&p->lead, p->arm, (double)(mono_ns() - t0));
    }
    return 0;
}

/* a whole call of program p (Group._hot through Bind): OneShot.hot's steps before its page program (a broadcast
 * root's pending calls settled, the slot's places free: _need, _await_done; the call's number and place), then
 * prog_run. 1: nothing done (the slot not free within the spin: the whole call in Python); else prog_run's
 * code, *fo and *po the call and its place */
static int prog_call(Core *c, Prog *p, uint64_t seq, Py_buffer *a, Py_buffer *o, uint64_t *fo, int *po,
                     Py_ssize_t *round) {
    if (c->pend) {
        int r;
        SPIN_UNTIL(r, settle_some(c));
        if (r != 1) return 1;
    }
    uint64_t f = c->f + 1;
    if (!places_free(c, p->lid, p->depth, p->sends, f)) return 1;
    int pos = (int)(f % (uint64_t)p->npos);
    *fo = f;
    *po = pos;
    return prog_run(c, p, a, o, f, pos, seq, round);
}

/* Core.prog(prog, a, out, f, pos, seq): call f (its place pos) of a page program, this rank's f, `last` and `safe`
 * set by OneShot.hot. None when done; else (stage, round): -1 nothing done (buffers the core does not take); 0
 * the header is published (Python gathers the peers' headers and runs every round); 1 the headers are checked,
 * no peer's input is mapped, rounds before `round` are done (Python runs from it). */
static PyObject *core_prog(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) { PyErr_SetString(PyExc_TypeError, "prog(prog, a, out, f, pos, seq)"); return NULL; }
    Prog *p = (Prog *)args[0];
    unsigned long long f = PyLong_AsUnsignedLongLong(args[3]);
    long pos = PyLong_AsLong(args[4]);
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (pos < 0 || pos >= p->npos) { PyErr_SetString(PyExc_ValueError, "position"); return NULL; }
    Py_buffer a, o;
    if (prog_take(p, args[1], args[2], &a, &o) < 0) return Py_BuildValue("(ii)", -1, 0);
    Py_ssize_t round = 0;
    int r = prog_run(c, p, &a, &o, f, (int)pos, seq, &round);
    prog_drop(p, &a, &o);
    if (r == 0) Py_RETURN_NONE;
    return Py_BuildValue("(in)", r == 3 ? 0 : 1, r == 3 ? (Py_ssize_t)0 : round);
}

/* ---------------------------------------------------------------------------------------------- */
static int seq_of(PyObject *o, Py_ssize_t *dst, int maxn, int *got) {
    PyObject *t = PySequence_Fast(o, "a sequence of ints");
    if (!t) return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(t);
    if (m > maxn) { Py_DECREF(t); PyErr_SetString(PyExc_ValueError, "too many entries"); return -1; }
    for (Py_ssize_t i = 0; i < m; i++) {
        dst[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(t, i));
        if (dst[i] == -1 && PyErr_Occurred()) { Py_DECREF(t); return -1; }
    }
    if (got) *got = (int)m;
    Py_DECREF(t);
    return 0;
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    PyObject *page, *my_w, *peer_w, *done_all, *hoff, *sleep_w, *bell_w;
    Py_ssize_t done_w;
    c->spin_wall_ns = 2000000;
    c->slot_stream_min = 0;
    c->slot_stream_mode = 0;
    if (!PyArg_ParseTuple(args, "OiiOOnOOOOll|LLi", &page, &c->n, &c->me, &my_w, &peer_w, &done_w,
                          &done_all, &hoff, &sleep_w, &bell_w, &c->spin, &c->yield_after, &c->spin_wall_ns,
                          &c->slot_stream_min, &c->slot_stream_mode))
        return -1;
    if (c->n < 1 || c->n > MAXR) { PyErr_SetString(PyExc_ValueError, "ranks"); return -1; }
    if (c->slot_stream_mode < 0 || c->slot_stream_mode > 2) { PyErr_SetString(PyExc_ValueError, "stream mode"); return -1; }
#if !defined(__x86_64__)
    c->slot_stream_mode = 0; /* streaming stores are x86-64's here */
#endif
    if (c->have_view) { PyBuffer_Release(&c->view); c->have_view = 0; }
    if (PyObject_GetBuffer(page, &c->view, PyBUF_WRITABLE) < 0) return -1;
    c->have_view = 1;
    c->base = (char *)c->view.buf;
    int m0 = -1, m1, m2, m3, nm, nh;
    if (seq_of(my_w, c->my_w, HDR, &nm) || seq_of(done_all, c->done_all, MAXR, NULL) ||
        seq_of(hoff, c->hoff, HDR, &nh) || seq_of(sleep_w, c->sleep_w, MAXR, &m2) ||
        seq_of(bell_w, c->bell_w, MAXR, &m3))
        return -1;
    if (nm != HDR || nh != HDR || PySequence_Length(peer_w) != HDR) {
        PyErr_SetString(PyExc_ValueError, "one entry a call header");
        return -1;
    }
    for (int h = 0; h < HDR; h++) {
        PyObject *row = PySequence_GetItem(peer_w, h);
        if (!row) return -1;
        int bad = seq_of(row, c->peer_w[h], MAXR, &m1);
        Py_DECREF(row);
        if (bad) return -1;
        if (m0 >= 0 && m1 != m0) { PyErr_SetString(PyExc_ValueError, "one entry a peer"); return -1; }
        m0 = m1;
    }
    if (m0 != c->n - 1 || m2 != m0 || m3 != m0) {
        PyErr_SetString(PyExc_ValueError, "one entry a peer");
        return -1;
    }
    c->npeers = m0;
    c->done_w = done_w;
    c->spin = c->spin < 1 ? 1 : c->spin;
    return 0;
}

static void Core_dealloc(Core *c) {
    if (c->have_view) PyBuffer_Release(&c->view);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyTypeObject ShapeType, ProgType;

/* Core.leads(obj): whether rank 0 measures the copies into the slot of this Shape or Prog (slot_lead; not a
 * broadcast's, whose leader is its first reader) */
static PyObject *core_leads(Core *c, PyObject *o) {
    if (c->slot_stream_mode != 2) Py_RETURN_FALSE;
    if (PyObject_TypeCheck(o, &ShapeType)) {
        Shape *s = (Shape *)o;
        return PyBool_FromLong(s->kind != BC && slot_eligible(c, s));
    }
    if (PyObject_TypeCheck(o, &ProgType)) {
        Prog *p = (Prog *)o;
        return PyBool_FromLong(prog_eligible(c, p));
    }
    Py_RETURN_FALSE;
}

/* Core.finish(shape_or_prog): the end of a call that went on in Python (Core.hot's code 2, Core.prog's stage and
 * round): where its leader timed it, the call's time to now counts (a broadcast's: with its root's copy, from
 * the root's header) */
static PyObject *core_finish(Core *c, PyObject *o) {
    Shape *s = NULL;
    Lead *l;
    if (PyObject_TypeCheck(o, &ShapeType)) l = &(s = (Shape *)o)->lead;
    else if (PyObject_TypeCheck(o, &ProgType)) l = &((Prog *)o)->lead;
    else { PyErr_SetString(PyExc_TypeError, "finish(shape_or_prog)"); return NULL; }
    if (!l->pend_t0) Py_RETURN_NONE;
    double dt = (double)(mono_ns() - l->pend_t0);
    if (s && s->kind == BC && s->rootk >= 0) dt += (double)root_copy(c, s, l->pend_f);
    l->pend_t0 = 0;
    if (dt > 0) lead_time(l, l->pend_arm, dt);
    Py_RETURN_NONE;
}

static PyMethodDef Core_methods[] = {
    {"finish", (PyCFunction)core_finish, METH_O,
     "finish(shape_or_prog): the end of a call that Core.hot (code 2) or Core.prog handed to Python: its leader's "
     "timing, if any"},
    {"leads", (PyCFunction)core_leads, METH_O,
     "leads(shape_or_prog): whether rank 0 measures its copies into the slot (slot_lead)"},
    {"hot", (PyCFunction)(void (*)(void))core_hot, METH_FASTCALL,
     "hot(shape, a, out, seq): one call of a cached shape; None when done, else (code, f, pos): continue in Python"},
    {"prog", (PyCFunction)(void (*)(void))core_prog, METH_FASTCALL,
     "prog(prog, a, out, f, pos, seq): call f of a page program through the slots; None when done, else "
     "(stage, round): continue in Python"},
    {NULL}};

#include <structmember.h>
static PyMemberDef Core_members[] = {
    {"f", T_ULONGLONG, offsetof(Core, f), 0, "the host page calls so far (FastPath.f)"},
    {"safe", T_ULONGLONG, offsetof(Core, safe), 0, "every peer finished reading calls <= safe (FastPath.safe)"},
    {"pend", T_ULONGLONG, offsetof(Core, pend), 0, "a broadcast root's first call whose peers are not yet checked (FastPath.pend)"},
    {"pend_hi", T_ULONGLONG, offsetof(Core, pend_hi), 0, "... and its last (FastPath.pend_hi)"},
    {"last", T_ULONGLONG, offsetof(Core, last), 0, "the last call's shape (FastPath.last)"},
    {"run", T_ULONGLONG, offsetof(Core, run), 0, "calls in a row of that shape (FastPath.run)"},
    {"calls", T_ULONGLONG, offsetof(Core, calls), READONLY, "calls the core completed"},
    {"prog_calls", T_ULONGLONG, offsetof(Core, prog_calls), READONLY, "page-program calls the core completed"},
    {"prog_streamed", T_ULONGLONG, offsetof(Core, prog_streamed), READONLY,
     "copies of page programs the core made with streaming stores"},
    {"stream_calls", T_ULONGLONG, offsetof(Core, stream_calls), READONLY,
     "calls whose copy into the slot used streaming stores"},
    {"root_copy_ns", T_ULONGLONG, offsetof(Core, root_copy_ns), READONLY,
     "a broadcast receiver's last call in the core: its root's copy into the slot (ns; 0 not timed)"},
    {"slot_stream_mode", T_INT, offsetof(Core, slot_stream_mode), READONLY,
     "0 never, 1 always, 2 measured (streaming stores into the slot)"},
    {NULL}};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "interlink.runtime._hotcore.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
    .tp_members = Core_members,
};

static int Shape_init(Shape *s, PyObject *args, PyObject *kw) {
    PyObject *mine, *parts;
    const char *head;
    Py_ssize_t headlen;
    s->rootk = -1;
    s->depth = 2;
    s->lid = 0;
    if (!PyArg_ParseTuple(args, "iiinnniiKy#OO|iiK", &s->kind, &s->op, &s->dtype, &s->count, &s->itemsize,
                          &s->nbytes, &s->sends, &s->avg, &s->crc, &head, &headlen, &mine, &parts, &s->rootk,
                          &s->depth, &s->lid))
        return -1;
    if (s->depth < 2 || s->depth > HDR) { PyErr_SetString(PyExc_ValueError, "depth"); return -1; }
    if (s->rootk >= MAXR) { PyErr_SetString(PyExc_ValueError, "root"); return -1; }
    if (headlen > SIG_BYTES) headlen = SIG_BYTES;
    memset(s->head, 0, SIG_BYTES);
    memcpy(s->head, head, (size_t)headlen);
    Py_ssize_t npos = PySequence_Length(mine);
    if (npos < 1 || PySequence_Length(parts) != npos) { PyErr_SetString(PyExc_ValueError, "positions"); return -1; }
    PyMem_Free(s->mine); PyMem_Free(s->parts);
    s->mine = PyMem_Calloc((size_t)npos, sizeof(Py_ssize_t));
    s->parts = PyMem_Calloc((size_t)npos * MAXR, sizeof(Py_ssize_t));
    if (!s->mine || !s->parts) { PyErr_NoMemory(); return -1; }
    s->npos = (int)npos;
    if (seq_of(mine, s->mine, (int)npos, NULL)) return -1;
    s->nparts = -1;
    for (Py_ssize_t p = 0; p < npos; p++) {
        PyObject *row = PySequence_GetItem(parts, p);
        if (!row) return -1;
        int m;
        int bad = seq_of(row, s->parts + p * MAXR, MAXR, &m);
        Py_DECREF(row);
        if (bad) return -1;
        if (s->nparts >= 0 && m != s->nparts) { PyErr_SetString(PyExc_ValueError, "parts"); return -1; }
        s->nparts = m;
    }
    /* compact [npos][nparts] */
    for (Py_ssize_t p = 1; p < npos; p++)
        memmove(s->parts + p * s->nparts, s->parts + p * MAXR, (size_t)s->nparts * sizeof(Py_ssize_t));
    s->rowbytes = s->kind == A2A || s->kind == RS ? (s->count / (s->nparts > 0 ? s->nparts : 1)) * s->itemsize
                                                  : s->count * s->itemsize;
    return 0;
}

static void Shape_dealloc(Shape *s) {
    PyMem_Free(s->mine);
    PyMem_Free(s->parts);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMemberDef Shape_members[] = {
    {"cost_plain", T_DOUBLE, offsetof(Shape, lead.cost), READONLY,
     "rank 0's cost of a call of this shape with plain copies into the slot (ns; 0: not measured)"},
    {"cost_streamed", T_DOUBLE, offsetof(Shape, lead.cost) + sizeof(double), READONLY,
     "the same with streaming stores"},
    {"ncalls", T_UINT, offsetof(Shape, lead.ncalls), READONLY,
     "calls of this shape its leader has decided (a call the core handed back and was asked again counts twice)"},
    {"streamed", T_UINT, offsetof(Shape, lead.streamed), READONLY, "calls of this shape whose copy into the slot streamed"},
    {"force", T_INT, offsetof(Shape, lead.force), 0,
     "the leader's copy into the slot on every call: 1 plain, 2 streaming, untimed; 0 measured"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *Shape_seed(Shape *s, PyObject *const *args, Py_ssize_t nargs) { return lead_seed(&s->lead, args, nargs); }

static PyMethodDef Shape_methods[] = {
    {"seed", (PyCFunction)(void (*)(void))Shape_seed, METH_FASTCALL,
     "seed(cost_plain_ns, cost_streamed_ns): the leader's measurement of its copies into the slot taken as done"},
    {NULL}};

static PyTypeObject ShapeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "interlink.runtime._hotcore.Shape",
    .tp_basicsize = sizeof(Shape),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = Shape_members,
    .tp_methods = Shape_methods,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Shape_init,
    .tp_dealloc = (destructor)Shape_dealloc,
};

static int Prog_init(Prog *p, PyObject *args, PyObject *kw) {
    PyObject *stack, *slot_w, *maps, *code;
    const char *head;
    Py_ssize_t headlen;
    p->depth = 2;
    p->sends = 1;
    if (!PyArg_ParseTuple(args, "iiinnnnKy#OOOOiiinnniiiin|Kii", &p->dtype, &p->op, &p->avg, &p->itemsize, &p->count,
                          &p->outcount, &p->nbytes, &p->crc, &head, &headlen, &stack, &slot_w, &maps, &code,
                          &p->desc, &p->skip, &p->pub0, &p->end0, &p->piece, &p->stream_min, &p->stream_out,
                          &p->stream_slot, &p->same_out, &p->measured, &p->slot_bytes, &p->lid, &p->depth, &p->sends))
        return -1;
    if (p->depth < 2 || p->depth > HDR) { PyErr_SetString(PyExc_ValueError, "depth"); return -1; }
    if (p->itemsize < 1 || p->piece < 1) { PyErr_SetString(PyExc_ValueError, "itemsize, piece"); return -1; }
    if (headlen > SIG_BYTES) headlen = SIG_BYTES;
    memset(p->head, 0, SIG_BYTES);
    memcpy(p->head, head, (size_t)headlen);
    Py_ssize_t npos = PySequence_Length(stack);
    if (npos < 1) { PyErr_SetString(PyExc_ValueError, "positions"); return -1; }
    PyMem_Free(p->stack);
    p->stack = PyMem_Calloc((size_t)npos * MAXR, sizeof(Py_ssize_t));
    if (!p->stack) { PyErr_NoMemory(); return -1; }
    p->npos = (int)npos;
    int n = -1, m;
    for (Py_ssize_t k = 0; k < npos; k++) {
        PyObject *row = PySequence_GetItem(stack, k);
        if (!row) return -1;
        int bad = seq_of(row, p->stack + k * MAXR, MAXR, &m);
        Py_DECREF(row);
        if (bad) return -1;
        if (n >= 0 && m != n) { PyErr_SetString(PyExc_ValueError, "one slot a rank"); return -1; }
        n = m;
    }
    for (Py_ssize_t k = 1; k < npos; k++) /* compact [npos][n] */
        memmove(p->stack + k * n, p->stack + k * MAXR, (size_t)n * sizeof(Py_ssize_t));
    if (PySequence_Length(slot_w) != 2) { PyErr_SetString(PyExc_ValueError, "two parities"); return -1; }
    for (int q = 0; q < 2; q++) {
        PyObject *row = PySequence_GetItem(slot_w, q);
        if (!row) return -1;
        int bad = seq_of(row, p->slot_w[q], MAXR, &m);
        Py_DECREF(row);
        if (bad) return -1;
        if (m != n) { PyErr_SetString(PyExc_ValueError, "one slot header a rank"); return -1; }
    }
    if (seq_of(maps, p->maps, MAXR, &p->nmaps)) return -1;
    Py_ssize_t nc = PySequence_Length(code);
    if (nc < 2) { PyErr_SetString(PyExc_ValueError, "code"); return -1; }
    PyMem_Free(p->code);
    p->code = PyMem_Calloc((size_t)nc, sizeof(Py_ssize_t));
    if (!p->code) { PyErr_NoMemory(); return -1; }
    if (seq_of(code, p->code, (int)nc, NULL)) return -1;
    p->ncode = nc;
    for (int k = 0; k < p->nmaps; k++)
        if (p->maps[k] < 0 || p->maps[k] >= n) { PyErr_SetString(PyExc_ValueError, "maps"); return -1; }
    return 0;
}

static void Prog_dealloc(Prog *p) {
    PyMem_Free(p->stack);
    PyMem_Free(p->code);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMemberDef Prog_members[] = {
    {"calls", T_ULONGLONG, offsetof(Prog, calls), READONLY, "calls of this program the core completed"},
    {"stream_out", T_INT, offsetof(Prog, stream_out), READONLY, "copies into the outputs stream"},
    {"stream_slot", T_INT, offsetof(Prog, stream_slot), READONLY, "copies into this rank's slot stream (not measured)"},
    {"measured", T_INT, offsetof(Prog, measured), READONLY, "copies into the slot measured (slot_lead)"},
    {"cost_plain", T_DOUBLE, offsetof(Prog, lead.cost), READONLY,
     "rank 0's cost of a call with plain copies into the slot (ns; 0: not measured)"},
    {"cost_streamed", T_DOUBLE, offsetof(Prog, lead.cost) + sizeof(double), READONLY, "the same with streaming stores"},
    {"ncalls", T_UINT, offsetof(Prog, lead.ncalls), READONLY, "calls whose copy rank 0 decided"},
    {"streamed", T_UINT, offsetof(Prog, lead.streamed), READONLY, "calls whose copies into the slot streamed"},
    {"force", T_INT, offsetof(Prog, lead.force), 0,
     "rank 0's copies into the slot on every call: 1 plain, 2 streaming, untimed; 0 measured"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *Prog_seed(Prog *p, PyObject *const *args, Py_ssize_t nargs) { return lead_seed(&p->lead, args, nargs); }

static PyMethodDef Prog_methods[] = {
    {"seed", (PyCFunction)(void (*)(void))Prog_seed, METH_FASTCALL,
     "seed(cost_plain_ns, cost_streamed_ns): rank 0's measurement of its copies into the slot taken as done"},
    {NULL}};

static PyTypeObject ProgType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "interlink.runtime._hotcore.Prog",
    .tp_basicsize = sizeof(Prog),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = Prog_members,
    .tp_methods = Prog_methods,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Prog_init,
    .tp_dealloc = (destructor)Prog_dealloc,
};

/* ---------------------------------------------------------------------------------------------------
 * Bind: Group._hot and Group._call_small folded for a cached shape (runtime/group.py): the checks of _hot
 * (the communicator usable, the shape cached and for the core, nothing queued on the runner, the buffers as
 * the core needs them, no overlap), the runner's lock, the group's sequence number, the flight recorder's
 * three stores (plan and start, then the number when done), the call. NotImplemented: not taken, nothing
 * done (Group._hot runs as before); a tuple (code, shape, seq, slot, f, pos): the call is under way, the
 * runner's lock held, Group._finish_core goes on in Python.
 */
typedef struct {
    PyObject_HEAD
    Core *core;
    PyObject *fast, *ctx, *runner, *shapes, *rplans, *rstarts, *rseqs, *acquire, *release, *gdict;
    Py_ssize_t rmask;
    /* the last call's shape: its key's parts (the dtypes by identity, op and root by identity) and its
     * entry of `shapes` with that entry's core shape. An entry of `shapes` is never replaced (only added,
     * or the whole cache cleared, which leaves the entry valid), so a call of the same parts takes it
     * without building the key and looking it up; any difference looks up as before */
    long c_kind;
    PyObject *c_dt, *c_sh, *c_odt, *c_osh, *c_op, *c_root, *c_sc, *c_cs;
    /* a measured shape's TuneState (NULL: not measured) and the choice the cached entry was made under: every
     * call of it counts in state.calls, and a call from state.until (a re-measurement) or under another
     * choice is left to FastPath.pick */
    PyObject *c_st;
    long c_choice;
} Bind;

static PyObject *S_call_small, *S_broken, *S_pending, *S_seq, *S_fast, *S_dtype, *S_shape, *S_tune, *S_ccore, *S_cprog,
    *S_state, *S_choice, *S_alts, *S_calls, *S_until;
static PyObject *KINDS[8];

static double now_s(void) { return (double)mono_ns() * 1e-9; }

static int Bind_init(Bind *b, PyObject *args, PyObject *kw) {
    PyObject *core, *fast, *ctx, *runner, *lock, *shapes, *rplans, *rstarts, *rseqs, *gdict;
    Py_ssize_t rmask;
    if (!PyArg_ParseTuple(args, "O!OOOOO!O!O!O!nO!", &CoreType, &core, &fast, &ctx, &runner, &lock, &PyDict_Type,
                          &shapes, &PyList_Type, &rplans, &PyList_Type, &rstarts, &PyList_Type, &rseqs, &rmask,
                          &PyDict_Type, &gdict))
        return -1;
    Py_INCREF(gdict); b->gdict = gdict;
    if (PyList_GET_SIZE(rplans) <= rmask || PyList_GET_SIZE(rstarts) <= rmask || PyList_GET_SIZE(rseqs) <= rmask) {
        PyErr_SetString(PyExc_ValueError, "recorder lists shorter than the mask");
        return -1;
    }
    PyObject *acq = PyObject_GetAttrString(lock, "acquire");
    PyObject *rel = acq ? PyObject_GetAttrString(lock, "release") : NULL;
    if (!rel) { Py_XDECREF(acq); return -1; }
    b->acquire = acq; b->release = rel;
    Py_INCREF(core); b->core = (Core *)core;
    Py_INCREF(fast); b->fast = fast;
    Py_INCREF(ctx); b->ctx = ctx;
    Py_INCREF(runner); b->runner = runner;
    Py_INCREF(shapes); b->shapes = shapes;
    Py_INCREF(rplans); b->rplans = rplans;
    Py_INCREF(rstarts); b->rstarts = rstarts;
    Py_INCREF(rseqs); b->rseqs = rseqs;
    b->rmask = rmask;
    return 0;
}

static void Bind_dealloc(Bind *b) {
    Py_XDECREF(b->core); Py_XDECREF(b->fast); Py_XDECREF(b->ctx); Py_XDECREF(b->runner); Py_XDECREF(b->shapes);
    Py_XDECREF(b->rplans); Py_XDECREF(b->rstarts); Py_XDECREF(b->rseqs); Py_XDECREF(b->acquire);
    Py_XDECREF(b->release); Py_XDECREF(b->gdict);
    Py_XDECREF(b->c_dt); Py_XDECREF(b->c_sh); Py_XDECREF(b->c_odt); Py_XDECREF(b->c_osh); Py_XDECREF(b->c_op);
    Py_XDECREF(b->c_root); Py_XDECREF(b->c_sc); Py_XDECREF(b->c_cs); Py_XDECREF(b->c_st);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

/* an attribute is None (1), not None (0), or the lookup failed (-1) */
static int attr_is_none(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

#define NOT_TAKEN() do { PyErr_Clear(); Py_RETURN_NOTIMPLEMENTED; } while (0)

/* Bind.call(group, kind, a, out, op, root) */
static PyObject *bind_call(Bind *b, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) { PyErr_SetString(PyExc_TypeError, "call(group, kind, a, out, op, root)"); return NULL; }
    PyObject *group = args[0], *ao = args[2], *oo = args[3];
    long kind = PyLong_AsLong(args[1]);
    if (kind < 0 || (kind > 3 && kind != A2A)) NOT_TAKEN();
    if (attr_is_none(b->ctx, S_broken) != 1) NOT_TAKEN();
    /* a group whose _call_small is wrapped (INTERLINK_TRACE, a benchmark) runs it */
    if (PyDict_GetItemWithError(b->gdict, S_call_small) != NULL) NOT_TAKEN();
    {
        PyObject *gf = PyObject_GetAttr(group, S_fast);
        if (!gf) NOT_TAKEN();
        Py_DECREF(gf);
        if (gf != b->fast) NOT_TAKEN();
    }
    if (oo != Py_None && Py_TYPE(oo) != Py_TYPE(ao)) NOT_TAKEN();
    /* the cache key of Group._hot: the last call's entry where its parts are the same */
    PyObject *dt = PyObject_GetAttr(ao, S_dtype), *sh = dt ? PyObject_GetAttr(ao, S_shape) : NULL;
    if (!sh) { Py_XDECREF(dt); NOT_TAKEN(); }
    PyObject *odt = NULL, *osh = NULL;
    if (oo != Py_None) {
        odt = PyObject_GetAttr(oo, S_dtype);
        osh = odt ? PyObject_GetAttr(oo, S_shape) : NULL;
        if (!osh) { Py_XDECREF(odt); Py_DECREF(dt); Py_DECREF(sh); NOT_TAKEN(); }
    }
    PyObject *sc, *cs, *tst = NULL; /* tst: the shape's TuneState (owned), where it is measured */
    long tchoice = -1;
    int hit = b->c_sc && kind == b->c_kind && dt == b->c_dt && args[4] == b->c_op && args[5] == b->c_root &&
              odt == b->c_odt && PyObject_RichCompareBool(sh, b->c_sh, Py_EQ) == 1 &&
              (!osh || PyObject_RichCompareBool(osh, b->c_osh, Py_EQ) == 1);
    if (hit) {
        sc = b->c_sc; Py_INCREF(sc);
        cs = b->c_cs; Py_INCREF(cs);
        tst = b->c_st; Py_XINCREF(tst);
        tchoice = b->c_choice;
        Py_DECREF(dt); Py_DECREF(sh); Py_XDECREF(odt); Py_XDECREF(osh);
    } else {
        PyErr_Clear();
        PyObject *key = oo == Py_None ? PyTuple_Pack(5, KINDS[kind], dt, sh, args[4], args[5])
                                      : PyTuple_Pack(7, KINDS[kind], dt, sh, odt, osh, args[4], args[5]);
        if (!key) { Py_DECREF(dt); Py_DECREF(sh); Py_XDECREF(odt); Py_XDECREF(osh); NOT_TAKEN(); }
        sc = PyDict_GetItemWithError(b->shapes, key); /* borrowed */
        Py_DECREF(key);
        if (!sc || sc == Py_False) { Py_DECREF(dt); Py_DECREF(sh); Py_XDECREF(odt); Py_XDECREF(osh); NOT_TAKEN(); }
        Py_INCREF(sc);
        { /* a measured shape (Small.tune) whose choice is made: the Small it chose (FastPath.pick; its timings and
           * call count are not read after the choice); while it still measures, the Python path */
            PyObject *tn = PyObject_GetAttr(sc, S_tune);
            if (tn && tn != Py_None) {
                PyObject *alt = NULL, *st = PyObject_GetAttr(tn, S_state);
                PyObject *ch = st ? PyObject_GetAttr(st, S_choice) : NULL;
                if (ch && ch != Py_None) {
                    PyObject *alts = PyObject_GetAttr(tn, S_alts);
                    Py_ssize_t k = PyLong_AsSsize_t(ch);
                    if (alts && !(k == -1 && PyErr_Occurred())) alt = PySequence_GetItem(alts, k);
                    Py_XDECREF(alts);
                    if (alt) { tst = st; Py_INCREF(tst); tchoice = (long)k; }
                }
                Py_XDECREF(ch);
                Py_XDECREF(st);
                Py_DECREF(tn);
                tn = NULL;
                Py_DECREF(sc);
                sc = alt; /* owned, or NULL */
            } else if (tn) {
                Py_DECREF(tn);
            } else {
                Py_DECREF(sc);
                sc = NULL;
            }
            if (!sc) {
                PyErr_Clear();
                Py_XDECREF(tst);
                Py_DECREF(dt); Py_DECREF(sh); Py_XDECREF(odt); Py_XDECREF(osh);
                NOT_TAKEN();
            }
        }
        cs = PyObject_GetAttr(sc, S_ccore);
        if (cs == Py_None) { /* a page program the core runs (Small.cprog) */
            Py_DECREF(cs);
            cs = PyObject_GetAttr(sc, S_cprog);
        }
        if (!cs || (Py_TYPE(cs) != &ShapeType && Py_TYPE(cs) != &ProgType)) {
            Py_XDECREF(cs); Py_DECREF(sc); Py_XDECREF(tst);
            Py_DECREF(dt); Py_DECREF(sh); Py_XDECREF(odt); Py_XDECREF(osh);
            NOT_TAKEN();
        }
        /* remember this call's parts (the references move into the cache) */
        Py_XSETREF(b->c_dt, dt); Py_XSETREF(b->c_sh, sh); Py_XSETREF(b->c_odt, odt); Py_XSETREF(b->c_osh, osh);
        Py_INCREF(args[4]); Py_XSETREF(b->c_op, args[4]);
        Py_INCREF(args[5]); Py_XSETREF(b->c_root, args[5]);
        Py_INCREF(sc); Py_XSETREF(b->c_sc, sc);
        Py_INCREF(cs); Py_XSETREF(b->c_cs, cs);
        Py_XINCREF(tst); Py_XSETREF(b->c_st, tst);
        b->c_choice = tchoice;
        b->c_kind = kind;
    }
    if (attr_is_none(sc, S_tune) != 1) { Py_DECREF(cs); Py_DECREF(sc); Py_XDECREF(tst); NOT_TAKEN(); }
    Shape *s = Py_TYPE(cs) == &ShapeType ? (Shape *)cs : NULL;
    Prog *pg = s ? NULL : (Prog *)cs;
    {
        PyObject *pend = PyObject_GetAttr(b->runner, S_pending);
        int busy = !pend || PyObject_IsTrue(pend) != 0;
        Py_XDECREF(pend);
        if (busy) { Py_DECREF(cs); Py_DECREF(sc); Py_XDECREF(tst); NOT_TAKEN(); }
    }
    Py_buffer a, o;
    if ((s ? take_bufs(b->core, s, ao, oo, &a, &o) : prog_take(pg, ao, oo, &a, &o)) < 0) {
        Py_DECREF(cs); Py_DECREF(sc); Py_XDECREF(tst); NOT_TAKEN();
    }
#define DROP_BUFS() do { if (s) drop_bufs(s, &a, &o); else prog_drop(pg, &a, &o); } while (0)
    PyObject *got = PyObject_CallOneArg(b->acquire, Py_False);
    if (got != Py_True) {
        Py_XDECREF(got); DROP_BUFS(); Py_DECREF(cs); Py_DECREF(sc); Py_XDECREF(tst); NOT_TAKEN();
    }
    Py_DECREF(got);
    if (tst) { /* a measured shape: counted here as FastPath.pick counts it; a re-measurement's calls (from
                * state.until), or a choice changed since this entry was cached, are pick's */
        int mine = 0;
        long long calls = -1, until = -1;
        PyObject *ch = PyObject_GetAttr(tst, S_choice);
        if (ch && ch != Py_None && PyLong_AsLong(ch) == tchoice) {
            PyObject *c = PyObject_GetAttr(tst, S_calls), *u = c ? PyObject_GetAttr(tst, S_until) : NULL;
            calls = c ? PyLong_AsLongLong(c) : -1;
            until = u ? PyLong_AsLongLong(u) : -1;
            Py_XDECREF(c); Py_XDECREF(u);
            mine = calls >= 0 && calls < until;
        }
        Py_XDECREF(ch);
        PyObject *n = mine ? PyLong_FromLongLong(calls + 1) : NULL;
        if (!n || PyObject_SetAttr(tst, S_calls, n) < 0) {
            Py_XDECREF(n); Py_DECREF(tst);
            PyObject *x = PyObject_CallNoArgs(b->release);
            Py_XDECREF(x);
            DROP_BUFS(); Py_DECREF(cs); Py_DECREF(sc);
            Py_CLEAR(b->c_sc); Py_CLEAR(b->c_cs); Py_CLEAR(b->c_st); /* looked up again, the choice read anew */
            NOT_TAKEN();
        }
        Py_DECREF(n); Py_DECREF(tst);
    }
    /* from here the call is taken: the group's next number, the recorder's plan and start */
    PyObject *so = PyObject_GetAttr(group, S_seq);
    long long seq = so ? PyLong_AsLongLong(so) : -1;
    Py_XDECREF(so);
    PyObject *nseq = seq >= 0 ? PyLong_FromLongLong(seq + 1) : NULL;
    if (!nseq || PyObject_SetAttr(group, S_seq, nseq) < 0) {
        Py_XDECREF(nseq);
        PyObject *r = PyObject_CallNoArgs(b->release);
        Py_XDECREF(r);
        DROP_BUFS(); Py_DECREF(cs); Py_DECREF(sc);
        return NULL;
    }
    seq += 1;
    Py_ssize_t i = (Py_ssize_t)(seq & b->rmask);
    Py_INCREF(sc);
    PyList_SetItem(b->rplans, i, sc);
    PyObject *t0 = PyFloat_FromDouble(now_s());
    if (t0) PyList_SetItem(b->rstarts, i, t0);
    uint64_t f = 0;
    int pos = 0;
    Py_ssize_t round = 0;
    int r = s ? run_call(b->core, s, (uint64_t)seq, &a, &o, &f, &pos)
              : prog_call(b->core, pg, (uint64_t)seq, &a, &o, &f, &pos, &round);
    DROP_BUFS();
#undef DROP_BUFS
    Py_DECREF(cs);
    if (r == 0) {
        PyList_SetItem(b->rseqs, i, nseq); /* steals nseq: done */
        Py_DECREF(sc);
        PyObject *x = PyObject_CallNoArgs(b->release);
        if (!x) return NULL;
        Py_DECREF(x);
        Py_RETURN_NONE;
    }
    Py_DECREF(nseq);
    PyObject *res = Py_BuildValue("(iOLnKin)", r, sc, seq, i, (unsigned long long)f, pos, round);
    Py_DECREF(sc);
    return res;
}

static PyMethodDef Bind_methods[] = {
    {"call", (PyCFunction)(void (*)(void))bind_call, METH_FASTCALL,
     "call(group, kind, a, out, op, root): None done; NotImplemented not taken; else (code, shape, seq, slot, "
     "f, pos, round), the runner's lock held"},
    {NULL}};

static PyTypeObject BindType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "interlink.runtime._hotcore.Bind",
    .tp_basicsize = sizeof(Bind),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Bind_init,
    .tp_dealloc = (destructor)Bind_dealloc,
    .tp_methods = Bind_methods,
};


/* ---------------------------------------------------------------------------------------------- */
/* Entry: a module-level call of runtime/api.py (all_reduce, broadcast, all_gather_into_tensor,
 * reduce_scatter_tensor, all_to_all_single) as one C callable. Its common call (the world group, a numpy
 * array, no async_op, no other keyword) goes straight to the world's Bind.call; a call the core hands back
 * goes to the world's _finish_core; a shape the core does not take, and every other call, to the Python
 * function itself (`full`: Group._hot_py, then the method's body), with the arguments as given. The same steps as the Python function's first lines, without its frame (2 ranks, an 8-byte
 * broadcast in a loop: the frame was about 0.4 us of a 2.2 us call). */
#define MAXP 8
typedef struct {
    PyObject_HEAD
    PyObject *dict;
    vectorcallfunc vectorcall;
    int kind, np, nreq;               /* parameters, and how many of them lead without a default */
    int ia, iout, iop, iroot, igroup, iasync;  /* parameter indices (-1: the collective has none) */
    unsigned none_mask;               /* parameters that must be None for the common call */
    PyObject *names, *defaults;       /* tuples of np: the parameters' names and defaults (None: required) */
    PyObject *globals, *full, *nd;
} Entry;

static PyObject *S_world, *S_fk, *S_cbind, *S_finish_core;

static PyObject *entry_vcall(Entry *e, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *v[MAXP];
    if (nargs > e->np) goto full;
    for (int i = 0; i < e->np; i++)
        v[i] = i < nargs ? args[i] : (i < e->nreq ? NULL : PyTuple_GET_ITEM(e->defaults, i));
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            int j = 0;
            for (; j < e->np; j++) {
                PyObject *pn = PyTuple_GET_ITEM(e->names, j);
                if (pn == name) break;
                int c = PyUnicode_Compare(pn, name);
                if (c == -1 && PyErr_Occurred()) { PyErr_Clear(); goto full; }
                if (c == 0) break;
            }
            if (j == e->np || j < nargs) goto full; /* another keyword (**kw), or a parameter given twice */
            v[j] = args[nargs + k];
        }
    }
    for (int i = 0; i < e->nreq; i++)
        if (!v[i]) goto full;
    if (v[e->igroup] != Py_None) goto full;
    if (v[e->iasync] != Py_False) {
        int t = PyObject_IsTrue(v[e->iasync]);
        if (t != 0) { if (t < 0) PyErr_Clear(); goto full; }
    }
    for (int i = 0; i < e->np; i++)
        if ((e->none_mask >> i & 1u) && v[i] != Py_None) goto full;
    PyObject *a = v[e->ia];
    if ((PyObject *)Py_TYPE(a) != e->nd) goto full;
    PyObject *w = PyDict_GetItemWithError(e->globals, S_world); /* borrowed */
    if (!w) { if (PyErr_Occurred()) return NULL; goto full; }
    if (w == Py_None) goto full;
    Py_INCREF(w);
    PyObject *fk = PyObject_GetAttr(w, S_fk);
    if (!fk) { Py_DECREF(w); return NULL; }
    int off = !PyTuple_Check(fk) || PyTuple_GET_SIZE(fk) <= e->kind || PyTuple_GET_ITEM(fk, e->kind) == Py_None;
    Py_DECREF(fk);
    if (off) { Py_DECREF(w); goto full; }
    PyObject *out = e->iout >= 0 ? v[e->iout] : Py_None;
    PyObject *op = e->iop >= 0 ? v[e->iop] : Py_None;
    PyObject *root = e->iroot >= 0 ? v[e->iroot] : KINDS[0];
    PyObject *cb = PyObject_GetAttr(w, S_cbind);
    if (!cb) { Py_DECREF(w); return NULL; }
    if (Py_TYPE(cb) == &BindType) {
        PyObject *cargs[6] = {w, KINDS[e->kind], a, out, op, root};
        PyObject *r = bind_call((Bind *)cb, cargs, 6);
        Py_DECREF(cb);
        if (!r || r == Py_None) { Py_DECREF(w); return r; }
        if (r != Py_NotImplemented) {
            PyObject *margs[5] = {w, KINDS[e->kind], r, a, out};
            PyObject *res = PyObject_VectorcallMethod(S_finish_core, margs, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(r);
            Py_DECREF(w);
            return res;
        }
        Py_DECREF(r);
    } else {
        Py_DECREF(cb);
    }
    Py_DECREF(w);
full:
    return PyObject_Vectorcall(e->full, args, nargsf, kwnames);
}

static PyObject *entry_call(PyObject *self, PyObject *args, PyObject *kw) {
    return PyVectorcall_Call(self, args, kw);
}

static int name_index(PyObject *names, const char *name) {
    if (!name) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
        if (s && strcmp(s, name) == 0) return (int)i;
    }
    return -1;
}

/* Entry(kind, full, globals, ndarray, names, defaults, nreq, a, out, op, root, group, async_op, must_be_none) */
static int Entry_init(Entry *e, PyObject *args, PyObject *kw) {
    int kind, nreq;
    PyObject *full, *globals, *nd, *names, *defaults, *nones;
    const char *na, *nout, *nop, *nroot, *ngroup, *nasync;
    if (!PyArg_ParseTuple(args, "iOO!OO!O!izzzzssO!", &kind, &full, &PyDict_Type, &globals, &nd,
                          &PyTuple_Type, &names, &PyTuple_Type, &defaults, &nreq, &na, &nout, &nop, &nroot,
                          &ngroup, &nasync, &PyTuple_Type, &nones))
        return -1;
    Py_ssize_t np = PyTuple_GET_SIZE(names);
    if (np > MAXP || PyTuple_GET_SIZE(defaults) != np || nreq < 0 || nreq > np || !PyType_Check(nd) ||
        (kind < 0 || (kind > 3 && kind != A2A))) {
        PyErr_SetString(PyExc_ValueError, "Entry: bad parameters");
        return -1;
    }
    for (Py_ssize_t i = 0; i < np; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) { PyErr_SetString(PyExc_TypeError, "names"); return -1; }
    e->kind = kind; e->np = (int)np; e->nreq = nreq;
    e->ia = name_index(names, na); e->iout = name_index(names, nout); e->iop = name_index(names, nop);
    e->iroot = name_index(names, nroot); e->igroup = name_index(names, ngroup); e->iasync = name_index(names, nasync);
    if (e->ia < 0 || e->igroup < 0 || e->iasync < 0 || (nout && e->iout < 0) || (nop && e->iop < 0) ||
        (nroot && e->iroot < 0)) {
        PyErr_SetString(PyExc_ValueError, "Entry: a parameter name is not among the names");
        return -1;
    }
    e->none_mask = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nones); i++) {
        PyObject *o = PyTuple_GET_ITEM(nones, i);
        int j = PyUnicode_Check(o) ? name_index(names, PyUnicode_AsUTF8(o)) : -1;
        if (j < 0) { PyErr_SetString(PyExc_ValueError, "Entry: must_be_none names"); return -1; }
        e->none_mask |= 1u << j;
    }
    Py_INCREF(full); Py_XSETREF(e->full, full);
    Py_INCREF(globals); Py_XSETREF(e->globals, globals);
    Py_INCREF(nd); Py_XSETREF(e->nd, nd);
    Py_INCREF(names); Py_XSETREF(e->names, names);
    Py_INCREF(defaults); Py_XSETREF(e->defaults, defaults);
    e->vectorcall = (vectorcallfunc)entry_vcall;
    return 0;
}

static int Entry_traverse(Entry *e, visitproc visit, void *arg) {
    Py_VISIT(e->dict); Py_VISIT(e->full); Py_VISIT(e->globals); Py_VISIT(e->nd);
    Py_VISIT(e->names); Py_VISIT(e->defaults);
    return 0;
}

static int Entry_clear(Entry *e) {
    Py_CLEAR(e->dict); Py_CLEAR(e->full); Py_CLEAR(e->globals); Py_CLEAR(e->nd);
    Py_CLEAR(e->names); Py_CLEAR(e->defaults);
    return 0;
}

static void Entry_dealloc(Entry *e) {
    PyObject_GC_UnTrack(e);
    Entry_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *Entry_repr(Entry *e) {
    return e->full ? PyObject_Repr(e->full) : PyUnicode_FromString("<interlink entry>");
}

/* pickled (and copied) as the module-level name it is, like the Python function it stands for */
static PyObject *Entry_reduce(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef Entry_methods[] = {
    {"__reduce__", Entry_reduce, METH_NOARGS, "the module-level name (pickle and copy keep the same object)"},
    {NULL}};

static PyGetSetDef Entry_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "interlink.runtime._hotcore.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Entry_init,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
    .tp_call = entry_call,
    .tp_repr = (reprfunc)Entry_repr,
    .tp_vectorcall_offset = offsetof(Entry, vectorcall),
    .tp_dictoffset = offsetof(Entry, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_getset = Entry_getset,
    .tp_methods = Entry_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotcore",
                                    "The compiled core of the host page's one-shot path", -1, NULL};

PyMODINIT_FUNC PyInit__hotcore(void) {
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&ShapeType) < 0 || PyType_Ready(&ProgType) < 0 || PyType_Ready(&BindType) < 0 ||
        PyType_Ready(&EntryType) < 0)
        return NULL;
    S_broken = PyUnicode_InternFromString("broken");
    S_call_small = PyUnicode_InternFromString("_call_small");
    S_pending = PyUnicode_InternFromString("_pending");
    S_seq = PyUnicode_InternFromString("seq");
    S_fast = PyUnicode_InternFromString("_fast");
    S_dtype = PyUnicode_InternFromString("dtype");
    S_shape = PyUnicode_InternFromString("shape");
    S_tune = PyUnicode_InternFromString("tune");
    S_ccore = PyUnicode_InternFromString("ccore");
    S_cprog = PyUnicode_InternFromString("cprog");
    S_state = PyUnicode_InternFromString("state");
    S_choice = PyUnicode_InternFromString("choice");
    S_alts = PyUnicode_InternFromString("alts");
    S_calls = PyUnicode_InternFromString("calls");
    S_until = PyUnicode_InternFromString("until");
    S_world = PyUnicode_InternFromString("_WORLD");
    S_fk = PyUnicode_InternFromString("_fk");
    S_cbind = PyUnicode_InternFromString("_cbind");
    S_finish_core = PyUnicode_InternFromString("_finish_core");
    for (int k = 0; k < 8; k++) KINDS[k] = PyLong_FromLong(k);
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    Py_INCREF(&ShapeType);
    Py_INCREF(&ProgType);
    Py_INCREF(&BindType);
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(m, "Bind", (PyObject *)&BindType) < 0 ||
        PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0 ||
        PyModule_AddObject(m, "Shape", (PyObject *)&ShapeType) < 0 ||
        PyModule_AddObject(m, "Prog", (PyObject *)&ProgType) < 0 ||
        PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0)
        return NULL;
    return m;
}
