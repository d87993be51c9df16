"""Linter precision and recall on FastDeploy's real history, against our own labels.

    python bench/lint_fastdeploy.py PATH_TO_FASTDEPLOY_GIT [--json]
    python bench/lint_fastdeploy.py --quick     # the kit's FastDeploy-shaped fixture as a 3-commit history

PATH is a FastDeploy checkout (a work tree with ``.git``) or a bare git directory; nothing is
fetched. For each labelled commit the ``fastdeploy/`` package is exported (``git archive``) into a
temporary directory and linted with the default settings, exactly as ``fd-conformance lint
fastdeploy`` would; every error-level finding is matched to the labels by (code, file, object):
the class for FDC001, the enclosing ``Class.method`` for the others (taken from the source, so
linters that do not name the object are matched the same way). Prints TP/FP/FN per commit and
overall precision/recall. A missing PATH skips with a message (exit 0); a labelled commit the
repository lacks (a shallow or partial clone) is skipped and named.

The labels are ours, written from reading the source at each commit (never copied from it):
``expected`` lists EVERY error the linter should report there, so anything else is a false
positive. Commits where a defect was just fixed are in the set as well: they measure precision.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _quick beside us, also when loaded by file path (tests)
from _quick import add_quick, fixture_repository, fixture_revisions

from fd_conformance.lint import LintConfig, lint_paths

MODELS = "fastdeploy/model_executor/models"
RUNNER = "fastdeploy/worker/gpu_model_runner.py"
ROLLOUT = "fastdeploy/rl/rollout_model.py"
CLEAR_PARAMETERS = "GPUModelRunner.clear_parameters"

# Registered wrappers (ModelRegistry.register_model_class, ModelForCasualLM or a reward base) whose
# inner model carries @support_graph_optimization, so they capture graphs, and that have no
# clear method of either spelling, own or inherited: the runner's clear_parameters() calls
# self.model.clear_graph_opt_backend() on them (AttributeError under RL + CUDA graphs). They stand
# unfixed from their introduction to the newest labelled commit. Checked one by one:
#   Ernie4_5_MTPForCausalLM   the MTP draft wrapper; its clear exists only on the dev_clear_parameters
#                             branch (21c15f3b4), never on develop or the release branches;
#   GptOssForCausalLM, PaddleOCRVLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration;
#   Qwen2ForProcessRewardModel, Ernie4_5_VLMoeForProcessRewardModel   reward models (pooling
#                             wrappers over a graph-optimised Qwen2Model / Ernie4_5_VLModel);
#   Qwen2_5_VLForConditionalGenerationRL   the RL subclass inherits nothing to clear with.
STANDING = (
    ("FDC001", f"{MODELS}/ernie4_5_mtp.py", "Ernie4_5_MTPForCausalLM"),
    ("FDC001", f"{MODELS}/gpt_oss.py", "GptOssForCausalLM"),
    ("FDC001", f"{MODELS}/paddleocr_vl/paddleocr_vl.py", "PaddleOCRVLForConditionalGeneration"),
    ("FDC001", f"{MODELS}/qwen2_5_vl/qwen2_5_vl.py", "Qwen2_5_VLForConditionalGeneration"),
    ("FDC001", f"{MODELS}/qwen2_rm.py", "Qwen2ForProcessRewardModel"),
    ("FDC001", f"{MODELS}/ernie_vl_rm.py", "Ernie4_5_VLMoeForProcessRewardModel"),
    ("FDC001", ROLLOUT, "Qwen2_5_VLForConditionalGenerationRL"),
)
# Qwen3-VL (dense and MoE) and their RL subclasses before dd61e7e42 gave the dense wrapper a clear.
QWEN3_VL = (
    ("FDC001", f"{MODELS}/qwen3_vl/qwen3_vl.py", "Qwen3VLForConditionalGeneration"),
    ("FDC001", f"{MODELS}/qwen3_vl/qwen3_vl_moe.py", "Qwen3VLMoeForConditionalGeneration"),
    ("FDC001", ROLLOUT, "Qwen3VLForConditionalGenerationRL"),
    ("FDC001", ROLLOUT, "Qwen3VLMoeForConditionalGenerationRL"),
)
# The GLM-4 MTP draft wrapper and its RL subclass before a498720a7 added the clear.
GLM4_MTP = (
    ("FDC001", f"{MODELS}/glm4_mtp.py", "Glm4MTPForCausalLM"),
    ("FDC001", ROLLOUT, "Glm4MTPForCausalLMRL"),
)
RELEASE_THEN_CLEAR = (("FDC101", RUNNER, CLEAR_PARAMETERS),)
# FDC103 (issue 50), each read at its commit:
#   DRAFT_NEVER_CLEARED  clear_parameters releases through a manager (built with the draft under MTP
#     on 2.5+, else with the main model only: then the group shutdown) and never clears the draft's
#     graphs: the seed hang before 6693bcd0e added a (late) draft clear; on the 2.5 line it stands.
#   SLEEP_DRAFT  sleep(weight), the v1 RL door of a7f52c300 / 35034f91f: clears the main graphs
#     under use_cudagraph, never the draft's, then clear_model_weight() over [model, proposer.model]
#     and clear_communication_group(): the seed hang at the new door, standing on every branch.
#   METAX  MetaxModelRunner.clear_parameters (Metax GPUs capture graphs; FastDeploy's config keeps
#     use_cudagraph on for maca): no draft clear before its manager shuts the groups down.
#   ILUVATAR  IluvatarModelRunner.clear_parameters is super().clear_parameters(): it inherits the
#     GPU runner's door, so a GPU runner whose draft clear is late or missing makes it one too.
DRAFT_NEVER_CLEARED = (("FDC103", RUNNER, CLEAR_PARAMETERS),)
SLEEP_DRAFT = ("FDC103", RUNNER, "GPUModelRunner.sleep")
METAX = ("FDC103", "fastdeploy/worker/metax_model_runner.py", "MetaxModelRunner.clear_parameters")
ILUVATAR = ("FDC103", "fastdeploy/worker/iluvatar_model_runner.py", "IluvatarModelRunner.clear_parameters")
DOORS = (SLEEP_DRAFT, METAX, ILUVATAR)
DRAFT_UNDER_MAIN_FLAG = (("FDC102", RUNNER, CLEAR_PARAMETERS),)


@dataclass(frozen=True)
class Label:
    commit: str  # any revision git understands (abbreviated hash, hash^)
    note: str
    expected: tuple[tuple[str, str, str], ...]


LABELS = (
    Label(
        "2fa173e32",
        "CUDAGraph RL support: main graphs cleared AFTER the weight manager released "
        "the weights (FDC101); the new MTP wrapper has no clear",
        (*RELEASE_THEN_CLEAR, STANDING[0]),
    ),
    Label("d3e4ae3d4", "order fixed (clear before release): no FDC101 any more", (STANDING[0], STANDING[3], STANDING[6])),
    Label(
        "21c15f3b4",
        "dev branch: MTPProposer.clear_mtp_graphs clears the draft inside "
        "`if fd_config.use_cudagraph:` with the draft flag nested (FDC102)",
        (("FDC102", "fastdeploy/spec_decode/mtp.py", "MTPProposer.clear_mtp_graphs"), *STANDING[1:], *DRAFT_NEVER_CLEARED, METAX),
    ),
    Label(
        "6693bcd0e",
        "draft clear moved AFTER the weight release: the MTP hang (FDC101)",
        (*RELEASE_THEN_CLEAR, *STANDING, *QWEN3_VL, *GLM4_MTP, *DOORS),
    ),
    Label(
        "dd61e7e42^",
        "the commit before Qwen3-VL got its clear method",
        (*RELEASE_THEN_CLEAR, *STANDING, *QWEN3_VL, *GLM4_MTP, *DOORS),
    ),
    Label(
        "dd61e7e42",
        "Qwen3-VL fixed (its MoE variant and RL subclasses inherit the clear)",
        (*RELEASE_THEN_CLEAR, *STANDING, *GLM4_MTP, *DOORS),
    ),
    Label(
        "a498720a7^",
        "the commit before the GLM-4 MTP wrapper got its clear method",
        (*RELEASE_THEN_CLEAR, *STANDING, *GLM4_MTP, *DOORS),
    ),
    Label(
        "a498720a7", "GLM-4 MTP fixed; its building block Glm4MTPLayer is no wrapper", (*RELEASE_THEN_CLEAR, *STANDING, *DOORS)
    ),
    Label("26674bbbb", "release/2.6 cherry-pick: the MTP hang is there too (FDC101)", (*RELEASE_THEN_CLEAR, *STANDING, *DOORS)),
    Label("e53f5184a", "develop before the hang fix (FDC101)", (*RELEASE_THEN_CLEAR, *STANDING, *DOORS)),
    Label(
        "68dbe71d7",
        "the hang fix: draft clear nested in `if self.use_cudagraph:` with the draft "
        "flag inside, so main graphs off + draft graphs on leaks (FDC102)",
        (*DRAFT_UNDER_MAIN_FLAG, *STANDING, *DOORS),
    ),
    Label(
        "296140019", "release/2.6 cherry-pick of the same fix: same leak (FDC102)", (*DRAFT_UNDER_MAIN_FLAG, *STANDING, *DOORS)
    ),
    Label(
        "564c78d78",
        "r3_mm_dev after the MTP refactor: MTPProposerCUDA / MTPProposerXPU are proposers, "
        "not wrappers; the nested draft clear is still there (FDC102)",
        (*DRAFT_UNDER_MAIN_FLAG, *STANDING, *DOORS),
    ),
    # Issue 50: each new door's introducing commit and its parent, and the newest 2.5 / 2.6 branch heads.
    Label(
        "b7c5daa31^",
        "before update_weights (#6052): clear_parameters never clears the draft",
        (*DRAFT_NEVER_CLEARED, METAX, *STANDING, *QWEN3_VL, GLM4_MTP[0]),
    ),
    Label(
        "b7c5daa31",
        "update_weights() arrives: new weights set_value'd into the live parameters, nothing released: no finding",
        (*DRAFT_NEVER_CLEARED, METAX, *STANDING, *QWEN3_VL, GLM4_MTP[0]),
    ),
    Label("a7f52c300^", "before sleep/wakeup (#6761)", (*DRAFT_NEVER_CLEARED, METAX, ILUVATAR, *STANDING, *QWEN3_VL, *GLM4_MTP)),
    Label(
        "a7f52c300",
        "sleep(weight) arrives without the draft's clear (FDC103)",
        (*DRAFT_NEVER_CLEARED, *DOORS, *STANDING, *QWEN3_VL, *GLM4_MTP),
    ),
    Label(
        "35034f91f^",
        "release line before the cherry-pick of #6761",
        (*DRAFT_NEVER_CLEARED, METAX, *STANDING, *QWEN3_VL, *GLM4_MTP),
    ),
    Label(
        "35034f91f",
        "the cherry-pick of #6761: the same sleep door",
        (*DRAFT_NEVER_CLEARED, SLEEP_DRAFT, METAX, *STANDING, *QWEN3_VL, *GLM4_MTP),
    ),
    Label(
        "1e3983b41",
        "vibe_r3_2.5 (newest 2.5 branch): no draft clear in clear_parameters, none in sleep",
        (*DRAFT_NEVER_CLEARED, SLEEP_DRAFT, METAX, *STANDING, *GLM4_MTP),
    ),
    Label(
        "41677b9a6",
        "r3_eos_2.6 (newest 2.6 branch): nested draft clear (FDC102), sleep without it",
        (*DRAFT_UNDER_MAIN_FLAG, *DOORS, *STANDING),
    ),
)


# --quick: the fixture history (bench/_quick.py), labelled from the fixture's README the same way.
QUICK_LABELS = tuple(
    Label(rev, note, expected)
    for (rev, note), expected in zip(fixture_revisions(), (RELEASE_THEN_CLEAR, DRAFT_UNDER_MAIN_FLAG, ()), strict=True)
)


# --------------------------------------------------------------------------- git
def git_command(path: Path) -> list[str] | None:
    """``git`` argv prefix for a work tree or a bare git directory; None when it is neither."""
    for prefix in (["git", "-C", str(path)], ["git", f"--git-dir={path}"]):
        probe = subprocess.run([*prefix, "rev-parse", "--git-dir"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return prefix
    return None


def resolve(git: list[str], rev: str) -> str | None:
    out = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or None


def export(git: list[str], commit: str, dest: Path) -> None:
    """``git archive COMMIT fastdeploy`` unpacked into dest (no work tree is touched)."""
    archive = dest / "tree.tar"
    with archive.open("wb") as fh:
        subprocess.run([*git, "archive", "--format=tar", commit, "fastdeploy"], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # 3.11.4+: refuse links and paths leaving dest
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - older interpreters; the archive comes from the user's own repository
            tar.extractall(dest)
    archive.unlink()


# --------------------------------------------------------------------------- matching
def enclosing(source: str, line: int, code: str) -> str:
    """The object a finding is about: for FDC001 the class defined on ``line``, else the innermost
    function around it, qualified by its class (``GPUModelRunner.clear_parameters``)."""
    best = ""

    def visit(body: list[ast.stmt], prefix: str) -> None:
        nonlocal best
        for node in body:
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not node.lineno <= line <= (node.end_lineno or node.lineno):
                continue
            name = f"{prefix}{node.name}"
            if isinstance(node, ast.ClassDef):
                if code == "FDC001" and node.lineno == line:
                    best = name
                    return
                visit(node.body, f"{name}.")
            else:
                best = name
                visit(node.body, f"{name}.")

    try:
        visit(ast.parse(source).body, "")
    except SyntaxError:
        return ""
    return best


def lint_commit(git: list[str], commit: str) -> set[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory(prefix="fd-lint-bench-") as tmp:
        root = Path(tmp)
        export(git, commit, root)
        result = lint_paths([root / "fastdeploy"], LintConfig(), root=root, use_context=False)
        found: set[tuple[str, str, str]] = set()
        sources: dict[str, str] = {}
        for finding in result.findings:
            if not finding.is_error:
                continue
            path = finding.location.path or ""
            if path not in sources:
                try:
                    sources[path] = (root / path).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    sources[path] = ""
            obj = enclosing(sources[path], finding.location.line or 0, finding.code) or (finding.location.obj or "")
            found.add((finding.code, path, obj))
        return found


# --------------------------------------------------------------------------- report
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, nargs="?", help="FastDeploy checkout or bare git directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    add_quick(parser)
    args = parser.parse_args(argv)
    if args.quick and args.path is None:
        with tempfile.TemporaryDirectory(prefix="fd-lint-bench-quick-") as tmp:
            return report(fixture_repository(Path(tmp) / "repo"), QUICK_LABELS, args.json)
    if args.path is None:
        parser.error("pass PATH_TO_FASTDEPLOY_GIT (or --quick)")
    return report(args.path, LABELS, args.json)


def report(path: Path, labels: tuple[Label, ...], as_json: bool) -> int:
    """Lint every labelled commit of the repository at ``path`` and print the table (or JSON)."""
    args = argparse.Namespace(path=path, json=as_json)
    if not args.path.exists():
        print(f"skip: {args.path} does not exist (pass a FastDeploy checkout or git directory)")
        return 0
    git = git_command(args.path)
    if git is None:
        print(f"error: {args.path} is not a git checkout or git directory", file=sys.stderr)
        return 2
    rows = []
    for label in labels:
        commit = resolve(git, label.commit)
        if commit is None:
            rows.append({"commit": label.commit, "skipped": "not in this repository"})
            continue
        found = lint_commit(git, commit)
        expected = set(label.expected)
        rows.append(
            {
                "commit": label.commit,
                "note": label.note,
                "tp": sorted(found & expected),
                "fp": sorted(found - expected),
                "fn": sorted(expected - found),
            }
        )
    counted = [r for r in rows if "skipped" not in r]
    tp = sum(len(r["tp"]) for r in counted)
    fp = sum(len(r["fp"]) for r in counted)
    fn = sum(len(r["fn"]) for r in counted)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    # The same standing defect is counted at every commit above; counted once per (code, file,
    # object) the figures say how many distinct defects and false alarms there are. A defect
    # counts as caught only when it is caught at every labelled commit that holds it.
    missed = {tuple(k) for r in counted for k in r["fn"]}
    labelled = {tuple(k) for r in counted for k in (*r["tp"], *r["fn"])}
    distinct = {"tp": labelled - missed, "fp": {tuple(k) for r in counted for k in r["fp"]}, "fn": missed}
    d_tp, d_fp, d_fn = (len(distinct[k]) for k in ("tp", "fp", "fn"))
    summary = {
        "commits": len(counted),
        "skipped": len(rows) - len(counted),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "distinct": {"tp": d_tp, "fp": d_fp, "fn": d_fn},
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print(f"{'commit':<12} {'TP':>3} {'FP':>3} {'FN':>3}  note")
    for r in rows:
        if "skipped" in r:
            print(f"{r['commit']:<12}   skipped: {r['skipped']}")
            continue
        print(f"{r['commit']:<12} {len(r['tp']):>3} {len(r['fp']):>3} {len(r['fn']):>3}  {r['note'][:90]}")
        for kind in ("fp", "fn"):
            for code, path, obj in r[kind]:
                print(f"{'':<12} {kind.upper()}: {code} {path} {obj}")
    print(
        f"overall: {summary['commits']} commits, TP {tp}, FP {fp}, FN {fn}, "
        f"precision {precision:.3f}, recall {recall:.3f}" + (f" ({summary['skipped']} skipped)" if summary["skipped"] else "")
    )
    print(f"distinct (code, file, object): TP {d_tp}, FP {d_fp}, FN {d_fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
