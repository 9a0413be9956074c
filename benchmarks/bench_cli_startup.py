"""CLI start-up: `faultplane --help` and `--version` against `chaos --help` and a bare interpreter.

Each cell is the median wall time of fresh processes, run interleaved so that a burst of load on the machine
hits every command alike. Targets: `--help` and `--version` under 0.10 s. The whole `faultplane run` against
`chaos run` is bench_engine_vs_ctk.py's cli row.

Run: `.venv/bin/python benchmarks/bench_cli_startup.py` (chaos from `make bench`'s chaostoolkit).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

REPEATS = 15
TARGET_S = 0.10


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-500:]!r}")
    return elapsed


def main() -> int:
    bindir = os.path.dirname(sys.executable)
    faultplane = shutil.which("faultplane", path=bindir) or shutil.which("faultplane")
    chaos = shutil.which("chaos", path=bindir) or shutil.which("chaos")
    if not faultplane:
        print("faultplane is not installed in this environment: make bench installs it")
        return 1
    cells: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "faultplane --help": [faultplane, "--help"],
        "faultplane --version": [faultplane, "--version"],
    }
    if chaos:
        cells["chaos --help"] = [chaos, "--no-version-check", "--help"]
    for cmd in cells.values():  # warm the file cache and the bytecode
        wall(cmd)
    samples: dict[str, list[float]] = {k: [] for k in cells}
    for _ in range(REPEATS):
        for name, cmd in cells.items():
            samples[name].append(wall(cmd))
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["python -c pass"]
    peer = med.get("chaos --help")
    print(f"{'command':<24}{'median s':>10}{'min s':>9}{'vs python':>11}{'vs chaos --help':>17}  target")
    for name, values in samples.items():
        vs_chaos = f"{med[name] / peer:.2f}x" if peer else "-"
        target = ""
        if name.startswith("faultplane"):
            target = f"< {TARGET_S:.2f} s {'MET' if med[name] < TARGET_S else 'NOT MET'}"
        print(
            f"{name:<24}{med[name]:>10.3f}{min(values):>9.3f}{med[name] / base:>10.1f}x{vs_chaos:>17}  {target}"
        )
    if not peer:
        print("(chaostoolkit not installed: no chaos --help column; make bench installs it)")
    print(f"medians of {REPEATS} interleaved fresh processes each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
