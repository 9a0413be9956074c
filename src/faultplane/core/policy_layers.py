"""Old path of the policy's layers: now `faultplane.core.policy.layers` (finding and reading policy files)
and `faultplane.core.policy.combine` (their strictest combination). Kept so existing imports work."""

from faultplane.core.policy.combine import combine
from faultplane.core.policy.layers import (
    SIGNATURE_SUFFIX,
    also_from,
    loosening_approved,
    policy_file_hash,
    policy_in_force,
    project_policy_files,
    signature_path,
    user_policy_path,
)

__all__ = [
    "SIGNATURE_SUFFIX",
    "also_from",
    "combine",
    "loosening_approved",
    "policy_file_hash",
    "policy_in_force",
    "project_policy_files",
    "signature_path",
    "user_policy_path",
]
