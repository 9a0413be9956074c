"""Engine overhead: one experiment of 200 python probes, Faultplane vs Chaos Toolkit, same machine, same run.

Both tools are run as a user would: the command-line tool in a fresh process, wall time from start to exit.
Target: Faultplane at most 0.3x Chaos Toolkit's wall time.
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
REPEATS = 3


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


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed


def main() -> int:
    chaos = shutil.which("chaos", path=os.path.dirname(sys.executable)) or shutil.which("chaos")
    faultplane = shutil.which("faultplane", path=os.path.dirname(sys.executable)) or shutil.which(
        "faultplane"
    )
    if not chaos:
        print("chaostoolkit is not installed: pip install chaostoolkit (make bench does)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "exp.json"
        exp.write_text(json.dumps(experiment()))
        policy = Path(tmp) / "faultplane.policy.yaml"
        policy.write_text("gates: {required: false}\n")
        env = dict(
            os.environ,
            FAULTPLANE_STORE=str(Path(tmp) / "store.duckdb"),
            XDG_DATA_HOME=tmp,
            XDG_STATE_HOME=tmp,
            FAULTPLANE_POLICY=str(policy),
        )
        fp_cmd = [faultplane or "faultplane", "run", str(exp), "-q", "-o", "json"]
        ctk_cmd = [
            chaos,
            "--no-version-check",
            "--log-file",
            str(Path(tmp) / "chaos.log"),
            "run",
            "--journal-path",
            str(Path(tmp) / "journal.json"),
            str(exp),
        ]
        timed(fp_cmd, env, tmp)  # warm the file cache for both
        timed(ctk_cmd, env, tmp)
        fp = [timed(fp_cmd, env, tmp) for _ in range(REPEATS)]
        ctk = [timed(ctk_cmd, env, tmp) for _ in range(REPEATS)]
    fp_med, ctk_med = statistics.median(fp), statistics.median(ctk)
    ratio = fp_med / ctk_med
    print(f"{'engine (200 python probes)':<34}{'median wall s':>14}{'runs':>6}{'ratio':>8}")
    print(f"{'chaostoolkit (baseline)':<34}{ctk_med:>14.3f}{REPEATS:>6}{1.0:>8.2f}")
    print(f"{'faultplane':<34}{fp_med:>14.3f}{REPEATS:>6}{ratio:>8.2f}")
    print(f"target: faultplane <= 0.30x chaostoolkit -> {'MET' if ratio <= 0.3 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
