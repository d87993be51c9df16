"""When did it break? ``fd-conformance fastdeploy REPO --history A..B``: the bridge on every
commit of the first-parent path from A to B (or a bisection of it), and the first commit where
each table row changed verdict -- the maintainer's question after a red run.

Each commit's tree is exported with ``git archive`` (the repository is never checked out or
changed) and certified in a fresh interpreter (``python -m fd_conformance.cli fastdeploy DIR
--json FILE``): one FastDeploy per process, as two trees' modules, registries and Paddle state
must never meet. A row is keyed by its table and name (``runner main=off draft=on spec=mtp
clear_parameters``) and its verdict is what the table printed (``ok``, ``FAIL FDC203``, ``n/a``,
``ERROR``); a run that could not judge the tree at all (exit 2 or 6) is the row ``(run)``.

Bisection (``--bisect``) certifies A, B and then, for each row whose verdict differs between
them, halves the path until the first commit showing B's verdict; commits are certified once
and shared between rows. It assumes a row changed once between A and B: a row that broke and
was fixed again in between is seen only by the full walk.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fd_conformance.errors import UsageError

RUN_ROW = "(run)"


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:9]


@dataclass
class Certified:
    """One commit's bridge run: its exit code, row verdicts and time."""

    commit: Commit
    exit_code: int
    verdicts: dict[str, str]
    seconds: float


@dataclass
class Change:
    row: str
    before: str
    after: str
    commit: Commit  # the first commit showing ``after``
    previous: Commit  # the commit before it that showed ``before``


@dataclass
class History:
    spec: str
    path: list[Commit]
    runs: dict[str, Certified] = field(default_factory=dict)  # sha -> run, in the order run
    changes: list[Change] = field(default_factory=list)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise UsageError(
            f"git {' '.join(args)} failed in {repo}: {(done.stderr.strip().splitlines() or ['no message'])[-1]}",
            "pass a FastDeploy git repository (clone or bare) and two of its revisions as A..B",
        )
    return done.stdout


def first_parent_path(repo: Path, spec: str) -> list[Commit]:
    """A, then every commit on B's first-parent line after A, oldest first."""
    base, sep, tip = spec.partition("..")
    if not sep or not base or not tip or tip.startswith("."):
        raise UsageError(f"--history {spec!r} is not a range A..B", "pass two revisions, e.g. --history v2.3.0..develop")
    if not Path(repo).is_dir():
        raise UsageError(f"{str(repo)!r} is not a directory", "pass a FastDeploy git repository (clone or bare)")
    _git(repo, "rev-parse", "--git-dir")
    shas = [_git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").strip() for rev in (base, tip)]
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{shas[0]}..{shas[1]}").split()
    path = []
    for sha in [shas[0], *listed]:
        path.append(Commit(sha, _git(repo, "log", "-1", "--format=%s", sha).strip()))
    if len(path) < 2:
        raise UsageError(f"--history {spec}: {tip} has no commit after {base}", "put the older revision first: A..B")
    return path


def export(repo: Path, commit: Commit, into: Path) -> None:
    """The commit's ``fastdeploy/`` package into ``into`` (nothing else is needed to certify it)."""
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit.sha, "fastdeploy"], capture_output=True, check=False
    )
    if archive.returncode != 0:  # no fastdeploy/ at this commit: the run says so (exit 2)
        return
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def row_verdicts(data: dict[str, Any]) -> dict[str, str]:
    """Row key -> verdict, from the JSON ``fd-conformance fastdeploy --json`` writes."""
    rows: dict[str, str] = {}
    config = data.get("config")
    if config:
        if config["error"]:
            rows["config (table)"] = "ERROR"
        for r in config["rows"]:
            rows[f"config {r['code']}"] = ("VIOLATED" if r["severity"] == "error" else "WARNING") if r["minimal"] else "holds"
    models = data.get("models")
    if models:
        if models["error"]:
            rows["models (table)"] = "ERROR"
        for r in models["rows"]:
            rows[f"models {r['name']}"] = " ".join(["FAIL" if r.get("failed") else "ok", *sorted(set(r["codes"]))])
        for module in models["import_failures"]:
            rows[f"models import {module}"] = "import fails"
    for table, title in (("runner", "runner"), ("real_runner", "real-runner")):
        runner = data.get(table)
        if not runner:
            continue
        if runner["error"]:
            rows[f"{title} (table)"] = "ERROR"
        for r in runner["rows"]:
            main, draft = ("on" if r[k] else "off" for k in ("use_cudagraph", "draft_model_use_cudagraph"))
            wrapper = f" {r['main']}" if "main" in r else ""
            key = f"{title}{wrapper} main={main} draft={draft} spec={r['spec_method'] or '-'} {r['method']}"
            verdict = "n/a" if r["skipped"] else "ERROR" if r["error"] else "FAIL" if r["codes"] else "ok"
            rows[key] = " ".join([verdict, *sorted(set(r["codes"]))])
    wrappers = data.get("wrappers")
    if wrappers:
        if wrappers["error"]:
            rows["wrappers (table)"] = "ERROR"
        for r in wrappers["rows"]:
            rows[f"wrappers {r['name']}"] = " ".join([r["verdict"], *sorted(set(r["codes"]))])
        for g in wrappers.get("shared_raises", ()):  # one row per raising file: its line moves between commits
            rows[f"wrappers before capture {(g['at'] or ','.join(g['wrappers'])).rsplit(':', 1)[0]}"] = f"FAIL {g['code']}"
    return rows


def certify(repo: Path, commit: Commit, options: Sequence[str]) -> Certified:
    """The bridge on one commit, in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="fd-conformance-history-") as tmp:
        tree, out = Path(tmp) / "tree", Path(tmp) / "bridge.json"
        tree.mkdir()
        export(repo, commit, tree)
        cmd = [sys.executable, "-m", "fd_conformance.cli", "fastdeploy", str(tree), "--json", str(out), *options]
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        seconds = time.perf_counter() - started
        if out.is_file():
            verdicts = row_verdicts(json.loads(out.read_text(encoding="utf-8")))
        else:  # the tree could not be judged: the one line the run printed is the verdict
            line = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            line = line.removeprefix("fd-conformance fastdeploy: error: ").replace(tmp, "<tree>")
            verdicts = {RUN_ROW: f"exit {done.returncode}: {line.split('; fix:')[0][:160]}"}
    return Certified(commit, done.returncode, verdicts, seconds)


def _verdict(run: Certified, row: str) -> str:
    return run.verdicts.get(row, "absent")


def walk(history: History, run: Callable[[Commit], Certified]) -> None:
    """Every commit of the path; each row's every change of verdict, in order."""
    previous: Certified | None = None
    for commit in history.path:
        current = history.runs[commit.sha] = run(commit)
        if previous is not None:
            for row in sorted(set(previous.verdicts) | set(current.verdicts)):
                before, after = _verdict(previous, row), _verdict(current, row)
                if before != after:
                    history.changes.append(Change(row, before, after, commit, previous.commit))
        previous = current


def bisect(history: History, run: Callable[[Commit], Certified]) -> None:
    """A and B, then per differing row the first commit with B's verdict (shared runs)."""
    path = history.path

    def at(index: int) -> Certified:
        sha = path[index].sha
        if sha not in history.runs:
            history.runs[sha] = run(path[index])
        return history.runs[sha]

    first, last = at(0), at(len(path) - 1)
    for row in sorted(set(first.verdicts) | set(last.verdicts)):
        if _verdict(first, row) == _verdict(last, row):
            continue
        low, high = 0, len(path) - 1  # low shows A's verdict, high does not
        while high - low > 1:
            middle = (low + high) // 2
            if _verdict(at(middle), row) == _verdict(first, row):
                low = middle
            else:
                high = middle
        history.changes.append(Change(row, _verdict(at(low), row), _verdict(at(high), row), path[high], path[low]))
    history.changes.sort(key=lambda c: (path.index(c.commit), c.row))


def print_history(out: TextIO, repo: Path, history: History, mode: str) -> None:
    path = history.path
    out.write(f"# fd-conformance fastdeploy {repo} --history {history.spec} ({mode}, {len(path)} commits on the path)\n\n")
    out.write("| # | commit | subject | exit | seconds |\n|---|---|---|---|---|\n")
    for index, commit in enumerate(path):
        run = history.runs.get(commit.sha)
        cells = (str(run.exit_code), f"{run.seconds:.1f}") if run else ("not run", "-")
        out.write(f"| {index} | {commit.short} | {commit.subject[:70].replace('|', '/')} | {cells[0]} | {cells[1]} |\n")
    out.write("\n## First commit where each row changed verdict\n")
    if not history.changes:
        out.write(f"no row changed verdict between {path[0].short} and {path[-1].short}\n")
        return
    out.write("| table row | verdict before | first commit with the new verdict | verdict after |\n|---|---|---|---|\n")
    seen: set[str] = set()
    for change in history.changes:
        again = " (again)" if change.row in seen else ""
        seen.add(change.row)
        out.write(
            f"| {change.row}{again} | {change.before} | {change.commit.short} {change.commit.subject[:60].replace('|', '/')} "
            f"| {change.after} |\n"
        )


def run_history(repo_arg: str | None, spec: str, options: Sequence[str], *, use_bisect: bool, out: TextIO) -> int:
    """Certify the path, print both tables; the exit code is B's own run's."""
    if repo_arg is None:
        raise UsageError("--history needs PATH: the FastDeploy git repository", "pass PATH --history A..B")
    repo = Path(repo_arg).expanduser()
    history = History(spec, first_parent_path(repo, spec))
    runner = lambda commit: certify(repo, commit, options)  # noqa: E731 - the one line both modes share
    (bisect if use_bisect else walk)(history, runner)
    print_history(out, repo, history, "bisected" if use_bisect else "every first-parent commit")
    return history.runs[history.path[-1].sha].exit_code
