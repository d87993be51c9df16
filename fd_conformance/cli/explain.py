"""``fd-conformance explain CODE``: one finding code's page (what, why, example, fix, where), as
``ruff rule`` prints one; without CODE, every code with its title.

The page is the registry entry (:mod:`fd_conformance.codes`) itself, so what ``explain`` says is
what the README table, SARIF's rule help and every finding's fix say.
"""

from __future__ import annotations

import argparse
import difflib

from fd_conformance.errors import EXIT_OK, UsageError
from fd_conformance.findings import RULES, rule_page

CODE_HELP = "a finding code, e.g. FDC201 (case-insensitive); omit it to list every code"


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fd-conformance explain`` (called by :func:`fd_conformance.cli.build_parser`)."""
    parser = subparsers.add_parser(
        "explain", help="explain a finding code: what it finds, why, an example, the fix", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("code", nargs="?", default=None, metavar="CODE", help=CODE_HELP)
    parser.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    if args.code is None:
        for rule in sorted(RULES.values(), key=lambda r: r.code):
            print(f"{rule.code}  {rule.severity.value:<7}  {rule.title}")
        return EXIT_OK
    print(rule_page(RULES[known_code(args.code)]))
    return EXIT_OK


def known_code(text: str) -> str:
    """``text`` as a registered code (``fdc201`` -> ``FDC201``); a one-line UsageError naming the
    nearest codes otherwise."""
    code = text.strip().upper()
    if code in RULES:
        return code
    near = difflib.get_close_matches(code, sorted(RULES), n=1, cutoff=0.6)
    fix = f"did you mean {near[0]}?" if near else "run `fd-conformance explain` to list the codes"
    raise UsageError(f"unknown finding code {text!r}", fix)
