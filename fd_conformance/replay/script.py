"""The reproducer file: its name and its text, a short script an author reads before running it.

Its first line marks it as the kit's (:data:`HEADER`), so a later run may move it to previous/ with
the reports (cli/outdir.py never moves or deletes a file the kit did not write). Its docstring says
which row and check it re-runs, what the run found and how to run it under a debugger or a CUDA
tool; its code sets sys.path as the run set it and calls :func:`fd_conformance.replay.replay`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

HEADER = "# fd-conformance reproducer"
NAME_LIMIT = 150  # characters of a file name before it is shortened with a digest (NAME_MAX is 255 bytes)
REASON_SHOWN = 300  # characters of the run's reason quoted in the docstring


@dataclass(frozen=True)
class Reproduction:
    """What one reproducer re-runs, as the run ran it."""

    case: str
    device: str
    nodeid: str
    check: str
    specs: list[str] = field(default_factory=list)  # absolute: file specs resolved, module specs as given
    include_mutants: bool = False
    cycles: int = 5
    timeout: float | None = None  # the run's watchdog deadline for the check, when it recorded one
    path: list[str] = field(default_factory=list)  # sys.path entries the run's PYTHONPATH gave, in order
    codes: list[str] = field(default_factory=list)  # the error codes the run reported
    reason: str = ""  # the run's one-line reason


def file_name(case: str, device: str, nodeid: str) -> str:
    """``<case>-<device>-<test>[-<parametrize ids>].py``: the test without ``test_``, the ids as the
    node id ends in them (``mainOff-draftOn``); only file-name-safe characters."""
    name = nodeid.partition("::")[2]
    test, _, bracket = name.partition("[")
    ids = bracket.removesuffix("]")
    row = f"{case}-{device}"
    ids = ids[len(row) :] if ids.startswith(row) else (f"-{ids}" if ids else "")
    stem = re.sub(r"[^A-Za-z0-9._+-]", "_", f"{row}-{test.removeprefix('test_')}{ids}")
    if len(stem) > NAME_LIMIT:
        stem = f"{stem[: NAME_LIMIT - 13]}-{hashlib.sha256(stem.encode()).hexdigest()[:12]}"
    return stem + ".py"


def script_text(repro: Reproduction, path: str) -> str:
    """The reproducer file's text; ``path``: where it is written, for its usage lines."""
    found = ", ".join(repro.codes) or "a failure without a finding code"
    reason = " ".join(repro.reason.split())
    reason = _quoted(reason if len(reason) <= REASON_SHOWN else reason[: REASON_SHOWN - 3] + "...")
    nodeid, path = _quoted(repro.nodeid), _quoted(path)
    waits = f"{repro.timeout:g} s (the run's deadline)" if repro.timeout is not None else "the kit's default deadline"
    call = [
        f"specs={repro.specs!r}",
        f"include_mutants={repro.include_mutants!r}",
        f"case={repro.case!r}",
        f"device={repro.device!r}",
        f"nodeid={repro.nodeid!r}",
        f"cycles={repro.cycles!r}",
    ]
    if repro.timeout is not None:
        call.append(f"timeout={repro.timeout!r}")
    arguments = "".join(f"        {argument},\n" for argument in call)
    return f'''{HEADER}
"""{repro.case} [{repro.device}] {repro.check}: the run found {found}.

  {nodeid}
  {reason or "(no reason recorded)"}

Re-runs that one check on that case as the run did, in this process: no pytest session, no
isolation worker, no kit plugin. It prints the findings and exits 1 while the defect is there, 0
once it is fixed, 4 when the check cannot be judged here (e.g. a cuda row without a GPU).
From any directory, with THIS = {path}:

  python THIS
  python -m pdb THIS                      (or a breakpoint() in the model)
  CUDA_LAUNCH_BLOCKING=1 python THIS      (a CUDA error raised at the launch that caused it)
  compute-sanitizer python THIS           (memory errors inside the graphs, cuda rows)

A hang prints every thread's stack after {waits} and exits 1; the last
"fd-conformance replay:" step line before them says which step hung. To run the same check on
another case of the same spec (the good model, to compare), change case= below.
"""

import sys

sys.path[:0] = {repro.path!r}  # as the run's PYTHONPATH set it: the directory it ran from first

from fd_conformance.replay import replay  # noqa: E402

raise SystemExit(
    replay(
{arguments}    )
)
'''


def _quoted(text: str) -> str:
    """``text`` as it may stand in the docstring: a backslash or three quotes would end or break it."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
