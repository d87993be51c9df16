"""Pytest mode of the isolation worker: one pytest session, collected once, driven by the parent.

Like an xdist worker (learned from, not copied): the worker collects the isolated items' files
with the parent's options, then runs only the nodeids the parent sends, passing the parent's
*next* isolated item as ``nextitem`` so module/session fixtures survive between items exactly
as they would in one process. Reports are streamed as they are made, serialised by pytest's
own hooks, so a hang in ``call`` still leaves the parent the ``setup`` report.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from fd_conformance.isolation_worker import Channel, classify_error, mark


class WorkerSession:
    """Plugin registered in the worker's pytest: runs the items the parent asks for."""

    def __init__(self, channel: Channel, config: pytest.Config) -> None:
        self.channel = channel
        self.config = config
        self.items: dict[str, pytest.Item] = {}
        self.reports: list[pytest.TestReport] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = {item.nodeid: item for item in items}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        mark(f"pytest {report.when} {report.outcome}")
        self.channel.send("report", data)
        self.reports.append(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        mark(f"pytest call start {item.nodeid}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.channel.send("ready", os.getpid(), threading.main_thread().ident, sorted(self.items))
        while True:
            message = self.channel.recv()
            if message[0] == "stop":
                break
            _, nodeid, next_nodeid = message
            item = self.items.get(nodeid)
            if item is None:
                details = f"{nodeid} was not collected in the isolation worker (non-deterministic parametrization?)"
                self.channel.send("done", {"outcome": "failed", "details": details})
                continue
            self.reports = []
            nextitem = self.items.get(next_nodeid) if next_nodeid else None
            item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            text = "\n".join(str(r.longrepr) for r in self.reports if r.failed)
            cause = classify_error(text) if text else None
            if cause is not None:  # CUDA context or heap poisoned: report, then let the parent replace us
                self.channel.send("done", {"outcome": "crash", "cause": cause, "details": text, "retire": True})
                os._exit(0)
            self.channel.send("done", {"outcome": "ran"})
        try:  # session-scoped fixtures end with the session, as in a normal run
            session._setupstate.teardown_exact(None)
        except Exception:  # noqa: BLE001 - teardown errors of the last item were reported already
            pass
        return True


def serve_pytest(channel: Channel, setup: dict[str, Any]) -> None:
    from _pytest.config import Config  # the constructor pytest documents as "usable for subprocesses"

    config = Config.fromdictargs(setup["option_dict"], list(setup["args"]))
    config.pluginmanager.register(WorkerSession(channel, config), "fd_isolation_worker_session")
    config.hook.pytest_cmdline_main(config=config)
