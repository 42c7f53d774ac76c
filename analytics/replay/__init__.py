"""Recorded requests replayed against a retry policy: policy drift (the policy the data says
was in force, checked by the control plane's evaluator) and what-if (another policy)."""

from retryscope.analytics.replay._policy_drift import policy_drift, write_policy_side_file
from retryscope.analytics.replay._whatif import WhatIf, read_policy_file, whatif, whatif_requests

__all__ = [
    "WhatIf",
    "policy_drift",
    "read_policy_file",
    "whatif",
    "whatif_requests",
    "write_policy_side_file",
]
