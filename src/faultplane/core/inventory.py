"""Old path of the lab's target inventory: now `faultplane.core.policy.inventory`. Kept so existing imports work."""

from faultplane.core.policy.inventory import Inventory, combine_inventories, host_declared, undeclared

__all__ = ["Inventory", "combine_inventories", "host_declared", "undeclared"]
