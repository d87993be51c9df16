"""Pytest mode of the isolation worker: one pytest session, collected once, driven by the parent.

Like an xdist worker (learned from, not copied): the worker rebuilds the parent's config (same
options, rootdir, ini file, invocation directory and collection arguments), collects the parent's
own arguments while ignoring every file that holds no isolated item, then runs only the nodeids
the parent sends. The parent sends the ``nextitem`` pytest handed it (under xdist, that
worker's own order); the worker tears down to what that item shares with the current one --
the item itself, or its nearest collected ancestor when it runs in the parent -- so
module/session fixtures survive between items exactly as they would in one process. Reports are streamed as they are made, serialised by pytest's
own hooks, so a hang in ``call`` still leaves the parent the ``setup`` report.

Why the parent's arguments and not the files themselves: a node id is relative to the rootdir,
or, for a file outside it (``pytest --pyargs pkg.suite`` run from any other directory), relative
to the collection argument that reached it. Collecting ``/site-packages/pkg/suite/test_a.py``
directly would name its tests ``::test_x`` where the parent has ``test_a.py::test_x``, and the
parent's requests would find nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from fd_conformance.isolation import messages
from fd_conformance.isolation.causes import classify_error
from fd_conformance.isolation.worker.channel import Channel, mark

#: What the worker's plugins found at configure, sent to a parent that waits for it before it
#: collects (plugin.worker_facts): picklable values by name, e.g. the session's cases as records.
WORKER_FACTS = pytest.StashKey[dict[str, Any]]()
#: What the worker's plugins start once the facts are sent and before collecting (e.g. a framework
#: import on a thread): it then overlaps the parent's collection instead of delaying its facts.
AFTER_FACTS = pytest.StashKey[list[Callable[[], None]]]()
#: True when the parent narrows the session (-k, -m, --deselect): which checks run is known only
#: from its requests (the worker's own config has no -k or -m: it must not deselect again).
PARENT_SELECTS = pytest.StashKey[bool]()


class WorkerSession:
    """Plugin registered in the worker's pytest: runs the items the parent asks for."""

    def __init__(
        self, channel: Channel, config: pytest.Config, paths: list[str] | None, send_facts: bool = False, selects: bool = False
    ) -> None:
        self.channel = channel
        config.stash[PARENT_SELECTS] = selects
        self.config = config
        self.paths = paths
        self.send_facts = send_facts  # the parent waits for WORKER_FACTS before it collects
        if send_facts:  # in the stash from the start: configure hooks know the parent waits for them
            config.stash[WORKER_FACTS] = {}
        self.keep: frozenset[Path] | None = None  # files to collect; None: all (set at collection)
        self.items: dict[str, pytest.Item] = {}
        self.nodes: dict[str, pytest.Item | pytest.Collector] = {}  # every collected node by id, session ("") included
        self.reports: list[pytest.TestReport] = []
        self.running = False  # inside the run loop, until the parent says stop

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool:
        """Collect only what the parent isolates. A worker prestarted while the parent was still
        collecting has loaded its plugins and conftests already; it waits here for the file list."""
        if self.send_facts:
            # What its configure printed (a model module's prints at import) is in the log before the
            # parent reads it there on this message, to show it as a one-process session would.
            sys.stdout.flush()
            sys.stderr.flush()
            self.channel.send(messages.CONFIGURED, facts=self.config.stash.get(WORKER_FACTS, {}))
        for start in self.config.stash.get(AFTER_FACTS, []):
            start()
        paths = self.paths
        if paths is None:
            received = self.channel.recv()
            if received.name != messages.COLLECT:  # "stop" before any collection: nothing to tear down
                _exit_now()
            paths = list(received.fields["paths"])
            if received.fields.get("basetemp") is not None:
                _use_basetemp(self.config, str(received.fields["basetemp"]))
        self.keep = None if messages.ALL_FILES in paths else frozenset(Path(p) for p in paths)
        # The parent's arguments: node ids come out identical. pytest never asks
        # pytest_ignore_collect about an argument itself, so a file argument without isolated
        # items is dropped here; that cannot change a kept file's node id (a file argument is
        # nobody's ancestor), and directories and --pyargs names stay, filtered by the hook.
        args = [arg for arg in self.config.args if self._holds_isolated(arg)]
        session.perform_collect(args or None)
        return True

    def _holds_isolated(self, arg: str) -> bool:
        if self.keep is None:
            return True
        path = Path(os.path.abspath(self.config.invocation_params.dir / arg.split("::", 1)[0]))  # as pytest normalises
        return not path.is_file() or path in self.keep

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        """Skip files (and directories) holding no isolated item: the worker must not import
        test modules it will never run, but it walks the same arguments as the parent."""
        if self.keep is None or collection_path in self.keep:
            return None  # pytest's own rules (--ignore, norecursedirs, ...) still apply
        if any(collection_path in kept.parents for kept in self.keep):
            return None  # a directory on the way to an isolated file
        return True

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = {item.nodeid: item for item in items}
        self.nodes = {node.nodeid: cast("pytest.Item | pytest.Collector", node) for item in items for node in item.listchain()}

    def teardown_target(self, nodeid: str | None) -> Any:
        """What to tear down to after an item, given the parent's real next item: that item when
        collected here; else (it runs in the parent) its nearest collected ancestor, whose
        fixtures a later isolated item may still share; None at the end of the session.
        Only ``listchain()`` of it is used, by pytest's SetupState."""
        if nodeid is None:
            return None
        while nodeid:
            node = self.nodes.get(nodeid)
            if node is not None:
                return node
            nodeid = nodeid.rpartition("::")[0] if "::" in nodeid else nodeid.rpartition("/")[0]
        return self.nodes.get("")

    @staticmethod
    def catch_up_teardown(item: pytest.Item) -> str | None:
        """Tear down what the previous item kept for a next item that ran in the parent instead
        (a no-op when the kept setup is a prefix of ``item``'s): pytest requires it before setup.
        Returns the error text of a failing teardown: it fails ``item`` rather than vanishing."""
        try:
            item.session._setupstate.teardown_exact(item)
        except BaseException as err:  # noqa: BLE001 - a fixture's teardown error is a result to report
            return f"teardown of fixtures kept from an earlier item failed: {type(err).__name__}: {err}"
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        mark(f"pytest {report.when} {report.outcome}")
        self.channel.send(messages.REPORT, data=data)
        self.reports.append(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        mark(f"pytest call start {item.nodeid}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.channel.ready(sorted(self.items))
        self.running = True
        handlers: dict[str, Callable[..., object]] = {
            messages.STOP: self.stop,
            messages.PROBE: self.channel.answer_probe,
            messages.ITEM: self.run_item,
        }
        while self.running:
            received = self.channel.recv()
            if received.name in handlers:
                messages.dispatch(received, handlers)
            else:  # answered, as the call worker does, so the parent reports it instead of waiting
                self.channel.send(messages.DONE, outcome="failed", details=f"pytest worker got {received.name!r}")
        try:  # session-scoped fixtures end with the session, as in a normal run
            session._setupstate.teardown_exact(None)
        except Exception:  # noqa: BLE001 - teardown errors of the last item were reported already
            pass
        return True

    def stop(self) -> None:
        self.running = False

    def run_item(self, nodeid: str, next_nodeid: str | None) -> None:
        item = self.items.get(nodeid)
        if item is None:
            details = f"{nodeid} was not collected in the isolation worker (non-deterministic parametrization?)"
            self.channel.send(messages.DONE, outcome="failed", details=details)
            return
        error = self.catch_up_teardown(item)
        if error is not None:
            self.channel.send(messages.DONE, outcome="failed", details=error)
            return
        self.reports = []
        item.ihook.pytest_runtest_protocol(item=item, nextitem=self.teardown_target(next_nodeid))
        text = "\n".join(str(r.longrepr) for r in self.reports if r.failed)
        cause = classify_error(text) if text else None
        if cause is not None:  # CUDA context or heap poisoned: report, then let the parent replace us
            self.channel.send(messages.DONE, outcome="crash", cause=cause, details=text, retire=True)
            os._exit(0)
        self.channel.send(messages.DONE, outcome="ran")


def _use_basetemp(config: pytest.Config, basetemp: str) -> None:
    """The parent's session temp dir, sent with the file list: a worker prestarted at configure
    was spawned before it existed (the parent makes it only once its configure succeeded). No test
    has run yet, so the factory pytest made at configure is simply replaced."""
    from _pytest.tmpdir import TempPathFactory

    config.option.basetemp = basetemp
    config._tmp_path_factory = TempPathFactory.from_config(config, _ispytest=True)  # type: ignore[attr-defined]


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve_pytest(channel: Channel, setup: dict[str, Any]) -> None:
    """``setup``: {"option_dict", "args" (the parent's, for plugins, rootdir and initial conftests),
    "invocation_dir" (the parent's, which relative arguments and ini discovery start from),
    "paths" (files holding isolated items, [messages.ALL_FILES], or None: wait for the ``collect`` message),
    "send_facts" (optional: send the ``configured`` message before collecting),
    "selects" (optional: the parent narrows the session with -k, -m or --deselect)}."""
    from _pytest.config import Config  # the constructor pytest documents as "usable for subprocesses"

    invocation_dir = setup.get("invocation_dir")
    if invocation_dir:
        # fromdictargs takes the invocation directory from the cwd; a replacement worker may be
        # spawned after a test changed the parent's cwd, so set it to where the session started.
        os.chdir(invocation_dir)
    config = Config.fromdictargs(setup["option_dict"], list(setup["args"]))
    paths = setup.get("paths")
    session = WorkerSession(channel, config, paths, send_facts=bool(setup.get("send_facts")), selects=bool(setup.get("selects")))
    config.pluginmanager.register(session, "fd_isolation_worker_session")
    config.hook.pytest_cmdline_main(config=config)
