"""Hypothesis runs derandomized in CI, so a run is reproducible; locally it explores."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
