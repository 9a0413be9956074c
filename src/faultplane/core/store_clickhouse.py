"""The names this module had before the ClickHouse store moved (old import path; new code imports from there):
the store is `core.clickhouse_store`, the engine choice `core.store.open_store`, a journal's rows
`core.journal_rows`.
"""

from __future__ import annotations

from faultplane.core.clickhouse_store import ClickHouseStore, ClickHouseStoreError
from faultplane.core.journal_rows import journal_rows
from faultplane.core.store import open_store
from faultplane.core.store_base import is_clickhouse_url

__all__ = ["ClickHouseStore", "ClickHouseStoreError", "is_clickhouse_url", "journal_rows", "open_store"]
