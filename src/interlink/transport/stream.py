"""Streaming copies: a memory copy with non-temporal stores, for destinations that are not in cache.

A plain copy (numpy, glibc's memcpy) into memory that is not in cache first reads every destination line
into the cache (read-for-ownership), then writes it back later: twice the memory traffic of the bytes
written. Non-temporal stores write whole lines straight to memory. glibc switches to them only above a
threshold it derives from the shared cache's size (3/4 of it: on a 2-core x86 VM, whose CPUID reports
256 MiB of L3, 192 MiB), so a collective's output of a few MiB is written the slow way: a 4 MiB copy into
memory not in cache runs at 5.5-7.6 GB/s with numpy and 14.6-15.3 GB/s with streaming stores on that VM
(benchmarks/RESULTS.md). The host paths use this copy where a call writes its output out of a
slot and the output is too large to stay in cache (runtime/policy.py ``stream_min_bytes``); into memory
that is in cache a streaming copy is slower (it evicts the lines), so nothing else uses it.

The copy is 61 bytes of x86-64 machine code (SSE2, which every x86-64 CPU has), written into a page that
is then made read-only and executable, called through ctypes (which releases the GIL):

    nt_copy:                 ; rdi = destination (64-byte aligned), rsi = source, rdx = bytes (a multiple of 64)
        test rdx, rdx
        jz done
    loop:
        movdqu xmm0..xmm3, [rsi + 0/16/32/48]
        movntdq [rdi + 0/16/32/48], xmm0..xmm3
        add rsi, 64
        add rdi, 64
        sub rdx, 64
        jnz loop
        sfence               ; the stores are visible before the call returns (before any flag is published)
    done:
        ret

Elsewhere (another architecture or OS, a kernel that refuses executable pages, the self-test failing,
INTERLINK_STREAM_COPY=0) :func:`copy` is numpy's copy and :data:`available` is False.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
from typing import Any, Optional

import numpy as np

from .cma import address as _address  # a contiguous array's first byte, fast

_CODE = bytes.fromhex(
    "4885d27437f30f6f06f30f6f4e10f30f6f5620f30f6f5e30660fe707660f"
    "e74f10660fe75720660fe75f304883c6404883c7404883ea4075cc0faef8"
    "c3")
LINE = 64  # bytes the machine code moves per iteration (one cache line): the body's unit
MIN_BYTES = 4 * LINE  # below this a copy is numpy's (the head and tail would be most of it)

_fn: Optional[Any] = None
_page: Optional[mmap.mmap] = None
available = False
why_not = "not built yet"


def _build() -> None:
    """Map the machine code executable and check it on a pattern; on any failure leave numpy's copy."""
    global _fn, _page, available, why_not
    if os.environ.get("INTERLINK_STREAM_COPY", "1") == "0":
        why_not = "INTERLINK_STREAM_COPY=0"
        return
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        why_not = f"no streaming copy for {platform.system()} {platform.machine()}"
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mprotect = libc.mprotect
        mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        mprotect.restype = ctypes.c_int
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        page.write(_CODE)
        at = ctypes.addressof(ctypes.c_char.from_buffer(page))
        if mprotect(at, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            why_not = f"mprotect(PROT_EXEC) refused: {os.strerror(ctypes.get_errno())}"
            return
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(at)
        # self-test: every alignment of the source, a body of a few lines
        src = np.arange(4096 + 3 * LINE, dtype=np.uint32).view(np.uint8)
        dst = np.zeros(8192, dtype=np.uint8)
        base = (-_address(dst)) % LINE
        for shift in (0, 1, 7, 16, 33):
            n = 4096 + LINE
            d = dst[base:base + n]
            d[...] = 0
            fn(_address(d), _address(src[shift:]), n)
            if not np.array_equal(d, src[shift:shift + n]) or dst[base + n:base + n + LINE].any():
                why_not = "the streaming copy's self-test failed"
                return
    except (OSError, ValueError, AttributeError, TypeError) as e:  # pragma: no cover - platform-specific
        why_not = f"streaming copy unavailable: {e}"
        return
    _fn, _page, available, why_not = fn, page, True, ""


_build()


def copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src with streaming stores where they apply: both C-contiguous, the same number of bytes,
    not overlapping (the caller's promise). The destination's whole cache lines get streaming stores; its
    unaligned head and tail, and copies under :data:`MIN_BYTES`, are numpy's."""
    nbytes = dst.nbytes
    if _fn is None or nbytes < MIN_BYTES:
        dst[...] = src
        return
    da = _address(dst)
    head = (-da) % LINE
    body = (nbytes - head) // LINE * LINE
    if head or body != nbytes:
        d8, s8 = dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)
        if head:
            d8[:head] = s8[:head]
        if head + body < nbytes:
            d8[head + body:] = s8[head + body:]
        _fn(da + head, _address(s8) + head, body)
    else:
        _fn(da, _address(src), nbytes)
