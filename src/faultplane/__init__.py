"""Faultplane: chaos engineering as a library, a CLI and an MCP server.

`import faultplane` stays light (standard library only) so that services can mark fault points cheaply.
"""

from faultplane.faultpoint import FaultInjected, fault_point

__version__ = "0.1.0"
__all__ = ["FaultInjected", "__version__", "fault_point"]
