"""Time for the automation app: integer milliseconds since the Unix epoch.

Services take ``now`` as an argument and fall back to ``now_ms()``, so tests
and the dispatcher drive time instead of sleeping (STYLE rule 8).
"""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
