"""Kubernetes faults through the official client: delete/kill pods by label selector with a blast radius,
scale a deployment, partition pods with a NetworkPolicy.

Untested against a real cluster in this repository (no cluster in CI): the selection logic, the label
selector parser and the NetworkPolicy builder are pure functions with unit tests; the API calls follow the
official client's documented methods. See docs/drivers.md.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from faultplane.core.splitting import split_outside_parens
from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.leases import leased_revert, revert_recipe

__all__ = ["build_network_policy", "parse_label_selector", "select_pods"]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KEY = r"(?P<key>[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?)"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


# --- pure functions (unit-tested) -----------------------------------------------------------------------------


def parse_label_selector(selector: str) -> dict[str, Any]:
    """A label selector string -> a LabelSelector object (matchLabels/matchExpressions), as a NetworkPolicy's
    podSelector needs. Supports ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``."""
    labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    for part in (p.strip() for p in split_outside_parens(selector)):
        if m := re.fullmatch(rf"{_KEY}\s+(?P<op>in|notin)\s+\((?P<values>.*)\)", part):
            values = [v.strip() for v in m["values"].split(",") if v.strip()]
            if not values or not all(re.fullmatch(_VALUE, v) for v in values):
                raise DriverError(f"label_selector: bad value list in {part!r}")
            op = "In" if m["op"] == "in" else "NotIn"
            exprs.append({"key": m["key"], "operator": op, "values": values})
        elif m := re.fullmatch(rf"{_KEY}\s*!=\s*(?P<value>{_VALUE})", part):
            exprs.append({"key": m["key"], "operator": "NotIn", "values": [m["value"]]})
        elif m := re.fullmatch(rf"{_KEY}\s*==?\s*(?P<value>{_VALUE})", part):
            labels[m["key"]] = m["value"]
        elif m := re.fullmatch(rf"!\s*{_KEY}", part):
            exprs.append({"key": m["key"], "operator": "DoesNotExist"})
        elif m := re.fullmatch(_KEY, part):
            exprs.append({"key": m["key"], "operator": "Exists"})
        else:
            raise DriverError(f"label_selector: cannot parse {part!r} (use k=v, k!=v, k in (a,b), k, !k)")
    if not labels and not exprs:
        raise DriverError("label_selector: empty selector would match every pod; name the pods to target")
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    if exprs:
        out["matchExpressions"] = exprs
    return out


def select_pods(
    pods: list[dict[str, Any]], *, count: int | None, percentage: float | None, rng: Any
) -> list[dict[str, Any]]:
    """Live pods (not already terminating), sorted by name, narrowed to the blast radius."""
    live = sorted((p for p in pods if not p.get("deletion_timestamp")), key=lambda p: p["name"])
    return select_targets(live, count=count, percentage=percentage, rng=rng)


def build_network_policy(
    name: str,
    pod_selector: dict[str, Any],
    direction: Literal["ingress", "egress", "both"],
    allow_dns: bool = True,
) -> dict[str, Any]:
    """A deny-all NetworkPolicy for the selected pods (egress to DNS optionally kept)."""
    types = {"ingress": ["Ingress"], "egress": ["Egress"], "both": ["Ingress", "Egress"]}[direction]
    spec: dict[str, Any] = {"podSelector": pod_selector, "policyTypes": types}
    if "Ingress" in types:
        spec["ingress"] = []
    if "Egress" in types:
        spec["egress"] = (
            [{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
            if allow_dns
            else []
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "faultplane"}},
        "spec": spec,
    }


# --- client ---------------------------------------------------------------------------------------------------


class _Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str = Field(default="default", pattern=_NAME.pattern)
    kubeconfig: str | None = Field(
        default=None, description="kubeconfig path (default: $KUBECONFIG or ~/.kube)"
    )
    context: str | None = Field(default=None, description="kubeconfig context (default: current)")
    in_cluster: bool = Field(default=False, description="use the pod's service account")


def _api(c: dict[str, Any]) -> Any:
    from kubernetes import client, config

    try:
        if c.get("in_cluster"):
            config.load_incluster_config()
            return client.ApiClient()
        return config.new_client_from_config(config_file=c.get("kubeconfig"), context=c.get("context"))
    except Exception as exc:  # the client raises ConfigException, FileNotFoundError, TypeError...
        raise DriverError(f"kubeconfig: cannot load a Kubernetes configuration: {exc}") from None


def _cluster_args(p: _Cluster) -> dict[str, Any]:
    return {"kubeconfig": p.kubeconfig, "context": p.context, "in_cluster": p.in_cluster}


def _api_error(what: str, exc: Exception) -> DriverError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    return DriverError(f"kubernetes {what}: {status or ''} {reason}".strip())


def _list_pods(p: _Cluster, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client

    core = client.CoreV1Api(_api(_cluster_args(p)))
    try:
        items = core.list_namespaced_pod(p.namespace, label_selector=selector).items
    except Exception as exc:
        raise _api_error(f"list pods in {p.namespace}", exc) from None
    return [
        {
            "name": i.metadata.name,
            "phase": i.status.phase if i.status else None,
            "deletion_timestamp": i.metadata.deletion_timestamp,
            "node": i.spec.node_name if i.spec else None,
        }
        for i in items
        if i.metadata is not None
    ]


# --- pods -----------------------------------------------------------------------------------------------------


class PodParams(_Cluster, BlastRadius):
    label_selector: str = Field(description="e.g. app=web,tier in (frontend)")
    grace_period_seconds: int | None = Field(default=None, ge=0, le=3600)


def _delete_pods(ctx: ActivityContext, p: PodParams, grace: int | None) -> dict[str, Any]:
    from kubernetes import client

    parse_label_selector(p.label_selector)  # refuse an empty or malformed selector before any call
    pods = _list_pods(p, p.label_selector)
    if not pods:
        raise DriverError(f"label_selector: no pod in namespace {p.namespace!r} matches {p.label_selector!r}")
    chosen = select_pods(pods, count=p.count, percentage=p.percentage, rng=ctx.rng)
    core = client.CoreV1Api(_api(_cluster_args(p)))
    deleted = []
    for pod in chosen:
        try:
            core.delete_namespaced_pod(pod["name"], p.namespace, grace_period_seconds=grace)
            deleted.append(pod["name"])
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                continue
            raise _api_error(f"delete pod {pod['name']}", exc) from None
    return {"matched": len(pods), "deleted": deleted}


@action("kubernetes", "delete_pods", PodParams, fault_type="error")
async def delete_pods(ctx: ActivityContext, p: PodParams) -> dict[str, Any]:
    """Delete pods matching the selector (blast radius: count or percentage). Their controllers recreate
    them: there is nothing to revert."""
    return await anyio.to_thread.run_sync(_delete_pods, ctx, p, p.grace_period_seconds)


@action("kubernetes", "kill_pods", PodParams, fault_type="error")
async def kill_pods(ctx: ActivityContext, p: PodParams) -> dict[str, Any]:
    """Delete matching pods with grace period 0 (an abrupt kill). Nothing to revert."""
    return await anyio.to_thread.run_sync(_delete_pods, ctx, p, 0)


# --- deployments ----------------------------------------------------------------------------------------------


def _scale(args: dict[str, Any], replicas: int) -> int:
    """Set replicas; return the previous count."""
    from kubernetes import client

    apps = client.AppsV1Api(_api(args))
    try:
        scale = apps.read_namespaced_deployment_scale(args["name"], args["namespace"])
        current = scale.spec.replicas if scale.spec else 0
        apps.patch_namespaced_deployment_scale(
            args["name"], args["namespace"], {"spec": {"replicas": replicas}}
        )
    except Exception as exc:
        raise _api_error(f"scale deployment {args['namespace']}/{args['name']}", exc) from None
    return int(current or 0)


@revert_recipe("kubernetes", "scale")
def _recipe_scale(args: dict[str, Any]) -> None:
    _scale(args, int(args["replicas"]))


class ScaleParams(_Cluster):
    name: str = Field(pattern=_NAME.pattern, description="deployment name")
    replicas: int = Field(ge=0, le=10_000)


@action("kubernetes", "scale_deployment", ScaleParams, fault_type="resource_exhaustion")
async def scale_deployment(ctx: ActivityContext, p: ScaleParams) -> dict[str, Any]:
    """Scale a deployment (e.g. to 0); rollback scales it back to its previous replica count."""
    from kubernetes import client

    base = {**_cluster_args(p), "namespace": p.namespace, "name": p.name}

    def current() -> int:
        apps = client.AppsV1Api(_api(base))
        try:
            scale = apps.read_namespaced_deployment_scale(p.name, p.namespace)
            return int(scale.spec.replicas or 0) if scale.spec else 0
        except Exception as exc:
            raise _api_error(f"read deployment {p.namespace}/{p.name}", exc) from None

    before = await anyio.to_thread.run_sync(current)
    leased_revert(
        ctx,
        label=f"kubernetes: scale {p.namespace}/{p.name} back to {before}",
        driver="kubernetes",
        revert="scale",
        args={**base, "replicas": before},
    )
    await anyio.to_thread.run_sync(_scale, base, p.replicas)
    return {"deployment": p.name, "from": before, "to": p.replicas}


# --- network partition ----------------------------------------------------------------------------------------


@revert_recipe("kubernetes", "delete_network_policy")
def _recipe_delete_policy(args: dict[str, Any]) -> None:
    from kubernetes import client

    net = client.NetworkingV1Api(_api(args))
    try:
        net.delete_namespaced_network_policy(args["name"], args["namespace"])
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            raise _api_error(f"delete network policy {args['name']}", exc) from None


class PartitionParams(_Cluster):
    label_selector: str = Field(description="pods to cut off, e.g. app=payments")
    direction: Literal["ingress", "egress", "both"] = "both"
    allow_dns: bool = Field(default=True, description="keep egress to port 53 so the pods can still resolve")


@action("kubernetes", "partition", PartitionParams, fault_type="network_partition")
async def partition(ctx: ActivityContext, p: PartitionParams) -> dict[str, Any]:
    """Cut the selected pods off with a deny-all NetworkPolicy (needs a CNI that enforces policies);
    rollback deletes the policy."""
    from kubernetes import client

    selector = parse_label_selector(p.label_selector)
    name = f"faultplane-partition-{uuid.uuid4().hex[:8]}"
    body = build_network_policy(name, selector, p.direction, p.allow_dns)
    base = {**_cluster_args(p), "namespace": p.namespace, "name": name}
    leased_revert(
        ctx,
        label=f"kubernetes: delete network policy {p.namespace}/{name}",
        driver="kubernetes",
        revert="delete_network_policy",
        args=base,
    )

    def create() -> None:
        net = client.NetworkingV1Api(_api(base))
        try:
            net.create_namespaced_network_policy(p.namespace, body)  # type: ignore[arg-type]  # dict bodies are accepted
        except Exception as exc:
            raise _api_error(f"create network policy {name}", exc) from None

    await anyio.to_thread.run_sync(create)
    return {"network_policy": name, "spec": body["spec"]}


# --- probes ---------------------------------------------------------------------------------------------------


class PodsProbeParams(_Cluster):
    label_selector: str = ""


@probe("kubernetes", "pods", PodsProbeParams)
def pods(ctx: ActivityContext, p: PodsProbeParams) -> list[dict[str, Any]]:
    """Pods in the namespace matching the selector: name, phase, node."""
    return [
        {k: v for k, v in pod.items() if k != "deletion_timestamp"}
        | {"terminating": bool(pod["deletion_timestamp"])}
        for pod in _list_pods(p, p.label_selector)
    ]


class DeploymentParams(_Cluster):
    name: str = Field(pattern=_NAME.pattern)


@probe("kubernetes", "deployment_ready", DeploymentParams)
def deployment_ready(ctx: ActivityContext, p: DeploymentParams) -> dict[str, int]:
    """Desired vs ready replicas of a deployment."""
    from kubernetes import client

    apps = client.AppsV1Api(_api(_cluster_args(p)))
    try:
        d = apps.read_namespaced_deployment(p.name, p.namespace)
    except Exception as exc:
        raise _api_error(f"read deployment {p.namespace}/{p.name}", exc) from None
    replicas = int(d.spec.replicas or 0) if d.spec else 0
    return {"replicas": replicas, "ready": int(d.status.ready_replicas or 0) if d.status else 0}
