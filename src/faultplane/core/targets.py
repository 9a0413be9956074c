"""Does a piece of text name a production target? The production-name floor no policy can switch off.

This module is imported by the agent hook before every shell command, so it imports only the standard library
(the Unicode confusables table is read lazily, the first time a text holds a non-ASCII character).

API (all pure functions, cached):

- `skeleton(text) -> str`: the lowercase Latin skeleton (percent/HTML decoded, NFKD, marks and invisible
  characters removed, Unicode TR39 confusables mapped to their Latin prototype, casefolded).
- `production_word(token) -> bool`: is one sub-word a production name (`prod`, `prod1`, `proddb`,
  `produseast1`, `prdweb`) rather than an ordinary word (`product`, `produce`, `prodigy`)?
- `production_reason(text) -> str | None`: why `text` (a host, a DSN, a command line, a label value) names
  production, or None. Handles attached and `=` flag forms (`-nprod`, `--namespace=prod`, `--context=prod`).

The confusables table is Unicode's confusables.txt as shipped by the maintained `confusable_homoglyphs`
package; a character whose confusables include an ASCII letter or digit maps to it (TR39's prototype for the
Latin skeleton). The table is never hand-written here.
"""

from __future__ import annotations

import functools
import html
import json
import re
import unicodedata
import urllib.parse

__all__ = ["case_humps", "production_reason", "production_word", "skeleton", "split_subwords"]

# ---- skeleton ---------------------------------------------------------------------------------------------

# characters TR39 treats as invisible or default-ignorable that NFKD keeps
_INVISIBLE = {"\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u180e", "\u00ad"}
_ASCII_ALNUM = set("abcdefghijklmnopqrstuvwxyz0123456789")


@functools.cache
def _confusables() -> dict[str, str]:
    """Non-ASCII character -> the ASCII letter/digit it is confusable with (from Unicode confusables.txt)."""
    try:
        from importlib.resources import files

        data = json.loads((files("confusable_homoglyphs") / "confusables.json").read_text(encoding="utf-8"))
    except (
        ImportError,
        OSError,
        ValueError,
    ):  # the dependency is declared; a broken install still scans ASCII
        return {}
    out: dict[str, str] = {}
    for char, homoglyphs in data.items():
        if char.isascii() or len(char) != 1:
            continue
        for h in homoglyphs:
            c = h.get("c", "")
            if len(c) == 1 and c.casefold() in _ASCII_ALNUM:
                out[char] = c.casefold()
                break
    return out


def _unescape(text: str) -> str:
    for _ in range(3):  # double encoding is a classic evasion; three rounds is plenty and bounded
        decoded = html.unescape(urllib.parse.unquote(text))
        if decoded == text:
            break
        text = decoded
    return text


@functools.lru_cache(maxsize=8192)
def skeleton(text: str) -> str:
    """Lowercase Latin skeleton of `text` (see the module doc). ASCII text costs one lowercase."""
    if text.isascii() and "%" not in text and "&" not in text:
        return text.lower()
    text = _unescape(text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(
        c for c in text if unicodedata.category(c) not in ("Mn", "Me", "Cf") and c not in _INVISIBLE
    )
    text = unicodedata.normalize("NFKC", text)
    if not text.isascii():
        table = _confusables()
        text = "".join(table.get(c, table.get(c.lower(), c)) if not c.isascii() else c for c in text)
    return text.casefold()


# ---- production words -------------------------------------------------------------------------------------

_PROD_HEADS = ("production", "prod", "prd")
# what may follow a production word with no separator: infrastructure words, region parts, digits
_INFRA_WORDS = (
    "database db sql pg postgres postgresql psql mysql maria mongo redis cache kafka rabbit mq queue es elastic "
    "web www app apps api apis svc service services srv server servers host hosts node nodes vm box "
    "cluster clusters k8s kube kubernetes eks gke aks ocp ns namespace ctx context env "
    "vpc net lb alb elb nlb gw gateway proxy ingress edge cdn dns bastion jump ssh "
    "east west north south central northeast northwest southeast southwest "
    "us eu ap sa ca me af uk de fr jp in au cn asia europe emea apac amer "
    "primary replica master main blue green canary live rw ro "
    "a b c x"
)
_INFRA = _INFRA_WORDS.split()
_INFRA_RX = "|".join(sorted(map(re.escape, _INFRA), key=len, reverse=True))
_PROD_RX = re.compile(rf"(?:production|prod|prd)(?:[0-9]+|{_INFRA_RX})*")
_NEGATIONS = ("non", "not", "no", "pre")
_SUBWORD_SPLIT = re.compile(r"[-_.]+")
# A case hump is a sub-word boundary like `-`: `myProdDb` reads as my-prod-db. An upper-case run followed by
# lower case is ambiguous (`HTTPServer` is HTTP+Server, `ordersPRODcluster` is PROD+cluster), so both
# readings are produced and a name is production when either reading says so.
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_HUMP_ACRONYM_HEAD = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")  # HTTP|Server
_HUMP_ACRONYM_TAIL = re.compile(r"(?<=[A-Z]{2})(?=[a-z])")  # PROD|cluster
_HAS_UPPER = re.compile(r"[A-Z]")


def _humps_unicode(text: str, tail: bool) -> str:
    """The same rules as the ASCII regexes, for any script (a Cyrillic or full-width capital is a hump too)."""
    out: list[str] = []
    for i, c in enumerate(text):
        if i:
            p = text[i - 1]
            if (
                (c.isupper() and (p.islower() or p.isdigit()))
                or (not tail and c.isupper() and p.isupper() and i + 1 < len(text) and text[i + 1].islower())
                or (tail and c.islower() and p.isupper() and i >= 2 and text[i - 2].isupper())
            ):
                out.append("-")
        out.append(c)
    return "".join(out)


@functools.lru_cache(maxsize=8192)
def case_humps(text: str) -> tuple[str, ...]:
    """`text` with its case humps turned into `-` sub-word boundaries, one string per reading of an acronym
    run (`HTTPServer`: HTTP-Server; `ordersPRODcluster`: orders-PROD-cluster); empty when it has no hump.

    Case is kept (callers fold it afterwards); a single capital at the start (`Product`) is no hump, so
    ordinary words stay whole."""
    if text.isascii():
        if not _HAS_UPPER.search(text):
            return ()
        base = _HUMP.sub("-", text)
        forms = (_HUMP_ACRONYM_HEAD.sub("-", base), _HUMP_ACRONYM_TAIL.sub("-", base))
    else:
        if not any(c.isupper() for c in text):
            return ()
        forms = (_humps_unicode(text, False), _humps_unicode(text, True))
    return tuple(dict.fromkeys(f for f in forms if f != text))


@functools.lru_cache(maxsize=8192)
def production_word(sub: str) -> bool:
    """One sub-word (no separators) that names production: `prod`, `prod1`, `proddb`, `produseast1`,
    `prdweb`, `production2`; also `nonprod`/`preprod` are NOT (an attached negation)."""
    if not sub.startswith(_PROD_HEADS):
        if sub.startswith(_NEGATIONS):
            return False
        return False
    return _PROD_RX.fullmatch(sub) is not None


def split_subwords(token: str) -> list[str]:
    return [s for s in _SUBWORD_SPLIT.split(token) if s]


def _subword_hit(token: str) -> str | None:
    """The production sub-word in a token (`payments-prod1-db`), unless a negation precedes it (`non-prod`)."""
    subs = split_subwords(token)
    for i, sub in enumerate(subs):
        if production_word(sub) and not (i > 0 and subs[i - 1] in _NEGATIONS):
            return sub
    return None


# `-nprod`, `-cprod`: a one-letter flag with its value attached; `--namespace=prod` splits at `=` anyway
_ATTACHED_FLAG = re.compile(r"(?:^|(?<=[\s\"'=]))-(?P<flag>[a-z])(?P<value>[a-z0-9][a-z0-9_.\-]*)")
_TOKENS = re.compile(r"[a-z0-9_.\-]+")


@functools.lru_cache(maxsize=8192)
def production_reason(text: str) -> str | None:
    """Why `text` names production (`'prod1' in 'db-prod1.internal'`), or None.

    Reads every token of a command line, a URL, a DSN (`host=prod-db dbname=x`), `user@host`, a flag
    (`--context=prod`, `-nprod`), camelCase (`paymentsProdDb`) and Unicode look-alikes. Ordinary words
    (`product`, `produce`, `reproduce`, `prodigy`) and negated forms (`pre-prod`, `preprod`, `non-prod`)
    are not production."""
    if not text:
        return None
    variants = [skeleton(text)]
    # decoded first, so a hump never splits a `%2D` escape
    for form in case_humps(_unescape(text)):
        humped = skeleton(form)
        if humped not in variants:
            variants.append(humped)
    for norm in variants:
        for m in _ATTACHED_FLAG.finditer(norm):
            hit = _subword_hit(m["value"])
            if hit:
                return f"{hit!r} in flag -{m['flag']}{m['value']}"
        for token in _TOKENS.findall(norm):
            hit = _subword_hit(token.strip(".-_"))
            if hit:
                return f"{hit!r} in {token.strip('.-_')!r}"
    return None
