"""Why the store believes an entry: its history, its verdicts, its producer and its sources.

``explain`` answers "why do you believe this" for one entry from what is signed, never from
what a file merely says: every commit that changed it (``Store.log``, the history ``log``
prints) with trust before -> after, signer and the verdict it recorded, each verdict checked
again against the policy of the commit's parent (as the audit judges it); the producing
ledger ref resolved to the signed tool call behind it; and each source resolved to the
commit, entry or call it names. A ref that cannot be checked says so (``unresolvable``), and
one that fails its checks is ``refused`` -- neither is ever shown as trusted.

The run ledger is a floor above this one, so ``explain`` is handed its resolver
(``runs.ledger.resolve_call``) by the facade. ``whytext`` renders the answer for a terminal
and for a pull-request comment.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pygit2

from ..errors import EntryError, NotFound, TrussError, UsageError
from ..format import entryfile
from ..format.trailers import parse_trailers
from ..format.views import entry_view
from ..git.gitstore import Snapshot
from ..model import Entry
from ..trust.verdict import Verdict, check_verdict

if TYPE_CHECKING:
    from ..store.store import Store

__all__ = ["LedgerCalls", "explain", "history", "resolve_ref"]

# (run id, call number) -> what the run's signed ledger says that call was, with a status
# (``runs.ledger.resolve_call``).
LedgerCalls = Callable[[str, int], dict[str, Any]]

_RUN_REF = re.compile(r"^run:(?P<run>[^/\s]+)/(?P<seq>\d{1,12})$")


def explain(store: Store, entry: Entry, snap: Snapshot, calls: LedgerCalls) -> dict[str, Any]:
    """``{"entry", "history", "produced_by", "sources"}`` for ``entry`` as read at ``snap``."""
    produced = entry.provenance.produced_by
    return {
        "entry": entry_view(entry, full=True),
        "history": history(store, entry),
        "produced_by": {
            "ref": produced,
            "resolved": resolve_ref(store, snap, produced, calls, wrote=entry.id)
            if produced
            else _unresolvable("none", "the entry names nothing that produced it"),
        },
        "sources": [
            {"ref": ref, "resolved": resolve_ref(store, snap, ref, calls)}
            for ref in entry.provenance.sources
        ],
    }


# -- history ---------------------------------------------------------------------------------


def history(store: Store, entry: Entry) -> list[dict[str, Any]]:
    """Each commit that changed the entry, oldest first: op, trust from -> to, signer and
    the verdict it recorded (checked), from ``Store.log``."""
    repo = store.git.repo
    out: list[dict[str, Any]] = []
    for item in store.log(entry.id):
        commit = repo[item.commit]
        assert isinstance(commit, pygit2.Commit)
        parent = commit.parents[0] if commit.parents else None
        fields = parse_trailers(commit.message)
        out.append(
            {
                "commit": item.commit,
                "op": item.op,
                "from": _trust_at(repo, parent, entry.path),
                "to": item.trust,
                "signer": item.signer,
                "verdict": _verdict(store, commit, parent, fields, item.verdict),
                "time": item.time,
                "reason": item.reason,
            }
        )
    return out


def _trust_at(repo: pygit2.Repository, commit: pygit2.Commit | None, path: str) -> str | None:
    """The entry's trust in ``commit`` (None: not there yet)."""
    if commit is None:
        return None
    snap = Snapshot(repo, commit)
    data = snap.read(path)
    if data is None:
        return None
    try:
        return entryfile.parse(data, path).trust.value
    except EntryError:
        return "unreadable"


def _verdict(
    store: Store,
    commit: pygit2.Commit,
    parent: pygit2.Commit | None,
    fields: Mapping[str, list[str]],
    verdict_id: str | None,
) -> dict[str, Any] | None:
    """The verdict a commit recorded (``Truss-Verdict``), found where the commit put it --
    the front matter of the entry it decided, or a demotion's ``Truss-Verdict-Json``
    trailer -- and checked against the policy of the commit's parent."""
    if not verdict_id:
        return None
    recorded = None
    for raw in fields.get("Truss-Verdict-Json", []):
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("verdict_id") == verdict_id:
            recorded = data
    if recorded is None:
        snap = Snapshot(store.git.repo, commit)
        for decided in fields.get("Truss-Entry", []):
            try:
                found = store.get(decided, snap).provenance.verified_by
            except TrussError:
                continue
            if found and found.get("verdict_id") == verdict_id:
                recorded = dict(found)
                break
    if recorded is None:
        return {
            "verdict_id": verdict_id,
            "valid": False,
            "problem": (
                f"commit {str(commit.id)[:12]} names verdict {verdict_id[:12]}, but no file "
                "or trailer it wrote records that verdict"
            ),
        }
    out: dict[str, Any] = {
        "verdict_id": verdict_id,
        "entry": recorded.get("entry"),
        "outcome": recorded.get("outcome"),
        "signer": recorded.get("signer"),
        "time": recorded.get("time"),
        "quorum": recorded.get("quorum"),
        "policy": recorded.get("policy"),
        "votes": [
            {
                "reviewer": v.get("reviewer"),
                "kind": v.get("kind"),
                "vote": v.get("vote"),
                "evidence": v.get("evidence"),
            }
            for v in recorded.get("votes") or []
            if isinstance(v, Mapping)
        ],
    }
    try:
        verdict = Verdict.from_dict(recorded)  # refuses one edited after signing
        policy = store.policy(Snapshot(store.git.repo, parent or commit))
        check_verdict(verdict, verdict.entry, verdict.outcome, policy)
    except TrussError as exc:
        out.update(valid=False, problem=exc.message)
    else:
        out.update(valid=True, problem=None)
    return out


# -- ledger refs -----------------------------------------------------------------------------


def resolve_ref(
    store: Store, snap: Snapshot, ref: str, calls: LedgerCalls, *, wrote: str | None = None
) -> dict[str, Any]:
    """What ``ref`` names, checked: ``{"status", "type", "detail", ...}``.

    ``status`` is ``verified`` (signed and checked), ``refused`` (there, but fails its
    checks), ``unresolvable`` (nothing here to check it against) or, for an entry, its trust.
    ``wrote``: the entry that names ``ref`` as its producer; a call that did not write it
    is refused (anyone can type a ``produced_by``; only the ledger says what a call wrote).
    """
    run = _RUN_REF.match(ref)
    if run:
        return _run_call(run["run"], int(run["seq"]), calls, wrote)
    if re.fullmatch(r"git:[0-9a-f]{4,64}", ref):
        return _git(store, snap, ref[len("git:") :])
    if ref.startswith("event:"):
        return _unresolvable(
            "event",
            "an external event (memory.train's source); this store keeps no record of it "
            "beyond this ref",
        )
    return _unresolvable("unknown", f"'{ref}' is not a ledger ref this store can resolve")


def _unresolvable(kind: str, detail: str) -> dict[str, Any]:
    return {"status": "unresolvable", "type": kind, "detail": detail}


def _run_call(run: str, seq: int, calls: LedgerCalls, wrote: str | None) -> dict[str, Any]:
    found = {"type": "memory_tool_call", **calls(run, seq)}
    if found["status"] != "verified":
        return found
    where = f"call #{seq} of run {run} ({found.get('tool')}), signed by {found.get('signer')}"
    produced = list(found.get("produced") or [])
    if wrote is not None and wrote not in produced:
        found["status"] = "refused"
        made = ", ".join(p[:12] for p in produced) or "nothing"
        found["detail"] = (
            f"{where}, wrote {made}, not this entry: its produced_by is only the entry's claim"
        )
        return found
    found["detail"] = where + ("; it wrote this entry" if wrote is not None else "")
    return found


def _git(store: Store, snap: Snapshot, name: str) -> dict[str, Any]:
    """A commit of this repository by id or prefix; failing that, an entry by id or prefix."""
    repo = store.git.repo
    commit = None
    with contextlib.suppress(KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
        commit = repo.revparse_single(name).peel(pygit2.Commit)
    if isinstance(commit, pygit2.Commit):
        signer = store._signer_of(commit)
        fields = parse_trailers(commit.message)
        tip = snap.commit
        on_branch = tip is not None and (
            tip.id == commit.id or repo.descendant_of(tip.id, commit.id)
        )
        ok = signer != "unsigned" and not signer.startswith("INVALID")
        subject = commit.message.splitlines()[0] if commit.message else ""
        return {
            "status": "verified" if ok else "refused",
            "type": "commit",
            "commit": str(commit.id),
            "subject": subject,
            "op": next(iter(fields.get("Truss-Op", [])), None),
            "entries": list(fields.get("Truss-Entry", [])),
            "signer": signer,
            "on_branch": on_branch,
            "detail": f"commit {str(commit.id)[:12]} ({subject}), "
            + (f"signed by {signer}" if ok else f"not signed by an allowed key: {signer}")
            + ("" if on_branch else "; it is not on the store's branch"),
        }
    try:
        named = store.get(name, snap)
    except (NotFound, UsageError):
        return _unresolvable("git", f"{name} names no commit and no entry in this store")
    except EntryError as exc:
        return {"status": "refused", "type": "entry", "detail": exc.message}
    return {
        "status": named.trust.value,
        "type": "entry",
        "id": named.id,
        "kind": named.kind.value,
        "key": named.key,
        "trust": named.trust.value,
        "detail": f"entry {named.id[:12]} {named.kind.value}/{named.key}, {named.trust.value}",
    }
