"""Why a worker cannot be trusted any more: named from an exception's text (in the worker) or
from its exit status (in the parent). One module, so FDC502's wording has one home."""

from __future__ import annotations

import re
import signal

# Errors after which the process (and its CUDA context) cannot be trusted for the next check.
_STICKY_CUDA = re.compile(
    r"illegal memory access|illegal address|cudaErrorIllegalAddress|device-side assert|"
    r"unspecified launch failure|CUDA error: misaligned address|an illegal instruction",
    re.IGNORECASE,
)
_OOM = re.compile(r"out of memory|CUDA_ERROR_OUT_OF_MEMORY|ResourceExhaustedError|MemoryError", re.IGNORECASE)


def classify_error(text: str) -> str | None:
    """A crash cause for an exception text that poisons the process, else None (plain failure)."""
    if _STICKY_CUDA.search(text):
        return "CUDA sticky error: " + _first_match_line(text, _STICKY_CUDA)
    if _OOM.search(text):
        return "out of memory: " + _first_match_line(text, _OOM)
    return None


def _first_match_line(text: str, pattern: re.Pattern[str]) -> str:
    """Prefer pytest's ``E   ...`` error lines and the exception line over quoted source."""
    lines = [line.strip() for line in text.splitlines() if pattern.search(line)]
    for line in lines:
        if line.startswith("E ") or not line.startswith((">", "File ")):
            return line.removeprefix("E").strip()[:200]
    return lines[0][:200] if lines else ""


def crash_cause(exitcode: int | None) -> str:
    """Name how a worker ended: ``SIGSEGV``, ``os._exit(3)``, ``SIGKILL (kernel OOM killer?)``."""
    if exitcode is None:
        return "worker vanished (no exit status)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            return f"{name} (killed from outside: the kernel OOM killer is the usual sender)"
        return f"{name} (worker killed by signal {-exitcode})"
    return f"os._exit({exitcode}) (worker exited without reporting a result)"
