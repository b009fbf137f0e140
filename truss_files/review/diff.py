"""The semantic change set of a range: what a reviewer of a memory pull request needs to see.

Not lines but beliefs: entries added (kind, key, body), trust transitions with the verdict
behind each (outcome, reviewers and their votes, who signed), supersede links, identity and
policy amendments, and the audit's violations for the same range. ``ChangeSet.to_dict`` is
the JSON; ``render`` makes text and markdown of it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pygit2

from ..errors import EntryError, TrussError, UsageError
from ..format.entryfile import parse
from ..format.proposal import CORE_PATH, SELF_PATH
from ..format.trailers import parse_trailers
from ..git.gitstore import GitStore, Snapshot
from ..model import LEGAL_TRANSITIONS, Entry, Trust
from ..signing.keyless import claimed
from ..signing.trustpolicy import (
    CONFIG_PATH,
    GIT_NAMESPACE,
    SIGNERS_PATH,
    TRUSTED_ROOT_PATH,
    TrustPolicy,
    is_store_path,
)
from ..trust.audit import audit
from .textconv import reviewers, verdict_line

# The audit's rules that make a trust move illegitimate.
_MOVE_RULES = frozenset({"transition", "verdict", "lands-unverified", "entry"})


@dataclass(frozen=True)
class VerdictInfo:
    verdict_id: str
    outcome: str
    signer: str
    quorum: str
    policy: str
    reviewers: tuple[str, ...]
    summary: str
    # (reviewer, kind, vote, note): the note is the vote's own why, when it gave one.
    votes: tuple[tuple[str, str, str, str], ...] = ()
    # A keyless verdict: (identity, issuer, log index) its sigstore bundle names.
    keyless: tuple[str, str, int | None] | None = None

    @classmethod
    def of(cls, verdict: Mapping[str, Any] | None) -> VerdictInfo | None:
        if not verdict:
            return None
        return cls(
            verdict_id=str(verdict.get("verdict_id", "")),
            outcome=str(verdict.get("outcome", "")),
            signer=str(verdict.get("signer", "")),
            quorum=str(verdict.get("quorum", "")),
            policy=str(verdict.get("policy", "")),
            reviewers=tuple(reviewers(verdict)),
            summary=verdict_line(verdict),
            votes=tuple(_vote(v) for v in verdict.get("votes") or [] if isinstance(v, Mapping)),
            keyless=_keyless(verdict.get("bundle")),
        )


def _keyless(bundle: Any) -> tuple[str, str, int | None] | None:
    if not isinstance(bundle, Mapping):
        return None
    return claimed(bundle)


def _vote(vote: Mapping[str, Any]) -> tuple[str, str, str, str]:
    evidence = vote.get("evidence")
    note = ""
    if isinstance(evidence, Mapping):
        for name in ("note", "rationale", "reason", "command"):
            if evidence.get(name):
                note = str(evidence[name])
                break
    return (
        str(vote.get("reviewer", "?")),
        str(vote.get("kind", "?")),
        str(vote.get("vote", "?")),
        note,
    )


@dataclass(frozen=True)
class CommitInfo:
    id: str
    op: str
    signer: str
    subject: str


@dataclass(frozen=True)
class Added:
    id: str
    kind: str
    key: str
    trust: str
    layer: str
    author: str
    produced_by: str | None
    body: str
    signer: str


@dataclass(frozen=True)
class Transition:
    id: str
    kind: str
    key: str
    before: str  # "new" for an entry added in the range
    after: str
    verdict: VerdictInfo | None
    signer: str
    commit: str
    reason: str
    body: str = ""
    superseded_by: str | None = None
    legal: bool = True  # False: the audit or the trust arrows refuse this move
    path: str = ""


@dataclass(frozen=True)
class Supersede:
    new: str
    old: str
    kind: str
    key: str


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str  # A, M or D
    area: str  # identity, principal or policy
    signer: str
    diff: str
    # For identity/core.md and identity/self.md: the amendment that made the change, e.g.
    # "identity-approve of proposal 5b0c8f3e9d7a" (the last such commit in the range).
    amendment: str = ""


@dataclass(frozen=True)
class Problem:
    path: str
    message: str


@dataclass(frozen=True)
class ChangeSet:
    range: str
    base: str | None
    head: str
    commits: tuple[CommitInfo, ...]
    added: tuple[Added, ...]
    transitions: tuple[Transition, ...]
    supersedes: tuple[Supersede, ...]
    files: tuple[FileChange, ...]
    problems: tuple[Problem, ...]
    violations: tuple[dict[str, str], ...]
    audited: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def resolve_range(git: GitStore, rev_range: str) -> tuple[pygit2.Commit | None, pygit2.Commit]:
    """``A..B`` (B against A), ``A...B`` (B against their merge base) or ``A`` (HEAD against A)."""
    text = rev_range.strip()
    if not text:
        raise UsageError("give a range like main..HEAD (or origin/main...HEAD for a PR)")
    if "..." in text:
        a, _, b = text.partition("...")
        head = git.commit(b or "HEAD")
        other = git.commit(a or "HEAD")
        base_id = git.repo.merge_base(other.id, head.id)
        if base_id is None:
            raise UsageError(f"{a} and {b} share no history; give a two-dot range instead")
        return git.repo[base_id].peel(pygit2.Commit), head
    if ".." in text:
        a, _, b = text.partition("..")
        base, head = git.commit(a or "HEAD"), git.commit(b or "HEAD")
        if base.id != head.id and git.repo.descendant_of(base.id, head.id):
            # Read backwards, every entry added since would show as deleted: say so instead.
            raise UsageError(
                f"{text} runs backwards: {b or 'HEAD'} is older than {a or 'HEAD'}; give "
                f"{b or 'HEAD'}..{a or 'HEAD'}"
            )
        return base, head
    return git.commit(text), git.commit("HEAD")


def change_set(
    git: GitStore,
    rev_range: str,
    *,
    root: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ChangeSet:
    base, head = resolve_range(git, rev_range)
    repo = git.repo
    signers: dict[str, str] = {}
    commits, touched = _walk(repo, base, head, signers)
    by_id = {c.id: c for c in commits}

    def last(path: str) -> tuple[str, CommitInfo | None]:
        ids = touched.get(path) or []
        info = by_id.get(ids[-1]) if ids else None
        return (info.signer if info else "?"), info

    old_snap = Snapshot(repo, base)
    new_snap = Snapshot(repo, head)
    added: list[Added] = []
    transitions: list[Transition] = []
    links: dict[tuple[str, str], Supersede] = {}
    files: list[FileChange] = []
    problems: list[Problem] = []
    for status, path in _store_changes(old_snap, new_snap):
        signer, info = last(path)
        if not path.startswith("memories/"):
            change = _file_change(old_snap, new_snap, status, path, signer)
            if path in (CORE_PATH, SELF_PATH) and info is not None:
                change = dataclasses.replace(change, amendment=_amendment(repo, info))
            files.append(change)
            continue
        if status == "D":
            problems.append(Problem(path, "deleted; store history only grows"))
            continue
        try:
            new = parse(new_snap.read(path) or b"", path)
            old = parse(old_snap.read(path) or b"", path) if status == "M" else None
        except EntryError as exc:
            problems.append(Problem(path, exc.message))
            continue
        commit = info.id if info else ""
        reason = _reason(repo, touched.get(path) or [])
        if old is None:
            added.append(
                Added(
                    new.id,
                    new.kind.value,
                    new.key,
                    new.trust.value,
                    new.layer.value,
                    new.author,
                    new.provenance.produced_by,
                    new.body,
                    signer,
                )
            )
        if _moved(old, new):
            transitions.append(
                Transition(
                    new.id,
                    new.kind.value,
                    new.key,
                    old.trust.value if old else "new",
                    new.trust.value,
                    VerdictInfo.of(new.provenance.verified_by),
                    signer,
                    commit,
                    reason,
                    new.body,
                    new.superseded_by,
                    _legal(old.trust if old else Trust.UNVERIFIED, new.trust, touched, by_id, path),
                    path,
                )
            )
        for pair in _links(old, new):
            links[pair] = Supersede(pair[0], pair[1], new.kind.value, new.key)

    violations: tuple[dict[str, str], ...] = ()
    notes: list[str] = []
    audited = 0
    try:
        spec = f"{base.id}..{head.id}" if base is not None else str(head.id)
        report = audit(git, spec, root=root, environ=environ)
        violations = tuple(dataclasses.asdict(v) for v in report.violations)
        audited = report.checked
        notes.extend(report.notes)
    except TrussError as exc:
        notes.append(f"audit not run: {exc.message}")
    # A move the audit refuses (a forbidden arrow, a missing or forged verdict) is no
    # promotion, whatever the file now says.
    flagged = {
        v["path"]
        for v in violations
        if v["rule"] in _MOVE_RULES or v["rule"].startswith("sigstore-")
    }
    transitions = [
        dataclasses.replace(t, legal=False) if t.path in flagged else t for t in transitions
    ]
    return ChangeSet(
        range=rev_range,
        base=str(base.id) if base is not None else None,
        head=str(head.id),
        commits=tuple(commits),
        added=tuple(added),
        transitions=tuple(transitions),
        supersedes=tuple(links.values()),
        files=tuple(files),
        problems=tuple(problems),
        violations=violations,
        audited=audited,
        notes=tuple(notes),
    )


def _amendment(repo: pygit2.Repository, info: CommitInfo) -> str:
    """How an identity file was amended: the op, and the proposal or verdict behind it."""
    commit = repo[info.id]
    assert isinstance(commit, pygit2.Commit)
    fields = parse_trailers(commit.message)
    text = info.op or "an unlabelled commit"
    if fields.get("Truss-Proposal"):
        text += f" of proposal {fields['Truss-Proposal'][0][:12]}"
    if fields.get("Truss-Verdict"):
        text += f" on verdict {fields['Truss-Verdict'][0][:12]}"
    if fields.get("Truss-Reverts"):
        text += f" of {fields['Truss-Reverts'][0][:12]}"
    return text


def _moved(old: Entry | None, new: Entry) -> bool:
    if old is None:
        return new.trust is not Trust.UNVERIFIED
    return old.trust is not new.trust or old.provenance.verified_by != new.provenance.verified_by


def _legal(
    before: Trust,
    after: Trust,
    touched: Mapping[str, list[str]],
    by_id: Mapping[str, CommitInfo],
    path: str,
) -> bool:
    """Whether the range's net move can be walked along the trust arrows (an entry added in
    the range starts unverified); back along an arrow only where a revert touched it. The
    audit's verdict on each commit is applied on top (see ``change_set``)."""
    if after in _reachable_from(before):
        return True
    reverted = any(by_id[c].op == "revert" for c in touched.get(path, []) if c in by_id)
    return reverted and before in _reachable_from(after)


def _reachable_from(state: Trust) -> set[Trust]:
    reached, todo = {state}, [state]
    while todo:
        current = todo.pop()
        for a, b in LEGAL_TRANSITIONS:
            if a is current and b not in reached:
                reached.add(b)
                todo.append(b)
    return reached


def _links(old: Entry | None, new: Entry) -> list[tuple[str, str]]:
    """(newer, older) pairs this version of the entry records that the old one did not."""
    pairs = []
    if new.supersedes and (old is None or old.supersedes != new.supersedes):
        pairs.append((new.id, new.supersedes))
    if new.superseded_by and (old is None or old.superseded_by != new.superseded_by):
        pairs.append((new.superseded_by, new.id))
    return pairs


def _reason(repo: pygit2.Repository, commit_ids: list[str]) -> str:
    for cid in reversed(commit_ids):
        commit = repo[cid]
        assert isinstance(commit, pygit2.Commit)
        found = parse_trailers(commit.message).get("Truss-Reason")
        if found:
            return found[0]
    return ""


def _store_changes(old: Snapshot, new: Snapshot) -> list[tuple[str, str]]:
    assert new.tree is not None
    diff = new.tree.diff_to_tree(swap=True) if old.tree is None else old.tree.diff_to_tree(new.tree)
    out = []
    for delta in diff.deltas:
        status = delta.status_char()
        path = delta.old_file.path if status == "D" else delta.new_file.path
        if is_store_path(path):
            out.append((status, path))
    return sorted(out, key=lambda item: item[1])


def _walk(
    repo: pygit2.Repository,
    base: pygit2.Commit | None,
    head: pygit2.Commit,
    signers: dict[str, str],
) -> tuple[list[CommitInfo], dict[str, list[str]]]:
    """The range's commits, oldest first, and the commits that changed each store path.

    A merge is credited only with what it changed against every parent (a path whose blob
    equals another parent's came from that side, and its own commit is in the range too).
    """
    walker = repo.walk(head.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    if base is not None:
        walker.hide(base.id)
    commits: list[CommitInfo] = []
    touched: dict[str, list[str]] = {}
    for commit in walker:
        cid = str(commit.id)
        fields = parse_trailers(commit.message)
        info = CommitInfo(
            cid,
            (fields.get("Truss-Op") or [""])[0],
            _signer(repo, commit, signers),
            commit.message.splitlines()[0] if commit.message else "",
        )
        commits.append(info)
        snap = Snapshot(repo, commit)
        parents = [Snapshot(repo, p) for p in commit.parents] or [Snapshot(repo, None)]
        for _status, path in _store_changes(parents[0], snap):
            if any(p.blob_id(path) == snap.blob_id(path) for p in parents[1:]):
                continue
            touched.setdefault(path, []).append(cid)
    return commits, touched


def _signer(repo: pygit2.Repository, commit: pygit2.Commit, cache: dict[str, str]) -> str:
    """The principal who signed, judged by the parent's policy (the root by its own)."""
    cid = str(commit.id)
    if cid in cache:
        return cache[cid]
    signature, payload = commit.gpg_signature
    if signature is None:
        cache[cid] = "unsigned"
        return cache[cid]
    snap = Snapshot(repo, commit.parents[0] if commit.parents else commit)
    try:
        policy = TrustPolicy.from_files(
            snap.read(SIGNERS_PATH), snap.read(CONFIG_PATH), snap.read(TRUSTED_ROOT_PATH)
        )
        principal, _ = policy.check_signature(
            signature.decode("ascii", "replace"), payload, GIT_NAMESPACE, set()
        )
        cache[cid] = principal
    except TrussError as exc:
        cache[cid] = f"INVALID ({exc.message})"
    return cache[cid]


def _file_change(old: Snapshot, new: Snapshot, status: str, path: str, signer: str) -> FileChange:
    if path.startswith("identity/"):
        area = "identity"
    elif path.startswith("principals/"):
        area = "principal"
    else:
        area = "policy"
    before = (old.read(path) or b"").decode("utf-8", "replace").splitlines()
    after = (new.read(path) or b"").decode("utf-8", "replace").splitlines()
    lines = difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", lineterm="")
    return FileChange(path, status, area, signer, "\n".join(lines))
