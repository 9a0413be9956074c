"""Kubernetes: what can be checked without a cluster — selection, selector parsing, policy building,
parameter validation and the error when no cluster is configured. (No real cluster here; see docs.)"""

from __future__ import annotations

import random

import pytest

from faultplane.drivers.base import ActivityContext, DriverError, get_activity, list_activities
from faultplane.drivers.kubernetes import build_network_policy, parse_label_selector, select_pods

pytestmark = [pytest.mark.timeout(30)]


def test_selector_parser_covers_the_kubernetes_syntax() -> None:
    assert parse_label_selector("app=web,tier in (a, b),env!=prod,canary,!legacy,x==y") == {
        "matchLabels": {"app": "web", "x": "y"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "canary", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert parse_label_selector("app.kubernetes.io/name=api") == {
        "matchLabels": {"app.kubernetes.io/name": "api"}
    }
    for bad in ("", "a=b,,=c", "tier in ()", "a=b c"):
        with pytest.raises(DriverError, match="label_selector"):
            parse_label_selector(bad)


def test_select_pods_skips_terminating_and_respects_blast_radius() -> None:
    pods = [{"name": f"web-{i}", "deletion_timestamp": None} for i in range(10)]
    pods.append({"name": "web-x", "deletion_timestamp": "2024-01-01T00:00:00Z"})
    assert len(select_pods(pods, count=3, percentage=None, rng=random.Random(1))) == 3
    assert len(select_pods(pods, count=None, percentage=25, rng=random.Random(1))) == 3  # ceil(10 * .25)
    assert len(select_pods(pods, count=None, percentage=None, rng=random.Random(1))) == 10
    a = select_pods(pods, count=4, percentage=None, rng=random.Random(42))
    b = select_pods(list(reversed(pods)), count=4, percentage=None, rng=random.Random(42))
    assert a == b  # same seed, same choice, whatever order the API listed them in
    assert all(
        p["name"] != "web-x" for p in select_pods(pods, count=None, percentage=100, rng=random.Random())
    )


def test_network_policy_denies_all_but_dns() -> None:
    sel = parse_label_selector("app=payments")
    pol = build_network_policy("fp", sel, "both")
    assert pol["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert pol["spec"]["ingress"] == []
    assert pol["spec"]["egress"][0]["ports"][0] == {"protocol": "UDP", "port": 53}
    assert build_network_policy("fp", sel, "egress", allow_dns=False)["spec"] == {
        "podSelector": sel,
        "policyTypes": ["Egress"],
        "egress": [],
    }


def test_activities_are_discoverable_with_schemas() -> None:
    names = {a.name: a for a in list_activities("kubernetes")}
    assert {"delete_pods", "kill_pods", "scale_deployment", "partition", "pods", "deployment_ready"} <= set(
        names
    )
    schema = names["delete_pods"].parameters_schema()
    assert "label_selector" in schema["required"] and "percentage" in schema["properties"]


@pytest.mark.anyio
async def test_bad_params_and_missing_cluster_fail_clearly(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext()
    with pytest.raises(DriverError, match=r"arguments\.replicas"):
        await get_activity("kubernetes", "scale_deployment").invoke(ctx, {"name": "web", "replicas": -1})
    with pytest.raises(DriverError, match=r"arguments\.namespace"):
        await get_activity("kubernetes", "delete_pods").invoke(
            ctx, {"namespace": "Bad_NS", "label_selector": "a=b"}
        )
    with pytest.raises(DriverError, match="either count or percentage"):
        await get_activity("kubernetes", "kill_pods").invoke(
            ctx, {"label_selector": "a=b", "count": 1, "percentage": 5}
        )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DriverError, match="kubeconfig: cannot load"):
        await get_activity("kubernetes", "delete_pods").invoke(ctx, {"label_selector": "app=web"})
    with pytest.raises(DriverError, match="label_selector: empty selector"):
        await get_activity("kubernetes", "partition").invoke(ctx, {"label_selector": ""})
    assert ctx.reverts == []
