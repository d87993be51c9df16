"""The pytest child of ``fd-conformance run``: started in its own process group, its progress
printed from results.jsonl while it runs, and the whole group ended on SIGINT/SIGTERM.

Apart from the command because supervising a process (signals, process groups, a death signal
for a SIGKILLed parent) is a concern of its own, whatever the child runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import Any

from fd_conformance.cli.outdir import LOG_HEADER, LOG_NAME, RESULTS_NAME, utc_now

# Imports inside functions below are for speed: cli/__init__ loads this module (through run) for
# every subcommand, and only `run` needs the progress display.

POLL_S = 0.25  # how often results.jsonl is read for progress while pytest runs
GRACE_S = 5.0  # after SIGTERM to the child's group, before SIGKILL


class Interrupted:
    """SIGINT/SIGTERM while pytest runs: end the child's whole process group, remember the signal.
    The handler never raises, so every ``with`` block (the temp dir, the lock) unwinds normally."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0
        self.pgid: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self.handle)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            self.kill(signal.SIGTERM)
        else:
            self.kill(signal.SIGKILL)  # a second Ctrl-C: no more grace

    def kill(self, signum: int) -> None:
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signum)
            except (ProcessLookupError, PermissionError):
                pass


def _die_with_parent() -> Any:
    """A preexec_fn for the child: die with this process (Linux PR_SET_PDEATHSIG), so a SIGKILLed
    `run` leaves no pytest behind certifying into a directory nobody holds. libc is resolved
    here, in the parent: between fork and exec the child may only make the call."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def run_child(cmd: list[str], env: dict[str, str], cwd: str, out: Path, verbose: bool, quiet: bool) -> tuple[int, int | None]:
    """Run pytest in its own process group, printing progress from results.jsonl until it ends.
    Returns (pytest's exit code, the signal that interrupted this run or None). With ``verbose``,
    pytest's output reaches a terminal directly and anything else (``| head``) through :func:`relay`."""
    import sys
    import threading

    from fd_conformance.cli.pipes import relay
    from fd_conformance.cli.progress import Progress

    progress = Progress(out / RESULTS_NAME, quiet=quiet or verbose)
    stop = Interrupted()
    stop.install()
    log = None if verbose else (out / LOG_NAME).open("wb")
    if log is not None:
        log.write(f"{LOG_HEADER}, started {utc_now()}\n".encode())  # the kit's mark (kit_wrote)
        log.flush()  # before the child inherits the descriptor and appends after it
    relayed = log is None and not sys.stdout.isatty()
    relaying: threading.Thread | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE if relayed else log, stderr=subprocess.STDOUT if log else None,
            start_new_session=True, preexec_fn=_die_with_parent(),  # preexec_fn is safe here: only prctl, no locks taken
        )  # fmt: skip
        stop.pgid = proc.pid
        if proc.stdout is not None:
            relaying = threading.Thread(target=relay, args=(proc.stdout, sys.stdout), name="fd-conformance-relay", daemon=True)
            relaying.start()
        if stop.signum is not None:  # a signal arrived before the child existed
            stop.kill(signal.SIGTERM)
        while proc.poll() is None:
            progress.poll()
            if stop.signum is not None and time.monotonic() - stop.at > GRACE_S:
                stop.kill(signal.SIGKILL)
            time.sleep(POLL_S)
        if stop.signum is not None:
            stop.kill(signal.SIGKILL)  # workers of the group that outlived pytest
        if relaying is not None:
            relaying.join(GRACE_S)  # the rest of pytest's output; a worker still holding the pipe is not waited for
        progress.finish()
        return proc.returncode, stop.signum
    finally:
        if log is not None:
            log.close()
        if proc is not None and proc.stdout is not None and (relaying is None or not relaying.is_alive()):
            proc.stdout.close()
        stop.restore()
