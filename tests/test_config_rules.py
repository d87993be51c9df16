"""Graph-opt config rules (C6): each rule has a bad config it fires on and a near-twin it passes;
the property helper passes the reference post-processor and catches each mutant with its code."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import Phase, Verbosity, settings
from hypothesis.database import InMemoryExampleDatabase

from fd_conformance.config_rules import (
    CONFIG_CHECKS,
    FIELD_PATHS,
    InvariantViolation,
    RawGraphOptConfig,
    assert_postprocessor_preserves_invariants,
    check_config,
    find_config_warnings,
    read_field,
)
from fd_conformance.errors import UsageError
from fd_conformance.findings import RULES, Severity
from fd_reference_models.config import (
    MUTANTS,
    CacheConfig,
    FDConfig,
    GraphOptConfig,
    LoadConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    postprocess,
    postprocess_forcing_prefill_graphs,
)

# Property runs are deterministic (derandomized); fewer examples keep each test ~1-3 s on 2 cores.
EXAMPLES = 150


def fd(
    *,
    use_cudagraph: bool = True,
    only_prefill: bool = False,
    sizes: list[Any] | None = None,
    prefill_sizes: list[Any] | None = None,
    level: int = 0,
    cpu_blocks: int | None = 0,
    role: str = "mixed",
    method: str | None = None,
    spec_tokens: int = 1,
    rl: bool = False,
    tp: int = 1,
    sp_moe: bool = False,
) -> FDConfig:
    """An already post-processed config, written out: the rules judge exactly these values."""
    return FDConfig(
        GraphOptConfig(
            use_cudagraph,
            only_prefill,
            [8, 4, 2, 1] if sizes is None else sizes,
            [8, 4, 2, 1] if prefill_sizes is None else prefill_sizes,
            level,
        ),
        CacheConfig(cpu_blocks),  # type: ignore[arg-type]  # FastDeploy's None means 0
        SchedulerConfig(role, 8),
        SpeculativeConfig(method, spec_tokens),
        LoadConfig(rl),
        ParallelConfig(tp, sp_moe),
    )


@functools.cache
def mutant_violation(name: str) -> InvariantViolation:
    """Shrinking dominates the cost: find each mutant's minimal failure once per session."""
    mutant, _ = MUTANTS[name]
    with pytest.raises(InvariantViolation) as err:
        assert_postprocessor_preserves_invariants(mutant, FDConfig.from_raw, max_examples=EXAMPLES)
    return err.value


def codes(cfg: object) -> list[str]:
    return [f.code for f in check_config(cfg)]


def test_every_rule_code_is_registered_as_a_config_finding() -> None:
    for code in CONFIG_CHECKS:
        assert RULES[code].where == "config"


def test_sound_config_has_no_findings() -> None:
    assert codes(fd()) == []
    assert codes(postprocess(FDConfig.from_raw(RawGraphOptConfig()))) == []


# --------------------------------------------------------------------------- FDC401
def test_prefill_graphs_with_cpu_cache_is_fdc401() -> None:
    bad = check_config(fd(only_prefill=True, cpu_blocks=64, role="prefill"), where="prefill node")
    assert [f.code for f in bad] == ["FDC401"]
    assert "num_cpu_blocks=64" in bad[0].message and "LAST" in bad[0].hint
    assert bad[0].location.obj == "prefill node"
    assert codes(fd(only_prefill=True, cpu_blocks=64, role="mixed")) == ["FDC401"]


@pytest.mark.parametrize(
    "good",
    [
        dict(only_prefill=True, cpu_blocks=0),  # no CPU cache
        dict(only_prefill=True, cpu_blocks=None),  # FastDeploy's unset value means no CPU cache
        dict(only_prefill=False, cpu_blocks=64),  # decode graphs only
        dict(use_cudagraph=False, only_prefill=True, cpu_blocks=64),  # graphs off
    ],
)
def test_fdc401_near_twins_pass(good: dict[str, Any]) -> None:
    assert codes(fd(**good)) == []


# --------------------------------------------------------------------------- FDC402
@pytest.mark.parametrize(
    ("sizes", "problem"),
    [
        ([1, 2, 4], "descending"),
        ([4, 4, 1], "duplicates"),
        ([4, 0], "non-positive"),
        ([4, 2.5], "non-integer"),
        ([], "empty while its graphs are on"),
    ],
)
def test_malformed_capture_sizes_are_fdc402(sizes: list[Any], problem: str) -> None:
    bad = check_config(fd(sizes=sizes))
    assert [f.code for f in bad] == ["FDC402"]
    assert problem in bad[0].message and "cudagraph_capture_sizes=" in bad[0].message


def test_fdc402_checks_prefill_sizes_and_passes_good_lists() -> None:
    assert codes(fd(only_prefill=True, prefill_sizes=[1, 8])) == ["FDC402"]  # prefill graphs on: in use
    assert codes(fd(prefill_sizes=[1, 8])) == ["FDC406"]  # prefill graphs off: a warning only
    assert codes(fd(sizes=[512, 16, 1])) == []
    assert codes(fd(use_cudagraph=False, sizes=[])) == []  # empty is fine while graphs are off


def fastdeploy_default(prefill_order: str) -> FDConfig:
    """FastDeploy's real default after post-processing: decode CUDA graphs on, prefill graphs off,
    and a prefill list built as a size ladder with the max capture shape appended although the
    ladder already ends there -- so the max appears twice (issue 13, defect 8)."""
    max_prefill = 512
    ladder = [2**i for i in range(10)]  # 1 .. 512
    prefill = sorted([*ladder, max_prefill], reverse=prefill_order == "descending")
    assert prefill.count(max_prefill) == 2
    return fd(use_cudagraph=True, only_prefill=False, sizes=[64, 32, 16, 8, 4, 2, 1], prefill_sizes=prefill)


@pytest.mark.parametrize("prefill_order", ["ascending", "descending"])
def test_duplicate_in_unused_prefill_list_of_fastdeploy_default_is_only_a_warning(prefill_order: str) -> None:
    """Before the fix: FDC402 (an error) on FastDeploy's own default config, whose prefill list is
    never captured while prefill graphs are off."""
    findings = check_config(fastdeploy_default(prefill_order), where="FastDeploy default")
    assert [f for f in findings if f.is_error] == [], [f.format() for f in findings]
    assert [f.code for f in findings] == ["FDC406"]
    warning = findings[0]
    assert warning.severity is Severity.WARNING
    assert "cudagraph_capture_sizes_prefill=[" in warning.message and "duplicates" in warning.message
    assert "prefill graphs are off (cudagraph_only_prefill=False)" in warning.message
    assert warning.location.obj == "FastDeploy default"
    # The property helper gates on errors only: a post-processor producing this shape passes.
    assert_postprocessor_preserves_invariants(lambda cfg: fastdeploy_default(prefill_order), FDConfig.from_raw, max_examples=10)


def test_duplicate_in_the_list_in_use_is_still_fdc402() -> None:
    """The same duplicated list is an error as soon as its graphs are on, and the decode list is
    judged the same way: only which list is in use changes the verdict."""
    fd_default = fastdeploy_default("descending")
    fd_default.graph_opt_config.cudagraph_only_prefill = True  # prefill graphs on: the list is captured
    bad = check_config(fd_default)
    assert [f.code for f in bad] == ["FDC402"] and bad[0].is_error
    assert "cudagraph_capture_sizes_prefill=[512, 512," in bad[0].message and "duplicates" in bad[0].message
    decode = check_config(fd(sizes=[64, 64, 1], prefill_sizes=[8, 8]))  # decode graphs on
    assert [(f.code, f.severity) for f in decode] == [("FDC402", Severity.ERROR), ("FDC406", Severity.WARNING)]
    assert "cudagraph_capture_sizes=[64, 64, 1]" in decode[0].message
    assert "cudagraph_capture_sizes_prefill=[8, 8]" in decode[1].message
    # The decode list unused (prefill graphs on) or every graph off: warnings, never errors.
    assert codes(fd(only_prefill=True, sizes=[1, 1])) == ["FDC406"]
    off = check_config(fd(use_cudagraph=False, sizes=[4, 4], prefill_sizes=[1, 2]))
    assert [f.code for f in off] == ["FDC406", "FDC406"] and not any(f.is_error for f in off)
    assert all("graphs are off (use_cudagraph=False)" in f.message for f in off)
    with pytest.raises(InvariantViolation, match="FDC402 cudagraph_capture_sizes_prefill=.512, 512"):
        assert_postprocessor_preserves_invariants(lambda cfg: fd_default, FDConfig.from_raw, max_examples=10)


def test_unset_capture_sizes_with_graphs_on_are_fdc402() -> None:
    """None (never post-processed) captures nothing, like []: flagged while its graphs are on."""
    unset = fd()
    unset.graph_opt_config.cudagraph_capture_sizes = None
    bad = check_config(unset)
    assert [f.code for f in bad] == ["FDC402"]
    assert "cudagraph_capture_sizes=None: is empty while its graphs are on" in bad[0].message
    off = fd(use_cudagraph=False)
    off.graph_opt_config.cudagraph_capture_sizes = None
    assert codes(off) == []
    prefill_only = fd(only_prefill=True, cpu_blocks=0)
    prefill_only.graph_opt_config.cudagraph_capture_sizes = None  # decode graphs are off here
    assert "FDC402" not in codes(prefill_only)


# --------------------------------------------------------------------------- FDC403
def test_mtp_sizes_not_multiple_of_step_are_fdc403() -> None:
    bad = check_config(fd(method="mtp", spec_tokens=2, sizes=[12, 6, 4]))
    assert [f.code for f in bad] == ["FDC403"]
    assert "[4]" in bad[0].message and "multiples of 3" in bad[0].message


def test_fdc403_near_twins_pass() -> None:
    assert codes(fd(method="mtp", spec_tokens=2, sizes=[12, 6, 3])) == []
    assert codes(fd(method=None, sizes=[3])) == []
    assert codes(fd(method="mtp", spec_tokens=2, sizes=[4], only_prefill=True)) == []  # decode graphs off


# --------------------------------------------------------------------------- FDC404
def test_static_graph_under_rl_is_fdc404() -> None:
    assert codes(fd(level=1, rl=True)) == ["FDC404"]
    assert codes(fd(level=0, rl=True)) == []
    assert codes(fd(level=2, rl=False)) == []


# --------------------------------------------------------------------------- FDC405
def test_sizes_not_divisible_by_tp_under_sp_moe_is_fdc405() -> None:
    bad = check_config(fd(sp_moe=True, tp=4, sizes=[8, 6]))
    assert [f.code for f in bad] == ["FDC405"]
    assert "[6]" in bad[0].message
    assert codes(fd(sp_moe=True, tp=4, sizes=[8, 4])) == []
    assert codes(fd(sp_moe=False, tp=4, sizes=[8, 6])) == []
    assert codes(fd(sp_moe=True, tp=4, sizes=[8, 6], use_cudagraph=False)) == []


# --------------------------------------------------------------------------- duck typing
def test_flat_graph_opt_object_and_real_paths_both_read() -> None:
    flat = SimpleNamespace(
        use_cudagraph=True,
        cudagraph_only_prefill=True,
        num_cpu_blocks=3,
        cudagraph_capture_sizes=[2, 1],
        cudagraph_capture_sizes_prefill=[2, 1],
    )
    assert codes(flat) == ["FDC401"]
    nested = RawGraphOptConfig(cudagraph_only_prefill=True, num_cpu_blocks=3).to_namespace()
    assert read_field(nested, "num_cpu_blocks") == 3
    assert all(paths[0].count(".") == 1 for paths in FIELD_PATHS.values())  # FDConfig nesting first


def test_object_that_is_not_a_config_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="graph_opt_config.use_cudagraph") as err:
        check_config(object())
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- property helper
def test_reference_postprocessor_preserves_every_invariant() -> None:
    assert_postprocessor_preserves_invariants(postprocess, FDConfig.from_raw, max_examples=EXAMPLES)


def test_forcing_prefill_graphs_mutant_fails_fdc401_with_minimal_example() -> None:
    violation = mutant_violation("forcing_prefill_graphs")
    assert MUTANTS["forcing_prefill_graphs"][0] is postprocess_forcing_prefill_graphs
    assert [f.code for f in violation.findings] == ["FDC401"]
    assert violation.raw.splitwise_role == "prefill" and violation.raw.num_cpu_blocks == 1  # shrunk
    assert "splitwise_role='prefill', num_cpu_blocks=1" in str(violation)
    assert "postprocess_forcing_prefill_graphs" in str(violation)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_postprocessor_reports_exactly_its_codes(name: str) -> None:
    mutant, expected = MUTANTS[name]
    errors = [c for c in expected if RULES[c].severity is Severity.ERROR]
    violations = [mutant_violation(name)] if errors else []
    if not errors:  # warning-only: the property test must pass (warnings never gate)
        assert_postprocessor_preserves_invariants(mutant, FDConfig.from_raw, max_examples=EXAMPLES)
    warned = find_config_warnings(mutant, FDConfig.from_raw, max_examples=EXAMPLES)
    violations += [warned] if warned is not None else []
    assert {f.code for v in violations for f in v.findings} == set(expected)
    # And the reference passes every rule on the very configs that broke the mutant.
    for violation in violations:
        assert check_config(postprocess(FDConfig.from_raw(violation.raw))) == []


def test_reference_postprocessor_draws_no_warning() -> None:
    assert find_config_warnings(postprocess, FDConfig.from_raw, max_examples=EXAMPLES) is None


def test_default_build_and_in_place_postprocessor_returning_none() -> None:
    def in_place(cfg: SimpleNamespace) -> None:  # adjusts the FDConfig-shaped namespace, returns None
        g = cfg.graph_opt_config
        if cfg.load_config.dynamic_load_weight:
            g.graph_opt_level = 0
        g.use_cudagraph = False  # graphs off: only the RL rule and size shapes can still fail
        g.cudagraph_capture_sizes = sorted(set(g.cudagraph_capture_sizes or [1]), reverse=True)

    assert_postprocessor_preserves_invariants(in_place, max_examples=EXAMPLES)
    # No post-processing at all: the raw default leaves the sizes unset (None) with graphs on,
    # which captures nothing (FDC402, the simplest failure), and under RL keeps the static graph.
    with pytest.raises(InvariantViolation, match="FDC402 cudagraph_capture_sizes=None"):
        assert_postprocessor_preserves_invariants(lambda cfg: None, max_examples=EXAMPLES)
    with pytest.raises(InvariantViolation, match="FDC404"):
        assert_postprocessor_preserves_invariants(lambda cfg: None, codes={"FDC404"}, max_examples=EXAMPLES)


def test_codes_filter_and_crashing_postprocessor() -> None:
    # Restricted to another rule, the FDC401 mutant is (correctly) not reported.
    assert_postprocessor_preserves_invariants(
        postprocess_forcing_prefill_graphs, FDConfig.from_raw, codes={"FDC402"}, max_examples=EXAMPLES
    )

    def crashes_on_mtp(cfg: FDConfig) -> FDConfig:
        if cfg.speculative_config.method == "mtp":
            raise ValueError("mtp unsupported")
        return postprocess(cfg)

    with pytest.raises(InvariantViolation, match="raised ValueError: mtp unsupported") as err:
        assert_postprocessor_preserves_invariants(crashes_on_mtp, FDConfig.from_raw, max_examples=EXAMPLES)
    assert err.value.raw.speculative_method == "mtp" and isinstance(err.value.error, ValueError)
    with pytest.raises(UsageError, match="FDC999"):
        assert_postprocessor_preserves_invariants(postprocess, codes={"FDC999"})


# --------------------------------------------------------------------------- determinism (issue 36.1)
SLOW_S = 0.3  # per config: past Hypothesis's default 200 ms deadline, as any post-processor on a busy host


def slow_postprocess(cfg: FDConfig) -> FDConfig:
    time.sleep(SLOW_S)
    return postprocess(cfg)


def test_a_slow_postprocessor_gets_the_fast_ones_verdict() -> None:
    """Host speed is no verdict: this raised DeadlineExceeded ('Test took 300.xxms, which exceeds
    the deadline of 200.00ms') while the search inherited Hypothesis's default deadline."""
    assert_postprocessor_preserves_invariants(slow_postprocess, FDConfig.from_raw, max_examples=3)


@contextlib.contextmanager
def hostile_profile() -> Iterator[None]:
    """A profile such as a user's conftest (or Hypothesis's own CI detection) loads: every setting
    that could move a verdict or its minimal config set otherwise than the kit's search needs."""
    previous = settings.get_current_profile_name()
    settings.register_profile(
        "fd-conformance-test-hostile",
        deadline=timedelta(microseconds=1),
        phases=[Phase.generate],  # no shrinking
        derandomize=False,
        database=InMemoryExampleDatabase(),
        verbosity=Verbosity.verbose,
    )
    settings.load_profile("fd-conformance-test-hostile")
    try:
        yield
    finally:
        settings.load_profile(previous)


def test_a_loaded_profile_changes_neither_verdict_nor_minimal_config(capsys: pytest.CaptureFixture[str]) -> None:
    expected = mutant_violation("forcing_prefill_graphs").raw  # under Hypothesis's default profile
    mutant, _ = MUTANTS["forcing_prefill_graphs"]
    with hostile_profile(), pytest.raises(InvariantViolation) as err:
        assert_postprocessor_preserves_invariants(mutant, FDConfig.from_raw, max_examples=EXAMPLES)
    assert err.value.raw == expected  # shrunk, the same on every host
    with hostile_profile():
        assert_postprocessor_preserves_invariants(postprocess, FDConfig.from_raw, max_examples=EXAMPLES)
    assert capsys.readouterr().out == ""  # the profile's verbosity prints nothing of the kit's search
