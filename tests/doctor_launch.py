"""Start the ranks of tests/doctor_job.py as real processes, stop them the way a launcher does, and
collect their flight-recorder dumps (for tests/test_doctor_hang.py)."""

from __future__ import annotations

import os
import pathlib
import secrets
import signal
import subprocess
import sys
import time

from mp import free_port  # noqa: E402  (tests/ is on the path of every test module)

JOB = str(pathlib.Path(__file__).with_name("doctor_job.py"))


def run_job(scenario: str, dumps: pathlib.Path, n: int = 4, timeout: float = 2.0, no_dump: tuple = (),
            stop_signal: int = signal.SIGTERM, limit: float = 60.0, grace: float = 0.0,
            env_name: str = "INTERLINK_DUMP_DIR") -> list[int]:
    """Run ``n`` ranks of the scenario; when one exits with an error, signal the rest with ``stop_signal``
    (interlink dumps on SIGTERM; the torch jobs on SIGUSR1), continue stopped ones, then kill what is
    left. Ranks in ``no_dump`` run without INTERLINK_DUMP_DIR (``env_name``: INTERLINK_TRACE instead). Returns
    the exit codes."""
    dumps.mkdir(parents=True, exist_ok=True)
    port = free_port()
    secret = secrets.token_hex(16)
    procs = []
    logs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), INTERLINK_SECRET=secret,
                   DOCTOR_JOB_TIMEOUT=str(timeout), OMP_NUM_THREADS="1")
        env.pop("INTERLINK_DUMP_DIR", None)
        env.pop("INTERLINK_TRACE", None)
        if r not in no_dump:
            env[env_name] = str(dumps)
        log = open(dumps.parent / f"{scenario}-rank{r}.log", "wb")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, JOB, scenario], env=env, stdout=log, stderr=log,
                                      start_new_session=True))
    end = time.monotonic() + limit
    try:
        while time.monotonic() < end:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the others' own timeouts and dumps first
        for p in procs:
            if p.poll() is None:
                p.send_signal(stop_signal)
                p.send_signal(signal.SIGCONT)  # a stopped rank runs its handler now
        stop = time.monotonic() + (grace or (1.5 if stop_signal == signal.SIGUSR1 else 5.0))
        while time.monotonic() < stop and any(p.poll() is None for p in procs):
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        for log in logs:
            log.close()
    return [p.returncode for p in procs]
