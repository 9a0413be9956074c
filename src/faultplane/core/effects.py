"""What an activity does, read from its effect rather than its name: the fault kinds anywhere in a provider.

A partition is a partition whether it is `netproxy.partition`, a toxic spec nested in a python provider's
arguments (`{type: bandwidth, attributes: {rate: 0}}`), `iptables -j DROP` in a process provider, or
`stress-ng` in a rollback. The policy asks for approval by kind, so every place that can execute is read:
method, rollbacks, steady-state probes, controls, at any depth of their arguments.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["KNOWN_FAULT_TYPES", "activities", "effect_kinds"]

KNOWN_FAULT_TYPES = (
    "latency",
    "error",
    "timeout",
    "resource_exhaustion",
    "network_partition",
    "process_kill",
)

# Killing processes, containers or pods, by any spelling: `kill -9`, pkill, killall, `process.kill`,
# `ssh.kill_process`, `kubernetes.kill_pods`/`delete_pods`, `kubectl delete pod`, `docker kill`, os.kill,
# SIGKILL. Redis `CLIENT KILL` closes a connection and a kill switch stops chaos: neither kills a process.
_PROCESS_KILL = re.compile(
    r"(?<!client[ _\-])(?<![a-z0-9])(?:kill|pkill|killall|sigkill)(?![a-z0-9])(?![ _\-]?switch)"
    r"|\b(?:kill|delete|terminate|stop)[_ \-]?(?:process(?:es)?|pods?|containers?|tasks?|instances?)\b"
    r"|\bkubectl\b.*\bdelete\s+(?:pods?|po)\b|\b(?:docker|podman|crictl|nerdctl)\s+(?:kill|rm\s+-f)\b"
    r"|\bsystemctl\b.*\b(?:stop|restart)\b"
)

# built-in driver actions that kill or restart processes, whatever their declared fault type says
_KILL_ACTIONS = frozenset(
    {
        "process.kill",
        "process.terminate",
        "ssh.kill_process",
        "kubernetes.kill_pods",
        "kubernetes.delete_pods",
        "postgres.restart",
    }
)

# command lines and words whose effect is known, whatever the provider that runs them
_COMMAND_EFFECTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\biptables\b.*-j\s*(drop|reject)\b|\bnft\b.*\bdrop\b"), "network_partition"),
    (re.compile(r"\btc\b.*\bnetem\b.*\bloss\s+100(\.0+)?%"), "network_partition"),
    (
        re.compile(r"\bip\s+link\s+set\b.*\bdown\b|\bifdown\b|\bip\s+route\s+add\s+blackhole\b"),
        "network_partition",
    ),
    (
        re.compile(r"\b(partition|blackhole|black_hole|isolate_network|network_isolation)\b"),
        "network_partition",
    ),
    (
        re.compile(r"\bstress(-ng)?\b|\bfallocate\b|\bfill[_\- ]?disk\b|\bdisk[_\- ]?fill\b"),
        "resource_exhaustion",
    ),
    (
        re.compile(r"\bdd\b.*\bof=|\b(memory|cpu|disk|fd|connection)[_\- ]?(hog|exhaust\w*|stress|bomb)\b"),
        "resource_exhaustion",
    ),
    (re.compile(r"\bexhaust\w*|\bhog\b|:\(\)\s*\{\s*:\|:&\s*\};:"), "resource_exhaustion"),
    (
        re.compile(
            r"\b(kill|pkill|killall|kill_process|kill_pods|terminate)\b|\bkubectl\b.*\b(delete|drain)\b"
        ),
        "error",
    ),
    (_PROCESS_KILL, "process_kill"),
    (re.compile(r"\bnetem\b.*\bdelay\b|\blatency\b|\bdelay\b"), "latency"),
    (re.compile(r"\btimeout\b|\bsuspend\b|\bsigstop\b|\bpause\b"), "timeout"),
)
# toxiproxy toxic types and what they amount to
_TOXICS = {
    "latency": "latency",
    "jitter": "latency",
    "slow_close": "latency",
    "bandwidth": "latency",
    "timeout": "timeout",
    "reset_peer": "error",
    "limit_data": "error",
    "slicer": "latency",
}
_KIND_KEYS = ("fault_type", "fault", "kind", "type", "effect", "toxic")
_SECTIONS = ("method", "rollbacks", "controls")


def _norm(text: str) -> str:
    return text.strip().lower().replace("-", "_") if len(text) < 64 else text.lower()


def _walk(node: Any, out: set[str], depth: int = 0) -> None:
    if depth > 64:
        return
    if isinstance(node, Mapping):
        toxic_type = node.get("type")
        if isinstance(toxic_type, str) and _norm(toxic_type) in _TOXICS:
            kind = _TOXICS[_norm(toxic_type)]
            attributes = node.get("attributes")
            attrs: Mapping[Any, Any] = attributes if isinstance(attributes, Mapping) else node
            # a bandwidth of 0 or a timeout of 0 drops everything: a partition by effect
            if _norm(toxic_type) in ("bandwidth", "timeout") and attrs.get("rate", attrs.get("timeout")) == 0:
                kind = "network_partition"
            out.add(kind)
        for key, value in node.items():
            if isinstance(key, str) and _norm(key) in _KIND_KEYS and isinstance(value, str):
                v = _norm(value)
                if v in KNOWN_FAULT_TYPES:
                    out.add(v)
            if isinstance(key, str):
                _text(key, out)
            _walk(value, out, depth + 1)
    elif isinstance(node, list | tuple):
        _text(" ".join(x for x in node if isinstance(x, str)), out)
        for item in node:
            if not isinstance(item, str):
                _walk(item, out, depth + 1)
    elif isinstance(node, str):
        _text(node, out)


def _text(text: str, out: set[str]) -> None:
    out.update(_text_kinds(text))


@functools.lru_cache(maxsize=4096)
def _text_kinds(text: str) -> frozenset[str]:
    # experiments repeat their strings (modules, functions, paths): each is read against the regexes once
    low = text.lower()
    # shell quoting splits a word without changing what runs: `k'i'll`, `"pk"ill`, `\kill`
    bare = low.translate(_SHELL_QUOTES)
    return frozenset(
        kind for rx, kind in _COMMAND_EFFECTS if rx.search(low) or (bare != low and rx.search(bare))
    )


_SHELL_QUOTES = str.maketrans("", "", "'\"\\`")


def effect_kinds(provider: Mapping[str, Any]) -> set[str]:
    """Every fault kind a provider's path, name, arguments and environment show, at any depth."""
    out: set[str] = set()
    driver, name = provider.get("driver"), provider.get("name")
    if (
        isinstance(driver, str)
        and isinstance(name, str)
        and f"{_norm(driver)}.{_norm(name)}" in _KILL_ACTIONS
    ):
        out.add("process_kill")
    for key in ("path", "name", "func", "module", "url"):
        value = provider.get(key)
        if isinstance(value, str):
            _text(value.replace("_", " ") if key in ("name", "func") else value, out)
            if key in ("name", "func"):
                _text(value, out)
    args = provider.get("arguments")
    if isinstance(provider.get("path"), str) and isinstance(args, list):
        # a process provider's command line is its path and its arguments read together
        _text(" ".join([provider["path"], *(str(a) for a in args)]), out)
    for key in ("arguments", "env", "body", "headers"):
        if key in provider:
            _walk(provider[key], out)
    return out


def activities(raw: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(section, activity) for every activity that can execute: method, rollbacks, controls, steady state."""
    for section in _SECTIONS:
        items = raw.get(section)
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping) and isinstance(item.get("provider"), Mapping):
                yield section, item
    hypo = raw.get("steady-state-hypothesis") or raw.get("steady_state_hypothesis")
    probes = hypo.get("probes") if isinstance(hypo, Mapping) else None
    for item in probes if isinstance(probes, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("provider"), Mapping):
            yield "steady-state-hypothesis", item
