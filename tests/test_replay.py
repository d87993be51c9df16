"""Reproducers (issue 52, "Replay"): ``fd-conformance run`` writes OUT/repro/<case>-<device>-<test>.py
for every check that found a defect; ``python repro/x.py`` re-runs that check alone, prints the
run's codes and exits 1, and exits 0 on the good twin. And ``run --last-failed``.

The runs are real ``fd-conformance run`` subprocesses. Every bundled mutant (and every outside-style
fixture's variant) is certified once, in one module-scoped run each; their reproducers then run in
one driver process (each file as ``python FILE`` runs it: ``runpy`` as ``__main__``, its exit status
from SystemExit) so the framework imports are paid once. The hang, the crash and one mutant's
reproducer run as real ``python FILE`` processes from another directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.errors import EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
ENV = {**os.environ, "FD_CONFORMANCE_GPU": "0"}
OUTSIDE_ENV = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(OUTSIDE), os.environ.get("PYTHONPATH", "")]))}
VERDICT = re.compile(r"^fd-conformance replay: (PASS|FAIL|SKIP)(?: ([A-Z0-9,]+))?", re.M)

# The driver: each reproducer file run as `python FILE` runs it (as __main__, sys.argv[0] its
# path), its stdout and exit status recorded; one interpreter for all of them.
DRIVER = r"""
import contextlib, io, json, runpy, sys
results = []
for path in sys.argv[2:]:
    out = io.StringIO()
    sys.argv[0] = path
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else 1
    results.append({"path": path, "code": code, "stdout": out.getvalue()})
with open(sys.argv[1], "w") as handle:
    json.dump(results, handle)
"""


def run_kit(out: Path, *args: str, env: dict[str, str] = ENV, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "fd_conformance.cli", "run", f"--out={out}", "--device=cpu", "--cycles=3", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd or out.parent, timeout=1800)


def defects(out: Path) -> list[dict[str, Any]]:
    """The run's results that found a defect: what gets a reproducer."""
    document = json.loads((out / "conformance.json").read_text())
    return [r for r in document["results"] if r["outcome"] in ("failed", "xfailed")]


def repro_of(out: Path, result: dict[str, Any]) -> Path:
    """The reproducer the certificate lists for ``result`` (asserting it is listed)."""
    certificate = (out / "certificate.md").read_text()
    row = f"`{result['case']}` [{result['device']}] {result['check']}"
    listed = [m.group(1) for m in re.finditer(r"^- `(repro/[^`]+)`: (.+)$", certificate, re.M) if m.group(2).startswith(row)]
    paths = [out / name for name in listed if result["nodeid"] in (out / name).read_text()]
    assert len(paths) == 1, (result["nodeid"], listed)
    return paths[0]


def variant(path: Path, into: Path, **replace: str) -> Path:
    """A copy of reproducer ``path`` with its ``name=...`` arguments replaced: the edit its
    docstring tells the reader to make to run the check on another case."""
    text = path.read_text()
    for name, value in replace.items():
        old = re.search(rf"^        {name}=(.*),$", text, re.M)
        assert old is not None, (path, name)
        text = text.replace(old.group(0), f"        {name}={value},")
    into.mkdir(parents=True, exist_ok=True)
    copy = into / f"{len(list(into.iterdir()))}-{path.name}"
    copy.write_text(text)
    return copy


def drive(files: list[Path], tmp: Path, env: dict[str, str] = ENV) -> dict[Path, dict[str, Any]]:
    """Run every reproducer in ``files`` in one driver process; path -> code and stdout."""
    results = tmp / f"driven-{len(list(tmp.glob('driven-*')))}.json"
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(results), *map(str, files)],
        capture_output=True, text=True, env=env, cwd=tmp, timeout=1800,
    )  # fmt: skip
    assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-5000:]
    return {Path(r["path"]): r for r in json.loads(results.read_text())}


def verdict(stdout: str) -> tuple[str, list[str]]:
    """The reproducer's last line: PASS / FAIL / SKIP and its codes."""
    found = VERDICT.findall(stdout)
    assert found, stdout[-2000:]
    word, codes = found[-1]
    return word, sorted(c for c in codes.split(",") if c)


# --------------------------------------------------------------------------- every bundled mutant
def _warning_codes() -> frozenset[str]:
    from fd_conformance.findings import RULES, Severity

    return frozenset(code for code, rule in RULES.items() if rule.severity is Severity.WARNING)


WARNING_CODES = _warning_codes()


def twin_of(case: Any, good: list[Any]) -> str:
    """The good reference model a mutant was made from: its runtime's good case with its capabilities."""
    (twin,) = [str(g.name) for g in good if g.runtime == case.runtime and g.capabilities == case.capabilities]
    return twin


@pytest.fixture(scope="module")
def mutant_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `run --include-mutants` over every bundled mutant (good models are their twins, not run);
    then every reproducer, and each again on its mutant's good twin, in one driver."""
    from fd_reference_models.cases import all_cases

    tmp = tmp_path_factory.mktemp("mutants")
    cases = all_cases()
    mutants = {c.name: c for c in cases if c.is_mutant}
    good = [c for c in cases if not c.is_mutant]
    (tmp / "mutants.txt").write_text("\n".join(mutants) + "\n")
    out = tmp / "out"
    # In-process checks: isolation is the isolation suite's subject, and a worker per check here
    # would only slow the one run; the hang test below runs isolated.
    proc = run_kit(out, "--include-mutants", f"--cases-file={tmp / 'mutants.txt'}", "-q", "--", "--fd-isolate=off")
    found = defects(out)
    repros = {r["nodeid"]: repro_of(out, r) for r in found}
    twins = {
        r["nodeid"]: variant(repros[r["nodeid"]], tmp / "twins", case=repr(twin_of(mutants[r["case"]], good))) for r in found
    }
    driven = drive([*repros.values(), *twins.values()], tmp)
    return {"proc": proc, "out": out, "mutants": mutants, "defects": found, "repros": repros, "twins": twins, "driven": driven}


def _bundled_mutants() -> list[str]:
    from fd_reference_models.cases import all_cases

    return [c.name for c in all_cases() if c.is_mutant]


@pytest.mark.xdist_group("replay_mutants")  # one module-scoped run per group, paid by one worker
def test_the_mutant_run_caught_every_mutant(mutant_run: dict[str, Any]) -> None:
    proc = mutant_run["proc"]
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{mutant_run['out'] / 'repro'}/ (" not in proc.stdout  # -q: the verdict line only


@pytest.mark.xdist_group("replay_mutants")  # one module-scoped run per group, paid by one worker
@pytest.mark.parametrize("mutant", _bundled_mutants())
def test_each_mutant_reproducer_fails_with_the_runs_codes_and_its_twin_passes(mutant_run: dict[str, Any], mutant: str) -> None:
    case = mutant_run["mutants"][mutant]
    mine = [r for r in mutant_run["defects"] if r["case"] == mutant]
    errors = sorted(c for c in case.expected_findings if c not in WARNING_CODES)
    if not errors:  # built to draw a warning only: a warning never fails a check, so nothing to replay
        assert mine == [], mine
        return
    assert mine, f"{mutant}: no check found its defect"
    driven = mutant_run["driven"]
    for result in mine:
        ran = driven[mutant_run["repros"][result["nodeid"]]]
        assert ran["code"] == EXIT_VIOLATIONS, (result["nodeid"], ran["stdout"][-2000:])
        assert verdict(ran["stdout"]) == ("FAIL", sorted(result["codes"])), (result["nodeid"], ran["stdout"][-2000:])
        on_twin = driven[mutant_run["twins"][result["nodeid"]]]
        assert (on_twin["code"], verdict(on_twin["stdout"])[0]) == (EXIT_OK, "PASS"), (
            result["nodeid"],
            on_twin["stdout"][-2000:],
        )
    assert sorted({c for r in mine for c in r["codes"]}) == errors


@pytest.mark.xdist_group("replay_mutants")  # one module-scoped run per group, paid by one worker
def test_a_mutant_reproducer_runs_as_python_file_from_any_directory(mutant_run: dict[str, Any], tmp_path: Path) -> None:
    """The real thing, once: `python repro/x.py` in a fresh interpreter, from another directory,
    without the run's environment: FDC302 and exit 1; the certificate lists the file."""
    (result,) = [r for r in mutant_run["defects"] if r["case"] == "mutant-leaky-clear"]
    path = mutant_run["repros"][result["nodeid"]]
    assert path.name == "mutant-leaky-clear-cpu-clear_releases_graphs_and_memory.py"
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == EXIT_VIOLATIONS, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert verdict(proc.stdout) == ("FAIL", ["FDC302"])
    assert "LeakyClearGlm4Moe" in proc.stdout  # the finding's own line, Finding.format()
    text = path.read_text()
    assert text.startswith("# fd-conformance reproducer\n") and "the run found FDC302" in text


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", ["real", "native"])
def test_on_a_gpu_each_mutant_reproducer_fails_with_the_runs_codes_and_its_twin_passes(tmp_path: Path, graphs: str) -> None:
    """The same proof on cuda rows: real graphs (the bundled mutants, `--include-mutants`), and the
    bundled torch models and mutants declared native (tests/fixtures/native_models), each reproducer
    and its twin in one driver on the GPU."""
    from fd_conformance.cases import load_spec
    from fd_reference_models.cases import all_cases

    gpu_env = {k: v for k, v in os.environ.items() if k != "FD_CONFORMANCE_GPU"}
    out = tmp_path / "out"
    if graphs == "real":
        cases = all_cases()
        (tmp_path / "mutants.txt").write_text("\n".join(c.name for c in cases if c.is_mutant) + "\n")
        args = ["--include-mutants", f"--cases-file={tmp_path / 'mutants.txt'}"]
    else:
        spec = f"{Path(__file__).resolve().parent / 'fixtures' / 'native_models' / 'reference_native_cases.py'}:CASES"
        cases = load_spec(spec)
        args = [f"--model={spec}"]
    proc = run_kit(out, "--device=cuda", *args, "-q", env=gpu_env)
    assert proc.returncode in (EXIT_OK, EXIT_VIOLATIONS), proc.stdout[-3000:] + proc.stderr[-3000:]
    by_name = {c.name: c for c in cases}
    good = [c for c in cases if not c.is_mutant]
    found = [r for r in defects(out) if by_name[r["case"]].is_mutant]
    assert found
    repros = {r["nodeid"]: repro_of(out, r) for r in found}
    twins = {
        r["nodeid"]: variant(repros[r["nodeid"]], tmp_path / "twins", case=repr(twin_of(by_name[r["case"]], good))) for r in found
    }
    driven = drive([*repros.values(), *twins.values()], tmp_path, env=gpu_env)
    failures = []
    for result in found:
        ran, on_twin = driven[repros[result["nodeid"]]], driven[twins[result["nodeid"]]]
        if (ran["code"], verdict(ran["stdout"])) != (EXIT_VIOLATIONS, ("FAIL", sorted(result["codes"]))) or on_twin[
            "code"
        ] != EXIT_OK:
            failures.append((result["nodeid"], ran["code"], ran["stdout"][-600:], on_twin["code"], on_twin["stdout"][-600:]))
    assert failures == []


# --------------------------------------------------------------------------- outside-style fixtures
#: Each fixture's variants -> the good twin (spec, case): the file's GOOD, or acme_lm's for the files
#: that only vary it.
OUTSIDE_BAD = {
    "acme_lm.py:BAD": "acme_lm.py:GOOD",
    "arena_lm.py:BAD": "arena_lm.py:GOOD",
    "banked_engine.py:BAD": "banked_engine.py:GOOD",
    "descriptors_lm.py:BAD": "descriptors_lm.py:GOOD",
    "sizes_lm.py:BAD": "sizes_lm.py:GOOD",
    "acme_raises.py:CASES": "acme_lm.py:GOOD",
    "acme_draft_clear_raises.py:CASES": "acme_lm.py:GOOD",
    "acme_promises.py:CASES": "acme_lm.py:GOOD",
}


@pytest.fixture(scope="module")
def outside_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from fd_conformance.cases import load_spec

    tmp = tmp_path_factory.mktemp("outside")
    out = tmp / "out"
    specs = [f"{OUTSIDE / spec}" for spec in OUTSIDE_BAD]
    proc = run_kit(out, *(f"--model={spec}" for spec in specs), "-q", "--", "--fd-isolate=off", env=OUTSIDE_ENV)
    with pytest.MonkeyPatch.context() as patch:  # the fixtures import acme_lm by name, as the run's PYTHONPATH let them
        patch.syspath_prepend(str(OUTSIDE))
        origin = {case.name: spec for spec in OUTSIDE_BAD for case in load_spec(f"{OUTSIDE / spec}")}
        twin_of_spec = {good: load_spec(f"{OUTSIDE / good}")[0].name for good in set(OUTSIDE_BAD.values())}
    found = defects(out)
    repros = {r["nodeid"]: repro_of(out, r) for r in found}
    twins = {}
    for r in found:
        good = OUTSIDE_BAD[origin[r["case"]]]
        twins[r["nodeid"]] = variant(
            repros[r["nodeid"]], tmp / "twins", specs=repr([f"{OUTSIDE / good}"]), case=repr(twin_of_spec[good])
        )
    # One on a cuda row of a host without a GPU: it cannot be judged here, and says so (exit 4).
    first = repros[found[0]["nodeid"]]
    cuda = variant(first, tmp / "cuda", device=repr("cuda"), nodeid=repr(found[0]["nodeid"].replace("-cpu", "-cuda")))
    driven = drive([*repros.values(), *twins.values(), cuda], tmp, env=ENV)  # the reproducers set sys.path themselves
    return {
        "proc": proc, "out": out, "defects": found, "repros": repros, "twins": twins, "driven": driven, "origin": origin,
        "cuda": driven[cuda],
    }  # fmt: skip


@pytest.mark.xdist_group("replay_outside")  # one module-scoped run per group, paid by one worker
def test_each_outside_variant_reproducer_fails_with_the_runs_codes_and_its_twin_passes(outside_run: dict[str, Any]) -> None:
    assert outside_run["proc"].returncode == EXIT_VIOLATIONS, outside_run["proc"].stderr[-3000:]
    assert {r["case"] for r in outside_run["defects"]} >= {
        name for name, spec in outside_run["origin"].items() if name != "banked-engine-drops-by-current-switch"
    }  # that one draws a warning only (FDC205)
    failures = []
    for result in outside_run["defects"]:
        ran = outside_run["driven"][outside_run["repros"][result["nodeid"]]]
        on_twin = outside_run["driven"][outside_run["twins"][result["nodeid"]]]
        word, codes = verdict(ran["stdout"])
        if (ran["code"], word, codes) != (EXIT_VIOLATIONS, "FAIL", sorted(result["codes"])) or on_twin["code"] != EXIT_OK:
            failures.append((result["nodeid"], ran["code"], ran["stdout"][-600:], on_twin["code"], on_twin["stdout"][-600:]))
    assert failures == []


@pytest.mark.xdist_group("replay_outside")  # one module-scoped run per group, paid by one worker
def test_a_reproducer_that_cannot_judge_here_says_so_and_exits_4(outside_run: dict[str, Any]) -> None:
    ran = outside_run["cuda"]
    assert ran["code"] == EXIT_NOTHING_CERTIFIED, ran["stdout"][-2000:]
    assert verdict(ran["stdout"])[0] == "SKIP" and "not judged here" in ran["stdout"]


# --------------------------------------------------------------------------- a hang, a crash
@pytest.fixture(scope="module")
def hang_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """acme_hang's two cases under the run's watchdog with a 3 s deadline (a setting of the run)."""
    out = tmp_path_factory.mktemp("hang") / "out"
    proc = run_kit(out, f"--model={OUTSIDE / 'acme_hang.py'}:CASES", "--", "--fd-timeout=3", env=OUTSIDE_ENV)
    assert proc.returncode == EXIT_VIOLATIONS, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _python(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}  # the file sets sys.path as the run had it
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.mark.xdist_group("replay_hang")  # one module-scoped run per group, paid by one worker
def test_a_hangs_reproducer_says_where_it_hung_and_exits_1(hang_run: Path, tmp_path: Path) -> None:
    (result,) = [r for r in defects(hang_run) if r["case"] == "acme-clear-waits-forever"]
    assert result["codes"] == ["FDC501"]
    path = repro_of(hang_run, result)
    assert "        timeout=3.0,\n" in path.read_text()  # the run's watchdog deadline, recorded by the run
    proc = _python(path, tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = [line for line in proc.stderr.splitlines() if line.startswith("fd-conformance replay: ")]
    assert steps[-1].startswith("fd-conformance replay: running test_weight_cycle"), proc.stderr[-3000:]
    assert "Timeout (0:00:03)!" in proc.stderr, proc.stderr[-3000:]
    stack = proc.stderr.split("Timeout (0:00:03)!", 1)[1]
    assert re.search(r"acme_hang\.py\", line \d+ in clear_graph_opt_backend", stack), stack[-3000:]
    # the good twin: the same check on Acme's good model ends, and passes
    twin = variant(path, tmp_path / "twin", specs=repr([f"{OUTSIDE / 'acme_lm.py'}:GOOD"]), case=repr("acme-lm-mtp"))
    assert _python(twin, tmp_path).returncode == EXIT_OK


@pytest.mark.xdist_group("replay_hang")  # one module-scoped run per group, paid by one worker
def test_a_crashs_reproducer_dies_as_the_worker_did_and_prints_where(hang_run: Path, tmp_path: Path) -> None:
    (result,) = [r for r in defects(hang_run) if r["case"] == "acme-clear-kills-process"]
    assert result["codes"] == ["FDC502"]
    proc = _python(repro_of(hang_run, result), tmp_path)
    assert proc.returncode not in (EXIT_OK, EXIT_NOTHING_CERTIFIED), proc.stdout[-2000:]
    assert "Fatal Python error: Aborted" in proc.stderr and "in clear_graph_opt_backend" in proc.stderr, proc.stderr[-3000:]


# --------------------------------------------------------------------------- --last-failed
def test_last_failed_reruns_only_the_rows_that_did_not_pass(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text("from acme_lm import BAD, GOOD\n\nCASES = GOOD + BAD[:1]\n")
    out = tmp_path / "out"
    first = run_kit(out, "--model=two.py:CASES", env=OUTSIDE_ENV)
    assert first.returncode == EXIT_VIOLATIONS, first.stderr[-3000:]
    verdicts = {c["name"]: c["verdict"] for c in json.loads((out / "conformance.json").read_text())["cases"]}
    assert verdicts == {"acme-lm-mtp": "certified", "acme-lm-shim-only": "violations"}
    first_repros = sorted(p.name for p in (out / "repro").iterdir())
    assert first_repros and all(name.startswith("acme-lm-shim-only-cpu-") for name in first_repros)

    again = run_kit(out, "--model=two.py:CASES", "--last-failed", env=OUTSIDE_ENV)
    assert again.returncode == EXIT_VIOLATIONS, again.stderr[-3000:]
    assert "--last-failed: re-running the 1 row(s) that did not pass: acme-lm-shim-only [cpu]" in again.stdout
    rows = [(c["name"], c["device"]) for c in json.loads((out / "conformance.json").read_text())["cases"]]
    assert rows == [("acme-lm-shim-only", "cpu")]
    # the earlier run's reports and reproducers went to previous/ together
    assert sorted(p.name for p in (out / "previous" / "repro").iterdir()) == first_repros
    assert len(json.loads((out / "previous" / "conformance.json").read_text())["cases"]) == 2


def test_last_failed_without_an_earlier_report_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_kit(tmp_path / "empty", "--last-failed")
    assert proc.returncode == EXIT_USAGE
    (line,) = proc.stderr.strip().splitlines()
    assert "--last-failed" in line and "holds no conformance.json of an earlier run" in line and "fix:" in line
    assert not (tmp_path / "empty").exists()  # a refused run leaves nothing behind
