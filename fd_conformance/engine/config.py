"""The graph-opt settings of ONE model: is it graphed, at which padded sizes, after how many warm-ups.

A frozen value the backend reads on every call, so switching graphs off (what the runner's
``use_cudagraph`` flags do) is a replacement, never a mutation other holders could miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from fd_conformance.errors import UsageError

__all__ = ["DEFAULT_WARMUP_RUNS", "GraphOptConfig"]

DEFAULT_WARMUP_RUNS = 2  # FastDeploy's default cudagraph warm-up count


@dataclass(frozen=True)
class GraphOptConfig:
    """The slice of FastDeploy's graph-opt config one model needs."""

    use_cudagraph: bool = True
    capture_sizes: tuple[int, ...] = (4, 2, 1)
    warmup_runs: int = DEFAULT_WARMUP_RUNS

    def __post_init__(self) -> None:
        sizes = self.capture_sizes
        if not sizes or any(int(s) <= 0 for s in sizes) or len(set(sizes)) != len(sizes):
            raise UsageError(
                f"graph-opt capture_sizes {sizes!r} must be unique positive token counts",
                "give e.g. capture_sizes=(4, 2, 1)",
            )
        if self.warmup_runs < 0:
            raise UsageError(f"graph-opt warmup_runs={self.warmup_runs} is negative", "use 0 or more warm-up runs")
        # Descending, as FastDeploy captures decode sizes (largest first reserves the pool once).
        object.__setattr__(self, "capture_sizes", tuple(sorted((int(s) for s in sizes), reverse=True)))

    def padded_size(self, num_tokens: int) -> int | None:
        """Smallest capture size that holds ``num_tokens``; None means run eagerly."""
        fitting = [size for size in self.capture_sizes if size >= num_tokens]
        return min(fitting) if fitting else None
