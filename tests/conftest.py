"""Shared test configuration: hypothesis profiles for the differential tests.

`ci` (default) keeps the whole suite within its CI budget; `long` is for a hand run:
    python3 -m pytest tests/test_differential.py --hypothesis-profile=long
"""

import os

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the differential tests skip without hypothesis
    pass
else:
    common = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
    settings.register_profile("ci", max_examples=int(os.environ.get("INTERLINK_DIFF_EXAMPLES", 60)), **common)
    settings.register_profile("long", max_examples=2000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
