"""CLI start-up: `faultplane --help`, `--version` and a whole small `faultplane run`, against `chaos --help`,
`chaos run` of the same experiment and a bare interpreter, all measured in this one run.

Each cell is the median wall time of fresh processes, run interleaved so that a burst of load on the machine
hits every command alike; each ratio is taken pair by pair (the faultplane and chaostoolkit processes of one
round) and its median printed. Targets: `--help` and `--version` under 0.10 s, and `faultplane run` at most
1.0 times `chaos run`'s wall time. The experiment is the small one a user tries first: one steady-state probe
and one action, both python functions. (bench_engine_vs_ctk.py's cli row runs 200 probes.)

Run: `.venv/bin/python benchmarks/bench_cli_startup.py` (chaos from `make bench`'s chaostoolkit).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from bench_helpers import installed, lab, suite_helpers, timed_run

REPEATS = 15
TARGET_S = 0.10
TARGET_RUN_RATIO = 1.0

EXPERIMENT = suite_helpers("clihelp").small_experiment()  # the same one the CLI tests run


def main() -> int:
    faultplane, chaos = installed("faultplane"), installed("chaos")
    if not faultplane:
        print("faultplane is not installed in this environment: make bench installs it")
        return 1
    with lab(EXPERIMENT) as (tmp, exp, env):
        t = Path(tmp)
        cells: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "faultplane --help": [faultplane, "--help"],
            "faultplane --version": [faultplane, "--version"],
            "faultplane run": [faultplane, "run", str(exp), "-q", "--json"],
        }
        if chaos:
            cells["chaos --help"] = [chaos, "--no-version-check", "--help"]
            cells["chaos run"] = [chaos, "--no-version-check", "--log-file", str(t / "chaos.log"), "run"]
            cells["chaos run"] += ["--journal-path", str(t / "journal.json"), str(exp)]
        for cmd in cells.values():  # warm the file cache and the bytecode; the store exists from here on
            timed_run(cmd, env, tmp)
        samples: dict[str, list[float]] = {k: [] for k in cells}
        for _ in range(REPEATS):
            for name, cmd in cells.items():
                samples[name].append(timed_run(cmd, env, tmp)[0])
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["python -c pass"]
    peers = {
        "faultplane --help": "chaos --help",
        "faultplane --version": "chaos --help",
        "faultplane run": "chaos run",
    }
    print(f"{'command':<22}{'median s':>9}{'min s':>8}{'vs python':>10}{'vs chaos (pairs)':>18}  target")
    for name, values in samples.items():
        peer = peers.get(name)
        vs_chaos, target = "-", ""
        if peer in samples:
            ratio = statistics.median(a / b for a, b in zip(values, samples[peer], strict=True))
            vs_chaos = f"{ratio:.2f}x {peer.split()[1]}"
        if name in ("faultplane --help", "faultplane --version"):
            target = f"< {TARGET_S:.2f} s {'MET' if med[name] < TARGET_S else 'NOT MET'}"
        elif name == "faultplane run" and peer in samples:
            target = (
                f"<= {TARGET_RUN_RATIO:.1f}x chaos run {'MET' if ratio <= TARGET_RUN_RATIO else 'NOT MET'}"
            )
        print(
            f"{name:<22}{med[name]:>9.3f}{min(values):>8.3f}{med[name] / base:>9.1f}x{vs_chaos:>18}  {target}"
        )
    if not chaos:
        print("(chaostoolkit not installed: no chaos rows; make bench installs it)")
    print(f"medians of {REPEATS} interleaved fresh processes each; ratios are medians of per-round pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
