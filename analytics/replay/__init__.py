"""Recorded requests replayed against a retry policy: policy drift (the policy the data says
was in force, checked by the control plane's evaluator) and what-if (another policy)."""

from retryscope.analytics.replay._policy_drift import (
    POLICY_DIR,
    known_policy_count,
    policy_drift,
    write_policy_side_file,
)
from retryscope.analytics.replay._whatif import (
    DEFAULT_WINDOW_MS,
    WhatIf,
    read_policy_file,
    whatif,
    whatif_requests,
)

__all__ = [
    "DEFAULT_WINDOW_MS",
    "POLICY_DIR",
    "WhatIf",
    "known_policy_count",
    "policy_drift",
    "read_policy_file",
    "whatif",
    "whatif_requests",
    "write_policy_side_file",
]
