"""Two network namespaces joined by a veth pair, for host network faults measured from outside (needs root).

The driver tests' `netns_pair` fixture and benchmarks/bench_hostnet_nfqueue.py stand on it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class NetnsPair:
    a: str
    b: str
    veth_a: str
    veth_b: str
    ip_a: str
    ip_b: str

    def client(self, code: str, *args: str, timeout: float = 30) -> dict:  # type: ignore[type-arg]
        """Run a Python snippet inside namespace A (the client side); it prints one JSON line."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.a, sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


@contextmanager
def veth_pair(ns_prefix: str, dev_prefix: str, subnet: str) -> Iterator[NetnsPair]:
    """Namespaces `<ns_prefix>A-<tag>` and `<ns_prefix>B-<tag>` joined by veth `<dev_prefix>a<tag>` /
    `<dev_prefix>b<tag>` with addresses `<subnet>.1` and `<subnet>.2`; both namespaces are deleted on exit."""
    tag = f"{random.randrange(16**6):06x}"
    pair = NetnsPair(
        f"{ns_prefix}A-{tag}", f"{ns_prefix}B-{tag}", f"{dev_prefix}a{tag}", f"{dev_prefix}b{tag}",
        f"{subnet}.1", f"{subnet}.2",
    )  # fmt: skip
    try:
        _sh("ip", "netns", "add", pair.a)
        _sh("ip", "netns", "add", pair.b)
        _sh("ip", "link", "add", pair.veth_a, "netns", pair.a, "type", "veth", "peer", "name", pair.veth_b,
            "netns", pair.b)  # fmt: skip
        for ns, dev, ip in ((pair.a, pair.veth_a, pair.ip_a), (pair.b, pair.veth_b, pair.ip_b)):
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        for ns in (pair.a, pair.b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
