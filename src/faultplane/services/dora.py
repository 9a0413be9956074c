"""DORA's Four Keys beside chaos evidence.

Deployments and incidents come from CI/CD (CSV, JSON, GitHub and GitLab deployment exports, or one event at
a time from a pipeline step or a webhook); experiment runs come from the store. One SQL view,
`dora_four_keys`, gives per service: deployment frequency, lead time for changes, change failure rate and
time to restore, next to the faults its experiments exercised and how fast the service recovered in them.

Times are kept as epoch seconds (DOUBLE) in these tables so the view's SQL is the same on DuckDB and on
ClickHouse but for three spellings (`_DIALECT`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.core.migrations import Migration

__all__ = [
    "MIGRATIONS",
    "DoraError",
    "FourKeys",
    "four_keys",
    "import_events",
    "parse_events",
    "read_input",
    "record_event",
    "refresh_experiments",
]

Kind = Literal["deployments", "incidents"]

MIGRATIONS: list[Migration] = [
    (
        "dora-001",
        [
            """CREATE TABLE IF NOT EXISTS dora_deployments (
                deployment_id VARCHAR PRIMARY KEY,
                service VARCHAR,
                environment VARCHAR,
                deployed_at DOUBLE,
                change_at DOUBLE,
                status VARCHAR,
                source VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS dora_incidents (
                incident_id VARCHAR PRIMARY KEY,
                service VARCHAR,
                started_at DOUBLE,
                restored_at DOUBLE,
                deployment_id VARCHAR,
                source VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS dora_experiments (
                run_id VARCHAR PRIMARY KEY,
                service VARCHAR,
                fault_types VARCHAR,
                passed BOOLEAN,
                started_at DOUBLE,
                time_to_recover_s DOUBLE
            )""",
        ],
    )
]

# the view's SQL differs between the engines only in these spellings
_DIALECT = {
    "duckdb": {
        "final": "",
        "null": "CAST(NULL AS DOUBLE)",
        "faults": "string_agg(DISTINCT fault, ',' ORDER BY fault)",
        "split": "unnest(string_split(fault_types, ','))",
        "create": "CREATE OR REPLACE VIEW",
    },
    "clickhouse": {
        "final": " FINAL",
        "null": "CAST(NULL AS Nullable(Float64))",
        "faults": "arrayStringConcat(arraySort(groupUniqArray(fault)), ',')",
        "split": "arrayJoin(splitByChar(',', ifNull(fault_types, '')))",
        "create": "CREATE VIEW IF NOT EXISTS",
    },
}

# One row per service: what CI/CD says (deployments, incidents) beside what chaos experiments showed.
_VIEW = """{create} dora_four_keys AS
SELECT
    service,
    sum(is_deployment) AS deployments,
    CASE WHEN sum(is_deployment) = 0 THEN NULL
         ELSE sum(is_deployment) / greatest(1.0, (max(deployed_at) - min(deployed_at)) / 86400.0) END
        AS deployments_per_day,
    median(lead_time_s) / 3600.0 AS lead_time_hours,
    CASE WHEN sum(is_deployment) = 0 THEN NULL
         ELSE least(1.0, (sum(failed) + sum(caused_incident)) / sum(is_deployment)) END
        AS change_failure_rate,
    sum(is_incident) AS incidents,
    median(restore_s) / 3600.0 AS time_to_restore_hours,
    sum(is_experiment) AS experiments,
    sum(experiment_passed) AS experiments_passed,
    median(experiment_recovery_s) AS experiment_recovery_s,
    max(faults) AS faults_exercised
FROM (
    SELECT service, 1 AS is_deployment, deployed_at, deployed_at - change_at AS lead_time_s,
           CASE WHEN status = 'failure' THEN 1 ELSE 0 END AS failed, 0 AS caused_incident,
           0 AS is_incident, {null} AS restore_s, 0 AS is_experiment, 0 AS experiment_passed,
           {null} AS experiment_recovery_s, '' AS faults
    FROM dora_deployments{final}
    UNION ALL
    SELECT service, 0, {null}, {null}, 0,
           CASE WHEN deployment_id IS NOT NULL AND deployment_id != '' THEN 1 ELSE 0 END,
           1, restored_at - started_at, 0, 0, {null}, ''
    FROM dora_incidents{final}
    UNION ALL
    SELECT service, 0, {null}, {null}, 0, 0, 0, {null}, 1, CASE WHEN passed THEN 1 ELSE 0 END,
           time_to_recover_s, ''
    FROM dora_experiments{final} WHERE service != ''
    UNION ALL
    SELECT service, 0, {null}, {null}, 0, 0, 0, {null}, 0, 0, {null}, {faults}
    FROM (SELECT service, {split} AS fault FROM dora_experiments{final}
          WHERE service != '' AND fault_types IS NOT NULL AND fault_types != '') AS f
    GROUP BY service
) AS events
GROUP BY service
ORDER BY service"""


class DoraError(ValueError):
    """Input that cannot be read as deployments or incidents; the message names the record and the field."""


class FourKeys(BaseModel):
    service: str
    deployments: int
    deployments_per_day: float | None
    lead_time_hours: float | None
    change_failure_rate: float | None
    incidents: int
    time_to_restore_hours: float | None
    experiments: int
    experiments_passed: int
    experiment_recovery_s: float | None = Field(
        description="median time to recover in this service's experiments"
    )
    faults_exercised: list[str]
    restore_vs_experiments: float | None = Field(
        description="real incidents' median time to restore over the experiments' median recovery time"
    )


# ---- reading CI/CD exports -----------------------------------------------------------------------------------

_STATUS = {
    "success": "success",
    "succeeded": "success",
    "ok": "success",
    "active": "success",
    "inactive": "success",
    "failure": "failure",
    "failed": "failure",
    "error": "failure",
    "canceled": None,
    "cancelled": None,
    "skipped": None,
    "created": None,
    "queued": None,
    "pending": None,
    "in_progress": None,
    "running": None,
    "blocked": None,
}


def _epoch(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number / 1000.0 if number > 1e11 else number  # milliseconds from some exports
    try:
        when = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        raise DoraError(
            f"{where}: {value!r} is not a time; fix: ISO 8601 (2026-11-25T08:00:00Z) or epoch seconds"
        ) from None
    return (when.replace(tzinfo=UTC) if when.tzinfo is None else when).timestamp()


def _first(record: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        cur: Any = record
        for part in name.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        if cur not in (None, ""):
            return cur
    return None


def _detect(records: list[Mapping[str, Any]]) -> str:
    sample = records[0] if records else {}
    if "deployable" in sample or ("iid" in sample and "environment" in sample):
        return "gitlab"
    if "deployment_status" in sample or "statuses_url" in sample or ("sha" in sample and "task" in sample):
        return "github"
    return "generic"


def _deployment(
    record: Mapping[str, Any], where: str, flavour: str, service: str | None
) -> dict[str, Any] | None:
    if flavour == "github":
        event = record.get("deployment_status")
        dep = record.get("deployment", record)
        state = (event or {}).get("state") or _first(record, "state", "status")
        statuses = record.get("statuses")
        if state is None and isinstance(statuses, list) and statuses:
            state = statuses[0].get("state")  # the API lists them newest first
        svc = (
            service
            or _first(dep, "payload.service")
            or _first(record, "repository.name")
            or dep.get("environment")
        )
        deployed = _first(event or {}, "created_at") or _first(dep, "updated_at", "created_at")
        change = _first(dep, "payload.change_created_at", "payload.commit_at", "commit_at")
        ident, env = dep.get("id"), dep.get("environment")
    elif flavour == "gitlab":
        state = record.get("status")
        svc = service or _first(record, "project.name", "environment.name")
        deployed = _first(record, "deployable.finished_at", "finished_at", "updated_at", "created_at")
        change = _first(record, "deployable.commit.created_at", "commit.created_at", "commit_at")
        ident, env = record.get("id"), _first(record, "environment.name")
    else:
        state = _first(record, "status", "state", "result")
        svc = service or _first(record, "service", "app", "application", "component")
        deployed = _first(record, "deployed_at", "finished_at", "time", "timestamp", "created_at")
        change = _first(
            record, "change_at", "commit_at", "first_commit_at", "committed_at", "change_created_at"
        )
        ident, env = _first(record, "deployment_id", "id"), _first(record, "environment", "env")
    status = _STATUS.get(str(state).lower()) if state is not None else "success"
    if status is None:
        return None  # not a finished deployment (queued, cancelled, running)
    if not svc:
        raise DoraError(f"{where}.service: missing; fix: add a service column/field, or pass --service")
    deployed_at = _epoch(deployed, f"{where}.deployed_at")
    if deployed_at is None:
        raise DoraError(f"{where}.deployed_at: missing; fix: the time the deployment finished")
    change_at = _epoch(change, f"{where}.change_at")
    if change_at is not None and change_at > deployed_at:
        raise DoraError(f"{where}.change_at: after the deployment; fix: the change's first commit time")
    return {
        "deployment_id": str(ident if ident is not None else f"{svc}@{deployed_at:.0f}"),
        "service": str(svc),
        "environment": None if env is None else str(env),
        "deployed_at": deployed_at,
        "change_at": change_at,
        "status": status,
        "source": flavour,
    }


def _incident(record: Mapping[str, Any], where: str, service: str | None) -> dict[str, Any]:
    svc = service or _first(record, "service", "app", "application", "component")
    if not svc:
        raise DoraError(f"{where}.service: missing; fix: add a service column/field, or pass --service")
    started = _epoch(_first(record, "started_at", "opened_at", "created_at", "start"), f"{where}.started_at")
    restored = _epoch(
        _first(record, "restored_at", "resolved_at", "closed_at", "end"), f"{where}.restored_at"
    )
    if started is None:
        raise DoraError(f"{where}.started_at: missing; fix: when the incident began")
    if restored is not None and restored < started:
        raise DoraError(f"{where}.restored_at: before started_at; fix: swap them or correct the times")
    ident = _first(record, "incident_id", "id", "number")
    return {
        "incident_id": str(ident if ident is not None else f"{svc}@{started:.0f}"),
        "service": str(svc),
        "started_at": started,
        "restored_at": restored,
        "deployment_id": None
        if (d := _first(record, "deployment_id", "caused_by", "cause")) is None
        else str(d),
        "source": "import",
    }


def parse_events(
    text: str, kind: Kind, *, fmt: Literal["auto", "csv", "json"] = "auto", service: str | None = None
) -> list[dict[str, Any]]:
    """Rows for `dora_deployments` or `dora_incidents` from a CSV or JSON export (GitHub, GitLab or generic)."""
    stripped = text.lstrip()
    if fmt == "auto":
        fmt = "json" if stripped.startswith(("[", "{")) else "csv"
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DoraError(
                f"input: not JSON ({exc.msg} at line {exc.lineno}); fix: a JSON list or object"
            ) from None
        if isinstance(data, Mapping):
            data = data.get(kind) or data.get("items") or [data]
        if not isinstance(data, list) or not all(isinstance(r, Mapping) for r in data):
            raise DoraError(f"input: expected a list of {kind} objects; fix: export the API's list as JSON")
        records: list[Mapping[str, Any]] = data
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise DoraError("input: empty CSV; fix: a header row, then one row per event")
        records = [{k.strip().lower(): (v or "").strip() for k, v in r.items() if k} for r in reader]
    if kind == "deployments":
        flavour = _detect(records) if fmt == "json" else "generic"
        rows = [_deployment(r, f"{kind}[{i}]", flavour, service) for i, r in enumerate(records)]
        return [r for r in rows if r is not None]
    return [_incident(r, f"{kind}[{i}]", service) for i, r in enumerate(records)]


# ---- the store ---------------------------------------------------------------------------------------------------


def _dialect(store: Any) -> str:
    return str(getattr(store, "dialect", "duckdb"))


_VIEWS_MADE: set[tuple[str, str]] = set()


def _ensure(store: Any) -> None:
    store.ensure_schema("dora", MIGRATIONS)
    key = (_dialect(store), str(getattr(store, "url", None) or getattr(store, "path", "")))
    if key not in _VIEWS_MADE:
        store.execute(_VIEW.format(**_DIALECT[key[0]]))
        _VIEWS_MADE.add(key)


def _upsert(store: Any, table: str, key: str, rows: list[dict[str, Any]]) -> int:
    if not rows:
        return 0
    if _dialect(store) != "clickhouse":  # ClickHouse's ReplacingMergeTree keeps the newest version of a key
        ids = list({r[key] for r in rows})
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            store.execute(f"DELETE FROM {table} WHERE {key} IN ({', '.join('?' for _ in chunk)})", chunk)
    return int(store.insert(table, rows))


def import_events(store: Any, rows: list[dict[str, Any]], kind: Kind) -> int:
    """Write parsed rows; a row with an id already stored replaces it (re-importing an export is harmless)."""
    _ensure(store)
    table, key = (
        ("dora_deployments", "deployment_id") if kind == "deployments" else ("dora_incidents", "incident_id")
    )
    return _upsert(store, table, key, rows)


def record_event(store: Any, kind: Kind, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One deployment or incident from a pipeline step or a webhook body."""
    rows = parse_events(json.dumps([dict(fields)]), kind, fmt="json")
    if not rows:
        raise DoraError("status: not a finished deployment (queued, running or cancelled); nothing recorded")
    import_events(store, rows, kind)
    return rows[0]


def _service_of(journal: Mapping[str, Any]) -> str | None:
    experiment = journal.get("experiment") or {}
    for target in experiment.get("targets") or []:
        svc = ((target or {}).get("labels") or {}).get("service")
        if svc:
            return str(svc)
    for tag in experiment.get("tags") or []:
        if isinstance(tag, str) and tag.startswith("service:"):
            return tag.split(":", 1)[1]
    return None


def refresh_experiments(store: Any) -> int:
    """Bring `dora_experiments` up to date from the stored runs: the service each run targeted (its targets'
    `service` label, else a `service:NAME` tag), its fault types, whether it passed and its recovery time."""
    from faultplane.services.evidence import fault_types, recovery_of

    _ensure(store)
    final = _DIALECT[_dialect(store)]["final"]
    known = {r["run_id"] for r in store.query(f"SELECT run_id FROM dora_experiments{final}")}
    dry = "dry_run = 0" if _dialect(store) == "clickhouse" else "NOT dry_run"
    new_ids = [
        r["run_id"]
        for r in store.query(
            f"SELECT run_id FROM runs{final} WHERE {dry} AND status NOT IN ('running', 'refused', 'interrupted')"
        )
        if r["run_id"] not in known
    ]
    bodies = []
    for i in range(0, len(new_ids), 500):  # no JOIN: old ClickHouse servers want one spelled their own way
        chunk = new_ids[i : i + 500]
        bodies += store.query(
            f"SELECT run_id, body FROM journals{final} WHERE run_id IN ({', '.join('?' for _ in chunk)})",
            chunk,
        )
    rows = []
    for r in bodies:
        journal = json.loads(r["body"])
        service = _service_of(journal) or ""  # kept as "" so the run is not read again next time
        rec = recovery_of(journal, None)
        started = _epoch(journal.get("start"), "journal.start")
        rows.append(
            {
                "run_id": r["run_id"],
                "service": service,
                "fault_types": ",".join(sorted(set(fault_types(journal)))),
                "passed": journal.get("status") == "completed",
                "started_at": started,
                "time_to_recover_s": rec.time_to_recover_s,
            }
        )
    return _upsert(store, "dora_experiments", "run_id", rows)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else round(number, 6)


def four_keys(store: Any, service: str | None = None) -> list[FourKeys]:
    """The view, after bringing the experiment side up to date."""
    refresh_experiments(store)
    sql = "SELECT * FROM dora_four_keys" + (" WHERE service = ?" if service else "")
    out = []
    for r in store.query(sql, [service] if service else None):
        restore_h, recovery_s = _num(r["time_to_restore_hours"]), _num(r["experiment_recovery_s"])
        out.append(
            FourKeys(
                service=r["service"],
                deployments=int(r["deployments"] or 0),
                deployments_per_day=_num(r["deployments_per_day"]),
                lead_time_hours=_num(r["lead_time_hours"]),
                change_failure_rate=_num(r["change_failure_rate"]),
                incidents=int(r["incidents"] or 0),
                time_to_restore_hours=restore_h,
                experiments=int(r["experiments"] or 0),
                experiments_passed=int(r["experiments_passed"] or 0),
                experiment_recovery_s=recovery_s,
                faults_exercised=[f for f in str(r["faults_exercised"] or "").split(",") if f],
                restore_vs_experiments=(
                    round(restore_h * 3600.0 / recovery_s, 3)
                    if restore_h is not None and recovery_s
                    else None
                ),
            )
        )
    return out


def read_input(path: str) -> str:
    """A file's text, or standard input for `-` (a webhook body piped into a pipeline step)."""
    from faultplane.core.hostile import MAX_BYTES, HostileInput, check_text, read_text_limited

    try:
        if path == "-":
            import sys

            data = sys.stdin.buffer.read(MAX_BYTES + 1)
            check_text(data, "standard input")
            text = data.decode("utf-8")  # strictly: the terminal's error handler would let bytes through
        else:
            text = read_text_limited(path, "export")
    except HostileInput as exc:  # over the size limit, not UTF-8, not a regular file: it says the fix
        raise DoraError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise DoraError(
            f"standard input is not UTF-8 text (byte {exc.start}); fix: pipe UTF-8 text"
        ) from None
    except OSError as exc:
        raise DoraError(f"{path}: {exc.strerror or exc}; fix: the path of a CSV or JSON export") from None
    # spreadsheets save CSV with a byte-order mark; it would join the first column's name
    return text.removeprefix("\ufeff")
