"""Production names, however spelled, are refused in every place of an experiment; ordinary words are not."""

from __future__ import annotations

import pytest
from redteam_corpus import FLAG_FORMS, ORDINARY_WORDS, PLACEMENTS, PRODUCTION_NAMES, placed

from faultplane.core.policy import ForbiddenRules, Policy, evaluate, find_forbidden
from faultplane.core.targets import production_reason, production_word, skeleton


@pytest.mark.parametrize("name", PRODUCTION_NAMES)
def test_production_reason_names_every_spelling(name: str) -> None:
    assert production_reason(name), name


@pytest.mark.parametrize("word", ORDINARY_WORDS)
def test_ordinary_words_are_not_production(word: str) -> None:
    assert production_reason(word) is None, word


@pytest.mark.parametrize("command", FLAG_FORMS)
def test_flag_forms_name_production(command: str) -> None:
    assert production_reason(command), command


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("name", PRODUCTION_NAMES)
def test_every_placement_refuses_every_spelling(placement: str, name: str) -> None:
    doc = placed(placement, name)
    decision = evaluate(doc, policy=Policy(), store=None)
    assert not decision.allowed
    assert any(v.rule.startswith("forbidden") for v in decision.violations), decision.violations


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("word", ORDINARY_WORDS)
def test_ordinary_words_pass_in_every_placement(placement: str, word: str) -> None:
    assert find_forbidden(placed(placement, word)) == [], word


@pytest.mark.parametrize("name", ["prod1", "proddb", "\u0440rod", "prod.example.com"])
def test_no_allow_pattern_disables_the_production_floor(name: str) -> None:
    rules = ForbiddenRules(allow=["*", name, "prod*"], words=[], labels={})
    assert find_forbidden(placed("method-argv", name), rules)


def test_a_secret_never_appears_in_the_refusal() -> None:
    doc = placed("secret-keyword-dsn", "proddb")
    doc["secrets"]["db"]["dsn"] += " password=hunter2"
    (v,) = find_forbidden(doc, secret_values=[doc["secrets"]["db"]["dsn"]])
    assert "hunter2" not in str(v) and "secret" in v.message


def test_skeleton_uses_the_unicode_table() -> None:
    # Cherokee and Armenian look-alikes are in Unicode's table, not in any hand-written Latin list
    assert skeleton("\u13e2\u0433\u0585\u0501") == "prod" == skeleton("\u2ca3\u1d26\u0585\u0501")
    assert production_word("produseast1") and not production_word("productivity")


@pytest.mark.parametrize(
    ("text", "reading"),
    [("ordersPRODcluster", "orders-prod-cluster"), ("PRODuct", "prod-uct"), ("my%50rodDb", "my-prod-db")],
)
def test_a_case_hump_is_a_sub_word_boundary(text: str, reading: str) -> None:
    # an upper-case run followed by lower case also reads as its own word; escapes are decoded first
    assert production_reason(text) == f"'prod' in {reading!r}"


def test_the_run_judge_keeps_what_it_learnt_and_still_reads_humps() -> None:
    from faultplane.core.policy import ForbiddenJudge

    judge = ForbiddenJudge()
    clean, dirty = placed("method-argv", "ProductCatalog"), placed("secret-dsn", "myProdDb.internal")
    for _ in range(2):  # the second pass answers from the judge's memo, and must answer the same
        assert judge(clean) == []
        (v,) = judge(dirty)
        assert v.field.startswith("secrets") and "myProdDb" not in v.message
