"""The module-level latency calls as C callables (runtime/_hotcore.c, Entry; runtime/api.py, _entries).

Where the compiled core runs, interlink.all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor
and all_to_all_single are Entry objects: their common call goes straight to the core, the rest to the
Python function with the arguments as given. These tests call each of them in every way Python allows
(positional, keyword, mixed, defaults, an explicit group, async_op, another keyword, a shape the core
does not take, sizes on both sides of the one-shot limit, bad input) and compare every result with numpy:
an argument bound to the wrong parameter would show as a wrong result or a missing error.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

from interlink.runtime import ccore
from mp import run_ranks
from test_runtime_collectives import data

NAMES = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")


def entry_suite(rank: int, world: int) -> tuple[int, list[str]]:
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=60)
    p, fails, count = world, [], 0
    w = api._world()

    def check(name, got, exp):
        nonlocal count
        count += 1
        if not np.array_equal(np.asarray(got), np.asarray(exp)):
            fails.append(f"rank {rank} {name}: got {np.asarray(got).ravel()[:6]} expected {np.asarray(exp).ravel()[:6]}")

    case = 0
    for n in (1, 7, 40_000):  # 40,000 float64: 320 KB, above the one-shot limit (256 KiB)
        for it in range(3):  # repeated: the shape's first call (cached then) and later ones (the core)
            case += 1
            ins = [data(r, case, n * p, np.float64) for r in range(p)]
            tot = np.sum(ins, axis=0)
            mx = np.max(ins, axis=0)
            # all_reduce: positional op, keyword op, default op, group=None and async_op=False spelled out
            a = ins[rank].copy(); dist.all_reduce(a); check(f"all_reduce default n={n}", a, tot)
            a = ins[rank].copy(); dist.all_reduce(a, "max"); check(f"all_reduce 'max' n={n}", a, mx)
            a = ins[rank].copy(); dist.all_reduce(a, op="max"); check(f"all_reduce op= n={n}", a, mx)
            a = ins[rank].copy(); dist.all_reduce(tensor=a, op="max", group=None, async_op=False)
            check(f"all_reduce keywords n={n}", a, mx)
            a = ins[rank].copy(); dist.all_reduce(a, "sum", None, False); check(f"all_reduce 4 positional n={n}", a, tot)
            a = ins[rank].copy(); dist.all_reduce(a, group=w); check(f"all_reduce group=world n={n}", a, tot)
            a = ins[rank].copy(); dist.all_reduce(a, op="max", async_op=True).wait()
            check(f"all_reduce async n={n}", a, mx)
            a = ins[rank].copy(); dist.all_reduce(a, op="sum", timeout=30); check(f"all_reduce timeout= n={n}", a, tot)
            # broadcast: every root, positional and keyword
            for root in range(p):
                a = ins[rank].copy(); dist.broadcast(a, root); check(f"broadcast {root} n={n}", a, ins[root])
                a = ins[rank].copy(); dist.broadcast(a, src=root); check(f"broadcast src= n={n}", a, ins[root])
                a = ins[rank].copy(); dist.broadcast(src=root, tensor=a); check(f"broadcast kw order n={n}", a, ins[root])
            a = ins[rank].copy(); dist.broadcast(a); check(f"broadcast default n={n}", a, ins[0])
            # all_gather_into_tensor
            x = ins[rank][:n]
            o = np.empty(n * p); dist.all_gather_into_tensor(o, x)
            check(f"all_gather n={n}", o, np.concatenate([i[:n] for i in ins]))
            o = np.empty(n * p); dist.all_gather_into_tensor(input_tensor=x, output_tensor=o)
            check(f"all_gather keywords n={n}", o, np.concatenate([i[:n] for i in ins]))
            # reduce_scatter_tensor
            o = np.empty(n); dist.reduce_scatter_tensor(o, ins[rank])
            check(f"reduce_scatter n={n}", o, tot[rank * n:(rank + 1) * n])
            o = np.empty(n); dist.reduce_scatter_tensor(o, ins[rank], "max")
            check(f"reduce_scatter 'max' n={n}", o, mx[rank * n:(rank + 1) * n])
            o = np.empty(n); dist.reduce_scatter_tensor(output=o, input=ins[rank], op="max")
            check(f"reduce_scatter keywords n={n}", o, mx[rank * n:(rank + 1) * n])
            # all_to_all_single: even blocks, then split sizes (the Python function's path)
            o = np.empty(n * p); dist.all_to_all_single(o, ins[rank])
            check(f"all_to_all n={n}", o, np.concatenate([i[rank * n:(rank + 1) * n] for i in ins]))
            sizes = [n] * p
            o = np.empty(n * p); dist.all_to_all_single(o, ins[rank], sizes, sizes)
            check(f"all_to_all splits n={n}", o, np.concatenate([i[rank * n:(rank + 1) * n] for i in ins]))
    # a shape the core does not take: a non-contiguous input raises before any byte moves, as the Python path
    a = np.zeros((4, 4))[:, ::2]
    try:
        dist.all_reduce(a)
        fails.append(f"rank {rank}: a non-contiguous all_reduce did not raise")
    except ValueError:
        count += 1
    # a Python list: not an array (the Python function's error)
    try:
        dist.all_reduce()  # no tensor
        fails.append(f"rank {rank}: all_reduce() did not raise")
    except TypeError:
        count += 1
    try:
        dist.broadcast(np.zeros(3), 0, None, False, 7)  # one positional too many
        fails.append(f"rank {rank}: broadcast with 5 positional arguments did not raise")
    except TypeError:
        count += 1
    dist.barrier()
    dist.destroy()
    return count, fails


@pytest.mark.parametrize("world", [2, 3])
def test_module_level_calls_bind_every_argument_form(world):
    got = run_ranks(world, entry_suite, timeout=180)
    fails = [f for _, fs in got for f in fs]
    assert not fails, "\n".join(fails[:20])
    assert all(c > 200 for c, _ in got)


def test_the_entries_keep_the_python_functions_names_and_signatures():
    from interlink.runtime import api

    for name in NAMES:
        f = getattr(api, name)
        assert f.__name__ == name
        base = getattr(f, "__wrapped__", f)
        assert inspect.signature(f) == inspect.signature(base)
        assert "group" in inspect.signature(f).parameters
    if ccore.enabled():
        assert all(type(getattr(api, n)).__name__ == "Entry" for n in NAMES)


def test_the_entries_pickle_and_copy_as_the_module_level_names():
    """A script that hands interlink.all_reduce to multiprocessing or copies it gets the same callable back,
    as with a Python function (pickled by its module and name)."""
    import copy
    import pickle

    import interlink
    from interlink.runtime import api

    for name in NAMES:
        f = getattr(api, name)
        assert pickle.loads(pickle.dumps(f)) is f and copy.deepcopy(f) is f and copy.copy(f) is f
        assert pickle.loads(pickle.dumps(getattr(interlink, name))) is f


def test_without_the_core_the_calls_are_the_python_functions():
    code = ("import inspect, interlink.runtime.api as a; "
            "print(all(inspect.isfunction(getattr(a, n)) for n in %r))" % (NAMES,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "INTERLINK_NO_CCORE": "1"}, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
