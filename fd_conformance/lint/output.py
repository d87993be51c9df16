"""Linter report formats: human text, JSON, SARIF 2.1.0 (GitHub code scanning), workflow annotations.

Kept apart from the rules so a new consumer (another CI, an editor) is one function here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fd_conformance import __version__
from fd_conformance.findings import CODES_DOC, RULES, Finding, Severity, rule_page
from fd_conformance.lint.config import LINT_CODES
from fd_conformance.lint.facts import LintResult

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# helpUri must be an absolute URI: the tool's page points at the README's finding-code table, each
# rule's at its own section of the generated code pages (the registry entry `explain` prints).
HELP_URI = "https://github.com/fd-conformance/fd-conformance/blob/main/README.md#finding-codes"
CODE_PAGES_URI = f"https://github.com/fd-conformance/fd-conformance/blob/main/{CODES_DOC}"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning"}


def render(result: LintResult, fmt: str) -> str:
    """The whole report as one string, newline-terminated (empty for clean text output)."""
    if fmt == "text":
        return "".join(f"{_where(f)}: {f.code} {f.message}\n" for f in result.findings)
    if fmt == "json":
        return json.dumps(to_json(result), indent=2) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif(result), indent=2) + "\n"
    if fmt == "github":
        return "".join(_annotation(f) + "\n" for f in result.findings)
    raise ValueError(f"unknown format {fmt!r}")  # argparse choices make this unreachable from the CLI


def _where(f: Finding) -> str:
    loc = f.location
    return f"{loc.path}:{loc.line or 1}:{loc.col or 1}"


def to_json(result: LintResult) -> dict[str, Any]:
    errors = sum(f.is_error for f in result.findings)
    return {
        "tool": "fd-conformance lint",
        "version": __version__,
        "files_scanned": result.files_scanned,
        "summary": {"errors": errors, "warnings": len(result.findings) - errors},
        "findings": [
            {
                "code": f.code,
                "severity": f.severity.value,
                "message": f.message,
                "hint": f.hint,
                "path": f.location.path,
                "line": f.location.line,
                "col": f.location.col,
                "object": f.location.obj,
            }
            for f in result.findings
        ],
    }


def to_sarif(result: LintResult) -> dict[str, Any]:
    """SARIF 2.1.0 with what GitHub code scanning reads: rules, levels, relative URIs, regions."""
    rules = [
        {
            "id": code,
            "name": code,
            "shortDescription": {"text": RULES[code].title},
            "fullDescription": {"text": RULES[code].doc.what},
            "help": {"text": f"fix: {RULES[code].hint_shown()}", "markdown": rule_page(RULES[code])},
            "helpUri": f"{CODE_PAGES_URI}#{code.lower()}",
            "defaultConfiguration": {"level": _SARIF_LEVEL[RULES[code].severity]},
        }
        for code in LINT_CODES
    ]
    index = {code: i for i, code in enumerate(LINT_CODES)}
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f"{f.message} (fix: {f.hint})"},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact_location(f.location.path or ""),
                        "region": {"startLine": f.location.line or 1, "startColumn": f.location.col or 1},
                    }
                }
            ],
        }
        for f in result.findings
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "fd-conformance", "version": __version__, "informationUri": HELP_URI, "rules": rules}
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def _artifact_location(path: str) -> dict[str, str]:
    """SARIF artifactLocation: a percent-encoded URI relative to %SRCROOT% for files under the
    working directory; an absolute ``file://`` URI (no base) for any other file, since a base plus
    an absolute or ``..`` path is no URI a viewer (GitHub code scanning) can place."""
    posix = Path(path)
    if posix.is_absolute() or ".." in posix.parts:
        return {"uri": posix.resolve().as_uri()}
    return {"uri": quote(posix.as_posix()), "uriBaseId": "%SRCROOT%"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _annotation(f: Finding) -> str:
    """``::error file=...,line=...,col=...,title=CODE::message`` (GitHub's escaping rules)."""
    kind = "error" if f.is_error else "warning"
    loc = f.location
    props = f"file={_escape_property(loc.path or '')},line={loc.line or 1},col={loc.col or 1},title={f.code}"
    return f"::{kind} {props}::{_escape_data(f.message)}"
