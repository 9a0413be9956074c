"""Toxics: the faults a proxy route applies to the bytes flowing through it (after Toxiproxy's set).

Each toxic acts on one stream — ``upstream`` (client to server) or ``downstream`` (server to client) — and on
a share of the connections given by ``toxicity`` (each connection rolls once per toxic, with the route's
seeded RNG). ``network_partition`` always acts on both streams.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "TOXIC_TYPES",
    "Bandwidth",
    "Latency",
    "LimitData",
    "NetworkPartition",
    "ResetPeer",
    "Slicer",
    "SlowClose",
    "Timeout",
    "Toxic",
    "parse_toxic",
]

Stream = Literal["upstream", "downstream"]


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", description="unique per route; defaults to '<type>_<stream>'")
    stream: Stream = Field(default="downstream", description="upstream = client->server, downstream = back")
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0, description="share of connections affected")

    def model_post_init(self, _ctx: object) -> None:
        if not self.name:
            self.name = f"{self.type}_{self.stream}"  # type: ignore[attr-defined]


class Latency(_Base):
    """Delay every chunk by ``latency_ms`` +/- ``jitter_ms`` (uniform)."""

    type: Literal["latency"] = "latency"
    latency_ms: float = Field(ge=0, le=3_600_000)
    jitter_ms: float = Field(default=0.0, ge=0, le=3_600_000)


class Bandwidth(_Base):
    """Limit the stream to ``rate_kbps`` kilobytes (1000 B) per second."""

    type: Literal["bandwidth"] = "bandwidth"
    rate_kbps: float = Field(gt=0, allow_inf_nan=False, description="kilobytes per second (KB/s, not kbit/s)")


class SlowClose(_Base):
    """Delay the close (EOF) of the stream by ``delay_ms``."""

    type: Literal["slow_close"] = "slow_close"
    delay_ms: float = Field(ge=0, le=3_600_000)


class Timeout(_Base):
    """Blackhole the stream: drop its data; close the connection after ``timeout_ms`` (0 = never)."""

    type: Literal["timeout"] = "timeout"
    timeout_ms: float = Field(default=0.0, ge=0, le=3_600_000)


class ResetPeer(_Base):
    """Reset the connection (TCP RST) ``timeout_ms`` after it starts or the toxic is added."""

    type: Literal["reset_peer"] = "reset_peer"
    timeout_ms: float = Field(default=0.0, ge=0, le=3_600_000)


class Slicer(_Base):
    """Slice data into pieces of ``average_size`` +/- ``size_variation`` bytes, ``delay_us`` apart."""

    type: Literal["slicer"] = "slicer"
    average_size: int = Field(ge=1)
    size_variation: int = Field(default=0, ge=0)
    delay_us: float = Field(default=0.0, ge=0, le=10_000_000)


class LimitData(_Base):
    """Close the connection once ``bytes`` bytes have passed in this stream."""

    type: Literal["limit_data"] = "limit_data"
    bytes: int = Field(ge=0)


class NetworkPartition(_Base):
    """Partition the route in both directions: ``refuse`` new connections (and reset live ones) or
    ``blackhole`` everything (connections accepted, no byte passes either way)."""

    type: Literal["network_partition"] = "network_partition"
    mode: Literal["refuse", "blackhole"] = "blackhole"


Toxic = Annotated[
    Latency | Bandwidth | SlowClose | Timeout | ResetPeer | Slicer | LimitData | NetworkPartition,
    Field(discriminator="type"),
]
TOXIC_TYPES = (
    "latency",
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
    "network_partition",
)

_ADAPTER: TypeAdapter[Toxic] = TypeAdapter(Toxic)


def parse_toxic(data: dict[str, object]) -> Toxic:
    """Validate a toxic from JSON (``{"type": "latency", "latency_ms": 100, ...}``)."""
    return _ADAPTER.validate_python(data)


def toxic_schema() -> dict[str, object]:
    return _ADAPTER.json_schema()
