"""The policy's glob matcher skips its regex for texts that cannot match; it must agree with fnmatch."""

from __future__ import annotations

import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st

from faultplane.core.policy import ForbiddenRules, _compiled_globs

ALPHABET = "prod-_.0*?[]!e"
globs = st.lists(st.text(ALPHABET, max_size=8), min_size=1, max_size=5)
texts = st.text("prod-_.0e[]!", max_size=10)


@settings(max_examples=400, deadline=None)
@given(patterns=globs, text=texts)
def test_matches_exactly_what_fnmatch_matches(patterns: list[str], text: str) -> None:
    expected = any(fnmatch.fnmatchcase(text, p) for p in patterns)
    assert _compiled_globs(tuple(patterns))(text) is expected


def test_default_rules_agree_with_fnmatch_on_their_own_vocabulary() -> None:
    rules = ForbiddenRules()
    sets = [rules.words] + [g for r in rules.labels.values() for g in (r.keys, r.unless, r.values)]
    words = {w.strip("*[]-_.0123456789") for s in sets for w in s}
    words |= {"prod1", "prd-2", "my_env", "staging", "json"}
    for patterns in sets:
        match = _compiled_globs(tuple(patterns))
        for text in words:
            assert match(text) is any(fnmatch.fnmatchcase(text, p) for p in patterns), (patterns, text)
