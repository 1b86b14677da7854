"""Shared test configuration: hypothesis profiles for the differential tests, and no host profile.

`ci` (default) keeps the whole suite within its CI budget; `long` is for a hand run:
    python3 -m pytest tests/test_differential.py --hypothesis-profile=long

The cost model reads this host's calibrated profile (`interlink bench --calibrate` writes it); tests that
check the model's figures must not depend on whether the machine running them was calibrated, so the
suite points INTERLINK_PROFILE at a file that does not exist (tests that want a profile set their own).

The suite runs on pytest-xdist workers (pyproject's addopts: ``-n auto``): one per core, at most 4 (most
tests start several rank processes of their own; INTERLINK_TEST_WORKERS overrides). On 2 cores two workers
take the suite from 24 to 19 minutes: a worker waiting on its ranks' handshakes, heartbeats or timeouts
leaves the core to the other. Tests that guard how an algorithm scales time their own process's CPU
(time.process_time), which the other worker does not inflate.
"""

import os
import tempfile


def pytest_configure(config):
    """Byte-compile the package and the tests once, before any rank process starts. The suite starts a few
    thousand Python processes (ranks, launchers, CLI runs); where PYTHONDONTWRITEBYTECODE is set (this
    project's machines set it) none of them can cache what it compiles, and each compiled the ~50 modules
    of `import interlink` from source again: 0.44 s of a 3-rank job's 1.2 s init (measured on
    the project's 2-core VM). Imports read existing .pyc files whatever that variable says."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for sub in ("src", "tests", "benchmarks", "examples"):
        if os.path.isdir(os.path.join(root, sub)):
            compileall.compile_dir(os.path.join(root, sub), quiet=2, workers=1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (minutes each) run only when asked for (``-m slow``): the default suite, which
    CI runs in its 15-minute budget on 2 cores, skips them and says how to run them."""
    if "slow" in (config.getoption("markexpr", "") or "").replace("not slow", ""):
        return
    import pytest

    skip = pytest.mark.skip(reason="slow: run with python3 -m pytest -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per usable core, at most 4 (or INTERLINK_TEST_WORKERS); none (this process)
    for ``-m gpu``: the GPU tests share one device and time their own failures."""
    if os.environ.get("INTERLINK_TEST_WORKERS"):
        return max(0, int(os.environ["INTERLINK_TEST_WORKERS"]))
    if "gpu" in (config.getoption("markexpr", "") or ""):
        return 0
    return max(1, min(4, len(os.sched_getaffinity(0))))


os.environ["INTERLINK_PROFILE"] = os.path.join(tempfile.gettempdir(), f"interlink-tests-{os.getpid()}-none",
                                               "profile.json")
# ranks started without INTERLINK_SECRET use this user's secret file ($XDG_CONFIG_HOME/interlink/secret): the
# suite's goes to a private temporary directory, never the home of whoever runs the tests
_CONFIG = os.path.join(tempfile.gettempdir(), f"interlink-tests-{os.getuid()}-config")
os.makedirs(_CONFIG, mode=0o700, exist_ok=True)
os.environ["XDG_CONFIG_HOME"] = _CONFIG

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the differential tests skip without hypothesis
    pass
else:
    common = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
    settings.register_profile("ci", max_examples=int(os.environ.get("INTERLINK_DIFF_EXAMPLES", 30)), **common)
    settings.register_profile("long", max_examples=2000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
