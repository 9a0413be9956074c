"""Script plugins: drivers written in any language, described by a manifest and run as a subprocess.

A plugin is a directory holding ``faultplane-plugin.json`` (or ``.yaml``) inside a plugin directory:
``$FAULTPLANE_PLUGIN_PATH`` (``:``-separated), ``$XDG_CONFIG_HOME/faultplane/plugins`` and
``$XDG_DATA_HOME/faultplane/plugins``. The manifest::

    {"name": "toy", "description": "...",
     "executable": "./toy.sh",                      # or ["python3", "toy.py"]; relative to the manifest
     "timeout_seconds": 60,
     "actions": [{"name": "break", "fault_type": "error", "revert": "fix",
                  "parameters": {"type": "object", "properties": {...}, "required": [...]}},
                 {"name": "fix", "parameters": {...}}],
     "probes": [{"name": "health", "parameters": {...}}]}

Contract: the executable runs as ``<executable> <action|probe> <name>`` with one JSON object on stdin,
``{"kind", "activity", "arguments", "run_id", "configuration"}``; it prints its result as JSON on stdout
(empty output means ``null``); a non-zero exit is a failure (stderr becomes the error). An action that names
a ``revert`` gets it registered (and leased) before it runs: the revert action is called with the same
arguments, merged with ``revert_arguments`` when the action's result is an object carrying that key.

Each plugin becomes a driver named after the plugin; its activities are listed with their schemas.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jsonschema
from pydantic import BaseModel, ConfigDict, model_validator

from faultplane.core.paths import faultplane_dir
from faultplane.drivers.base import BUILTIN_DRIVERS, ActivityContext, DriverError, action, probe
from faultplane.drivers.leases import leased_revert, revert_recipe, update_lease_args

__all__ = ["PLUGIN_ERRORS", "Plugin", "discover", "load_plugin", "plugin_dirs"]

MANIFEST_NAMES = ("faultplane-plugin.json", "faultplane-plugin.yaml", "faultplane-plugin.yml")
_RESERVED = {m.rsplit(".", 1)[1] for m in BUILTIN_DRIVERS} | {"script", "python", "http", "process"}
_MAX_OUTPUT = 1 << 20

PLUGIN_ERRORS: dict[str, str] = {}
PLUGINS: dict[str, Plugin] = {}


@dataclass
class Plugin:
    name: str
    manifest: Path
    command: list[str]
    description: str = ""
    timeout_s: float = 60.0
    actions: dict[str, dict[str, Any]] = field(default_factory=dict)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)


def plugin_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("FAULTPLANE_PLUGIN_PATH", "").split(os.pathsep) if p]
    dirs += [faultplane_dir("config") / "plugins", faultplane_dir("data") / "plugins"]
    return dirs


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest as a mapping; ValueError for anything else, so one broken plugin is listed among the plugin
    errors instead of stopping every command that loads the drivers."""
    import yaml

    from faultplane.core.hostile import HostileInput, parse_guarded, read_text_limited

    try:
        parse = yaml.safe_load if path.suffix in (".yaml", ".yml") else json.loads
        data = parse_guarded(parse, read_text_limited(path, "plugin manifest"), f"plugin manifest {path}")
    except HostileInput as exc:
        raise ValueError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ValueError("the manifest must be an object")
    return data


def _activity_list(data: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, a in enumerate(data.get(key) or []):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or not a["name"]:
            raise ValueError(f"{key}[{i}].name: every activity needs a non-empty name")
        schema = a.get("parameters") or {"type": "object"}
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"{key}[{i}].parameters: not a valid JSON schema: {exc.message}") from None
        out[a["name"]] = {**a, "parameters": schema}
    return out


def load_plugin(manifest: Path) -> Plugin:
    """Read and check one manifest (does not register it)."""
    data = _read_manifest(manifest)
    name = data.get("name")
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError("name: must be letters, digits, '-' or '_'")
    if name in _RESERVED:
        raise ValueError(f"name: {name!r} is a built-in driver's name; rename the plugin")
    exe = data.get("executable")
    if isinstance(exe, str):
        command = shlex.split(exe)
    elif isinstance(exe, list) and exe and all(isinstance(x, str) for x in exe):
        command = list(exe)
    else:
        raise ValueError("executable: give a command string or a non-empty list of strings")
    first = Path(command[0])
    if not first.is_absolute() and (command[0].startswith(".") or os.sep in command[0]):
        command[0] = str((manifest.parent / first).resolve())
    actions = _activity_list(data, "actions")
    probes = _activity_list(data, "probes")
    for a in actions.values():
        rev = a.get("revert")
        if rev is not None and rev not in actions:
            raise ValueError(f"actions.{a['name']}.revert: {rev!r} is not an action of this plugin")
    timeout = float(data.get("timeout_seconds", 60))
    if not 0 < timeout <= 3600:
        raise ValueError("timeout_seconds: must be in (0, 3600]")
    return Plugin(
        name, manifest.resolve(), command, str(data.get("description", "")), timeout, actions, probes
    )


async def _run(
    plugin: Plugin, kind: str, name: str, args: dict[str, Any], ctx: ActivityContext | None
) -> Any:
    payload = {
        "kind": kind,
        "activity": name,
        "arguments": args,
        "run_id": ctx.run_id if ctx else None,
        "configuration": ctx.configuration if ctx else {},
    }
    where = f"{plugin.name}.{name}"
    try:
        with anyio.fail_after(plugin.timeout_s):
            proc = await anyio.run_process(
                [*plugin.command, kind, name],
                input=json.dumps(payload).encode(),
                check=False,
                cwd=str(plugin.manifest.parent),
            )
    except TimeoutError:
        raise DriverError(f"{where}: the plugin did not finish within {plugin.timeout_s:g}s") from None
    except OSError as exc:
        raise DriverError(f"{where}: cannot run {plugin.command[0]!r}: {exc.strerror}") from None
    stdout = proc.stdout[:_MAX_OUTPUT].decode(errors="replace")
    if proc.returncode != 0:
        err = proc.stderr[-4000:].decode(errors="replace").strip()
        raise DriverError(f"{where}: exited with status {proc.returncode}: {err or stdout.strip()[-2000:]}")
    if not stdout.strip():
        return None
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        raise DriverError(f"{where}: stdout is not JSON: {stdout.strip()[:200]!r}") from None


def _run_sync(plugin: Plugin, kind: str, name: str, args: dict[str, Any]) -> Any:
    return anyio.run(_run, plugin, kind, name, args, None)


@revert_recipe("script", "revert")
def _recipe_revert(args: dict[str, Any]) -> None:
    plugin = load_plugin(Path(args["manifest"]))
    _run_sync(plugin, "action", args["action"], args["arguments"])


def _params_model(qualified: str, schema: dict[str, Any]) -> type[BaseModel]:
    validator = jsonschema.Draft202012Validator(schema)

    class Params(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="before")
        @classmethod
        def _check(cls, data: Any) -> Any:
            errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
            if errors:
                e = errors[0]
                where = ".".join(str(p) for p in e.path) or "(arguments)"
                raise ValueError(f"{where}: {e.message}")
            return data

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return schema

    Params.__name__ = Params.__qualname__ = f"{qualified.replace('.', '_').replace('-', '_')}_params"
    return Params


def _register_plugin(plugin: Plugin) -> None:
    for name, spec in plugin.actions.items():
        revert_name = spec.get("revert")

        async def run_action(
            ctx: ActivityContext, p: BaseModel, _n: str = name, _rev: str | None = revert_name
        ) -> Any:
            args = p.model_dump()
            if _rev is None:
                return await _run(plugin, "action", _n, args, ctx)
            # Register (and lease) the revert first; if the action reports revert_arguments, use them.
            revert_args = dict(args)
            recipe_args: dict[str, Any] = {
                "manifest": str(plugin.manifest),
                "action": _rev,
                "arguments": revert_args,
            }

            async def undo() -> None:
                await _run(plugin, "action", _rev, recipe_args["arguments"], ctx)

            entry = leased_revert(
                ctx,
                label=f"{plugin.name}.{_rev}",
                driver="script",
                revert="revert",
                args=recipe_args,
                fn=undo,
            )
            result = await _run(plugin, "action", _n, args, ctx)
            if isinstance(result, dict) and isinstance(result.get("revert_arguments"), dict):
                recipe_args["arguments"] = {**args, **result["revert_arguments"]}
                if entry.lease_id:
                    update_lease_args(entry.lease_id, recipe_args)
            return result

        action(
            plugin.name,
            name,
            _params_model(f"{plugin.name}.{name}", spec["parameters"]),
            description=spec.get("description") or f"{plugin.name} plugin action {name}",
            fault_type=spec.get("fault_type"),
        )(run_action)
    for name, spec in plugin.probes.items():

        async def run_probe(ctx: ActivityContext, p: BaseModel, _n: str = name) -> Any:
            return await _run(plugin, "probe", _n, p.model_dump(), ctx)

        probe(
            plugin.name,
            name,
            _params_model(f"{plugin.name}.{name}", spec["parameters"]),
            description=spec.get("description") or f"{plugin.name} plugin probe {name}",
        )(run_probe)


def discover(dirs: list[Path] | None = None) -> dict[str, Plugin]:
    """Find, check and register every plugin in ``dirs`` (default: :func:`plugin_dirs`).

    A broken manifest does not stop the others: its error is kept in ``PLUGIN_ERRORS`` by manifest path.
    """
    found: dict[str, Plugin] = {}
    for d in dirs if dirs is not None else plugin_dirs():
        if not d.is_dir():
            continue
        for sub in sorted(p for p in d.iterdir() if p.is_dir()):
            manifest = next((sub / n for n in MANIFEST_NAMES if (sub / n).is_file()), None)
            if manifest is None:
                continue
            try:
                plugin = load_plugin(manifest)
                if plugin.name in found:
                    raise ValueError(
                        f"name: {plugin.name!r} is already provided by {found[plugin.name].manifest}"
                    )
            except (ValueError, OSError) as exc:
                PLUGIN_ERRORS[str(manifest)] = str(exc)
                continue
            PLUGIN_ERRORS.pop(str(manifest), None)
            found[plugin.name] = plugin
            PLUGINS[plugin.name] = plugin
            _register_plugin(plugin)
    return found


discover()
