"""The DuckDB store file as Faultplane opens it (attached, with row groups of `_ROW_GROUP_ROWS`): any path a user
names, files written by DuckDB's own defaults, and row groups small enough that a bulk write goes to the file as it
runs."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from faultplane.core import store as store_module
from faultplane.core.store import Store

AUDIT = "INSERT INTO audit (ts, actor, action, subject, details) SELECT now(), 'a', 'x', i::VARCHAR, NULL FROM range(?) t(i)"


def _row_groups(con: duckdb.DuckDBPyConnection, table: str) -> list[int]:
    rows = con.execute(
        f"SELECT row_group_id, max(count) FROM pragma_storage_info('{table}') GROUP BY row_group_id ORDER BY 1"
    ).fetchall()
    return [n for _, n in rows]


@pytest.mark.parametrize(
    "name",
    [
        "it's a store.duckdb",
        'q"uote; DROP TABLE runs; --.duckdb',
        "snow ☃ \u2028 store.duckdb",
        "' AS x (READ_ONLY",
        "md:motherduck.duckdb",
        "sqlite:evidence.db",
    ],
)
def test_a_store_at_any_path_is_that_file(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quotes, SQL, Unicode in the path, a name DuckDB would read as an extension's prefix: the store is the file
    named (relative to the working directory), written and read back, read-only too."""
    monkeypatch.chdir(tmp_path)
    store = Store(name)
    path = tmp_path / name
    store.execute(AUDIT, [3])
    assert path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".pending")) == [name]
    assert Store(path).query("SELECT count(*) AS n FROM audit")[0]["n"] == 3
    with Store(path).connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM main.audit").fetchone() == (3,)
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute(AUDIT, [1])
    # what another DuckDB program sees is the same file
    other = duckdb.connect(str(path), read_only=True)
    try:
        assert other.execute("SELECT count(*) FROM audit").fetchone() == (3,)
    finally:
        other.close()


def test_a_store_written_with_duckdbs_own_row_groups_opens_and_grows(tmp_path: Path) -> None:
    """A file another DuckDB program filled (row groups of 122,880 rows) keeps its rows; what Faultplane writes to
    it after comes in row groups of _ROW_GROUP_ROWS, and every row reads back."""
    path = tmp_path / "old.duckdb"
    Store(path).execute("SELECT 1")  # the schema
    con = duckdb.connect(str(path))
    try:
        con.execute(AUDIT, [130_000])
        assert _row_groups(con, "audit") == [122_880, 7_120]
    finally:
        con.close()
    store = Store(path)
    store.execute(AUDIT, [40_000])
    with store.connect() as con:
        groups = _row_groups(con, "audit")
        assert sum(groups) == 170_000
        assert groups[0] == 122_880
        assert max(groups[2:]) == store_module._ROW_GROUP_ROWS  # the new rows: whole row groups of that size
        assert con.execute("SELECT count(DISTINCT subject) FROM audit").fetchone() == (130_000,)


def test_a_query_too_big_for_memory_spills_next_to_the_store_not_into_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's connection is an in-memory database with the file attached, whose own spill folder would be
    ./.tmp wherever the user stands; it is the file's, as when DuckDB opens the file itself."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    path = tmp_path / "s.duckdb"
    with Store(path).connect() as con:
        con.execute("SET memory_limit = '30MB'")
        con.execute("SET threads = 1")
        con.execute(
            "CREATE TEMP TABLE big AS SELECT (i * 7919 % 1000003)::VARCHAR || repeat('x', 50) AS v "
            "FROM range(2000000) t(i)"
        )
        assert con.execute("SELECT count(*) FROM (SELECT v FROM big ORDER BY v)").fetchone() == (2_000_000,)
        spilled = list((tmp_path / "s.duckdb.tmp").iterdir())
        assert any(p.name.startswith("duckdb_temp") for p in spilled), spilled
    assert list(cwd.iterdir()) == []
