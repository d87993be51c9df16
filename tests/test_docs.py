"""The docs site: every code block a reader is told to run is marked and run by a test, every
finding code, CLI option, pytest option, ini key and contract member has a generated reference
entry, and the site builds strictly.

Marks, each on the line right above a fenced block, in README.md and docs/**/*.md:

* ``<!-- file: NAME -->`` above a python block: the block is (a part of) the file NAME; a page's
  parts of one file are joined in page order. The tests write the file and run the page's command.
* ``<!-- run: ID -->`` above a bash block: a command a test runs as written; :data:`RUNS` names the
  test.
* ``<!-- not-run: WHY -->``: a block the reader is not meant to run as is (an install, a fragment).

The helpers here (``blocks``, ``page_files``, ``page_command``, ``run_command``) are shared with
tests/test_tutorial.py and tests/test_docs_examples.py.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = "README.md"
RUNNABLE = {"bash", "sh", "shell", "console", "python", "py"}
MARK = re.compile(r"<!-- (file|run|not-run): *(.*?) *-->")
CONSOLE_SCRIPT = "fd-conformance"  # [project.scripts] fd-conformance = "fd_conformance.cli:main"

#: Every ``<!-- run: ID -->`` of every page -> the test that runs it ("module::function").
RUNS: dict[tuple[str, str], str] = {
    (README, "certify"): "test_docs_examples::test_readme_example_is_certified",
    ("tutorials/zero-to-certified.md", "certify"): "test_tutorial::test_tutorial_model_is_certified",
    ("tutorials/native.md", "certify-native"): (
        "test_tutorial::test_native_tutorial_model_is_certified_and_its_misordered_clear_is_not"
    ),
    ("how-to/mtp-draft.md", "certify"): "test_docs_examples::test_mtp_draft_model_is_certified",
    ("how-to/multimodal.md", "certify"): "test_docs_examples::test_multimodal_model_is_certified",
    ("how-to/paddle.md", "certify"): "test_docs_examples::test_paddle_model_is_certified",
    ("how-to/tensor-parallel.md", "pytest"): "test_docs_examples::test_tensor_parallel_check_passes_at_tp2",
    ("how-to/ci-gating.md", "changed"): "test_docs_examples::test_changed_selects_the_edited_case_and_run_certifies_it",
    ("how-to/ci-gating.md", "certify-selection"): (
        "test_docs_examples::test_changed_selects_the_edited_case_and_run_certifies_it"
    ),
    ("how-to/lint.md", "lint-runner"): "test_docs_examples::test_lint_finds_the_misordered_teardown",
    ("how-to/lint.md", "lint-fix"): "test_docs_examples::test_lint_fix_renames_the_legacy_spelling",
    ("how-to/fastdeploy-checkout.md", "fastdeploy"): "test_docs_examples::test_fastdeploy_commands_on_the_fixture_tree",
    ("how-to/fastdeploy-checkout.md", "fastdeploy-runner"): ("test_docs_examples::test_fastdeploy_commands_on_the_fixture_tree"),
    ("how-to/fastdeploy-checkout.md", "fastdeploy-pytest"): "test_docs_examples::test_fastdeploy_through_pytest",
    ("how-to/failed-certificate.md", "certify-broken"): "test_docs_examples::test_failed_certificate_walkthrough",
    ("how-to/failed-certificate.md", "explain"): "test_docs_examples::test_failed_certificate_walkthrough",
    ("how-to/failed-certificate.md", "report"): "test_docs_examples::test_failed_certificate_walkthrough",
    ("how-to/failed-certificate.md", "replay"): "test_docs_examples::test_failed_certificate_walkthrough",
    ("how-to/failed-certificate.md", "last-failed"): "test_docs_examples::test_failed_certificate_walkthrough",
    ("how-to/debug-a-hang.md", "pytest-hang"): "test_docs_examples::test_hang_is_reported_and_the_session_goes_on",
    ("how-to/gpu-host.md", "certify-gpu"): "test_docs_examples::test_readme_example_is_certified_on_a_gpu",
    ("how-to/gpu-host.md", "pytest-gpu"): "test_docs_examples::test_gpu_only_session_certifies_real_graphs_or_nothing",
    ("how-to/develop-the-kit.md", "mkdocs"): "test_docs::test_site_builds_strictly",
}


# --------------------------------------------------------------------------- reading the pages
@dataclass(frozen=True)
class Block:
    """One fenced code block of a page and the mark right above it (kind None: no mark)."""

    page: str
    line: int
    language: str
    body: str
    kind: str | None
    arg: str


def page_path(page: str) -> Path:
    return ROOT / page if page == README else DOCS / page


def pages() -> list[str]:
    """README.md and every hand-written page under docs/ (generated pages are not in the tree)."""
    return [README, *sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))]


def blocks(page: str) -> list[Block]:
    lines = page_path(page).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = line[: len(line) - len(line.lstrip("`"))]
            language = line[len(fence) :].strip()
            end = i + 1
            while end < len(lines) and lines[end].rstrip() != fence:
                end += 1
            mark = MARK.fullmatch(lines[i - 1].strip()) if i > 0 else None
            body = "\n".join(lines[i + 1 : end]) + "\n"
            out.append(Block(page, i + 1, language, body, mark.group(1) if mark else None, mark.group(2) if mark else ""))
            i = end + 1
            continue
        i += 1
    return out


def page_files(page: str) -> dict[str, str]:
    """The files a page builds: its ``file:`` blocks, joined per name in page order."""
    parts: dict[str, list[str]] = {}
    for block in blocks(page):
        if block.kind == "file":
            parts.setdefault(block.arg, []).append(block.body)
    return {name: "\n\n".join(bodies) for name, bodies in parts.items()}


def page_command(page: str, run_id: str) -> str:
    """The one command line of the page's ``run: run_id`` block."""
    found = [b for b in blocks(page) if b.kind == "run" and b.arg == run_id]
    assert len(found) == 1, f"{page}: expected one `<!-- run: {run_id} -->` block, found {len(found)}"
    (line,) = [ln for ln in found[0].body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return line


def write_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (directory / name).write_text(source, encoding="utf-8")


# --------------------------------------------------------------------------- running a command
@dataclass
class Ran:
    proc: subprocess.CompletedProcess[str]
    cwd: Path

    @property
    def log(self) -> str:
        return self.proc.stdout[-4000:] + self.proc.stderr[-4000:]

    @property
    def report(self) -> dict[str, Any]:
        path = self.cwd / "fd-conformance-report" / "conformance.json"  # run's default --out
        assert path.is_file(), self.log
        return json.loads(path.read_text())  # type: ignore[no-any-return]

    @property
    def row(self) -> dict[str, Any]:
        (row,) = self.report["cases"]
        return row  # type: ignore[no-any-return]


def argv_of(command: str, cwd: Path) -> tuple[list[str], dict[str, str]]:
    """A page's command line as this checkout runs it: leading ``VAR=value`` words become the
    environment, ``fd-conformance``/``pytest``/``mkdocs``/``python`` this interpreter's modules
    (so the checkout's kit runs, whatever is on PATH); ``~`` and ``$HOME`` stay as the reader's
    (a test substitutes them first)."""
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    head, rest = words[0], words[1:]
    if head == CONSOLE_SCRIPT:
        argv = [sys.executable, "-m", "fd_conformance.cli", *rest]
    elif head in ("pytest", "mkdocs"):
        argv = [sys.executable, "-m", head, *rest]
    elif head == "python":
        argv = [sys.executable, *rest]
    else:
        raise AssertionError(f"a docs command starts with {head!r}: teach tests/test_docs.py how to run it")
    if "PYTHONPATH" in env:  # relative entries are the reader's directory
        env["PYTHONPATH"] = os.pathsep.join(str((cwd / p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep))
    return argv, env


def run_command(command: str, cwd: Path, *, gpu: bool = False, env: dict[str, str] | None = None, timeout: float = 600) -> Ran:
    """Run ``command`` (a page's line) in ``cwd``: CPU rows unless ``gpu``, this checkout first on the path."""
    argv, command_env = argv_of(command, cwd)
    full = {**os.environ, **(env or {}), **command_env}
    if not gpu:
        full["FD_CONFORMANCE_GPU"] = "0"  # CPU rows (host-emulated graphs) on any machine
    path = [command_env.get("PYTHONPATH", ""), str(ROOT), os.environ.get("PYTHONPATH", "")]
    full["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    proc = subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)
    return Ran(proc, cwd)


# --------------------------------------------------------------------------- every block marked
def runnable_blocks() -> Iterator[Block]:
    for page in pages():
        for block in blocks(page):
            if block.language in RUNNABLE:
                yield block


def test_every_code_block_a_reader_could_run_is_marked() -> None:
    unmarked = [f"{b.page}:{b.line} ```{b.language}" for b in runnable_blocks() if b.kind is None]
    assert not unmarked, "mark each with <!-- file: NAME -->, <!-- run: ID --> or <!-- not-run: why -->: " + ", ".join(unmarked)
    no_reason = [f"{b.page}:{b.line}" for b in runnable_blocks() if b.kind == "not-run" and len(b.arg) < 10]
    assert not no_reason, f"a not-run block says why it is not run: {no_reason}"
    python = ("python", "py")
    misplaced = [
        f"{b.page}:{b.line}"
        for b in runnable_blocks()
        if (b.kind == "file" and b.language not in python) or (b.kind == "run" and b.language in python)
    ]
    assert not misplaced, f"file: marks python blocks, run: marks commands: {misplaced}"


def test_every_run_mark_is_run_by_a_named_test() -> None:
    marked = {(b.page, b.arg) for b in runnable_blocks() if b.kind == "run"}
    assert marked == set(RUNS), (
        f"run marks without a test in RUNS: {sorted(marked - set(RUNS))}; RUNS entries no page has: {sorted(set(RUNS) - marked)}"
    )
    for target in set(RUNS.values()):
        module_name, _, function = target.partition("::")
        source = (ROOT / "tests" / f"{module_name}.py").read_text(encoding="utf-8")
        assert re.search(rf"^def {function}\(", source, re.M), f"{target} named in RUNS does not exist"


def test_run_blocks_hold_one_command_each() -> None:
    for page, run_id in RUNS:
        argv_of(page_command(page, run_id), ROOT)  # one line, and a command the tests know how to run


# --------------------------------------------------------------------------- the generated reference
def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> Any:
    return load_generator()


@pytest.fixture(scope="module")
def generated(generator: Any) -> dict[str, str]:
    return generator.pages()  # type: ignore[no-any-return]


def shown(markdown: str) -> str:
    """What a reader sees of generated prose: entities and escapes undone."""
    return html.unescape(markdown).replace("\\*", "*").replace("\\|", "|")


def test_every_finding_code_has_its_page_with_what_explain_prints(
    generated: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from fd_conformance.cli import main
    from fd_conformance.findings import RULES

    index = generated["reference/codes/index.md"]
    for code in RULES:
        page = generated.get(f"reference/codes/{code}.md")
        assert page is not None, f"{code} has no reference page"
        assert f"[{code}]({code}.md)" in index, f"{code} is missing from the codes index"
        assert main(["explain", code]) == 0
        explained = capsys.readouterr().out.strip().split("\n", 1)[1].strip()  # after its "## CODE" line
        assert explained in shown(page), f"{code}'s page is not what `fd-conformance explain {code}` prints"


def test_every_cli_option_has_a_reference_entry(generator: Any, generated: dict[str, str]) -> None:
    page = generated["reference/cli.md"]
    for option in generator.cli_option_strings():
        assert f"`{option}`" in page, f"CLI option {option} has no entry in reference/cli.md"
    for name, _ in generator.subcommands(__import__("fd_conformance.cli", fromlist=["build_parser"]).build_parser()):
        assert f"## `fd-conformance {name}`" in page, f"subcommand {name} has no section"


def pytest_help() -> str:
    """``pytest --help`` in a bare directory: what the installed plugin registers, read independently
    of the generator (an option the generator missed shows here)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=ROOT / "docs",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_every_pytest_option_and_ini_key_has_a_reference_entry(generated: dict[str, str]) -> None:
    page = generated["reference/pytest-plugin.md"]
    text = pytest_help()
    options = set(re.findall(r"(?<![\w-])(--fd-[a-z][a-z0-9-]*)", text))
    ini_section = re.split(r"^\[pytest\] ", text, maxsplit=1, flags=re.M)[1]  # pytest's ini-options part
    ini_keys = set(re.findall(r"^\s+(fd_[a-z0-9_]+)\s", ini_section, re.M))
    assert options and ini_keys, "pytest --help lists no --fd-* option or fd_* ini key: is the plugin installed?"
    missing = sorted(o for o in options if f"`{o}`" not in page) + sorted(k for k in ini_keys if f"`{k}`" not in page)
    assert not missing, f"no entry in reference/pytest-plugin.md for {missing}"


def test_every_contract_member_and_lint_setting_has_an_entry(generator: Any, generated: dict[str, str]) -> None:
    from dataclasses import fields

    from fd_conformance.cases.contract import ModelCase, ModelRunner, Subject

    contract = generated["reference/contract.md"]
    for f in fields(ModelCase):
        assert re.search(rf"^\| `{f.name}` \| .+ \| \S.* \|$", contract, re.M), f"ModelCase.{f.name} has no described row"
    for proto in (Subject, ModelRunner):
        for name in [*proto.__annotations__, *(n for n, v in vars(proto).items() if callable(v) and not n.startswith("_"))]:
            assert f"`{name}" in contract, f"{proto.__name__}.{name} has no entry"
    lint = generated["reference/lint-settings.md"]
    for key in generator.lint_keys():
        assert f"| `{key}` |" in lint, f"lint setting {key} has no entry"


def test_report_schema_page_names_every_field(generated: dict[str, str]) -> None:
    schema = json.loads((ROOT / "fd_conformance" / "schemas" / "conformance.schema.json").read_text())
    page = generated["reference/report-schema.md"]
    for name in schema["properties"]:
        assert f"| `{name}` |" in page


def test_generated_pages_exist_only_in_the_build(generated: dict[str, str]) -> None:
    checked_in = [path for path in generated if (DOCS / path).exists()]
    assert not checked_in, f"generated at build time, delete from docs/: {checked_in}"


# --------------------------------------------------------------------------- other promises of the pages
def test_ci_gating_snippets_match_the_workflow_and_the_hook() -> None:
    yaml = pytest.importorskip("yaml")
    snippets = [b.body for b in blocks("how-to/ci-gating.md") if b.language == "yaml"]
    caller = next(yaml.safe_load(s) for s in snippets if "uses:" in s)
    job = caller["jobs"]["conformance"]
    assert job["uses"].split("@")[0] == "fd-conformance/fd-conformance/.github/workflows/conformance.yml"
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "conformance.yml").read_text())
    inputs = workflow[True]["workflow_call"]["inputs"]  # YAML 1.1 reads the key `on` as True
    assert set(job["with"]) <= set(inputs), f"the page passes inputs the workflow lacks: {set(job['with']) - set(inputs)}"
    page = (DOCS / "how-to" / "ci-gating.md").read_text()
    for name in inputs:
        assert f"`{name}`" in page, f"workflow input {name} is not described on the page"
    hook = next(yaml.safe_load(s) for s in snippets if "repos:" in s)
    hook_ids = {h["id"] for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert {h["id"] for h in hook["repos"][0]["hooks"]} <= hook_ids


def test_measurements_page_gives_command_commit_device_and_date_for_each_figure() -> None:
    page = (DOCS / "measurements.md").read_text()
    counts = {field: len(re.findall(rf"^\| {field} \| \S", page, re.M)) for field in ("command", "commit", "device", "date")}
    assert len(set(counts.values())) == 1 and counts["date"] >= 10, counts
    assert all(re.match(r"\d{4}-\d{2}-\d{2}", d) for d in re.findall(r"^\| date \| (.+) \|$", page, re.M))


DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?:H100|H200)\b")


def test_dated_figures_live_on_the_measurements_page_only() -> None:
    allowed = {"measurements.md", "changelog.md"}
    dated = [
        f"{page}: {m.group(0)}" for page in pages() if page not in allowed for m in DATED.finditer(page_path(page).read_text())
    ]
    assert not dated, f"dated or device-bound figures outside docs/measurements.md: {dated}"


def test_relative_links_of_the_readme_resolve() -> None:
    text = page_path(README).read_text()
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    command = page_command("how-to/develop-the-kit.md", "mkdocs")
    argv, _ = argv_of(command, ROOT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "NO_MKDOCS_2_WARNING": "1",
    }
    proc = subprocess.run(
        [*argv, "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    built = {p.relative_to(tmp_path / "site").parent.as_posix() for p in (tmp_path / "site").rglob("index.html")}
    from fd_conformance.findings import RULES

    assert {f"reference/codes/{code}" for code in RULES} <= built, "a finding code's page is missing from the site"
    assert {"reference/cli", "reference/pytest-plugin", "reference/contract", "how-to/mtp-draft", "measurements"} <= built
