"""What the benchmarks share: finding the two tools, a private lab environment, a timed child process, the
many-probe experiment the engine benchmarks run, and the test suite's helper modules (the same raw MCP
messages for tests and benchmarks, the same free port, port wait and process stop)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from lab_policy import lab_config_home


def installed(name: str) -> str | None:
    """The command `name` of this interpreter's environment, else of $PATH."""
    return shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)


def lab_env(state: Path, config_home: str | None = None) -> dict[str, str]:
    """This environment with data, state and store under `state`, and the lab's relaxed user policy (written
    under `state` unless `config_home` already holds it)."""
    return dict(
        os.environ,
        FAULTPLANE_STORE=str(state / "store.duckdb"),
        XDG_DATA_HOME=str(state),
        XDG_STATE_HOME=str(state),
        XDG_CONFIG_HOME=config_home or lab_config_home(state),
    )


@contextmanager
def lab(experiment: dict) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A throwaway lab: its folder, `experiment` written there as exp.json, and the lab environment (`lab_env`)
    for the processes a benchmark starts in it."""
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "exp.json"
        exp.write_text(json.dumps(experiment))
        yield tmp, exp, lab_env(Path(tmp))


def timed_run(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, str]:
    """(wall seconds, stdout) of one run of `cmd`; a failed run ends the benchmark with its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def probes_experiment(n: int, title: str, description: str) -> dict:
    """An experiment of `n` python probes (json.dumps checked by a regex): one in the hypothesis, the rest in
    the method, so the engine's own cost per activity dominates."""
    probes = [
        {
            "type": "probe",
            "name": f"probe-{i}",
            "tolerance": {"type": "regex", "pattern": "^[0-9]+$"},
            "provider": {"type": "python", "module": "json", "func": "dumps", "arguments": {"obj": i}},
        }
        for i in range(n)
    ]
    return {
        "title": title,
        "description": description,
        "steady-state-hypothesis": {"title": "in range", "probes": probes[:1]},
        "method": probes[1:],
    }


def sdk_server(name: str, tools: str) -> str:
    """The source of a bare MCP SDK server `name` with `tools` (functions under `@mcp.tool()`): it serves stdio,
    or, run with `http PORT`, stateless streamable HTTP answering JSON on 127.0.0.1:PORT."""
    return f"""
import sys
from mcp.server import MCPServer
mcp = MCPServer({name!r}, log_level="WARNING")
{tools}
if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=True, stateless_http=True)
    else:
        mcp.run()
"""


def suite_helpers(name: str) -> ModuleType:
    """The test suite's helper module tests/NAME.py."""
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    return importlib.import_module(name)


# the suite's own: a benchmark starts and stops its servers as the tests do
_procs = suite_helpers("proc_helpers")
free_port, wait_port, stop = _procs.free_port, _procs.wait_port, _procs.stop
