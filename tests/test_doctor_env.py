"""`interlink doctor` (no subcommand): the environment checks."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re

from interlink.cli.main import main
from interlink.doctor import env

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "interlink"


def test_every_variable_the_source_reads_is_known():
    used = set()
    for f in SRC.rglob("*.py"):
        if f.name == "env.py" and f.parent.name == "doctor":  # the list itself
            continue
        # a name, or the prefix of a family (INTERLINK_PEER_{name} in an f-string, INTERLINK_PEER_<NAME> in a doc)
        used |= {m.group(1) + ("_" if m.group(2) else "") for m in re.finditer(
            r"(?<![A-Z0-9_])(INTERLINK_[A-Z0-9_]*[A-Z0-9])(_[{<])?", f.read_text())}
    assert {n for n in used if not env.known_var(n)} == set()
    assert env.known_var("INTERLINK_PEER_MPICH") and not env.known_var("INTERLINK_FASTT")


def test_variables_misspelt_named_and_secrets_masked():
    [il, nccl] = env.check_vars({"INTERLINK_FASTT": "1", "INTERLINK_SECRET": "abc", "NCCL_ALGO": "Tree"})
    assert il.status == "warn" and "INTERLINK_FASTT" in il.advice and "abc" not in il.detail
    assert nccl.status == "warn" and "NCCL_ALGO" in nccl.advice


def test_shm_space_fails_when_small(monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(env.shutil, "disk_usage", lambda p: usage(2**26, 2**26 - 2**20, 2**20))
    checks = {c.name: c for c in env.check_shm()}
    assert checks["transport shm"].status == "pass"
    assert checks["/dev/shm space"].status == "fail" and "shm-size" in checks["/dev/shm space"].advice


def test_ranks_per_core():
    n = len(os.sched_getaffinity(0))
    assert env.check_cores(n).status == "pass"
    assert env.check_cores(4 * n).status == "warn"


def test_the_command(capsys, monkeypatch):
    monkeypatch.setenv("INTERLINK_SPIN", "100")
    code = main(["doctor", "--json"])
    checks = json.loads(capsys.readouterr().out)
    names = {c["name"] for c in checks}
    assert {"transport shm", "transport tcp", "/dev/shm space", "cross-memory attach", "interfaces", "ranks per core",
            "huge pages", "torch", "GPU / NVML", "INTERLINK_* variables", "NCCL_* variables"} <= names
    assert all(c["status"] in ("pass", "warn", "fail", "info") for c in checks)
    assert code == (1 if any(c["status"] == "fail" for c in checks) else 0)
    assert main(["doctor"]) == code
    assert "pass," in capsys.readouterr().out
