"""The git side of ``fd-conformance changed``: which files a change touched.

Every git failure becomes a one-line :class:`UsageError` that says which input to fix (a CI
checkout without history is the usual cause), never a traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from fd_conformance.errors import UsageError

_GIT_TIMEOUT_S = 60.0


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; every failure becomes a one-line UsageError naming the command."""
    try:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed or not on PATH", "install git; `changed` reads the diff with it") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"`git {' '.join(args)}` took over {_GIT_TIMEOUT_S:.0f}s in {repo}", "check the repository") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise GitFailed(detail)
    return proc.stdout


class GitFailed(Exception):
    """A git command exited non-zero; callers turn it into a UsageError that says which input."""


def _commit(repo: Path, rev: str, option: str) -> str:
    """``rev`` as a full commit id, or a UsageError saying how to make it resolvable."""
    if not rev or rev.startswith("-"):
        raise UsageError(f"{option} {rev!r} is not a revision", f"pass a branch, tag or commit to {option}")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except GitFailed:
        raise UsageError(
            f"{option} {rev!r} is not a commit in {repo}",
            "fetch it first (in GitHub Actions: actions/checkout with fetch-depth: 0) or pass an existing branch, tag or commit",
        ) from None


def check_work_tree(repo: Path) -> Path:
    if not repo.is_dir():
        raise UsageError(f"--repo {repo} is not a directory", "pass the model repository's checkout")
    try:
        top = git(repo, "rev-parse", "--show-toplevel").strip()
    except GitFailed:
        raise UsageError(
            f"{repo} is not inside a git work tree", "run in the model repository's checkout or pass --repo"
        ) from None
    return Path(top)


def split_z(text: str) -> list[str]:
    return [item for item in text.split("\0") if item]


def changed_files(repo: str | Path, base: str, head: str = "HEAD", *, include_worktree: bool = False) -> list[str]:
    """Repo-relative POSIX paths changed since ``merge-base(base, head)``.

    Renames are listed as delete + add (``--no-renames``) so both the old and the new path can
    select cases; with ``include_worktree`` uncommitted and untracked files count too.
    """
    root = check_work_tree(Path(repo))
    base_id = _commit(root, base, "--base")
    head_id = _commit(root, head, "--head")
    try:
        merge_base = git(root, "merge-base", base_id, head_id).strip()
    except GitFailed:
        raise UsageError(
            f"--base {base!r} and --head {head!r} share no history (no merge base)",
            "fetch the full history (actions/checkout fetch-depth: 0) or pass a base on the same branch history",
        ) from None
    paths = set(split_z(git(root, "diff", "--name-only", "--no-renames", "-z", merge_base, head_id, "--")))
    if include_worktree:
        paths.update(split_z(git(root, "diff", "--name-only", "--no-renames", "-z", merge_base, "--")))
        paths.update(split_z(git(root, "ls-files", "--others", "--exclude-standard", "-z")))
    return sorted(paths)
