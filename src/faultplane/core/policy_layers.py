"""Old path of the policy's layers: now `faultplane.core.policy.layers` (finding and reading policy files)
and `faultplane.core.policy.combine` (their strictest combination). Kept so existing imports work; it hands on
both modules' public names, as their own `__all__` lists them."""

from faultplane.core.policy import combine as _combine
from faultplane.core.policy import layers as _layers
from faultplane.core.policy.combine import *  # noqa: F403
from faultplane.core.policy.layers import *  # noqa: F403

__all__ = [*_combine.__all__, *_layers.__all__]
