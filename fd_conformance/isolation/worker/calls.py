"""Call mode of the isolation worker: run importable callables ``"module:qualname"`` with
picklable arguments, one request at a time, until the parent says stop."""

from __future__ import annotations

import importlib
import os
import pickle
import traceback
from collections.abc import Callable
from typing import Any

from fd_conformance.isolation import messages
from fd_conformance.isolation.causes import classify_error
from fd_conformance.isolation.worker.channel import Channel, mark


def resolve(target: str) -> Callable[..., Any]:
    """``"package.module:Outer.func"`` -> the callable."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    function: Callable[..., Any] = obj
    return function


def run_call(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The DONE fields for one call: passed with its value, failed, or a crash that retires us."""
    try:
        value = resolve(target)(*args, **kwargs)
    except BaseException as err:  # noqa: BLE001 - everything is reported; the worker lives on
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        cause = "out of memory: MemoryError" if isinstance(err, MemoryError) else classify_error(text)
        if cause is not None:
            return {"outcome": "crash", "details": text, "cause": cause, "retire": True}
        return {"outcome": "failed", "details": text}
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - an unpicklable return value is shown, not lost
        value = repr(value)
    return {"outcome": "passed", "value": value}


class CallServer:
    """The request handlers of a call-mode worker, by message name."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.running = True

    def stop(self) -> None:
        self.running = False

    def probe(self) -> None:
        self.channel.answer_probe()

    def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        mark(f"call {target}")
        result = run_call(target, args, kwargs)
        self.channel.send(messages.DONE, **result)
        if result.get("retire"):
            os._exit(0)  # a poisoned process must not run the next check

    def refuse(self, name: str) -> None:
        self.channel.send(messages.DONE, outcome="failed", details=f"call worker got {name!r}")

    def serve(self) -> None:
        self.channel.ready([])
        handlers: dict[str, Callable[..., object]] = {
            messages.STOP: self.stop,
            messages.PROBE: self.probe,
            messages.CALL: self.call,
        }
        while self.running:
            received = self.channel.recv()
            if received.name in handlers:
                messages.dispatch(received, handlers)
            else:
                self.refuse(received.name)
