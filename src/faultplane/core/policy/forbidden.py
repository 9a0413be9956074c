"""Forbidden targets: does the experiment name production anywhere it acts?

The scan reads every string, key and URL of the experiment (not only the `targets:` list), because an AI
designing an experiment can put the production host in a process argument, an HTTP URL or an environment
variable just as easily. Each string is normalised (`normalize`), read for the hosts, `key=value` labels,
flags and words it holds, and each of those is judged by `matching`. A finding inside a secret names the field,
never the value. Prose for people (titles, descriptions, tolerances) is not scanned.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from faultplane.core.issues import dotted_path
from faultplane.core.policy.matching import _TOKEN_SPLIT, RuleMatcher
from faultplane.core.policy.model import ForbiddenRules
from faultplane.core.policy.normalize import (
    _NOT_KEY_CHARS,
    _decode_idna_host,
    _norm_key,
    camel_forms,
    normalize_text,
)
from faultplane.core.policy.verdict import Violation
from faultplane.core.targets import production_reason

__all__ = ["ForbiddenJudge", "find_forbidden"]

_URL_HOST = re.compile(r"[a-z][a-z0-9+.\-]*://(?:[^@/\s]*@)?(?P<host>\[[^\]]*\]|[^:/\s?#]+)")
_DOTTED_HOST = re.compile(
    r"(?<![\w.\-])(?P<host>[a-z0-9](?:[a-z0-9\-_]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-_]*[a-z0-9])?)+)"
)
_HOST_PORT = re.compile(r"(?<![\w.\-/])(?P<host>[a-z0-9][a-z0-9\-_.]*):\d{2,5}\b")
_KV = re.compile(r"(?P<k>[a-z_][a-z0-9_.\-/]*)\s*(?P<op>!=|==|=|:)\s*[\"'`]?(?P<v>[^\s,;&\"'`()\[\]{}|<>]+)")
_KV_IN = re.compile(r"(?P<k>[a-z_][a-z0-9_.\-/]*)\s+(?P<op>notin|in)\s*\((?P<vs>[^)]*)\)")
_FLAG = re.compile(r"(?:^|\s)(?P<flag>--?[a-z][a-z0-9_\-]*)\s+[\"']?(?P<v>[^\s\-\"'][^\s\"']*)")
_SHORT_FLAGS = {"n": "namespace", "e": "env"}
_HOSTISH_KEY = re.compile(
    r"(^|_)(host|hostname|hosts|server|address|addr|endpoint|url|uri|dsn|domain|fqdn)s?$"
)
_QUOTES = str.maketrans("", "", "\"'`\\^")
_AT_HOST = re.compile(r"[a-z0-9_.\-]+@(?P<host>[a-z0-9][a-z0-9\-_.]*)")
_ATTACHED_FLAG = re.compile(r"(?:^|(?<=[\s\"'=]))-(?P<f>[a-z])(?P<v>[a-z0-9][a-z0-9_.\-]*)")

# Fields that are prose for humans, not places the experiment acts on.
_FREE_TEXT_TOP = {"title", "description", "contributions", "estimate", "version", "family", "runtime"}
_FREE_TEXT_KEYS = {"title", "description", "rollback_on", "tolerance", "type", "func", "method", "ref", "doc"}


def _is_free_text(path: tuple[str | int, ...]) -> bool:
    if not path:
        return False
    if path[0] in _FREE_TEXT_TOP:
        return True
    last = path[-1]
    if last in _FREE_TEXT_KEYS and not (last == "method" and len(path) == 1):
        return True
    return "tolerance" in path


def _is_title_name(node: Mapping[str, Any], path: tuple[str | int, ...]) -> bool:
    """Is `node["name"]` a label for people (an activity's or a gate's own title)?

    Only those are free text. Every other `name` selects something the fault acts on (a process name, a
    deployment, a route, a host), so `arguments: {name: prod-api}` is scanned like any other value."""
    if len(path) == 2 and path[0] == "slo_gates" and isinstance(path[1], int):
        return True
    return "provider" in node and node.get("type") in ("action", "probe")


class _Scanner(RuleMatcher):
    """Walks one experiment and records every place that names production (one finding per place)."""

    def __init__(self, rules: ForbiddenRules, secret_values: Sequence[str] = ()) -> None:
        super().__init__(rules)
        self.violations: list[Violation] = []
        self._seen: set[str] = set()
        # a refusal must never echo a secret: findings in a string holding one name the place, not the value
        self._secrets = sorted({str(v) for v in secret_values if len(str(v)) >= 3}, key=len, reverse=True)
        self._redact: str | None = None
        # inside `secrets:` a bare word is not a target (a password may read "production-…"); hosts and labels are
        self._hosts_only = False
        # strings already scanned without a finding; a finding depends on the text, its key and the mode,
        # never on where it sits, so a clean string is clean at every place it appears
        self._clean: set[tuple[str, str | None, bool]] = set()

    def _add(self, rule: str, path: tuple[str | int, ...], message: str) -> None:
        where = dotted_path(path, "(experiment)")
        if where in self._seen:
            return  # one finding per place is enough to refuse and to fix
        self._seen.add(where)
        if self._redact is not None:
            message = f"{self._redact} names production; the value is secret and not shown here"
        self.violations.append(
            Violation(
                rule=rule,
                field=where,
                message=message,
                fix="point the experiment at a non-production target (staging, a local service); a false "
                "positive of a word your policy added goes in `forbidden.allow` (production names cannot be "
                "allowed)",
            )
        )

    # -- checks on one string

    def check_pair(
        self,
        path: tuple[str | int, ...],
        key: str,
        value: str,
        context: str | None = None,
        *,
        reads_as: str | None = None,
    ) -> bool:
        name = self.label_hit(key, reads_as if reads_as is not None else value)
        if name:
            where = f" in {_clip(context)}" if context and context.strip() != value.strip() else ""
            seen = normalize_text(reads_as if reads_as is not None else value).strip()
            shown = f" (reads as {seen!r})" if seen != value.strip() else ""
            self._add(
                f"forbidden.labels.{name}", path, f"{key}={_clip(value)}{where} marks production{shown}"
            )
            return True
        return False

    def check_host(self, path: tuple[str | int, ...], host: str, shown: str) -> bool:
        host = _decode_idna_host(host.strip("[]."))
        norm = normalize_text(host)
        if self._allowed(norm) and production_reason(norm) is None:
            return False
        for label in norm.split("."):
            hit = self.word_hit(label)
            if hit:
                self._add(
                    "forbidden.hosts",
                    path,
                    f"host {norm!r} in {_clip(shown)} names production (label {label!r})",
                )
                return True
        return False

    @contextlib.contextmanager
    def redacting(self, what: str) -> Iterator[None]:
        outer = self._redact
        self._redact = outer or what
        try:
            yield
        finally:
            self._redact = outer

    def check_string(self, path: tuple[str | int, ...], text: str, *, key: str | None = None) -> None:
        memo = (text, key, self._hosts_only)
        if memo not in self._clean and not self._check_string(path, text, key=key):
            self._clean.add(memo)

    def _check_string(self, path: tuple[str | int, ...], text: str, *, key: str | None) -> bool:
        """True when `text` names production (the finding is recorded at `path`)."""
        if self._redact is None and any(s in text for s in self._secrets):
            with self.redacting("this value (it contains a secret)"):
                return self._check_string(path, text, key=key)
        norm = normalize_text(text)
        variants = [norm]
        for extra in (*camel_forms(text), norm.translate(_QUOTES), norm.replace("0", "o")):
            if extra not in variants:
                variants.append(extra)
        return any(self._check_variant(path, v, text, key=key) for v in variants)

    def _check_variant(self, path: tuple[str | int, ...], norm: str, shown: str, *, key: str | None) -> bool:
        if key is not None and self.check_pair(path, key, shown, reads_as=norm):
            return True
        negated: list[str] = []  # `env!=prod`, `env notin (prod)` select everything BUT production
        for m in _KV.finditer(norm):
            if m["op"] == "!=":
                negated.append(m[0])
            elif self.check_pair(path, m["k"], m["v"], shown):
                return True
        for m in _KV_IN.finditer(norm):
            if m["op"] == "notin":
                negated.append(m[0])
                continue
            for v in m["vs"].split(","):
                if self.check_pair(path, m["k"], v.strip(" '\""), shown):
                    return True
        for span in negated:
            norm = norm.replace(span, " ")
        for m in _FLAG.finditer(norm):
            flag = m["flag"].lstrip("-")
            flag = _SHORT_FLAGS.get(flag, flag) if len(flag) == 1 else flag
            if self.check_pair(path, flag, m["v"], shown):
                return True
        hosts = [m["host"] for m in _URL_HOST.finditer(norm)]
        hosts += [m["host"] for m in _DOTTED_HOST.finditer(norm)]
        hosts += [m["host"] for m in _HOST_PORT.finditer(norm)]
        if (
            key is not None
            and _HOSTISH_KEY.search(_norm_key(key))
            and "/" not in norm
            and " " not in norm.strip()
        ):
            hosts.append(norm.strip())
        for host in hosts:
            if self.check_host(path, host, shown):
                return True
        for token in [] if self._hosts_only else _TOKEN_SPLIT.split(norm):
            if not token:
                continue
            hit = self.word_hit(token)
            if hit:
                self._add("forbidden.words", path, f"{_clip(shown)} names production ({hit!r} in {token!r})")
                return True
        # libpq keyword DSNs (`host=prod1 dbname=x`), `user@host`, attached flags (`-nprod`): read as hosts,
        # also inside secrets where bare words are not scanned
        extra = [m["v"] for m in _KV.finditer(norm) if _HOSTISH_KEY.search(_NOT_KEY_CHARS.sub("_", m["k"]))]
        extra += [m["host"] for m in _AT_HOST.finditer(norm)]
        extra += [m["v"] for m in _ATTACHED_FLAG.finditer(norm)]
        return any(self.check_host(path, host, shown) for host in extra)

    def check_argv(self, path: tuple[str | int, ...], items: Sequence[Any]) -> None:
        """`["kubectl", "-n", "prod-a"]`: a flag and its value are separate list items."""
        for i in range(len(items) - 1):
            a, b = items[i], items[i + 1]
            if isinstance(a, str) and isinstance(b, str) and a.startswith("-") and "=" not in a:
                flag = normalize_text(a).lstrip("-")
                flag = _SHORT_FLAGS.get(flag, flag) if len(flag) == 1 else flag
                self.check_pair((*path, i + 1), flag, b, b)

    # -- the walk

    def walk(self, node: Any, path: tuple[str | int, ...] = (), *, resolve_env: bool = False) -> None:
        if _is_free_text(path):
            return
        self._walk(node, path, resolve_env)

    def _walk(self, node: Any, path: tuple[str | int, ...], resolve_env: bool) -> None:
        """`walk` below a place already known not to be free text (the hot loop: one pass per key)."""
        if type(node) is dict or isinstance(node, Mapping):
            top = not path
            for k, v in node.items():
                key = str(k)
                # _is_free_text((*path, key)), knowing `path` itself is not free text
                if (key in _FREE_TEXT_KEYS and not (top and key == "method")) or (
                    top and key in _FREE_TEXT_TOP
                ):
                    continue
                if key == "name" and _is_title_name(node, path):
                    continue
                sub = (*path, key)
                hit = self.key_word_hit(key)
                if hit:
                    self._add("forbidden.words", sub, f"key {key!r} names production ({hit!r})")
                val = _env_ref_value(v) if resolve_env and isinstance(v, Mapping) else None
                if val is not None:
                    self.check_string((*sub, f"${v.get('key')}"), val, key=key)
                if isinstance(v, str) and self._hosts_only and key == "key" and node.get("type") == "env":
                    # the NAME of the variable a secret comes from is no secret: `PROD_DB_DSN` counts in full
                    self._hosts_only = False
                    self.check_string(sub, v, key=key)
                    self._hosts_only = True
                elif isinstance(v, str):
                    self.check_string(sub, v, key=key)
                elif isinstance(v, bool | int | float):
                    # a bare number or flag can only be a label's value (`is_prod: true`)
                    if self.is_label_key(key):
                        self.check_pair(sub, key, str(v).lower(), str(v))
                else:
                    self._walk(v, sub, resolve_env)
        elif type(node) is list or isinstance(node, list | tuple):
            self.check_argv(path, node)
            for i, item in enumerate(node):
                if isinstance(item, str):
                    self.check_string((*path, i), item)
                else:
                    self._walk(item, (*path, i), resolve_env)
        elif isinstance(node, str):
            self.check_string(path, node)


def _env_ref_value(node: Mapping[str, Any]) -> str | None:
    """`{type: env, key: X}` in configuration is read from the environment at run time: scan what it will be."""
    if node.get("type") == "env" and isinstance(node.get("key"), str):
        return os.environ.get(node["key"])
    return None


def _clip(text: str, n: int = 80) -> str:
    text = str(text)
    return repr(text if len(text) <= n else text[: n - 1] + "…")


def find_forbidden(
    raw: Mapping[str, Any], rules: ForbiddenRules | None = None, *, secret_values: Sequence[str] = ()
) -> list[Violation]:
    """Every place in the experiment that names a production target.

    `secret_values` are the resolved secrets: a string holding one is still scanned, but a finding there names
    the field only. Secrets read from the environment (`{type: env, key: X}`) are scanned too, since a
    production DSN arrives that way as easily as written out; those findings never show the value either."""
    return _scan(_Scanner(rules or ForbiddenRules(), secret_values), raw)


class ForbiddenJudge:
    """`find_forbidden` for many documents under the same rules and secrets (the choke point judges every
    activity of a run): what was learnt about a string, a key or a host stays learnt between documents."""

    def __init__(self, rules: ForbiddenRules | None = None, secret_values: Sequence[str] = ()) -> None:
        self._scanner = _Scanner(rules or ForbiddenRules(), secret_values)

    def __call__(self, raw: Mapping[str, Any]) -> list[Violation]:
        self._scanner.violations = []
        self._scanner._seen = set()
        return _scan(self._scanner, raw)


def _scan(scanner: _Scanner, raw: Mapping[str, Any]) -> list[Violation]:
    for key, value in raw.items():
        if key == "secrets":
            with scanner.redacting("the secret at this field"):
                scanner._hosts_only = True
                try:
                    scanner.walk(value, ("secrets",), resolve_env=True)
                finally:
                    scanner._hosts_only = False
        else:
            scanner.walk(value, (str(key),), resolve_env=key == "configuration")
    return scanner.violations
