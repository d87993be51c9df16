"""Native mode's per-capture hook cost on a CPU, this checkout against another (issue 40's hooks).

A graph class that does nothing is observed, so what is timed is the hooks' own Python around one
capture of 32 modules (module calls recorded, slots read, the compiled-capture lookup). Each side
runs in a fresh interpreter, sides alternating, medians printed:

    python bench/native_hook_ab.py /path/to/other/checkout [--pairs 5] [--trees]
    python bench/native_hook_ab.py --quick      # this checkout against itself, one pair, few captures

``--trees`` imports torch's cudagraph trees first (the lookup then walks the capture's frames).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _quick import add_quick

ROOT = Path(__file__).resolve().parents[1]
ONE_SIDE = """
import statistics, time, torch
if {trees}:
    import torch._inductor.cudagraph_trees
from fd_conformance.runtime import get_runtime
from fd_conformance.runtime.torch_native import TorchGraphObserver

class NullGraph:
    def capture_begin(self, *a, **k): pass
    def capture_end(self, *a, **k): pass
    def replay(self, *a, **k): pass
    def reset(self, *a, **k): pass

torch.manual_seed(0)
net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(32)])
x = torch.randn(4, 64)
observer = TorchGraphObserver(get_runtime("torch", "cpu"), NullGraph)
observer.set_roots([("main", net)])
kept = []
def capture():
    graph = NullGraph(); graph.capture_begin(); net(x); graph.capture_end(); kept.append(graph)
    del kept[:-8]
with torch.no_grad():
    for _ in range(50): capture()
    rounds = []
    for _ in range({rounds}):
        start = time.perf_counter()
        for _ in range({captures}): capture()
        rounds.append((time.perf_counter() - start) / {captures} * 1e6)
observer.close()
print(statistics.median(rounds))
"""


def one_side(checkout: Path, trees: bool, quick: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    code = ONE_SIDE.format(trees=trees, rounds=1 if quick else 7, captures=5 if quick else 300)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, nargs="?", default=ROOT, help="the checkout to compare with (e.g. a git worktree)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--trees", action="store_true", help="import torch's cudagraph trees first")
    add_quick(parser)
    args = parser.parse_args()
    pairs = 1 if args.quick else args.pairs
    this, other = [], []
    for _ in range(pairs):
        other.append(one_side(args.other, args.trees, args.quick))
        this.append(one_side(ROOT, args.trees, args.quick))
    print(
        f"per capture, 32 modules, median of {pairs}: other {statistics.median(other):.1f} us, this {statistics.median(this):.1f} us"
    )
    print(f"  other: {[round(v, 1) for v in other]}\n  this:  {[round(v, 1) for v in this]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
