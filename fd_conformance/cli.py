"""``fd-conformance``: run | lint | report.  Each subcommand lives with the concept it drives."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fd_conformance import __version__
from fd_conformance.errors import EXIT_SIGINT, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fd-conformance", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fd-conformance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module adds its own subparser and sets ``func`` (args -> exit code); imports are
    # deferred to here so `fd-conformance --help` never loads a framework.
    from fd_conformance import lint_cli

    lint_cli.add_cli(sub)
    from fd_conformance import run_cli  # `run`: the suites over models -> matrix, JSON, JUnit, certificate

    run_cli.add_cli(sub)
    from fd_conformance.isolation import results as isolation_results  # `report FILE`: matrix from a --fd-results log

    isolation_results.add_cli(sub)
    from fd_conformance import changed_cli  # `changed --base REV`: model cases a git change can affect

    changed_cli.add_cli(sub)
    from fd_conformance.fastdeploy import cli as fastdeploy_cli  # `fastdeploy PATH`: the real engine on CPU

    fastdeploy_cli.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as err:
        print(f"fd-conformance {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code  # EXIT_USAGE, or EXIT_INCOMPLETE for an unreadable results file
    except KeyboardInterrupt:  # Ctrl-C before `run` installed its own handler: no traceback either
        print(f"fd-conformance {args.command}: interrupted", file=sys.stderr)
        return EXIT_SIGINT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
