"""The host hooks: what a host runs at a session's start and end, without a tool call.

    session-start   the context the session starts from, as the host's additionalContext:
                    identity (core, self), the principal, the goals, what changed in verified
                    memory since this agent's last session, and the agent's own notes that
                    still await review (flagged unverified; never another agent's); and, for
                    the person, how many notes await review (systemMessage)
    pre-compact     learn from the transcript so far (``learn.py``)
    session-end     learn from the whole transcript
    stop            note the session's transcript (cheap: the host runs it after every turn),
                    so ``doctor`` can name one that was never learned

Each reads the host's JSON on stdin (Claude Code's: ``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name``, ``source`` …) and prints what the host documents on stdout
(session-start: ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
"additionalContext": "…"}, "systemMessage": "…"}``; the others nothing).

A hook never breaks its host: it exits 0 whatever happens, within its time budget
(``BUDGETS``, below the timeout setup writes for the host; a learn hook's clock stops once
the model has answered, so a write once begun finishes), and writes what went wrong to the
log ``state.py`` keeps, which ``truss-files doctor`` reads.

The agent: ``--agent RUN`` (setup writes it) names the run that stands for the agent in this
project; each session is its own run ``cc-<session_id>``, a child of it. So the agent's
context call reads the delta since its last session and its children's own notes (proven
by signature, ``context/tail.py``), and the session's own call starts it under the agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final

from ...errors import TrussError
from ...format.views import shown
from ...git.gitdir import GitDir
from ...model import Entry, Trust
from .state import host_dir, record_run
from .transcript import CONTEXT_MARK

if TYPE_CHECKING:
    from ...context.assemble import Prefix
    from ...facade import MemoryStore

__all__ = ["BUDGETS", "HOST_HOOKS", "HookArgs", "parse_args", "run_host_hook", "session_text"]

HOST_HOOKS: Final = ("session-start", "pre-compact", "session-end", "stop")
# Seconds a hook may take, under the timeout setup gives the host (setup.HOOK_EVENTS).
BUDGETS: Final = {"session-start": 25.0, "pre-compact": 100.0, "session-end": 100.0, "stop": 8.0}
CONTEXT_CHARS: Final = 9500  # Claude Code keeps at most 10,000 characters of a hook's context
STDIN_LIMIT: Final = 1 << 20
NOTE_CHARS: Final = 1200  # one pending note's share of the context
PENDING_HEAD: Final = (
    "Your own notes from earlier sessions, still awaiting review (UNVERIFIED: not settled; "
    "check before relying on them):"
)


@dataclass(frozen=True)
class HookArgs:
    agent: str | None = None
    principal: str | None = None
    budget: float | None = None


def parse_args(args: Sequence[str]) -> HookArgs:
    """``--agent RUN``, ``--principal P``, ``--budget SECONDS`` (unknown ones are ignored: a
    hook must run whatever a newer setup wrote)."""
    found: dict[str, str] = {}
    items = list(args)
    for i, arg in enumerate(items):
        for name in ("agent", "principal", "budget"):
            if arg == f"--{name}" and i + 1 < len(items):
                found[name] = items[i + 1]
            elif arg.startswith(f"--{name}="):
                found[name] = arg.split("=", 1)[1]
    budget = None
    with contextlib.suppress(ValueError):
        budget = float(found["budget"]) if "budget" in found else None
    return HookArgs(found.get("agent"), found.get("principal"), budget)


class _OutOfTime(Exception):
    pass


class _Partial(Exception):
    """The hook answered the host, but without part of what it should have."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``_OutOfTime`` in this (main) thread after ``seconds``."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise _OutOfTime()

    if not hasattr(signal, "setitimer"):
        yield
        return
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _stop_clock() -> None:
    """No more deadline: what follows (a signed write) finishes once begun."""
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_host_hook(
    name: str,
    args: Sequence[str],
    *,
    store_path: str | None,
    stdin: IO[bytes],
    stdout: IO[str],
    environ: Mapping[str, str],
) -> int:
    """Run host hook ``name``; always 0. What went wrong goes to the log (``state.py``)."""
    opts = parse_args(args)
    folder = host_dir(None, environ)
    try:
        raw = stdin.read(STDIN_LIMIT)
        payload = json.loads(raw or b"{}")
        if not isinstance(payload, dict):
            payload = {}
    except (OSError, ValueError):
        payload = {}
    budget = opts.budget if opts.budget is not None else BUDGETS[name]
    where = _where(store_path, payload)
    with contextlib.suppress(Exception):  # a plain walk up the folders; no store: the user's dir
        folder = host_dir(GitDir.discover(where).path_str, environ)
    if name == "stop":  # after every turn: a note beside the store, which it never opens
        record_run(folder, name, True, "noted the session's transcript", **_session(payload))
        return 0
    try:
        with _deadline(budget):
            store = _open(where)
            folder = host_dir(store.git.git_dir, environ)
            detail, extra = _HOOKS[name](store, payload, opts, folder, stdout)
        record_run(folder, name, True, detail, **extra)
    except _Partial as exc:
        record_run(folder, name, False, str(exc), **_session(payload))
    except _OutOfTime:
        record_run(folder, name, False, f"gave up after {budget:g} s (the host goes on without it)")
    except TrussError as exc:
        record_run(folder, name, False, f"{exc.code}: {exc.message}", **_session(payload))
    except Exception as exc:  # noqa: BLE001 - a hook never breaks its host: a bug is logged
        trace = traceback.format_exc(limit=8)
        record_run(folder, name, False, f"unexpected {type(exc).__name__}: {exc}", trace=trace)
    return 0


def _session(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: payload[k]
        for k in ("session_id", "transcript_path", "cwd", "source")
        if isinstance(payload.get(k), str)
    }


def _where(store_path: str | None, payload: Mapping[str, Any]) -> str:
    cwd = payload.get("cwd")
    return store_path or (cwd if isinstance(cwd, str) and cwd else ".")


def _open(path: str) -> MemoryStore:
    # the facade (pygit2): only once a hook has its input
    from ...config.storeprobe import require_store
    from ...facade import MemoryStore

    store = MemoryStore(path)
    require_store(path)
    store.origin = "cli"
    return store


def session_run(payload: Mapping[str, Any]) -> str | None:
    session = payload.get("session_id")
    if not isinstance(session, str) or not session.strip():
        return None
    return "cc-" + re.sub(r"[^A-Za-z0-9_-]", "-", session.strip())[:120]


# -- session-start ---------------------------------------------------------------------------


def _session_start(
    store: MemoryStore, payload: Mapping[str, Any], opts: HookArgs, folder: Path, out: IO[str]
) -> tuple[str, dict[str, Any]]:
    # a run's prefix (context/): only for session-start
    from ...runs.links import key_principal

    principal = opts.principal or key_principal(store)
    run = session_run(payload)
    agent = opts.agent
    trouble: list[str] = []
    here = mine = None
    if run:
        try:
            here = store.context(run, principal=principal, parent=agent)
        except TrussError as exc:  # a run another key started, say: the context without it
            trouble.append(f"session run {run}: {exc.message}")
            here = store.context(run, principal=principal) if agent else None
    if agent:
        try:
            mine = store.context(agent, principal=principal)
        except TrussError as exc:
            trouble.append(f"agent run {agent}: {exc.message}")
    pending = len(store.list_entries(trust=Trust.UNVERIFIED))
    text = session_text(
        here or mine, mine, agent=agent, run=run, store=str(store.git.workdir or store.git.git_dir)
    )
    answer: dict[str, Any] = {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}
    }
    if pending:
        answer["systemMessage"] = (
            f"truss-files: {pending} memory note{'s' if pending != 1 else ''} await"
            f"{'' if pending != 1 else 's'} review (truss-files review)"
        )
    out.write(json.dumps(answer, ensure_ascii=False) + "\n")
    out.flush()
    changes = len(mine.delta) if mine is not None else 0
    own = sum(len(n) for _r, n in mine.children) if mine is not None else 0
    detail = f"context of {len(text)} characters: {changes} changes, {own} own pending notes"
    if trouble:  # the session still got its context; doctor shows what was left out
        raise _Partial(detail + "; left out: " + "; ".join(trouble))
    return detail, {**_session(payload), "pending": pending, "agent": agent}


def session_text(
    here: Prefix | None, mine: Prefix | None, *, agent: str | None, run: str | None, store: str
) -> str:
    """The additionalContext: identity and goals as of now (the session's own start), the
    delta since the agent's last session and its own pending notes (the agent run's)."""
    # the delta's text (context/): only for session-start
    from ...context.resume import delta_text

    who = f"agent {agent}" if agent else "this agent"
    lines = [
        f"{CONTEXT_MARK} Memory for {who}"
        + (f" (this session: run {run})" if run else "")
        + f", from the store at {store}."
    ]
    body: list[str] = []
    instruction = ""
    if here is not None:
        for layer in here.system:
            if not layer.text:
                continue
            if layer.name == "memory":
                instruction = layer.text
            else:
                body.append(f"## {layer.name}\n{layer.text.strip()}")
        if here.goals:
            body.append(here.goal_text())
    if mine is not None:
        changed = delta_text(mine.delta)
        if changed:
            body.append(changed)
        notes = [n for _r, kids in mine.children for n in kids]
        notes += list(mine.tail)
        if notes:
            body.append("\n".join([PENDING_HEAD, *(_note(n) for n in notes)]))
    if instruction:
        body.append(instruction)
    text = "\n\n".join(lines + body)
    if len(text) > CONTEXT_CHARS:
        text = text[: CONTEXT_CHARS - 60] + "\n[... cut: ask memory_query for the rest]"
    return text


def _note(note: Entry) -> str:
    note = shown(note)
    body = note.body if len(note.body) <= NOTE_CHARS else note.body[:NOTE_CHARS] + " [...]"
    head = f"- [{note.trust.value}] {note.kind.value}/{note.key} ({note.id[:12]}): "
    return head + body.replace("\n", "\n  ")


# -- learning --------------------------------------------------------------------------------


def _learn_hook(
    store: MemoryStore, payload: Mapping[str, Any], opts: HookArgs, folder: Path, _out: IO[str]
) -> tuple[str, dict[str, Any]]:
    # learning (the model's SDK, the panel): only for the hooks that learn
    from ...config.settings import settings_for
    from ...runs.links import key_principal, link_run
    from .learn import learn
    from .transcript import read_transcript

    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        return "no transcript_path in the host's input: nothing to learn", _session(payload)
    run = session_run(payload)
    if run and opts.agent:
        with contextlib.suppress(TrussError):  # already linked (session-start did), or started
            link_run(store, run, opts.agent, key_principal(store))
    transcript = read_transcript(Path(path), "claude-code")
    done = learn(
        store,
        transcript,
        settings=settings_for(store),
        run=run,
        state=folder,
        before_write=_stop_clock,
    )
    detail = (
        f"learned {done.stored} new notes from {done.sent} messages of {path} "
        f"({done.skipped} learned before, {done.dropped_reads} memory reads left out)"
    )
    return detail, {**_session(payload), "stored": done.stored, "run": done.run}


_HOOKS = {
    "session-start": _session_start,
    "pre-compact": _learn_hook,
    "session-end": _learn_hook,
}


def main_stdio(name: str, args: Sequence[str], store_path: str | None) -> int:
    """``run_host_hook`` on this process's stdin and stdout."""
    return run_host_hook(
        name,
        args,
        store_path=store_path,
        stdin=sys.stdin.buffer,
        stdout=sys.stdout,
        environ=os.environ,
    )
