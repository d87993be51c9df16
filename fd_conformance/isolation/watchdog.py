"""The parent's watchdog: one reused isolation worker plus a warm spare, and the call-mode runner.

Checks run in a *spawned* worker that is reused across checks (framework import paid once) and
replaced after a hang or crash (see :mod:`fd_conformance.isolation.process` for why a process,
and what evidence a hang leaves).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fd_conformance.errors import UsageError, validate_timeout
from fd_conformance.findings import Finding
from fd_conformance.isolation import messages
from fd_conformance.isolation.process import STARTUP_TIMEOUT_S, RunResult, WorkerProcess, WorkerStartError

SPARE_AFTER_S = 1.0  # a request running this long starts the warm spare (a hang's timeout is longer)
# ...and is within this lead of its timeout: a hang is declared only at the timeout, and the spare
# needs just its startup (1-3 s; 8 s on a loaded 2-core box) to be warm by then, while a slow
# healthy check -- a worker's first model check imports torch and transformers, 15-20 s on the
# H200 host, under the 300 s default -- must not start one: eight xdist workers each spawning a
# spare mid-import cost eight pytest startups of CPU for nothing. Timeouts shorter than the lead
# (hang tests, tight --fd-timeout) start it at spare_after_s, as before.
SPARE_LEAD_S = 15.0
START_FAILURES_TO_GIVE_UP = 2  # consecutive workers that never got ready: the environment is broken


@dataclass(frozen=True)
class CheckOutcome:
    """Result of one isolated callable: outcome + value or evidence."""

    target: str
    outcome: Literal["passed", "failed", "hang", "crash"]
    run: RunResult

    @property
    def value(self) -> Any:
        return self.run.payload.get("value")

    @property
    def finding(self) -> Finding | None:
        return self.run.finding(self.target)


class Watchdog:
    """Keeps one worker for reuse, plus (``spares=1``) a warm spare that replaces it after a
    hang or crash, so the next check does not pay interpreter start, imports and collection.

    When the spare starts: once a request has run ``spare_after_s`` and is within
    ``SPARE_LEAD_S`` of its timeout (a hang in the making; ``spare_after_s=0``: as soon as the
    active worker is ready), and from then on whenever a worker was lost. Fast sessions thus never
    pay a second startup (on a 2-core CI box that costs as much wall time as the startup itself).
    The spare runs no request until promoted, so on a GPU
    host it holds no CUDA context (and no device memory) while it waits.
    """

    def __init__(
        self,
        mode: str = "call",
        setup: dict[str, Any] | None = None,
        *,
        spares: int = 0,
        spare_after_s: float = SPARE_AFTER_S,
        startup_timeout: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.startup_timeout = startup_timeout
        if spares not in (0, 1):
            raise UsageError(f"spares={spares!r} is not 0 or 1", "pass spares=0 (no warm spare) or spares=1")
        self.mode = mode
        self.setup = dict(setup or {})
        self.spares = spares
        self.spare_after_s = validate_timeout(spare_after_s, "spare_after_s") if spare_after_s else 0.0
        self.lost_workers = 0
        self.worker: WorkerProcess | None = None
        self.spare: WorkerProcess | None = None
        self.started_workers = 0
        self.promoted_spares = 0
        self.start_failures = 0  # consecutive workers that never got ready
        self.first_start_error = ""  # the first of them: the cause shown for every later request
        self.first_start_timed_out = False  # ... and whether it was still starting (not dead) at the deadline

    def _spawn(self, send_facts: bool = False) -> WorkerProcess:
        self.started_workers += 1
        setup = {**self.setup, "send_facts": True} if send_facts else self.setup
        return WorkerProcess(self.mode, setup, startup_timeout=self.startup_timeout)

    def prestart(self, send_facts: bool = False) -> None:
        """Spawn the first worker now, without waiting for it (e.g. while the parent collects);
        ``send_facts``: it sends what it found at configure first (WorkerProcess.facts)."""
        if self.worker is None:
            self.worker = self._spawn(send_facts)

    def set_paths(self, paths: list[str], basetemp: str | None = None) -> None:
        """pytest mode: the files holding isolated items (and the session's temp dir, when the
        worker was spawned before it existed), for a worker spawned without them and every later one."""
        waiting = self.setup.get("paths") is None
        self.setup["paths"] = list(paths)
        if basetemp is not None:
            self.setup.setdefault("option_dict", {})["basetemp"] = basetemp
        if waiting:
            for worker in (self.worker, self.spare):
                if worker is not None:
                    worker.collect(paths, basetemp)

    def ensure_worker(self) -> WorkerProcess:
        """The ready worker for the next request: the current one, else the spare, else a new one."""
        if self.worker is not None and not self.worker.alive:
            self.worker.kill()
            self.worker = None
        if self.worker is None and self.spare is not None:
            self.worker, self.spare = self.spare, None
            if self.worker.alive:
                self.promoted_spares += 1
            else:  # died while waiting (OOM killer?): start over
                self.worker.kill()
                self.worker = None
        if self.worker is None:
            self.worker = self._spawn()
        self.worker.wait_ready()
        if self.lost_workers or not self.spare_after_s:  # a session that lost a worker may lose another
            self._start_spare()
        return self.worker

    def _start_spare(self) -> None:
        """Spawn the spare (it starts while the active worker runs checks); idempotent."""
        if not self.spares or (self.spare is not None and self.spare.alive):
            return
        if self.spare is not None:
            self.spare.kill()
        self.spare = self._spawn()

    def run(
        self, request: messages.Message, timeout: float, on_report: Callable[[dict[str, Any]], None] | None = None
    ) -> RunResult:
        waiting = time.monotonic()
        if self.start_failures >= START_FAILURES_TO_GIVE_UP:
            # Every later worker would fail the same way, each after up to STARTUP_TIMEOUT_S:
            # fail the remaining requests now, with the first error as their cause.
            return self._start_failed(self.first_start_error, self.first_start_timed_out)
        try:
            worker = self.ensure_worker()
        except WorkerStartError as err:
            self.worker = None
            self.start_failures += 1
            if not self.first_start_error:
                self.first_start_error, self.first_start_timed_out = str(err), err.timed_out
            return self._start_failed(str(err), err.timed_out)
        self.start_failures = 0
        waited = time.monotonic() - waiting
        # Fast and merely slow checks never pay for a spare; one still running near its timeout
        # (a hang in the making) starts it, so it is warm by the time the watchdog fires.
        slow_after = max(self.spare_after_s, timeout - SPARE_LEAD_S)
        result = worker.run(request, timeout, on_report, on_slow=self._start_spare, slow_after=slow_after)
        result.ready_wait_s += waited
        if result.status != "done":
            worker.kill()
            self.lost_workers += 1
            self.worker = None  # next request gets the warm spare, or a fresh process
        return result

    def _start_failed(self, error: str, timed_out: bool) -> RunResult:
        """A worker that died at start is a crash (FDC502: its cause names why). One still starting at
        the deadline is "not_started": the host was slow or loaded, the model was never run, so the
        check is not judged (issue 51: a good model got FDC502 on a busy host)."""
        cause = f"isolation worker failed to start: {error.splitlines()[0]}"
        if self.start_failures >= START_FAILURES_TO_GIVE_UP:
            cause += f" ({self.start_failures} workers in a row; no further worker is started)"
        return RunResult("not_started" if timed_out else "crash", 0, 0.0, cause=cause, log_tail=error)

    def close(self) -> None:
        if self.spare is not None:
            self.spare.kill()  # it ran nothing: no fixtures to tear down, no coverage to save
            self.spare = None
        if self.worker is not None:
            if self.worker.requests:
                self.worker.stop()  # polite: lets pytest mode tear down session fixtures
            else:
                self.worker.kill()  # prestarted but never used (everything deselected or skipped)
            self.worker = None


class IsolatedRunner(Watchdog):
    """Run importable callables (``"module:qualname"``) in a reused spawned worker.

    >>> with IsolatedRunner() as runner:
    ...     outcome = runner.call("math:sqrt", 4.0, timeout=10)
    """

    def __init__(self, *, spares: int = 0, spare_after_s: float = SPARE_AFTER_S) -> None:
        super().__init__("call", spares=spares, spare_after_s=spare_after_s)

    def call(self, target: str, *args: Any, timeout: float, **kwargs: Any) -> CheckOutcome:
        if ":" not in target:
            raise UsageError(f"check reference {target!r} has no ':'", "write it as 'package.module:function'")
        timeout = validate_timeout(timeout, "timeout")
        result = self.run(messages.message(messages.CALL, target=target, args=args, kwargs=kwargs), timeout)
        # A worker too slow to start is reported as this API always reported it (a crash outcome
        # whose cause says so); the suites' route reads it as not judged (isolation/plugin.py).
        status = "crash" if result.status == "not_started" else result.status
        outcome = status if status != "done" else result.payload.get("outcome", "failed")
        return CheckOutcome(target, outcome, result)

    def __enter__(self) -> IsolatedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
