"""Addresses a driver argument names (an http(s) URL, a Redis URL, a libpq DSN), checked when the experiment is
validated. A malformed one was found by the first connection, mid-run: a probe failed, or a fault's action did
after the ones before it had been injected. The messages never repeat the address: it may hold a password."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from faultplane.core.urls import http_url_problem

__all__ = ["HttpUrl", "PostgresDsn", "RedisUrl"]


def _http(url: str) -> str:
    problem = http_url_problem(url)
    if problem:
        raise ValueError(f"the URL {problem}; e.g. http://127.0.0.1:8080/health")
    return url


def _redis(url: str) -> str:
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError as exc:  # its messages name the scheme or the port, never the password
        raise ValueError(f"not a Redis URL ({exc}); e.g. redis://127.0.0.1:6379/0") from None
    return url


def _dsn(dsn: str) -> str:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except ProgrammingError:  # its message quotes the string, password included
        raise ValueError(
            "not a libpq connection string or URI; e.g. postgresql://app@127.0.0.1:5432/app or "
            "'host=127.0.0.1 port=5432 dbname=app'"
        ) from None
    ports = str(parts.get("port") or "5432").split(",")  # one port per host of a multi-host string
    if not all(p.strip().isdigit() and 0 < int(p) < 65536 for p in ports):
        raise ValueError("its port is not a number from 1 to 65535")
    return dsn


HttpUrl = Annotated[str, AfterValidator(_http)]
RedisUrl = Annotated[str, AfterValidator(_redis)]
PostgresDsn = Annotated[str, AfterValidator(_dsn)]
