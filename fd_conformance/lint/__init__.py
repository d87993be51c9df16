"""Static linter: graph-lifecycle defects found in model source trees without importing them.

Why static: FastDeploy's model and runner modules import paddle and custom CUDA ops at import
time, so a CI job without a GPU cannot even import them; yet the three defects this kit exists
for (a wrapper with no clear method, draft graphs destroyed after the weights they captured,
draft clearing gated by the main model's flag) are all visible in the source. Each file is
parsed once with :mod:`ast`; one recursive pass collects everything the rules need.

Modules, each importing only those above it in this list: :mod:`.config` (the names the rules
look for), :mod:`.facts` (what a scan records), :mod:`.files` (discovery, reading, noqa),
:mod:`.guard` (FDC102's reachability), :mod:`.rules` (one function per code: FDC001 wrapper
without a clear method, FDC002 legacy spelling, FDC004 near-miss spelling, FDC100 unparsable
file, FDC101 release before graph clear, FDC102 draft clear under the main flag only),
:mod:`.scan` (the one-pass walker), :mod:`.context` (base classes from the surrounding tree),
:mod:`.pool` (worker processes), :mod:`.run` (a whole run), :mod:`.fix` (``--fix``) and
:mod:`.output` (text, JSON, SARIF, GitHub annotations). The command line is
:mod:`fd_conformance.cli.lint`.
"""

from __future__ import annotations

from fd_conformance.lint.config import LINT_CODES, LintConfig, load_config
from fd_conformance.lint.facts import ClassInfo, FileScan, LintResult
from fd_conformance.lint.files import display_path, iter_python_files, read_source, require_exists
from fd_conformance.lint.fix import fix_paths, fix_source
from fd_conformance.lint.output import render
from fd_conformance.lint.pool import MIN_PARALLEL_FILES, default_jobs, scan_paths
from fd_conformance.lint.run import collect_findings, lint_paths
from fd_conformance.lint.scan import read_and_scan, scan_source
from fd_conformance.spelling import CANONICAL, LEGACY, near_miss

__all__ = [
    "CANONICAL",
    "LEGACY",
    "LINT_CODES",
    "MIN_PARALLEL_FILES",
    "ClassInfo",
    "FileScan",
    "LintConfig",
    "LintResult",
    "collect_findings",
    "default_jobs",
    "display_path",
    "fix_paths",
    "fix_source",
    "iter_python_files",
    "lint_paths",
    "load_config",
    "near_miss",
    "read_and_scan",
    "read_source",
    "render",
    "require_exists",
    "scan_paths",
    "scan_source",
]
