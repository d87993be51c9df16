"""The session's shard (``--fd-shard K/N``): where collection records it and what the reports say of it.

Apart from :mod:`.collection` (which partitions the cases, through :mod:`fd_conformance.cases.shard`)
so that :mod:`.matrix` can stamp the reports without importing collection.

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from fd_conformance.isolation.plugin import CONTROLLER_KEY, FD_ISOLATE
from fd_conformance.plugin.options import CYCLES_KEY, FD_RUN_ID, FD_RUNTIME

# {"index", "count", "cases" (this shard's), "all_cases" (the session's before the partition),
# "balanced_by", "devices"}: with shard_stamp's run facts, stamped into conformance.json, which
# `fd-conformance merge` checks.
SHARD_KEY: pytest.StashKey[dict[str, Any] | None] = pytest.StashKey()
# Where a CI system names the run every job of its matrix belongs to (GitHub Actions, GitLab,
# Buildkite, CircleCI, Azure Pipelines): one id for all shards, kept by a re-run of a failed job.
RUN_ID_ENV = ("GITHUB_RUN_ID", "CI_PIPELINE_ID", "BUILDKITE_BUILD_ID", "CIRCLE_WORKFLOW_ID", "BUILD_BUILDID")


def recorded_shard(config: pytest.Config) -> dict[str, Any] | None:
    """The shard collection recorded, or None when the session is not sharded."""
    return config.stash.get(SHARD_KEY, None)


def shard_stamp(config: pytest.Config) -> dict[str, Any] | None:
    """The recorded shard with what the merge must find equal in every shard of one run: the
    environment, the settings that change verdicts, and the run's id; None when not sharded."""
    shard = recorded_shard(config)
    if shard is None:
        return None
    import hashlib
    import json

    stamp = {**shard, "environment": shard_environment(), "settings": run_settings(config)}
    given = config.getoption(FD_RUN_ID, None)
    from_ci = next((f"{name}={os.environ[name]}" for name in RUN_ID_ENV if os.environ.get(name)), None)
    # Neither given nor from CI (a local run): shards that agree on everything the merge checks
    # share this id, never one of time or host, which would refuse the shards of one run.
    facts = json.dumps([stamp[k] for k in ("count", "all_cases", "devices", "environment", "settings")], sort_keys=True)
    stamp["run_id"] = str(given or from_ci or "settings:" + hashlib.sha256(facts.encode()).hexdigest()[:12])
    return stamp


def shard_environment() -> dict[str, Any]:
    """This shard's Python and frameworks (installed versions, read from package metadata: a shard
    that ran no model imported none), as the merge compares and the merged report names them."""
    import platform

    from fd_conformance.devices import framework_versions

    return {"python": platform.python_version(), "frameworks": framework_versions()}


def run_settings(config: pytest.Config) -> dict[str, Any]:
    """The options, as this session resolved them, under which the same model can get another
    verdict: the weight cycles, the isolation watchdog's default deadline and which tests it
    watches, the runtime, and -k/-m (what a row owes). Devices, mutants and cases are stamped apart."""
    controller = config.stash.get(CONTROLLER_KEY, None)
    return {
        "cycles": config.stash.get(CYCLES_KEY, None),
        "timeout_s": None if controller is None else controller.default_timeout,
        "isolate": config.getoption(FD_ISOLATE, None) if controller is None else controller.mode,
        "runtime": config.getoption(FD_RUNTIME, None),
        "keyword": config.getoption("keyword", "") or "",
        "markexpr": config.getoption("markexpr", "") or "",
    }


def empty_shard_reason(shard: dict[str, Any]) -> str:
    """Why shard K/N has nothing to certify: N is above the number of cases."""
    return (
        f"empty shard: shard {shard['index']}/{shard['count']} holds no case "
        f"({shard['count']} shards for {len(shard['all_cases'])} case(s)); the merge of the shards judges"
    )
