"""``fd-conformance changed``: the command line of :mod:`fd_conformance.changed` (argparse lives only here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import fd_conformance.changed
from fd_conformance.cases import select_cases
from fd_conformance.changed import DEFAULT_ALL_IF, build_import_graph, changed_files, check_work_tree, select_changed
from fd_conformance.errors import EXIT_OK, UsageError

BASE_HELP = (
    "revision the change is measured against (the PR's target, e.g. origin/main); the diff starts at merge-base(BASE, HEAD)"
)
HEAD_HELP = "revision that holds the change (default: HEAD)"
REPO_HELP = "git work tree whose files and import graph are read (default: current directory)"
OUTPUT_HELP = "write the selection to FILE instead of stdout (the file `fd-conformance run --cases-file` reads)"
FORMAT_HELP = "lines: one case name per line; json: cases with the changed files that selected them"
WORKTREE_HELP = "also count uncommitted and untracked changes in the work tree (local use before committing)"
MODEL_HELP = "case spec module:attr or file.py:attr (repeatable; default: installed `fd_conformance.cases` entry points)"
ALL_IF_HELP = "glob (repo-relative, fnmatch) whose change selects every case (repeatable; adds to the defaults)"
MUTANTS_HELP = "also consider the installed mutant cases (the kit's own CI)"

FORMATS = ("lines", "json")


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fd-conformance changed`` (called by :func:`fd_conformance.cli.build_parser`)."""
    parser = subparsers.add_parser(
        "changed",
        help="list the model cases a git change can affect",
        description=(fd_conformance.changed.__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--base", required=True, metavar="REV", help=BASE_HELP)
    parser.add_argument("--head", default="HEAD", metavar="REV", help=HEAD_HELP)
    parser.add_argument("--repo", type=Path, default=Path("."), metavar="DIR", help=REPO_HELP)
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help=OUTPUT_HELP)
    parser.add_argument("--format", choices=FORMATS, default="lines", help=FORMAT_HELP)
    parser.add_argument("--include-worktree", action="store_true", help=WORKTREE_HELP)
    # --model as `fd-conformance run` spells it; --fd-model as the pytest plugin does.
    parser.add_argument("--model", "--fd-model", dest="fd_model", action="append", default=[], metavar="SPEC", help=MODEL_HELP)
    parser.add_argument("--all-if", action="append", default=[], metavar="GLOB", help=ALL_IF_HELP)
    parser.add_argument("--include-mutants", action="store_true", help=MUTANTS_HELP)
    parser.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    """args -> exit code 0 (an empty selection is a success: nothing to certify); UsageError -> 2."""
    repo = check_work_tree(args.repo)
    changed = changed_files(repo, args.base, args.head, include_worktree=args.include_worktree)
    # Specs given as relative file paths are relative to where the user stands, not --repo.
    cases = select_cases(args.fd_model, runtime="auto", include_mutants=args.include_mutants)
    graph = build_import_graph(repo)
    selection = select_changed(cases, changed, graph, all_if=(*DEFAULT_ALL_IF, *args.all_if))
    if args.format == "json":
        text = json.dumps(selection.to_dict(), indent=2) + "\n"
    else:
        text = "".join(f"{name}\n" for name in selection.cases)
    print(
        f"fd-conformance changed: {len(changed)} changed file(s), {len(selection.cases)} of {len(cases)} case(s) selected"
        + (f" (all: {selection.all_because} changed)" if selection.all_because else ""),
        file=sys.stderr,
    )
    if args.output is not None:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write {args.output}: {err.strerror}", "pass a writable path to --output") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK
