"""benchmarks/soak.py: a short soak passes with every result checked, and its checker can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_SCRIPT = os.path.join(_ROOT, "benchmarks", "soak.py")
# 2 ranks, ~60 calls over shared memory; buffers up to 256K elements keep it to seconds on 2 cores
_ARGS = ["--ranks", "2", "--calls", "60", "--transport", "shm", "--seed", "3", "--max-elems", str(1 << 18),
         "--call-timeout", "30"]


def _soak(tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, _SCRIPT, *_ARGS, "--json", str(out), *extra], cwd=_ROOT,
                          capture_output=True, text=True, timeout=120)
    with open(out) as f:
        return proc, json.load(f)


def test_short_soak_has_no_wrong_result(tmp_path) -> None:
    proc, res = _soak(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shm = res["transports"]["shm"]
    assert shm["calls_completed"] == shm["calls_planned"] >= 60
    assert shm["wrong"] == 0 and shm["hangs"] == 0 and shm["errors"] == 0
    assert res["ok"] is True
    assert "RESULT: OK" in proc.stdout
    # the mix really is mixed: several collectives, point-to-point and async calls
    mix = shm["mix_rank0"]
    assert sum(1 for k in mix if "." not in k.split(" ")[0]) >= 8, mix
    assert "send/recv" in mix and "isend/irecv" in mix


def test_the_soak_reports_its_progress(tmp_path) -> None:
    """Each world says which steps it runs and what a step is, then where its slowest rank is every --progress
    seconds, with the time left."""
    proc, res = _soak(tmp_path, "--progress", "0.2", "--calls", "400")
    assert proc.returncode == 0 and res["ok"] is True
    assert "(a step: one collective, a send/recv pair or a batch of async calls)" in proc.stderr
    at = [ln for ln in proc.stderr.splitlines() if ln.startswith("#   shm: at step ")]
    assert at and "steps done by every rank" in at[-1]


def test_a_corrupted_result_is_reported_wrong(tmp_path) -> None:
    proc, res = _soak(tmp_path, "--corrupt", "3")
    assert proc.returncode != 0
    shm = res["transports"]["shm"]
    assert shm["corrupted"] == 1
    assert shm["wrong"] == 1, shm["wrong_details"]
    d = shm["wrong_details"][0]
    assert d["rank"] == 0 and d["step"] >= 3 and d["problems"][0]["wrong"] == 1
    assert "WRONG step" in proc.stdout and "RESULT: FAILED" in proc.stdout


def test_soak_with_lost_ranks_shrinks_and_stays_correct(tmp_path) -> None:
    """--faults: ranks SIGKILLed mid-step (rank 0 among the candidates), the survivors shrink and go on;
    every completed call is still checked, none wrong, no hang."""
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, _SCRIPT, "--ranks", "3", "--calls", "90", "--faults", "30", "--transport",
                           "shm", "--seed", "3", "--max-elems", str(1 << 16), "--call-timeout", "30", "--json",
                           str(out)], cwd=_ROOT, capture_output=True, text=True, timeout=180)
    with open(out) as f:
        res = json.load(f)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shm = res["transports"]["shm"]
    assert shm["faults"]["planned"] >= 2 and shm["faults"]["killed"] == shm["faults"]["planned"], shm["faults"]
    assert shm["faults"]["shrinks_per_survivor"] == 2 * shm["faults"]["killed"], shm["faults"]
    assert shm["calls_completed"] == shm["calls_planned"] >= 60
    assert shm["wrong"] == 0 and shm["hangs"] == 0 and shm["errors"] == 0
    # each world of the fault run says what a step is, as the runs without faults do
    assert "a rank lost at steps" in proc.stderr + proc.stdout
    assert "(a step: one collective, a send/recv pair or a batch of async calls)" in proc.stderr + proc.stdout
