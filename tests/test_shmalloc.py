"""interlink.empty / interlink.zeros: arrays in shared memory that peers read in place."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import interlink
from interlink.transport import shmalloc


def test_empty_is_an_ordinary_array_in_a_registered_arena() -> None:
    a = interlink.empty((3, 5), np.float64)
    assert a.shape == (3, 5) and a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable
    a[...] = np.arange(15).reshape(3, 5)
    serial, fd, off, size = shmalloc.lookup(a.ctypes.data, a.nbytes)
    assert off == 0 and size >= a.nbytes and size % shmalloc.PAGE == 0
    assert os.readlink(f"/proc/self/fd/{fd}") == f"/memfd:interlink-arena-{serial} (deleted)"
    # a slice is found in the same arena at its offset; a range running past the arena is not
    assert shmalloc.lookup(a[1].ctypes.data, a[1].nbytes)[:3] == (serial, fd, 40)
    assert shmalloc.lookup(a.ctypes.data, size + 1) is None
    assert shmalloc.lookup(np.ones(4).ctypes.data, 32) is None  # plain numpy memory


def test_zeros_and_odd_shapes() -> None:
    z = interlink.zeros(7, np.int16)
    assert z.shape == (7,) and not z.any()
    e = interlink.empty(0, np.uint8)
    assert e.size == 0
    with pytest.raises(TypeError):
        interlink.empty(3, object)
    with pytest.raises(ValueError):
        interlink.empty((2, -1))


def test_arena_lives_as_long_as_any_view_and_no_longer() -> None:
    a = interlink.empty(1000, np.float32)
    serial, fd, _, _ = shmalloc.lookup(a.ctypes.data, a.nbytes)
    tail = a[500:]
    del a
    gc.collect()
    assert shmalloc.lookup(tail.ctypes.data, tail.nbytes)[0] == serial  # the view keeps it
    del tail
    gc.collect()
    assert all(s != serial for _, _, s in shmalloc._arenas.values())
    if os.path.exists(f"/proc/self/fd/{fd}"):  # the fd was closed (a new file may reuse the number)
        assert os.readlink(f"/proc/self/fd/{fd}") != f"/memfd:interlink-arena-{serial} (deleted)"


def test_peer_mapping_shares_memory_and_refuses_a_recycled_fd() -> None:
    a = interlink.zeros(64, np.float64)
    serial, fd, off, size = shmalloc.lookup(a.ctypes.data, a.nbytes)
    peers = shmalloc.PeerArenas(keep=2)
    v = peers.view(os.getpid(), fd, serial, size, off, np.dtype(np.float64), 64)
    a[3] = 42.0
    assert v[3] == 42.0 and v.ctypes.data != a.ctypes.data  # a second mapping of the same pages
    with pytest.raises(OSError):
        peers.view(os.getpid(), fd, serial + 1000, size, off, np.dtype(np.float64), 64)
