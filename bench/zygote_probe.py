"""Would forking the isolation workers from one pre-imported process (a zygote) pay off?

The main job's floor is every worker importing torch and transformers' modeling stack for its
first model check, eight side by side. This probe measures the alternative before anyone builds
it: N fresh interpreters that each import, build one reference model on the device, warm it up,
capture its graphs and replay (what workers do now), against one process that imports the same
modules once -- without touching the device -- and forks N children that do the rest. It prints,
per mode, when each worker's first replay was done (seconds from the mode's start) and whether
every child could use the device at all after the fork (a parent that initialised CUDA, or an
import that did, leaves its forked children unable to).

    python bench/zygote_probe.py --device cuda --workers 8
    python bench/zygote_probe.py --quick        # cpu, 1 worker each way (no CUDA: the fork question is moot)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _quick import add_quick


def preload() -> None:
    """The imports a worker's first model check pays (the reference models import transformers
    lazily, inside their factories, so the probe names them). None of them touches the device."""
    import torch  # noqa: F401
    from transformers import Glm4MoeModel, Qwen3VLModel  # noqa: F401

    import fd_reference_models.torch_models.subject  # noqa: F401


def first_check(device: str, case_name: str) -> float:
    """One reference model built on the device, warmed up, captured and replayed: the wall-clock
    time it was done."""
    from fd_conformance.runtime import get_runtime
    from fd_conformance.suite._support import graphs_on
    from fd_reference_models import cases

    runtime = get_runtime("torch", device)
    case = next(c for c in cases.all_cases() if c.name == case_name)
    subject = case.factory(runtime)
    graphs_on(subject)
    subject.eager_forward(subject.make_inputs(max(case.capture_sizes)))
    subject.runner.capture_model()
    subject.forward(subject.make_inputs(case.capture_sizes[0]))
    runtime.synchronize()
    subject.runner.close()
    return time.time()


def spawned(device: str, case: str, workers: int) -> list[float]:
    """N fresh interpreters side by side, each importing on its own (today's workers)."""
    start = time.time()
    cmd = [sys.executable, __file__, "--device", device, "--case", case, "--child"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    ends = []
    for proc in procs:
        out, err = proc.communicate()
        done = [line for line in out.splitlines() if line.startswith("done ")]
        if proc.returncode != 0 or not done:
            sys.exit(f"a spawned worker failed (exit {proc.returncode}):\n{err[-2000:]}")
        ends.append(float(done[-1].split()[1]) - start)
    return sorted(ends)


def forked(device: str, case: str, workers: int) -> tuple[list[float], float, bool]:
    """One process imports, then forks N children (a zygote). Returns the children's done times,
    when the import ended, and whether the parent's CUDA was initialised before the fork."""
    start = time.time()
    preload()
    imported = time.time() - start
    import torch

    initialised = bool(torch.cuda.is_initialized())
    children = []
    for _ in range(workers):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one first check, its end time down the pipe, no interpreter teardown
            os.close(read)
            try:
                payload = {"done": first_check(device, case)}
            except BaseException as err:  # noqa: BLE001 - reported to the parent, which decides
                payload = {"error": f"{type(err).__name__}: {err}"}
            os.write(write, json.dumps(payload).encode())
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    ends, errors = [], []
    for pid, read in children:
        with os.fdopen(read) as pipe:
            text = pipe.read()
        os.waitpid(pid, 0)
        payload = json.loads(text) if text else {"error": "the child died without a word"}
        if "error" in payload:
            errors.append(payload["error"])
        else:
            ends.append(float(payload["done"]) - start)
    if errors:
        print(f"fork: {len(errors)} of {workers} children failed after the fork; first: {errors[0]}")
    return sorted(ends), imported, initialised


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--case", default="torch-glm4-moe")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one spawned worker
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.workers = "cpu", 1
    if args.child:
        preload()
        print("done", first_check(args.device, args.case), flush=True)
        return 0
    ends = spawned(args.device, args.case, args.workers)
    print(
        f"spawn x{args.workers}: first replay done at {' '.join(f'{e:.1f}' for e in ends)} s (last {ends[-1]:.1f} s)", flush=True
    )
    ends, imported, initialised = forked(args.device, args.case, args.workers)
    done = f"first replay done at {' '.join(f'{e:.1f}' for e in ends)} s (last {ends[-1]:.1f} s)" if ends else "no child finished"
    print(f"fork  x{args.workers}: imports once {imported:.1f} s (CUDA initialised before the fork: {initialised}); {done}")
    return 0 if len(ends) == args.workers else 1


if __name__ == "__main__":
    sys.exit(main())
