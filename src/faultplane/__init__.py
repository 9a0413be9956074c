"""Faultplane: chaos engineering as a library, a CLI and an MCP server.

`import faultplane` stays light (standard library only) so that services can mark fault points cheaply. The
fault-point module itself loads on first use of `faultplane.fault_point`: entry points that never need it (the
agent hook runs before every shell command) do not pay for it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not from typing: importing it costs ~5 ms, and the hook imports this package
if TYPE_CHECKING:
    from typing import Any

    from faultplane.faultpoint import FaultInjected, fault_point

__version__ = "0.1.0"
__all__ = ["FaultInjected", "__version__", "fault_point"]


def __getattr__(name: str) -> Any:
    if name in ("FaultInjected", "fault_point"):
        from faultplane import faultpoint

        return getattr(faultpoint, name)
    raise AttributeError(f"module 'faultplane' has no attribute {name!r}")
