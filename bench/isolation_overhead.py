"""Isolation overhead: wall time of a CPU test set isolated (one reused worker) vs in-process.

The test set is generated: N small numpy tests (a few ms of work each, like a tiny-model check).
Both sessions are fresh ``python -m pytest`` processes; the best of --repeat runs is kept.
Prints the figures and the ratio; asserts nothing. Usage: python bench/isolation_overhead.py [--tests 40]
[--quick] (--quick: 3 tests, one round, without the no-spare variant).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import add_quick

ROOT = Path(__file__).resolve().parent.parent
TEST_BODY = """
import numpy as np
import pytest

@pytest.mark.parametrize("seed", range({n}))
def test_small_forward(seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((256, 256))
    x = rng.standard_normal((64, 256))
    for _ in range(20):
        x = np.tanh(x @ w / 16)
    assert np.isfinite(x).all()
"""


def session_wall(test_file: Path, isolate: str, *extra: str) -> float:
    cmd = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider", f"--fd-isolate={isolate}", *extra]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"session failed ({isolate}):\n{done.stdout[-2000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.tests, args.repeat = 3, 1
    with tempfile.TemporaryDirectory(prefix="fdc-overhead-") as tmp:
        test_file = Path(tmp) / "test_overhead_set.py"
        test_file.write_text(TEST_BODY.format(n=args.tests))
        variants = {"in-process": ("off",), "isolated": ("all",), "isolated, no spare": ("all", "--fd-no-spare")}
        if args.quick:
            del variants["isolated, no spare"]  # the same code path with one more flag: a session saved
        walls: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):  # interleaved, so load from other processes hits every variant alike
            for name, spec in variants.items():
                walls[name].append(session_wall(test_file, *spec))
    inproc = min(walls["in-process"])
    print(f"{args.tests} tests, best of {args.repeat} interleaved sessions (wall seconds, whole pytest process)")
    print(f"{'variant':<20} {'best s':>8} {'median s':>9} {'ratio':>6}")
    for name, values in walls.items():
        median = sorted(values)[len(values) // 2]
        print(f"{name:<20} {min(values):8.2f} {median:9.2f} {min(values) / inproc:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
