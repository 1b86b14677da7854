"""``interlink run``: real child processes, their environment, output prefixes and cleanup."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

ENV_SCRIPT = """
import os, socket, sys
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "INTERLINK_SECRET", "PYTHONUNBUFFERED"]
print(" ".join(f"{k}={os.environ[k]}" for k in keys))
print("ARGS=" + ",".join(sys.argv[1:]))
if os.environ["RANK"] == "0" and os.environ["MASTER_ADDR"] == "127.0.0.1":
    with socket.socket() as s:  # the chosen port is free
        s.bind(("127.0.0.1", int(os.environ["MASTER_PORT"])))
        print("BIND_OK")
print("err line", file=sys.stderr)
"""


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INTERLINK_SECRET"}
    env.update(extra)
    return env


def _run(args: list[str], timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interlink", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env=env if env is not None else _env())


def _parse_env(stdout: str) -> dict[int, dict[str, str]]:
    ranks: dict[int, dict[str, str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"\[rank (\d+)\] (.*)$", line)
        assert m, f"line without a rank prefix: {line!r}"
        k, rest = int(m.group(1)), m.group(2)
        if rest.startswith("RANK="):
            ranks[k] = dict(kv.split("=", 1) for kv in rest.split())
        else:
            ranks.setdefault(k, {})
            ranks[k].setdefault("_other", "")
            ranks[k]["_other"] += rest + "\n"
    return ranks


def _alive(pid: int) -> bool:
    """True if pid is a live process (a zombie waiting for init to reap it counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pids: list[int], timeout: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_pids(d: Path) -> list[int]:
    return [int(f.read_text()) for f in sorted(d.glob("*.pid")) if f.read_text().strip()]


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_get_env_and_prefixed_output(tmp_path, n):
    script = _write(tmp_path, "env.py", ENV_SCRIPT)
    proc = _run(["-n", str(n), str(script), "--flag", "x"])
    assert proc.returncode == 0, proc.stderr
    ranks = _parse_env(proc.stdout)
    assert sorted(ranks) == list(range(n))
    ports = {ranks[k]["MASTER_PORT"] for k in ranks}
    secrets_ = {ranks[k]["INTERLINK_SECRET"] for k in ranks}
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536
    assert len(secrets_) == 1 and re.fullmatch(r"[0-9a-f]{64}", secrets_.pop())
    for k, e in ranks.items():
        assert e["RANK"] == e["LOCAL_RANK"] == str(k)
        assert e["WORLD_SIZE"] == e["LOCAL_WORLD_SIZE"] == str(n)
        assert e["GROUP_RANK"] == e["NODE_RANK"] == "0"
        assert e["MASTER_ADDR"] == "127.0.0.1" and e["PYTHONUNBUFFERED"] == "1"
        assert "ARGS=--flag,x" in e["_other"]
    assert "BIND_OK" in ranks[0]["_other"]
    assert sorted(proc.stderr.splitlines()) == [f"[rank {k}] err line" for k in range(n)]


def test_fresh_secret_per_job(tmp_path):
    script = _write(tmp_path, "env.py", ENV_SCRIPT)
    a, b = (_parse_env(_run(["-n", "1", str(script)]).stdout)[0]["INTERLINK_SECRET"] for _ in range(2))
    assert a != b


def test_module_mode(tmp_path):
    _write(tmp_path, "envmod.py", ENV_SCRIPT)
    proc = _run(["-n", "2", "-m", "envmod", "a"], env=_env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    ranks = _parse_env(proc.stdout)
    assert sorted(ranks) == [0, 1] and "ARGS=a" in ranks[1]["_other"]


def test_multi_node_env(tmp_path):
    script = _write(tmp_path, "env.py", ENV_SCRIPT)
    secret = "ab" * 32
    proc = _run(["-n", "2", "--nnodes", "3", "--node-rank", "1", "--master", "10.1.2.3:29555", str(script)],
                env=_env(INTERLINK_SECRET=secret))
    assert proc.returncode == 0, proc.stderr
    ranks = _parse_env(proc.stdout)
    assert sorted(ranks) == [2, 3]
    for k, e in ranks.items():
        assert e["RANK"] == str(k) and e["LOCAL_RANK"] == str(k - 2) and e["WORLD_SIZE"] == "6"
        assert e["NODE_RANK"] == e["GROUP_RANK"] == "1" and e["LOCAL_WORLD_SIZE"] == "2"
        assert (e["MASTER_ADDR"], e["MASTER_PORT"], e["INTERLINK_SECRET"]) == ("10.1.2.3", "29555", secret)


def test_multi_node_requires_secret(tmp_path):
    script = _write(tmp_path, "env.py", ENV_SCRIPT)
    proc = _run(["-n", "1", "--nnodes", "2", "--master", "127.0.0.1:29555", str(script)])
    assert proc.returncode != 0 and proc.stdout == ""
    assert "INTERLINK_SECRET" in proc.stderr


FAIL_SCRIPT = """
import os, signal, subprocess, sys, time
from pathlib import Path
d = Path(sys.argv[1])
rank = int(os.environ["RANK"])
if rank == 1:
    # fail once every other rank is up and has written its pids
    others = [r for r in range(int(os.environ["WORLD_SIZE"])) if r != 1]
    deadline = time.monotonic() + 20
    while not all((d / f"ready{r}").exists() for r in others) and time.monotonic() < deadline:
        time.sleep(0.02)
    mode = sys.argv[2]
    if mode == "exit3":
        sys.exit(3)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    def explode():
        raise RuntimeError("boom from rank one")
    explode()
if sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
(d / f"rank{rank}.pid").write_text(str(os.getpid()))
(d / f"grandchild{rank}.pid").write_text(str(child.pid))
(d / f"ready{rank}").write_text("1")
print(f"rank {rank} sleeping", flush=True)
time.sleep(60)
"""


def test_failing_rank_stops_the_others(tmp_path):
    script = _write(tmp_path, "fail.py", FAIL_SCRIPT)
    t0 = time.monotonic()
    proc = _run(["-n", "3", str(script), str(tmp_path), "raise"])
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    assert elapsed < 10, f"launcher took {elapsed:.1f} s to stop the sleeping ranks"
    err = proc.stderr
    assert "[rank 1] Traceback (most recent call last):" in err
    summary = err[err.index("interlink run: rank 1"):]
    assert "exited with code 1" in summary
    assert "Traceback (most recent call last):" in summary and "RuntimeError: boom from rank one" in summary
    assert "in explode" in summary
    assert "[rank 0] rank 0 sleeping" in proc.stdout
    pids = _read_pids(tmp_path)
    assert len(pids) == 4  # ranks 0 and 2 and their children
    assert _wait_dead(pids) == []


def test_exit_code_and_signal_are_reported(tmp_path):
    script = _write(tmp_path, "fail.py", FAIL_SCRIPT)
    proc = _run(["-n", "2", str(script), str(tmp_path), "exit3"])
    assert proc.returncode == 3
    assert "rank 1 exited with code 3" in proc.stderr
    for f in tmp_path.glob("*.pid"):
        f.unlink()
    (tmp_path / "ready0").unlink()
    proc = _run(["-n", "2", str(script), str(tmp_path), "sigkill"])
    assert proc.returncode == 128 + signal.SIGKILL
    assert "rank 1 was killed by SIGKILL" in proc.stderr
    assert _wait_dead(_read_pids(tmp_path)) == []


def test_rank_ignoring_sigterm_is_killed_after_grace(tmp_path):
    script = _write(tmp_path, "fail.py", FAIL_SCRIPT)
    t0 = time.monotonic()
    proc = _run(["-n", "2", "--grace", "0.5", str(script), str(tmp_path), "ignore-term"])
    elapsed = time.monotonic() - t0
    # rank 1 runs in "ignore-term" mode too, which is not a mode it knows: it raises
    assert proc.returncode == 1 and "rank 1" in proc.stderr
    assert elapsed < 8
    pids = _read_pids(tmp_path)
    assert len(pids) == 2 and _wait_dead(pids) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_launcher_cleans_up(tmp_path, sig):
    # both ranks sleep: nobody takes the failing branch
    script = _write(tmp_path, "sleep.py", FAIL_SCRIPT.replace("if rank == 1:", "if rank == 99:"))
    launcher = subprocess.Popen([sys.executable, "-m", "interlink", "run", "-n", "2", str(script),
                                 str(tmp_path), "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env())
    try:
        deadline = time.monotonic() + 20
        while len(_read_pids(tmp_path)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = _read_pids(tmp_path)
        assert len(pids) == 4
        launcher.send_signal(sig)
        out, err = launcher.communicate(timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 128 + sig
    assert signal.Signals(sig).name in err
    assert _wait_dead(pids) == []


BLAME_SCRIPT = """
import atexit, time
import numpy as np
import interlink as dist
rank = int(__import__("os").environ["RANK"])
if rank == 1:
    atexit.register(time.sleep, 1.5)  # runs last: rank 1 exits after rank 0, which failed because of it
dist.init(timeout=30)
if rank == 1:
    raise RuntimeError("boom from rank one")
dist.all_reduce(np.ones(4))
"""


def test_first_failure_names_the_rank_that_caused_it(tmp_path):
    # rank 0 exits first (PeerLostError: rank 1 failed and aborted the job); the summary names rank 1 and
    # shows its traceback
    script = _write(tmp_path, "blame.py", BLAME_SCRIPT)
    proc = _run(["-n", "2", str(script)])
    assert proc.returncode != 0
    summary = proc.stderr[proc.stderr.index("interlink run: rank"):]
    assert summary.startswith("interlink run: rank 1 "), summary
    assert "RuntimeError: boom from rank one" in summary, summary
