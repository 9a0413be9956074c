"""Engine overhead: one experiment of 200 python probes, Faultplane vs Chaos Toolkit, same machine, same run.

Two rows, both measured here:
- engine: each tool's own engine API (Faultplane's `run_experiment` service, chaoslib's `run_experiment`) in a
  fresh Python process that imports the tool first and times only the run: load, validate, run 200 probes,
  write the journal (Faultplane: events log, journal file and store rows; Chaos Toolkit: journal file).
- cli: the command-line tool as a user runs it (`faultplane run` vs `chaos run`), wall time from start to exit,
  so interpreter and import start-up are included.
The target (Faultplane at most 0.3x Chaos Toolkit's wall time) is stated against the engine row; the CLI row is
printed beside it, with its own ratio, because start-up is what a user waits for too.

Run: `.venv/bin/python benchmarks/bench_engine_vs_ctk.py` (needs chaostoolkit: `make bench` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBES = 200
REPEATS = 5
TARGET = 0.3

# Each prints the seconds its run took; imports happen before the clock starts.
FAULTPLANE_ENGINE = """
import sys, time, anyio
from pathlib import Path
from faultplane.core.store import Store
from faultplane.services.experiments import run_experiment
exp, store, journals = sys.argv[1:4]
async def go():
    t0 = time.perf_counter()
    result = await run_experiment(Path(exp), store=Store(Path(store)), journal_dir=Path(journals))
    elapsed = time.perf_counter() - t0
    assert result.status == "completed", (result.status, result.error)
    return elapsed
print(anyio.run(go))
"""

CTK_ENGINE = """
import json, logging, sys, time
from chaoslib.experiment import run_experiment
from chaoslib.loader import load_experiment
from chaoslib.settings import load_settings
logging.disable(logging.CRITICAL)  # `chaos run` logs to a file; the engine row leaves logging out for both
exp, journal = sys.argv[1:3]
settings = load_settings("/nonexistent") or {}
t0 = time.perf_counter()
result = run_experiment(load_experiment(exp, settings), settings=settings)
with open(journal, "w") as fh:
    json.dump(result, fh, indent=2, default=str)
elapsed = time.perf_counter() - t0
assert result["status"] == "completed", result["status"]
print(elapsed)
"""


def experiment() -> dict:
    probes = [
        {
            "type": "probe",
            "name": f"probe-{i}",
            "tolerance": {"type": "regex", "pattern": "^[0-9]+$"},
            "provider": {"type": "python", "module": "json", "func": "dumps", "arguments": {"obj": i}},
        }
        for i in range(PROBES)
    ]
    return {
        "title": "200 python probes",
        "description": "engine overhead benchmark",
        "steady-state-hypothesis": {"title": "all probes in range", "probes": probes[:1]},
        "method": probes[1:],
    }


def run(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> int:
    bindir = os.path.dirname(sys.executable)
    chaos = shutil.which("chaos", path=bindir) or shutil.which("chaos")
    faultplane = shutil.which("faultplane", path=bindir) or shutil.which("faultplane")
    if not chaos:
        print("chaostoolkit is not installed: pip install chaostoolkit (make bench does)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exp = t / "exp.json"
        exp.write_text(json.dumps(experiment()))
        policy = t / "faultplane.policy.yaml"
        policy.write_text("gates: {required: false}\n")
        env = dict(
            os.environ,
            FAULTPLANE_STORE=str(t / "store.duckdb"),
            XDG_DATA_HOME=tmp,
            XDG_STATE_HOME=tmp,
            FAULTPLANE_POLICY=str(policy),
        )
        fp_engine = [
            sys.executable,
            "-c",
            FAULTPLANE_ENGINE,
            str(exp),
            str(t / "engine.duckdb"),
            str(t / "j"),
        ]
        ctk_engine = [sys.executable, "-c", CTK_ENGINE, str(exp), str(t / "ctk-engine-journal.json")]
        fp_cli = [faultplane or "faultplane", "run", str(exp), "-q", "-o", "json"]
        ctk_cli = [chaos, "--no-version-check", "--log-file", str(t / "chaos.log"), "run"]
        ctk_cli += ["--journal-path", str(t / "journal.json"), str(exp)]
        for cmd in (fp_engine, ctk_engine, fp_cli, ctk_cli):  # warm the file cache for all four
            run(cmd, env, tmp)
        samples: dict[str, list[float]] = {k: [] for k in ("fp_engine", "ctk_engine", "fp_cli", "ctk_cli")}
        for _ in range(REPEATS):  # interleaved, so a burst of load on the machine hits both tools alike
            samples["fp_engine"].append(float(run(fp_engine, env, tmp)[1].split()[-1]))
            samples["ctk_engine"].append(float(run(ctk_engine, env, tmp)[1].split()[-1]))
            samples["fp_cli"].append(run(fp_cli, env, tmp)[0])
            samples["ctk_cli"].append(run(ctk_cli, env, tmp)[0])
    med = {k: statistics.median(v) for k, v in samples.items()}
    engine_ratio = med["fp_engine"] / med["ctk_engine"]
    cli_ratio = med["fp_cli"] / med["ctk_cli"]
    print(f"{PROBES} python probes, median of {REPEATS} fresh processes per cell")
    print(f"{'measure':<44}{'faultplane s':>13}{'chaostoolkit s':>16}{'ratio':>8}")
    print(
        f"{'engine (run only, after imports)':<44}{med['fp_engine']:>13.3f}{med['ctk_engine']:>16.3f}"
        f"{engine_ratio:>8.2f}"
    )
    print(
        f"{'cli (`run` wall time incl. start-up)':<44}{med['fp_cli']:>13.3f}{med['ctk_cli']:>16.3f}{cli_ratio:>8.2f}"
    )
    verdict = "MET" if engine_ratio <= TARGET else "NOT MET"
    print(
        f"target: faultplane engine <= {TARGET:.2f}x chaostoolkit engine -> {verdict} ({engine_ratio:.2f}x)"
    )
    print(
        f"cli: {cli_ratio:.2f}x ({'within' if cli_ratio <= TARGET else 'not within'} {TARGET:.2f}x; "
        "the difference from the engine row is interpreter and import start-up)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
