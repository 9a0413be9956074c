"""Helpers for the guardrail tests: a valid base experiment, run history in a real store, a degradable service."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from faultplane.core.store import Store
from servers import send_json

BASE: dict[str, Any] = {
    "title": "Payment DB latency",
    "description": "Mimics production traffic patterns against the staging replica",  # prose: never scanned
    "tags": ["payment"],
    "configuration": {"api_url": "http://127.0.0.1:8080", "db_host": "127.0.0.1"},
    "targets": [
        {"name": "payment-db", "driver": "process", "labels": {"env": "staging", "service": "payment"}}
    ],
    "blast_radius": {"percent": 10},
    "slo_gates": [{"name": "errors", "sli": "error_rate", "rollback_on": "error_rate > 0.01 for 30s"}],
    "load": {"url": "http://127.0.0.1:8080/pay", "rate": 20},  # what the error_rate gate reads
    "steady-state-hypothesis": {
        "title": "the API answers",
        "probes": [
            {
                "type": "probe",
                "name": "health",
                "provider": {"type": "http", "url": "http://127.0.0.1:8080/health"},
                "tolerance": 200,
            }
        ],
    },
    "method": [
        {
            "type": "action",
            "name": "slow-db",
            "provider": {"type": "process", "path": "true", "arguments": ["--delay", "200ms"]},
            "pauses": {"after": 1},
        }
    ],
    "rollbacks": [],
}


def base_experiment(**changes: Any) -> dict[str, Any]:
    return _changed(copy.deepcopy(BASE), changes)


def _changed(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`doc` with each key of `changes` set, or dropped where its value is None."""
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def write_experiment(folder: Path, doc: dict[str, Any], name: str = "exp.yaml") -> Path:
    path = folder / name
    if name.endswith(".json"):
        path.write_text(json.dumps(doc), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def hook_payload(tool: str, tool_input: Any, cwd: Path) -> dict[str, Any]:
    """The PreToolUse JSON Claude Code feeds a hook before it calls `tool` with `tool_input` in `cwd`."""
    return {
        "session_id": "s-1",
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
    }


def bash_payload(command: str, cwd: Path) -> dict[str, Any]:
    """`hook_payload` of the Bash tool about to run `command`."""
    return hook_payload("Bash", {"command": command, "description": "run a chaos experiment"}, cwd)


def hook_project(root: Path, prod_env: str = "prod") -> Path:
    """A git project of experiments the hook judges: allowed ones (exp.yaml, experiments/ok.json), one whose
    target is labelled `prod_env` (prod.yaml), a prod URL in its configuration (url.yaml) used through a
    template (templated.yaml), no gates (nogates.yaml), a stage-1 radius (stage1.yaml), and lax.yaml, a policy
    that drops the gate requirement."""
    (root / ".git").mkdir(parents=True)
    (root / "experiments").mkdir()
    write_experiment(root, base_experiment(), "exp.yaml")
    write_experiment(root / "experiments", base_experiment(), "ok.json")
    write_experiment(
        root, base_experiment(targets=[{"name": "db", "labels": {"env": prod_env}}]), "prod.yaml"
    )
    write_experiment(
        root, base_experiment(configuration={"api_url": "https://api.prod.example.com"}), "url.yaml"
    )
    doc = base_experiment()
    doc["method"][0]["provider"] = {"type": "http", "url": "${api_url}/faults"}
    write_experiment(root, doc, "templated.yaml")
    write_experiment(root, base_experiment(slo_gates=None), "nogates.yaml")
    write_experiment(root, base_experiment(blast_radius={"percent": 25}), "stage1.yaml")
    (root / "lax.yaml").write_text("gates: {required: false}\n")
    return root


_CLOCK = [datetime(2026, 1, 1, tzinfo=UTC)]


def record_run(
    store: Store,
    family: str,
    stage: int | None,
    *,
    green: bool = True,
    status: str | None = None,
    dry_run: bool = False,
) -> str:
    """Write a `runs` row the way the engine does after a run."""
    _CLOCK[0] += timedelta(minutes=1)
    run_id = uuid.uuid4().hex[:16]
    store.insert(
        "runs",
        [
            {
                "run_id": run_id,
                "experiment_title": family,
                "experiment_family": family,
                "content_hash": "0" * 64,
                "status": status or ("completed" if green else "deviated"),
                "dry_run": dry_run,
                "steady_state_before": True,
                "steady_state_after": green,
                "started_at": _CLOCK[0],
                "ended_at": _CLOCK[0] + timedelta(seconds=5),
                "blast_stage": stage,
            }
        ],
    )
    return run_id


REDIS_FAULT_URL = "redis://127.0.0.1:6379/0"
REDIS_TARGET = "loopback:6379"  # the identity core.exposure gives REDIS_FAULT_URL and its loopback aliases


def fault_experiment(url: str = REDIS_FAULT_URL, **changes: Any) -> dict[str, Any]:
    """BASE with a method that really injects a fault the driver catalog knows (redis CLIENT PAUSE, kind
    `timeout`), so a run of it can show an injection."""
    return base_experiment(**{"method": [pause_writes(url)], **changes})


def pause_writes(url: str) -> dict[str, Any]:
    """The action that pauses writes on the Redis at `url` for 50 ms (CLIENT PAUSE WRITE)."""
    arguments = {"url": url, "timeout_ms": 50, "mode": "WRITE"}
    provider = {"type": "driver", "driver": "redis", "name": "client_pause", "arguments": arguments}
    return {"type": "action", "name": "pause-writes", "provider": provider}


def record_exposure(
    store: Store,
    target: str,
    kind: str,
    stage: int,
    *,
    green: bool = True,
    family: str = "any-family",
) -> str:
    """A finished run that really injected `kind` into `target` at `stage`: its `runs` row and its exposure
    row, as the engine writes them."""
    run_id = record_run(store, family, stage, green=green)
    store.insert(
        "exposures",
        [
            {
                "run_id": run_id,
                "seq": 0,
                "target": target,
                "fault_kind": kind,
                "stage": stage,
                "green": 1 if green else 0,
                "started_at": _CLOCK[0],
            }
        ],
    )
    return run_id


class DegradableService:
    """A real threaded HTTP service whose latency and error rate are flipped at run time (the injected fault)."""

    def __init__(self) -> None:
        self.latency_s = 0.0
        self.error_rate = 0.0
        self.requests = 0
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = (
                True  # headers and body go out as two writes; no 40 ms delayed-ACK stall
            )

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with service._lock:
                    service.requests += 1
                    n = service.requests
                    latency, rate = service.latency_s, service.error_rate
                if latency:
                    time.sleep(latency)
                failing = rate > 0 and (n % max(1, round(1 / rate)) == 0)
                status = 500 if failing else 200
                send_json(self, status, {"ok": not failing, "n": n})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def degrade(self, *, latency_s: float = 0.0, error_rate: float = 0.0) -> None:
        with self._lock:
            self.latency_s, self.error_rate = latency_s, error_rate

    def restore(self) -> None:
        self.degrade()


def runnable_experiment(url: str, *, title: str = "Engine guardrail run", **changes: Any) -> dict[str, Any]:
    """An experiment the engine really runs: a steady state and a probe gate against a real loopback service,
    and a method that does nothing harmful unless a test gives it one."""
    probe = {"type": "probe", "name": "health", "provider": {"type": "http", "url": url}, "tolerance": 200}
    doc: dict[str, Any] = {
        "title": title,
        "steady-state-hypothesis": {"title": "the service answers", "probes": [probe]},
        "slo_gates": [
            {
                "name": "health",
                "sli": "probe",
                "rollback_on": "probe > 499 for 1s",
                "interval_s": 0.2,
                "value_path": "status",
                "probe": {"type": "probe", "name": "gate", "provider": {"type": "http", "url": url}},
            }
        ],
        "method": [{"type": "action", "name": "noop", "provider": {"type": "process", "path": "true"}}],
    }
    return _changed(doc, changes)


# ---- signed approvals ------------------------------------------------------------------------------------------

APPROVER_PASSPHRASE = "correct horse battery staple"


class Approver:
    """A person's Ed25519 approver key outside any project, and policies that trust it."""

    def __init__(self, folder: Path, principal: str = "alice") -> None:
        from faultplane.core import approval as approvals

        self.principal = principal
        self.key_path = folder / f"{principal}-approver.key"
        # the lowest scrypt cost the loader accepts, to keep tests quick; keygen's default is 8x that
        self.line = approvals.generate_key(self.key_path, principal, APPROVER_PASSPHRASE, scrypt_n=2**14)

    def policy(self, **approval: Any) -> Any:
        from faultplane.core.policy import ApprovalRules, Policy

        return Policy(approval=ApprovalRules(trusted_keys=[self.line], **approval))

    def policy_yaml(self, extra: str = "") -> str:
        return f"approval:\n  trusted_keys: [{json.dumps(self.line)}]\n{extra}"

    def write_policy(self, project: Path, extra: str = "") -> Path:
        path = project / "faultplane.policy.yaml"
        path.write_text(self.policy_yaml(extra))
        return path

    def sign(self, content_hash: str, *, family: str = "f", **kw: Any) -> Any:
        from faultplane.core import approval as approvals

        key = approvals.load_signing_key(self.key_path, APPROVER_PASSPHRASE)
        return approvals.sign_approval(content_hash, key=key, trusted_keys=[self.line], family=family, **kw)
