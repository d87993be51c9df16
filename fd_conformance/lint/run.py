"""One lint run: scan the files, add the cross-file rule, apply suppressions and severities, sort.

Why apart from the walker: the run is where the per-file scans meet (FDC001 resolves bases
across files, context files lend classes), which no single file's pass can see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from fd_conformance.errors import UsageError
from fd_conformance.findings import Finding
from fd_conformance.lint.config import LintConfig, load_config
from fd_conformance.lint.context import find_project_root, resolve_context
from fd_conformance.lint.facts import FileScan, LintResult
from fd_conformance.lint.files import iter_python_files
from fd_conformance.lint.pool import default_jobs, scan_paths
from fd_conformance.lint.rules import check_fdc001_wrapper_without_clear, check_fdc103_release_under_live_graphs


def collect_findings(scans: Sequence[FileScan], config: LintConfig, context: Sequence[FileScan] = ()) -> list[Finding]:
    """Cross-file rule, suppression, severity overrides, stable order (``context``: see
    :func:`fd_conformance.lint.rules.check_fdc001_wrapper_without_clear`)."""
    pending = [(scan, f) for scan in scans for f in scan.findings]
    pending.extend(check_fdc001_wrapper_without_clear(scans, config, context))
    pending.extend(check_fdc103_release_under_live_graphs(scans, config, context))
    findings: list[Finding] = []
    for scan, finding in pending:
        if finding.code in scan.noqa.get(finding.location.line or 0, ()):
            continue
        override = config.severity.get(finding.code)
        if override is not None and override is not finding.severity:
            finding = dataclasses.replace(finding, severity=override)
        findings.append(finding)
    findings.sort(key=lambda f: (f.location.path or "", f.location.line or 0, f.location.col or 0, f.code))
    return findings


def lint_paths(
    paths: Sequence[str | Path],
    config: LintConfig | None = None,
    root: Path | None = None,
    *,
    context: Path | None = None,
    use_context: bool = True,
    jobs: int = 1,
) -> LintResult:
    """Lint files and directories; ``config`` defaults to the nearest pyproject.toml's settings.

    When files are named one by one (pre-commit passes only the changed ones), base classes they
    leave unresolved are looked up in ``context`` (default: the project root above them, see
    :func:`fd_conformance.lint.context.find_project_root`); findings are reported for the given
    paths only. Directory-only runs are self-contained, as before. ``jobs``: worker processes for
    large trees, 0 = one per available CPU, 1 = serial (the default for library callers).
    """
    if not paths:
        raise UsageError("no paths to lint", "pass one or more files or directories")
    if context is not None and not context.is_dir():
        raise UsageError(f"context {context} is not a directory", "pass the project root to --context")
    cfg = config if config is not None else load_config(Path(paths[0]))
    scans = scan_paths(paths, cfg, root, jobs=jobs or default_jobs())
    files = [Path(p) for p in paths if Path(p).is_file()]
    context_scans: list[FileScan] = []
    if use_context and (files or context is not None):
        tree = context or find_project_root(files or [Path(p) for p in paths])
        if tree is not None:
            display_root = (root or Path.cwd()).resolve()
            given = list(iter_python_files([Path(p) for p in paths], cfg, display_root))
            context_scans, _ = resolve_context(scans, given, cfg, display_root, tree)
    return LintResult(collect_findings(scans, cfg, context_scans), len(scans), len(context_scans))
