"""What a real communication group costs per model build and per RL weight cycle.

Every reference subject starts a one-rank group (NCCL on CUDA, gloo on CPU) when it is built,
and every C4 cycle shuts it down and starts it again, so the group's start is paid about
40 times in the main job. This prints, in a fresh interpreter per variant:
- the first start in the process (library load + communicator init),
- a restart of the only group (the RL cycle's shutdown + start),
- a restart while another group is alive (so the default world cannot end in between),
- a subject build (wrapper, draft, runner) once the first one paid the imports.

    python bench/comm_group_cost.py                 # cuda when visible, else cpu
    python bench/comm_group_cost.py --device cpu --repeat 5
    python bench/comm_group_cost.py --quick         # cpu, one repeat (CI: tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _quick import add_quick

from fd_conformance.devices import visible_gpu_count

PROBE_BOUND_S = 90.0  # one variant's probe; a kept-world restart once hung here on an H200
PROBE = r"""
import json, statistics, sys, time
device, repeat = sys.argv[1], int(sys.argv[2])
import torch
from fd_conformance.runtime import get_runtime
runtime = get_runtime("torch", device); runtime.synchronize()
def timed(fn):
    runtime.synchronize(); start = time.perf_counter(); fn(); runtime.synchronize()
    return time.perf_counter() - start
figures = {}
group = None
def start():
    global group
    group = runtime.new_group("tp")
def stop():
    runtime.shutdown_group(group)
def restart_median():
    return statistics.median(timed(lambda: (stop(), start())) for _ in range(repeat))
figures["first group start"] = timed(start)
figures["restart, the only group (median)"] = restart_median()
keeper = runtime.new_group("keeper")  # a second live group: the world can never end meanwhile
figures["restart beside a live group (median)"] = restart_median()
runtime.shutdown_group(keeper)
from fd_reference_models import cases
case = next(c for c in cases.all_cases() if c.name == "torch-glm4-moe-mtp")
builds = []
for _ in range(repeat + 1):
    subject = None
    def build():
        global subject
        subject = case.factory(runtime)
    builds.append(timed(build))
    subject.runner.close()
figures["first subject build"] = builds[0]
figures["subject build (median of the rest)"] = statistics.median(builds[1:])
stop()
print(json.dumps(figures))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--repeat", type=int, default=5)
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.repeat = "cpu", 1
    device = args.device if args.device != "auto" else ("cuda" if visible_gpu_count() else "cpu")
    # NCCL's shutdown joins PyTorch's watchdog and heartbeat-monitor threads; the second variant
    # shows what the monitor's join costs (our own watchdog, not NCCL's, reports hangs).
    variants = [{}] + ([{"TORCH_NCCL_ENABLE_MONITORING": "0"}] if device == "cuda" else [])
    for variant in variants:
        env = {**os.environ, **variant}
        try:
            proc = subprocess.run([sys.executable, "-c", PROBE, device, str(args.repeat)], capture_output=True, text=True,
                                  timeout=PROBE_BOUND_S, env=env)  # fmt: skip
        except subprocess.TimeoutExpired:  # a group call that never returns is a finding, not a figure
            print(f"probe killed at the {PROBE_BOUND_S:.0f} s bound ({variant or 'default environment'})")
            return 1
        if proc.returncode:
            print(f"probe failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
            return 1
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        shown = " ".join(f"{k}={v}" for k, v in variant.items()) or "default environment"
        print(f"communication group cost on {device} (torch, one rank, fresh interpreter, {shown}):")
        for name, seconds in figures.items():
            print(f"  {name:<38} {seconds * 1000:9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
