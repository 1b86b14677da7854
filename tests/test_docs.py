"""Every command and code block of README.md and docs/*.md, run as written.

A command is a line of an indented or fenced shell block whose first word is a program (``interlink``,
``python3``, ``torchrun``, ...); ``# ...`` and the text after a run of two spaces are its comment. Each runs
in a scratch directory that holds links to the checkout's examples/, benchmarks/, tests/ and src/, and must
exit 0. What cannot run here is said so, each in its own kind:

- a synopsis (``-n N``, ``[--json FILE]``, ``...``): its program's ``--help`` must exit 0 and name every
  ``--option`` the synopsis shows;
- an install (``pip install``, ``python3 -m venv``): skipped (it changes the environment); the README's test
  command must be exactly what ``.ci/run`` runs (checked here);
- several hosts (Slurm, mpirun across nodes, ``--nnodes``, ``train.py``) and ``export`` lines: skipped;
- root (``--emulate-hosts``, ``sudo``, network namespaces): marked ``netns``, run as root without the sudo;
- a GPU: marked ``gpu``;
- minutes (sweeps, the soak, calibration, the published table, whole test files): marked ``slow``.

Python blocks run as a file: under ``interlink run -n 2`` when they call ``init()``, under ``torchrun`` (2
processes) when they call ``init_process_group``, else with ``python3``. YAML blocks are data (skipped).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ("interlink", "python3", "python", "torchrun", "pip", "bash", "sudo", "srun", "mpirun", "mpiexec",
            "export", "MASTER=")
SLOW = ("benchmarks/compare.py", "benchmarks/soak.py", "benchmarks/published.py", "benchmarks/torch_ddp.py",
        "benchmarks/shrink.py", "benchmarks/lanes.py", "benchmarks/emulated_hosts.py", "benchmarks/calibration.py",
        "--calibrate", "--sweep-nodes", "--sweep-gpus", "-m pytest", "algorithms --verify --max-ranks")
GPU = ("benchmarks/gpu.py", "cuda12", "cuda13", "-m gpu")
ROOT_ONLY = ("--emulate-hosts", "sudo ", "interlink.cli.netns")
CLUSTER = ("srun", "mpirun", "mpiexec", "--nnodes", "SLURM", "node0")


@dataclass(frozen=True)
class Snippet:
    where: str  # file:line
    kind: str  # "command" | "python" | "yaml"
    text: str
    block: str = ""  # file:line of the block it is in: a block's commands run in order, in one directory

    def __str__(self) -> str:
        return self.where


def _docs() -> list[str]:
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def _command_of(line: str) -> str:
    """The command of a block's line: before a `#` comment or a run of two spaces (a description)."""
    s = line.strip()
    s = re.split(r"\s{2,}", s, maxsplit=1)[0]
    if " #" in s:
        s = s.split(" #", 1)[0]
    return s.strip()


def snippets() -> list[Snippet]:
    out: list[Snippet] = []
    for path in _docs():
        rel = os.path.relpath(path, ROOT)
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            ln = lines[i]
            m = re.match(r"^```(\w*)\s*$", ln)
            if m:
                lang, start = m.group(1), i + 1
                j = start
                while j < len(lines) and not lines[j].startswith("```"):
                    j += 1
                body = "\n".join(lines[start:j])
                if lang == "python":
                    out.append(Snippet(f"{rel}:{start}", "python", body, f"{rel}:{start}"))
                elif lang in ("yaml", "yml", "json"):
                    out.append(Snippet(f"{rel}:{start}", "yaml", body, f"{rel}:{start}"))
                elif lang in ("bash", "sh", "shell", ""):
                    out += _commands(rel, start, lines[start:j], indent=0)
                i = j + 1
                continue
            if ln.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
                j = i
                while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                    j += 1
                out += _commands(rel, i + 1, lines[i:j], indent=4)
                i = j
                continue
            i += 1
    return out


def _commands(rel: str, first: int, block: list[str], indent: int) -> list[Snippet]:
    out, k = [], 0
    while k < len(block):
        raw = block[k][indent:] if block[k].startswith(" " * indent) else block[k]
        at = first + k
        while raw.rstrip().endswith("\\") and k + 1 < len(block):  # a continued line
            k += 1
            raw = raw.rstrip()[:-1].rstrip() + " " + block[k].strip()
        k += 1
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        word = s.split()[0]
        if not (word in PROGRAMS or word.startswith("INTERLINK_") or word.startswith(("python3", "MASTER="))):
            continue  # output, a listing, a tree: not a command
        out.append(Snippet(f"{rel}:{at}", "command", _command_of(s) if "  " in s or " #" in s else s, f"{rel}:{first}"))
    return out


def _is_synopsis(cmd: str) -> bool:
    if "[" in cmd and "]" in cmd and not re.search(r"'[^']*\[[^']*'", cmd):  # `[--opt]`, not '.[test]'
        return True
    if " ... " in cmd or cmd.endswith(" ...") or "<" in cmd:
        return True
    toks = shlex.split(cmd, posix=True) if cmd.count("'") % 2 == 0 else cmd.split()
    return any(re.fullmatch(r"[A-Z][A-Z_]*(:[A-Z]+)?", t) for t in toks)


def _kind(s: Snippet) -> tuple[str, str]:
    """(mark, reason): mark in fast, slow, gpu, netns, torch, skip, synopsis."""
    if s.kind == "yaml":
        return "skip", "a data file, not a command"
    text = s.text
    if s.kind == "python":
        if "init_process_group" in text:
            return "torch", ""
        if "train_step(" in text:
            return "skip", "a fragment of the reader's training loop (train_step is theirs)"
        if re.search(r"\bshrink\(|kill", text):
            return "slow", ""
        return "fast", ""
    if text.startswith("export ") or text.startswith("MASTER="):
        return "skip", "sets a shell variable"
    if "pip install" in text or "-m venv" in text:
        return "skip", "installs packages (.ci/run runs the test command; test_ci_runs_the_readme_test_command)"
    if text.split()[0] in ("srun", "mpirun", "mpiexec", "torchrun") and any(c in text for c in CLUSTER):
        return "skip", "needs several hosts"
    if _is_synopsis(text):
        return "synopsis", ""
    if any(c in text for c in CLUSTER):
        return "skip", "needs several hosts"
    if "train.py" in text:
        return "skip", "runs the reader's own training script"
    if any(g in text for g in GPU):
        return "gpu", ""
    if any(r in text for r in ROOT_ONLY):
        return "netns", ""
    if any(m in text for m in SLOW):
        return "slow", ""
    if text.startswith("torchrun"):
        return "torch", ""
    return "fast", ""


def _scratch(tmp_path, s: Snippet | None = None) -> str:
    """A directory with the checkout's folders linked in, and the data files (a YAML block whose first line
    is ``# NAME.yaml``) of the snippet's page written out, as a reader following the page would have them."""
    for sub in ("examples", "benchmarks", "tests", "src", "docs"):
        os.symlink(os.path.join(ROOT, sub), tmp_path / sub)
    if s is not None:
        page = s.where.split(":")[0]
        for d in ALL:
            m = re.match(r"#\s*([\w.-]+\.ya?ml)\b", d.text) if d.kind == "yaml" else None
            if m and d.where.split(":")[0] == page:
                (tmp_path / m.group(1)).write_text(d.text + "\n")
    return str(tmp_path)


def _env() -> dict:
    env = dict(os.environ)
    env["INTERLINK_PROFILE"] = env.get("INTERLINK_PROFILE", os.devnull + ".no-profile")
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # this interpreter's `interlink` and `python3`
    return env


def _run(cmd: list[str] | str, cwd: str, timeout: float, shell: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(), shell=shell, capture_output=True, text=True, timeout=timeout,
                          executable="/bin/bash" if shell else None)


def _python_command(s: Snippet, cwd: str) -> str:
    path = os.path.join(cwd, "snippet.py")
    with open(path, "w") as f:
        f.write(s.text + "\n")
    if "init_process_group" in s.text:
        body = s.text + ("\n\ndist.destroy_process_group()\n" if "destroy" not in s.text else "\n")
        with open(path, "w") as f:
            f.write(body)
        return f"{shlex.quote(sys.executable)} -m torch.distributed.run --standalone --nproc-per-node 2 snippet.py"
    if re.search(r"\binit\(", s.text):
        return "interlink run -n 2 snippet.py"
    return f"{shlex.quote(sys.executable)} snippet.py"


def _check(s: Snippet, tmp_path, timeout: float, cwd: str | None = None) -> None:
    cwd = cwd or _scratch(tmp_path, s)
    if s.kind == "python":
        cmd = _python_command(s, cwd)
    else:
        cmd = s.text
        if cmd.startswith("sudo -E env PATH=\"$PATH\" "):
            cmd = cmd[len("sudo -E env PATH=\"$PATH\" "):]
        cmd = re.sub(r"^python3? ", shlex.quote(sys.executable) + " ", cmd)
    res = _run(cmd, cwd, timeout, shell=True)
    assert res.returncode == 0, (f"{s.where}: `{cmd}` exited {res.returncode}\n--- stdout\n{res.stdout[-3000:]}"
                                 f"\n--- stderr\n{res.stderr[-3000:]}")


ALL = snippets()


def _of(mark: str) -> list[Snippet]:
    return [s for s in ALL if _kind(s)[0] == mark]


def test_the_docs_have_commands_and_code() -> None:
    kinds = {m: len(_of(m)) for m in ("fast", "slow", "gpu", "netns", "torch", "skip", "synopsis")}
    assert kinds["fast"] >= 20 and kinds["synopsis"] >= 3 and len(_of("torch")) >= 1, kinds


def _blocks(mark: str) -> list[list[Snippet]]:
    """The snippets of a mark grouped by block, in order (a reader runs a block's commands one after the
    other: a later one may read what an earlier one wrote)."""
    out: dict[str, list[Snippet]] = {}
    for s in _of(mark):
        out.setdefault(s.block or s.where, []).append(s)
    return list(out.values())


@pytest.mark.parametrize("block", _blocks("fast"), ids=lambda b: b[0].where)
def test_command_runs(block: list[Snippet], tmp_path) -> None:
    cwd = _scratch(tmp_path, block[0])
    for s in block:
        _check(s, tmp_path, timeout=240, cwd=cwd)


def _asked(request, mark: str) -> bool:
    """Whether this run asked for the marked tests (``-m slow``, ``-m netns``): the default suite does not run
    them (minutes each; root's network namespaces)."""
    return mark in (request.config.getoption("markexpr", "") or "").replace("not " + mark, "")


@pytest.mark.slow
@pytest.mark.parametrize("s", _of("slow"), ids=str)
def test_long_command_runs(s: Snippet, tmp_path, request) -> None:
    if not _asked(request, "slow"):
        pytest.skip("takes minutes: python3 -m pytest tests/test_docs.py -m slow")
    _check(s, tmp_path, timeout=3600)


@pytest.mark.parametrize("s", _of("torch"), ids=str)
def test_torch_snippet_runs(s: Snippet, tmp_path) -> None:
    pytest.importorskip("torch")
    _check(s, tmp_path, timeout=240)


@pytest.mark.gpu
@pytest.mark.parametrize("s", _of("gpu"), ids=str)
def test_gpu_command_runs(s: Snippet, tmp_path) -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("needs a CUDA GPU")
    _check(s, tmp_path, timeout=1800)


@pytest.mark.netns
@pytest.mark.parametrize("s", _of("netns"), ids=str)
def test_root_command_runs(s: Snippet, tmp_path, request) -> None:
    if not _asked(request, "netns"):
        pytest.skip("emulated hosts: python3 -m pytest tests/test_docs.py -m netns (as root)")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    _check(s, tmp_path, timeout=600)


def _help_of(cmd: str) -> list[str]:
    """The program part of a synopsis: the words before its first option or placeholder."""
    words: list[str] = []
    for w in cmd.replace("sudo -E env PATH=\"$PATH\" ", "").split():
        if words in (["python"], ["python3"], ["python", "-m"], ["python3", "-m"]) and (w == "-m" or words[-1] == "-m"):
            words.append(w)  # python -m module
            continue
        if w.startswith("-") or w.startswith("[") or re.fullmatch(r"[A-Z][A-Z_]*", w) or w == "...":
            break
        words.append(w)
    if words and words[0] in ("python3", "python"):
        words[0] = sys.executable
    return words


@pytest.mark.parametrize("s", _of("synopsis"), ids=str)
def test_synopsis_matches_its_help(s: Snippet, tmp_path) -> None:
    prog = _help_of(s.text)
    assert prog, s.text
    cwd = _scratch(tmp_path)
    res = _run(prog + ["--help"], cwd, 120)
    assert res.returncode == 0, f"{s.where}: {' '.join(prog)} --help exited {res.returncode}: {res.stderr[-2000:]}"
    rest = s.text.replace("sudo -E env PATH=\"$PATH\" ", "").split()[len(prog):]
    cut = next((k for k, w in enumerate(rest) if w.endswith(".py") or w == "-m"), len(rest))
    options = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(rest[:cut])))  # after a script: its own
    missing = [o for o in sorted(options) if o not in res.stdout]
    assert not missing, f"{s.where}: `{s.text}` shows {missing}, which `{' '.join(prog)} --help` does not name"


def test_ci_runs_the_readme_test_command() -> None:
    """The README's test command is exactly the one .ci/run runs, and the set-up command installs into the
    same fresh virtual environment."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    tests = [s.text for s in ALL if s.where.startswith("README.md") and "pytest" in s.text]
    assert len(tests) == 1, tests
    assert tests[0] in ci, (tests[0], ci)
    assert "rm -rf .venv" in ci and "python3 -m venv .venv" in readme
    first = [s.text for s in ALL if s.where.startswith("README.md") and "interlink bench" in s.text]
    assert first and first[0].startswith("python3 -m venv .venv && . .venv/bin/activate"), first


def test_readme_first_screen() -> None:
    """The first screen says what interlink is, why (with the results page), what it does not do yet, and how
    to start, in under 40 lines; no numbered section, session or date of measurement anywhere in the docs."""
    text = open(os.path.join(ROOT, "README.md")).read()
    first = "\n".join(text.split("\n")[:40])
    for want in ("benchmarks/RESULTS.md", "gloo", "MPI", "NCCL", "Not yet", "interlink bench",
                 "interlink run -n 2 examples/allreduce.py", 'backend="interlink"'):
        assert want in first, want
    bad = re.compile(r"RESULTS(\.md)? sections? \d|[Ss]ession \d|\bsection \d+ of the results|the project's VM|"
                     r"on 20\d\d-\d\d-\d\d")
    for path in _docs():
        for n, line in enumerate(open(path), 1):
            assert not bad.search(line), f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}"


def test_every_variable_the_code_reads_is_documented() -> None:
    """Each ``INTERLINK_*`` name the code spells as a string (what it reads from the environment; a family such
    as ``INTERLINK_PEER_<NAME>`` by its prefix) has its row in docs/environment.md."""
    doc = open(os.path.join(ROOT, "docs", "environment.md")).read()
    names: set[str] = set()
    for path in glob.glob(os.path.join(ROOT, "src", "interlink", "**", "*.py"), recursive=True):
        names |= set(re.findall(r"[\"'](INTERLINK_[A-Z0-9_]+)", open(path, encoding="utf-8").read()))
    assert len(names) > 30, names
    assert sorted(n for n in names if n not in doc) == []
