"""Which files a lint run reads, and how it reads them: discovery, decoding, line numbering, noqa.

Kept apart from the walker so ``--fix`` and the context index read files exactly as the rules do
(same encoding rules, same excludes, same line numbers) without importing the walker.
"""

from __future__ import annotations

import errno
import fnmatch
import io
import os
import re
import stat
import sys
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path

from fd_conformance.errors import UsageError
from fd_conformance.lint.config import LintConfig

SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
# Only a noqa comment naming FDCxxx codes suppresses: a bare noqa is usually aimed at another linter, and these
# rules guard against hangs and leaks, so silencing them must be deliberate and named.
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>FDC\d{3}(?:\s*,\s*FDC\d{3})*)", re.IGNORECASE)


def matches(name: str, patterns: Sequence[str]) -> bool:
    """Does ``name`` match any fnmatch pattern (case-sensitive, as config names are)?"""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def iter_python_files(paths: Sequence[Path], config: LintConfig, root: Path) -> Iterator[Path]:
    """Given files as-is; directories walked for ``*.py`` (hidden and cache dirs skipped), sorted.

    ``exclude`` applies to named files too (ruff's force-exclude): pre-commit names each changed
    file, and a deliberately defective file must not fail the hook that its directory run skips.
    A walked entry that is no readable file (a symlink loop, a dangling link, a directory the walk
    cannot list) is skipped with a one-line notice on stderr (:func:`notice_skipped`): the rest of
    the tree is still linted, and its findings are never lost to one bad entry. So is a file above
    ``max-file-bytes``, given or walked (:func:`_fits`).
    """
    for path in paths:
        require_exists(path)
        if path.is_file():
            if (not config.exclude or not matches(display_path(path, root), config.exclude)) and _fits(path, config):
                yield path
            continue
        for dirpath, dirnames, filenames in os.walk(path, onerror=_walk_error):
            dirnames[:] = sorted(
                d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
            )
            for filename in sorted(filenames):
                if filename.endswith(".py"):
                    full = Path(dirpath, filename)
                    if config.exclude and matches(display_path(full, root), config.exclude):
                        continue
                    why = _not_a_file(full)
                    if why is not None:
                        notice_skipped(full, why)
                    elif _fits(full, config):
                        yield full


def _not_a_file(path: Path) -> str | None:
    """Why a walked ``*.py`` entry cannot be linted, or None for a regular file (or one a link names)."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop"
        return "a dangling symlink" if path.is_symlink() else (err.strerror or str(err))
    return None if stat.S_ISREG(mode) else "not a regular file"


def _fits(path: Path, config: LintConfig) -> bool:
    """Is the file within ``max-file-bytes``? One above it is generated code whose parse would take
    ~150x its size in memory and minutes of uninterruptible CPU: skipped with a notice that names
    the limit and how to raise it (the rest of the run goes on, its exit code from the other files)."""
    try:
        size = path.stat().st_size
    except OSError:
        return True  # reading it fails the same way, and becomes FDC100
    if size <= config.max_file_bytes:
        return True
    notice_skipped(
        path,
        f"{size} bytes, above max-file-bytes = {config.max_file_bytes} (generated code?); to lint it, raise "
        f"max-file-bytes in [tool.fd-conformance.lint], or add it to exclude to silence this note",
    )
    return False


def _walk_error(err: OSError) -> None:
    notice_skipped(Path(err.filename or "?"), err.strerror or str(err))


_NOTICED: set[str] = set()  # one notice per skipped path, however many walks of a lint run pass it


def reset_notices() -> None:
    """Forget which paths were noticed: a new lint run (the CLI's) says its own."""
    _NOTICED.clear()


def notice_skipped(path: Path, why: str) -> None:
    """One line on stderr for a path the walk skips, once per path (a run walks the given paths,
    then its context tree, which holds them again)."""
    key = os.path.abspath(path)
    if key in _NOTICED:
        return
    _NOTICED.add(key)
    print(f"fd-conformance lint: note: skipped {path}: {why}", file=sys.stderr)


def require_exists(path: Path) -> None:
    """UsageError for a lint argument that names nothing (a typo must not lint zero files quietly)."""
    if path.is_symlink() and not path.exists():
        raise UsageError(f"path {path} is a dangling symlink or a symlink loop", "pass the file or directory it should name")
    if not path.exists():
        raise UsageError(f"path {path} does not exist", "pass existing files or directories to fd-conformance lint")


def display_path(path: Path, root: Path) -> str:
    """Path as reports print it: relative to the root when inside it, POSIX separators."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except (ValueError, OSError, RuntimeError):  # outside the root; a symlink loop (RuntimeError before 3.13)
        return path.as_posix()


def read_source(file: Path) -> tuple[str, str]:
    """(text, encoding) of a Python file, decoded as Python would: a UTF-8 BOM or a PEP 263
    ``coding`` cookie decides (``utf-8-sig`` when there is a BOM, so writing back keeps it).
    Raises OSError, SyntaxError (bad cookie) or UnicodeDecodeError."""
    data = file.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def source_lines(source: str) -> list[str]:
    """Lines numbered as ast numbers them. ``str.splitlines`` also breaks at \\x0c, \\x1c-\\x1e,
    \\x85, \\u2028 and \\u2029, which Python's tokenizer treats as ordinary characters, so every
    line after one would be off by one (noqa on the wrong line, columns from the wrong text)."""
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def noqa_map(source: str) -> dict[int, frozenset[str]]:
    """Line -> the FDC codes its ``# noqa: FDCxxx`` comment names."""
    result: dict[int, frozenset[str]] = {}
    if "noqa" not in source and "NOQA" not in source:
        return result
    for lineno, line in enumerate(source_lines(source), 1):
        m = _NOQA.search(line)
        if m:
            result[lineno] = frozenset(c.strip().upper() for c in m.group("codes").split(","))
    return result
