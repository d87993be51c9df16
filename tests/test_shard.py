"""Sharding a certification (issue 38): the partition, ``run --shard``, ``merge`` and its refusals.

The partition is checked exhaustively in milliseconds; the proof that a merge says what the
unsharded run says runs a small selection of cases (the outside-style Acme model, three bundled
config mutants) unsharded and in 1, 2, 3 and 7 shards; bench/shard_merge.py does the same over every bundled
case, mutants and outside-style fixtures included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.cases import Shard, parse_shard, partition, read_durations
from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_SHARDS, EXIT_USAGE, UsageError
from fd_conformance.report import verdicts_of

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from same_report import normalised  # noqa: E402

NAMES = [f"case-{i:02d}" for i in range(11)]
# The cheapest cases that still give every kind of row and outcome a merge must carry: a model
# certified by every check (passed), mutants caught with findings (xfailed) whose other checks are
# skipped. A case's checks stay in one shard, so a mutant of a lifecycle check (mutant-leaky-clear,
# 7.5 s of CPU a run against 4.1 s for a config mutant, in 5 of the 14 runs) shows nothing more.
# The certified model is the outside-style Acme one (plain torch, another author's style), given
# by --model beside the bundled mutants: a bundled good model costs a transformers import (3.8 s
# of CPU) in each of the 5 runs that hold it. Listed by a module that imports torch only in its
# factory (acme_lazy.py), so the 9 runs whose shard lacks it import no torch (1.4 s of CPU each).
ACME_GOOD = f"{ROOT / 'tests' / 'fixtures' / 'outside_models' / 'acme_lazy.py'}:GOOD"
PROOF_CASES = (
    "acme-lm-mtp",
    "cfg-mutant-keeping-user-order",
    "cfg-mutant-forcing-prefill-graphs",
    "cfg-mutant-ignoring-tp-divisibility",
)


# --- the partition ---------------------------------------------------------------------------------
@pytest.mark.parametrize("count", range(1, 15))
@pytest.mark.parametrize("durations", [None, {n: float(i % 4 + 1) for i, n in enumerate(NAMES)}], ids=["count", "durations"])
def test_every_case_lands_in_exactly_one_shard(count: int, durations: dict[str, float] | None) -> None:
    shards = partition(NAMES, count, durations)
    assert len(shards) == count
    flat = [name for shard in shards for name in shard]
    assert sorted(flat) == sorted(NAMES)  # each once, none lost
    assert partition(reversed(NAMES), count, durations) == shards  # the load order does not matter
    if durations is None:
        assert max(map(len, shards)) - min(map(len, shards)) <= 1  # by count: as even as it gets


def test_durations_balance_the_shards() -> None:
    durations = {"long": 10.0, "a": 3.0, "b": 3.0, "c": 3.0, "d": 1.0}
    shards = partition(durations, 2, durations)
    assert shards == [["long"], ["a", "b", "c", "d"]]  # 10 against 10, not 3 cases against 2
    assert partition([*durations, "new"], 2, durations)  # a case the file does not record weighs the mean


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1.5/3", "1/0", "-1/2", ""])
def test_a_bad_shard_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="is not K/N"):
        parse_shard(text)
    assert parse_shard(" 2/3 ") == Shard(2, 3)


def test_bad_shard_on_the_command_line_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--shard", "4/3", "--out", str(tmp_path / "out")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shard '4/3' is not K/N" in err, err
    assert not (tmp_path / "out").exists()


def test_durations_come_from_what_a_run_writes(tmp_path: Path) -> None:
    jsonl = tmp_path / "results.jsonl"
    jsonl.write_text(
        '{"schema": 1, "kind": "plan", "tests": []}\n'
        '{"schema": 1, "nodeid": "t[a-cpu]", "case": "a", "duration": 1.5}\n'
        '{"schema": 1, "nodeid": "u[a-cpu]", "case": "a", "duration": 0.5}\n'
    )
    assert read_durations(jsonl) == {"a": 2.0}
    document = tmp_path / "conformance.json"
    document.write_text(json.dumps({"schema_version": 1, "results": [{"case": "b", "duration": 3}]}))
    assert read_durations(document) == {"b": 3.0}
    (tmp_path / "d.json").write_text('{"c": 4}')
    assert read_durations(tmp_path / "d.json") == {"c": 4.0}
    (tmp_path / "empty.json").write_text("{}\n[")
    with pytest.raises(UsageError, match="records no case durations"):
        read_durations(tmp_path / "empty.json")


# --- merge refusals (documents made by hand: milliseconds) ----------------------------------------
def shard_dir(root: Path, index: int, count: int, cases: list[str], all_cases: list[str], version: str = "0.1.0") -> Path:
    out = root / f"s{index}-{count}-{version}-{len(all_cases)}"
    out.mkdir(parents=True, exist_ok=True)
    results = [
        {
            "nodeid": f"test_protocol.py::test_protocol[{c}-cpu]",
            "case": c,
            "device": "cpu",
            "check": "protocol",
            "outcome": "passed",
        }
        for c in cases
    ]
    shard = {"index": index, "count": count, "cases": cases, "all_cases": all_cases, "balanced_by": "count", "devices": ["cpu"]}
    shard |= {"environment": {"python": "3.11.7", "frameworks": {"torch": "2.13.0"}}, "settings": {"cycles": 5}, "run_id": "r1"}
    document = {
        "environment": {"kit_version": version, "python": "3.11.7", "platform": "Linux"},
        "expect_mutants": False,
        "run": {"status": "finished", "reason": "", "not_run": [], "deselected": [], "owed": []},
        "cases": [],
        "results": results,
        "shard": shard,
    }
    (out / "conformance.json").write_text(json.dumps(document))
    return out


def test_merge_refuses_shards_that_do_not_make_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = ["a", "b", "c"]
    one, two = shard_dir(tmp_path, 1, 2, ["a", "c"], cases), shard_dir(tmp_path, 2, 2, ["b"], cases)
    refusals = {
        "is missing (given: 1/2)": [one],
        "shard 1/2 is given twice": [one, one, two],
        "different kit versions": [one, shard_dir(tmp_path, 2, 2, ["b"], cases, version="0.2.0")],
        "different shard counts": [one, shard_dir(tmp_path, 2, 3, ["b"], cases)],
        "different case sets": [one, shard_dir(tmp_path, 2, 2, ["b"], [*cases, "d"])],
        "case 'c' is in shard 1/2 and shard 2/2": [one, shard_dir(tmp_path / "x", 2, 2, ["b", "c"], cases)],
    }
    for needle, dirs in refusals.items():
        out = tmp_path / "merged"
        assert main(["merge", *map(str, dirs), "--out", str(out)]) == EXIT_SHARDS, needle
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
        assert not out.exists()  # a refused merge leaves nothing
    assert main(["merge", str(one), str(two), "--out", str(tmp_path / "merged"), "-q"]) == EXIT_OK
    merged = json.loads((tmp_path / "merged" / "conformance.json").read_text())
    assert [c["name"] for c in merged["cases"]] == cases and "shard" not in merged


def test_merge_never_overwrites_a_file_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard_dir(tmp_path, 1, 1, ["a"], ["a"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "junit.xml").write_text("<testsuites><testsuite name='theirs'/></testsuites>")
    assert main(["merge", str(one), "--out", str(out)]) == EXIT_USAGE
    assert "which fd-conformance did not write" in capsys.readouterr().err
    assert (out / "junit.xml").read_text().startswith("<testsuites><testsuite name='theirs'")
    assert main(["merge", str(one), "--out", str(one)]) == EXIT_USAGE  # a shard's own directory


# --- the proof: a merge says what the unsharded run says -------------------------------------------
def comparable(document: dict[str, Any]) -> dict[str, Any]:
    doc = normalised(document)
    findings = {(c["name"], c["device"]): (c["observed_findings"], c["expected_findings"]) for c in doc["cases"]}
    return {**verdicts_of(doc), "findings": findings, "summary": doc["summary"], "exit": doc["exit_code"]}


def fdc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fd_conformance.cli", *args], capture_output=True, text=True, timeout=600)


def test_sharded_and_merged_equals_unsharded(tmp_path: Path) -> None:
    selection = tmp_path / "cases.txt"
    selection.write_text("\n".join(PROOF_CASES) + "\n")
    common = [
        "-q",
        "--model",
        ACME_GOOD,
        "--include-mutants",
        "--device",
        "cpu",
        "--cycles",
        "3",
        "--cases-file",
        str(selection),
        "-n",
        "0",
    ]
    base = fdc("run", *common, "--out", str(tmp_path / "unsharded"))
    assert base.returncode == EXIT_OK, base.stdout + base.stderr
    unsharded = json.loads((tmp_path / "unsharded" / "conformance.json").read_text())
    expected = comparable(unsharded)
    assert len(expected["rows"]) == len(PROOF_CASES)
    assert sorted(c["verdict"] for c in unsharded["cases"]) == ["caught", "caught", "caught", "certified"]
    assert {r["outcome"] for r in unsharded["results"]} == {"passed", "skipped", "xfailed"}
    durations = tmp_path / "unsharded" / "results.jsonl"
    for count in (1, 2, 3, 7):
        dirs = []
        for index in range(1, count + 1):
            out = tmp_path / f"{count}-{index}"
            # 2 of 3 shards balanced by the unsharded run's durations (one file for all, as the docs say)
            balance = ["--durations", str(durations)] if count == 3 else []
            proc = fdc("run", *common, "--shard", f"{index}/{count}", *balance, "--out", str(out))
            assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
            if count == 7 and index > len(PROOF_CASES):
                assert "empty shard" in proc.stderr and "PASS (empty shard" in proc.stdout
            dirs.append(str(out))
        merged = fdc("merge", "-q", *dirs, "--out", str(tmp_path / f"{count}-merged"))
        assert merged.returncode == EXIT_OK, merged.stdout + merged.stderr
        got = comparable(json.loads((tmp_path / f"{count}-merged" / "conformance.json").read_text()))
        assert got == expected, count
        junit = (tmp_path / f"{count}-merged" / "junit.xml").read_text()
        assert junit.count("<testcase ") == len(expected["tests"]), count
    missing = fdc("merge", *dirs[:-1], "--out", str(tmp_path / "incomplete"))
    assert missing.returncode == EXIT_SHARDS and "shard 7/7 is missing" in missing.stderr
