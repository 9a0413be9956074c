"""Driver arguments are checked before anything runs, and a crashed run's journal tells what the watchdog did."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from lease_helpers import stop_watchdogs
from redis_secret import REDIS_PASSWORD

import ctk_helpers
from clihelp import cli, start_run
from faultplane.core.formats import ExperimentError
from faultplane.drivers import leases
from faultplane.drivers.base import check_arguments, list_activities
from faultplane.engine.lifecycle import checked_plan
from policy_helpers import use_lab_policy

pytestmark = [pytest.mark.timeout(90)]


def test_every_driver_action_declares_its_parameters() -> None:
    builtin = [s for s in list_activities() if s.func.__module__.startswith("faultplane.")]
    assert len(builtin) > 30
    for spec in builtin:
        schema = spec.parameters_schema()
        assert schema.get("type") == "object", spec.qualified_name
        # extra names are refused, so a misspelt argument cannot pass silently
        assert spec.params.model_config.get("extra") == "forbid", spec.qualified_name


@pytest.mark.parametrize(
    ("driver", "name", "args", "field", "text"),
    [
        (
            "redis",
            "client_pause",
            {"url": "redis://h", "timeout_m": 5},
            "arguments.timeout_m",
            "'timeout_ms'",
        ),
        ("redis", "client_pause", {"url": "redis://h"}, "arguments.timeout_ms", "requires it"),
        (
            "redis",
            "client_pause",
            {"url": "redis://h", "timeout_ms": "soon"},
            "arguments.timeout_ms",
            "integer",
        ),
        (
            "redis",
            "client_pause",
            {"url": "redis://h", "timeout_ms": 5, "mode": "all"},
            "arguments.mode",
            "'ALL'",
        ),
        ("redis", "client_paus", {}, "name", "client_pause"),
        ("rediss", "client_pause", {}, "driver", "redis"),
        (
            "postgres",
            "lock_table",
            {"dsn": "x", "table": "t", "mode": "EVERYTHING"},
            "arguments.mode",
            "ACCESS",
        ),
        ("netproxy", "latency", {"route": "r", "latency_ms": -1}, "arguments.latency_ms", "greater than"),
        ("process", "suspend", {"pid": 1, "pdi": 2}, "arguments.pdi", "has no argument"),
        ("redis", "client_pause", ["not", "a", "mapping"], "arguments", "mapping"),
    ],
)
def test_check_arguments_names_the_field_and_the_fix(driver, name, args, field, text) -> None:  # type: ignore[no-untyped-def]
    errors = check_arguments(driver, name, args)
    assert errors, "a bad argument passed"
    assert field in [e.field for e in errors]
    assert any(text in str(e) for e in errors), [str(e) for e in errors]


def test_check_arguments_accepts_valid_and_placeholder_values() -> None:
    assert check_arguments("redis", "client_pause", {"url": "redis://h", "timeout_ms": 5}) == []
    assert check_arguments("redis", "client_pause", {"url": "${url}", "timeout_ms": "${ms}"}) == []


# Addresses are checked at validate: a malformed one was found by the first connection, mid-run
@pytest.mark.parametrize(
    ("driver", "name", "args", "field", "text"),
    [
        ("http", "status", {"url": "orders:8080/health"}, "arguments.url", "http://"),
        ("http", "request", {"url": "http://[::1/x"}, "arguments.url", "IPv6"),
        ("redis", "info", {"url": "http://127.0.0.1:6379"}, "arguments.url", "not a Redis URL"),
        ("redis", "info", {"url": "redis://:hunter2pw@h:port/0"}, "arguments.url", "not a Redis URL"),
        ("postgres", "is_available", {"dsn": "host=h password=hunter2pw dbname"}, "arguments.dsn", "libpq"),
        ("postgres", "is_available", {"dsn": "postgresql://u:hunter2pw@h:port/db"}, "arguments.dsn", "port"),
        ("postgres", "replica_lag", {"replica_dsn": "host=h port=0"}, "arguments.replica_dsn", "port"),
    ],
)
def test_a_malformed_address_is_refused_at_validation_without_its_password(  # type: ignore[no-untyped-def]
    driver, name, args, field, text
) -> None:
    errors = check_arguments(driver, name, args)
    assert [e.field for e in errors] == [field], [str(e) for e in errors]
    assert (
        text in str(errors[0]) and "hunter2pw" not in str(errors[0]) and "Value error" not in str(errors[0])
    )


def test_a_sentinel_url_is_checked_as_a_redis_url() -> None:
    errors = check_arguments("redis", "sentinel_failover", {"sentinel_url": "h:26379", "master_name": "m"})
    assert [e.field for e in errors] == ["arguments.sentinel_url"] and "scheme" in str(errors[0])


def test_well_formed_addresses_pass() -> None:
    for driver, name, args in [
        ("http", "status", {"url": "HTTPS://[::1]:8443/health"}),
        ("redis", "info", {"url": "unix:///run/redis.sock"}),
        ("redis", "info", {"url": "rediss://:pw@h:6380/2"}),
        ("postgres", "is_available", {"dsn": ""}),  # libpq's defaults and PG* variables
        (
            "postgres",
            "is_available",
            {"dsn": "host=a,b port=5432,5433 dbname=app target_session_attrs=read-write"},
        ),
        ("postgres", "is_available", {"dsn": "${db}"}),
    ]:
        assert check_arguments(driver, name, args) == [], (driver, name, args)


def _experiment(target_pid: int, second: dict) -> dict:  # type: ignore[type-arg]
    return {
        "title": "two faults",
        "method": [
            {
                "type": "action",
                "name": "freeze",
                "provider": {
                    "type": "driver",
                    "driver": "process",
                    "name": "suspend",
                    "arguments": {"pid": target_pid},
                },
            },
            {"type": "action", "name": "second", "provider": {"type": "driver", **second}},
        ],
    }


def test_phase0_refuses_a_misspelt_argument_in_the_second_action_before_the_first_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        second = {
            "driver": "redis",
            "name": "client_pause",
            "arguments": {"url": "redis://127.0.0.1:1", "timout_ms": 5},
        }
        doc = _experiment(target.pid, second)
        with pytest.raises(ExperimentError) as info:
            checked_plan(doc)  # phase 0, as `validate` and `run` both do it
        # one error for one root cause: the misspelt name, with the declared one to use instead
        assert [i.field for i in info.value.issues] == ["method[1].provider.arguments.timout_ms"]
        assert "'timeout_ms'" in info.value.issues[0].fix
        # through the CLI: refused, nothing applied
        _lab_policy(tmp_path)
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = cli("run", str(path), "-q")
        assert out.returncode != 0
        assert "timout_ms" in out.stdout + out.stderr and "Traceback" not in out.stderr
        assert psutil.Process(target.pid).status() != psutil.STATUS_STOPPED
        assert leases.list_leases() == []
    finally:
        target.kill()
        target.wait(5)


def _lab_policy(tmp_path: Path) -> Path:
    return use_lab_policy("gates: {required: false}\n")


def test_journal_after_the_controller_dies_tells_what_the_watchdog_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lease_env: dict[str, str]
) -> None:
    monkeypatch.delenv("FAULTPLANE_NO_WATCHDOG", raising=False)
    _lab_policy(tmp_path)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    marker = tmp_path / "marker.txt"
    doc = _experiment(target.pid, {"driver": "process", "name": "suspend", "arguments": {"pid": target.pid}})
    doc["method"][1] = ctk_helpers.slow_action(marker)
    doc["configuration"] = {"lease_ttl_s": 5}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = start_run(path, marker)
    try:
        assert psutil.Process(target.pid).status() == psutil.STATUS_STOPPED
        proc.kill()
        proc.wait(10)
        t0 = time.monotonic()
        while psutil.Process(target.pid).status() == psutil.STATUS_STOPPED:
            assert time.monotonic() - t0 < 10, "the watchdog never resumed the process"
            time.sleep(0.05)
        listing = cli("runs", "list", "--format", "json")
        assert listing.returncode == 0, listing.stderr
        run_id = json.loads(listing.stdout)[0]["run_id"]
        journal = json.loads(cli("journal", "show", run_id, "--format", "json").stdout)
        assert journal["status"] == "interrupted"
        assert "may not have run" not in journal["error"]
        assert "the lease watchdog reverted 1 leased fault(s)" in journal["error"], journal["error"]
        [rev] = [r for r in journal["reverts"] if r.get("by") == "lease watchdog"]
        assert rev["ok"] is True and "resume" in rev["label"] and rev["at"]
        assert ctk_helpers.lines(str(marker)) == ["started"]
    finally:
        if proc.poll() is None:
            proc.kill()
        target.kill()
        target.wait(5)
        stop_watchdogs()


def test_a_secret_from_the_experiment_is_sealed_end_to_end_and_the_watchdog_still_reverts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_auth_server
) -> None:  # type: ignore[no-untyped-def]
    import redis

    monkeypatch.delenv("FAULTPLANE_NO_WATCHDOG", raising=False)
    _lab_policy(tmp_path)
    monkeypatch.setenv("FP_TEST_REDIS_PW", REDIS_PASSWORD)
    marker = tmp_path / "marker.txt"
    host = f"127.0.0.1:{redis_auth_server.port}"
    doc = {
        "title": "secret in a url",
        "secrets": {"redis": {"pw": {"type": "env", "key": "FP_TEST_REDIS_PW"}}},
        "configuration": {"lease_ttl_s": 5},
        "method": [
            {
                "type": "action",
                "name": "pause-writes",
                "provider": {
                    "type": "driver",
                    "driver": "redis",
                    "name": "client_pause",
                    "arguments": {"url": f"redis://:${{pw}}@{host}/0", "timeout_ms": 60000, "mode": "WRITE"},
                },
            },
            ctk_helpers.slow_action(marker),
        ],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = start_run(path, marker)
    url = f"redis://:{REDIS_PASSWORD}@{host}/0"
    client = redis.Redis.from_url(url, socket_timeout=0.3)
    try:
        with pytest.raises(redis.TimeoutError):
            client.set("k", "v")  # the pause is in force
        [lease] = leases.list_leases()
        assert lease.key_id is not None and "***" in lease.label
        for f in leases.lease_dir().rglob("*"):
            if f.is_file():
                assert REDIS_PASSWORD.encode() not in f.read_bytes(), f
        proc.kill()
        proc.wait(10)
        t0 = time.monotonic()
        while True:
            try:
                client.set("k", "v")
                break
            except redis.TimeoutError:
                assert time.monotonic() - t0 < 10, "the watchdog never lifted the pause"
        listing = cli("runs", "list", "--format", "json")
        run_id = json.loads(listing.stdout)[0]["run_id"]
        shown = cli("journal", "show", run_id, "--format", "json").stdout
        assert REDIS_PASSWORD not in shown and "lease watchdog reverted 1" in shown
        for f in leases.lease_dir().rglob("*"):
            if f.is_file():
                assert REDIS_PASSWORD.encode() not in f.read_bytes(), f
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        stop_watchdogs()


def test_a_misspelt_field_inside_a_list_of_hosts_gets_the_closest_name() -> None:
    errors = check_arguments(
        "ssh", "stress", {"hosts": [{"host": "h"}, {"hots": "h", "prot": 22}], "workrs": 2}
    )
    by_field = {e.field: e for e in errors}
    assert by_field["arguments.hosts.1.hots"].fix == "did you mean 'host'?"
    assert by_field["arguments.hosts.1.prot"].message == "hosts.1 has no field 'prot'"
    assert by_field["arguments.hosts.1.prot"].fix == "did you mean 'port'?"
    assert by_field["arguments.hosts.1.host"].fix == "add hosts.1.host (str)"  # the type of the nested field
    assert by_field["arguments.workrs"].fix == "did you mean 'workers'?"
    assert "arguments.hosts.0.host" not in by_field  # the first host is fine
