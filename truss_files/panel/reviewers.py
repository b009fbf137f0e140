"""Reviewers: the pluggable voices of the verification panel.

A ``Reviewer`` looks at a ``Subject`` (the entry, the workspace it runs in, and for an
arbitration the verified rival) and returns a ``Ballot``: PASS, FAIL or ABSTAIN with evidence.

- ``CheckReviewer`` runs a shell command in the checkout; exit 0 is PASS, any other exit is
  FAIL — except what says nothing about the entry: a timeout, death by a signal, or the shell
  failing to find or run the command (126/127), which abstain.
- ``RefusedCheck`` stands for a name in an entry's ``checks:`` that truss.toml does not
  define (or command text): nothing runs, and it abstains saying why (trust/authority.py).
- ``JudgeReviewer`` runs an external command that reads the entry as JSON on stdin and
  answers ``{"vote": "PASS"|"FAIL", "rationale": "..."}`` on stdout. A hang, a crash, a
  non-zero exit or anything but that object is an abstention with the reason — never a PASS.
- ``ModelJudge`` (modeljudge.py) asks a model through its provider's SDK; ``build.py`` makes
  the right one from a configured ``ReviewerSpec``.

Evidence lands in a signed verdict and then in the entry's YAML front matter, so it holds
only integers and short printable one-line strings (which survive YAML exactly), and never a
command's output — only its sha256, because output may echo secrets from the environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..format.quorum import ABSTAIN, FAIL, PASS, VOTES
from ..format.views import entry_view

if TYPE_CHECKING:
    from ..model import Entry
    from .workspace import Workspace

DEFAULT_TIMEOUT = 600.0
MAX_ANSWER = 1 << 20  # a judge's stdout beyond this is not an answer
MAX_TEXT = 500
_SHELL = "/bin/sh"


@dataclass(frozen=True)
class Ballot:
    """One reviewer's vote. ``detail`` is for the person at the terminal and is never signed
    or stored (it may hold command output)."""

    reviewer: str
    kind: str
    vote: str
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""
    required: bool = False  # a requirement: it must PASS besides the quorum (format/quorum.py)

    def to_vote(self) -> dict[str, Any]:
        vote: dict[str, Any] = {
            "reviewer": self.reviewer,
            "kind": self.kind,
            "vote": self.vote,
            "evidence": {**self.evidence, "reason": self.reason},
        }
        if self.required:
            vote["required"] = True
        return vote


@dataclass(frozen=True)
class Subject:
    """What a reviewer judges. ``task`` is ``review`` or ``arbitrate`` (then ``rival`` is the
    verified entry holding the same key, and PASS means the new entry should replace it)."""

    entry: Entry
    workspace: Workspace
    task: str = "review"
    rival: Entry | None = None


class Reviewer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def review(self, subject: Subject) -> Ballot: ...


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """Printable, single-line, bounded: what survives YAML front matter byte for byte."""
    out = "".join(ch if ch.isprintable() else " " for ch in text)
    out = " ".join(out.split())
    return out if len(out) <= limit else out[: limit - 1] + "…"


@dataclass(frozen=True)
class RunResult:
    exit_status: int | None
    signal: str | None
    timed_out: bool
    duration_ms: int
    output_sha256: str
    output_bytes: int
    stdout: bytes
    tail: str
    error: str | None = None

    def evidence(self, command: str, commit: str | None) -> dict[str, Any]:
        found: dict[str, Any] = {
            "command": clean_text(command),
            "exit_status": self.exit_status,
            "signal": self.signal,
            "duration_ms": self.duration_ms,
            "output_sha256": self.output_sha256,
            "output_bytes": self.output_bytes,
            "commit": commit,
        }
        return {k: v for k, v in found.items() if v is not None}

    def failure(self, timeout: float) -> str | None:
        """Why this run says nothing about the entry (a reason to abstain), or None."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {timeout:g} s (killed)"
        if self.signal:
            return f"killed by {self.signal}"
        code = self.exit_status
        if code is not None and 128 < code <= 128 + 64:
            # The shell reports a child killed by signal N as exit 128+N: a crash (an OOM
            # kill, a segfault), not evidence about the entry.
            return f"exit {code}: a process it ran was killed by {_signal_name(code - 128)}"
        return None


def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    stdin: bytes = b"",
    merge_stderr: bool = True,
) -> RunResult:
    """Run ``command`` with ``sh -c`` in its own process group; kill the group when it exits
    or times out, so nothing it started outlives its vote."""
    with tempfile.TemporaryDirectory(prefix="truss-run-") as tmp:
        in_path, out_path, err_path = (Path(tmp) / n for n in ("in", "out", "err"))
        in_path.write_bytes(stdin)
        start = time.monotonic()
        with open(in_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            held = _Held()
            try:
                proc = subprocess.Popen(
                    [_SHELL, "-c", command],
                    cwd=cwd,
                    env=dict(env),
                    stdin=fin,
                    stdout=fout,
                    stderr=fout if merge_stderr else ferr,
                    start_new_session=True,
                )
            except OSError as exc:
                held.release()
                return RunResult(None, None, False, 0, _sha256(b""), 0, b"", "", str(exc))
            except BaseException:
                held.release()
                raise
            timed_out = _wait(proc, timeout, held)
            duration = int((time.monotonic() - start) * 1000)
        digest, size, head = _digest(out_path)
        tail = _tail(out_path if merge_stderr else err_path)
    code = proc.returncode
    sig = None
    if code is not None and code < 0:
        sig, code = _signal_name(-code), None
    return RunResult(
        exit_status=None if timed_out else code,
        signal=None if timed_out else sig,
        timed_out=timed_out,
        duration_ms=duration,
        output_sha256=digest,
        output_bytes=size,
        stdout=head,
        tail=tail,
    )


class _Held:
    """^C and SIGTERM held back while a child starts: an interrupt inside ``Popen`` would
    lose the handle of a child already running, which then outlives its vote. Released —
    and re-raised — once the wait that kills the child on any exit has begun."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return  # handlers only ever run in the main thread
        previous: dict[int, Any] = {int(s): signal.getsignal(s) for s in self.SIGNALS}
        if any(h is None for h in previous.values()):
            return  # installed from C: we could not put it back
        self.previous = previous
        for s in self.SIGNALS:
            signal.signal(s, self._hold)

    def _hold(self, signum: int, _frame: Any) -> None:
        self.pending.append(signum)

    def release(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}
        for s in self.pending:
            signal.raise_signal(s)
        self.pending = []


def _wait(proc: subprocess.Popen[bytes], timeout: float, held: _Held) -> bool:
    """Wait without reaping (the group id stays ours), kill the group, then reap."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    timed_out = False
    try:
        held.release()
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    finally:
        # Also on KeyboardInterrupt: a check in its own session would not get the ^C.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return timed_out


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(path: Path) -> tuple[str, int, bytes]:
    """sha256 and size of a file read in chunks (output may be large), and its head."""
    digest = hashlib.sha256()
    size = 0
    head = b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 16):
            if size <= MAX_ANSWER:
                head += chunk[: MAX_ANSWER + 1 - size]
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size, head


def _tail(path: Path, size: int = 2000) -> str:
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - size))
        return fh.read().decode("utf-8", "replace")


def _env_for(subject: Subject) -> dict[str, str]:
    extra = {
        "TRUSS_ENTRY_ID": subject.entry.id,
        "TRUSS_ENTRY_KIND": subject.entry.kind.value,
        "TRUSS_ENTRY_KEY": subject.entry.key,
    }
    if subject.workspace.commit:
        extra["TRUSS_COMMIT"] = subject.workspace.commit
    return subject.workspace.env(extra)


@dataclass(frozen=True)
class CheckReviewer:
    """A machine check: ``command``'s exit status is the vote."""

    command: str
    timeout: float = DEFAULT_TIMEOUT
    label: str | None = None
    kind: str = "check"

    @property
    def name(self) -> str:
        return clean_text(self.label or self.command, 200)

    def review(self, subject: Subject) -> Ballot:
        return self.run(subject.workspace, _env_for(subject))

    def run(self, ws: Workspace, env: Mapping[str, str]) -> Ballot:
        """Run the check in ``ws`` with ``env``: the vote on any subject (an entry, an
        identity proposal)."""
        result = run_command(self.command, cwd=ws.checkout(), env=env, timeout=self.timeout)
        evidence = result.evidence(self.command, ws.commit)
        broken = result.failure(self.timeout)
        if broken is not None:
            return Ballot(self.name, self.kind, ABSTAIN, broken, evidence, result.tail)
        code = result.exit_status
        if code == 0:
            return Ballot(self.name, self.kind, PASS, "exit 0", evidence, result.tail)
        if code in (126, 127):
            why = "not found" if code == 127 else "not executable"
            reason = f"exit {code}: the shell reports the command {why}; fix the check"
            return Ballot(self.name, self.kind, ABSTAIN, reason, evidence, result.tail)
        return Ballot(self.name, self.kind, FAIL, f"exit {code}", evidence, result.tail)


@dataclass(frozen=True)
class RefusedCheck:
    """A name in an entry's ``checks:`` that runs nothing (``authority.resolve_check`` found
    no command for it in truss.toml): it abstains with the reason, never passes."""

    check: str
    refusal: str
    kind: str = "check"

    @property
    def name(self) -> str:
        return clean_text(self.check, 200)

    def review(self, subject: Subject) -> Ballot:
        reason = clean_text(self.refusal)
        return Ballot(self.name, self.kind, ABSTAIN, reason, {"check": self.name})


def entry_document(entry: Entry) -> dict[str, Any]:
    """The entry as a judge reads it: the full view, with provenance and checks."""
    data = entry_view(entry, full=True)
    data["checks"] = list(entry.checks)
    return data


ARBITRATE_QUESTION = (
    "Two entries claim the same kind and key. 'rival' is verified; 'entry' has just passed "
    "review. Vote PASS if 'entry' should replace 'rival' (the rival turns stale), FAIL if "
    "'rival' should stand (the entry is rejected)."
)


@dataclass(frozen=True)
class JudgeReviewer:
    """A no-stake review by an external command: entry JSON in, a JSON vote out."""

    command: str
    timeout: float = DEFAULT_TIMEOUT
    label: str | None = None
    kind: str = "judge"

    @property
    def name(self) -> str:
        return clean_text(self.label or self.command, 200)

    def request(self, subject: Subject) -> dict[str, Any]:
        data: dict[str, Any] = {
            "task": subject.task,
            "entry": entry_document(subject.entry),
            "commit": subject.workspace.commit,
        }
        if subject.rival is not None:
            data["rival"] = entry_document(subject.rival)
            data["question"] = ARBITRATE_QUESTION
        data["answer_with"] = {"vote": "PASS | FAIL", "rationale": "why, in a sentence or two"}
        return data

    def review(self, subject: Subject) -> Ballot:
        stdin = json.dumps(self.request(subject), ensure_ascii=False).encode()
        return self.ask(subject.workspace, stdin, _env_for(subject))

    def ask(self, ws: Workspace, stdin: bytes, env: Mapping[str, str]) -> Ballot:
        """Run the judge in ``ws`` on the request ``stdin``; its answer is the vote."""
        result = run_command(
            self.command,
            cwd=ws.checkout(),
            env=env,
            timeout=self.timeout,
            stdin=stdin,
            merge_stderr=False,
        )
        evidence = result.evidence(self.command, ws.commit)
        broken = result.failure(self.timeout)
        if broken is None and result.exit_status != 0:
            broken = f"exited {result.exit_status}"
        if broken is None:
            vote, rationale, problem = parse_answer(result.stdout)
            if problem is None:
                evidence["rationale"] = rationale
                # The reason a person reads in verify's votes is the judge's own why.
                reason = rationale or f"judge voted {vote} and gave no rationale"
                return Ballot(self.name, self.kind, vote, reason, evidence)
            broken = problem
        return Ballot(self.name, self.kind, ABSTAIN, broken, evidence, result.tail)


def parse_answer(stdout: bytes) -> tuple[str, str, str | None]:
    """``(vote, rationale, None)`` for a well-formed answer, else ``("", "", problem)``."""
    if len(stdout) > MAX_ANSWER:
        return "", "", f"answer is over {MAX_ANSWER} bytes"
    text = stdout.decode("utf-8", "replace").strip()
    if not text:
        return "", "", "no answer on stdout"
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "", "", f"answer is not JSON: {clean_text(text, 80)!r}"
    if not isinstance(data, dict):
        return "", "", "answer is not a JSON object"
    vote = data.get("vote")
    if not isinstance(vote, str) or vote.strip().upper() not in VOTES:
        return "", "", f"answer has no vote PASS or FAIL (got {clean_text(repr(vote), 60)})"
    rationale = data.get("rationale", "")
    if not isinstance(rationale, str):
        return "", "", "answer's rationale is not a string"
    return vote.strip().upper(), clean_text(rationale), None
