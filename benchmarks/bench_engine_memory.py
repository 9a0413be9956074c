"""Engine memory: peak RSS of `faultplane run` vs `chaos run` on the same experiments, same run of this script.

Each cell is the maximum resident set of one fresh command-line process (its own and its waited-for
children's, from wait4, as `/usr/bin/time -v` reports it), median of a few repeats, with a fresh journal
directory and store every time. Experiments of 10 and 1,000 python probes give the total and the cost per
activity (the slope between them). Target: Faultplane at most 1.5x Chaos Toolkit at 1,000 activities, and flat
per activity.

Run: `.venv/bin/python benchmarks/bench_engine_memory.py` (needs chaostoolkit: `make bench` installs it).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_helpers import installed, lab_env, probes_experiment
from lab_policy import lab_config_home

SIZES = (10, 1000)
REPEATS = 3
TARGET = 1.5


def peak_rss_mib(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} failed: {err[-1000:]}")
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def main() -> int:
    chaos, faultplane = installed("chaos"), installed("faultplane")
    if not chaos or not faultplane:
        print("chaostoolkit is not installed: pip install chaostoolkit (make bench does); skipped")
        return 0
    cells: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        # the strict default wants SLO gates these probes do not declare: a lab's user policy relaxes it
        config_home = lab_config_home(t)
        for n in SIZES:
            (t / f"exp{n}.json").write_text(
                json.dumps(probes_experiment(n, f"{n} python probes", "engine memory benchmark"))
            )
        for rep in range(REPEATS):  # interleaved: a burst of load on the machine hits both tools alike
            for n in SIZES:
                run_dir = t / f"r{rep}-{n}"
                run_dir.mkdir()
                env = lab_env(run_dir, config_home)
                exp = str(t / f"exp{n}.json")
                fp = [faultplane, "run", exp, "-q", "--format", "json"]
                ctk = [chaos, "--no-version-check", "--log-file", str(run_dir / "chaos.log"), "run"]
                ctk += ["--journal-path", str(run_dir / "journal.json"), exp]
                cells.setdefault(("fp", n), []).append(peak_rss_mib(fp, env, str(run_dir)))
                cells.setdefault(("ctk", n), []).append(peak_rss_mib(ctk, env, str(run_dir)))
    med = {k: statistics.median(v) for k, v in cells.items()}
    lo, hi = SIZES
    print(f"peak RSS of the command-line run, MiB (median of {REPEATS} fresh processes)")
    print(f"{'measure':<40}{'faultplane':>12}{'chaos run':>12}{'ratio':>8}")
    for n in SIZES:
        print(
            f"{f'{n} activities':<40}{med['fp', n]:>12.1f}{med['ctk', n]:>12.1f}{med['fp', n] / med['ctk', n]:>8.2f}"
        )
    slope = {tool: (med[tool, hi] - med[tool, lo]) / (hi - lo) * 1024 for tool in ("fp", "ctk")}
    print(f"{'KiB per activity (slope)':<40}{slope['fp']:>12.1f}{slope['ctk']:>12.1f}")
    ratio = med["fp", hi] / med["ctk", hi]
    print(
        f"target: faultplane <= {TARGET}x chaos run at {hi} activities -> {'MET' if ratio <= TARGET else 'NOT MET'} ({ratio:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
