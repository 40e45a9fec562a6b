"""The example budget of the property-based tests: small and deterministic in the normal suite, large and
random under ``make fuzz`` (``SYMGRAD_FUZZ_EXAMPLES``)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ = os.environ.get("SYMGRAD_FUZZ_EXAMPLES")


def budget(default: int) -> settings:
    """``default`` examples (deterministic) in the normal suite, ``$SYMGRAD_FUZZ_EXAMPLES`` when fuzzing."""
    return settings(
        max_examples=int(FUZZ) if FUZZ else default,
        deadline=None,
        derandomize=not FUZZ,
        database=None if not FUZZ else settings.default.database,
        print_blob=bool(FUZZ),
        suppress_health_check=list(HealthCheck),
    )
