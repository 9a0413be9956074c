"""Names that select a target are targets (only an activity's or a gate's own title is free text), and secrets
read from the environment are scanned too, without ever showing their value in a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import base_experiment, bash_payload, write_experiment
from test_hook import hook, mcp
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.policy import Policy, evaluate, find_forbidden
from faultplane.engine.lifecycle import execute

pytestmark = pytest.mark.anyio
runner = CliRunner()


def _driver(driver: str, action: str, title: str = "inject", **arguments: Any) -> dict[str, Any]:
    return {
        "type": "action",
        "name": title,
        "provider": {"type": "driver", "driver": driver, "name": action, "arguments": arguments},
    }


def _with(*method: dict[str, Any]) -> dict[str, Any]:
    return base_experiment(targets=None, method=list(method))


# ---- names that select targets -----------------------------------------------------------------------------

PROD_NAMES = [
    "prod-api",
    "production",
    "PROD_API",
    "Prod.Api",
    "api-prod",
    "apiProd",  # camelCase hump
    "\uff50\uff52\uff4f\uff44-api",  # fullwidth letters
    "\u0440rod-api",  # Cyrillic er
    "pr\u200bod-api",  # zero-width space
    "p\u0072\u0301od-api",  # a combining mark
    "prod%2Dapi",  # percent-encoded
    "p&#114;od-api",  # an HTML entity
    "prd-payments",
    "prod1",
]


@pytest.mark.parametrize("name", PROD_NAMES)
def test_process_name_naming_production_is_refused(name: str) -> None:
    doc = _with(_driver("process", "kill", name=name, count=1))
    found = find_forbidden(doc)
    assert [v.field for v in found] == ["method[0].provider.arguments.name"], found


@pytest.mark.parametrize(
    "step",
    [
        _driver("kubernetes", "scale_deployment", name="prod-checkout", namespace="shop", replicas=0),
        _driver("netproxy", "create_route", name="production-db", upstream="127.0.0.1:5432"),
        _driver("kubernetes", "delete_pods", selector={"name": "prod-web"}, namespace="shop"),
        _driver("script", "run", targets=[{"name": "production"}]),
    ],
)
def test_target_names_in_other_drivers_are_refused(step: dict[str, Any]) -> None:
    assert any(v.rule.startswith("forbidden") for v in find_forbidden(_with(step)))


@pytest.mark.parametrize(
    "doc",
    [
        _with(
            _driver("process", "kill", title="kill the prod-like api, production style", name="api", count=1)
        ),
        _with(_driver("process", "kill", name="product-catalog", count=1)),  # `product` is a real word
        _with(_driver("process", "kill", name="non-prod-api", count=1)),  # negated
        _with(_driver("process", "kill", name="reproducer", count=1)),
        base_experiment(
            slo_gates=[
                {"name": "production errors", "sli": "error_rate", "rollback_on": "error_rate > 0.01 for 30s"}
            ]
        ),
    ],
)
def test_titles_and_ordinary_names_stay_allowed(doc: dict[str, Any]) -> None:
    assert find_forbidden(doc) == []


def test_prod_name_is_refused_by_guard_check_and_the_hook(project: Path) -> None:
    doc = _with(_driver("process", "kill", name="prod-api", count=1))
    write_experiment(project, doc, "kill.yaml")
    res = runner.invoke(app, ["guard", "check", "kill.yaml", "--format", "json"])
    assert res.exit_code == 3
    assert "method[0].provider.arguments.name" in [v["field"] for v in json.loads(res.stdout)["violations"]]
    blocked = hook(bash_payload("faultplane run kill.yaml", project))
    assert blocked.returncode == 2 and "arguments.name" in blocked.stderr
    blocked = hook(mcp("chaos_run_experiment", {"experiment": yaml.safe_dump(doc)}, project))
    assert blocked.returncode == 2 and "arguments.name" in blocked.stderr
    # the control (a pause, since any process kill needs a person's approval whatever its target)
    ok = _with(_driver("process", "suspend", name="staging-api", count=1))
    write_experiment(project, ok, "ok.yaml")
    assert runner.invoke(app, ["guard", "check", "ok.yaml"]).exit_code == 0
    assert hook(bash_payload("faultplane run ok.yaml", project)).returncode == 0


async def test_prod_name_is_refused_by_the_engine(project: Path) -> None:
    journal = await execute(_with(_driver("process", "kill", name="\u0440roduction", count=1)))
    assert journal.status == "refused" and journal.run == []
    assert "arguments.name" in (journal.error or "")


# ---- secrets read from the environment -----------------------------------------------------------------------

SECRET_PW = "s3cr3t-Pa55"
PROD_DSN = f"postgresql://payments:{SECRET_PW}@db-01.prod.example.com:5432/payments"


def _secret_doc(**changes: Any) -> dict[str, Any]:
    return base_experiment(secrets={"db": {"dsn": {"type": "env", "key": "FP_TEST_DSN"}}}, **changes)


def _no_secret_in(text: str) -> None:
    assert SECRET_PW not in text and "db-01" not in text and PROD_DSN not in text


def test_a_production_dsn_from_the_environment_is_refused_unseen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP_TEST_DSN", PROD_DSN)
    decision = evaluate(_secret_doc(), policy=Policy(), store=None)
    (v,) = decision.violations
    assert v.rule == "forbidden.hosts" and v.field == "secrets.db.dsn.$FP_TEST_DSN"
    assert "secret" in v.message
    _no_secret_in(json.dumps(decision.to_dict()))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dsn", "postgresql://payments:pw@127.0.0.1:5432/payments"),
        ("password", "production-password"),  # a bare word in a secret is not a target
        ("url", "redis://127.0.0.1:6379/0"),
    ],
)
def test_harmless_secrets_are_allowed(monkeypatch: pytest.MonkeyPatch, key: str, value: str) -> None:
    monkeypatch.setenv("FP_TEST_SECRET", value)
    doc = base_experiment(secrets={"db": {key: {"type": "env", "key": "FP_TEST_SECRET"}}})
    assert evaluate(doc, policy=Policy(), store=None).allowed


@pytest.mark.parametrize(
    "value",
    [
        "postgresql://u:pw@PROD-DB:5432/x",
        "postgresql://u:pw@db.\u0440rod.example:5432/x",
        "host=db.production.internal user=app",
        "env=prod",
    ],
)
def test_secret_evasions_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("FP_TEST_DSN", value)
    decision = evaluate(_secret_doc(), policy=Policy(), store=None)
    assert not decision.allowed
    assert value not in json.dumps(decision.to_dict(), ensure_ascii=False)


async def test_engine_guard_check_and_hook_refuse_a_secret_dsn_without_showing_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FP_TEST_DSN", PROD_DSN)
    # the secret also reaches an argument through `${dsn}`: that finding must not show it either
    doc = _secret_doc(method=[_driver("postgres", "terminate_backends", dsn="${dsn}", count=1)], targets=None)
    write_experiment(project, doc, "dsn.yaml")
    journal = await execute(doc)
    assert journal.status == "refused" and journal.run == []
    assert "secrets.db.dsn" in (journal.error or "")
    _no_secret_in(journal.model_dump_json())
    res = runner.invoke(app, ["guard", "check", "dsn.yaml", "--format", "json"])
    assert res.exit_code == 3
    fields = [v["field"] for v in json.loads(res.stdout)["violations"]]
    assert "secrets.db.dsn.$FP_TEST_DSN" in fields and "method[0].provider.arguments.dsn" in fields
    _no_secret_in(res.output)
    blocked = hook(bash_payload("faultplane run dsn.yaml", project))
    assert blocked.returncode == 2 and "secrets.db.dsn" in blocked.stderr
    _no_secret_in(blocked.stderr)
