"""The userspace packet engine behind ``hostnet.netem`` on kernels without sch_netem: a firewall rule
(``-j NFQUEUE --queue-num N --queue-bypass``, see hostnet) hands an interface's outgoing packets to queue N,
and this module, run as a helper process inside the target network namespace, holds them (delay, jitter,
reordering), drops them (loss), rewrites a bit of their payload (corruption) and sends a copy after them
(duplication).

What it decides:
- No library: the nfnetlink_queue protocol is a handful of fixed structs over an ``AF_NETLINK`` socket, spoken
  here with the standard library only, so nothing needs compiling (libnetfilter_queue) or installing.
- Safe when it fails: the rule bypasses (no reader bound: packets pass) and the queue is bound with
  ``NFQA_CFG_F_FAIL_OPEN`` (queue full or reader too slow: packets pass). A dead engine never blackholes.
- It lives exactly as long as its controller: stdin is a pipe whose other end only the controller holds; EOF
  (controller exited or was SIGKILLed) or SIGTERM (a revert) releases every held packet at once and exits.
- A delayed packet is held in this process, not in the kernel: its verdict is "drop" at once and the same
  bytes leave at their time through a raw socket bound to the interface (a kernel-held packet would count
  against its socket's send budget and throttle a TCP flow to a few packets per delay). Duplicates leave the
  same way. That socket's packets carry ``--mark``, which the rule skips, so they are not queued again.
- Corruption flips one random bit of the transport payload (after the TCP/UDP/ICMP header, so the packet
  still reaches its socket). By default the checksum is left as it was, so the receiving kernel drops the
  packet as netem's corruption usually does; ``fix_checksums`` recomputes it, so the altered bytes reach the
  application. Packets without transport payload (bare TCP ACKs) or with IPv6 extension headers pass intact.

Standard library only: it starts in a fresh interpreter for every fault.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Effects", "Queue", "corrupt", "main"]

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
SO_MARK = 36
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NF_DROP, NF_ACCEPT = 0, 1
_NLA_TYPE_MASK = 0x3FFF
_MAXLEN = 16384  # packets awaiting a verdict in the kernel; beyond, fail-open lets new ones pass
_MAX_HELD = 65536  # delayed packets this process keeps at once; beyond, new ones pass undelayed


def _attr(kind: int, data: bytes) -> bytes:
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * (-n % 4)


def _attrs(data: bytes, off: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while off + 4 <= end:
        n, kind = struct.unpack_from("=HH", data, off)
        if n < 4:
            break
        out[kind & _NLA_TYPE_MASK] = data[off + 4 : off + n]
        off += (n + 3) & ~3
    return out


class Queue:
    """One bound NFQUEUE: packets in, verdicts out."""

    def __init__(self, num: int) -> None:
        self.num = num
        self._seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.bind((0, 0))
            try:  # room for bursts: an overflowing socket would make the kernel fail the packets open
                self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            except OSError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self._config(_attr(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
            fail_open = struct.pack(">I", NFQA_CFG_F_FAIL_OPEN)
            self._config(
                _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0xFFFF, NFQNL_COPY_PACKET))
                + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", _MAXLEN))
                + _attr(NFQA_CFG_MASK, fail_open)
                + _attr(NFQA_CFG_FLAGS, fail_open)
            )
        except BaseException:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def _send(self, msg: int, flags: int, body: bytes) -> int:
        self._seq += 1
        nfgen = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", self.num)
        head = struct.pack(
            "=IHHII", 16 + len(nfgen) + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, self._seq, 0
        )
        self.sock.send(head + nfgen + body)
        return self._seq

    def _config(self, body: bytes) -> None:
        seq = self._send(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, body)
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                n, kind, _, mseq, _ = struct.unpack_from("=IHHII", data, off)
                if kind == NLMSG_ERROR and mseq == seq:
                    (err,) = struct.unpack_from("=i", data, off + 16)
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    return
                off += (n + 3) & ~3

    def verdict(self, packet_id: int, verdict: int, payload: bytes | None = None) -> None:
        body = _attr(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id))
        if payload is not None:
            body += _attr(NFQA_PAYLOAD, payload)
        try:
            self._send(NFQNL_MSG_VERDICT, NLM_F_REQUEST, body)
        except BlockingIOError:
            time.sleep(0.001)
            self._send(NFQNL_MSG_VERDICT, NLM_F_REQUEST, body)

    def packets(self) -> list[tuple[int, bytes]]:
        """Every packet waiting on the socket now: (packet id, IP packet)."""
        out: list[tuple[int, bytes]] = []
        while True:
            try:
                data = self.sock.recv(1 << 17)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    continue  # messages lost; fail-open already let their packets through
                raise
            off = 0
            while off + 20 <= len(data):
                n, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
                if n < 16:
                    break
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    attrs = _attrs(data, off + 20, off + n)
                    hdr, payload = attrs.get(NFQA_PACKET_HDR), attrs.get(NFQA_PAYLOAD)
                    if hdr is not None and payload is not None:
                        out.append((struct.unpack_from(">I", hdr)[0], payload))
                    elif hdr is not None:  # nothing to work on: let it pass
                        self.verdict(struct.unpack_from(">I", hdr)[0], NF_ACCEPT)
                off += (n + 3) & ~3

    def close(self) -> None:
        try:
            self.sock.setblocking(True)
            self._config(_attr(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)))
        except OSError:
            pass  # closing the socket unbinds it too
        self.sock.close()


# --- packet surgery -------------------------------------------------------------------------------------------


def _fold(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _l4(pkt: bytes) -> tuple[int, int, int, int] | None:
    """(IP version, protocol, offset of the transport header, offset of its payload), for the transports whose
    checksum we can rebuild; None for anything else."""
    if len(pkt) < 20:
        return None
    version = pkt[0] >> 4
    if version == 4:
        l4, proto = (pkt[0] & 15) * 4, pkt[9]
    elif version == 6 and len(pkt) >= 40:
        l4, proto = 40, pkt[6]
    else:
        return None
    if proto == 6 and len(pkt) >= l4 + 20:
        return version, proto, l4, l4 + (pkt[l4 + 12] >> 4) * 4
    if proto in (17, 1 if version == 4 else 58) and len(pkt) >= l4 + 8:
        return version, proto, l4, l4 + 8
    return None


_CSUM_AT = {6: 16, 17: 6, 1: 2, 58: 2}


def fix_checksum(buf: bytearray) -> None:
    """Recompute the transport checksum of an IP packet in place (TCP, UDP, ICMP, ICMPv6)."""
    where = _l4(bytes(buf))
    if where is None:
        return
    version, proto, l4, _ = where
    at = l4 + _CSUM_AT[proto]
    if proto == 17 and version == 4 and buf[at : at + 2] == b"\0\0":
        return  # an IPv4 UDP datagram sent without checksum stays without
    buf[at : at + 2] = b"\0\0"
    seg = bytes(buf[l4:])
    if proto == 1:
        pseudo = b""
    elif version == 4:
        pseudo = bytes(buf[12:20]) + struct.pack("!BBH", 0, proto, len(seg))
    else:
        pseudo = bytes(buf[8:40]) + struct.pack("!I3xB", len(seg), proto)
    csum = ~_fold(pseudo + seg) & 0xFFFF
    if proto == 17 and csum == 0:
        csum = 0xFFFF
    buf[at : at + 2] = struct.pack("!H", csum)


def corrupt(pkt: bytes, fix_checksums: bool, rng: random.Random) -> bytes | None:
    """The packet with one random bit of its transport payload flipped, or None when it carries none."""
    where = _l4(pkt)
    if where is None or where[3] >= len(pkt):
        return None
    buf = bytearray(pkt)
    i = rng.randrange(where[3], len(buf))
    buf[i] ^= 1 << rng.randrange(8)
    if fix_checksums:
        fix_checksum(buf)
    return bytes(buf)


# --- the engine -----------------------------------------------------------------------------------------------


@dataclass
class Effects:
    delay_ms: float = 0
    jitter_ms: float = 0
    loss_percent: float = 0
    corrupt_percent: float = 0
    duplicate_percent: float = 0
    reorder_percent: float = 0
    fix_checksums: bool = False


@dataclass
class _Stats:
    packets: int = 0
    delayed: int = 0
    dropped: int = 0
    corrupted: int = 0
    duplicated: int = 0
    reordered: int = 0
    send_errors: int = 0
    overflowed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class _Stop(Exception):
    pass


class Engine:
    def __init__(self, queue: Queue, interface: str, mark: int, effects: Effects, seed: int | None = None):
        self.q, self.interface, self.mark, self.fx = queue, interface, mark, effects
        self.rng = random.Random(seed)
        self.stats = _Stats()
        self._held: list[tuple[float, int, bytes, bytes | None]] = []
        self._n = 0
        self._raw: dict[int, socket.socket] = {}

    def _chance(self, percent: float) -> bool:
        return percent > 0 and self.rng.random() * 100 < percent

    def handle(self, packet_id: int, pkt: bytes, now: float) -> None:
        fx, st = self.fx, self.stats
        st.packets += 1
        if self._chance(fx.loss_percent):
            st.dropped += 1
            self.q.verdict(packet_id, NF_DROP)
            return
        new = corrupt(pkt, fx.fix_checksums, self.rng) if self._chance(fx.corrupt_percent) else None
        st.corrupted += new is not None
        dup = (new or pkt) if self._chance(fx.duplicate_percent) else None
        delay = fx.delay_ms
        if fx.jitter_ms:
            delay += self.rng.uniform(-fx.jitter_ms, fx.jitter_ms)
        if fx.reorder_percent and self._chance(fx.reorder_percent):
            st.reordered += 1
            delay = 0  # as netem does: sent at once, ahead of the packets still held
        if delay > 0 and len(self._held) >= _MAX_HELD:
            st.overflowed += 1  # fail open, as the kernel queue does: memory stays bounded
            delay = 0
        if delay <= 0:
            self.q.verdict(packet_id, NF_ACCEPT, new)
            self._copy(dup)
            return
        # Held here, not in the kernel: the original is dropped now and the same bytes are sent at their time.
        # A packet the kernel holds still counts against its socket's send budget (TCP small queues, UDP
        # sndbuf), which throttles a TCP flow to a few packets per delay; netem orphans its packets for the
        # same reason.
        self.q.verdict(packet_id, NF_DROP)
        st.delayed += 1
        self._n += 1
        heapq.heappush(self._held, (now + delay / 1000.0, self._n, new or pkt, dup))

    def _copy(self, dup: bytes | None) -> None:
        if dup is not None and self._send(dup):
            self.stats.duplicated += 1

    def _send(self, pkt: bytes) -> bool:
        """Send a whole IP packet out of the interface, marked so that the queue rule lets it pass."""
        version = pkt[0] >> 4
        family = socket.AF_INET if version == 4 else socket.AF_INET6
        sock = self._raw.get(family)
        try:
            if sock is None:
                # IPPROTO_RAW: we give the whole IP header
                sock = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_RAW)
                sock.setsockopt(socket.SOL_SOCKET, SO_MARK, struct.pack("=I", self.mark))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.interface.encode())
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
                sock.setblocking(False)
                self._raw[family] = sock
            if version == 4:
                sock.sendto(pkt, (socket.inet_ntop(family, pkt[16:20]), 0))
            else:
                sock.sendto(pkt, (socket.inet_ntop(family, pkt[24:40]), 0, 0, 0))
            return True
        except OSError as exc:
            self.stats.send_errors += 1
            self.stats.extra["send_error"] = str(exc)
            return False

    def release_due(self, now: float) -> None:
        while self._held and self._held[0][0] <= now:
            _, _, pkt, dup = heapq.heappop(self._held)
            self._send(pkt)
            self._copy(dup)

    def next_due(self) -> float | None:
        return self._held[0][0] if self._held else None

    def flush(self) -> None:
        """Let every held packet go now (the fault ends: nothing stays delayed)."""
        while self._held:
            _, _, pkt, _ = heapq.heappop(self._held)
            self._send(pkt)

    def run(self, lifeline: int) -> None:
        qfd = self.q.sock.fileno()
        while True:
            due = self.next_due()
            timeout = 1.0 if due is None else max(0.0, due - time.monotonic())
            ready, _, _ = select.select([qfd, lifeline], [], [], timeout)
            if lifeline in ready and not os.read(lifeline, 4096):
                return  # the controller is gone
            now = time.monotonic()
            if qfd in ready:
                for packet_id, pkt in self.q.packets():
                    self.handle(packet_id, pkt, now)
            self.release_due(time.monotonic())


def _bind(first: int, tries: int = 32) -> Queue:
    """Bind queue ``first``, or another free one of Faultplane's range if a process of this namespace has it."""
    rng = random.Random()
    num = first
    for _ in range(tries):
        try:
            return Queue(num)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EPERM):
                raise
        num = rng.randrange(0xF000, 0xFFFF)
    raise OSError(errno.EBUSY, f"no free NFQUEUE number after {tries} tries")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faultplane.drivers.nfqueue")
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--interface", required=True)
    ap.add_argument("--mark", type=lambda s: int(s, 0), required=True)
    ap.add_argument("--effects", required=True, help="JSON of the Effects fields")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    effects = Effects(**json.loads(a.effects))
    # SIGINT belongs to the controller's terminal: the controller decides when the fault ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _term(signum: int, frame: Any) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, _term)
    try:
        queue = _bind(a.queue)
    except OSError as exc:
        hint = " (needs CAP_NET_ADMIN: run as root)" if exc.errno == errno.EPERM else ""
        print(
            json.dumps({"error": f"cannot bind NFQUEUE {a.queue}: {exc.strerror or exc}{hint}"}), flush=True
        )
        return 2
    engine = Engine(queue, a.interface, a.mark, effects, a.seed)
    try:
        print(json.dumps({"ready": True, "queue": queue.num}), flush=True)
        engine.run(sys.stdin.fileno())
    except (_Stop, BrokenPipeError):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the flush short
        engine.flush()
        queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
