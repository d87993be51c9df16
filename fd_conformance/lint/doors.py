"""FDC103: at every door a graph-owning class releases weights or groups through, no graph of the
models it releases may still be alive, on any path.

Why by what a method does: engines release weights through several entry points (FastDeploy's
runner: ``clear_parameters``, ``sleep(tags)``; more each release), usually through a weight
manager built with a list of models (``[self.model, self.proposer.model]`` under MTP). A rule keyed
on one method name, or on a clear that comes *late* in one function (FDC101), never sees a door
whose clear is simply *missing*. Here every method of a class that owns graphs and that nothing in
the class calls (an entry point) is followed through the class's own helpers, the weight manager
(the class its attribute was built from, with the models it was given) and the draft's proposer,
once for each value of the facts that decide which graphs exist: the main model's graph flag, a
draft model in use (the speculative method), the draft's graph flag. Conditions on those facts are
decided; any other condition is taken both ways. A release of a model's weights while that
model's graphs are alive, or a group shutdown while any graph is alive, is a finding naming the
model, the release, the path and what the manager was built with.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from fd_conformance.lint.door_ir import (
    Branch,
    CallAttr,
    CallSelf,
    CallSuper,
    ClassDoors,
    Clear,
    Cond,
    Construction,
    Exit,
    Loop,
    Op,
    Release,
    Site,
    walk,
)

#: How deep helpers are followed (runner -> helper -> manager -> its helper).
MAX_DEPTH = 4
ROLE_NAMES = {"main": "the main model's", "draft": "the draft model's"}


@dataclass(frozen=True)
class Facts:
    """One assignment of the facts that decide which graphs exist."""

    main: bool
    mtp: bool
    draft: bool

    def value(self, atom: str) -> bool | None:
        if atom == "main":
            return self.main
        if atom == "draft":
            return self.draft
        if atom == "mtp":
            return self.mtp
        if atom == "spec":
            return True if self.mtp else None
        return None

    def describe(self) -> str:
        main = "main graphs on" if self.main else "main graphs off"
        if not self.mtp:
            return f"{main}, no draft model"
        return f"{main}, MTP draft with its graphs {'on' if self.draft else 'off'}"


def all_facts(draft_graphs: bool = True) -> Iterator[Facts]:
    """Every assignment, the simplest first (no draft before a draft, its graphs off before on), so
    a finding names the simplest path that shows it; ``draft_graphs`` False: a draft never has any."""
    for mtp, draft, main in itertools.product((False, True), (False, True), (True, False)):
        if draft and not (mtp and draft_graphs):
            continue  # a draft's graph flag means nothing without a draft
        yield Facts(main, mtp, draft)


def evaluate(cond: Cond, facts: Facts) -> bool | None:
    """Three-valued: True/False when the facts decide the condition, None when they do not."""
    head = cond[0]
    if head == "not":
        inner = evaluate(cond[1], facts)
        return None if inner is None else not inner
    if head in ("and", "or"):
        values = [evaluate(c, facts) for c in cond[1:]]
        if head == "and":
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return facts.value(head)


@dataclass(frozen=True)
class Alive:
    """A release under live graphs: which model's graphs, at which top-level call of the door."""

    role: str
    release: Release
    door_site: Site  # the door's own call that led to the release (the release itself when direct)
    facts: Facts
    models: tuple[str, ...]  # whose weights the release covers ("groups": every model)
    built: Construction | None


@dataclass(frozen=True)
class _Frame:
    """Where ops are being interpreted: in which class, for which manager models, from which door call."""

    cls: ClassDoors
    manager_roles: tuple[str, ...] | None  # inside a weight manager: the models it was built with
    manager: Construction | None
    door_site: Site | None
    depth: int


class DoorAnalysis:
    """Follows the doors of graph-owning classes over the summaries of every scanned class."""

    def __init__(
        self, classes: Iterable[ClassDoors], release_names: Iterable[str], group_names: Iterable[str], draft_graphs: bool = True
    ) -> None:
        self.draft_graphs = draft_graphs
        self.release_names = frozenset(release_names)
        self.group_names = frozenset(group_names)
        self.classes: dict[str, ClassDoors] = {}
        for cls in classes:
            self.classes.setdefault(cls.name, cls)

    def _lookup(self, cls: ClassDoors, method: str, skip_own: bool) -> tuple[ClassDoors, tuple[Op, ...]] | None:
        """The method a call on ``self`` (or ``super()``) reaches: the class's own, else its bases', breadth first."""
        for owner in self._lineage(cls)[1 if skip_own else 0 :]:
            if method in owner.methods:
                return owner, owner.methods[method]
        return None

    # -- what attributes are
    def _built(self, owner: ClassDoors, attr: str, facts: Facts) -> list[Construction]:
        """What ``self.<attr>`` was built from (in the class or its bases), under these facts."""
        return [
            c
            for cls in self._lineage(owner)
            for c in cls.constructions
            if c.attr == attr and all(evaluate(k, facts) is not False for k in c.conds)
        ]

    # -- interpretation: states are frozensets of roles whose graphs are alive
    def _run(
        self, ops: Sequence[Op], states: set[frozenset[str]], frame: _Frame, facts: Facts, out: list[Alive]
    ) -> set[frozenset[str]]:
        for op in ops:
            if not states:
                return states
            states = self._op(op, states, frame, facts, out)
        return states

    def _op(self, op: Op, states: set[frozenset[str]], frame: _Frame, facts: Facts, out: list[Alive]) -> set[frozenset[str]]:
        if isinstance(op, Clear):
            return {s - {op.role} for s in states}
        if isinstance(op, Release):
            self._release(op, states, frame, facts, out)
            return states
        if isinstance(op, Branch):
            taken = evaluate(op.cond, facts)
            result: set[frozenset[str]] = set()
            if taken is not False:
                result |= self._run(op.then, set(states), frame, facts, out)
            if taken is not True:
                result |= self._run(op.orelse, set(states), frame, facts, out)
            return result
        if isinstance(op, Loop):
            return states | self._run(op.body, set(states), frame, facts, out)
        if isinstance(op, Exit):
            return set()
        if frame.depth >= MAX_DEPTH:
            return states
        if isinstance(op, (CallSelf, CallSuper)):
            found = self._lookup(frame.cls, op.method, skip_own=isinstance(op, CallSuper))
            if found is None:
                return states
            owner, ops = found
            # A helper runs on the same object: a manager's helper still covers the manager's models.
            inner = self._enter(frame, owner, frame.manager_roles, frame.manager, op.site)
            return self._run(ops, states, inner, facts, out)
        if isinstance(op, CallAttr):
            return self._call_attr(op, states, frame, facts, out)
        return states

    def _enter(
        self, frame: _Frame, cls: ClassDoors, roles: tuple[str, ...] | None, built: Construction | None, site: Site
    ) -> _Frame:
        """A frame one call deeper; its releases are reported at the door's own call that led there."""
        return _Frame(cls, roles, built, frame.door_site or site, frame.depth + 1)

    def _call_attr(
        self, op: CallAttr, states: set[frozenset[str]], frame: _Frame, facts: Facts, out: list[Alive]
    ) -> set[frozenset[str]]:
        built = self._built(frame.cls, op.attr, facts) if frame.manager_roles is None else []
        with_models = [c for c in built if c.roles]
        target = next((self.classes[c.ctor] for c in built if c.ctor in self.classes), None)
        if with_models:  # a weight manager: what it releases covers the models it was built with
            roles = tuple(dict.fromkeys(r for c in with_models for r in c.roles))
            ops = target.methods.get(op.method) if target is not None else None
            if ops is not None and target is not None:
                inner = self._enter(frame, target, roles, with_models[0], op.site)
                return self._run(ops, states, inner, facts, out)
            release = self._named_release(op)
            if release is not None:
                manager_frame = self._enter(frame, frame.cls, roles, with_models[0], op.site)
                self._release(release, states, manager_frame, facts, out)
            return states
        if target is not None and target.draft_owner and op.method in target.methods:
            inner = self._enter(frame, target, frame.manager_roles, frame.manager, op.site)
            return self._run(target.methods[op.method], states, inner, facts, out)
        release = self._named_release(op)
        if release is not None:
            self._release(release, states, frame, facts, out)
        return states

    def _named_release(self, op: CallAttr) -> Release | None:
        """A call into a class the linter has not read, judged by its name (the release names)."""
        if op.method in self.group_names:
            return Release("groups", op.site, op.role)
        if op.method in self.release_names:
            return Release("weights", op.site, op.role)
        return None

    def _release(self, op: Release, states: set[frozenset[str]], frame: _Frame, facts: Facts, out: list[Alive]) -> None:
        if op.kind == "groups":
            covered: tuple[str, ...] = ("main", "draft")
        elif frame.manager_roles is not None:
            covered = frame.manager_roles
        else:
            covered = (op.role or "main",)
        for state in states:
            for role in sorted(state & set(covered)):
                out.append(Alive(role, op, frame.door_site or op.site, facts, covered, frame.manager))

    # -- doors
    def _lineage(self, cls: ClassDoors) -> list[ClassDoors]:
        """The class, then every scanned class it inherits from, breadth first (the order a call on
        ``self`` finds a method in)."""
        found, todo = [cls], list(cls.bases)
        while todo:
            base = self.classes.get(todo.pop(0))
            if base is not None and all(base is not c for c in found):
                found.append(base)
                todo.extend(base.bases)
        return found

    def owns_graphs(self, cls: ClassDoors) -> bool:
        """The class or a base it inherits from destroys some model's graphs."""
        return any(c.owns_graphs for c in self._lineage(cls))

    def roles(self, cls: ClassDoors) -> set[str]:
        """The models the class or its bases name (whose graphs it can hold)."""
        return {role for c in self._lineage(cls) for role in c.roles}

    def doors(self, cls: ClassDoors) -> list[str]:
        """Entry points: methods no method of the class calls (helpers are followed from their callers)."""
        called = {op.method for ops in cls.methods.values() for op in walk(ops) if isinstance(op, CallSelf)}
        return [m for m in cls.methods if m not in called and not m.startswith("__")]

    def check_class(self, cls: ClassDoors) -> Iterator[Verdict]:
        """Each (door, model) with live graphs at a release once: the earliest such door call, the
        first path that shows it, and every door call that releases under them, on any path."""
        named = self.roles(cls)
        for door in self.doors(cls):
            found: dict[str, Verdict] = {}
            for facts in all_facts(self.draft_graphs):
                main = facts.main and not cls.draft_owner and "main" in named
                start = frozenset(
                    r for r, on in (("main", main), ("draft", facts.mtp and facts.draft and "draft" in named)) if on
                )
                out: list[Alive] = []
                self._run(cls.methods[door], {start}, _Frame(cls, None, None, None, 0), facts, out)
                for alive in out:
                    verdict = found.setdefault(alive.role, Verdict(door, alive, set(), set(), []))
                    if alive.door_site.line < verdict.first.door_site.line:
                        verdict.first = alive  # the earliest door call in the source
                    if alive.door_site not in verdict.sites:
                        verdict.sites.append(alive.door_site)
                    verdict.kinds.add(alive.release.kind)
                    if alive.release.kind == "weights":
                        verdict.models.update(alive.models)
            yield from found.values()


@dataclass
class Verdict:
    """One FDC103 finding: the first release under live graphs seen at a door call, and what that
    call releases over all paths (weights of which models, groups)."""

    door: str
    first: Alive
    kinds: set[str]
    models: set[str]
    sites: list[Site]
