"""The session's shard (``--fd-shard K/N``): where collection records it and what the reports say of it.

Apart from :mod:`.collection` (which partitions the cases, through :mod:`fd_conformance.cases.shard`)
so that :mod:`.matrix` can stamp the reports without importing collection.

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

from typing import Any

import pytest

# {"index", "count", "cases" (this shard's), "all_cases" (the session's before the partition),
# "balanced_by", "devices"}: stamped into conformance.json, which `fd-conformance merge` checks.
SHARD_KEY: pytest.StashKey[dict[str, Any] | None] = pytest.StashKey()


def recorded_shard(config: pytest.Config) -> dict[str, Any] | None:
    """The shard collection recorded, or None when the session is not sharded."""
    return config.stash.get(SHARD_KEY, None)


def empty_shard_reason(shard: dict[str, Any]) -> str:
    """Why shard K/N has nothing to certify: N is above the number of cases."""
    return (
        f"empty shard: shard {shard['index']}/{shard['count']} holds no case "
        f"({shard['count']} shards for {len(shard['all_cases'])} case(s)); the merge of the shards judges"
    )
