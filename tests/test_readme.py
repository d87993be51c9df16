"""The README is the newcomer's contract: its code table and its set-up commands must stay true."""

from __future__ import annotations

import re
from pathlib import Path

from fd_conformance.findings import rules_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_finding_code_table_is_generated_from_the_registry() -> None:
    match = re.search(r"<!-- generated: python -m fd_conformance.findings -->\n(.*?)\n<!-- end generated -->", README, re.S)
    assert match, "README lost its generated finding-code table markers"
    assert match.group(1).strip() == rules_markdown(), "README table is stale: run `python -m fd_conformance.findings`"


def test_ci_runs_the_readme_test_command() -> None:
    setup = README.split("## Set-up: two commands", 1)[1].split("```", 2)[1]
    commands = [line for line in setup.splitlines()[1:] if line and not line.startswith("#")]  # [0] is the fence's language
    assert len(commands) == 2, commands
    main_job, test_command = commands
    assert "fd-conformance run" in main_job
    assert test_command in (ROOT / ".ci" / "run").read_text(), "the CI entry point must run the README's test command"
