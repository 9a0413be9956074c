"""Run every benchmark (benchmarks/bench_*.py), each in its own process, and print their tables."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    only = sys.argv[1:]
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        if only and not any(o in script.stem for o in only):
            continue
        print(f"\n=== {script.stem} ===", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], timeout=900)
        print(f"({script.stem}: {time.perf_counter() - t0:.1f}s, exit {proc.returncode})", flush=True)
        if proc.returncode != 0:
            failed.append(script.stem)
    if failed:
        print(f"\nbenchmarks that failed to run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
