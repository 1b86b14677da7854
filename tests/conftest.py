"""Shared test configuration: hypothesis profiles for the differential tests, and no host profile.

`ci` (default) keeps the whole suite within its CI budget; `long` is for a hand run:
    python3 -m pytest tests/test_differential.py --hypothesis-profile=long

The cost model reads this host's calibrated profile (`interlink bench --calibrate` writes it); tests that
check the model's figures must not depend on whether the machine running them was calibrated, so the
suite points INTERLINK_PROFILE at a file that does not exist (tests that want a profile set their own).
"""

import os
import tempfile

os.environ["INTERLINK_PROFILE"] = os.path.join(tempfile.gettempdir(), f"interlink-tests-{os.getpid()}-none",
                                               "profile.json")

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the differential tests skip without hypothesis
    pass
else:
    common = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
    settings.register_profile("ci", max_examples=int(os.environ.get("INTERLINK_DIFF_EXAMPLES", 60)), **common)
    settings.register_profile("long", max_examples=2000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
