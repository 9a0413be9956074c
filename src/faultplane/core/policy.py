"""The guardrails in force: forbidden targets, required SLO gates, staged blast radius, approvals.

`evaluate()` is the single decision point. The engine calls it in phase 0 (Plan) before anything runs, and the
agent hook calls the very same function, so no surface can reach a production target or skip a stage that the
engine would refuse.

The forbidden-target scan reads every string, key and URL of the experiment (not only the `targets:` list),
because an AI designing an experiment can put the production host in a process argument, an HTTP URL or an
environment variable just as easily. Text is normalised before matching (percent-encoding, HTML entities,
NFKC, combining marks, zero-width characters, Cyrillic/Greek look-alikes, IDNA hosts, camelCase), and words are
matched as whole sub-words so `product` or `reproduce` never look like `prod`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import html
import json
import math
import os
import re
import time
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core import approval as approvals
from faultplane.core.formats import load_yaml
from faultplane.core.gates import LOAD_SLIS, GateSpec
from faultplane.core.history import family_runs, query_family_runs
from faultplane.core.inventory import Inventory, undeclared
from faultplane.core.targets import case_humps, production_reason, production_word
from faultplane.core.targets import skeleton as _tr39_skeleton

if TYPE_CHECKING:
    from faultplane.core.store import Store

__all__ = [
    "POLICY_FILENAMES",
    "Policy",
    "PolicyDecision",
    "PolicyError",
    "Violation",
    "advice_after_run",
    "approval_hash",
    "content_hash",
    "effective_radius",
    "evaluate",
    "experiment_family",
    "find_forbidden",
    "green_streak",
    "load_policy",
    "normalize_text",
    "three_greens_advice",
]

POLICY_FILENAMES = ("faultplane.policy.yaml", "faultplane.policy.yml")
KNOWN_FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")


class PolicyError(ValueError):
    """The policy file cannot be used; the message names the file, the field and the fix."""


# ---- the policy model ------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelRule(_Strict):
    """A key/value pair that marks production: a key matching `keys` whose value matches `values`."""

    keys: list[str] = Field(default_factory=list, description="globs on the normalised key (lower, `-`→`_`)")
    values: list[str] = Field(default_factory=list, description="globs on the normalised value")
    unless: list[str] = Field(default_factory=list, description="value globs that never match (real words)")


def _default_label_rules() -> dict[str, LabelRule]:
    prod_values = ["prod", "prod[-_.0-9]*", "production", "production[-_.0-9]*", "prd", "prd[-_.0-9]*"]
    return {
        "env": LabelRule(
            keys=[
                "env",
                "environment",
                "*_env",
                "*_environment",
                "env_name",
                "environment_name",
                "stage",
                "tier",
            ],
            values=prod_values,
        ),
        "cluster": LabelRule(
            keys=[
                "cluster",
                "*_cluster",
                "cluster_name",
                "context",
                "kube_context",
                "kubecontext",
                "*_context",
            ],
            values=["prod*", "production*", "prd*"],
            unless=[
                "product",
                "products",
                "product[-_.0-9]*",
                "products[-_.0-9]*",
                "productivity*",
                "produce*",
                "producer*",
                "prodig*",
                "product[!i]*",  # productcatalog, productsvc; never production*
            ],
        ),
        "namespace": LabelRule(
            keys=["namespace", "ns", "*_namespace", "kube_namespace"],
            values=prod_values,
        ),
        "production": LabelRule(
            keys=["production", "prod", "is_production", "is_prod", "*_production"],
            values=["true", "yes", "y", "1", "on"],
        ),
    }


class ForbiddenRules(_Strict):
    extend_defaults: bool = Field(
        default=True, description="add these rules to the built-in ones (false: replace them; use with care)"
    )
    words: list[str] = Field(
        default_factory=lambda: ["prod", "production", "prod[0-9]*", "prd", "prd[0-9]*"],
        description="sub-word globs that mark production anywhere in the experiment",
    )
    negations: list[str] = Field(
        default_factory=lambda: ["non", "not", "no", "pre"],
        description="a sub-word right before a forbidden word that negates it (`non-prod`, `pre-prod`)",
    )
    labels: dict[str, LabelRule] = Field(default_factory=_default_label_rules)
    allow: list[str] = Field(
        default_factory=list, description="globs of normalised values/hosts/words that are NOT production"
    )


class GateRules(_Strict):
    required: bool = Field(
        default=True, description="every experiment declares at least `min_gates` numeric gates"
    )
    min_gates: int = Field(default=1, ge=0)
    require_window: bool = Field(default=True, description="at least one gate has `for <N>s` with N > 0")


class Stage(_Strict):
    percent: float | None = Field(default=None, gt=0, le=100)
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _some(self) -> Stage:
        if self.percent is None and self.count is None:
            raise ValueError("a stage needs `percent` or `count` (or both)")
        return self

    def describe(self) -> str:
        parts = []
        if self.percent is not None:
            parts.append(f"{self.percent:g}%")
        if self.count is not None:
            parts.append(f"{self.count} target{'s' if self.count != 1 else ''}")
        return " / ".join(parts)


class BlastRadiusRules(_Strict):
    stages: list[Stage] = Field(
        default_factory=lambda: [Stage(percent=10), Stage(percent=25), Stage(percent=50)], min_length=1
    )
    require_declared: bool = Field(
        default=True, description="an experiment with `targets:` must declare blast_radius"
    )
    greens_before_advice: int = Field(default=3, ge=1, description="the 'three greens' rule")
    greens_to_advance: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="green runs that really injected a fault kind into a target at a stage before the next "
        "stage is earned for that target and kind",
    )


class ApprovalRules(_Strict):
    min_stage: int | None = Field(
        default=2, ge=0, description="runs at this stage index or above need an approval"
    )
    fault_types: list[str] = Field(
        default_factory=lambda: ["network_partition", "resource_exhaustion", "process_kill"],
        description="fault kinds, recognised by effect wherever they appear, that need a person's approval",
    )
    actions: list[str] = Field(
        default_factory=list, description="globs on `driver.action` that need approval"
    )
    ttl_hours: float = Field(default=24.0, gt=0)
    trusted_keys: list[str] = Field(
        default_factory=list,
        description="approver public keys, `ssh-ed25519 AAAA… name` (printed by `faultplane approvals keygen`)",
    )
    elicitation: list[str] = Field(
        default_factory=lambda: ["url", "form"],
        description="MCP elicitation modes a person may approve through: url (a local page), form (in-client)",
    )

    @model_validator(mode="after")
    def _keys_parse(self) -> ApprovalRules:
        if self.trusted_keys:
            try:
                approvals.parse_trusted_keys(self.trusted_keys)
            except approvals.ApprovalError as exc:
                raise ValueError(str(exc).removeprefix("approval.")) from None
        unknown = sorted(set(self.elicitation) - {"url", "form"})
        if unknown:
            raise ValueError(f"elicitation: unknown mode {unknown[0]!r}; use url and/or form")
        return self


class Policy(_Strict):
    version: int = 1
    forbidden: ForbiddenRules = Field(default_factory=lambda: ForbiddenRules())
    gates: GateRules = Field(default_factory=lambda: GateRules())
    blast_radius: BlastRadiusRules = Field(default_factory=lambda: BlastRadiusRules())
    approval: ApprovalRules = Field(default_factory=lambda: ApprovalRules())
    inventory: Inventory | None = Field(
        default=None, description="the lab's declared targets; when present, anything undeclared is refused"
    )
    source: str = Field(default="built-in strict default", exclude=True)

    @classmethod
    def strict_default(cls) -> Policy:
        return cls()


def _merge_forbidden(user: Mapping[str, Any]) -> dict[str, Any]:
    """With extend_defaults (the default) a policy file adds to the built-in rules instead of dropping them."""
    if not isinstance(user, Mapping) or user.get("extend_defaults") is False:
        return dict(user) if isinstance(user, Mapping) else user
    base = ForbiddenRules()
    merged: dict[str, Any] = dict(user)
    for key in ("words", "negations", "allow"):
        if key in user and isinstance(user[key], list):
            merged[key] = [*getattr(base, key), *[x for x in user[key] if x not in getattr(base, key)]]
    if isinstance(user.get("labels"), Mapping):
        labels = {k: v.model_dump() for k, v in base.labels.items()}
        for name, rule in user["labels"].items():
            if not isinstance(rule, Mapping):
                labels[name] = rule
                continue
            cur = labels.setdefault(name, {"keys": [], "values": [], "unless": []})
            for part in ("keys", "values", "unless"):
                extra = rule.get(part) or []
                cur[part] = (
                    [*cur[part], *[x for x in extra if x not in cur[part]]]
                    if isinstance(extra, list)
                    else extra
                )
            for k in rule:
                if k not in ("keys", "values", "unless"):
                    cur[k] = rule[k]  # unknown keys reach the validator and get a clear error
        merged["labels"] = labels
    return merged


def load_policy(
    path: str | os.PathLike[str] | None = None, *, start: str | os.PathLike[str] | None = None
) -> Policy:
    """The policy in force: the strictest combination of the built-in floor, the user's policy, every
    faultplane.policy.yaml from `start` (default: cwd) up to the root, and `path` or $FAULTPLANE_POLICY
    (see core/policy_layers.py); the strict built-in default when there is no file at all."""
    from faultplane.core.policy_layers import policy_in_force

    return policy_in_force(path, start=start)


def load_policy_file(chosen: Path, text: str | None = None) -> Policy:
    """One policy file, validated (with `extend_defaults`, its forbidden rules add to the built-in ones).
    `text`: the file's content already read (a signed file is parsed from the very bytes that were verified)."""
    from faultplane.core.hostile import HostileInput, parse_guarded, read_text_limited

    try:
        if text is None:
            text = read_text_limited(chosen, "policy file")
        data = parse_guarded(load_yaml, text, f"policy file {chosen}") or {}
    except HostileInput as exc:
        raise PolicyError(str(exc)) from None
    except OSError as exc:
        raise PolicyError(f"{chosen}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{chosen}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, Mapping):
        raise PolicyError(f"{chosen}: must be a mapping with forbidden/gates/blast_radius/approval sections")
    data = dict(data)
    if "forbidden" in data:
        data["forbidden"] = _merge_forbidden(data["forbidden"])
    data.pop("source", None)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()
        )
        raise PolicyError(
            f"{chosen}: {problems} (see faultplane.policy.example.yaml for every field)"
        ) from None
    policy.source = str(chosen)
    return policy


# ---- decisions -------------------------------------------------------------------------------------------


@dataclass
class Violation:
    rule: str
    field: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "field": self.field, "message": self.message, "fix": self.fix}

    def __str__(self) -> str:
        return f"[{self.rule}] {self.field}: {self.message} — fix: {self.fix}"


@dataclass
class PolicyDecision:
    allowed: bool
    violations: list[Violation]
    stage: int | None
    advice: list[str]
    family: str
    content_hash: str
    policy_source: str = ""
    allowed_stage: int = 0
    stage_size: dict[str, float | int] | None = None
    approval_required: list[str] = field(default_factory=list)
    approved_by: str | None = None
    green_streak: int = 0
    approval_hash: str = ""  # what an approval of this run must be bound to (see approval_hash())
    radius: dict[str, float | int] | None = None  # the cap on every target-selecting action of the run

    def to_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "violations": [v.to_dict() for v in self.violations],
            "stage": self.stage,
            "allowed_stage": self.allowed_stage,
            "stage_size": self.stage_size,
            "advice": list(self.advice),
            "family": self.family,
            "content_hash": self.content_hash,
            "policy_source": self.policy_source,
            "approval_required": list(self.approval_required),
            "approved_by": self.approved_by,
            "green_streak": self.green_streak,
            "approval_hash": self.approval_hash,
            "radius": self.radius,
        }

    def summary(self) -> str:
        head = "allowed" if self.allowed else "REFUSED"
        lines = [f"policy: {head} (family {self.family}, stage {self.stage}, policy: {self.policy_source})"]
        lines += [f"  - {v}" for v in self.violations]
        lines += [f"  advice: {a}" for a in self.advice]
        return "\n".join(lines)


# ---- identity --------------------------------------------------------------------------------------------


def _content_hash(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the experiment: same content, same hash, whatever the file format."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


content_hash = _content_hash


def _approval_hash(document: Mapping[str, Any], secret_values: Sequence[str] = ()) -> str:
    """What an approval is bound to: the experiment as it will run (variables substituted, configuration at its
    final values), with every secret value replaced by a digest of it.

    Hashing the file as written would let one approval cover any `--var` values; hashing secrets in clear
    would put them into a stored hash. A changed variable or a changed secret both change this hash."""
    ordered = sorted({str(v) for v in secret_values if str(v)}, key=len, reverse=True)

    def digest(value: str) -> str:
        return "secret:" + hashlib.sha256(value.encode()).hexdigest()[:16]

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            for sv in ordered:
                if sv in node:
                    node = node.replace(sv, digest(sv))
            return node
        if isinstance(node, Mapping):
            return {str(k): walk(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v) for v in node]
        if isinstance(node, int | float) and not isinstance(node, bool) and str(node) in ordered:
            return digest(str(node))  # a lone `${secret}` keeps the secret's type
        return node

    if not ordered:
        try:  # nothing to digest: the document hashes as it is (unless a key is not a string)
            return _content_hash({"approval_of": "resolved experiment", "experiment": document})
        except TypeError:
            pass
    return _content_hash({"approval_of": "resolved experiment", "experiment": walk(document)})


approval_hash = _approval_hash


def _slug(text: str) -> str:
    # the same slug the engine records in `runs.experiment_family`, so history lookups match
    return "-".join("".join(c.lower() if c.isalnum() else " " for c in text).split()) or "experiment"


def experiment_family(raw: Mapping[str, Any]) -> str:
    """The stable id of "the same experiment" across edits: explicit `family:`, else the title's slug."""
    fam = raw.get("family")
    if isinstance(fam, str) and fam.strip():
        return _slug(fam)
    title = raw.get("title")
    return _slug(title) if isinstance(title, str) else "experiment"


# ---- normalisation ---------------------------------------------------------------------------------------

# Letters from other scripts that render like Latin ones. Casefold runs first, so lowercase suffices except
# where a capital has no lowercase look-alike of its own.
_CONFUSABLES = str.maketrans(
    # Cyrillic, Greek and Latin variants that NFKC leaves alone, written as escapes so the source stays readable
    "\u0430\u0432\u0435\u0451\u0437\u04bb\u0456\u0457\u0458\u043a\u04cf\u043c\u043d\u043e\u0440\u0441\u0442\u0443\u0445\u0455\u0501\u051b\u051d\u044c\u043f\u0433\u0434\u043b"
    "\u03b1\u03b2\u03b3\u03b4\u03b5\u03b7\u03b9\u03ba\u03bd\u03bf\u03c1\u03f1\u03c3\u03c4\u03c5\u03c7\u03f2\u03c9\u03bc"
    "\u0261\u0131\u0237\u0251\u0269\u026a\u0280\u1d05\u1d0f\u1d18\ua7af\u00f8\u0111\u00f0\u0142\u0140",
    "abee3hiijklmhopctyxsdqwbnrdnabydenikvoppotuxcwugijaiirdopqoddll",
)
# capitals too, so camelCase splitting sees `is\u0420rod` (with a Cyrillic capital ER) as `is` + `Prod`
_CONFUSABLE_CAPITALS = str.maketrans(
    {
        ch.upper(): chr(_CONFUSABLES[ord(ch)]).upper()
        for ch in map(chr, list(_CONFUSABLES))
        if ch.upper() != ch and len(ch.upper()) == 1 and isinstance(_CONFUSABLES[ord(ch)], int)
    }
)
_ZERO_WIDTH_EXTRA = {"\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u180e"}


def _unescape(text: str) -> str:
    for _ in range(3):  # double-encoding is a classic evasion; three rounds is plenty and bounded
        decoded = html.unescape(urllib.parse.unquote(text))
        if decoded == text:
            break
        text = decoded
    return text


# compiled at import: compiling on first use cost a cold run ~1 ms
_KEY_PATH = re.compile(r"[./]")
_NOT_KEY_CHARS = re.compile(r"[^a-z0-9]+")


def _prefold(text: str) -> str:
    """Decoded, NFKC, marks and zero-width stripped, look-alike capitals mapped; case still as written."""
    text = _unescape(text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(
        c for c in text if unicodedata.category(c) not in ("Mn", "Me", "Cf") and c not in _ZERO_WIDTH_EXTRA
    )
    return unicodedata.normalize("NFKC", text).translate(_CONFUSABLE_CAPITALS)


def _fold(text: str) -> str:
    text = text.casefold().translate(_CONFUSABLES)
    # the hand table above keeps camelCase capitals readable; Unicode's TR39 table covers everything else
    return text if text.isascii() else _tr39_skeleton(text)


@functools.lru_cache(maxsize=8192)  # experiments repeat the same strings (hosts, keys) many times
def normalize_text(text: str, *, camel: bool = False) -> str:
    """Lowercase Latin skeleton of `text`: decoded, NFKC, marks and zero-width stripped, look-alikes mapped.

    With `camel`, case humps become sub-word boundaries (`isProd` -> `is-prod`, `HTTPServer` -> `http-server`);
    `camel_forms` gives every reading. Callers check the plain form too, because splitting also breaks
    deliberately mixed case (`PrOdUcTiOn`)."""
    if camel:
        forms = camel_forms(text)
        return forms[0] if forms else normalize_text(text)
    return _fold(_prefold(text))


@functools.lru_cache(maxsize=8192)
def camel_forms(text: str) -> tuple[str, ...]:
    """Normalised readings of `text` with its case humps as sub-word boundaries, as `-` so hosts and tokens
    stay whole (`myProdDb.internal` -> `my-prod-db.internal`; `ordersPRODcluster` -> `orders-prod-cluster`
    among its readings). Empty when the text has no hump. The split runs before folding, so `Product` and
    `Reproduce` stay one word."""
    plain = normalize_text(text)
    out = [f for f in map(_fold, case_humps(_prefold(text))) if f != plain]
    return tuple(dict.fromkeys(out))


def _decode_idna_host(host: str) -> str:
    labels = []
    for label in host.split("."):
        if label.startswith("xn--"):
            with contextlib.suppress(UnicodeError, ValueError):
                label = label.encode("ascii").decode("idna")
        labels.append(label)
    return ".".join(labels)


# ---- the forbidden-target scan ---------------------------------------------------------------------------

_TOKEN_SPLIT = re.compile(r"[^a-z0-9_\-]+")
_SUBWORD_SPLIT = re.compile(r"[-_]+")
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
_FLOOR_NEGATIONS = ("non", "not", "no", "pre")

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


def _fmt_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "(experiment)"


def _glob_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """One compiled regex for a list of fnmatch globs: `fnmatchcase` per pattern per string dominated the scan."""
    return _compiled_globs(tuple(patterns))


@functools.lru_cache(maxsize=256)  # the same rules are scanned with again and again in one process
def _compiled_globs(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    if not patterns:
        return lambda _text: False
    exact = {p for p in patterns if not _GLOB_CHARS.search(p)}
    # a glob can only match a text that starts with its literal head and ends with its literal tail; most
    # texts fail that, so the regex (compiling a rule set costs ~10 ms, a whole quick run's budget) is built
    # only when a text could match
    bounds = [
        (_glob_literal(_GLOB_HEAD, p), _glob_literal(_GLOB_TAIL, p)) for p in patterns if p not in exact
    ]
    compiled: list[re.Pattern[str]] = []

    def match(text: str) -> bool:
        if text in exact:
            return True
        if not any(text.startswith(head) and text.endswith(tail) for head, tail in bounds):
            return False
        if not compiled:
            compiled.append(re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)))
        return compiled[0].match(text) is not None

    return match


def _glob_literal(rx: re.Pattern[str], pattern: str) -> str:
    found = rx.search(pattern)
    return found[0] if found else ""


_GLOB_CHARS = re.compile(r"[*?\[\]]")
_GLOB_HEAD = re.compile(r"[^*?\[]*")
_GLOB_TAIL = re.compile(r"[^*?\[\]]*\Z")


@functools.lru_cache(maxsize=8192)
def _norm_key(key: str) -> str:
    k = normalize_text(key).strip()
    k = _KEY_PATH.split(k)[-1]  # `app.kubernetes.io/env`, `labels.env` -> `env`
    return _NOT_KEY_CHARS.sub("_", k).strip("_")


class _Scanner:
    def __init__(self, rules: ForbiddenRules, secret_values: Sequence[str] = ()) -> None:
        self.rules = rules
        self.violations: list[Violation] = []
        self._seen: set[str] = set()
        # a refusal must never echo a secret: findings in a string holding one name the place, not the value
        self._secrets = sorted({str(v) for v in secret_values if len(str(v)) >= 3}, key=len, reverse=True)
        self._redact: str | None = None
        # inside `secrets:` a bare word is not a target (a password may read "production-…"); hosts and labels are
        self._hosts_only = False
        # The rules are fixed for a scan and experiments repeat keys and values (200 probes share a handful of
        # keys), so the globs are compiled once and every pure lookup is memoised per scanner.
        self._is_word = _glob_matcher(rules.words)
        self._is_allowed = _glob_matcher([pat.casefold() for pat in rules.allow])
        self._label_rules = [
            (name, _glob_matcher(rule.keys), _glob_matcher(rule.unless), _glob_matcher(rule.values))
            for name, rule in rules.labels.items()
        ]
        self._any_label_key = _glob_matcher([k for rule in rules.labels.values() for k in rule.keys])
        self._word_hits: dict[str, str | None] = {}
        self._label_hits: dict[tuple[str, str], str | None] = {}
        self._label_keys: dict[str, bool] = {}
        self._key_hits: dict[str, str | None] = {}
        # strings already scanned without a finding; a finding depends on the text, its key and the mode,
        # never on where it sits, so a clean string is clean at every place it appears
        self._clean: set[tuple[str, str | None, bool]] = set()

    # -- primitives

    def _allowed(self, *items: str) -> bool:
        return any(self._is_allowed(item) for item in items)

    def word_hit(self, token: str) -> str | None:
        """The forbidden sub-word in `token`, unless negated (`non-prod`) or allowed."""
        try:
            return self._word_hits[token]
        except KeyError:
            pass
        found = None
        subs = [s for s in _SUBWORD_SPLIT.split(token) if s]
        for i, sub in enumerate(subs):
            negated = i > 0 and subs[i - 1] in self.rules.negations
            if production_word(sub) and not (i > 0 and subs[i - 1] in _FLOOR_NEGATIONS):
                found = sub  # the built-in floor: no allow pattern, no policy file switches it off
                break
            if self._is_word(sub):
                if negated or self._allowed(token, sub):
                    continue
                found = sub
                break
        self._word_hits[token] = found
        return found

    def label_hit(self, key: str, value: str) -> str | None:
        try:
            return self._label_hits[(key, value)]
        except KeyError:
            pass
        found = None
        nk = _norm_key(key)
        nv = normalize_text(value).strip().strip("\"'`") if self.is_label_key(key) else ""
        if nk and nv:
            for name, is_key, is_unless, is_value in self._label_rules:
                if not is_key(nk) or is_unless(nv):
                    continue
                if is_value(nv) and not (self._allowed(nv) and production_reason(nv) is None):
                    found = name
                    break
        self._label_hits[(key, value)] = found
        return found

    def key_word_hit(self, key: str) -> str | None:
        """The forbidden word a key itself names (`prod_db: ...`); label keys (`env: ...`) are judged by value."""
        try:
            return self._key_hits[key]
        except KeyError:
            pass
        found = None
        if not self.is_label_key(key):
            for form in (normalize_text(key), *camel_forms(key)):
                for token in _TOKEN_SPLIT.split(form):
                    found = token and self.word_hit(token)
                    if found:
                        break
                if found:
                    break
        self._key_hits[key] = found or None
        return found or None

    def is_label_key(self, key: str) -> bool:
        found = self._label_keys.get(key)
        if found is None:
            found = self._label_keys[key] = self._any_label_key(_norm_key(key))
        return found

    def _add(self, rule: str, path: tuple[str | int, ...], message: str) -> None:
        where = _fmt_path(path)
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


# ---- gates -----------------------------------------------------------------------------------------------

_FRACTION_SLIS = {"error_rate", "availability"}
_GATE_EXAMPLE = '`slo_gates: [{name: errors, sli: error_rate, rollback_on: "error_rate > 0.01 for 30s"}]`'


def _gate_source_problem(spec: GateSpec, raw: Mapping[str, Any]) -> tuple[str, str] | None:
    """(message, fix) when nothing in the run can measure this gate: it would abort the run at its first
    sample (or, with `on_missing: ignore`, guard nothing), so it is refused up front instead."""
    if spec.sli in LOAD_SLIS and not raw.get("load"):
        return (
            f"gate {spec.name!r} reads {spec.sli} from the built-in load generator, but the experiment has no "
            "`load:`, so nothing can measure it",
            "declare `load: {url: http://127.0.0.1:8080/, rate: 20}`, or measure it with `sli: probe` "
            "(a `probe:` activity) or `sli: prometheus` (a `prometheus: {url, query}` block)",
        )
    if spec.sli == "prometheus" and not (spec.prometheus or {}).get("url"):
        return (
            f"gate {spec.name!r} queries Prometheus but names no server",
            "add `url:` to its `prometheus:` block, e.g. http://127.0.0.1:9090",
        )
    return None


_UNREACHABLE_FIX = (
    "bound the SLI where it can go, e.g. `error_rate > 0.01 for 30s` or `availability < 0.99 for 30s`"
)


def _never_trips(sli: str, op: str, threshold: float, *, percent: bool = False) -> str | None:
    """Why a gate's predicate can never be true for this SLI (every built-in SLI is >= 0; fractions <= 1; a
    threshold written as a percentage is a share, 0 %..100 %, whatever measures it)."""
    shown = f"{threshold * 100:g}%" if percent else f"{threshold:g}"
    if percent and (
        (op in (">", ">=") and (threshold > 1 or (op == ">" and threshold == 1)))
        or (op in ("<", "<=") and (threshold < 0 or (op == "<" and threshold == 0)))
        or (op == "==" and not 0 <= threshold <= 1)
    ):
        return f"a percentage lies between 0% and 100%, so `{sli} {op} {shown}` can never trip"
    if sli in ("probe", "prometheus"):
        return None  # their values are the author's; only the share rule above is known (and the baseline)
    if op in ("<", "<=") and (threshold < 0 or (op == "<" and threshold == 0)):
        return f"{sli} is never below {shown}, so `{sli} {op} {shown}` can never trip"
    if op == "==" and threshold < 0:
        return f"{sli} is never negative, so `{sli} {op} {shown}` can never trip"
    if sli in _FRACTION_SLIS and (
        (op in (">", ">=") and (threshold > 1 or (op == ">" and threshold == 1)))
        or (op == "==" and threshold > 1)
    ):
        return f"{sli} is a fraction, never above 1, so `{sli} {op} {shown}` can never trip"
    return None


def check_gates(raw: Mapping[str, Any], rules: GateRules) -> list[Violation]:
    out: list[Violation] = []
    gates = raw.get("slo_gates")
    if gates is None:
        gates = []
    if not isinstance(gates, list):
        return [Violation("gates.required", "slo_gates", "must be a list of gates", f"write {_GATE_EXAMPLE}")]
    valid: list[GateSpec] = []
    for i, g in enumerate(gates):
        where = f"slo_gates[{i}]"
        try:
            spec = GateSpec.model_validate(g)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = str(err.get("ctx", {}).get("error") or err["msg"])
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.{loc}" if loc else where,
                    f"gate is not a numeric bound: {msg}",
                    'write the gate as `<sli> <op> <number> for <N>s`, e.g. "error_rate > 0.01 for 30s"',
                )
            )
            continue
        pred = spec.predicate
        if spec.sli not in ("probe", "prometheus") and pred.metric != spec.sli:
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.rollback_on",
                    f"predicate measures {pred.metric!r} but the gate's sli is {spec.sli!r}",
                    f"use `{spec.sli} {pred.op} <number>` or change `sli:` to {pred.metric!r}",
                )
            )
            continue
        if spec.sli in _FRACTION_SLIS and not 0 <= pred.threshold <= 1:
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.rollback_on",
                    f"{spec.sli} is a fraction between 0 and 1, so {pred.threshold:g} can never be crossed",
                    f"write e.g. `{spec.sli} {pred.op} 0.01` or `{spec.sli} {pred.op} 1%`",
                )
            )
            continue
        never = _never_trips(spec.sli, pred.op, pred.threshold, percent="%" in spec.rollback_on)
        if never is not None:
            out.append(Violation("gates.unreachable", f"{where}.rollback_on", never, _UNREACHABLE_FIX))
            continue
        if not math.isfinite(pred.threshold):
            out.append(
                Violation("gates.numeric", f"{where}.rollback_on", "threshold is not finite", "use a number")
            )
            continue
        if pred.window_s > 0 and spec.interval_s > pred.window_s:
            out.append(
                Violation(
                    "gates.window",
                    f"{where}.interval_s",
                    f"samples every {spec.interval_s:g}s but the window is {pred.window_s:g}s",
                    "sample at least once per window: lower interval_s or widen `for <N>s`",
                )
            )
            continue
        source = _gate_source_problem(spec, raw)
        if source is not None:
            out.append(Violation("gates.source", f"{where}.sli", *source))
            continue
        valid.append(spec)
    if rules.required and len(valid) < max(rules.min_gates, 1 if rules.required else 0) and not out:
        out.append(
            Violation(
                "gates.required",
                "slo_gates",
                f"the experiment declares {len(valid)} SLO gate(s); at least {max(rules.min_gates, 1)} needed "
                "so a live breach can stop the fault",
                f"add a numeric gate with a window, e.g. {_GATE_EXAMPLE}",
            )
        )
    if rules.require_window and valid and not any(s.predicate.window_s > 0 for s in valid):
        out.append(
            Violation(
                "gates.window",
                "slo_gates",
                "no gate has a window (`for <N>s`), so a single noisy sample would decide",
                'add a window to a gate, e.g. rollback_on: "error_rate > 0.01 for 30s"',
            )
        )
    return out


# ---- blast radius and history ----------------------------------------------------------------------------


def _is_green(row: Mapping[str, Any]) -> bool:
    return (
        row.get("status") == "completed"
        and row.get("steady_state_before") is True
        and row.get("steady_state_after") is True
    )


# A DuckDB store answers from its history index (core.history: a file read, no database open). Other stores
# (ClickHouse) are queried, and one decision reads the history up to three times, so that answer is cached
# briefly; persisting a journal clears the cache (`forget_runs`).
_RUNS_CACHE: dict[tuple[str, str, int], tuple[float, list[dict[str, Any]]]] = {}
_RUNS_CACHE_TTL_S = 2.0


def forget_runs() -> None:
    """Drop cached run history: a run was just recorded."""
    _RUNS_CACHE.clear()


def _family_runs(
    store: Store | None, family: str, limit: int = 500, *, fresh: bool = False
) -> list[dict[str, Any]]:
    """`fresh`: the decision rests on it (a stage past 0), so a DuckDB store answers from the database."""
    if store is None:
        return []
    if getattr(store, "dialect", None) == "duckdb":
        return family_runs(store, family, limit, fresh=fresh)
    key = (str(getattr(store, "url", id(store))), family, limit)
    hit = _RUNS_CACHE.get(key)
    if hit is not None and time.monotonic() - hit[0] < _RUNS_CACHE_TTL_S:
        return hit[1]
    rows = _query_family_runs(store, family, limit)
    _RUNS_CACHE[key] = (time.monotonic(), rows)
    return rows


def _query_family_runs(store: Any, family: str, limit: int) -> list[dict[str, Any]]:
    return query_family_runs(store, family, limit)


def green_streak(store: Store | None, family: str) -> tuple[int | None, int]:
    """(stage, n): the newest runs of the family were n consecutive greens at that stage."""
    rows = _family_runs(store, family)
    if not rows or not _is_green(rows[0]):
        return (rows[0].get("blast_stage") if rows else None), 0
    stage = rows[0].get("blast_stage")
    n = 0
    for row in rows:
        if not _is_green(row) or row.get("blast_stage") != stage:
            break
        n += 1
    return stage, n


def three_greens_advice(
    stage: int | None, count: int, policy: Policy, *, fault_types: Sequence[str] = ()
) -> str:
    stages = policy.blast_radius.stages
    at = (
        f"stage {stage} ({stages[stage].describe()})"
        if stage is not None and 0 <= stage < len(stages)
        else (f"stage {stage}")
    )
    nxt = ""
    if stage is not None and stage + 1 < len(stages):
        s = stages[stage + 1]
        shape = f"percent: {s.percent:g}" if s.percent is not None else f"count: {s.count}"
        nxt = f"widen the blast radius to stage {stage + 1} (`blast_radius: {{{shape}}}`), or "
    others = [f for f in KNOWN_FAULT_TYPES if f not in fault_types]
    return (
        f"{count} consecutive green runs at {at}: this shows the system tolerates this fault at this radius, "
        f"not that it is resilient. Next: {nxt}try a new fault type ({', '.join(others[:3])})."
    )


def advice_after_run(
    store: Store | None,
    family: str,
    policy: Policy,
    *,
    green: bool,
    stage: int | None,
    fault_types: Sequence[str] = (),
) -> list[str]:
    """The three-greens advice for the result of the run that just ended (not yet counted in `runs`)."""
    if not green:
        return []
    streak_stage, n = green_streak(store, family)
    n = n + 1 if streak_stage == stage else 1
    if n < policy.blast_radius.greens_before_advice:
        return []
    return [three_greens_advice(stage, n, policy, fault_types=fault_types)]


def _exposures(store: Store | None, targets: Sequence[str]) -> list[dict[str, Any]]:
    """Exposure rows of these targets, newest first, from the database itself (a guardrail never rests on a
    cache). A store that cannot answer shows no exposure: the stage is then not earned."""
    if store is None or not targets:
        return []
    if getattr(store, "dialect", "duckdb") == "duckdb":
        if store.has_pending():
            store.flush()
        if not store.path.exists():
            return []
    final = " FINAL" if getattr(store, "dialect", "duckdb") == "clickhouse" else ""
    marks = ", ".join("?" for _ in targets)
    try:
        return store.query(
            f"SELECT target, fault_kind, stage, green, started_at FROM exposures{final} "
            f"WHERE target IN ({marks}) ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT 5000",
            list(targets),
        )
    except Exception:
        return []


def _earned_stage(
    raw: Mapping[str, Any],
    stage: int | None,
    policy: Policy,
    store: Store | None,
    fault_type_of: Callable[[str, str], str | None] | None,
    *,
    report_next_stage: bool = False,
) -> tuple[int, list[str]]:
    """(the highest stage this experiment has earned, why each of its faults lacks the requested stage).

    The lowest over the faults its method injects: each (target, kind) climbs on its own exposures. A method
    that injects no fault the journal could show (a no-op, a shell command) earns nothing past stage 0."""
    from faultplane.core.exposure import earned, planned_exposures

    if not report_next_stage and (stage is None or stage <= 0):
        return 0, []  # stage 0 needs no history: a run at stage 0 does not open the database for it
    planned = planned_exposures(raw, fault_type_of)
    if not planned:
        return 0, [
            "the method injects no fault a journal can show (a driver action that applies a fault), so no "
            "run of it earns a stage"
        ]
    need = policy.blast_radius.greens_to_advance
    rows = _exposures(store, sorted({t for t, _k, _n in planned if t != "opaque"}))
    allowed: int | None = None
    why: list[str] = []
    for target, kind, name in dict.fromkeys(planned):
        if target == "opaque":
            allowed = 0
            why.append(
                f"activity {name!r} looks like a {kind} fault but is not a driver action, so no run can show it "
                "applied: it earns no stage past 0"
            )
            continue
        mine = [r for r in rows if r.get("target") == target and r.get("fault_kind") == kind]
        ok, last, n = earned(mine, need)
        allowed = ok if allowed is None else min(allowed, ok)
        if stage is not None and stage > ok:
            # the missing step is the stage it has earned: that is where the green runs must come from
            have = n if last == ok else 0
            history = (
                "no green run has injected it yet"
                if last is None
                else f"its newest green exposure is at stage {last}"
            )
            why.append(
                f"target {target!r} / fault kind {kind!r} lacks {need - have} green run(s) that really "
                f"injected it at stage {ok} ({history}; {have} of {need} needed)"
            )
    return (allowed or 0), why


def _stage_of(raw: Mapping[str, Any], policy: Policy) -> tuple[int | None, list[Violation]]:
    stages = policy.blast_radius.stages
    br = raw.get("blast_radius")
    has_targets = bool(raw.get("targets"))
    if br is None:
        if has_targets and policy.blast_radius.require_declared:
            first = stages[0]
            shape = f"percent: {first.percent:g}" if first.percent is not None else f"count: {first.count}"
            return None, [
                Violation(
                    "blast_radius.required",
                    "blast_radius",
                    "the experiment has targets but no blast radius, so every matching target would be hit",
                    f"declare the first stage: `blast_radius: {{{shape}}}`",
                )
            ]
        return 0, []
    if not isinstance(br, Mapping):
        return None, [
            Violation("blast_radius.shape", "blast_radius", "must be a mapping", "use {percent: 10}")
        ]
    declared_stage = br.get("stage")
    pct, cnt = br.get("percent"), br.get("count")
    size_stage: int | None = None
    if pct is not None or cnt is not None:
        unit = "percent" if pct is not None else "count"
        amount = pct if pct is not None else cnt
        if not isinstance(amount, int | float) or isinstance(amount, bool) or amount <= 0:
            return None, [
                Violation(
                    "blast_radius.shape",
                    f"blast_radius.{unit}",
                    f"must be a positive number, got {amount!r}",
                    "use e.g. `percent: 10` or `count: 1`",
                )
            ]
        sizes = [getattr(s, unit) for s in stages]
        if all(s is None for s in sizes):
            other = "count" if unit == "percent" else "percent"
            return None, [
                Violation(
                    "blast_radius.unit",
                    f"blast_radius.{unit}",
                    f"the policy's stages are given as {other}, not {unit}",
                    f"declare `blast_radius: {{{other}: ...}}` or add `{unit}` to the policy's stages",
                )
            ]
        size_stage = len(stages)  # beyond the last stage unless a stage is at least this big
        for i, s in enumerate(sizes):
            if s is not None and amount <= s:
                size_stage = i
                break
    if declared_stage is not None:
        if not isinstance(declared_stage, int) or isinstance(declared_stage, bool) or declared_stage < 0:
            return None, [
                Violation(
                    "blast_radius.shape",
                    "blast_radius.stage",
                    "must be a stage index >= 0",
                    f"use 0..{len(stages) - 1}",
                )
            ]
        if size_stage is not None and size_stage > declared_stage:
            return None, [
                Violation(
                    "blast_radius.stage",
                    "blast_radius",
                    f"declares stage {declared_stage} but its size belongs to stage {size_stage}",
                    f"shrink the radius to {stages[min(declared_stage, len(stages) - 1)].describe()} "
                    "or drop `stage:`",
                )
            ]
        return declared_stage, []
    return size_stage if size_stage is not None else 0, []


_FAULT_HINTS = (
    ("partition", "network_partition"),
    ("blackhole", "network_partition"),
    ("exhaust", "resource_exhaustion"),
    ("stress", "resource_exhaustion"),
    ("hog", "resource_exhaustion"),
    ("fill_disk", "resource_exhaustion"),
    ("latency", "latency"),
    ("delay", "latency"),
    ("timeout", "timeout"),
    ("error", "error"),
)


def _fault_types(
    raw: Mapping[str, Any], fault_type_of: Callable[[str, str], str | None] | None
) -> tuple[set[str], set[str]]:
    """(fault types, `driver.action` names) the method injects, read from its providers."""
    from faultplane.core.effects import activities, effect_kinds

    kinds: set[str] = set()
    actions: set[str] = set()
    # by effect, in every place that executes (rollbacks, steady state and controls too), at any depth
    for _section, act in activities(raw):
        kinds |= effect_kinds(act["provider"])
    for _section, act in activities(raw):
        prov = act["provider"]
        args = prov.get("arguments") if isinstance(prov.get("arguments"), Mapping) else {}
        for key in ("fault_type", "fault", "kind"):
            val = args.get(key)
            if isinstance(val, Mapping):
                val = val.get("type")
            if isinstance(val, str):
                kinds.add(normalize_text(val))
        if isinstance(args.get("type"), str) and normalize_text(args["type"]) in KNOWN_FAULT_TYPES:
            kinds.add(normalize_text(args["type"]))
        if (
            prov.get("type") == "driver"
            and isinstance(prov.get("driver"), str)
            and isinstance(prov.get("name"), str)
        ):
            actions.add(f"{prov['driver']}.{prov['name']}")
            declared = None
            if fault_type_of is not None:
                try:
                    declared = fault_type_of(prov["driver"], prov["name"])
                except Exception:  # an unknown driver is the validator's business, not the policy's
                    declared = None
            if declared:
                kinds.add(declared)
            else:
                name = normalize_text(prov["name"])
                kinds.update(ft for hint, ft in _FAULT_HINTS if hint in name)
    return kinds, actions


def effective_radius(
    raw: Mapping[str, Any], stage: int | None, policy: Policy
) -> dict[str, float | int] | None:
    """The most any target-selecting action of this experiment may touch: the declared `blast_radius` size,
    else the size of its stage (an undeclared radius is stage 0: the first stage's size)."""
    br = raw.get("blast_radius")
    if isinstance(br, Mapping):
        for unit in ("percent", "count"):
            amount = br.get(unit)
            if isinstance(amount, int | float) and not isinstance(amount, bool) and amount > 0:
                return {unit: amount}
    stages = policy.blast_radius.stages
    if stage is None or not 0 <= stage < len(stages):
        return None
    s = stages[stage]
    return {k: v for k, v in (("percent", s.percent), ("count", s.count)) if v is not None}


# an action's own size fields, and the radius unit each is compared with
_ACTION_SIZE_FIELDS = (("percentage", "percent"), ("percent", "percent"), ("count", "count"))


def _radius_violations(
    raw: Mapping[str, Any],
    stage: int | None,
    radius: Mapping[str, float | int] | None,
    targets_of: Callable[[str, str], bool] | None,
) -> list[Violation]:
    """Driver actions asking for more targets than the experiment's blast radius allows."""
    if not radius:
        return []
    shown = " / ".join(f"{v:g}%" if k == "percent" else f"{v} target(s)" for k, v in radius.items())
    where_stage = f"stage {stage}" if stage is not None else "its stage"
    out: list[Violation] = []
    for section in ("method", "rollbacks"):
        for i, item in enumerate(raw.get(section) or []):
            if not isinstance(item, Mapping) or not isinstance(item.get("provider"), Mapping):
                continue
            prov = item["provider"]
            if prov.get("type") != "driver" or not isinstance(prov.get("arguments"), Mapping):
                continue
            driver, action = str(prov.get("driver")), str(prov.get("name"))
            if targets_of is not None:
                try:
                    if not targets_of(driver, action):
                        continue
                except Exception:  # an unknown activity is the validator's business
                    continue
            args = prov["arguments"]
            for arg, unit in _ACTION_SIZE_FIELDS:
                amount, limit = args.get(arg), radius.get(unit)
                if limit is None or not isinstance(amount, int | float) or isinstance(amount, bool):
                    continue
                if amount > limit:
                    out.append(
                        Violation(
                            "blast_radius.action",
                            f"{section}[{i}].provider.arguments.{arg}",
                            f"activity {item.get('name')!r} ({driver}.{action}) asks for {arg} {amount:g}, "
                            f"more than the experiment's blast radius ({shown}, {where_stage})",
                            f"lower `{arg}` to at most {limit:g}, or widen `blast_radius` to the next stage "
                            "once this one has run green",
                        )
                    )
    return out


# ---- the decision ----------------------------------------------------------------------------------------


def evaluate(
    raw: Mapping[str, Any],
    *,
    policy: Policy,
    store: Store | None,
    approval_token: str | None = None,
    fault_type_of: Callable[[str, str], str | None] | None = None,
    targets_of: Callable[[str, str], bool] | None = None,
    content_hash: str | None = None,
    family: str | None = None,
    approval_hash: str | None = None,
    secret_values: Sequence[str] = (),
    report_next_stage: bool = False,
) -> PolicyDecision:
    """Decide whether this experiment may run now. Never raises on a malformed experiment: refuses it.

    `raw` is the experiment as it will run (variables substituted). `content_hash`/`family` default to those
    of `raw`; the engine passes its plan's own so the journal and the `runs` table agree. An approval must be
    bound to `approval_hash` (default: approval_hash(raw, secret_values)). `fault_type_of` and `targets_of`
    tell what a driver action injects and whether it selects targets; every surface gets them from the engine
    (`faultplane.engine.lifecycle.evaluate_document`), so all decide alike.
    """
    if not isinstance(raw, Mapping):
        v = Violation(
            "experiment.shape", "(experiment)", "is not a mapping", "load a YAML/JSON experiment object"
        )
        return PolicyDecision(False, [v], None, [], "experiment", "", policy.source)
    family = family or experiment_family(raw)
    chash = content_hash or _content_hash(raw)
    ahash = approval_hash or _approval_hash(raw, secret_values)
    violations: list[Violation] = []
    advice: list[str] = []

    violations += find_forbidden(raw, policy.forbidden, secret_values=secret_values)
    if policy.inventory is not None:
        violations += undeclared(raw, policy.inventory)
    violations += check_gates(raw, policy.gates)

    stage, stage_problems = _stage_of(raw, policy)
    violations += stage_problems
    stages = policy.blast_radius.stages
    radius = effective_radius(raw, stage, policy)
    violations += _radius_violations(raw, stage, radius, targets_of)

    # a stage is earned per target and fault kind by green runs that really injected that kind there at the
    # stage before (core.exposure), never by the experiment's title or family: both are the author's labels
    allowed_stage, unearned = _earned_stage(
        raw, stage, policy, store, fault_type_of, report_next_stage=report_next_stage
    )

    kinds, actions = _fault_types(raw, fault_type_of)
    reasons: list[str] = []
    if stage is not None:
        if stage > allowed_stage:
            reasons.append(
                f"skips a stage: runs at stage {stage} but only stage {allowed_stage} is earned: "
                + "; ".join(unearned)
            )
        if stage >= len(stages):
            reasons.append(f"runs beyond the last stage ({stages[-1].describe()})")
        elif policy.approval.min_stage is not None and stage >= policy.approval.min_stage:
            reasons.append(f"stage {stage} ({stages[stage].describe()}) needs approval by policy")
    risky = sorted(k for k in kinds if k in {normalize_text(f) for f in policy.approval.fault_types})
    if risky:
        reasons.append(f"injects {', '.join(risky)}, which needs approval by policy")
    risky_actions = sorted(
        a
        for a in actions
        if any(fnmatch.fnmatchcase(a.casefold(), g.casefold()) for g in policy.approval.actions)
    )
    if risky_actions:
        reasons.append(f"uses {', '.join(risky_actions)}, which needs approval by policy")

    approved_by: str | None = None
    if reasons:
        token_error = ""
        found: approvals.Approval | None = None
        trusted = policy.approval.trusted_keys
        if approval_token:
            try:
                found = approvals.verify_token(approval_token, ahash, trusted_keys=trusted)
            except approvals.ApprovalError as exc:
                token_error = f" The token given does not verify: {exc}."
        if found is None:
            found, why = approvals.stored_approval(ahash, trusted_keys=trusted)
            token_error = token_error or (f" {why}." if why else "")
        if found is None and not token_error and not trusted:
            token_error = (
                " No approver key is trusted yet (approval.trusted_keys is empty): a person runs "
                "`faultplane approvals keygen` and adds the printed line there."
            )
        if found is None and not token_error:
            stale = [a for a in approvals.list_approvals() if a.get("family") == family]
            if stale:
                token_error = (
                    " An approval exists for another version of this experiment; the content or the variables "
                    "changed since (a changed experiment invalidates its approval)."
                )
        if found is not None:
            approved_by = found.approver
            advice.append(f"approved by {found.approver} for approval hash {ahash[:12]}…")
        else:
            violations.append(
                Violation(
                    "approval.required",
                    "blast_radius" if stage is not None and stage > allowed_stage else "method",
                    "needs a human approval: " + "; ".join(reasons) + "." + token_error,
                    "a person reviews the experiment and runs `faultplane approve <experiment file>` "
                    "(signed with a key in approval.trusted_keys), or approves it when an MCP client asks"
                    + (
                        f", or run at stage {allowed_stage} first"
                        if stage is not None and stage > allowed_stage
                        else ""
                    ),
                )
            )

    streak_stage, streak = green_streak(store, family)
    if streak >= policy.blast_radius.greens_before_advice:
        advice.append(three_greens_advice(streak_stage, streak, policy, fault_types=sorted(kinds)))

    size: dict[str, float | int] | None = None
    if stage is not None and 0 <= stage < len(stages):
        s = stages[stage]
        size = {k: v for k, v in (("percent", s.percent), ("count", s.count)) if v is not None}

    return PolicyDecision(
        allowed=not violations,
        violations=violations,
        stage=stage,
        advice=advice,
        family=family,
        content_hash=chash,
        policy_source=policy.source,
        allowed_stage=allowed_stage,
        stage_size=size,
        approval_required=reasons,
        approved_by=approved_by,
        green_streak=streak,
        approval_hash=ahash,
        radius=radius,
    )
