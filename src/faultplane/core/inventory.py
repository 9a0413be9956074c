"""Old path of the lab's target inventory: now `faultplane.core.policy.inventory`. Kept so existing imports work;
it hands on that module's public names, as its own `__all__` lists them."""

from faultplane.core.policy import inventory as _inventory
from faultplane.core.policy.inventory import *  # noqa: F403

__all__ = list(_inventory.__all__)
