"""`fd-conformance fastdeploy` on FastDeploy's real history: the three tables per labelled commit.

    python bench/fastdeploy_bridge.py PATH_TO_FASTDEPLOY_GIT [--commits REV ...] [--max-examples N] [--full]
    python bench/fastdeploy_bridge.py --quick   # the kit's FastDeploy-shaped fixture as a 3-commit history

PATH is a FastDeploy checkout or a bare git directory; nothing is fetched. Each commit's
``fastdeploy/`` package is exported (``git archive COMMIT fastdeploy | tar -x``) into a temporary
directory and the bridge runs on it in a fresh interpreter (``python -m fd_conformance.cli
fastdeploy DIR --json``): one FastDeploy per process. Prints, per commit, what the labels below
expect and what each table found, the exit code and the run time; ``--full`` also prints the
bridge's own tables. A missing PATH skips with a message (exit 0); a commit the repository lacks
is skipped and named. Needs the ``[fastdeploy]`` extra (the bridge's one-line error says what is
missing otherwise); old commits may import packages the extra does not list.

The labels are ours, from reading each commit's source (bench/lint_fastdeploy.py labels the same
history for the linter): seed 000 (draft graphs cleared after the weight release, the MTP hang),
the nested "fix" (draft clear under the main flag: leak with main off and draft on), the older
main-graph order bug, and seed 004 (no CPU-cache rule after the prefill adjustment, FDC401).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quick import add_quick, fixture_repository, fixture_revisions
from lint_fastdeploy import export, git_command, resolve

# (revision, what it is, what the bridge must report there: table -> codes)
COMMITS = (
    ("e53f5184a", "develop tip: seed 000 hang present, no CPU-cache guard", {"runner": "FDC201 FDC202", "config": "FDC401"}),
    ("2fa173e32", "CUDAGraph RL support: MAIN graphs cleared after the weight release", {"runner": "FDC201 FDC202"}),
    ("d3e4ae3d4", "main order fixed (clear before release)", {"runner": "-"}),
    ("6693bcd0e^", "before the draft clear existed: draft graphs never destroyed", {"runner": "FDC201 FDC202 FDC203"}),
    ("6693bcd0e", "seed 000: draft clear added AFTER the weight release (the hang)", {"runner": "FDC201 FDC202"}),
    (
        "68dbe71d7",
        "hang fixed, draft clear nested under the main flag (leak)",
        {"runner": "FDC201 FDC202 FDC203 (main off, draft on)"},
    ),
    ("7707be838^", "seed 004: before the CPU-cache guard", {"config": "FDC401"}),
    ("7707be838", "seed 004: the CPU-cache guard", {"config": "no FDC401"}),
)


# --quick: the fixture history (bench/_quick.py), with what its README says each state reproduces.
QUICK_COMMITS = tuple(
    (rev, note, expected)
    for (rev, note), expected in zip(
        fixture_revisions(),
        ({"runner": "FDC201 FDC202"}, {"runner": "FDC203 (main off, draft on)"}, {"runner": "-", "config": "no FDC401"}),
        strict=True,
    )
)


def run_bridge(tree: Path, max_examples: int, full: bool) -> tuple[int, dict | None, float, str]:
    out = tree / "bridge.json"
    cmd = [
        sys.executable,
        "-m",
        "fd_conformance.cli",
        "fastdeploy",
        str(tree),
        "--json",
        str(out),
        "--max-examples",
        str(max_examples),
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    data = json.loads(out.read_text()) if out.is_file() else None
    text = done.stdout if full else ""
    if data is None:
        text += (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return done.returncode, data, seconds, text


def summarise(data: dict) -> dict[str, str]:
    """One line per table: the codes found and where."""
    lines = {}
    config = data.get("config")
    if config:
        bad = [f"{r['code']}({r['severity'][0]})" for r in config["rows"] if r["minimal"]]
        lines["config"] = (
            config["error"] or (" ".join(bad) or "clean") + f"  [{config['built']} built, {config['rejected']} refused]"
        )
    models = data.get("models")
    if models:
        errors = sorted({c for r in models["rows"] for c in r["codes"] if c != "FDC002"})
        failing = [r["name"] for r in models["rows"] if any(c != "FDC002" for c in r["codes"])]
        lines["models"] = models["error"] or (
            f"{len(models['rows'])} wrappers; {' '.join(errors) or 'clean'} on "
            f"{len(failing)}: {', '.join(failing)}; import failures: "
            f"{len(models['import_failures'])}"
        )
    runner = data.get("runner")
    if runner:
        hits = []
        for r in runner["rows"]:
            if r["codes"] or r["error"]:
                combo = (
                    f"main={'on' if r['use_cudagraph'] else 'off'}/draft={'on' if r['draft_model_use_cudagraph'] else 'off'}"
                    f"/{r['spec_method'] or '-'} {r['method'].split('_')[0]}"
                )
                hits.append(f"{combo}: {r['error'] or ' '.join(sorted(set(r['codes'])))}")
        skipped = sum(1 for r in runner["rows"] if r.get("skipped"))
        lines["runner"] = runner["error"] or ("; ".join(hits) or "clean") + (f"  [{skipped} n/a rows]" if skipped else "")
    wrappers = data.get("wrappers")
    if wrappers:  # the real wrappers' clear: what failed, and how many could not be built on CPU
        failed = [f"{r['name']}({' '.join(sorted(set(r['codes'])))})" for r in wrappers["rows"] if r["verdict"] == "FAIL"]
        unbuilt = sum(1 for r in wrappers["rows"] if r["verdict"] in ("not built", "ERROR"))
        lines["wrappers"] = (
            wrappers["error"]
            or f"{len(wrappers['rows'])} wrappers; failing: {', '.join(failed) or 'none'}; {unbuilt} not built on CPU"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, nargs="?", help="FastDeploy checkout or bare git directory")
    parser.add_argument("--commits", nargs="*", default=None, help="revisions to run (default: the labelled set)")
    parser.add_argument("--max-examples", type=int, default=100, help="Hypothesis examples per config rule")
    parser.add_argument("--full", action="store_true", help="also print the bridge's own tables")
    add_quick(parser)
    args = parser.parse_args(argv)
    if args.quick and args.path is None:
        args.max_examples = min(args.max_examples, 5)
        with tempfile.TemporaryDirectory(prefix="fd-bridge-bench-quick-") as tmp:
            return bench(fixture_repository(Path(tmp) / "repo"), args, QUICK_COMMITS)
    if args.path is None:
        parser.error("pass PATH_TO_FASTDEPLOY_GIT (or --quick)")
    return bench(args.path, args, COMMITS)


def bench(path: Path, args: argparse.Namespace, commits: tuple[tuple[str, str, dict[str, str]], ...]) -> int:
    """Run the bridge on each commit of the repository at ``path`` and print what it found."""
    args.path = path
    if not args.path.exists():
        print(f"SKIP: {args.path} does not exist (pass a FastDeploy clone or bare git dir; nothing is fetched)")
        return 0
    git = git_command(args.path)
    if git is None:
        print(f"SKIP: {args.path} is not a git repository")
        return 0
    chosen = [(c, "", {}) for c in args.commits] if args.commits else list(commits)
    total = time.perf_counter()
    for rev, note, expected in chosen:
        commit = resolve(git, rev)
        if commit is None:
            print(f"\n== {rev}: not in this repository (shallow or partial clone?), skipped")
            continue
        with tempfile.TemporaryDirectory(prefix="fd-bridge-bench-") as tmp:
            tree = Path(tmp)
            started = time.perf_counter()
            export(git, commit, tree)
            exported = time.perf_counter() - started
            code, data, seconds, text = run_bridge(tree, args.max_examples, args.full)
        print(f"\n== {rev} ({commit[:9]}) {note}")
        if expected:
            print("   expected: " + "; ".join(f"{k} {v}" for k, v in expected.items()))
        timing = data.get("seconds", {}) if data else {}
        print(
            f"   exit {code}; export {exported:.1f} s, bridge {seconds:.1f} s ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in timing.items())
            + ")"
        )
        for table, line in (summarise(data) if data else {}).items():
            print(f"   {table:7} {line}")
        if text:
            print(text)
    print(f"\ntotal {time.perf_counter() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
