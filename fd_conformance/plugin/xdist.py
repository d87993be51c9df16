"""pytest-xdist hooks: a GPU per worker from the controller's ledger, and ``-n auto`` on a GPU host."""

from __future__ import annotations

import os
from typing import Any

import pytest

from fd_conformance.devices import visible_gpu_count
from fd_conformance.plugin.gpus import WORKERINPUT_KEY, GpuLedger, auto_worker_count, free_gpu_bytes, physical_gpu_ids
from fd_conformance.plugin.usage import WORKERINPUT_REQUESTED, requested

LEDGER_KEY = pytest.StashKey[GpuLedger]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: give each new (or replacement) worker the least-used GPU -- in a session
    that asks for the kit only: a project's own xdist workers keep every GPU (usage)."""
    config: pytest.Config = node.config
    if not requested(config):
        return
    node.workerinput[WORKERINPUT_REQUESTED] = True
    ledger = config.stash.get(LEDGER_KEY, None)
    if ledger is None:
        ledger = GpuLedger(physical_gpu_ids(visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES")))
        config.stash[LEDGER_KEY] = ledger
    gpu = ledger.claim(node.gateway.id)
    if gpu is not None:
        node.workerinput[WORKERINPUT_KEY] = gpu


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a GPU host: workers per GPU from free memory and cores (several share one GPU:
    the models are tiny). Without a GPU, or with PYTEST_XDIST_AUTO_NUM_WORKERS set, xdist decides.
    tryfirst: xdist's own implementation is a plain one too, and plugin load order (which
    distribution the environment lists first) would otherwise decide whose count wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not requested(config):
        return None  # a project's own `-n auto` is xdist's to size (usage)
    free = free_gpu_bytes(physical_gpu_ids(visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES")))
    if not free:
        return None
    return auto_worker_count(os.cpu_count() or 1, free)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    ledger = node.config.stash.get(LEDGER_KEY, None)
    if ledger is not None:
        ledger.release(node.gateway.id)
