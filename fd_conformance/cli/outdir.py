"""The output directory of ``run --out`` and ``report --out``: its lock, its file names, and the one
check that no file of the user's is ever overwritten or moved.

--out may be a directory the user shares with other tools (``--out .`` beside another tool's
junit.xml), so a command that writes there first takes the lock, then refuses when a file of the
names it would write is not recognisably the kit's (:func:`refuse_foreign`). A refused command
leaves nothing behind: neither the lock file nor a directory it made.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO

from fd_conformance.cli.junit import SUITE_NAME as JUNIT_SUITE  # the run's junit.xml is marked with it (kit_wrote)
from fd_conformance.errors import EXIT_LOCKED, UsageError
from fd_conformance.replay.script import HEADER as REPRO_HEADER  # marks a reproducer as the kit's (kit_wrote)

RESULTS_NAME = "results.jsonl"
LOG_NAME = "pytest.log"
REPORT_FILES = ("conformance.json", "certificate.md", "junit.xml")
RUN_FILES = (*REPORT_FILES, RESULTS_NAME, LOG_NAME)  # the files one run leaves in --out
REPRO_DIR = "repro"  # ...and its reproducers' folder (cli/reproducers.py), kept in previous/ like the files
RUN_ENTRIES = (*RUN_FILES, REPRO_DIR)
LOCK_NAME = ".fd-conformance.lock"
PREVIOUS_DIR = "previous"
REPLACED_DIR = ".previous-replaced"  # the previous/ a run replaces, until it settles (KeptReports)
# The first line of OUT/pytest.log: what tells a later run that the log is the kit's (see kit_wrote).
LOG_HEADER = "# fd-conformance run: pytest's output"


class OutLocked(UsageError):
    """Another run holds --out: its own exit code, since waiting (not fixing a typo) is the answer."""

    exit_code = EXIT_LOCKED


class OutLock:
    """An exclusive ``flock`` on OUT/.fd-conformance.lock while a command writes into OUT. The
    kernel drops it when the holder dies, even by SIGKILL, so a crashed run never leaves a stale
    lock. The holder removes the file when it is done (while still holding the lock); a taker
    checks after locking that the path still names the file it locked, and else takes the new one,
    so a removal never lets two commands hold the lock at once. When the ``with`` block ends in an
    error (a refused command), or the holder sets ``refused``, the directories this lock made for
    OUT are removed too, when empty."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.handle: IO[str] | None = None
        self.made: list[Path] = []  # directories made for OUT, deepest first
        self.refused = False  # set by a holder that refuses after taking the lock (a usage error found later)

    def __enter__(self) -> OutLock:
        import fcntl

        self.made = [d for d in (self.out, *self.out.parents) if not d.exists() and not d.is_symlink()]
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            while True:
                handle = (self.out / LOCK_NAME).open("a+", encoding="utf-8")
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    handle.close()
                    raise OutLocked(
                        f"--out {str(self.out)!r} is in use by another fd-conformance run ({holder})",
                        "wait for it to finish, or pass another --out",
                    ) from None
                if _same_file(handle, self.out / LOCK_NAME):
                    break
                handle.close()  # its holder removed it after we opened it: lock the current file
        except OSError as err:
            self._remove_made()
            raise UsageError(
                f"--out {str(self.out)!r} is not writable ({err.strerror})", "pass a directory you can write to"
            ) from None
        except OutLocked:
            self._remove_made()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, started {utc_now()}\n")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.handle is None:
            return
        try:
            (self.out / LOCK_NAME).unlink(missing_ok=True)  # still locked: a taker that opened it retries
        except OSError:
            pass  # a read-only directory by now: the file stays, the lock does not
        self.handle.close()  # releases the flock
        self.handle = None
        if exc_type is not None or self.refused:
            self._remove_made()

    def _remove_made(self) -> None:
        for directory in self.made:
            try:
                directory.rmdir()  # only when empty: whatever was written there stays
            except OSError:
                return


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        here, there = os.fstat(handle.fileno()), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def kit_wrote(path: Path) -> bool:
    """Whether ``path`` (one of RUN_FILES) is recognisably this kit's: --out may be a directory the
    user shares with other tools (``--out .`` beside another tool's junit.xml), and a file the kit
    did not write is never moved nor overwritten. Each kind carries its own marker: conformance.json
    its schema_version and kit_version, certificate.md its title, junit.xml the kit's suite name (or
    its fd_case properties), results.jsonl a first record of the kit's schema, pytest.log LOG_HEADER,
    repro/ only reproducers (REPRO_HEADER first). An empty file holds nothing to lose."""
    try:
        if path.name == REPRO_DIR and path.is_dir() and not path.is_symlink():
            return all(_is_reproducer(entry) for entry in path.iterdir())
        if not path.is_file():
            return False
        if path.stat().st_size == 0:
            return True
        with path.open(encoding="utf-8", errors="replace") as handle:
            if path.name == "conformance.json":
                document = json.load(handle)
                return (
                    isinstance(document, dict)
                    and "schema_version" in document
                    and "kit_version" in document.get("environment", {})
                )
            if path.name == "certificate.md":
                return handle.readline().rstrip("\n") == "# fd-conformance certificate"
            if path.name == "junit.xml":
                text = handle.read()
                return f'<testsuite name="{JUNIT_SUITE}"' in text or '<property name="fd_case"' in text
            if path.name == RESULTS_NAME:
                first = json.loads(handle.readline())
                return isinstance(first, dict) and "schema" in first and ("kind" in first or "nodeid" in first)
            if path.name == LOG_NAME:
                return handle.readline().startswith(LOG_HEADER)
    except (OSError, ValueError, AttributeError):  # unreadable, or not the JSON the kit writes
        return False
    return False


def _is_reproducer(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.readline().rstrip("\n") == REPRO_HEADER


def present(out: Path, names: Iterable[str]) -> list[Path]:
    """The files of ``names`` that exist in ``out`` (a dangling symlink counts: writing would follow it)."""
    return [out / name for name in names if (out / name).exists() or (out / name).is_symlink()]


def refuse_foreign(out: Path, names: Iterable[str], also: Iterable[str] = ()) -> None:
    """The one check of every command that writes into --out: a file of the ``names`` it writes that
    the kit did not write (the user's certificate.md, another tool's junit.xml) stops it before
    anything is written or moved. ``also``: more entries the caller found foreign."""
    foreign = [path.name for path in present(out, names) if not kit_wrote(path)] + list(also)
    if foreign:
        raise UsageError(
            f"--out {str(out)!r} holds {', '.join(sorted(foreign))}, which fd-conformance did not write (a run would overwrite "
            f"or move {'it' if len(foreign) == 1 else 'them'})",
            "pass another --out (e.g. --out fd-conformance-report), or move those files away",
        )


class KeptReports:
    """The earlier run's reports, moved into OUT/previous/ by :func:`keep_previous`, until the run
    is settled: :meth:`restore` (a refused run leaves --out as it found it, so a CI job still finds
    the last report) or :meth:`settle` (the run wrote its own: the previous/ before is deleted, so
    exactly one previous report is kept). The previous/ before waits at OUT/.previous-replaced
    meanwhile; a run killed before settling leaves it, and the next run removes it."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.previous = out / PREVIOUS_DIR
        self.moved: list[str] = []  # names of the earlier run's files now in previous/
        self.replaced: Path | None = None  # the previous/ before, until settled
        self.made_previous = False

    def keep(self) -> KeptReports:
        earlier = present(self.out, RUN_ENTRIES)
        _refuse_foreign_previous(self.out, self.previous, earlier)
        if not earlier:
            return self
        waiting = self.out / REPLACED_DIR
        try:
            if waiting.is_dir() and not waiting.is_symlink():
                shutil.rmtree(waiting)  # left by a run killed before it settled: previous/ is newer
            if self.previous.is_dir() and any(self.previous.iterdir()):
                self.previous.rename(waiting)
                self.replaced = waiting
            self.made_previous = not self.previous.is_dir()
            self.previous.mkdir(exist_ok=True)
            for path in earlier:
                path.replace(self.previous / path.name)
                self.moved.append(path.name)
        except OSError as err:
            self.restore()
            raise UsageError(
                f"cannot move the earlier reports in --out {str(self.out)!r} aside ({err.strerror})",
                "pass a directory you can write to",
            ) from None
        return self

    def restore(self) -> None:
        """Put --out back as it was: the earlier run's files in OUT, the previous/ before in previous/."""
        for name in self.moved:
            (self.previous / name).replace(self.out / name)
        self.moved = []
        if self.replaced is not None or self.made_previous:
            self.previous.rmdir()  # empty now: only the kit's files were in it
        if self.replaced is not None:
            self.replaced.rename(self.previous)
        self.replaced, self.made_previous = None, False

    def settle(self) -> Path | None:
        """The run wrote its reports: delete the previous/ before. Returns where the earlier reports are, or None."""
        if self.replaced is not None:
            shutil.rmtree(self.replaced, ignore_errors=True)
            self.replaced = None
        return self.previous if self.moved else None


def keep_previous(out: Path) -> KeptReports:
    """An earlier run's files in --out move to OUT/previous/ (see :class:`KeptReports`): a rerun must
    not silently destroy the last certificate, nor may a stale report pass for this run's result. A
    file of the run's names that the kit did not write (another tool's junit.xml in ``--out .``) stops
    the run before anything moves, since the run would overwrite it; so does a previous/ holding
    other names than the run's (the user's own folder), which the kit would delete."""
    return KeptReports(out).keep()


def _refuse_foreign_previous(out: Path, previous: Path, earlier: list[Path]) -> None:
    foreign: list[str] = []
    if previous.is_symlink() or (previous.exists() and not previous.is_dir()):
        foreign.append(PREVIOUS_DIR)
    elif previous.is_dir() and earlier:
        # Only the kit fills previous/, so it holds only RUN_FILES names; anything else means the
        # folder is the user's (``--out .`` in a project with its own previous/): never deleted.
        foreign += [f"{PREVIOUS_DIR}/{entry.name}" for entry in previous.iterdir() if entry.name not in RUN_ENTRIES]
    refuse_foreign(out, RUN_ENTRIES, also=foreign)


def check_name_lengths(out: Path) -> None:
    """An --out longer than the file system allows (a name over NAME_MAX bytes, or a path whose
    reports would pass PATH_MAX) is a usage error here, before the lock or a move touches --out:
    the first ``stat`` of it raised ENAMETOOLONG, a traceback."""
    existing = next((p for p in (out, *out.parents) if os.path.isdir(p)), Path(out.anchor or "/"))
    try:
        name_max, path_max = os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096  # Linux's limits
    for part in out.parts:
        if len(os.fsencode(part)) > name_max:
            raise UsageError(
                f"--out {_abbreviated(str(out))!r} has a name of {len(os.fsencode(part))} bytes "
                f"({_abbreviated(part)!r}), above this file system's limit of {name_max}",
                "pass a shorter --out",
            )
    deepest = out / PREVIOUS_DIR / max(RUN_FILES, key=len)
    if len(os.fsencode(str(deepest))) >= path_max:
        raise UsageError(
            f"--out {_abbreviated(str(out))!r} is {len(os.fsencode(str(out)))} bytes long: the reports' paths in it "
            f"would pass this file system's limit of {path_max}",
            "pass a shorter --out",
        )


def _abbreviated(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 2 :]}"
