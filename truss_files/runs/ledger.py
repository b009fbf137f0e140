"""The durable run ledger: every memory tool call of a run as one signed commit.

``refs/truss/runs/<run-id>`` is a chain of commits outside the store's branch. Call number
``n`` adds ``calls/<n>.json`` — the ledger entry: tool, memo key, input and result sha256,
error flag, the producing LedgerRef ``run:<id>/<n>`` and the entries the call wrote — and
``memo/<memo key>.json``, the full result, in the same commit: journal entry and memo land in
one transaction, signed by the agent's key and checked before the ref moves (compare-and-swap
on the previous ledger commit).

The first commit names the principal who started the run; every call after it must be
signed by a key of that principal and extend the previous call, counting up without a gap,
and the ref may never move back or sideways from the newest call this repository has seen
(``runchain.py`` holds those rules). A replay trusts a memo only from such a ledger, and only
when the newest commit that claims its memo key holds a ledger entry whose result sha256 the
memo matches. Anything else fails with exactly ``memory memo missing matching signed
provenance``, so a replayed verdict never consumes unsigned or rewound memory output.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    ConflictError,
    NotFound,
    ProvenanceError,
    SignatureError,
    TrussError,
    UsageError,
)
from ..format.trailers import parse_trailers, stamp, trailers
from ..git.gitdir import GitDir
from .chain import (
    Chain,
    Mark,
    check_chain,
    check_mark,
    check_reflog,
    ensure_reflog,
    raise_mark,
    read_mark,
)

if TYPE_CHECKING:
    import pygit2

    from ..store.store import Store
    from .runcontext import RunContext

RUN_REF_PREFIX = "refs/truss/runs/"
CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str) -> str:
    # The id is part of a ref name and of run:<id>/<seq> LedgerRefs (model.check_ledger_ref).
    if not _RUN_ID.match(run_id) or ".." in run_id or run_id.endswith((".lock", ".")):
        raise UsageError(
            f"run id '{run_id}' is not usable; use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. R-7f3a)"
        )
    return run_id


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def memo_key(tool: str, tool_input: Mapping[str, Any]) -> str:
    """Deterministic: the tool's name and its canonical input, without ``revalidate``."""
    logical = {k: v for k, v in tool_input.items() if k != "revalidate"}
    return sha256(b"truss-memo-v1\0" + canonical([tool, logical]))[:32]


def calls_path(seq: int) -> str:
    return f"calls/{seq:08d}.json"


def memo_path(key: str) -> str:
    return f"memo/{key}.json"


@dataclass(frozen=True)
class LedgerEntry:
    """One memory_tool_call: what was asked, what came back (by hash), what it wrote."""

    run: str
    seq: int
    tool: str
    memo_key: str
    input_sha256: str
    result_sha256: str
    error: bool
    produced: tuple[str, ...] = ()
    revalidate: bool = False
    time: str = ""
    call_id: str | None = None  # the provider's tool_use id, when the harness gave one
    replay_of: int | None = None  # answered from the memo recorded by this earlier call

    @property
    def ledger_ref(self) -> str:
        return f"run:{self.run}/{self.seq}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "memory_tool_call",
            "run": self.run,
            "seq": self.seq,
            "ledger_ref": self.ledger_ref,
            "tool": self.tool,
            "memo_key": self.memo_key,
            "input_sha256": self.input_sha256,
            "result_sha256": self.result_sha256,
            "error": self.error,
            "produced": list(self.produced),
            "revalidate": self.revalidate,
            "time": self.time,
            "call_id": self.call_id,
            "replay_of": self.replay_of,
        }

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerEntry:
        raw = json.loads(data)
        return cls(
            run=str(raw["run"]),
            seq=int(raw["seq"]),
            tool=str(raw["tool"]),
            memo_key=str(raw["memo_key"]),
            input_sha256=str(raw["input_sha256"]),
            result_sha256=str(raw["result_sha256"]),
            error=bool(raw["error"]),
            produced=tuple(raw.get("produced") or ()),
            revalidate=bool(raw.get("revalidate", False)),
            time=str(raw.get("time", "")),
            call_id=raw.get("call_id"),
            replay_of=raw.get("replay_of"),
        )


@dataclass(frozen=True)
class Replayed:
    payload: dict[str, Any]
    entry: LedgerEntry
    commit: str


@dataclass(frozen=True)
class CallRecord:
    """One ledger commit as ``runs show`` reports it."""

    entry: LedgerEntry
    commit: str
    signer: str
    memo_matches: bool

    def to_dict(self) -> dict[str, Any]:
        data = self.entry.to_dict()
        data.update(commit=self.commit, signer=self.signer, memo_matches=self.memo_matches)
        return data


@dataclass(frozen=True)
class RunSummary:
    run: str
    calls: int
    tip: str
    updated: str

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "calls": self.calls, "tip": self.tip, "updated": self.updated}


class RunLedger:
    """The ledger of one run in one store."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = check_run_id(run_id)
        self.ref = RUN_REF_PREFIX + run_id
        self._common: Path | None = None
        # One call asks up to three times (replay, next_seq, record): the last answer holds
        # while neither the tip nor the mark moved.
        self._last: tuple[str | None, Mark | None, Chain] | None = None

    @property
    def repo(self) -> pygit2.Repository:
        return self.store.git.repo

    def tip(self) -> pygit2.Commit | None:
        return self.store.git.tip(self.ref)

    def chain(self) -> Iterator[pygit2.Commit]:
        """The ledger's commits, newest first (first parents only)."""
        commit = self.tip()
        while commit is not None:
            yield commit
            commit = commit.parents[0] if commit.parents else None

    def verified(self) -> Chain:
        """The run's ledger as it stands, checked end to end (``runchain.check_chain``) and
        against the newest call this repository saw; raises ProvenanceError."""
        common = self._common_dir()
        for attempt in range(3):
            # The mark before the tip: a mark is written only after its ref moved, so read
            # in this order an honest recorder can never make the tip look older than it.
            mark = read_mark(common, self.run_id)
            tip = self._read_tip()
            if self._last is not None and self._last[:2] == (_id(tip), mark):
                return self._last[2]
            chain = check_chain(self.repo, self.store.policy(), self.run_id, tip)
            check_mark(common, self.ref, chain, mark)
            try:
                check_reflog(self.repo, self.ref, chain)
            except ProvenanceError:
                now = self._read_tip()
                if attempt < 2 and _id(now) != _id(tip):
                    continue  # another recorder moved the ref while we read: look again
                raise
            if chain.links and (mark is None or mark.seq < chain.seq):
                # A repository we may only read (a replay of someone else's clone) can keep
                # no mark; the chain above is verified all the same, and nothing can move
                # the ref from here either.
                with contextlib.suppress(OSError):
                    raise_mark(common, self.run_id, chain.ids[0], chain.seq)
                    mark = Mark(chain.ids[0], chain.seq)
            self._last = (_id(tip), mark, chain)
            return chain
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _common_dir(self) -> Path:
        """Where the mark and the reflog live: beside the refs, which linked work trees share."""
        if self._common is None:
            self._common = GitDir.discover(self.store.git.git_dir).common
        return self._common

    def _read_tip(self) -> pygit2.Commit | None:
        # pygit2 stays off the cold read path this module is on.
        import pygit2

        try:
            return self.tip()
        except pygit2.GitError as exc:
            raise ProvenanceError(
                f"{self.ref} names a commit that cannot be read ({exc}); the object database "
                "was edited or is damaged: run git fsck"
            ) from exc

    def next_seq(self) -> int:
        return self.verified().seq + 1

    # -- recording -----------------------------------------------------------------------

    def record(
        self,
        *,
        seq: int,
        tool: str,
        key: str,
        tool_input: Mapping[str, Any],
        payload: Mapping[str, Any],
        error: bool,
        produced: Iterable[str] = (),
        context: RunContext | None = None,
        call_id: str | None = None,
        replay_of: int | None = None,
        parent: str | None = None,
    ) -> LedgerEntry:
        # Key order is kept (not sorted): a replay hands back the very object the model saw.
        memo = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        entry = LedgerEntry(
            run=self.run_id,
            seq=seq,
            tool=tool,
            memo_key=key,
            input_sha256=sha256(canonical(tool_input)),
            result_sha256=sha256(memo),
            error=error,
            produced=tuple(produced),
            revalidate=tool_input.get("revalidate") is True,
            time=stamp(self.store.clock()),
            call_id=call_id,
            replay_of=replay_of,
        )
        files: dict[str, bytes | None] = {
            calls_path(seq): json.dumps(entry.to_dict(), indent=2, sort_keys=True).encode() + b"\n",
            memo_path(key): memo,
        }
        chain = self.verified()
        base = chain.tip
        principal = self.store.principal()
        extra: dict[str, str] = {}
        if base is None:
            # The first call names who started the run; every later call must be theirs.
            extra["principal"] = principal
            run_info: dict[str, Any] = {
                "run": self.run_id,
                "started": entry.time,
                "principal": principal,
            }
            if context is not None:
                run_info["context"] = context.to_dict()
            if parent is not None:
                run_info["parent"] = parent  # a child run (``runlinks``), in its signed ledger
            files["run.json"] = json.dumps(run_info, indent=2, sort_keys=True).encode() + b"\n"
        elif chain.seq != seq - 1:
            raise ConflictError(
                f"run {self.run_id}'s ledger moved while call {seq} ran (another process is "
                "recording in this run); give each concurrent agent its own run id"
            )
        subject = f"truss: run {self.run_id} #{seq} {tool}" + (" (error)" if error else "")
        if call_id is not None:
            extra["call_id"] = call_id
        if replay_of is not None:
            extra["replay_of"] = str(replay_of)
        message = (
            subject
            + "\n\n"
            + trailers(
                op="tool-call",
                run=self.run_id,
                seq=str(seq),
                tool=tool,
                memo_key=key,
                result=entry.result_sha256,
                error="true" if error else "false",
                **extra,
            )
        )
        git = self.store.git
        tree = git.write_tree(base.tree if base is not None else None, files)
        assert tree is not None
        signer = self.store.signer
        identity = self.store.identity(principal)
        parents = [base.id] if base is not None else []
        oid = git.make_commit(tree, parents, message, signer, identity)
        commit = self.repo[oid]
        # libgit2 runs no hooks: check the ledger with the new call on top before the ref
        # moves (our key, our run's principal, the next number, the previous call as parent).
        known = chain.principal if base is not None else None
        check_chain(self.repo, self.store.policy(), self.run_id, commit, known)  # type: ignore[arg-type]
        common = self._common_dir()
        if base is None:
            ensure_reflog(common, self.ref)
        if not git.update_ref(self.ref, base.id if base is not None else None, oid, subject):
            raise ConflictError(
                f"run {self.run_id}'s ledger moved while call {seq} was being recorded; give "
                "each concurrent agent its own run id"
            )
        raise_mark(common, self.run_id, str(oid), seq)
        return entry

    # -- replaying -----------------------------------------------------------------------

    def replay(
        self, key: str, tool: str, *, required: bool, call_id: str | None = None
    ) -> Replayed | None:
        """The recorded result of a call, verified; None when there is none to replay (and
        not ``required``). Raises ProvenanceError when a memo lacks matching signed provenance.

        With ``call_id`` (a tool_use id) the call recorded under that id is replayed, so a
        resumed transcript sees each observation in its place; without one, the newest call
        with this memo key. The newest call's memo is the memo table's (the ledger tip); an
        older call's memo is the one its own commit recorded before a replacement.
        """
        chain = self.verified()
        newest = found = None
        seq = 0  # the found call's number
        for depth, link in enumerate(chain.links):
            claims = key in link.fields.get("Truss-Memo-Key", [])
            if claims and newest is None:
                newest = link
            if call_id is not None:
                if call_id in link.fields.get("Truss-Call-Id", []):
                    found, seq = link, chain.seq - depth
                    if not claims:
                        raise ProvenanceError(
                            f"call {call_id} of run {self.run_id} was recorded with another "
                            "input; the transcript diverged from the ledger"
                        )
                    break
            elif claims:
                found, seq = link, chain.seq - depth
                break
        if found is None:
            if required and call_id is None:
                raise ProvenanceError(f"run {self.run_id} has no recorded call with memo {key}")
            return None
        target = chain.commit(found.id)
        entry = _entry_at(self.repo, target, seq)
        wrong = (entry.memo_key, entry.tool, entry.run, entry.seq) != (key, tool, self.run_id, seq)
        if wrong:
            raise ProvenanceError(f"ledger entry {entry.ledger_ref} is for another call")
        # The memo table is the verified tip's tree, not the ref read again (it may move).
        source = chain.commit(chain.links[0].id) if newest is found else target
        try:
            memo = _blob(self.repo, source, memo_path(key))
        except KeyError as exc:
            raise ProvenanceError(f"the memo for {entry.ledger_ref} is missing") from exc
        if sha256(memo) != entry.result_sha256:
            raise ProvenanceError(
                f"the memo for {entry.ledger_ref} hashes to {sha256(memo)[:12]}, but its signed "
                f"ledger entry says {entry.result_sha256[:12]}"
            )
        try:
            payload = json.loads(memo)
        except ValueError as exc:
            raise ProvenanceError(f"the memo for {entry.ledger_ref} is not JSON") from exc
        return Replayed(payload, entry, str(target.id))

    def _check_signed(self, commit: pygit2.Commit) -> str:
        """The principal of an agent key that signed ``commit``; raises SignatureError."""
        signature, payload = commit.gpg_signature
        if signature is None:
            raise SignatureError(
                f"ledger commit {str(commit.id)[:12]} of run {self.run_id} is unsigned"
            )
        policy = self.store.policy()
        principal, _ = policy.check_signature(
            signature.decode("ascii", "replace"), payload, "git", {"agent"}
        )
        return principal

    # -- reading for people --------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Whether a replay would trust this ledger, for people: ``{"ok", "principal"}`` or
        ``{"ok": false, "problem"}`` naming the rule it breaks."""
        try:
            chain = self.verified()
        except ProvenanceError as exc:
            return {"ok": False, "problem": exc.detail}
        return {"ok": True, "principal": chain.principal, "calls": chain.seq}

    def records(self) -> list[CallRecord]:
        tip = self.tip()
        if tip is None:
            raise NotFound(f"no run '{self.run_id}' in this store; list runs with `runs list`")
        out = []
        for commit in self.chain():
            try:
                entry = _entry_at(self.repo, commit, _seq_of(commit))
            except TrussError:
                continue
            try:
                signer = self._check_signed(commit)
            except TrussError as exc:
                signer = f"INVALID ({exc.message})"
            try:
                memo = _blob(self.repo, tip, memo_path(entry.memo_key))
                latest = sha256(memo) == entry.result_sha256
            except (KeyError, TrussError):
                latest = False
            out.append(CallRecord(entry, str(commit.id), signer, latest))
        return list(reversed(out))


def list_runs(store: Store) -> list[RunSummary]:
    repo = store.git.repo
    out = []
    for name in repo.references:
        if not name.startswith(RUN_REF_PREFIX):
            continue
        tip = store.git.tip(name)
        if tip is None:
            continue
        when = datetime.datetime.fromtimestamp(tip.commit_time, datetime.UTC)
        out.append(
            RunSummary(
                run=name[len(RUN_REF_PREFIX) :],
                calls=_seq_of(tip),
                tip=str(tip.id),
                updated=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        )
    return sorted(out, key=lambda r: (r.updated, r.run))


def _trailers(commit: pygit2.Commit) -> dict[str, list[str]]:
    return parse_trailers(commit.message)


def _id(commit: pygit2.Commit | None) -> str | None:
    return str(commit.id) if commit is not None else None


def _seq_of(commit: pygit2.Commit) -> int:
    values = _trailers(commit).get("Truss-Seq", [])
    if not values or not values[0].isdigit():
        return 0
    return int(values[0])


def _entry_at(repo: pygit2.Repository, commit: pygit2.Commit, seq: int) -> LedgerEntry:
    """The entry of call ``seq`` in ledger commit ``commit``; ProvenanceError if unreadable."""
    try:
        return LedgerEntry.from_bytes(_blob(repo, commit, calls_path(seq)))
    except (KeyError, ValueError, TypeError) as exc:
        raise ProvenanceError(
            f"ledger commit {str(commit.id)[:12]} holds no readable ledger entry"
        ) from exc


def _blob(repo: pygit2.Repository, commit: pygit2.Commit, path: str) -> bytes:
    """The blob at ``path`` in ``commit``'s tree; KeyError when absent."""
    # pygit2 stays off the cold read path this module is on.
    import pygit2

    try:
        obj = repo[commit.tree[path].id]
    except pygit2.GitError as exc:
        # libgit2 checks an object's hash as it reads it: an edited blob lands here.
        raise ProvenanceError(
            f"{path} of ledger commit {str(commit.id)[:12]} cannot be read ({exc}); the object "
            "database was edited or is damaged: run git fsck"
        ) from exc
    data = getattr(obj, "data", None)
    if data is None:
        raise KeyError(path)
    return bytes(data)


def resolve_call(store: Store, run_id: str, seq: int) -> dict[str, Any]:
    """What call ``seq`` of run ``run_id`` was, as far as its signed ledger vouches for it.

    ``{"status": "verified", ...the ledger entry, "commit", "signer"}`` when the run's ledger
    passes every check a replay would make (``RunLedger.verified``) and holds that call;
    ``{"status": "refused", "detail", "claimed"}`` when a ledger is there but fails them
    (tampered, unsigned, rolled back) or has no such call -- ``claimed`` is what the
    unverified commit says, for a person to look at, never to believe; ``{"status":
    "unresolvable", "detail"}`` when this store keeps no ledger for the run at all.
    """
    try:
        ledger = RunLedger(store, run_id)
    except UsageError as exc:
        return {"status": "unresolvable", "detail": exc.message}
    try:
        present = ledger.tip() is not None
    except TrussError as exc:
        return {"status": "refused", "detail": exc.message, "claimed": None}
    if not present:
        return {
            "status": "unresolvable",
            "detail": (
                f"this store keeps no ledger for run {run_id} ({ledger.ref}): the run was not "
                "durable (--durable), or its ledger was not fetched (git fetch origin "
                f"'{RUN_REF_PREFIX}*:{RUN_REF_PREFIX}*'); nothing signed vouches for the call"
            ),
        }
    try:
        chain = ledger.verified()
        if not 1 <= seq <= chain.seq:
            raise ProvenanceError(
                f"run {run_id}'s signed ledger has {chain.seq} call(s); #{seq} is not one of them"
            )
        commit = chain.at(seq)
        entry = _entry_at(ledger.repo, commit, seq)
        if (entry.run, entry.seq) != (run_id, seq):
            raise ProvenanceError(f"ledger entry {entry.ledger_ref} is for another call")
    except ProvenanceError as exc:
        return {"status": "refused", "detail": exc.detail, "claimed": _claimed(ledger, seq)}
    found: dict[str, Any] = {"status": "verified", **entry.to_dict()}
    found.update(commit=str(commit.id), signer=chain.principal)
    return found


def _claimed(ledger: RunLedger, seq: int) -> dict[str, Any] | None:
    """What the ledger's commits say call ``seq`` was, unchecked (``records``), or None."""
    try:
        records = ledger.records()
    except TrussError:
        return None
    for record in records:
        if record.entry.seq == seq:
            return record.to_dict()
    return None
