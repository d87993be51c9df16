"""``fd-conformance merge DIR... --out DIR``: the one report of a sharded run, from its N shards.

Beside ``report`` (which rebuilds one run's report from its results file), ``merge`` takes the
report directories the N ``run --shard K/N`` jobs wrote (a CI matrix's artifacts), refuses outputs
that do not make one run (:mod:`fd_conformance.report.merge`; exit EXIT_SHARDS, 7) and writes
conformance.json, certificate.md and junit.xml as an unsharded run would, then exits with the
merged verdict: the gate of a sharded CI run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fd_conformance.cli.job_summary import append_job_summary
from fd_conformance.cli.junit import SUITE_NAME as JUNIT_SUITE
from fd_conformance.cli.outdir import REPORT_FILES, OutLock, refuse_foreign
from fd_conformance.errors import UsageError, validate_directory

MERGE_HELP = (
    "merge the report directories of the N shards of a run (`run --shard K/N`) into the one report an unsharded "
    "run writes, and exit with its verdict as `run` does; 7 when the shards do not make one run (kit, Python or "
    "framework versions, run settings such as --cycles, run ids, case sets, devices or shard counts differ, a shard "
    "is given twice or missing)"
)
DIRS_HELP = "each shard's report directory (its --out, or pytest --fd-report DIR), or its conformance.json"
OUT_HELP = (
    "directory for the merged conformance.json, certificate.md and junit.xml (default: ./fd-conformance-report); "
    "a file of those names that fd-conformance did not write stops the command, as it stops `run --out`"
)
QUIET_HELP = "print only the verdict line"
ALLOW_EMPTY_HELP = "exit 0 instead of 4 when no shard ran a check (as `run --allow-empty`)"
DEFAULT_OUT = "fd-conformance-report"
NO_CASES_ID = "[no-cases"  # the placeholder tests of a session without a case (an empty shard), and their variants


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance merge`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("merge", help=MERGE_HELP, description=MERGE_HELP)
    parser.add_argument("dirs", nargs="+", metavar="DIR", help=DIRS_HELP)
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=OUT_HELP)
    parser.add_argument("--allow-empty", action="store_true", help=ALLOW_EMPTY_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.set_defaults(func=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    import json

    from fd_conformance.cli.summary import not_run_summary, verdict_line
    from fd_conformance.report import CERTIFICATE_NAME, JSON_NAME, JUNIT_NAME, format_certificate, format_document_matrix
    from fd_conformance.report.merge import check_shards, load_shard, merge_documents

    out = Path(validate_directory(args.out, "--out")).resolve()
    shards = [load_shard(source) for source in args.dirs]  # before the lock: a refused merge leaves nothing
    inside = [s.source for s in shards if (s.source if s.source.is_dir() else s.source.parent).resolve() == out]
    if inside:
        raise UsageError(f"--out {str(out)!r} is a shard's own directory ({inside[0]})", "pass another --out for the merge")
    check_shards(shards)
    document = merge_documents(shards, allow_empty=bool(args.allow_empty))
    with OutLock(out):
        refuse_foreign(out, REPORT_FILES)
        (out / JSON_NAME).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        (out / CERTIFICATE_NAME).write_text(format_certificate(document), encoding="utf-8")
        junits = [s.source / JUNIT_NAME for s in shards if s.source.is_dir() and (s.source / JUNIT_NAME).is_file()]
        text = merged_junit(junits) if len(junits) == len(shards) else None
        (out / JUNIT_NAME).write_text(text or document_junit(document), encoding="utf-8")
    append_job_summary(out)  # GITHUB_STEP_SUMMARY: the merged certificate on the job's page
    if not args.quiet:
        if document["cases"]:
            print(format_document_matrix(document))
            print()
        if document["run"]["not_run"]:
            print(f"not run: {not_run_summary(document['run']['not_run'])}")
    if document["run"]["reason"] and document["run"]["status"] != "finished":
        print(f"fd-conformance merge: {document['run']['reason']}", file=sys.stderr)
    print(f"{verdict_line(document)} (merged from {len(shards)} shard(s))")
    if not args.quiet:
        for name in REPORT_FILES:
            print(f"  {out / name}")
    return int(document["exit_code"])


def merged_junit(paths: Sequence[Path]) -> str | None:
    """One junit.xml holding every shard's test cases as pytest wrote them (failure texts included),
    counts summed; None when one cannot be read (the caller writes one from the document)."""
    import xml.etree.ElementTree as ET

    cases: list[ET.Element] = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            return None
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            cases += [case for case in suite.findall("testcase") if NO_CASES_ID not in case.get("name", "")]
    return _junit(cases)


def _junit(cases: Sequence[Any]) -> str:
    import xml.etree.ElementTree as ET

    def count(tag: str) -> int:
        return sum(1 for case in cases if case.find(tag) is not None)

    root = ET.Element("testsuites", name=JUNIT_SUITE)
    suite = ET.SubElement(root, "testsuite", name=JUNIT_SUITE)
    for key, value in (
        ("errors", count("error")),
        ("failures", count("failure")),
        ("skipped", count("skipped")),
        ("tests", len(cases)),
        ("time", f"{sum(float(case.get('time', 0) or 0) for case in cases):.3f}"),
    ):
        suite.set(key, str(value))
    suite.extend(sorted(cases, key=lambda case: (case.get("classname", ""), case.get("name", ""))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def document_junit(document: Mapping[str, Any]) -> str:
    """junit.xml from the merged document, when a shard's pytest wrote none (pytest --fd-report
    without --junitxml): each result a test case with its matrix keys; a check owed without a
    result a skipped one saying so."""
    import xml.etree.ElementTree as ET

    cases = []
    for result in document["results"]:
        path, _, name = str(result["nodeid"]).partition("::")
        case = ET.Element("testcase", classname=path.removesuffix(".py").replace("/", "."), name=name or path)
        case.set("time", f"{float(result.get('duration', 0) or 0):.3f}")
        props = ET.SubElement(case, "properties")
        for key in ("case", "device", "check"):
            ET.SubElement(props, "property", name=f"fd_{key}", value=str(result.get(key, "")))
        ET.SubElement(props, "property", name="fd_codes", value=",".join(result.get("codes", [])))
        message = str(result.get("message", ""))
        if result["outcome"] == "failed":
            ET.SubElement(case, "failure", message=message.splitlines()[0] if message else "failed").text = message
        elif result["outcome"] in ("skipped", "xfailed"):
            kind = "pytest.xfail" if result["outcome"] == "xfailed" else "pytest.skip"
            ET.SubElement(case, "skipped", type=kind, message=message or result["outcome"])
        cases.append(case)
    for key in ("not_run", "deselected"):
        for nodeid in document["run"].get(key, []):
            path, _, name = str(nodeid).partition("::")
            case = ET.Element("testcase", classname=path.removesuffix(".py").replace("/", "."), name=name or path, time="0.000")
            ET.SubElement(case, "skipped", type=f"fd.{key}", message=f"{key.replace('_', ' ')}: owed by its row, no result")
            cases.append(case)
    return _junit(cases)
