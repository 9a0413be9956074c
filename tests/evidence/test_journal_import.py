"""`faultplane journal import`: journal files (.json, one journal or a list; .ndjson/.jsonl, one per line) and
folders of them into a store. The rows are the ones `evidence.ingest_journals` writes for the same journals, on
DuckDB (bulk NDJSON reader) and on chDB (Python path); bad files fail in one line naming the file and write
nothing."""

from __future__ import annotations

import gzip
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from clickhouse_helpers import chdb_store
from hypothesis import HealthCheck, given, settings
from test_same_answers import journal_sets
from typer.testing import CliRunner

from clihelp import cli, small_experiment
from faultplane.cli.main import app
from faultplane.core.store import Store
from faultplane.services import evidence as ev
from faultplane.services.journal_import import import_journal_files
from policy_helpers import use_lab_policy

runner = CliRunner()
# line breaks JSON keeps raw inside strings, which a line reader must not split a journal at
ODD_TEXT = "line\u2028sep\u2029par\u0085nel \r\n crlf ünï 'q' \\ back"


def _journal(run_id: str, status: str = "completed") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "start": "2026-11-01T10:00:00+00:00",
        "end": "2026-11-01T10:00:02+00:00",
        "duration": 2.0,
        "experiment": {"title": "Checkout latency", "tags": []},
        "steady_states": {"before": {"steady_state_met": True, "probes": []}, "after": None},
        "run": [],
        "rollbacks": [],
    }


def _write_mixed(folder: Path, journals: list[dict[str, Any]]) -> None:
    """The journals in their order across the three shapes: one pretty .json file each, a .json list, then an
    NDJSON file; a hidden folder with a stray file that is not a journal (skipped)."""
    folder.mkdir(parents=True, exist_ok=True)
    third = max(1, len(journals) // 3)
    singles, listed, lines = journals[:third], journals[third : 2 * third], journals[2 * third :]
    for i, j in enumerate(singles):
        (folder / f"a{i:03d}.json").write_text(json.dumps(j, indent=2, ensure_ascii=False), encoding="utf-8")
    if listed:
        (folder / "b-list.json").write_text(json.dumps(listed, ensure_ascii=False), encoding="utf-8")
    if lines:
        body = "".join(json.dumps(j, ensure_ascii=False) + "\n\n" for j in lines)  # blank lines are skipped
        (folder / "c-fleet.ndjson").write_text(body, encoding="utf-8")
    (folder / ".cache").mkdir(exist_ok=True)
    (folder / ".cache" / "junk.json").write_text('{"not": "a journal"}', encoding="utf-8")


def _rows(store: Any) -> dict[str, Any]:
    runs = store.query("SELECT run_id, status FROM runs ORDER BY run_id")
    bodies = {r["run_id"]: json.loads(r["body"]) for r in store.query("SELECT run_id, body FROM journals")}
    return {
        "runs": [(r["run_id"], r["status"]) for r in runs],
        "bodies": bodies,
        "cards": [c.model_dump() for c in ev.scorecards(store, sync=False)],
    }


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(journals=journal_sets())
def test_import_writes_what_ingest_journals_writes_on_duckdb_and_chdb(
    journals: list[dict[str, Any]], tmp_path: Path, chdb_dir: Path
) -> None:
    journals[0]["verdict"] = ODD_TEXT
    work = tmp_path / uuid.uuid4().hex
    _write_mixed(work / "in", journals)
    reference = Store(work / "ref.duckdb")
    ev.ingest_journals(reference, journals)
    expected = _rows(reference)

    duck = work / "imported.duckdb"
    res = runner.invoke(app, ["journal", "import", str(work / "in"), "--store", str(duck), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    runs = len({j["run_id"] for j in journals})  # a run given twice is written once
    assert summary["journals"] == runs and summary["ingest_path"] == "bulk"
    assert _rows(Store(duck)) == expected
    assert expected["bodies"][journals[0]["run_id"]]["verdict"] == ODD_TEXT or runs < len(journals)

    ch = chdb_store(chdb_dir)
    try:
        result = import_journal_files(ch, [work / "in"])
        assert (result.journals, result.path) == (runs, "python")
        assert _rows(ch) == expected
    finally:
        ch.execute(f"DROP DATABASE IF EXISTS {ch.database}")


def test_a_run_found_twice_keeps_the_journal_read_last_and_a_second_import_replaces(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "1-first.json").write_text(json.dumps(_journal("r-1", "failed")), encoding="utf-8")
    (folder / "2-later.ndjson").write_text(
        json.dumps(_journal("r-1", "completed")) + "\n" + json.dumps(_journal("r-2")) + "\n", encoding="utf-8"
    )
    store = tmp_path / "s.duckdb"
    for _ in range(2):
        res = runner.invoke(app, ["journal", "import", str(folder), "--store", str(store)])
        assert res.exit_code == 0, res.output
        (line,) = res.stdout.splitlines()  # one line, the store's path whole, however narrow the terminal
        assert re.fullmatch(
            rf"imported 2 journals from 2 file\(s\) into {re.escape(str(store))} in .* s \(.*\)", line
        )
        rows = Store(store).query("SELECT run_id, status FROM runs ORDER BY run_id")
        assert [(r["run_id"], r["status"]) for r in rows] == [("r-1", "completed"), ("r-2", "completed")]
    # files named one by one are taken in the order given, whatever their names
    res = runner.invoke(
        app,
        [
            "journal",
            "import",
            str(folder / "2-later.ndjson"),
            str(folder / "1-first.json"),
            "--store",
            str(store),
        ],
    )
    assert res.exit_code == 0, res.output
    (row,) = Store(store).query("SELECT status FROM runs WHERE run_id = 'r-1'")
    assert row["status"] == "failed"
    # --quiet prints nothing on success
    res = runner.invoke(app, ["journal", "import", str(folder), "--store", str(store), "-q"])
    assert res.exit_code == 0 and res.stdout == ""


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "pipe.json")
    return folder / "pipe.json"


# each case: what the folder holds, what is passed, a fragment the one-line error must hold
HOSTILE: dict[str, tuple[dict[str, bytes], Any, str]] = {
    "missing path": ({}, lambda d: d / "nope", "does not exist"),
    "empty folder": ({"notes.txt": b"hello"}, lambda d: d, "no .json, .ndjson or .jsonl file"),
    "object that is no journal": ({"x.json": b'{"a": 1}'}, lambda d: d, "x.json: not a Faultplane journal"),
    "run_id not a string": ({"x.json": b'{"run_id": 5}'}, lambda d: d, "not a Faultplane journal"),
    "list holding a stranger": (
        {"x.json": json.dumps([_journal("ok-1"), 3]).encode()},
        lambda d: d,
        "x.json item 1: not a Faultplane journal",
    ),
    "invalid JSON": ({"x.json": b'{"run_id": "a",\n  "status": }'}, lambda d: d, "x.json:2:"),
    "not UTF-8": ({"x.json": b'{"run_id": "\xff\xfe"}'}, lambda d: d, "not UTF-8"),
    "nested past any journal": ({"x.json": b"[" * 200_000}, lambda d: d, "x.json"),
    "a bad NDJSON line": (
        {"x.ndjson": (json.dumps(_journal("ok-2")) + "\n{oops\n").encode()},
        lambda d: d,
        "not journals",
    ),
    "a FIFO named as a file": ({}, _fifo, "not a regular file"),
    # a regular file whose first page is unmapped: EIO on read, even for root
    "a file that cannot be read": ({}, lambda d: Path("/proc/self/mem"), "/proc/self/mem: cannot be read"),
    "a .gz that is no gzip": (
        {"x.ndjson.gz": (json.dumps(_journal("ok-4")) + "\n").encode()},
        lambda d: d,
        "x.ndjson.gz",
    ),
    "a cut gzip file": (
        {"x.jsonl.gz": gzip.compress((json.dumps(_journal("ok-5")) + "\n").encode() * 50)[:-30]},
        lambda d: d,
        "x.jsonl.gz",
    ),
    # a good NDJSON file before a bad .json file: nothing of either is written
    "good file then bad file": (
        {"a.ndjson": (json.dumps(_journal("ok-3")) + "\n").encode(), "b.json": b"[1, 2]"},
        lambda d: d,
        "b.json item 0: not a Faultplane journal",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_bad_input_is_one_line_naming_the_file_and_writes_nothing(case: str, tmp_path: Path) -> None:
    files, target, fragment = HOSTILE[case]
    folder = tmp_path / "in"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    store = tmp_path / "s.duckdb"
    res = runner.invoke(app, ["journal", "import", str(target(folder)), "--store", str(store)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert fragment in lines[0] and "fix:" in lines[0], lines[0]
    if store.exists():
        assert Store(store).query("SELECT count(*) AS n FROM runs")[0]["n"] == 0


def test_a_bad_line_on_clickhouse_names_its_line(tmp_path: Path, chdb: Any) -> None:
    bad = tmp_path / "fleet.jsonl"
    bad.write_text(json.dumps(_journal("ch-1")) + "\n" + '{"run_id": "ch-2", "status": \n', encoding="utf-8")
    with pytest.raises(ev.EvidenceError, match=r"fleet\.jsonl:2: invalid JSON"):
        import_journal_files(chdb, [bad])
    unreadable = tmp_path / "mem.ndjson"
    unreadable.symlink_to("/proc/self/mem")
    with pytest.raises(ev.EvidenceError, match=r"mem\.ndjson: cannot be read \(Input/output error\); fix: "):
        import_journal_files(chdb, [unreadable])
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress((json.dumps(_journal("ch-3")) + "\n").encode() * 50)[:-30])
    with pytest.raises(ev.EvidenceError, match=r"cut\.jsonl\.gz: not a whole gzip file .*; fix: "):
        import_journal_files(chdb, [cut])


@pytest.mark.parametrize("engine", ["duckdb", "chdb"])
def test_ingest_journals_keeps_the_last_journal_of_a_run_given_twice_in_a_batch(
    engine: str, tmp_path: Path, chdb_dir: Path
) -> None:
    store = Store(tmp_path / "s.duckdb") if engine == "duckdb" else chdb_store(chdb_dir)
    try:
        n = ev.ingest_journals(
            store, [_journal("d-1", "failed"), _journal("d-2"), _journal("d-1", "completed")]
        )
        rows = store.query(
            "SELECT run_id, status FROM runs FINAL" if engine == "chdb" else "SELECT * FROM runs"
        )
        assert n == 2 and sorted((r["run_id"], r["status"]) for r in rows) == [
            ("d-1", "completed"),
            ("d-2", "completed"),
        ]
    finally:
        if engine == "chdb":
            store.execute(f"DROP DATABASE IF EXISTS {store.database}")


def _gz_lines(path: Path, journals: list[dict[str, Any]]) -> None:
    path.write_bytes(gzip.compress("".join(json.dumps(j) + "\n" for j in journals).encode()))


def test_gzipped_ndjson_imports_as_the_plain_file_does_on_duckdb_and_chdb(tmp_path: Path, chdb: Any) -> None:
    journals = [_journal(f"gz-{i}", ("completed", "failed")[i % 2]) for i in range(30)]
    folder = tmp_path / "in"
    folder.mkdir()
    _gz_lines(folder / "a.ndjson.gz", journals[:20])
    _gz_lines(folder / "b.jsonl.gz", journals[20:])
    reference = Store(tmp_path / "ref.duckdb")
    ev.ingest_journals(reference, journals)
    duck = Store(tmp_path / "s.duckdb")
    assert import_journal_files(duck, [folder]).journals == 30
    assert import_journal_files(chdb, [folder]).journals == 30
    assert _rows(duck) == _rows(reference) == _rows(chdb)


def test_a_batch_of_gzip_files_is_measured_by_its_text_not_its_compressed_size(tmp_path: Path) -> None:
    from faultplane.services.evidence_bulk import ingest_ndjson

    files = [tmp_path / f"{i}.ndjson.gz" for i in range(3)]
    for i, f in enumerate(files):
        _gz_lines(f, [_journal(f"b{i}-{k}") for k in range(40)])
    text = len("".join(json.dumps(_journal(f"b0-{k}")) + "\n" for k in range(40)))
    compressed = max(f.stat().st_size for f in files)
    assert compressed * 3 < text  # one batch by compressed size, three by text
    batches: list[int] = []
    store = Store(tmp_path / "s.duckdb")
    n = ingest_ndjson(store, files, batch_bytes=text + 1, on_batch=lambda j, _files: batches.append(j))
    assert n == 120 and batches == [40, 40, 40]


def test_a_real_run_exported_on_one_machine_reads_the_same_after_import_on_another(tmp_path: Path) -> None:
    """The round trip a user makes: `run --journal` (or `journal export --format faultplane`) where the run
    happened, `journal import` into another store, then `journal show` and `analyze` there, as real processes."""
    use_lab_policy("gates: {required: false}\n")
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(small_experiment("round trip")), encoding="utf-8")
    here, there = str(tmp_path / "here.duckdb"), str(tmp_path / "there.duckdb")
    ran = cli("run", str(exp), "-q", "--json", "--store", here, "--journal", str(tmp_path / "run.json"))
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    exported = cli(
        "journal", "export", run_id, "--format", "faultplane", "-o", str(tmp_path / "x.json"), "--store", here
    )
    assert exported.returncode == 0, exported.stderr
    for name in ("run.json", "x.json"):
        imported = cli("journal", "import", str(tmp_path / name), "--store", there, "--json")
        assert imported.returncode == 0 and json.loads(imported.stdout)["journals"] == 1, imported.stderr
        shown = {
            where: json.loads(cli("journal", "show", run_id, "-f", "json", "--store", where).stdout)
            for where in (here, there)
        }
        assert shown[here] == shown[there] and shown[there]["status"] == "completed"
    seen = [json.loads(cli("analyze", "--json", "--store", where).stdout) for where in (here, there)]
    assert [(a["runs"], a["experiments"]) for a in seen] == [(seen[0]["runs"], seen[0]["experiments"])] * 2
    assert seen[1]["runs_total"] == 1 and seen[1]["experiments"][0]["runs"] == 1


def _written(store: Store) -> dict[str, Any]:
    return {r["run_id"]: r["written_at"] for r in store.query("SELECT run_id, written_at FROM journals")}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=journal_sets(), second=journal_sets())
def test_journals_shipped_again_are_left_as_stored_and_changed_ones_replaced(
    first: list[dict[str, Any]], second: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A fleet re-sends its files: the journals the store holds word for word are left as they are (their
    written_at too), a journal of a stored run that changed replaces it, new runs are added; the rows end as
    writing every journal one after the other would leave them."""
    work = tmp_path / uuid.uuid4().hex
    work.mkdir()
    again = [json.loads(json.dumps(j)) for j in first]
    for j in again:  # one run changed (every copy of it: journal_sets may hold a run twice)
        if j["run_id"] == first[0]["run_id"]:
            j["status"] = "failed" if first[0]["status"] != "failed" else "completed"
    shipped = [*again, *second]
    (work / "a.ndjson").write_text("".join(json.dumps(j) + "\n" for j in first), encoding="utf-8")
    (work / "b.ndjson").write_text("".join(json.dumps(j) + "\n" for j in shipped), encoding="utf-8")
    store, reference = Store(work / "s.duckdb"), Store(work / "ref.duckdb")
    import_journal_files(store, [work / "a.ndjson"])
    before = _written(store)
    assert import_journal_files(store, [work / "b.ndjson"]).journals == len({j["run_id"] for j in shipped})
    ev.ingest_journals(reference, first)
    ev.ingest_journals(reference, shipped)
    assert _rows(store) == _rows(reference)
    after = _written(store)
    stored = {j["run_id"]: json.dumps(j) for j in first}  # the text each stored run was left with
    last = {j["run_id"]: json.dumps(j) for j in shipped}  # and the one it is shipped with last
    for run_id in before:
        assert (after[run_id] != before[run_id]) == (last.get(run_id, stored[run_id]) != stored[run_id]), (
            run_id
        )


def test_a_journal_whose_line_the_line_reader_splits_is_imported_again_whole(tmp_path: Path) -> None:
    """A raw carriage return between a journal's tokens is JSON whitespace but a line break to the line reader:
    the texts are out of step with the journals, nothing is taken as unchanged, and the batch is written from
    the JSON reader's objects, twice over."""
    j = _journal("cr-1")
    text = json.dumps(j).replace(', "status"', ',\r"status"')
    (tmp_path / "cr.ndjson").write_text(text + "\n" + json.dumps(_journal("cr-2")) + "\n", encoding="utf-8")
    store = Store(tmp_path / "s.duckdb")
    for _ in range(2):
        assert import_journal_files(store, [tmp_path / "cr.ndjson"]).journals == 2
        bodies = {
            r["run_id"]: json.loads(r["body"]) for r in store.query("SELECT run_id, body FROM journals")
        }
        assert bodies == {"cr-1": j, "cr-2": _journal("cr-2")}


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_journals_piped_in_on_standard_input(packed: bool, tmp_path: Path) -> None:
    journals = [_journal(f"in-{i}") for i in range(5)]
    data = "".join(json.dumps(j) + "\n" for j in journals).encode()
    store = tmp_path / "s.duckdb"
    res = runner.invoke(
        app,
        ["journal", "import", "-", "--store", str(store), "--json"],
        input=gzip.compress(data) if packed else data,
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["journals"] == 5
    rows = Store(store).query("SELECT run_id, body FROM journals ORDER BY run_id")
    assert [json.loads(r["body"]) for r in rows] == journals


@pytest.mark.parametrize(
    ("argv", "data", "fragment"),
    [
        (["-"], b"", "-: nothing came on standard input"),
        (["-", "-"], b"{}", "-: standard input named twice"),
        (["-"], b'{"run_id": "a"}\n{oops\n', 'file "-"'),
    ],
    ids=["empty", "named twice", "bad line"],
)
def test_standard_input_mistakes_are_one_line_naming_it(
    argv: list[str], data: bytes, fragment: str, tmp_path: Path
) -> None:
    res = runner.invoke(app, ["journal", "import", *argv, "--store", str(tmp_path / "s.duckdb")], input=data)
    assert res.exit_code == 2, res.output
    (line,) = [line for line in res.stderr.splitlines() if line.strip()]
    assert fragment in line and "fix:" in line and "faultplane-stdin-" not in line, line


@pytest.mark.parametrize("engine", ["duckdb", "chdb"])
def test_progress_tells_every_journal_and_the_bytes_of_the_files_given(
    engine: str, tmp_path: Path, chdb_dir: Path
) -> None:
    """A bar fills to the files' own size: .json files rewritten as compact NDJSON on the bulk path count for
    what they weigh on disk, not for their scratch copy."""
    folder = tmp_path / "in"
    _write_mixed(folder, [_journal(f"p-{i}") for i in range(9)])
    files = [f for f in folder.iterdir() if f.is_file()]
    told: list[tuple[int, int]] = []
    store = Store(tmp_path / "s.duckdb") if engine == "duckdb" else chdb_store(chdb_dir)
    try:
        result = import_journal_files(store, [folder], on_progress=lambda j, b: told.append((j, b)))
    finally:
        if engine == "chdb":
            store.execute(f"DROP DATABASE IF EXISTS {store.database}")
    assert sum(j for j, _ in told) == result.journals == 9
    assert sum(b for _, b in told) == result.bytes == sum(f.stat().st_size for f in files)
