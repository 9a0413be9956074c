"""Property tests: any mix of the known evasions of a production marker is still refused, and words that
merely contain the letters p-r-o-d are not."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultplane.core.policy import find_forbidden

HOMOGLYPHS = {
    "p": ["p", "P", "\u0440", "\u0420", "\u03c1", "\uff50", "\U0001d429"],
    "r": ["r", "R", "\uff52"],
    "o": ["o", "O", "\u043e", "\u041e", "\u03bf", "\uff4f", "0"],
    "d": ["d", "D", "\u0501", "\uff44"],
    "u": ["u", "U", "\uff55"],
    "c": ["c", "C", "\u0441", "\uff43"],
    "t": ["t", "T", "\uff54"],
    "i": ["i", "I", "\u0456", "\uff49"],
    "n": ["n", "N", "\uff4e"],
}
INVISIBLE = ["", "", "", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]


@st.composite
def evaded(draw: st.DrawFn, word: str) -> str:
    out = []
    for ch in word:
        glyph = draw(st.sampled_from(HOMOGLYPHS.get(ch, [ch])))
        if glyph.isascii() and draw(st.integers(0, 3)) == 0:
            glyph = f"%{ord(glyph):02X}"  # percent-encoded letter
        out.append(glyph + draw(st.sampled_from(INVISIBLE)))
    return "".join(out)


settings_ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings_
@given(value=st.one_of(evaded("prod"), evaded("production")))
def test_evaded_label_is_refused(value: str) -> None:
    doc = {"targets": [{"name": "db", "labels": {"env": value}}]}
    assert find_forbidden(doc), value


@settings_
@given(label=st.one_of(evaded("prod"), evaded("production")))
def test_evaded_url_host_is_refused(label: str) -> None:
    doc = {"configuration": {"api_url": f"https://api.{label}.example.com/v1"}}
    assert find_forbidden(doc), label


@settings_
@given(
    word=st.sampled_from(
        [
            "product",
            "products",
            "reproduce",
            "productivity",
            "prodigy",
            "producer",
            "byproduct",
            "nonprod",
            "preprod",
            "non-prod",
            "pre-prod",
        ]
    ),
    upper=st.booleans(),
    suffix=st.sampled_from(["", "-eu", ".example.com", "-service"]),
)
def test_words_containing_prod_letters_pass(word: str, upper: bool, suffix: str) -> None:
    value = (word.upper() if upper else word) + suffix
    doc = {"configuration": {"service": value, "url": f"http://{value.lower().replace('-', '')}.test/"}}
    assert find_forbidden(doc) == [], value
