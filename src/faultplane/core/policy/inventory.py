"""The lab's declared targets: when a policy lists them, anything undeclared is refused.

    inventory:
      hosts: [127.0.0.1, "*.staging.internal", 10.20.0.0/16]
      kube_contexts: [kind-lab]
      kube_namespaces: [staging, "team-*"]
      databases: ["postgresql://127.0.0.1:5432/payments*", "redis://127.0.0.1:6379/*"]
      executables: [true, /usr/bin/python3, "*/stress-ng"]

Each list that is present is enforced on its own (a policy may declare only hosts). Loopback (127.0.0.0/8,
::1, localhost) counts as declared for `hosts` only when listed. Entries are globs, or CIDRs for hosts.
Matching is plain standard library so the agent hook can use `host_declared` and friends cheaply.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from faultplane.core.policy.verdict import Violation

__all__ = ["Inventory", "combine_inventories", "host_declared", "undeclared"]


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[str] | None = Field(default=None, description="hostnames/IPs (globs) and CIDRs")
    kube_contexts: list[str] | None = None
    kube_namespaces: list[str] | None = None
    databases: list[str] | None = Field(default=None, description="DSN globs, scheme://host:port/db")
    executables: list[str] | None = Field(default=None, description="process provider paths (globs)")


def combine_inventories(inventories: Sequence[Inventory]) -> Inventory:
    """Strictest: a category declared by several layers keeps only the entries all of them declare."""
    out: dict[str, list[str] | None] = {}
    for name in Inventory.model_fields:
        lists = [getattr(i, name) for i in inventories if getattr(i, name) is not None]
        out[name] = [x for x in lists[0] if all(x in other for other in lists[1:])] if lists else None
    return Inventory(**out)


def _glob(value: str, patterns: Iterable[str]) -> bool:
    v = value.casefold()
    return any(fnmatch.fnmatchcase(v, p.casefold()) for p in patterns)


def host_declared(host: str, patterns: Sequence[str]) -> bool:
    host = host.strip("[]").rstrip(".").casefold()
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for p in patterns:
        if ip is not None and "/" in p:
            try:
                if ip in ipaddress.ip_network(p, strict=False):
                    return True
            except ValueError:
                continue
        elif fnmatch.fnmatchcase(host, p.casefold()):
            return True
    return False


_URL = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.\-]*)://(?:[^@/\s]*@)?(?P<host>\[[^\]]*\]|[^:/\s?#,;\"']+)(?::(?P<port>\d+))?(?P<path>/[^\s?#\"']*)?",
    re.I,
)
_AT = re.compile(r"(?<![/\w])[a-z0-9_.\-]+@(?P<host>[a-z0-9][a-z0-9\-_.]*[a-z0-9])", re.I)
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# `db7.corp:6379` (a dotted name or localhost with a port) and `--upstream db7.corp`: hosts with no scheme
_HOST_PORT = re.compile(
    r"(?<![\w.\-/@:])(?P<host>(?:[a-z0-9][a-z0-9\-_]*\.)+[a-z][a-z0-9\-_]*|localhost):\d{1,5}\b", re.I
)
_HOST_FLAG = re.compile(
    r"(?:^|\s)--?(?:upstream|host|hostname|target|server|endpoint|address|addr|dest|destination|remote)"
    r"(?:=|\s+)[\"']?(?P<host>(?:[a-z0-9][a-z0-9\-_]*\.)+[a-z][a-z0-9\-_]*|localhost)(?![\w.\-/])",
    re.I,
)
_KW = re.compile(r"\b(?P<k>host|hostaddr|port|dbname|user)\s*=\s*(?P<v>[^\s'\"]+)", re.I)
_NS_FLAG = re.compile(r"(?:^|\s)(?:-n\s*|--namespace[=\s]+)(?P<v>[^\s\"'-][^\s\"']*)")
_CTX_FLAG = re.compile(r"(?:^|\s)--(?:kube-)?context[=\s]+(?P<v>[^\s\"'-][^\s\"']*)")
_HOST_KEYS = {"host", "hostname", "hosts", "server", "address", "addr", "endpoint", "target_host", "db_host"}
_NS_KEYS = {"namespace", "ns", "kube_namespace"}
_CTX_KEYS = {"context", "kube_context", "kubecontext"}
_DB_SCHEMES = {"postgres", "postgresql", "mysql", "mariadb", "redis", "rediss", "mongodb", "clickhouse"}
_PROSE = {"title", "description", "doc", "tolerance", "rollback_on", "contributions", "estimate", "family"}


def _strings(node: Any, key: str = "", depth: int = 0) -> Iterable[tuple[str, str]]:
    if depth > 64:
        return
    if isinstance(node, Mapping):
        for k, v in node.items():
            if str(k) in _PROSE:
                continue
            yield from _strings(v, str(k), depth + 1)
    elif isinstance(node, list | tuple):
        joined = " ".join(x for x in node if isinstance(x, str))
        if joined:
            yield key, joined
        for item in node:
            if not isinstance(item, str):
                yield from _strings(item, key, depth + 1)
    elif isinstance(node, str):
        yield key, node


def undeclared(doc: Mapping[str, Any], inventory: Inventory) -> list[Violation]:
    """Violations for every host, namespace, context, database and executable the inventory does not list."""
    out: list[Violation] = []
    seen: set[tuple[str, str]] = set()

    def refuse(kind: str, value: str, where: str) -> None:
        if where.startswith("secrets"):
            value = "(a value inside a secret, not shown)"
        if (kind, value) in seen:
            return
        seen.add((kind, value))
        out.append(
            Violation(
                f"inventory.{kind}",
                where,
                f"{kind[:-1] if kind.endswith('s') else kind} {value!r} is not in the policy's target inventory",
                f"use a declared target, or add {value!r} to `inventory.{kind}` in the policy (a human edit)",
            )
        )

    for section, node in doc.items():
        if section in _PROSE or (section == "secrets" and inventory.hosts is None):
            continue
        for key, text in _strings(node, str(section)):
            k = key.casefold().replace("-", "_")
            hosts: list[str] = []
            for m in _URL.finditer(text):
                host = m["host"]
                hosts.append(host)
                if inventory.databases is not None and m["scheme"].casefold() in _DB_SCHEMES:
                    port = f":{m['port']}" if m["port"] else ""
                    dsn = f"{m['scheme'].casefold()}://{host}{port}{m['path'] or ''}"
                    if not _glob(dsn, inventory.databases):
                        refuse("databases", dsn, str(section))
            kw = {m["k"].casefold(): m["v"] for m in _KW.finditer(text)}
            if "dbname" in kw and ("host" in kw or "hostaddr" in kw):
                host = kw.get("host") or kw["hostaddr"]
                hosts.append(host)
                if inventory.databases is not None:
                    dsn = f"postgresql://{host}:{kw.get('port', '5432')}/{kw['dbname']}"
                    if not _glob(dsn, inventory.databases):
                        refuse("databases", dsn, str(section))
            hosts += [m["host"] for m in _AT.finditer(text)]
            hosts += [m["host"] for m in _HOST_PORT.finditer(text)]
            hosts += [m["host"] for m in _HOST_FLAG.finditer(text)]
            hosts += _IPV4.findall(text)
            if k in _HOST_KEYS and " " not in text.strip() and "/" not in text:
                hosts.append(text.strip().rsplit(":", 1)[0] if text.count(":") == 1 else text.strip())
            if inventory.hosts is not None:
                for host in hosts:
                    if host and not host_declared(host, inventory.hosts):
                        refuse("hosts", host, str(section))
            if inventory.kube_namespaces is not None:
                names = [m["v"] for m in _NS_FLAG.finditer(text)] + ([text.strip()] if k in _NS_KEYS else [])
                for ns in names:
                    if not _glob(ns, inventory.kube_namespaces):
                        refuse("kube_namespaces", ns, str(section))
            if inventory.kube_contexts is not None:
                names = [m["v"] for m in _CTX_FLAG.finditer(text)] + (
                    [text.strip()] if k in _CTX_KEYS else []
                )
                for ctx in names:
                    if not _glob(ctx, inventory.kube_contexts):
                        refuse("kube_contexts", ctx, str(section))
    if inventory.executables is not None:
        from faultplane.core.effects import activities

        for section, act in activities(doc):
            prov = act["provider"]
            path = prov.get("path")
            if (
                prov.get("type") == "process"
                and isinstance(path, str)
                and not _glob(path, inventory.executables)
            ):
                refuse("executables", path, f"{section}.provider.path")
    return out
