"""Target matching: is this token, key or `key=value` label a production name under the policy's rules?

A token is split into sub-words (`-`, `_`), so `product` or `reproduce` never look like `prod`; a sub-word
right after a negation (`non-prod`) does not count, and the policy's `allow` list exempts words it added. The
built-in production names (`core.targets`) are a floor that no `allow` pattern and no negation the policy
adds switches off. Labels (`env: production`, `cluster=prd-eu`) are judged by their value under the key's rule.
`forbidden` walks an experiment and asks this for every string in it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from faultplane.core.policy.model import ForbiddenRules
from faultplane.core.policy.normalize import _glob_matcher, _norm_key, camel_forms, normalize_text
from faultplane.core.targets import production_reason, production_word

__all__ = ["RuleMatcher"]

_TOKEN_SPLIT = re.compile(r"[^a-z0-9_\-]+")
_SUBWORD_SPLIT = re.compile(r"[-_]+")
_FLOOR_NEGATIONS = ("non", "not", "no", "pre")


class RuleMatcher:
    """One policy's forbidden rules, compiled, answering for one token, key or label at a time.

    The rules are fixed for a scan and experiments repeat keys and values (200 probes share a handful of
    keys), so the globs are compiled once and every pure lookup is memoised per matcher."""

    def __init__(self, rules: ForbiddenRules) -> None:
        self.rules = rules
        self._is_word = _glob_matcher(rules.words)
        self._is_allowed = _glob_matcher([pat.casefold() for pat in rules.allow])
        self._label_rules = [
            (name, _glob_matcher(rule.keys), _glob_matcher(rule.unless), _glob_matcher(rule.values))
            for name, rule in rules.labels.items()
        ]
        self._any_label_key = _glob_matcher([k for rule in rules.labels.values() for k in rule.keys])
        # functools.cache per matcher: its C lookup keeps a repeated token as cheap as the dict probe it replaces
        self.word_hit: Callable[[str], str | None] = functools.cache(self._word_hit)
        self.label_hit: Callable[[str, str], str | None] = functools.cache(self._label_hit)
        self.key_word_hit: Callable[[str], str | None] = functools.cache(self._key_word_hit)
        self.is_label_key: Callable[[str], bool] = functools.cache(self._is_label_key)

    def _allowed(self, *items: str) -> bool:
        return any(self._is_allowed(item) for item in items)

    def _word_hit(self, token: str) -> str | None:
        """The forbidden sub-word in `token`, unless negated (`non-prod`) or allowed."""
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
        return found

    def _label_hit(self, key: str, value: str) -> str | None:
        """The label rule a `key=value` label breaks: the key names it, the value is forbidden and not allowed."""
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
        return found

    def _key_word_hit(self, key: str) -> str | None:
        """The forbidden word a key itself names (`prod_db: ...`); label keys (`env: ...`) are judged by value."""
        found = None
        if not self.is_label_key(key):
            for form in (normalize_text(key), *camel_forms(key)):
                for token in _TOKEN_SPLIT.split(form):
                    found = token and self.word_hit(token)
                    if found:
                        break
                if found:
                    break
        return found or None

    def _is_label_key(self, key: str) -> bool:
        return self._any_label_key(_norm_key(key))
