"""Real exposure: which fault kind a run really injected into which target, the ground the staged blast radius
stands on.

A stage is earned per (target, fault kind), never per experiment title or family (both are labels an author
chooses): stage N+1 on a target for a fault kind needs green runs that *really injected* that kind into that
target at stage N. "Really injected" is what the engine saw, recorded in the journal's `injections`:

- the action is a driver action whose catalog declares the fault kind (an argument such as `fault_type: latency`
  on a shell command is a label, not evidence);
- it succeeded, outside a dry run;
- and it left a trace of a change: a revert (a lease) it registered and did not withdraw, or an output that
  names what it hit (killed processes, terminated backends, deleted pods). An action that selected nothing
  or failed before applying anything leaves neither.

The target identity is the action's endpoint, normalised so aliases are one target: every loopback spelling
(127.0.0.0/8, `localhost`, `::1`) is `loopback`; host names are casefolded and lose a trailing dot. A local
driver with no endpoint (process, hostres, hostnet) acts on this machine: `loopback`, qualified by what it
selects (a process name or pattern, a route).

Pure functions and the standard library only: the policy check and the store writer both use them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "AFFECTED_KEYS",
    "affected_count",
    "exposure_rows",
    "normalise_host",
    "planned_exposures",
    "target_identity",
]

# output keys under which a fault without a revert reports what it hit (a list, or a count)
AFFECTED_KEYS = ("processes", "terminated", "deleted", "killed", "pids", "expiring", "held")
# drivers that act on the controller's own machine when no endpoint is named
_LOCAL_DRIVERS = {"process", "hostres", "hostnet", "netproxy", "faults", "script"}
# arguments that say *which* thing on a target is hit, kept in the identity of an endpoint-less fault
_SELECTORS = (
    "name",
    "cmdline_pattern",
    "route",
    "path",
    "interface",
    "namespace",
    "context",
    "deployment",
    "label_selector",
    "registry",
)
_HOST_KEYS = {"host", "hostname", "server", "address", "addr", "target_host", "db_host"}
_URL = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.\-]*)://(?:[^@/\s]*@)?(?P<host>\[[^\]]*\]|[^:/\s?#,;\"']+)(?::(?P<port>\d+))?",
    re.I,
)
_KW = re.compile(r"\b(?P<k>host|hostaddr|port)\s*=\s*(?P<v>[^\s'\"]+)", re.I)
_HOSTPORT = re.compile(r"^(?P<host>\[[^\]]+\]|[a-z0-9.\-]+):(?P<port>\d{1,5})$", re.I)
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def normalise_host(host: str) -> str:
    """One spelling per host: every loopback alias is `loopback`; names casefolded, no trailing dot."""
    h = host.strip().strip("[]").rstrip(".").casefold()
    if h in _LOOPBACK_NAMES or h.endswith(".localhost"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        return h
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified:  # 0.0.0.0 / :: reach this machine as well
        return "loopback"
    return ip.compressed


def _strings(node: Any, key: str = "", depth: int = 0) -> Iterable[tuple[str, Any]]:
    if depth > 32:
        return
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _strings(v, str(k).casefold().replace("-", "_"), depth + 1)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _strings(item, key, depth + 1)
    else:
        yield key, node


def _endpoints(arguments: Any) -> set[str]:
    found: set[str] = set()
    pairs = list(_strings(arguments))
    ports = [str(v) for k, v in pairs if k == "port" and isinstance(v, int | str) and str(v).isdigit()]
    for key, value in pairs:
        if not isinstance(value, str):
            continue
        for m in _URL.finditer(value):
            port = f":{int(m['port'])}" if m["port"] else ""
            found.add(normalise_host(m["host"]) + port)
        kw = {m["k"].casefold(): m["v"] for m in _KW.finditer(value)}
        if "host" in kw or "hostaddr" in kw:
            port = f":{int(kw['port'])}" if kw.get("port", "").isdigit() else ""
            found.add(normalise_host(kw.get("hostaddr") or kw["host"]) + port)
        hp = _HOSTPORT.match(value.strip())
        if hp and key in _HOST_KEYS | {"listen", "upstream", "endpoint", "target"}:
            found.add(f"{normalise_host(hp['host'])}:{int(hp['port'])}")
        elif key in _HOST_KEYS and value.strip() and "://" not in value and "=" not in value:
            port = f":{int(ports[0])}" if len(ports) == 1 else ""
            found.add(normalise_host(value) + port)
    return found


def target_identity(driver: str, arguments: Any) -> str:
    """The target a driver action hits, normalised (see the module docstring)."""
    ends = _endpoints(arguments)
    if ends:
        return ",".join(sorted(ends))
    base = "loopback" if driver in _LOCAL_DRIVERS else driver.casefold()
    qual = []
    if isinstance(arguments, Mapping):
        for key in _SELECTORS:
            value = arguments.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                qual.append(f"{key}={value}")
    return f"{base} [{driver}: {', '.join(qual)}]" if qual else f"{base} [{driver}]"


def affected_count(output: Any) -> int:
    """How many things a fault's output says it hit (0 when it names none)."""
    if not isinstance(output, Mapping):
        return 0
    n = 0
    for key in AFFECTED_KEYS:
        value = output.get(key)
        if isinstance(value, list):
            n += len(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
            n += value
    return n


def planned_exposures(
    raw: Mapping[str, Any], fault_type_of: Callable[[str, str], str | None] | None
) -> list[tuple[str, str, str]]:
    """(target, fault kind, activity name) for every fault the method would inject, as the driver catalog
    names it; `(target, kind, name)` with target `opaque` for a fault-like activity no catalog vouches for (a
    shell command, a Python function): it can never show an injection, so no stage past 0 is earned for it."""
    from faultplane.core.effects import effect_kinds

    out: list[tuple[str, str, str]] = []
    method = raw.get("method")
    for item in method if isinstance(method, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("provider"), Mapping):
            continue
        prov = item["provider"]
        name = str(item.get("name") or "")
        kind = None
        if prov.get("type") == "driver" and isinstance(prov.get("driver"), str) and fault_type_of is not None:
            try:
                kind = fault_type_of(prov["driver"], str(prov.get("name")))
            except Exception:  # an unknown driver is the validator's business
                kind = None
            if kind:
                out.append((target_identity(prov["driver"], prov.get("arguments") or {}), kind, name))
                continue
        if item.get("type") == "action":
            for k in sorted(effect_kinds(prov)):
                out.append(("opaque", k, name))
    return out


def exposure_rows(j: Any, blast_stage: int | None) -> list[dict[str, Any]]:
    """The exposure rows of one finished journal (a `Journal` or its JSON dict): one per (target, fault
    kind) it really injected, with whether the run was green. None for a dry run, a refused or running one."""
    get = (lambda k, d=None: j.get(k, d)) if isinstance(j, Mapping) else (lambda k, d=None: getattr(j, k, d))
    if get("dry_run") or blast_stage is None:
        return []
    status = get("status")
    if status not in ("completed", "failed", "deviated", "aborted", "interrupted"):
        return []
    states = get("steady_states") or {}
    green = (
        status == "completed"
        and (states.get("before") or {}).get("steady_state_met") is True
        and (states.get("after") or {}).get("steady_state_met") is True
    )
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for inj in get("injections") or []:
        if not isinstance(inj, Mapping):
            continue
        target, kind = inj.get("target"), inj.get("fault_kind")
        if isinstance(target, str) and isinstance(kind, str) and (target, kind) not in seen:
            seen[(target, kind)] = {
                "run_id": get("run_id"),
                "seq": len(seen),
                "target": target,
                "fault_kind": kind,
                "stage": int(blast_stage),
                "green": 1 if green else 0,
                "started_at": get("start"),
            }
    return list(seen.values())


def earned(rows: Sequence[Mapping[str, Any]], greens_needed: int) -> tuple[int, int | None, int]:
    """From one (target, kind)'s exposure rows, newest first: (the highest stage it may run at now, the stage
    of its newest green exposure, how many green exposures that stage has since the target was last run
    green at another stage). A target that went back to a smaller stage climbs again from there."""
    greens = [r for r in rows if r.get("green")]
    if not greens:
        return 0, None, 0
    last = int(greens[0]["stage"])
    n = 0
    for r in greens:
        if int(r["stage"]) != last:
            break
        n += 1
    return (last + 1 if n >= greens_needed else last), last, n
