"""Writing the journal as the run goes, so that even a SIGKILL leaves a readable, `interrupted` record.

Each event is one JSON line appended to `<run_id>.events.jsonl` and flushed; the final journal is rebuilt
from those events. A run whose events file has no `end` event and whose controller is dead was interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultplane.core.config import mask_secrets
from faultplane.core.model import ActivityRun, Journal
from faultplane.core.paths import faultplane_dir
from faultplane.core.store import Store
from faultplane.core.telemetry import emit_journal_spans
from faultplane.engine.providers import jsonable

__all__ = ["JournalWriter", "journal_dir", "now", "rebuild_journal", "recover_interrupted"]


def now() -> datetime:
    return datetime.now(UTC)


def journal_dir() -> Path:
    return faultplane_dir("data") / "journals"


def _apply(journal: Journal, event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "activity":
        run = ActivityRun.model_validate(event["run"])
        section = event["section"]
        if section == "rollbacks":
            journal.rollbacks.append(run)
        elif section == "method":
            journal.run.append(run)
        else:
            key = section.removeprefix("hypothesis_")
            state = journal.steady_states.get(key) if key != "during" else None
            if key == "during":
                journal.steady_states["during"].append(event.get("state"))
            elif state is None or "probes" not in (state or {}):
                journal.steady_states[key] = {
                    "steady_state_met": None,
                    "probes": [run.model_dump(mode="json")],
                }
            else:
                state["probes"].append(run.model_dump(mode="json"))
    elif kind == "hypothesis":
        key = event["when"]
        if key == "during":
            journal.steady_states["during"].append(event["state"])
        else:
            journal.steady_states[key] = event["state"]
    elif kind == "phase":
        journal.phases.append({"phase": event["phase"], "at": event["at"]})
    elif kind == "gate_sample":
        journal.gates["samples"].append(event["sample"])
    elif kind == "gate_baseline":
        journal.gates.setdefault("baseline", []).append(event["sample"])
    elif kind == "gate_breach":
        journal.gates["breach"] = event["breach"]
    elif kind == "revert":
        journal.reverts.append(event["revert"])
    elif kind == "injection":
        journal.injections.append(event["injection"])
    elif kind == "policy":
        journal.policy = event["policy"]
    elif kind == "load":
        journal.load = event["load"]
    elif kind == "end":
        for key in ("status", "deviated", "duration", "verdict", "error"):
            if key in event:
                setattr(journal, key, event[key])
        if event.get("end"):
            journal.end = datetime.fromisoformat(event["end"])


def rebuild_journal(events_path: Path) -> Journal | None:
    """The journal as far as the events file goes (a torn last line is ignored).

    `runs list`, `abort` and every run's start read these logs, and any process of the same user can write
    one: a log that is not what Faultplane writes (too large a line, too deep, not UTF-8, not an event, a
    journal that does not validate) is no run, never a traceback."""
    from faultplane.core.hostile import MAX_BYTES, HostileInput, parse_guarded

    journal: Journal | None = None
    try:
        # streamed: a log may be long, but no single event is larger than a document may be
        with events_path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if len(line) > MAX_BYTES:
                    return None
                try:
                    event = parse_guarded(json.loads, line, "events log line")
                except (json.JSONDecodeError, HostileInput):
                    continue
                if not isinstance(event, dict):
                    return None
                try:
                    if event.get("event") == "start":
                        journal = Journal.model_validate(event["journal"])
                    elif journal is not None:
                        _apply(journal, event)
                except (KeyError, TypeError, ValueError, AttributeError):
                    return None
    except FileNotFoundError:
        return None
    except OSError:
        return None
    return journal


class JournalWriter:
    """Appends events for one run and persists the final journal to a file and the store."""

    def __init__(
        self,
        journal: Journal,
        *,
        store: Store | None,
        secret_values: list[str],
        directory: Path | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.journal = journal
        self.store = store
        self.secret_values = secret_values
        self.directory = directory or journal_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.events_path = self.directory / f"{journal.run_id}.events.jsonl"
        self.path = self.directory / f"{journal.run_id}.json"
        self.on_event = on_event
        # unbuffered: each event reaches the file with one write(2), so a SIGKILL loses at most the event
        # being written (and a torn last line is skipped when the journal is rebuilt)
        self._fd = os.open(self.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, event: dict[str, Any]) -> None:
        """`event` must already be JSON data (see `jsonable`)."""
        self._append(json.dumps(mask_secrets(event, self.secret_values), ensure_ascii=False))

    def _append(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode("utf-8"))

    def start(self) -> None:
        j = self.journal
        j.controller_pid = os.getpid()
        j.node = socket.gethostname()
        # the experiment was masked when the journal was made; whatever JSON cannot hold becomes a string
        self._append('{"event":"start","journal":' + j.model_dump_json(fallback=str) + "}")

    def emit(self, event: dict[str, Any]) -> None:
        """Record an event in the journal and tell the listener (progress display, MCP progress)."""
        event = jsonable(event)
        self._write(event)
        _apply(self.journal, mask_secrets(event, self.secret_values))
        if self.on_event is not None:
            # a broken progress display must never break a run
            with contextlib.suppress(Exception):
                self.on_event(event)

    def notify(self, event: dict[str, Any]) -> None:
        """Tell the listener only: progress that the journal does not need to keep."""
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(event)

    def activity(self, section: str, run: ActivityRun) -> None:
        # hot path (one call per activity): the run object is already validated and its output JSON-safe,
        # so it is appended as is rather than round-tripped through a dict and validated again
        if self.secret_values or section not in ("method", "rollbacks"):
            event = {"event": "activity", "section": section, "run": run.model_dump(mode="json")}
            self._write(event)
            _apply(self.journal, mask_secrets(event, self.secret_values))
        else:
            self._append(f'{{"event":"activity","section":"{section}","run":{run.model_dump_json()}}}')
            (self.journal.run if section == "method" else self.journal.rollbacks).append(run)
            if self.on_event is None:
                return
            event = {"event": "activity", "section": section, "run": run.model_dump(mode="json")}
        self.notify(event)

    def finish(self, blast_stage: int | None = None) -> Journal:
        """Write the final journal file and store rows. Safe to call once, at the very end."""
        j = self.journal
        os.close(self._fd)
        # pydantic's serializer writes the indented JSON directly: json.dumps with `indent` falls back to the
        # pure-Python encoder, which cost more than running 200 probes
        body = j.model_dump_json(indent=2)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(self.path)
        if self.store is not None:
            # the journal file is the record; a marker beside it makes sure its rows are written even if the
            # store cannot take them now (see core.store, core.store_clickhouse)
            self.store.queue_journal(self.path, j.run_id, blast_stage)
            if not isinstance(self.store, Store):
                _forget_cached_history()
        emit_journal_spans(j)  # no-op unless OTLP is configured; never raises
        return j


def persist(store: Store, j: Journal, body: str, journal_path: str, blast_stage: int | None = None) -> None:
    """Index a journal in the store now (ClickHouse, and a run recovered at start)."""
    if getattr(store, "dialect", "duckdb") == "clickhouse":
        store.persist_journal(j, body, journal_path, blast_stage)
    else:
        store.write_journal(j, body, journal_path, blast_stage)
    _forget_cached_history()


def _forget_cached_history() -> None:
    """The policy caches run history for a moment; a new run makes it stale."""
    try:
        from faultplane.core.policy import forget_runs
    except ImportError:
        return
    forget_runs()


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    import psutil  # only needed when an unfinished events log is found

    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _unfinished(directory: Path) -> list[Path]:
    """Events logs with no final journal beside them. One directory listing: this runs at every start, and a
    journal directory holds every run ever made."""
    try:
        with os.scandir(directory) as it:
            names = {e.name for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        directory / name
        for name in sorted(names)
        if name.endswith(".events.jsonl") and name.removesuffix(".events.jsonl") + ".json" not in names
    ]


def _watchdog_account(journal: Journal, wait_s: float = 3.0) -> str:
    """What the lease watchdog did for a dead controller's faults, added to ``journal.reverts`` and told in
    one sentence, instead of a guess. Waits (bounded) for leases still being reverted."""
    try:
        from faultplane.drivers import leases
    except ImportError:
        return "the experiment's rollbacks did not run: check the target"
    import time

    run_id = journal.run_id
    deadline = time.monotonic() + wait_s
    pending = [lease for lease in leases.list_leases() if lease.run_id == run_id]
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
        pending = [lease for lease in leases.list_leases() if lease.run_id == run_id]
    done = leases.outcomes(run_id)
    final = {row["lease_id"]: row for row in done}  # the last word on each lease
    for row in done:
        journal.reverts.append(
            {
                "label": row["label"],
                "by": "lease watchdog" if row["reason"] != "forced" else "forced reap",
                "reason": row["reason"],
                "at": datetime.fromtimestamp(row["at"], tz=UTC).isoformat(),
                "ok": row["ok"],
                "error": row["error"],
            }
        )
    reverted = [r for r in final.values() if r["ok"]]
    failed = [r for r in final.values() if not r["ok"]]
    parts = ["the experiment's rollbacks did not run"]
    if not final and not pending:
        parts.append("no leased fault of this run was left to revert")
    if reverted:
        labels = ", ".join(r["label"] for r in reverted)
        parts.append(f"the lease watchdog reverted {len(reverted)} leased fault(s): {labels}")
    if failed:
        what = ", ".join(f"{r['label']} ({r['error']})" for r in failed)
        parts.append(
            f"{len(failed)} revert(s) failed{' and were parked' if any(r['parked'] for r in failed) else ''}: {what}"
        )
    if pending:
        parts.append(
            f"{len(pending)} leased fault(s) still awaiting revert: "
            + ", ".join(lease.label for lease in pending)
            + " (see `faultplane drivers leases`)"
        )
    return "; ".join(parts)


def recover_interrupted(store: Store | None, directory: Path | None = None) -> list[Journal]:
    """Find runs left `running` by a dead controller; mark them interrupted and persist their journals."""
    directory = directory or journal_dir()
    recovered: list[Journal] = []
    for events in _unfinished(directory):
        final = events.with_name(events.name.removesuffix(".events.jsonl") + ".json")
        journal = rebuild_journal(events)
        if journal is None or journal.status != "running" or _pid_alive(journal.controller_pid):
            continue
        journal.status = "interrupted"
        journal.end = now()
        journal.duration = (journal.end - journal.start).total_seconds()
        journal.error = (journal.error + "; " if journal.error else "") + (
            f"controller pid {journal.controller_pid} died mid-run; " + _watchdog_account(journal)
        )
        journal.verdict = "interrupted: the controller died before the run ended"
        body = json.dumps(journal.model_dump(mode="json"), ensure_ascii=False, indent=2)
        final.write_text(body, encoding="utf-8")
        if store is not None:
            persist(store, journal, body, str(final))
        recovered.append(journal)
    return recovered


def live_runs(directory: Path | None = None) -> list[Journal]:
    """Runs in progress on this machine: an events log with no final journal and a live controller.

    The events log, not the store, is the record of a live run: it costs no database round-trip at start and
    it is there even when the store is busy."""
    directory = directory or journal_dir()
    out = []
    for events in _unfinished(directory):
        journal = rebuild_journal(events)
        if journal is not None and journal.status == "running" and _pid_alive(journal.controller_pid):
            out.append(journal)
    return sorted(out, key=lambda j: j.start)
