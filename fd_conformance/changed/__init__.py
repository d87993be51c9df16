"""``fd-conformance changed``: which model cases a change can affect, so CI certifies only those.

Why static: a model PR in FastDeploy touches one model file, yet its modules import paddle and
custom ops at import time, so "import and see" is neither cheap nor possible on a CPU runner.
:mod:`.git` lists the files changed between ``git merge-base BASE HEAD`` and HEAD,
:mod:`.imports` reads the repository's import graph with :mod:`ast`, :mod:`.select` maps the
changed files to cases. The selection file it writes is read back by
:func:`fd_conformance.cases.read_selection`; the command line is :mod:`fd_conformance.cli.changed`.
"""

from __future__ import annotations

from fd_conformance.cases.selection import apply_selection, read_selection  # where they lived before cases/
from fd_conformance.changed.git import changed_files, check_work_tree
from fd_conformance.changed.imports import ImportGraph, build_import_graph
from fd_conformance.changed.select import DEFAULT_ALL_IF, Selection, select_changed

__all__ = [
    "DEFAULT_ALL_IF",
    "apply_selection",
    "read_selection",
    "ImportGraph",
    "Selection",
    "build_import_graph",
    "changed_files",
    "check_work_tree",
    "select_changed",
]
