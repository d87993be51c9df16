"""Issue 51.17: what a check leaves behind in its worker process.

(a) the torch runtime's NCCL_COMM_SPLIT_SHARE_RESOURCES lives as long as the kit's world only;
(b) a native subject that fails while it is built leaves no observer installed;
(c) a results line is written whole, however short each write the kernel makes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fd_conformance
from fd_conformance.isolation.results import ResultLog, session_record, write_all

TESTS = Path(__file__).resolve().parent
KIT_ROOT = Path(fd_conformance.__file__).resolve().parents[1]


# --- (a) NCCL_COMM_SPLIT_SHARE_RESOURCES -----------------------------------------------------------


@pytest.fixture
def split_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The variable's name, unset; whatever a test leaves of the kit's world is ended."""
    torch_runtime = pytest.importorskip("fd_conformance.runtime.torch")
    monkeypatch.setenv(torch_runtime.SPLIT_SHARE_ENV, "recorded")  # so the test's end restores the caller's state
    monkeypatch.delenv(torch_runtime.SPLIT_SHARE_ENV)
    yield torch_runtime.SPLIT_SHARE_ENV
    torch_runtime.end_kit_world()


@pytest.mark.parametrize("user_value", [None, "0"], ids=["unset", "user-0"])
def test_split_share_is_set_for_the_kits_world_only(split_env: str, user_value: str | None) -> None:
    """Set (on CUDA, where _ensure_default_group calls the helper) only while the kit's world lives;
    end_kit_world gives the user's value back, or its absence, so a native engine that makes its
    own world later in the worker sees the environment the user gave it."""
    from fd_conformance.runtime import torch as torch_runtime

    if user_value is not None:
        os.environ[split_env] = user_value
    torch_runtime._share_split_resources()
    torch_runtime._share_split_resources()  # a second group of the same world: the user's value stays remembered
    assert os.environ.get(split_env) == (user_value or "1")
    torch_runtime.end_kit_world()
    assert os.environ.get(split_env) == user_value
    torch_runtime.end_kit_world()  # no world: nothing to give back twice
    assert os.environ.get(split_env) == user_value


def test_a_cpu_world_never_touches_split_share(split_env: str) -> None:
    """Before, during (a gloo world of the kit's alive, a group split from it) and after its end."""
    from _helpers import torch_cpu_runtime

    from fd_conformance.runtime import torch as torch_runtime

    runtime = torch_cpu_runtime()
    group = runtime.new_group("tp")
    assert torch_runtime._KIT_WORLD.get("group") is not None and split_env not in os.environ
    runtime.release_groups()
    del group
    torch_runtime.end_kit_world()
    assert split_env not in os.environ and not torch_runtime._KIT_WORLD


# --- (b) a native subject that fails while it is built --------------------------------------------


class Runner:
    use_cudagraph = draft_model_use_cudagraph = True

    def capture_model(self) -> None:
        pass

    def clear_parameters(self) -> None:
        pass

    def update_parameters(self, weights: Any) -> None:
        pass


class LazyModel:
    """A model whose clear method is built on first use, and that build fails."""

    @property
    def clear_graph_opt_backend(self) -> Any:
        raise RuntimeError("lazy model build failed")


class Model:
    def clear_graph_opt_backend(self) -> None:
        pass


class NoGraphsSubject:
    """Every Subject member but graphs(): certified in native mode."""

    draft = None

    def __init__(self, wrapper: Any) -> None:
        self.runtime, self.wrapper, self.runner = None, wrapper, Runner()

    def make_inputs(self, n: int, seed: int = 0) -> int:
        return n

    def forward(self, inputs: Any) -> dict[str, Any]:
        return {}

    eager_forward = forward

    def new_weights(self, seed: int) -> dict[str, Any]:
        return {}


def _raises(runtime: Any) -> Any:
    raise RuntimeError("factory failed")


@pytest.mark.parametrize(
    ("graphs", "factory", "error"),
    [
        ("native", lambda rt: NoGraphsSubject(LazyModel()), RuntimeError),  # observer installed before the factory
        ("kit", lambda rt: NoGraphsSubject(LazyModel()), RuntimeError),  # detected: observer installed after it
        ("native", _raises, pytest.fail.Exception),  # the factory raises after the observer is installed
    ],
    ids=["declared-native-subject-raises", "detected-native-subject-raises", "factory-raises"],
)
def test_a_failed_native_subject_leaves_no_observer(
    monkeypatch: pytest.MonkeyPatch, graphs: str, factory: Any, error: type
) -> None:
    """The next native subject of the worker installs its observer ("already installed" before),
    and the runner's observation points made before the failure are undone."""
    import native_double
    from _helpers import torch_cpu_runtime

    from fd_conformance.cases import ModelCase
    from fd_conformance.plugin.fixtures import case_subject

    native_double.install(monkeypatch)
    runtime = torch_cpu_runtime()
    made: list[NoGraphsSubject] = []
    broken = ModelCase("broken", "torch", lambda rt: made.append(factory(rt)) or made[-1], (1,), graphs=graphs)
    with pytest.raises(error), case_subject(broken, runtime):
        pass
    if made:
        assert "capture_model" not in vars(made[0].runner)  # put back as the author made it
    good = ModelCase("good", "torch", lambda rt: NoGraphsSubject(Model()), (1,), graphs="native")
    with case_subject(good, runtime) as subject:
        assert subject.native_observer is not None
    runtime.observe_native_graphs().close()  # closed again on the way out


NATIVE_CASES = """
import sys
sys.path.insert(0, {tests!r})
from fd_conformance.cases import ModelCase
from test_issue51_plugin import LazyModel, Model, NoGraphsSubject

BROKEN = ModelCase("broken", "torch", lambda rt: NoGraphsSubject(LazyModel()), (1,), graphs="native")
GOOD = ModelCase("good", "torch", lambda rt: NoGraphsSubject(Model()), (1,), graphs="native")
"""


def test_the_next_native_check_in_the_worker_runs(tmp_path: Path) -> None:
    """Through the real fd_subject fixture, in one process: the broken case errors, the good one after it passes."""
    pytest.importorskip("torch")
    (tmp_path / "native_cases.py").write_text(NATIVE_CASES.format(tests=str(TESTS)))
    (tmp_path / "test_native.py").write_text("def test_subject(fd_subject):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(KIT_ROOT), str(TESTS)])}  # this tree's kit
    env.pop("FD_CONFORMANCE_ISOLATION_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "native_double", "--fd-isolate=off", "--fd-device=cpu",
         "--fd-model=native_cases:BROKEN", "--fd-model=native_cases:GOOD", "-rA", "test_native.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "already installed" not in proc.stdout, proc.stdout
    assert "PASSED test_native.py::test_subject[good-cpu]" in proc.stdout, proc.stdout + proc.stderr
    assert "ERROR test_native.py::test_subject[broken-cpu]" in proc.stdout and "1 passed, 1 error" in proc.stdout, proc.stdout


# --- (c) short writes ------------------------------------------------------------------------------


def test_a_short_write_on_a_pipe_is_continued_until_the_line_is_whole() -> None:
    """A real short write: a signal interrupts a blocking write into a full pipe, and the kernel returns
    the count it wrote so far (no EINTR, so Python does not retry). write_all writes the rest."""
    read_end, write_end = os.pipe()
    capacity = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ)
    line = b"x" * (4 * capacity) + b"\n"
    received = bytearray()
    main = threading.get_ident()

    def interrupt_then_drain() -> None:
        deadline = time.monotonic() + 30
        while _buffered(read_end) < capacity and time.monotonic() < deadline:
            time.sleep(0.01)  # the writer is blocked in the kernel once the pipe is full
        signal.pthread_kill(main, signal.SIGUSR1)
        while chunk := os.read(read_end, 1 << 16):
            received.extend(chunk)

    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    reader = threading.Thread(target=interrupt_then_drain)
    reader.start()
    try:
        write_all(write_end, line)
    finally:
        os.close(write_end)
        reader.join(timeout=60)
        os.close(read_end)
        signal.signal(signal.SIGUSR1, previous)
    assert len(received) == len(line) and bytes(received) == line


def _buffered(fd: int) -> int:
    count = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return int.from_bytes(count, sys.byteorder)


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """RLIMIT_FSIZE for this process: a write across it is short; the next one fails EFBIG (SIGXFSZ ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_results_line_cut_short_is_not_taken_for_written(tmp_path: Path) -> None:
    """A regular file's short write (the file-size limit): ResultLog.append writes on, and what stops it is
    an error, never a torn line reported as written."""
    log = ResultLog(tmp_path / "results.jsonl")
    try:
        log.append(session_record("finished", "first"))
        size = (tmp_path / "results.jsonl").stat().st_size
        with file_size_limit(size + 10), pytest.raises(OSError) as raised:
            log.append(session_record("finished", "x" * 100))
    finally:
        log.close()
    assert raised.value.errno == errno.EFBIG
    first, torn = (tmp_path / "results.jsonl").read_bytes().split(b"\n")
    assert json.loads(first)["detail"] == "first" and len(torn) == 10  # the kernel's short write, then the refusal
