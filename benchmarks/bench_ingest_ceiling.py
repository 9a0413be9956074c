"""What storing the journal text costs the bulk ingest: the same NDJSON ingested three ways into fresh DuckDB stores.

- as shipped: every table, journal texts included;
- journal rows without their text (`body` NULL): what moving the text out of the row table could win at most;
- no journal rows at all: the runs, activities and run_metrics rows alone, the ceiling of this design;
- as shipped on one DuckDB thread: how the ingest scales with cores (the parse runs on all of them).

The last three are measurement variants of `evidence_bulk` (its journals statements or thread count replaced in
this process only), not something a store can be asked for. Journals as in bench_store.py (three real runs cloned into N runs).

    python benchmarks/bench_ingest_ceiling.py [N_JOURNALS] [ROUNDS]     (default 100000, 2: best of 2 per variant)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

_ARGS = [a for a in sys.argv[1:] if not a.startswith("-")]
N = int(_ARGS[0]) if _ARGS else 100_000
ROUNDS = int(_ARGS[1]) if len(_ARGS) > 1 else 2


def main() -> int:
    sys.argv = sys.argv[:1]  # bench_store reads its own arguments at import
    import bench_store

    from faultplane.core.store import Store
    from faultplane.services import evidence as ev
    from faultplane.services import evidence_bulk as bulk

    # each variant: the statements writing the journal texts (stored by their own run ids; paired in order) and
    # the DuckDB thread count (one thread shows how the shipped ingest scales with cores)
    shipped = (bulk._JOURNALS_BY_OWN_ID, bulk._STORED_OF_BATCH, bulk._JOURNALS)
    macros = bulk._MACROS
    no_rows = "SELECT count(*) FROM _fp_src WHERE $files IS NOT NULL AND $max_size > 0"
    variants = {
        "as shipped (journal text stored)": (shipped, None),
        "as shipped, one DuckDB thread": (shipped, 1),
        "journal rows without text": (
            (shipped[0].replace("now(), body\nFROM", "now(), NULL\nFROM"), shipped[1], shipped[2]),
            None,
        ),
        "no journal rows": ((no_rows, "SELECT count(*) FROM _fp_src", no_rows), None),
    }
    assert variants["journal rows without text"][0][0] != shipped[0]
    work = Path(tempfile.mkdtemp(prefix="fp-bench-ceiling-"))
    try:
        files = bench_store.write_ndjson(
            bench_store.journal_lines(bench_store.real_templates(work), N), work / "ndjson"
        )
        load = os.getloadavg()[0]
        results: dict[str, tuple[float, float, float]] = {}
        for r in range(ROUNDS):
            for v, (name, (statements, threads)) in enumerate(variants.items()):
                bulk._JOURNALS_BY_OWN_ID, bulk._STORED_OF_BATCH, bulk._JOURNALS = statements
                # the ingest runs its setup statements on its own connection first: the thread count goes there
                bulk._MACROS = macros + ([f"SET threads = {threads}"] if threads else [])
                path = work / f"s{r}-{v}.duckdb"  # a fresh file each time: the store remembers migrated paths
                store = Store(path)
                store.ensure_schema("evidence", ev.EVIDENCE_MIGRATIONS)
                t, c = time.perf_counter(), time.process_time()
                assert bulk.ingest_ndjson(store, files) == N
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                mb = path.stat().st_size / 1e6
                if name not in results or wall < results[name][0]:
                    results[name] = (wall, cpu, mb)
                path.unlink()
        (bulk._JOURNALS_BY_OWN_ID, bulk._STORED_OF_BATCH, bulk._JOURNALS), bulk._MACROS = shipped, macros
        print(
            f"{N} journals, best of {ROUNDS}; load average {load:.1f} on {os.cpu_count()} CPUs at the start"
        )
        print(
            f"{'bulk ingest':<36}{'wall s':>8}{'CPU s':>8}{'per wall s':>12}{'per CPU s':>11}{'vs shipped':>12}{'MB':>7}"
        )
        base = results["as shipped (journal text stored)"][0]
        for name, (wall, cpu, mb) in results.items():
            print(
                f"{name:<36}{wall:>8.2f}{cpu:>8.2f}{N / wall:>12,.0f}{N / cpu:>11,.0f}{base / wall:>11.2f}x{mb:>7.1f}"
            )
        best = N / results["no journal rows"][0]
        print(
            f"target (bulk ingest >= 50,000 journals/s) even without journal rows: {'met' if best >= 50_000 else 'NOT met'}"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
