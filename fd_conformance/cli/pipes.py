"""Output to a reader that may go away: ``fd-conformance run ... | head`` must still write its reports
and exit with the code the run decided.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError: raised from a progress
line, it ended ``run`` before the reports were written and exited 1 (the violations code), and a
buffered line flushed at shutdown raises once more. Here the CLI's stdout and stderr swallow that
error once, point their descriptor at os.devnull (so later writes, the child's included when it
shares it, and the shutdown flush go nowhere) and let the command go on.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO, Any, TextIO


def to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at os.devnull: what is still buffered, and is written later, goes nowhere."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # no descriptor (a test's capture): nothing to repoint
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class ReaderMayLeave:
    """A text stream whose reader may close the pipe: on EPIPE its output goes to os.devnull and the
    write counts as done. Everything else (isatty, fileno, encoding) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._leave()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._leave()

    def _leave(self) -> None:
        self.reader_gone = True
        to_devnull(self.stream)
        with contextlib.suppress(BrokenPipeError):  # the bytes left in the buffer now go to devnull
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def tolerate_closed_pipes() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`ReaderMayLeave` while a command runs; flushed (through the
    wrapper, so a closed pipe cannot raise at shutdown) and put back after it."""
    saved = sys.stdout, sys.stderr
    if saved[0] is None or saved[1] is None:  # no console at all (pythonw): nothing can break
        yield
        return
    wrapped = ReaderMayLeave(saved[0]), ReaderMayLeave(saved[1])
    sys.stdout, sys.stderr = wrapped  # a TextIO in all that the kit calls (its __getattr__ is the rest)
    try:
        yield
    finally:
        for stream in wrapped:
            stream.flush()
        sys.stdout, sys.stderr = saved


def relay(source: IO[bytes], sink: TextIO) -> None:
    """Copy a child's output to ``sink`` as it comes, until EOF: through this process's stdout, a
    closed pipe costs the child nothing (a child writing into it itself would fail on EPIPE)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = source.fileno()
    while chunk := os.read(fd, 65536):
        sink.write(decoder.decode(chunk))
        sink.flush()
    sink.write(decoder.decode(b"", final=True))
    sink.flush()
