"""The certificate on a GitHub Actions job's page: ``run`` and ``merge`` append it to the file
``GITHUB_STEP_SUMMARY`` names, when it is set, so the verdict and the lifecycle pictures of the
failing checks are where the reader already is (GitHub renders the Mermaid blocks there).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

JOB_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # set by GitHub Actions in every step


def append_job_summary(out: Path) -> None:
    """Append the certificate the report directory ``out`` holds to the job summary file when
    ``GITHUB_STEP_SUMMARY`` names one; a file that cannot be written costs one line on stderr,
    never the verdict."""
    target = os.environ.get(JOB_SUMMARY_ENV)
    if not target:
        return
    from fd_conformance.report import CERTIFICATE_NAME  # the reports' code only when a summary is asked for

    certificate = out / CERTIFICATE_NAME
    if not certificate.is_file():
        return
    try:
        with open(target, "a", encoding="utf-8") as summary:
            summary.write(certificate.read_text(encoding="utf-8").rstrip("\n") + "\n\n")
    except OSError as err:
        print(
            f"fd-conformance: the certificate was not added to the job summary {target} ({err.strerror or err}); "
            f"fix: point {JOB_SUMMARY_ENV} at a writable file, or unset it",
            file=sys.stderr,
        )
