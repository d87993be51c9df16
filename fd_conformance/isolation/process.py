"""One spawned isolation worker seen from the parent: spawn, handshake, requests under the
parent's clock, and the evidence of a hang or crash.

Why a separate process: nothing inside a process can act while a C call holds the GIL
(pytest-timeout's signal and thread methods both wait for it), and CUDA cannot be forked
once initialised. On timeout the parent collects, each step bounded in time: all threads'
Python stacks (faulthandler in the child, on SIGUSR1), native stacks (``py-spy dump --native``
when installed), and the last lifecycle mark the child streamed; then it kills the child
(SIGTERM, short grace, SIGKILL): FDC501. A worker that dies is FDC502 with its cause.

The parent owns the worker's temp paths: the worker's temp root is a folder inside the worker's
own directory (stacks, log), which the parent removes whatever ended the worker; a worker never
runs its own cleanup when it is killed, and not even at a normal end (it leaves by ``os._exit``).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Literal

from fd_conformance.findings import Finding, Location, make_finding
from fd_conformance.isolation import messages
from fd_conformance.isolation.causes import crash_cause
from fd_conformance.isolation.worker.channel import STACK_SIGNAL
from fd_conformance.isolation.worker.main import main as worker_main
from fd_conformance.tempdirs import make_owned_dir, remove_stale

# Bounds on each evidence step. Their sum (plus the kill) keeps "timeout to report" under 3 s.
STACK_DUMP_WAIT_S = 0.8  # faulthandler writes synchronously in the signal handler; this is slack
NATIVE_DUMP_WAIT_S = 1.5  # py-spy attach + unwind; measured ~0.15 s on CPython without torch
TERM_GRACE_S = 0.3  # a hung child rarely honours SIGTERM; do not wait long for it
KILL_WAIT_S = 2.0  # reaping after SIGKILL; instant unless the kernel is busy (e.g. freeing GPU memory)
# Worst case from the deadline to the report, by construction; measured typical: under 3 s (bench/hang_latency.py).
REPORT_BOUND_S = STACK_DUMP_WAIT_S + NATIVE_DUMP_WAIT_S + TERM_GRACE_S + KILL_WAIT_S
STARTUP_TIMEOUT_S = 120.0  # spawn + imports + (pytest mode) collection of the isolated files
WORKER_DIR_PREFIX = "fdc-worker-"
WORKER_TEMP = "tmp"  # the worker's temp root, inside its directory
LOG_TAIL_CHARS = 4000

Status = Literal["done", "hang", "crash", "not_started"]  # not_started: still starting at the deadline (not judged)


@dataclass
class RunResult:
    """What the parent saw for one request."""

    status: Status
    pid: int
    duration: float
    payload: dict[str, Any] = field(default_factory=dict)  # the worker's "done" message
    reports: list[dict[str, Any]] = field(default_factory=list)  # pytest mode: serialised reports
    events: list[str] = field(default_factory=list)
    cause: str = ""
    python_stacks: str = ""
    native_stacks: str = ""
    stuck_frame: str = ""
    log_tail: str = ""
    worker_spawned: float = 0.0  # epoch seconds the worker was spawned (before the request: a warm worker)
    ready_wait_s: float = 0.0  # how long this request waited for the worker's startup (0 when warm)

    @property
    def last_event(self) -> str:
        return self.events[-1] if self.events else "(no lifecycle event streamed)"

    def finding(self, what: str) -> Finding | None:
        """FDC501/FDC502 for a hang/crash of ``what`` (a nodeid or check target), else None."""
        if self.status == "hang":
            return make_finding(
                "FDC501",
                f"{what} hung: {self.cause}; stuck at {self.stuck_frame or '?'}; last event: {self.last_event}",
                Location(obj=what),
            )
        if self.status == "crash":  # "not_started" (a worker too slow to start) is no finding: the host's, not the model's
            return make_finding(
                "FDC502",
                f"{what} crashed its worker: {self.cause}; last event: {self.last_event}",
                Location(obj=what),
            )
        return None

    def describe(self) -> str:
        """The multi-line report body shown in pytest and stored in the JSONL ``details``."""
        lines = [f"{self.status.upper()}: {self.cause}", f"worker pid: {self.pid}", f"last event: {self.last_event}"]
        if self.stuck_frame:
            lines.append(f"stuck frame: {self.stuck_frame}")
        if self.events:
            lines.append("recent events:\n  " + "\n  ".join(self.events[-10:]))
        if self.python_stacks:
            lines.append("python stacks (all threads):\n" + self.python_stacks.rstrip())
        if self.native_stacks:
            lines.append("native stacks (py-spy --native):\n" + self.native_stacks.rstrip())
        if self.log_tail.strip():
            lines.append("worker log tail:\n" + self.log_tail.rstrip())
        return "\n".join(lines)


_STDLIB_DIRS = tuple({p for p in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib")) if p})
_OUR_DIR = str(Path(__file__).resolve().parents[1])  # the whole kit, fd_conformance/


def stuck_frame(stacks: str, thread_ident: int | None) -> str:
    """The innermost frame of the worker's main thread that belongs to the checked code
    (not the stdlib, site-packages or the kit's own worker loop) -- the line a human wants."""
    blocks: list[tuple[str, list[str]]] = []
    for line in stacks.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append((line, []))
        elif line.strip().startswith("File ") and blocks:
            blocks[-1][1].append(line.strip())
    if not blocks:
        return ""
    main = [b for b in blocks if thread_ident is not None and f"{thread_ident:x}" in b[0].lower()]
    frames = (main or blocks[:1])[0][1]
    for frame in frames:  # most recent call first
        path = frame.split('"')[1] if '"' in frame else ""
        if path and not path.startswith(_STDLIB_DIRS) and not path.startswith(_OUR_DIR) and "_pytest" not in path:
            return frame
    return frames[0] if frames else ""


class WorkerProcess:
    """One spawned worker and the parent's end of its pipe.

    Construction only spawns (it does not wait): the worker's interpreter start, imports and
    plugin loading then overlap whatever the parent does next (its own collection, the running
    worker's tests). The handshake is awaited by :meth:`wait_ready`, at the first request.
    A pytest-mode worker spawned before the parent knows which files hold isolated items gets
    them later through :meth:`collect`, and waits for them just before its collection.
    """

    def __init__(self, mode: str, setup: dict[str, Any] | None = None, *, startup_timeout: float = STARTUP_TIMEOUT_S):
        self.mode = mode
        self.startup_timeout = startup_timeout
        _remove_stale_worker_dirs()
        self._dir = make_owned_dir(WORKER_DIR_PREFIX)
        self.temp_root = self._dir / WORKER_TEMP  # TMPDIR in the worker: a torch FileStore, a model's files
        self.stack_path = self._dir / "stacks.txt"
        self.log_path = self._dir / "worker.log"
        self.stack_path.touch()
        ctx = multiprocessing.get_context("spawn")  # never fork: CUDA does not survive it
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main,
            args=(child_conn, str(self.stack_path), str(self.log_path), mode, setup or {}, str(self.temp_root)),
            name=f"fdc-isolation-{mode}",
            daemon=True,
        )
        self.spawned_at = time.monotonic()
        self.startup_from = self.spawned_at  # the startup deadline's origin; reset by collect()
        self.spawned_epoch = time.time()
        self.process.start()
        child_conn.close()  # so EOF on our end means the child is gone
        self.pid: int = self.process.pid or 0
        self.main_thread_ident: int | None = None
        self.collected: list[str] = []
        self.ready = False
        self.configured: dict[str, Any] | None = None  # the ``configured`` message's facts, once received
        self._early: messages.Message | None = None  # a message facts() read that wait_ready must see
        self.start_timed_out = False
        self.sends_facts = bool((setup or {}).get("send_facts"))
        self.configure_output = ""  # what it printed until it sent its facts (a model module's import prints)
        self.requests = 0  # how many requests it served: a spare that served none holds no CUDA context

    def collect(self, paths: list[str], basetemp: str | None = None) -> None:
        """Tell a worker spawned with ``paths=None`` what to collect (pytest mode), and the session's
        temp dir when it was spawned before the parent had one.

        The startup deadline restarts here: the time the parent spent collecting before it knew
        the paths is not the worker's, and a long collection would otherwise use up its budget."""
        self.startup_from = time.monotonic()
        try:
            extra = {"basetemp": basetemp} if basetemp is not None else {}
            messages.send(self.conn, messages.COLLECT, paths=list(paths), **extra)
        except OSError:  # died while starting: wait_ready reports why
            pass

    def facts(self) -> dict[str, Any] | None:
        """What a worker spawned with ``send_facts`` found at its configure (the ``configured``
        message), waited for within the startup deadline; None when it failed or died first (the
        parent then finds out for itself, and a later request reports the worker's start)."""
        if self.sends_facts and self.configured is None and not self.ready and self._early is None:
            received = self._next_message()
            if received is not None and received.name == messages.CONFIGURED:
                self.configured = received.fields["facts"]
                self.configure_output = self._log_text()
            else:
                self._early = received  # READY or nothing: wait_ready reads it
        return self.configured

    def _next_message(self) -> messages.Message | None:
        """The worker's next startup message within the startup deadline (lifecycle marks made while
        it starts, e.g. by a model module at import, are skipped); None when it fails or dies first."""
        deadline = self.startup_from + self.startup_timeout
        while True:
            ready = wait([self.conn, self.process.sentinel], max(0.0, deadline - time.monotonic()))
            self.start_timed_out = not ready
            if self.conn not in ready:
                return None
            try:
                received = messages.receive(self.conn)
            except Exception:  # noqa: BLE001 - EOF, a protocol error, a message that cannot be unpickled here
                return None
            if received.name != messages.EVENT:
                return received
            if time.monotonic() >= deadline:  # marks without end: no start
                self.start_timed_out = True
                return None

    def wait_ready(self) -> None:
        """Block until the worker's ``ready`` (bounded); a worker that cannot start is an error."""
        if self.ready:
            return
        received, self._early = self._early or self._next_message(), None
        if received is not None and received.name == messages.CONFIGURED:  # sent first; the parent did not wait for it
            self.configured = received.fields["facts"]
            received = self._next_message()
        if received is None or received.name != messages.READY:
            why = "did not start in time" if self.start_timed_out else crash_cause(self.process.exitcode)
            tail = self.log_tail()
            self.kill()
            raise WorkerStartError(f"isolation worker {why}; worker log:\n{tail}", timed_out=self.start_timed_out)
        self.main_thread_ident = received.fields["main_thread_ident"]
        self.collected = received.fields["collected"]
        self.ready = True

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def log_tail(self) -> str:
        return self._log_text()[-LOG_TAIL_CHARS:]

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def run(
        self,
        request: messages.Message,
        timeout: float,
        on_report: Callable[[dict[str, Any]], None] | None = None,
        *,
        on_slow: Callable[[], None] | None = None,
        slow_after: float = float("inf"),
    ) -> RunResult:
        """Send one request and wait for its ``done`` with the parent's clock; ``on_slow`` is
        called once if the request is still running after ``slow_after`` seconds."""
        waiting = time.monotonic()
        self.wait_ready()  # startup is not the check's time: the deadline starts after it
        self.requests += 1
        started = time.monotonic()
        deadline = started + timeout
        result = RunResult("done", self.pid, 0.0, worker_spawned=self.spawned_epoch, ready_wait_s=started - waiting)
        try:
            messages.send(self.conn, request.name, **request.fields)
        except (OSError, BrokenPipeError):
            return self._crashed(result, started)
        slow_at = started + slow_after if on_slow is not None else float("inf")
        progress = self._progress_handlers(result, on_report)
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return self._hung(result, started, timeout)
            if now >= slow_at and on_slow is not None:
                on_slow()
                on_slow, slow_at = None, float("inf")
            ready = wait([self.conn, self.process.sentinel], min(remaining, max(0.0, slow_at - now)))
            if not ready:
                continue
            if self.conn in ready:
                try:
                    received = messages.receive(self.conn)
                except (EOFError, OSError):
                    return self._crashed(result, started)
                except messages.WorkerProtocolError as err:  # a broken worker: this check's crash, not the session's
                    self.kill()
                    crashed = self._crashed(result, started)
                    crashed.cause = f"worker protocol error: {err}"
                    return crashed
                if received.name == messages.DONE:
                    return self._done(result, started, received.fields)
                if received.name in progress:  # anything else is a stray message: ignored
                    messages.dispatch(received, progress)
            elif self.process.sentinel in ready and not self.conn.poll():
                return self._crashed(result, started)

    @staticmethod
    def _progress_handlers(
        result: RunResult, on_report: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Callable[..., None]]:
        """What the worker streams while a request runs, by message name."""

        def event(text: str) -> None:
            result.events.append(text)

        def report(data: dict[str, Any]) -> None:
            result.reports.append(data)
            if on_report is not None:
                on_report(data)

        return {messages.EVENT: event, messages.REPORT: report}

    def _done(self, result: RunResult, started: float, payload: dict[str, Any]) -> RunResult:
        result.payload = payload
        result.duration = time.monotonic() - started
        if payload.get("outcome") == "crash":  # poisoned process retired itself
            result.status = "crash"
            result.cause = str(payload.get("cause", ""))
            self.process.join(2.0)
            if self.alive:
                self.kill()
        return result

    def probe(self, timeout: float = 30.0) -> dict[str, Any]:
        """Ask an idle worker about itself without running a check (see fd_conformance.isolation.worker.channel.probe):
        how a test proves a warm spare holds no CUDA context."""
        self.wait_ready()
        messages.send(self.conn, messages.PROBE)
        if not self.conn.poll(timeout):
            raise TimeoutError(f"worker {self.pid} did not answer a probe within {timeout:g}s")
        received = messages.receive(self.conn)
        if received.name != messages.PROBED:
            raise RuntimeError(f"worker {self.pid} answered a probe with {received.name!r}")
        return received.fields

    def _drain(self, result: RunResult) -> None:
        """Messages the child sent just before it went silent carry the last lifecycle event."""
        try:
            handlers = self._progress_handlers(result)
            while self.conn.poll():
                received = messages.receive(self.conn)
                if received.name in handlers:
                    messages.dispatch(received, handlers)
        except (EOFError, OSError, messages.WorkerProtocolError):  # evidence is best effort
            pass

    def _crashed(self, result: RunResult, started: float) -> RunResult:
        self._drain(result)
        self.process.join(2.0)
        result.status = "crash"
        result.cause = crash_cause(self.process.exitcode)
        result.duration = time.monotonic() - started
        result.log_tail = self.log_tail()
        return result

    def _hung(self, result: RunResult, started: float, timeout: float) -> RunResult:
        result.status = "hang"
        result.cause = f"no result within {timeout:g}s"
        self._drain(result)
        result.python_stacks = self.python_stacks()
        result.native_stacks = native_stacks(self.pid)
        result.stuck_frame = stuck_frame(result.python_stacks, self.main_thread_ident)
        self.kill()
        result.duration = time.monotonic() - started
        return result

    def python_stacks(self) -> str:
        """Ask the child's faulthandler for all threads' stacks and read what it wrote."""
        before = self.stack_path.stat().st_size
        try:
            os.kill(self.pid, STACK_SIGNAL)
        except ProcessLookupError:
            return "(worker already gone)"
        end = time.monotonic() + STACK_DUMP_WAIT_S
        size, stable_since = before, time.monotonic()
        while time.monotonic() < end:
            time.sleep(0.02)
            now_size = self.stack_path.stat().st_size
            if now_size != size:
                size, stable_since = now_size, time.monotonic()
            elif size > before and time.monotonic() - stable_since > 0.05:
                break  # written and quiet: the dump is complete
        if size <= before:
            return f"(faulthandler wrote nothing within {STACK_DUMP_WAIT_S}s)"
        with open(self.stack_path, encoding="utf-8", errors="replace") as fh:
            fh.seek(before)
            return fh.read()

    def stop(self, timeout: float = 5.0) -> None:
        """Polite shutdown: lets pytest mode tear down session fixtures."""
        if self.alive:
            try:
                messages.send(self.conn, messages.STOP)
            except OSError:
                pass
            self.process.join(timeout)
        self.kill()

    def kill(self) -> None:
        """Terminate now (SIGTERM, short grace, SIGKILL); its directory, temp root included, is removed."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(TERM_GRACE_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(KILL_WAIT_S)
        self.conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)


_swept = False


def _remove_stale_worker_dirs() -> None:
    """Once per process: the directories of workers whose parent was SIGKILLed (no cleanup ran
    there). Under `fd-conformance run` they sit in the run's own temp root, which the run removes;
    this covers a plain pytest session that was killed."""
    global _swept
    if not _swept:
        _swept = True
        remove_stale(WORKER_DIR_PREFIX)


def native_stacks(pid: int) -> str:
    """``py-spy dump --native`` of the hung worker, bounded; says why when unavailable."""
    exe = shutil.which("py-spy")
    if exe is None:
        return "(py-spy not installed: `pip install py-spy` adds native stacks to hang reports)"
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--native"],
            capture_output=True,
            text=True,
            timeout=NATIVE_DUMP_WAIT_S,
        )
    except subprocess.TimeoutExpired:
        return f"(py-spy did not finish within {NATIVE_DUMP_WAIT_S}s)"
    if done.returncode != 0:
        return f"(py-spy failed: {(done.stderr or done.stdout).strip()[:300]})"
    return done.stdout


class WorkerStartError(RuntimeError):
    """A worker died or timed out before its ``ready``: an environment problem, not a check's.
    ``timed_out``: it was still starting at the deadline (a slow or loaded host), not dead."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
