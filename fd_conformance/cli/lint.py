"""``fd-conformance lint``: the command line of :mod:`fd_conformance.lint` (argparse lives only here).

Every usage error surfaces before ``--fix`` touches a file: a rejected command line that
rewrote sources anyway leaves the user with edits they never confirmed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import fd_conformance.lint
from fd_conformance.errors import UsageError, validate_int
from fd_conformance.lint import fix_paths, lint_paths, load_config, render, require_exists
from fd_conformance.lint.files import reset_notices
from fd_conformance.lint.pool import MIN_PARALLEL_FILES

FORMAT_HELP = "output format: text (path:line:col: CODE message), json, sarif (2.1.0), github (workflow annotations)"
CONFIG_HELP = "TOML file with lint settings (default: [tool.fd-conformance.lint] of the nearest pyproject.toml)"
FIX_HELP = (
    "rewrite legacy clear_grpah_opt_backend definitions to the canonical name, keeping an alias, and "
    "self.clear_grpah_opt_backend() calls in the classes so renamed"
)
FIX_CALLS_HELP = (
    "with --fix: also rename calls on other receivers (self.model.clear_grpah_opt_backend()); only "
    "safe when every callee has the canonical name, which a static pass cannot check"
)
OUTPUT_HELP = "write the report to FILE instead of stdout (e.g. a .sarif file for upload)"
CONTEXT_HELP = (
    "project root in which base classes of the given files are looked up (default: nearest "
    "pyproject.toml or .git above them); findings are still reported for the given files only"
)
NO_CONTEXT_HELP = "judge the given files on their own: no base-class lookup in the surrounding tree"
JOBS_HELP = f"worker processes for parsing (0 = one per CPU, the default; used from {MIN_PARALLEL_FILES} files)"

FORMATS = ("text", "json", "sarif", "github")


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fd-conformance lint`` (called by :func:`fd_conformance.cli.build_parser`)."""
    parser = subparsers.add_parser(
        "lint",
        help="static graph-lifecycle checks over model source trees",
        description=(fd_conformance.lint.__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to lint")
    parser.add_argument("--format", choices=FORMATS, default="text", help=FORMAT_HELP)
    parser.add_argument("--config", type=Path, default=None, metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--fix", action="store_true", help=FIX_HELP)
    parser.add_argument("--fix-calls", action="store_true", help=FIX_CALLS_HELP)
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help=OUTPUT_HELP)
    parser.add_argument("--context", type=Path, default=None, metavar="DIR", help=CONTEXT_HELP)
    parser.add_argument("--no-context", action="store_true", help=NO_CONTEXT_HELP)
    parser.add_argument("-j", "--jobs", type=_jobs_value, default=0, metavar="N", help=JOBS_HELP)
    parser.set_defaults(func=run_cli)


def _jobs_value(text: str) -> int:
    """argparse type for --jobs: a count >= 0, with an error that says how to fix it."""
    try:
        return validate_int(text, "--jobs", minimum=0)
    except UsageError as err:  # argparse prints its own usage line around the problem
        # The message predates the shared validator and users' scripts may match it: kept verbatim.
        raise argparse.ArgumentTypeError(f"--jobs must be a whole number >= 0 (0 = one per CPU), got {text!r}") from err


def run_cli(args: argparse.Namespace) -> int:
    """args -> exit code: 0 clean (warnings allowed), 1 error-level findings; UsageError -> 2 upstream."""
    # Every usage error must surface before --fix touches a file: a rejected command line that
    # rewrote sources anyway leaves the user with edits they never confirmed.
    reset_notices()  # each skipped path is noticed once in this run, --fix's walk included
    for path in args.paths:  # first: the config is looked up from the first path
        require_exists(Path(path))
    config = load_config(Path(args.paths[0]), args.config)
    if args.context is not None and args.no_context:
        raise UsageError("--context and --no-context contradict each other", "pass only one of them")
    if args.context is not None and not args.context.is_dir():
        raise UsageError(f"context {args.context} is not a directory", "pass the project root to --context")
    if args.fix_calls and not args.fix:
        raise UsageError("--fix-calls only extends --fix", "add --fix, or drop --fix-calls")
    if args.output is not None and args.output.is_dir():
        raise UsageError(f"cannot write {args.output}: it is a directory", "pass a file path to --output")
    if args.fix:
        for changed in fix_paths(args.paths, config, rename_calls=args.fix_calls):
            print(f"fixed {changed}", file=sys.stderr)
    result = lint_paths(args.paths, config, context=args.context, use_context=not args.no_context, jobs=args.jobs)
    text = render(result, args.format)
    if args.output is not None:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write {args.output}: {err.strerror}", "pass a writable path to --output") from None
    elif text:
        sys.stdout.write(text)
    return result.exit_code
