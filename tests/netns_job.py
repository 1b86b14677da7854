"""A rank of a job on emulated hosts (tests/test_netns.py starts it with ``interlink run --emulate-hosts``).

    netns_job.py suite PART       the collective suite of test_runtime_collectives (PART: reduce, move)
    netns_job.py probe NBYTES     channel kinds per peer + time of an NBYTES broadcast from rank 0
    netns_job.py lanes NBYTES     a ring all_reduce of NBYTES (no env var: the channels follow the NICs) and,
                                  per TCP peer, each lane's local/remote address and bytes; tx bytes per NIC
    netns_job.py kill RANK        RANK SIGKILLs itself after init; the others wait in a collective
    netns_job.py sleep            print "ready" and sleep (for signal tests)
    netns_job.py leave NBYTES R   rank R sends NBYTES to a rank on the other host (rank 0, or the last rank where
                                  R is 0), broadcasts NBYTES as root, sends once more and leaves at once
                                  (destroy); that rank receives the three over the shaped link (the last from
                                  any source), then waits for one more message from R and must be told R left

Each rank prints one line ``RESULT {json}`` on stdout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _channels() -> dict[str, str]:
    from interlink.runtime import api

    assert api._CTX is not None
    return {str(peer): type(ch).__name__ for peer, ch in sorted(api._CTX.engine.channels.items())}


def main(argv: list[str]) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mode = argv[0]
    out: dict = {"rank": rank, "world": world, "node": int(os.environ["NODE_RANK"]),
                 "ifname": os.environ.get("INTERLINK_IFNAME"), "netns": os.stat("/proc/self/ns/net").st_ino}
    if mode == "suite":
        from test_runtime_collectives import suite

        checks, fails = suite(rank, world, argv[1])
        out.update(checks=checks, fails=fails)
    elif mode == "probe":
        import numpy as np

        import interlink as dist

        nbytes = int(argv[1])
        world_group = dist.init(timeout=60)
        out["channels"] = _channels()
        layout = getattr(world_group, "host_layout", None)  # (hosts, ranks per host) the runtime sees
        out["layout"] = list(layout()) if layout is not None else None
        buf = np.full(nbytes, rank, dtype=np.uint8)
        times = []
        for _ in range(2):
            dist.barrier()
            t0 = time.perf_counter()
            dist.broadcast(buf, src=0)
            times.append(time.perf_counter() - t0)
        out["ok"] = bool((buf == 0).all())
        out["seconds"] = min(times)
        dist.destroy()
    elif mode == "lanes":
        import numpy as np

        import interlink as dist
        from interlink.runtime import api
        from interlink.runtime.mesh import _iface_addr

        nbytes = int(argv[1])
        ifnames = (out["ifname"] or "").split(",")
        out["addrs"] = [_iface_addr(n) for n in ifnames]

        def tx() -> list[int]:
            vals = []
            for n in ifnames:
                with open(f"/sys/class/net/{n}/statistics/tx_bytes") as f:
                    vals.append(int(f.read()))
            return vals

        g = dist.init(timeout=60)
        eng = api._CTX.engine
        x = np.full(nbytes // 4, float(rank + 1), dtype=np.float32)
        dist.barrier()
        before = tx()
        dist.all_reduce(x, algorithm="ring")
        out["tx"] = [b - a for a, b in zip(before, tx())]
        out["ok"] = bool(np.all(x == sum(range(1, world + 1))))
        out["channels"] = _channels()
        out["ring_channels"] = g.recorder[-1].plan.schedule.channels
        out["lanes"] = {str(j): [{"local": ch.sock.getsockname()[0], "remote": ch.sock.getpeername()[0],
                                  "lane": ch.lane, "sent": ch.sent, "received": ch.received}
                                 for ch in chs] for j, chs in eng.lanes.items() if type(chs[0]).__name__ == "TcpChannel"}
        dist.destroy()
    elif mode == "kill":
        import numpy as np

        import interlink as dist

        dist.init(timeout=60)
        print(f"RESULT {json.dumps(out)}", flush=True)
        if rank == int(argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(np.ones(4))  # never completes: the peer is gone
        time.sleep(60)
    elif mode == "leave":
        import numpy as np

        import interlink as dist

        nbytes, leaver = int(argv[1]), int(argv[2])
        hearer = world - 1 if leaver == 0 else 0
        dist.init(timeout=60)
        dist.barrier()
        want = (np.arange(nbytes) % 251).astype(np.uint8)
        if rank == leaver:
            dist.send(want, dst=hearer)
            dist.broadcast(want[::-1].copy(), src=leaver)
            dist.send(want[1:], dst=hearer)  # received from any source
            t0 = time.perf_counter()
            dist.destroy()  # BYE at once: the bytes are still crossing the link
            out["destroy_s"] = time.perf_counter() - t0
        elif rank != hearer:  # the other ranks take part in the broadcast only
            got = np.zeros(nbytes, np.uint8)
            dist.broadcast(got, src=leaver)
            out["bcast_ok"] = bool((got == want[::-1]).all())
            dist.destroy()
        else:
            got = np.zeros(nbytes, np.uint8)
            t0 = time.perf_counter()
            try:
                dist.recv(got, src=leaver)
                out["recv_ok"] = bool((got == want).all())
                out["recv_s"] = time.perf_counter() - t0
                got[:] = 0
                dist.broadcast(got, src=leaver)
                out["bcast_ok"] = bool((got == want[::-1]).all())
                got[:] = 0
                out["any_from"] = dist.recv(got[1:], src=None)
                out["any_ok"] = bool((got[1:] == want[1:]).all())
            except dist.InterlinkError as e:
                out["recv_error"] = str(e)
            t0 = time.perf_counter()
            try:
                dist.recv(got[:1], src=leaver)  # never sent: the rank left
                out["left_error"] = None
            except dist.InterlinkError as e:
                out["left_error"] = f"{type(e).__name__}: {e}"
            out["left_s"] = time.perf_counter() - t0
            dist.destroy()
    elif mode == "sleep":
        print(f"RESULT {json.dumps(out)}", flush=True)
        print("ready", flush=True)
        time.sleep(120)
        return
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"RESULT {json.dumps(out)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
