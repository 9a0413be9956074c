"""Script plugins: a shell-script plugin discovered from a plugin directory, run for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from faultplane.drivers import leases, script
from faultplane.drivers.base import ActivityContext, DriverError, get_activity, list_activities

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOY = textwrap.dedent(
    """\
    #!/bin/sh
    # A plugin in plain sh: state is a file named by the "target" argument.
    input=$(cat)
    target=$(printf '%s' "$input" | sed -n 's/.*"target": *"\\([^"]*\\)".*/\\1/p')
    case "$1/$2" in
      action/break) touch "$target"; echo '{"broken": true, "revert_arguments": {"note": "fixed-by-revert"}}' ;;
      action/fix)   rm -f "$target"; printf '%s' "$input" > "$target.fix-input" ;;
      action/fail)  echo "cannot do that" >&2; exit 3 ;;
      action/hang)  sleep 30 ;;
      action/garbage) echo "not json" ;;
      probe/health) if [ -e "$target" ]; then echo '{"broken": true}'; else echo '{"broken": false}'; fi ;;
      *) echo "unknown $1 $2" >&2; exit 64 ;;
    esac
    """
)

SCHEMA = {
    "type": "object",
    "properties": {"target": {"type": "string"}},
    "required": ["target"],
    "additionalProperties": False,
}


def make_plugin(root: Path, name: str = "toy", **overrides: object) -> Path:
    d = root / name
    d.mkdir(parents=True)
    exe = d / "toy.sh"
    exe.write_text(TOY)
    exe.chmod(0o755)
    manifest = {
        "name": name,
        "description": "a toy plugin",
        "executable": "./toy.sh",
        "timeout_seconds": 2,
        "actions": [
            {"name": "break", "fault_type": "error", "revert": "fix", "parameters": SCHEMA},
            {"name": "fix", "parameters": {"type": "object"}},
            {"name": "fail", "parameters": {"type": "object"}},
            {"name": "hang", "parameters": {"type": "object"}},
            {"name": "garbage", "parameters": {"type": "object"}},
        ],
        "probes": [{"name": "health", "parameters": SCHEMA}],
        **overrides,
    }
    (d / "faultplane-plugin.json").write_text(json.dumps(manifest))
    return d


async def test_discovered_plugin_runs_actions_probes_and_reverts(tmp_path: Path) -> None:
    make_plugin(tmp_path / "plugins")
    found = script.discover([tmp_path / "plugins"])
    assert list(found) == ["toy"]
    names = {a.qualified_name: a for a in list_activities("toy")}
    assert set(names) == {"toy.break", "toy.fix", "toy.fail", "toy.hang", "toy.garbage", "toy.health"}
    assert names["toy.break"].parameters_schema() == SCHEMA and names["toy.break"].fault_type == "error"
    target = tmp_path / "state"
    ctx = ActivityContext(run_id="s1")
    out = await get_activity("toy", "break").invoke(ctx, {"target": str(target)})
    assert out["broken"] and target.exists()
    assert await get_activity("toy", "health").invoke(ctx, {"target": str(target)}) == {"broken": True}
    [lease] = leases.list_leases()
    assert lease.args["arguments"]["note"] == "fixed-by-revert"  # the watchdog would revert the same way
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert not target.exists()
    sent = json.loads((tmp_path / "state.fix-input").read_text())
    assert sent["kind"] == "action" and sent["run_id"] == "s1"
    assert sent["arguments"] == {"target": str(target), "note": "fixed-by-revert"}
    assert leases.list_leases() == []


async def test_plugin_failures_are_clear(tmp_path: Path) -> None:
    make_plugin(tmp_path / "p")
    script.discover([tmp_path / "p"])
    ctx = ActivityContext()
    with pytest.raises(DriverError, match=r"toy\.fail: exited with status 3: cannot do that"):
        await get_activity("toy", "fail").invoke(ctx, {})
    with pytest.raises(DriverError, match=r"toy\.garbage: stdout is not JSON"):
        await get_activity("toy", "garbage").invoke(ctx, {})
    t0 = time.monotonic()
    with pytest.raises(DriverError, match="did not finish within 2s"):
        await get_activity("toy", "hang").invoke(ctx, {})
    assert time.monotonic() - t0 < 10
    with pytest.raises(DriverError, match=r"'target' is a required property"):
        await get_activity("toy", "break").invoke(ctx, {})
    with pytest.raises(DriverError, match="Additional properties"):
        await get_activity("toy", "break").invoke(ctx, {"target": "x", "extra": 1})
    assert ctx.reverts == []


def test_bad_manifests_are_reported_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    make_plugin(root, "ok1")
    make_plugin(root, "rev", actions=[{"name": "a", "revert": "nope"}])
    make_plugin(root, "process")
    (root / "broken").mkdir()
    (root / "broken" / "faultplane-plugin.json").write_text("{nope")
    # a YAML syntax error stopped every command that loads the drivers (yaml.YAMLError is no ValueError)
    (root / "yaml-broken").mkdir()
    (root / "yaml-broken" / "faultplane-plugin.yaml").write_text("name: [unclosed\n")
    (root / "latin1").mkdir()
    (root / "latin1" / "faultplane-plugin.json").write_bytes('{"name": "caf\u00e9"}'.encode("latin-1"))
    (root / "list").mkdir()
    (root / "list" / "faultplane-plugin.yml").write_text("- 1\n")
    found = script.discover([root])
    assert list(found) == ["ok1"]
    errs = {Path(k).parent.name: v for k, v in script.PLUGIN_ERRORS.items() if str(root) in k}
    assert "is not an action of this plugin" in errs["rev"]
    assert "built-in driver" in errs["process"]
    assert "broken" in errs
    assert "not valid YAML" in errs["yaml-broken"] and "not UTF-8" in errs["latin1"]
    assert "must be an object" in errs["list"]


def test_plugin_found_via_env_path_and_revert_recipe_runs_from_a_lease(tmp_path: Path) -> None:
    make_plugin(tmp_path / "envplugins", "envtoy")
    env = {**os.environ, "FAULTPLANE_PLUGIN_PATH": str(tmp_path / "envplugins")}
    target = tmp_path / "flag"
    code = textwrap.dedent(
        f"""
        import anyio, time
        from faultplane.drivers.base import ActivityContext, get_activity
        async def main():
            ctx = ActivityContext(run_id="sx", configuration={{"lease_ttl_s": 30}})
            await get_activity("envtoy", "break").invoke(ctx, {{"target": {str(target)!r}}})
            print("broken", flush=True)
            time.sleep(60)
        anyio.run(main)
        """
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert ctl.stdout is not None and ctl.stdout.readline().strip() == "broken"
        assert target.exists()
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(5)
        [res] = leases.reap()
        assert res.ok, res.error
        assert not target.exists()
    finally:
        if ctl.poll() is None:
            ctl.kill()
