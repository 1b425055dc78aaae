"""Run every benchmark in bench/ (each prints ratios against a baseline from the same run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = ["stream_memory.py", "bootstrap_speed.py", "replay_speed.py", "capture_overhead.py"]

if __name__ == "__main__":
    here = Path(__file__).parent
    for name in BENCHES:
        print(f"== {name}", flush=True)
        subprocess.run([sys.executable, str(here / name)], check=True)
