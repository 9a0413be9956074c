"""Forbidden targets: production named anywhere in the experiment is refused, however it is spelled."""

from __future__ import annotations

from typing import Any

import pytest
from guard_helpers import base_experiment

from faultplane.core.policy import ForbiddenRules, Policy, evaluate, find_forbidden, normalize_text

CYR_P = "\u0440"  # Cyrillic small er, looks like p
CYR_O = "\u043e"  # Cyrillic small o
GREEK_RHO = "\u03c1"
GREEK_OMICRON = "\u03bf"
ZWSP = "\u200b"
ZWJ = "\u200d"
SOFT_HYPHEN = "\u00ad"


def _target(**labels: str) -> dict[str, Any]:
    return {
        "targets": [{"name": "payment-db", "driver": "process", "labels": {"service": "payment", **labels}}]
    }


def _action(provider: dict[str, Any]) -> dict[str, Any]:
    return {"method": [{"type": "action", "name": "inject", "provider": provider}]}


def _process(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    provider: dict[str, Any] = {"type": "process", "path": "/usr/bin/env", "arguments": list(args)}
    if env:
        provider["env"] = env
    return _action(provider)


def _http(url: str, **extra: Any) -> dict[str, Any]:
    return _action({"type": "http", "url": url, **extra})


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    # labels on targets
    ("env-production", _target(env="production"), "forbidden.labels.env"),
    ("env-prod", _target(env="prod"), "forbidden.labels.env"),
    ("env-PROD-upper", _target(env="PROD"), "forbidden.labels.env"),
    ("env-Production-mixed", _target(env="PrOdUcTiOn"), "forbidden.labels.env"),
    ("env-prod-eu", _target(env="prod-eu"), "forbidden.labels.env"),
    ("env-padded", _target(env="  production  "), "forbidden.labels.env"),
    ("environment-key", _target(environment="Production"), "forbidden.labels.env"),
    ("ENV-key-upper", _target(ENV="prod"), "forbidden.labels.env"),
    ("deploy-env-key", _target(deploy_env="prod"), "forbidden.labels.env"),
    ("k8s-style-key", _target(**{"app.kubernetes.io/env": "production"}), "forbidden.labels.env"),
    ("tier-prod", _target(tier="prod"), "forbidden.labels.env"),
    ("cluster-prod-star", _target(cluster="prod-eu-1"), "forbidden.labels.cluster"),
    ("cluster-prodeu", _target(cluster="prodeu"), "forbidden.labels.cluster"),
    ("cluster-Prod2", _target(cluster="Prod2"), "forbidden.labels.cluster"),
    ("kube-context", _target(kube_context="prod-gke"), "forbidden.labels.cluster"),
    ("namespace-prod-dash", _target(namespace="prod-payments"), "forbidden.labels.namespace"),
    ("namespace-production", _target(namespace="production"), "forbidden.labels.namespace"),
    ("production-true", _target(production="true"), "forbidden.labels.production"),
    ("production-TRUE", _target(production="TRUE"), "forbidden.labels.production"),
    ("production-yes", _target(production="yes"), "forbidden.labels.production"),
    ("is-prod-1", _target(is_prod="1"), "forbidden.labels.production"),
    (
        "production-bool",
        {"targets": [{"name": "x", "labels": {}, "selector": {"production": True}}]},
        "forbidden.labels.production",
    ),
    # unicode look-alikes and invisible characters
    ("cyrillic-p", _target(env=f"{CYR_P}rod"), "forbidden.labels.env"),
    ("cyrillic-o", _target(env=f"pr{CYR_O}duction"), "forbidden.labels.env"),
    ("cyrillic-both", _target(env=f"{CYR_P}r{CYR_O}d"), "forbidden.labels.env"),
    ("greek-rho-omicron", _target(env=f"{GREEK_RHO}r{GREEK_OMICRON}d"), "forbidden.labels.env"),
    ("fullwidth", _target(env="\uff50\uff52\uff4f\uff44"), "forbidden.labels.env"),
    ("math-bold", _target(env="\U0001d429\U0001d42b\U0001d428\U0001d41d"), "forbidden.labels.env"),
    ("zero-width-space", _target(env=f"pr{ZWSP}od"), "forbidden.labels.env"),
    ("zero-width-joiner", _target(env=f"p{ZWJ}rod{ZWJ}uction"), "forbidden.labels.env"),
    ("soft-hyphen", _target(env=f"pro{SOFT_HYPHEN}d"), "forbidden.labels.env"),
    ("combining-accent", _target(env="pro\u0301d"), "forbidden.labels.env"),
    ("precomposed-accent", _target(env="pr\u00f3duction"), "forbidden.labels.env"),
    ("cyrillic-capital", _target(env="\u0420ROD"), "forbidden.labels.env"),
    (
        "cyrillic-in-key",
        _target(**{f"{CYR_O}env".replace(CYR_O, ""): f"{CYR_P}roduction"}),
        "forbidden.labels.env",
    ),
    ("leet-zero", _target(env="pr0d"), "forbidden.labels.env"),
    # nested configuration
    ("config-env", {"configuration": {"env": "production"}}, "forbidden.labels.env"),
    (
        "config-nested-deep",
        {"configuration": {"db": {"primary": {"labels": {"env": "Prod"}}}}},
        "forbidden.labels.env",
    ),
    (
        "config-list",
        {"configuration": {"clusters": [{"name": "a"}, {"cluster": "prod-1"}]}},
        "forbidden.labels.cluster",
    ),
    ("config-key-named-prod", {"configuration": {"prod_db_host": "10.0.0.1"}}, "forbidden.words"),
    ("config-camel-case", {"configuration": {"target": "paymentsProdDb"}}, "forbidden.words"),
    ("config-word-in-path", {"configuration": {"kubeconfig": "/etc/kube/prod/config"}}, "forbidden.words"),
    ("config-prd", {"configuration": {"site": "prd-eu"}}, "forbidden.words"),
    ("tags", {"tags": ["payment", "production"]}, "forbidden.words"),
    (
        "target-name",
        {"targets": [{"name": "prod-payment-db", "labels": {"env": "staging"}}]},
        "forbidden.words",
    ),
    ("target-name-suffix", {"targets": [{"name": "payments-prod", "labels": {}}]}, "forbidden.words"),
    # URL hosts and host names
    ("url-host-label", _http("https://api.prod.example.com/charge"), "forbidden.hosts"),
    ("url-host-prefix", _http("http://prod-api.internal:8080/"), "forbidden.hosts"),
    ("url-host-production", _http("https://payments.production.acme.io"), "forbidden.hosts"),
    ("url-host-upper", _http("HTTPS://API.PROD.EXAMPLE.COM/"), "forbidden.hosts"),
    ("url-userinfo", _http("https://user:pw@prod-db.example.com/"), "forbidden.hosts"),
    ("url-percent-host", _http("https://%70rod.example.com/"), "forbidden.hosts"),
    ("url-double-percent", _http("https://%2570rod.example.com/"), "forbidden.hosts"),
    (
        "url-idna-cyrillic",
        _http("https://" + f"{CYR_P}rod.example.com".encode("idna").decode() + "/"),
        "forbidden.hosts",
    ),
    ("url-unicode-host", _http(f"https://{CYR_P}r{CYR_O}d.example.com/"), "forbidden.hosts"),
    (
        "url-in-headers",
        _http("http://127.0.0.1:1/", headers={"Host": "api.prod.example.com"}),
        "forbidden.hosts",
    ),
    ("url-query-target", _http("http://127.0.0.1:1/proxy?upstream=prod-db.internal"), "forbidden.hosts"),
    (
        "url-query-encoded",
        _http("http://127.0.0.1:1/proxy?upstream=https%3A%2F%2Fapi.prod.example.com"),
        "forbidden.hosts",
    ),
    ("host-config", {"configuration": {"db_host": "prod-db.internal"}}, "forbidden.hosts"),
    ("host-port", {"configuration": {"dsn": "postgresql://app@prod-db:5432/payments"}}, "forbidden.hosts"),
    ("host-bare-key", {"configuration": {"host": "prod-db"}}, "forbidden.hosts"),
    ("host-fqdn-value", {"configuration": {"upstream": "db.prod.internal"}}, "forbidden.hosts"),
    (
        "prometheus-url",
        {
            "slo_gates": [
                {
                    "name": "p",
                    "sli": "prometheus",
                    "rollback_on": "prometheus > 1 for 5s",
                    "prometheus": {"url": "http://prometheus.prod.svc:9090", "query": "up"},
                }
            ]
        },
        "forbidden.hosts",
    ),
    # process arguments and environment variables
    (
        "argv-namespace-flag",
        _process("kubectl", "delete", "pod", "-n", "prod-payments"),
        "forbidden.labels.namespace",
    ),
    (
        "argv-long-flag",
        _process("kubectl", "--namespace", "production", "get", "pods"),
        "forbidden.labels.namespace",
    ),
    (
        "argv-flag-equals",
        _process("kubectl", "--context=prod-gke", "get", "pods"),
        "forbidden.labels.cluster",
    ),
    ("argv-env-flag", _process("deploy", "--env", "Production"), "forbidden.labels.env"),
    ("argv-selector", _process("kubectl", "get", "pods", "-l", "app=pay,env=prod"), "forbidden.labels.env"),
    (
        "argv-selector-in",
        _process("kubectl", "get", "pods", "-l", "env in (staging, prod)"),
        "forbidden.labels.env",
    ),
    (
        "argv-string",
        _action({"type": "process", "path": "sh", "arguments": "-c 'kubectl -n prod-a delete pod x'"}),
        "forbidden.labels.namespace",
    ),
    (
        "argv-quoted-split",
        _action({"type": "process", "path": "sh", "arguments": "-c \"kubectl -n pr''od\""}),
        "forbidden",
    ),
    ("argv-word", _process("ssh", "bastion", "systemctl", "stop", "payments@prod"), "forbidden.words"),
    ("env-var-value", _process("run.sh", env={"DEPLOY_ENV": "production"}), "forbidden.labels.env"),
    ("env-var-url", _process("run.sh", env={"API_URL": "https://api.prod.example.com"}), "forbidden.hosts"),
    ("env-var-inline-kv", _process("env", "ENVIRONMENT=prod", "./run.sh"), "forbidden.labels.env"),
    ("env-var-name", _process("run.sh", env={"PROD_TOKEN": "x"}), "forbidden.words"),
    (
        "python-arguments",
        _action({"type": "python", "module": "m", "func": "f", "arguments": {"target": {"env": "prod"}}}),
        "forbidden.labels.env",
    ),
    (
        "driver-arguments",
        _action(
            {
                "type": "driver",
                "driver": "postgres",
                "name": "latency",
                "arguments": {"host": "prod-db.internal", "ms": 200},
            }
        ),
        "forbidden.hosts",
    ),
    (
        "http-body",
        _http("http://127.0.0.1:1/faults", method="POST", arguments={"cluster": "prod-eu"}),
        "forbidden.labels.cluster",
    ),
    (
        "rollback-action",
        {
            "rollbacks": [
                {
                    "type": "action",
                    "name": "undo",
                    "provider": {"type": "http", "url": "https://prod.example.com/undo"},
                }
            ]
        },
        "forbidden.hosts",
    ),
    (
        "hypothesis-probe",
        {
            "steady-state-hypothesis": {
                "title": "t",
                "probes": [
                    {
                        "type": "probe",
                        "name": "p",
                        "provider": {"type": "http", "url": "https://status.prod.example.com"},
                    }
                ],
            }
        },
        "forbidden.hosts",
    ),
    ("label-html-entity", _target(env="&#112;rod"), "forbidden.labels.env"),
    ("label-percent", _target(env="%50ROD"), "forbidden.labels.env"),
    ("load-target", {"load": {"url": "https://shop.prod.example.com/", "rps": 10}}, "forbidden.hosts"),
]


@pytest.mark.parametrize(("patch", "rule"), [(p, r) for _, p, r in REFUSED], ids=[c[0] for c in REFUSED])
def test_production_is_refused(patch: dict[str, Any], rule: str) -> None:
    doc = base_experiment(**patch)
    decision = evaluate(doc, policy=Policy(), store=None)
    assert not decision.allowed
    rules = [v.rule for v in decision.violations]
    assert any(r.startswith(rule) for r in rules), rules
    forbidden = [v for v in decision.violations if v.rule.startswith("forbidden")]
    assert forbidden[0].fix and forbidden[0].field != "(experiment)"


ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("staging", _target(env="staging")),
    ("product-service", _target(service="product-catalog")),
    ("cluster-products", _target(cluster="products-eu")),
    ("cluster-productivity", _target(cluster="productivity")),
    ("namespace-product", _target(namespace="product")),
    ("non-prod", _target(env="non-prod")),
    ("nonprod", _target(env="nonprod")),
    ("pre-prod", _target(env="pre-prod")),
    ("preprod", _target(env="preprod")),
    ("production-false", _target(production="false")),
    ("is-prod-no", _target(is_prod="no")),
    (
        "words-in-config",
        {
            "configuration": {
                "step": "reproduce the bug",
                "kind": "by-product",
                "who": "producer",
                "q": "prodigy",
                "p": "products",
            }
        },
    ),
    ("url-product-host", _http("http://product.example.com/api")),
    ("url-productivity", _http("https://productivity.internal/metrics")),
    ("url-path-production-word-not-host", _http("http://127.0.0.1:1/reproduce")),
    ("loopback", _http("http://127.0.0.1:8080/health")),
    ("localhost", _http("http://localhost:8080/health")),
    ("description-prose", {"description": "Reproduces a production incident against staging"}),
    ("title-prose", {"title": "What production saw on Friday, replayed on staging"}),
    (
        "activity-name",
        {
            "method": [
                {
                    "type": "action",
                    "name": "prod-like-latency",
                    "provider": {"type": "process", "path": "true"},
                }
            ]
        },
    ),
    ("selector-not-equal", _process("kubectl", "get", "pods", "-l", "env!=prod")),
    ("selector-notin", _process("kubectl", "get", "pods", "-l", "env notin (prod,production)")),
    ("staging-host", _http("https://api.staging.example.com/")),
    ("prodigy-host", {"configuration": {"db_host": "prodigy.example.com"}}),
    ("estimate-prose", {"estimate": {"impact": "like production, p99 up 200ms"}}),
]


@pytest.mark.parametrize("patch", [p for _, p in ALLOWED], ids=[c[0] for c in ALLOWED])
def test_lookalike_words_are_not_production(patch: dict[str, Any]) -> None:
    doc = base_experiment(**patch)
    decision = evaluate(doc, policy=Policy(), store=None)
    assert decision.allowed, [str(v) for v in decision.violations]


def test_env_reference_in_configuration_is_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base_experiment(configuration={"api_url": {"type": "env", "key": "FP_TEST_API_URL"}})
    monkeypatch.setenv("FP_TEST_API_URL", "https://api.prod.example.com")
    refused = find_forbidden(doc)
    assert refused and refused[0].rule == "forbidden.hosts"
    assert refused[0].field == "configuration.api_url.$FP_TEST_API_URL"
    monkeypatch.setenv("FP_TEST_API_URL", "http://127.0.0.1:8080")
    assert find_forbidden(doc) == []


def test_secret_values_are_never_read_or_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP_TEST_PG_PASSWORD", "production-password")
    doc = base_experiment(secrets={"payment": {"password": {"type": "env", "key": "FP_TEST_PG_PASSWORD"}}})
    assert find_forbidden(doc) == []


def test_every_place_is_reported_once() -> None:
    doc = base_experiment(
        targets=[{"name": "db", "labels": {"env": "prod", "cluster": "prod-1"}}],
        configuration={"url": "https://api.prod.example.com"},
    )
    fields = [v.field for v in find_forbidden(doc)]
    assert fields == ["configuration.url", "targets[0].labels.env", "targets[0].labels.cluster"]
    assert len(set(fields)) == len(fields)


def test_violation_names_rule_field_and_fix() -> None:
    doc = base_experiment(**_target(env="Pr\u043eduction"))
    (v,) = find_forbidden(doc)
    assert v.rule == "forbidden.labels.env"
    assert v.field == "targets[0].labels.env"
    assert "production" in v.message and "forbidden.allow" in v.fix


def test_allow_list_exempts_a_policy_word_but_never_the_production_floor() -> None:
    doc = base_experiment(configuration={"site": "live-demo"})
    words = [*ForbiddenRules().words, "live"]
    assert find_forbidden(doc, ForbiddenRules(words=words))
    assert find_forbidden(doc, ForbiddenRules(words=words, allow=["live-demo"])) == []
    prod = base_experiment(**_target(env="prod-like-staging"))
    assert find_forbidden(prod)
    assert find_forbidden(prod, ForbiddenRules(allow=["prod-like-staging", "prod*", "*"]))


def test_extra_words_from_the_policy() -> None:
    doc = base_experiment(configuration={"site": "live-eu"})
    assert find_forbidden(doc) == []
    rules = ForbiddenRules(words=[*ForbiddenRules().words, "live"])
    assert [v.rule for v in find_forbidden(doc, rules)] == ["forbidden.words"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Pr\u043eduction", "production"),
        (f"{CYR_P}rod", "prod"),
        ("p\u200bro\u200dd", "prod"),
        ("%70%72od", "prod"),
        ("\uff30\uff32\uff2f\uff24", "prod"),
        ("isProd", "isprod"),
        ("PrOdUcTiOn", "production"),
        ("Product", "product"),
        ("pr\u00f3d", "prod"),
    ],
)
def test_normalize_text(text: str, expected: str) -> None:
    assert normalize_text(text) == expected


def test_camel_case_humps_split_on_request() -> None:
    # a hump is a sub-word boundary like `-`, so a host stays one host: my-prod-db.internal
    assert normalize_text("isProd", camel=True) == "is-prod"
    assert normalize_text("paymentsProdDb", camel=True) == "payments-prod-db"
    assert normalize_text("myProdDb.internal", camel=True) == "my-prod-db.internal"
    assert normalize_text("ProductCatalog", camel=True) == "product-catalog"
    assert normalize_text("production", camel=True) == "production"


def test_an_acronym_run_is_read_both_ways() -> None:
    from faultplane.core.policy import camel_forms

    assert "orders-prod-cluster" in camel_forms("ordersPRODcluster")
    assert "http-server" in camel_forms("HTTPServer")
    assert camel_forms("product") == camel_forms("Product") == ()
    # a Cyrillic capital ER is a hump too, and maps to Latin p
    assert "eu-prod-cluster" in camel_forms("eu\u0420rodCluster")


def test_refused_before_anything_runs_lists_every_violation() -> None:
    doc = base_experiment(slo_gates=None, **_target(env="prod"))
    decision = evaluate(doc, policy=Policy(), store=None)
    rules = {v.rule for v in decision.violations}
    assert {"forbidden.labels.env", "gates.required"} <= rules
    assert "REFUSED" in decision.summary()
