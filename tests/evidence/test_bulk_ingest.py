"""The bulk NDJSON ingest (DuckDB's JSON reader and SQL) writes the rows the Python path writes, on generated
journals with recovery checks, gate samples, load summaries and fault arguments; bad files fail in one line."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_same_answers import journal

from faultplane.core.store import Store
from faultplane.services import evidence as ev
from faultplane.services import evidence_bulk
from faultplane.services.evidence_bulk import ingest_ndjson

FAULTS = ("latency", "error", "timeout", "resource_exhaustion", "network_partition", "bogus", None)


@st.composite
def rich_journal(draw: st.DrawFn, i: int) -> dict[str, Any]:
    j = draw(journal(i))
    if draw(st.booleans()):
        ts = sorted(draw(st.lists(st.floats(0, 60, allow_nan=False), max_size=8)))
        j["steady_states"]["recovery"] = {
            "steady_state_met": draw(st.booleans()),
            "window_s": draw(st.sampled_from((None, 0.0, 1.5, 5.0))),
            "checks": [{"t": round(t, 3), "met": draw(st.booleans())} for t in ts],
        }
    elif draw(st.booleans()):
        j["steady_states"]["recovery"] = draw(st.sampled_from(({}, None)))
    if draw(st.booleans()):
        j["gates"] = {
            "samples": [
                {
                    "gate": "g",
                    "sli": draw(st.sampled_from(("error_rate", "latency_p99", "other"))),
                    "value": v,
                }
                for v in draw(st.lists(st.one_of(st.none(), st.floats(0, 1000, allow_nan=False)), max_size=5))
            ],
            "breach": draw(st.sampled_from((None, {}, {"gate": "g", "value": 1.0}))),
        }
    if draw(st.booleans()):
        figures = {"error_rate": draw(st.one_of(st.none(), st.floats(0, 1))), "latency_p99_ms": 12.5}
        j["load"] = {"summary": figures} if draw(st.booleans()) else figures
    action = j["run"][0]["activity"]
    action["provider"] = {
        "type": "python",
        "driver": draw(st.sampled_from((None, "netproxy", "Redis"))),
        "name": draw(st.sampled_from(("add_latency", "network-partition", "noop", "Error_Inject"))),
        "arguments": {
            "fault_type": draw(st.sampled_from(FAULTS)),
            "fault": {"type": draw(st.sampled_from(FAULTS))},
        },
    }
    j["run"][0]["output"] = draw(
        st.sampled_from(({"fault": "timeout"}, {"fault_type": "", "fault": "error"}, 3, None))
    )
    if draw(st.booleans()):
        j["estimate"] = {}
        j["experiment"]["estimate"] = {"recovery_seconds": 2.0, "error_rate": 0.1}
    return j


@st.composite
def rich_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = [draw(rich_journal(i)) for i in range(draw(st.integers(1, 12)))]
    if draw(st.booleans()):
        again = json.loads(json.dumps(out[0]))
        again["status"] = "failed"
        out.append(again)  # the same run written again: the later journal wins
    return out


def _rows(store: Store, table: str, cols: str) -> list[dict[str, Any]]:
    rows = store.query(
        f"SELECT {cols} FROM {table} ORDER BY run_id" + (", seq" if table == "activities" else "")
    )
    for r in rows:
        for k, v in list(r.items()):
            if isinstance(v, float):
                r[k] = round(v, 6) if math.isfinite(v) else v
            elif isinstance(v, dt.datetime):
                r[k] = v.astimezone(dt.UTC)
            elif k in ("output", "body"):
                r[k] = json.loads(v)
    return rows


TABLES = {
    "runs": "* EXCLUDE (journal_path)",
    "activities": "*",
    "run_metrics": "*",
    "journals": "run_id, body",
}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(journals=rich_sets(), file_batches=st.booleans())
def test_bulk_ingest_writes_the_rows_the_python_path_writes(
    journals: list[dict[str, Any]], file_batches: bool, tmp_path: Path
) -> None:
    """Also with one transaction per file (`batch_bytes=1`): a run in both files keeps the second file's journal."""
    name = uuid.uuid4().hex
    python, bulk = Store(tmp_path / f"{name}-py.duckdb"), Store(tmp_path / f"{name}-bulk.duckdb")
    for j in journals:
        ev.ingest_journals(python, [j])
    files = [tmp_path / f"{name}-a.ndjson", tmp_path / f"{name}-b.ndjson"]
    half = len(journals) // 2
    files[0].write_text("".join(json.dumps(j) + "\n" for j in journals[:half]), encoding="utf-8")
    files[1].write_text(
        "".join(json.dumps(j, ensure_ascii=False) + "\n" for j in journals[half:]), encoding="utf-8"
    )
    if file_batches:
        written = len({j["run_id"] for j in journals[:half]}) + len({j["run_id"] for j in journals[half:]})
        assert ingest_ndjson(bulk, files, batch_bytes=1) == written
    else:
        assert ingest_ndjson(bulk, files) == len({j["run_id"] for j in journals})
    for table, cols in TABLES.items():
        assert _rows(python, table, cols) == _rows(bulk, table, cols), table
    assert [c.model_dump() for c in ev.scorecards(python)] == [c.model_dump() for c in ev.scorecards(bulk)]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=rich_journal(0), b=rich_journal(1), c=rich_journal(2))
def test_bulk_ingest_reads_a_file_as_the_json_reader_does(
    a: dict[str, Any], b: dict[str, Any], c: dict[str, Any], tmp_path: Path
) -> None:
    """A byte-order mark, CRLF line ends, blank and whitespace lines, indentation, and a carriage return between
    two fields of an object (there the fast line reader cuts the journal in two; the batch is written again from the
    JSON reader): the rows are the Python path's, every journal text whole."""
    name = uuid.uuid4().hex
    python, bulk = Store(tmp_path / f"{name}-py.duckdb"), Store(tmp_path / f"{name}-bulk.duckdb")
    ev.ingest_journals(python, [a, b, c])
    cut = json.dumps(b).replace(', "status"', ',\r"status"', 1)
    assert "\r" in cut
    # the cut journal last: its second half is a line no journal pairs with
    text = "\ufeff" + json.dumps(a) + "\r\n\r\n   \n\t" + json.dumps(c) + "\n" + cut + "\r\n"
    (tmp_path / f"{name}.ndjson").write_text(text, encoding="utf-8", newline="")
    assert ingest_ndjson(bulk, [tmp_path / f"{name}.ndjson"]) == 3
    for table, cols in TABLES.items():
        assert _rows(python, table, cols) == _rows(bulk, table, cols), table


def one_journal(test: Callable[..., None]) -> Callable[..., None]:
    """`test` run on one generated journal `j`: what it checks holds for any valid journal, so one will do."""
    once = settings(
        max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    return once(given(j=journal(0))(test))


def _fresh_store(tmp_path: Path) -> Store:
    # tmp_path outlives hypothesis's examples (and its replay of a failing one): each example its own store
    return Store(tmp_path / f"{uuid.uuid4().hex}.duckdb")


def _ndjson(path: Path, *docs: Any) -> Path:
    """`path` written with one JSON document a line."""
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    return path


def test_bulk_ingest_refuses_what_is_not_a_journal(tmp_path: Path, store: Store) -> None:
    bad = _ndjson(tmp_path / "bad.ndjson", {"no_run_id": 1}, [1, 2])
    with pytest.raises(ev.EvidenceError, match="not journals"):
        ingest_ndjson(store, [bad])
    with pytest.raises(ev.EvidenceError, match="does not exist"):
        ingest_ndjson(store, [tmp_path / "nope.ndjson"])
    assert store.query("SELECT count(*) AS n FROM runs")[0]["n"] == 0


@one_journal
def test_a_value_the_store_cannot_hold_fails_in_one_line_and_writes_nothing(
    j: dict[str, Any], tmp_path: Path
) -> None:
    store = _fresh_store(tmp_path)
    bad = _ndjson(tmp_path / "bad.ndjson", {**j, "start": "not a time"})
    with pytest.raises(
        ev.EvidenceError, match=r"^files: .*bad\.ndjson has a value the store cannot hold"
    ) as err:
        ingest_ndjson(store, [bad])
    assert "\n" not in str(err.value)
    assert store.query("SELECT count(*) AS n FROM runs")[0]["n"] == 0


@one_journal
def test_a_failing_batch_leaves_nothing_of_itself_and_the_batches_before_it_written(
    j: dict[str, Any], tmp_path: Path
) -> None:
    store = _fresh_store(tmp_path)
    good = _ndjson(tmp_path / "1-good.ndjson", j)
    bad = _ndjson(tmp_path / "2-bad.ndjson", {**j, "run_id": j["run_id"] + "-b"}, {"no_run_id": 1})
    with pytest.raises(ev.EvidenceError, match="not journals"):
        ingest_ndjson(store, [good, bad], batch_bytes=1)
    for table in ("runs", "journals", "run_metrics"):
        assert [r["run_id"] for r in store.query(f"SELECT run_id FROM {table}")] == [j["run_id"]], table
    with pytest.raises(ev.EvidenceError, match="batch_bytes"):
        ingest_ndjson(store, [good], batch_bytes=0)


SETTINGS = "SELECT current_setting('force_compression'), current_setting('preserve_insertion_order')"


@one_journal
def test_bulk_ingest_puts_the_storage_setting_back(j: dict[str, Any], tmp_path: Path) -> None:
    """The ingest's COMMIT stores bodies with ZSTD, and its derived rows are inserted without insertion order, through
    connection-wide settings; both are reset afterwards, so the store's other writes keep DuckDB's own choices."""
    store = _fresh_store(tmp_path)
    good = _ndjson(tmp_path / "good.ndjson", j)
    with store.batch():  # one connection throughout: a setting left behind would still be there
        with store.connect() as con:
            before = con.execute(SETTINGS).fetchone()
        assert ingest_ndjson(store, [good]) == 1
        with store.connect() as con:
            assert con.execute(SETTINGS).fetchone() == before
    assert store.query("SELECT count(*) AS n FROM journals")[0]["n"] == 1


# How a file of three journals (a, b, c) is written, and whether each line can be stored under the run id its own
# text names (the parallel path) or the lines must be paired with the journals in order. Every way stores each
# journal's whole text under its run, as the Python path does.
def _with_note(j: dict[str, Any], run_id: str) -> dict[str, Any]:
    """`j` with a nested object whose first key is a run_id (another journal's, or none in the batch)."""
    return {**j, "note": {"run_id": run_id, "why": "copied from a neighbour"}}


def _cut_before_note(doc: dict[str, Any]) -> str:
    """`doc` on one line but for a carriage return (valid JSON whitespace) right before its note: the line reader
    sees a fragment that ends mid-object and one that begins with {"run_id": …}."""
    text = json.dumps(doc)
    cut = text.replace('"note": {', '"note":\r{', 1)
    assert cut != text
    return cut


LAYOUTS: dict[str, tuple[Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], str]], bool]] = {
    "as the engine writes them": (lambda js: (js, "".join(json.dumps(j) + "\n" for j in js)), True),
    "compact separators": (
        lambda js: (js, "".join(json.dumps(j, separators=(",", ":")) + "\n" for j in js)),
        True,
    ),
    "run_id the last key": (
        lambda js: (
            js,
            "".join(
                json.dumps({**{k: v for k, v in j.items() if k != "run_id"}, "run_id": j["run_id"]}) + "\n"
                for j in js
            ),
        ),
        True,
    ),
    "indented lines": (lambda js: (js, "".join("  \t" + json.dumps(j) + "\n" for j in js)), True),
    "run ids with escapes": (
        lambda js: (
            (moved := [{**j, "run_id": f'q"u\\o-é-\u2028-{i}'} for i, j in enumerate(js)]),
            "".join(json.dumps(j) + "\n" for j in moved),
        ),
        True,
    ),
    "cut before a neighbour's run id": (
        lambda js: (
            (noted := [js[0], _with_note(js[1], js[0]["run_id"]), js[2]]),
            json.dumps(noted[0]) + "\n" + _cut_before_note(noted[1]) + "\n" + json.dumps(noted[2]) + "\n",
        ),
        False,
    ),
    "cut before an unknown run id": (
        lambda js: (
            (noted := [js[0], js[1], _with_note(js[2], "not-in-this-batch")]),
            json.dumps(noted[0]) + "\n" + json.dumps(noted[1]) + "\n" + _cut_before_note(noted[2]) + "\n",
        ),
        False,
    ),
}
_WRITE_BATCH = evidence_bulk._write_batch


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=journal(0), b=journal(1), c=journal(2))
def test_each_text_is_stored_under_its_own_run_on_all_cores_or_paired_in_order(
    layout: str, a: dict[str, Any], b: dict[str, Any], c: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    """Lines that hold one journal each are stored by the run id they name (first key or not, escaped or not),
    without pairing; a journal cut in two by the line reader, its second half beginning with a run id (a
    neighbour's, or one the batch lacks), is caught and the batch written by the pairing reader: no text stored
    cut short or under another run."""
    write, parallel = LAYOUTS[layout]
    journals, text = write([a, b, c])
    tried: list[tuple[str, bool]] = []

    def spy(con: Any, paths: list[str], max_object_bytes: int, reader: str, n: int) -> None:
        try:
            _WRITE_BATCH(con, paths, max_object_bytes, reader, n)
        except Exception:
            tried.append((reader, False))
            raise
        tried.append((reader, True))

    monkeypatch.setattr(evidence_bulk, "_write_batch", spy)
    name = uuid.uuid4().hex
    python, bulk = Store(tmp_path / f"{name}-py.duckdb"), Store(tmp_path / f"{name}-bulk.duckdb")
    ev.ingest_journals(python, journals)
    (tmp_path / f"{name}.ndjson").write_text(text, encoding="utf-8", newline="")
    assert ingest_ndjson(bulk, [tmp_path / f"{name}.ndjson"]) == 3
    for table, cols in TABLES.items():
        assert _rows(python, table, cols) == _rows(bulk, table, cols), table
    if parallel:
        assert tried == [("own ids", True)]
    else:
        assert tried[0] == ("own ids", False) and tried[-1][1] and tried[-1][0] != "own ids", tried


@one_journal
def test_a_batch_with_a_run_twice_or_stored_already_is_paired_in_order(
    j: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    """Where some journal of the batch is not written (a run read twice keeps its last; a journal stored already
    word for word is left), the texts are paired with the journals kept, in order: the last one wins."""
    tried: list[str] = []

    def spy(con: Any, paths: list[str], max_object_bytes: int, reader: str, n: int) -> None:
        tried.append(reader)
        _WRITE_BATCH(con, paths, max_object_bytes, reader, n)

    monkeypatch.setattr(evidence_bulk, "_write_batch", spy)
    store = _fresh_store(tmp_path)
    twice = _ndjson(tmp_path / "twice.ndjson", {**j, "status": "failed"}, j)
    assert ingest_ndjson(store, [twice]) == 1
    assert tried == ["lines"]
    assert json.loads(store.query("SELECT body FROM journals")[0]["body"]) == j
    tried.clear()
    other = {**j, "run_id": j["run_id"] + "-2"}
    again = _ndjson(tmp_path / "again.ndjson", j, other)
    assert ingest_ndjson(store, [again]) == 2
    assert tried == ["lines"]
    bodies = {r["run_id"]: json.loads(r["body"]) for r in store.query("SELECT run_id, body FROM journals")}
    assert bodies == {j["run_id"]: j, other["run_id"]: other}
