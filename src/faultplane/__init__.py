"""Faultplane: chaos engineering as a library, a CLI and an MCP server.

`import faultplane` stays light (standard library only) so that services can mark fault points cheaply, and
so that `faultplane --help` does not pay for the fault-point machinery: its names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultplane.faultpoint import FaultInjected, fault_point

__version__ = "0.1.0"
__all__ = ["FaultInjected", "__version__", "fault_point"]


def __getattr__(name: str) -> Any:
    if name in ("FaultInjected", "fault_point"):
        from faultplane import faultpoint

        return getattr(faultpoint, name)
    raise AttributeError(f"module 'faultplane' has no attribute {name!r}")
