"""How the policy reads text before matching it: one normal form, and fast glob matching on it.

Text is normalised before matching (percent-encoding, HTML entities, NFKC, combining marks, zero-width
characters, Cyrillic/Greek look-alikes, IDNA hosts, camelCase), so a production name cannot hide behind an
encoding or a look-alike letter. Rules are fnmatch globs; `_glob_matcher` compiles a rule list once.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import html
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Sequence

from faultplane.core.targets import case_humps
from faultplane.core.targets import skeleton as _tr39_skeleton

__all__ = ["camel_forms", "normalize_text"]

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


# ---- globs and keys ---------------------------------------------------------------------------------


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
