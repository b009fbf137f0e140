"""The audit: the store's rules, one function shared by the library, the CLI and hooks.

Each commit that touches the store is judged by the policy of its first parent (the root by
its own): it is signed by an allowed key whose principal holds the role its changes need;
every entry file parses, sits at its path and matches its id; new entries land unverified;
a new entry in the team or enterprise layer, or in another's name, is signed by a trainer
(``authority.write_problems``: rules ``layer-role`` and ``author``);
trust moves only along the trust state machine (a revert only back one step); every move to
verified or rejected carries a panel-signed verdict for exactly that id; identity core,
roles and signers change only under an operator; identity self and its proposals change as
the identity policy in force at the parent allows, and a principal's file only under that
principal's key or an operator's (see ``check_identity``); no store file is deleted; store files are
plain files (no gitlink, no symlink); a body stays within the one limit writes keep. A merge
is judged against each of its parents (see ``check_commit``): what it does not take cleanly
from one parent is its own change of belief -- except the join of two clones' adds of one
entry, which changes no belief and needs only the agent role (``_joined_adds``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import pygit2

from ..errors import EntryError, KeylessError, TrussError, UsageError
from ..format import entryfile
from ..format.join import is_join
from ..format.proposal import (
    APPLIED,
    CORE_PATH,
    PENDING,
    SELF_PATH,
    Proposal,
    core_label,
    is_proposal_path,
    principal_of_path,
)
from ..format.proposal import parse as parse_proposal
from ..format.secrets import Allow
from ..format.trailers import parse_trailers
from ..git.gitdamage import missing_object
from ..git.gitstore import GitStore, Snapshot
from ..model import LEGAL_TRANSITIONS, Entry, Kind, Trust, entry_path
from ..signing import verify
from ..signing.trustpolicy import (
    CONFIG_PATH,
    GIT_NAMESPACE,
    SIGNERS_PATH,
    TRUSTED_ROOT_PATH,
    TrustPolicy,
    is_store_path,
)
from . import authority
from .attest import note_problems, read_notes
from .erasures import REWRITTEN_FROM, Erasures, erasure_problems
from .leaks import allow_at, leaks
from .trustroot import find_root, pinned_root
from .verdict import Verdict, check_verdict

OPERATOR_PATHS = (CONFIG_PATH, SIGNERS_PATH, TRUSTED_ROOT_PATH, CORE_PATH)
# The files a commit's children are judged by (the parent's policy).
POLICY_PATHS = (SIGNERS_PATH, CONFIG_PATH, TRUSTED_ROOT_PATH)


@dataclass(frozen=True)
class Violation:
    commit: str
    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.commit[:12]} {self.path or '-'}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class AuditReport:
    root: str
    checked: int
    violations: tuple[Violation, ...]
    notes: tuple[str, ...] = ()
    # Entries the history adds holding a credential (rule ``secret``, trust/leaks.py), with
    # ``audit(secrets=True)``. Not violations: the read gate, which weighs ``ok``, keeps
    # serving verified memory, and the remedy (demote, reject, erase) stays possible.
    secrets: tuple[Violation, ...] = ()

    @property
    def ok(self) -> bool:
        """The history keeps the store's rules (what the read gate asks)."""
        return not self.violations

    @property
    def clean(self) -> bool:
        """Nothing to report at all: ``ok``, and no stored credential (``truss-files audit``
        exits 0)."""
        return not self.violations and not self.secrets


class _Policies:
    """Policies by the blob ids of allowed_signers and truss.toml: most commits share one."""

    def __init__(self, repo: pygit2.Repository, erasures: Erasures | None = None) -> None:
        self.repo = repo
        # The operator-signed erasure records of the audited tip (trust/erasures.py).
        self.erasures = erasures or Erasures()
        self.cache: dict[tuple[str | None, ...], TrustPolicy] = {}
        # Commit id -> the (allowed_signers, truss.toml) its children are judged by, where
        # that differs from its tree: a key smuggled in without an operator's signature must
        # not make what it later signs look trusted.
        self.held: dict[str, tuple[bytes | None, ...]] = {}
        self.held_cache: dict[tuple[bytes | None, ...], TrustPolicy] = {}
        self.spent = _Spent(repo)  # the verdicts spent so far, walked with the policies

    def of(self, snap: Snapshot) -> TrustPolicy:
        held = self.held.get(snap.oid or "")
        if held is not None:
            if held not in self.held_cache:
                self.held_cache[held] = TrustPolicy.from_files(*held)
            return self.held_cache[held]
        key = tuple(snap.blob_id(path) for path in POLICY_PATHS)
        if key not in self.cache:
            self.cache[key] = TrustPolicy.from_files(*(snap.read(path) for path in POLICY_PATHS))
        return self.cache[key]

    def _effective(self, snap: Snapshot) -> tuple[bytes | None, ...]:
        held = self.held.get(snap.oid or "")
        return held if held is not None else tuple(snap.read(path) for path in POLICY_PATHS)

    def carry(self, commit: pygit2.Commit, found: list[Violation]) -> None:
        """Record the policy ``commit``'s children are judged by: a policy file changed by a
        commit that failed the signature or role rules keeps its earlier content, and a merge
        that takes a policy file from a parent takes what that parent was judged to hold."""
        if not commit.parents:
            return
        parents = [Snapshot(self.repo, p) for p in commit.parents]
        snap = Snapshot(self.repo, commit)
        tainted = any(v.rule in ("signed", "role", "policy") for v in found)
        if not tainted and not any((p.oid or "") in self.held for p in parents):
            return  # the common case: the tree's own files are the policy
        after = []
        for n, path in enumerate(POLICY_PATHS):
            if tainted:
                after.append(self._effective(parents[0])[n])
                continue
            source = next((p for p in parents if p.blob_id(path) == snap.blob_id(path)), None)
            after.append(self._effective(source)[n] if source is not None else snap.read(path))
        if tuple(after) != tuple(snap.read(path) for path in POLICY_PATHS):
            self.held[str(commit.id)] = tuple(after)


def audit(
    git: GitStore,
    rev_range: str | None = None,
    *,
    root: str | None = None,
    environ: Mapping[str, str] | None = None,
    start_audited: bool = False,
    on_commit: Callable[[str, int, int], None] | None = None,
    attestations: bool = True,
    secrets: bool = False,
) -> AuditReport:
    """Audit ``rev_range`` (``A..B``, one commit, or the branch) from the trust root.

    ``start_audited``: the caller has audited the history of ``A`` clean from this root
    already (the read gate's record), so ``B`` descends from the root when it descends from
    ``A``, which a walk of ``A..B`` alone shows. ``on_commit(commit id, checked, total)``
    follows a long audit (once with 0 first). ``attestations``: also verify the sigstore
    notes on the commits (refs/notes/truss-sigstore). ``secrets``: also name each entry the
    range adds that holds a credential (``AuditReport.secrets``; the operator's ``[secrets]
    allow`` at the audited tip applies), each entry text scanned once.
    """
    env = os.environ if environ is None else environ
    repo = git.repo
    notes: list[str] = []
    root_id = root or pinned_root(repo, env)
    if root_id is None:
        found = find_root(git)
        if found is None:
            raise UsageError(f"{git.git_dir} holds no truss store (no {SIGNERS_PATH})")
        root_id = str(found.id)
        notes.append(
            f"trust root not pinned; trusting the first store commit {root_id[:12]}. Pin it "
            f"with `git config truss.root {root_id}` or TRUSS_ROOT"
        )
    root_commit = git.commit(root_id)
    start, end = _split_range(rev_range)
    if start:  # a name that is not there (a shallow clone, a mistyped base): said, not a bug
        start = str(git.commit(start).id)
    tip = git.commit(end) if end else git.tip()
    if tip is None:
        raise UsageError("the branch has no commits yet")
    violations: list[Violation] = []
    checked = 0
    if not _descends(repo, tip, root_commit, start, start_audited=start_audited):
        violations.append(
            Violation(str(tip.id), "", "trust-root", f"does not descend from root {root_id[:12]}")
        )
        return AuditReport(root_id, 0, tuple(violations), tuple(notes))
    commits: Iterable[pygit2.Commit] = _commits(repo, tip, root_commit, start)
    walked: list[pygit2.Commit] = []
    if secrets:
        commits = walked = list(commits)
    if on_commit is not None:
        commits = _counted(list(commits), on_commit)
    erasures = Erasures.at(repo, tip)
    for broken in check_commits(
        repo, commits, root_id, attestations=attestations, erasures=erasures
    ):
        checked += 1
        violations.extend(broken)
    leaked: list[Violation] = []
    if secrets:
        allow, seen = allow_at(tip), set[pygit2.Oid]()
        for commit in walked:
            leaked += secret_violations(repo, commit, allow, seen)
    return AuditReport(root_id, checked, tuple(violations), tuple(notes), tuple(leaked))


def secret_violations(
    repo: pygit2.Repository,
    commit: pygit2.Commit,
    allow: Allow | None = None,
    seen: set[pygit2.Oid] | None = None,
) -> list[Violation]:
    """Rule ``secret``: each entry ``commit`` adds that holds a credential (trust/leaks.py),
    named by path, id and kind, never the value. ``allow``: the operator's exceptions (by
    default those of the commit's first parent, the policy it is judged by)."""
    if allow is None:
        allow = allow_at(commit.parents[0] if commit.parents else commit)
    return [
        Violation(str(commit.id), leak.path, "secret", leak.message())
        for leak in leaks(repo, commit, allow, seen)
    ]


def check_commits(
    repo: pygit2.Repository,
    commits: Iterable[pygit2.Commit],
    root: str | None,
    *,
    attestations: bool = True,
    erasures: Erasures | None = None,
) -> Iterator[list[Violation]]:
    """The violations of each commit in turn (parents before children): a policy change that
    failed the rules stays out of the policy its descendants are judged by. ``erasures``: the
    operator-signed erasure records of the tip the commits lead to (``Erasures.at``); without
    them a rewritten commit is refused."""
    policies = _Policies(repo, erasures)
    notes = read_notes(repo) if attestations else {}
    for commit in commits:
        is_root = root is not None and str(commit.id) == root
        broken = check_commit(repo, commit, is_root, policies)
        if not is_root:
            policies.carry(commit, broken)
        note = notes.get(str(commit.id))
        if note is not None:
            broken.extend(check_note(repo, commit, note, policies))
        yield broken


def check_note(
    repo: pygit2.Repository,
    commit: pygit2.Commit,
    note: pygit2.Oid,
    policies: _Policies | None = None,
) -> list[Violation]:
    """The violations of the sigstore attestation (a git note) on ``commit``, judged by the
    policy in force once the commit is made -- the one its children are judged by (a policy
    change that broke the rules does not count) -- so the commit that pins a trusted root or
    names an attester can itself be attested."""
    policies = policies or _Policies(repo)
    try:
        policy = policies.of(Snapshot(repo, commit))
    except TrussError as exc:
        return [Violation(str(commit.id), "", "policy", f"no policy to judge its note by: {exc}")]
    return [
        Violation(str(commit.id), "", rule, f"{message} (note in refs/notes/truss-sigstore)")
        for rule, message in note_problems(repo, str(commit.id), note, policy)
    ]


def _descends(
    repo: pygit2.Repository,
    tip: pygit2.Commit,
    root: pygit2.Commit,
    start: str | None,
    *,
    start_audited: bool,
) -> bool:
    """``tip`` is ``root`` or has it in its history.

    ``descendant_of`` walks the whole history down to the root, which
    would dwarf auditing a range of a few new commits. With a range start,
    ``start..tip`` is walked first: the root among those commits settles it, and so does
    ``start`` being a parent of one of them (or the tip itself) when ``start`` is known to
    descend from the root. Anything else takes the whole walk."""
    if tip.id == root.id:
        return True
    if start:
        try:
            first = repo.revparse_single(start).peel(pygit2.Commit).id
        except (KeyError, ValueError, pygit2.GitError):
            first = None
        if first is not None:
            walker = repo.walk(tip.id)
            walker.hide(first)
            reaches = tip.id == first
            for commit in walker:
                if commit.id == root.id:
                    return True
                reaches = reaches or first in commit.parent_ids
            if reaches and (start_audited or first == root.id):
                return True
    return bool(repo.descendant_of(tip.id, root.id))


def _counted(
    commits: list[pygit2.Commit], on_commit: Callable[[str, int, int], None]
) -> Iterator[pygit2.Commit]:
    on_commit("", 0, len(commits))
    for n, commit in enumerate(commits, start=1):
        yield commit  # resumed once the commit has been checked
        on_commit(str(commit.id), n, len(commits))


def _split_range(rev_range: str | None) -> tuple[str | None, str | None]:
    if not rev_range:
        return None, None
    if ".." in rev_range:
        a, _, b = rev_range.partition("..")
        return a or None, b or None
    return None, rev_range


def _commits(
    repo: pygit2.Repository, tip: pygit2.Commit, root: pygit2.Commit, start: str | None
) -> Iterator[pygit2.Commit]:
    walker = repo.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    for parent in root.parents:
        walker.hide(parent.id)
    if start:
        walker.hide(repo.revparse_single(start).peel(pygit2.Commit).id)
    yield from walker


def _diff(repo: pygit2.Repository, a: pygit2.Tree | None, b: pygit2.Tree) -> list[tuple[str, str]]:
    """(status, path) for every changed store path; status is A, M or D."""
    diff = b.diff_to_tree(swap=True) if a is None else a.diff_to_tree(b)
    out = []
    for delta in diff.deltas:
        status = delta.status_char()
        if status == "R":  # renames are off by default; keep both sides honest anyway
            out.append(("D", delta.old_file.path))
            out.append(("A", delta.new_file.path))
            continue
        path = delta.new_file.path if status != "D" else delta.old_file.path
        if is_store_path(path):
            out.append((status, path))
    return out


_GITLINK = int(pygit2.enums.FileMode.COMMIT)


class _Known(Snapshot):
    """A commit's snapshot that knows the changed paths' blobs from one tree diff, so a
    check of a commit with a million entries reads each blob once, by id, and looks no path
    up in a tree (a path not in the diff still is: the policy files, a rival's entry)."""

    def __init__(
        self,
        repo: pygit2.Repository,
        commit: pygit2.Commit | None,
        known: dict[str, tuple[int, pygit2.Oid]],
    ) -> None:
        super().__init__(repo, commit)
        self.known = known

    def _obj(self, path: str) -> pygit2.Object | None:
        found = self.known.get(path)
        if found is None:
            return super()._obj(path)
        if found[0] == _GITLINK:
            return None
        try:
            return self.repo[found[1]]
        except KeyError as exc:  # the tree names it, no pack or file holds it
            raise missing_object(self.repo.path, str(found[1])) from exc

    def mode_blob(self, path: str) -> tuple[int, str] | None:
        found = self.known.get(path)
        return (found[0], str(found[1])) if found is not None else None


def _one_walk(
    repo: pygit2.Repository,
    base: pygit2.Commit | None,
    commit: pygit2.Commit,
    vouched: Vouched | None = None,
) -> tuple[list[tuple[str, str]], _Known, _Known, int]:
    """``_diff`` of ``base``..``commit``, and both sides as snapshots that know each changed
    path's mode and blob from that same diff; and how many added files ``vouched`` covers,
    which are left out of all three (a million-entry import holds none of them here)."""
    a = base.tree if base is not None else None
    if vouched is not None and vouched.whole(a, commit):
        return [], _Known(repo, base, {}), _Known(repo, commit, {}), len(vouched.blobs)
    diff = commit.tree.diff_to_tree(swap=True) if a is None else a.diff_to_tree(commit.tree)
    before: dict[str, tuple[int, pygit2.Oid]] = {}
    after: dict[str, tuple[int, pygit2.Oid]] = {}
    out = []
    covered = 0
    for delta in diff.deltas:
        status = delta.status_char()
        old, new = delta.old_file, delta.new_file
        if (
            status == "A"
            and vouched is not None
            and vouched.covers(new.path, (int(new.mode), str(new.id)))
        ):
            covered += 1
            continue
        if status != "A":
            before[old.path] = (int(old.mode), old.id)
        if status != "D":
            after[new.path] = (int(new.mode), new.id)
        if status == "R":  # renames are off by default; keep both sides honest anyway
            out.append(("D", old.path))
            out.append(("A", new.path))
            continue
        path = new.path if status != "D" else old.path
        if is_store_path(path):
            out.append((status, path))
    return out, _Known(repo, base, before), _Known(repo, commit, after), covered


@dataclass(frozen=True)
class Vouched:
    """Entry files a writer of this process made itself from entries it checked as it made
    them (a bulk import): ``blobs`` maps each path to the blob it wrote there.

    Such a writer refused, entry by entry, what the check of an added entry file finds (an
    entry that does not land unverified, or names no provenance where truss.toml requires
    one), and the file is ``serialize`` of the entry it checked, which parses back to it. So
    ``check_commit`` takes an added path holding exactly the vouched blob as checked, without
    reading it again: the check of a million-entry import commit made by this process costs
    one tree diff. The layer and author rule reads only an entry's layer and author; it is
    judged on ``samples``, one entry of each (layer, author) pair the writer made.
    The audit of history (``audit``) never vouches: it reads every file."""

    blobs: Mapping[str, pygit2.Oid]
    samples: tuple[Entry, ...] = ()
    # The tree the writer built (``tree``) on ``base``: when a commit's tree is that tree and
    # its parent's is ``base``, each file it changes is one of ``blobs`` (git made the tree
    # from exactly those files on that base), so no diff is walked to find them.
    base: pygit2.Tree | None = None
    tree: pygit2.Oid | None = None

    def covers(self, path: str, found: tuple[int, str] | None) -> bool:
        """``found`` (a tree's mode and id at ``path``) is the plain file vouched for."""
        blob = self.blobs.get(path)
        return blob is not None and found == (_PLAIN, str(blob))

    def whole(self, parent: pygit2.Tree | None, commit: pygit2.Commit) -> bool:
        """``commit`` on a parent of tree ``parent`` changes only the vouched files."""
        if self.tree is None or commit.tree_id != self.tree:
            return False
        before = self.base.id if self.base is not None else None
        return (parent.id if parent is not None else None) == before


def samples_of(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """One slim entry per (layer, author) pair of ``entries``: all ``Vouched`` keeps of them."""
    seen: dict[tuple[object, str], Entry] = {}
    for entry in entries:
        seen.setdefault((entry.layer, entry.author), _slim(entry))
    return tuple(seen.values())


def check_commit(
    repo: pygit2.Repository,
    commit: pygit2.Commit,
    is_root: bool,
    policies: _Policies | None = None,
    vouched: Vouched | None = None,
) -> list[Violation]:
    """Every violation one commit makes, judged by its first parent's policy.

    A merge is a change of belief relative to each of its parents. A path it takes cleanly
    from one parent — that parent's version, where the other parent still holds the version
    of their merge base — was judged in that parent's own history. Every other change is the
    merge's own and is judged like any commit's: against the first parent (signature, roles,
    entries, transitions, verdicts) and against each other parent it changes a file of
    (transitions, verdicts, no deletion): a second parent cannot roll a belief back.
    """
    policies = policies or _Policies(repo)
    policies.spent.start(commit)
    cid = str(commit.id)
    parents = list(commit.parents)
    base = Snapshot(repo, parents[0] if parents else None)
    snap = Snapshot(repo, commit)
    joined: set[str] = set()
    vouched_adds = False  # added files checked by their writer (Vouched): they need agent
    if is_root or len(parents) < 2:
        diffed, base, snap, covered = _one_walk(
            repo, parents[0] if parents else None, commit, vouched
        )
        changes: list[tuple[str, str, Snapshot]] = [(s, path, base) for s, path in diffed]
        vouched_adds = covered > 0
    else:
        sides = [Snapshot(repo, p) for p in parents]
        changes = _merge_changes(repo, snap, sides)
        joined = _joined_adds(repo, snap, sides, changes)
    erasing = REWRITTEN_FROM + ": " in commit.message or bool(policies.erasures.originals)
    if not changes and not erasing and not vouched_adds:
        return []
    out: list[Violation] = []

    def bad(path: str, rule: str, message: str) -> None:
        found = Violation(cid, path, rule, message)
        if found not in out:  # a merge may judge one path against two parents
            out.append(found)

    try:
        policy = policies.of(snap if is_root else base)
    except TrussError as exc:
        bad("", "policy", f"no trust policy to judge this commit by: {exc}")
        return out
    as_signer: tuple[tuple[str, ...], set[str]] | None = None
    if erasing:
        problems, original, original_held = erasure_problems(
            repo, commit, policy, policies.erasures
        )
        for rule, message in problems:
            bad("", rule, message)
        if original is not None and original_held is not None:
            as_signer = (original, original_held)
        if not changes or problems:
            return out

    fields = parse_trailers(commit.message)
    op = (fields.get("Truss-Op") or [""])[0]
    need: set[str] = {"agent"} if vouched_adds else set()
    identity: list[tuple[str, str, Snapshot]] = []
    added: list[tuple[str, Entry]] = []
    for status, path, before in changes:
        if status == "D":
            bad(path, "no-delete", "a store file was deleted; store history only grows")
            continue
        if _odd_file(snap, path, bad):
            need.add("operator" if path in OPERATOR_PATHS else "agent")
            continue
        if path in joined:
            need.add("agent")  # two clones' adds of one entry, joined (_joined_adds)
            continue
        if path in OPERATOR_PATHS or path.startswith(".truss/"):
            need.add("operator")
            continue
        if path.startswith(("identity/", "principals/")):
            # A principal's own key needs no role to write its own file (check_identity).
            if path == CORE_PATH:
                need.add("operator")
            elif not path.startswith("principals/"):
                need.add("agent")
            identity.append((status, path, before))
            continue
        need |= _check_entry(
            repo, before, snap, path, status, op, policy, bad, added, (policies.spent, cid)
        )

    signature, payload = commit.gpg_signature
    if as_signer is not None:
        # A rewritten commit an operator's erasure maps: judged as its original signer.
        principals, held = as_signer
    elif signature is None:
        bad("", "signed", "commit touches the store but is unsigned")
        return out
    else:
        try:
            principals, held = _signer(policy, signature, payload)
        except TrussError as exc:
            bad("", "signed", str(exc))
            return out
    principal = principals[0]
    vouched_for = [(e.path, e) for e in vouched.samples] if vouched is not None else []
    for path, entry in added + vouched_for:
        for rule, message in authority.write_problems(entry, principals, held):
            bad(path, rule, message)
    if is_root:
        need.add("operator")
    if identity:
        check_identity(snap, identity, principal, held, policy, bad)
    missing = _missing_roles(need, held)
    if missing:
        bad(
            "",
            "role",
            f"signed by {principal} ({', '.join(sorted(held)) or 'no role'}); its changes need "
            + " and ".join(missing),
        )
    return out


IDENTITY_POLICIES = ("locked", "propose", "self_amend")  # settings.IDENTITY_POLICIES


def check_identity(
    snap: Snapshot,
    changes: list[tuple[str, str, Snapshot]],
    principal: str,
    held: set[str],
    policy: TrustPolicy,
    bad: Callable[[str, str, str], None],
) -> None:
    """The identity rule: who may change ``identity/`` and ``principals/`` files.

    Operators may change any of them under every policy. Anyone else, by the ``[identity]
    policy`` of the parent commit: ``locked`` -- no change to self.md and no proposal;
    ``propose`` -- proposals (pending, authored by the signer) and nothing more, since only
    an operator approves; ``self_amend`` -- also a proposal passed or failed on a panel
    verdict judged against the parent's core, and self.md only in the commit that passes a
    proposal written against the parent's self.md, set to exactly its text. A principal's
    file is written by that principal's key (whatever its roles) or an operator.
    """
    operator = "operator" in held
    mode = policy.config.get("identity", "policy", "propose")
    if mode not in IDENTITY_POLICIES:
        mode = "locked"  # an unreadable policy is judged as the strictest
    passed: list[Proposal] = []
    self_changed: Snapshot | None = None
    for status, path, before in changes:
        if path.startswith("principals/"):
            owner = principal_of_path(path)
            if owner is None:
                if not operator:
                    bad(path, "principal-path", "principal files are principals/<principal>.md")
            elif owner != principal and not operator:
                bad(
                    path,
                    "principal-owner",
                    f"signed by {principal}; only {owner}'s own key or an operator may write "
                    f"{path}",
                )
            continue
        if path == CORE_PATH:
            continue  # the role rule: operators only
        if path == SELF_PATH:
            self_changed = before
            continue
        if not is_proposal_path(path):
            if not operator:
                bad(
                    path,
                    "identity-path",
                    "identity/ holds core.md, self.md and proposals/<id>.md; only an operator "
                    "may add anything else",
                )
            continue
        found = _proposal_change(snap, before, path, status, principal, operator, mode, policy, bad)
        if found is not None:
            passed.append(found)
    if operator:
        return
    for proposal in passed:
        if snap.read(SELF_PATH) != proposal.text.encode():
            bad(
                proposal.path,
                "identity-verdict",
                "a passed proposal writes its text to identity/self.md in the same commit",
            )
    if self_changed is None:
        return
    if mode == "locked":
        bad(
            SELF_PATH,
            "identity-locked",
            'identity/self.md changed by a non-operator while [identity] policy = "locked"; '
            "only an operator may amend it (truss-files identity set self FILE)",
        )
    elif mode == "propose":
        bad(
            SELF_PATH,
            "identity-approval",
            "identity/self.md changed without an operator's approval ([identity] policy = "
            '"propose"); propose it (truss-files identity propose) and have an operator '
            "approve it",
        )
    elif not any(p.base == (self_changed.blob_id(SELF_PATH) or "") for p in passed):
        bad(
            SELF_PATH,
            "identity-verdict",
            "identity/self.md changed without a panel PASS against core for a proposal of "
            'exactly this text ([identity] policy = "self_amend"); run truss-files verify '
            "--pending",
        )


def _proposal_change(
    snap: Snapshot,
    before: Snapshot,
    path: str,
    status: str,
    principal: str,
    operator: bool,
    mode: str,
    policy: TrustPolicy,
    bad: Callable[[str, str, str], None],
) -> Proposal | None:
    """Check one proposal file's change; the proposal when a non-operator passes it here."""
    try:
        new = parse_proposal(snap.read(path) or b"", path)
    except EntryError as exc:
        bad(path, "identity-proposal", exc.message)
        return None
    if status == "A":
        if new.author != principal:
            bad(path, "identity-proposal", f"authored by {new.author} but signed by {principal}")
        if operator:
            return None
        if new.status != PENDING:
            bad(path, "identity-proposal", f"a new proposal is pending, not {new.status}")
        if mode == "locked":
            bad(path, "identity-locked", '[identity] policy = "locked" takes no proposals')
        return None
    if operator:
        return None
    try:
        old = parse_proposal(before.read(path) or b"", path)
    except EntryError:
        bad(path, "identity-proposal", "changes a proposal file that does not parse")
        return None
    if old.status != PENDING:
        bad(path, "identity-proposal", f"proposal is {old.status}; a decision is final")
        return None
    if new.status in ("approved", "declined"):
        bad(
            path,
            "identity-approval",
            f"proposal {new.status} by {principal}, who is no operator; only an operator "
            "approves or declines (truss-files identity approve|decline ID)",
        )
        return None
    if new.status == PENDING:
        bad(path, "identity-proposal", "a pending proposal does not change")
        return None
    if mode != "self_amend":
        bad(
            path,
            "identity-verdict",
            f'a panel decides proposals only under [identity] policy = "self_amend", not {mode}',
        )
        return None
    outcome = "PASS" if new.status in APPLIED else "FAIL"
    try:
        verdict = Verdict.from_dict(new.verdict or {}, path)
        check_verdict(verdict, new.id, outcome, policy)
    except TrussError as exc:
        bad(path, "identity-verdict", exc.message)
        return None
    if verdict.policy != core_label(before.blob_id(CORE_PATH)):
        bad(path, "identity-verdict", "the verdict was not judged against the parent's core")
        return None
    return new if outcome == "PASS" else None


def _merge_changes(
    repo: pygit2.Repository, snap: Snapshot, parents: list[Snapshot]
) -> list[tuple[str, str, Snapshot]]:
    """(status, path, parent) for each store path a merge itself changes, against that
    parent; paths taken cleanly from another parent are left out."""
    bases: dict[tuple[int, int], Snapshot] = {}

    def merge_base(i: int, j: int) -> Snapshot:
        key = (min(i, j), max(i, j))
        if key not in bases:
            a, b = parents[key[0]].commit, parents[key[1]].commit
            assert a is not None and b is not None
            found = repo.merge_base(a.id, b.id)
            bases[key] = Snapshot(repo, repo[found].peel(pygit2.Commit) if found else None)
        return bases[key]

    out = []
    for i, parent in enumerate(parents):
        assert snap.tree is not None
        for status, path in _diff(repo, parent.tree, snap.tree):
            if i > 0 and status == "A":
                continue  # restoring what this parent deleted: the deletion is its own fault
            mine = _mode_blob(snap, path)
            clean = any(
                _mode_blob(other, path) == mine
                and _mode_blob(parent, path) == _mode_blob(merge_base(i, j), path)
                for j, other in enumerate(parents)
                if j != i
            )
            if not clean:
                out.append((status, path, parent))
    return out


def _joined_adds(
    repo: pygit2.Repository,
    snap: Snapshot,
    parents: list[Snapshot],
    changes: list[tuple[str, str, Snapshot]],
) -> set[str]:
    """The entry files a merge sets to exactly what ``join.is_join`` settles its
    parents' versions to: adds of one entry on two or more sides that no common ancestor
    holds (the same event trained on two clones), joined, or the one side's version its
    panel already reviewed. Each version passed in its own side's history and the result
    loses no review, so such a file needs the agent role only; any other change a merge
    makes to it is judged as before.

    One merge base per pair is enough: store files are never deleted (``no-delete``), so a
    file some common ancestor holds is held by every best common ancestor too."""
    out: set[str] = set()
    bases: dict[tuple[int, int], Snapshot | None] = {}

    def base(i: int, j: int) -> Snapshot | None:
        if (i, j) not in bases:
            a, b = parents[i].commit, parents[j].commit
            found = repo.merge_base(a.id, b.id) if a is not None and b is not None else None
            bases[i, j] = Snapshot(repo, repo[found].peel(pygit2.Commit)) if found else None
        return bases[i, j]

    for path in {path for _, path, _ in changes}:
        if not (path.startswith("memories/") and path.endswith(".md")):
            continue
        holding = [n for n, p in enumerate(parents) if p.read(path) is not None]
        if len(holding) < 2:
            continue
        pairs = [base(i, j) for n, i in enumerate(holding) for j in holding[n + 1 :]]
        if any(found is None or found.read(path) is not None for found in pairs):
            continue
        if is_join(snap.read(path), [parents[n].read(path) or b"" for n in holding], path):
            out.add(path)
    return out


def _mode_blob(snap: Snapshot, path: str) -> tuple[int, str] | None:
    """What a tree holds at ``path``: its file mode and object id, or None."""
    if isinstance(snap, _Known):
        known = snap.mode_blob(path)
        if known is not None:
            return known
    if snap.tree is None:
        return None
    try:
        entry = snap.tree[path]
    except KeyError:
        return None
    return int(entry.filemode), str(entry.id)


_PLAIN = int(pygit2.enums.FileMode.BLOB)
_ODD_MODES = {
    int(pygit2.enums.FileMode.COMMIT): (
        "gitlink",
        "is a gitlink (a submodule entry); store files are plain files. Remove it with "
        "`git rm --cached PATH` and commit",
    ),
    int(pygit2.enums.FileMode.LINK): (
        "symlink",
        "is a symbolic link; store files are plain files. Replace it with the file itself",
    ),
}


def _odd_file(snap: Snapshot, path: str, bad: Callable[[str, str, str], None]) -> bool:
    """Report a store path that is not a plain file (a gitlink or a symlink)."""
    found = _mode_blob(snap, path)
    if found is None or found[0] not in _ODD_MODES:
        return False
    rule, message = _ODD_MODES[found[0]]
    bad(path, rule, message)
    return True


def _signer(
    policy: TrustPolicy, signature: bytes, payload: bytes
) -> tuple[tuple[str, ...], set[str]]:
    """Every principal of the key that made ``signature``, the first as roles_of names it,
    and the roles they hold."""
    key = verify(signature.decode("ascii", "replace"), payload, GIT_NAMESPACE)
    return authority.signer_principals(policy, key)


def _missing_roles(need: set[str], held: set[str]) -> list[str]:
    """Operators may do anything; otherwise each needed role must be held."""
    if "operator" in held:
        return []
    missing = []
    for role in sorted(need):
        if role == "agent" and held & {"agent", "panel"}:
            continue
        if role not in held:
            missing.append(f"the {role} role")
    return missing


def _check_entry(
    repo: pygit2.Repository,
    base: Snapshot,
    snap: Snapshot,
    path: str,
    status: str,
    op: str,
    policy: TrustPolicy,
    bad: object,
    added: list[tuple[str, Entry]] | None = None,
    spending: tuple[_Spent, str] | None = None,
) -> set[str]:
    """The roles a change of one entry file needs; ``added`` collects the entries it adds
    (judged by the layer and author rule once the signer is known); ``spending``: the
    verdicts spent before, and this commit's id."""
    report = bad  # a callable(path, rule, message)
    assert callable(report)
    if not path.startswith("memories/"):
        return set()
    try:
        new = entryfile.parse(snap.read(path) or b"", path)
    except EntryError as exc:
        report(path, "entry", str(exc))
        return {"agent"}
    required = authority.provenance_required(policy.config.raw)
    if status == "A":
        if added is not None:
            added.append((path, _slim(new)))
        if new.trust is not Trust.UNVERIFIED:
            report(path, "lands-unverified", f"a new entry must land unverified, not {new.trust}")
        if required and new.provenance.produced_by is None:
            report(
                path,
                "ledger-ref",
                "a new entry names no LedgerRef (provenance.produced_by is null) under "
                'truss.toml [policy] provenance = "required"; every write names where it '
                "came from (run:R/N, or <face>:<principal> outside a run)",
            )
        return {"agent"}
    try:
        old = entryfile.parse(base.read(path) or b"", path)
    except EntryError:
        old = None
    if old is None:
        return {"panel"}
    # latest-wins: an entry that passes the panel after a newer verified entry took its key
    # is verified and superseded in one promote commit, so it lands stale with its verdict.
    at_once = (Trust.UNVERIFIED, Trust.STALE)
    passed_stale = op == "promote" and (old.trust, new.trust) == at_once and bool(new.superseded_by)
    if old.trust is not new.trust:
        move = (old.trust, new.trust)
        legal = move in LEGAL_TRANSITIONS or (op == "revert" and move[::-1] in LEGAL_TRANSITIONS)
        legal = legal or passed_stale or (op == "revert" and move[::-1] == at_once)
        if not legal:
            report(
                path,
                "transition",
                f"trust moved {old.trust.value} -> {new.trust.value}; trust only moves "
                "unverified -> verified or rejected, verified -> stale, stale -> verified "
                "(a signed revert goes one step back)",
            )
    verdict_changed = old.provenance.verified_by != new.provenance.verified_by
    if (new.trust in (Trust.VERIFIED, Trust.REJECTED) or passed_stale) and (
        old.trust is not new.trust or verdict_changed
    ):
        outcome = "FAIL" if new.trust is Trust.REJECTED else "PASS"
        if new.provenance.verified_by is None:
            report(path, "verdict", f"{new.trust.value} with no verdict in provenance.verified_by")
        else:
            try:
                verdict = Verdict.from_dict(new.provenance.verified_by, path)
                check_verdict(verdict, new.id, outcome, policy)
            except KeylessError as exc:
                report(path, exc.rule, exc.detail)
            except TrussError as exc:
                report(path, "verdict", str(exc))
            else:
                for problem in citation_problems(repo, policy, verdict):
                    report(path, "verdict-cites", problem)
                replayed: str | None = None
                if op != "revert":  # a signed revert puts back a state, not a verdict
                    spent_in = None
                    if spending is not None:
                        spent_in = spending[0].spent(verdict, base, spending[1])
                    replayed = authority.replay_problem(
                        verdict.id, verdict.basis, verdict.time, old, base.blob_id(path), spent_in
                    )
                if replayed:
                    report(path, "verdict-replay", replayed)
    if (
        op in ("promote", "supersede")
        and (old.trust, new.trust) == (Trust.VERIFIED, Trust.STALE)
        and new.superseded_by
        and authority.conflict_policy(policy.config.raw) == authority.ARBITRATED
    ):
        unarbitrated = _unarbitrated(snap, new)
        if unarbitrated:
            report(path, "arbitration", unarbitrated)
    return {"panel"}


def _slim(entry: Entry) -> Entry:
    """What the layer and author rules read of an added entry (its id, layer and author),
    without its body: a commit that adds a million entries holds no million bodies."""
    slim = dataclasses.replace(entry, body="")
    object.__setattr__(slim, "_id", entry.id)  # the id stays the entry's own (Entry.id)
    return slim


def _unarbitrated(snap: Snapshot, rival: Entry) -> str | None:
    """Why the promotion that superseded verified ``rival`` under panel-arbitrated had no
    right to (None: its verdict carries the arbiters' decision over an entry of that key)."""
    winner_id = rival.superseded_by or ""
    # The winner is of the rival's kind but for a `supersede` across kinds.
    found = (entry_path(k, winner_id) for k in (rival.kind, *Kind) if winner_id)
    where = next((p for p in found if snap.blob_id(p) is not None), entry_path(rival.kind, ""))
    try:
        winner = entryfile.parse(snap.read(where) or b"", where)
        verdict = Verdict.from_dict(winner.provenance.verified_by or {}, winner_id)
    except TrussError as exc:
        return f"superseded by {winner_id[:12]}, whose verdict does not read: {exc}"
    if (winner.kind, winner.key) != (rival.kind, rival.key) and winner.supersedes == rival.id:
        return None  # a link between two keys (`supersede`, a correction): no conflict
    if f"entry:{rival.id}" in winner.provenance.sources:
        return None  # a consolidated note the panel passed with this one shown as merged
    named = (verdict.arbitration or {}).get("rival")
    if named is not None:
        try:
            where = entry_path(rival.kind, str(named))
            other = entryfile.parse(snap.read(where) or b"", where)
        except TrussError:
            other = None
        if other is not None and other.key == rival.key:
            return None
    return (
        f"verified entry superseded by {winner_id[:12]} under conflict policy "
        f"panel-arbitrated, and that entry's PASS verdict {verdict.id} carries no arbiters' "
        "decision over this key: a plain PASS may not supersede a verified rival"
    )


# --- a verdict is spent once ----------------------------------------------------------------

# How far a commit's time may fall behind the time a verdict it spends was signed at (two
# machines' clocks): the walk for where a verdict was spent stops at commits older than that.
CLOCK_SKEW = 300
SPENDING_OPS = frozenset({"promote", "reject"})


class SpentVerdicts:
    """Which commit of the history below ``heads`` already moved an entry with a verdict,
    read from the commits' ``Truss-Verdict`` trailers, newest first and only as deep as a
    question needs: a verdict is spent after it is signed, so the walk for it stops at the
    commits older than its time (less ``CLOCK_SKEW``). One walk serves every question."""

    def __init__(self, repo: pygit2.Repository, heads: Iterable[pygit2.Oid]) -> None:
        walker = repo.walk(None, pygit2.enums.SortMode.TIME)
        for head in heads:
            walker.push(head)
        self._walk: Iterator[pygit2.Commit] = iter(walker)
        self._reached = float("inf")  # the commit time the walk has read down to
        self.found: dict[str, str] = {}

    def spent(self, verdict: Verdict) -> str | None:
        try:
            stamp = datetime.datetime.fromisoformat(verdict.time).timestamp()
        except ValueError:
            stamp = float("-inf")  # a time we cannot read: look through the whole history
        while verdict.id not in self.found and self._reached >= stamp - CLOCK_SKEW:
            commit = next(self._walk, None)
            if commit is None:
                self._reached = float("-inf")
                break
            self._reached = commit.commit_time
            message = commit.message
            if "Truss-Verdict: " not in message:
                continue
            fields = parse_trailers(message)
            if (fields.get("Truss-Op") or [""])[0] in SPENDING_OPS:
                for spent in fields.get("Truss-Verdict", []):
                    self.found.setdefault(spent, str(commit.id))
        return self.found.get(verdict.id)


class _Spent:
    """The verdicts an audit walk saw move an entry (exact, whatever the trailers say), and
    below the first commit it judged, those the history's trailers name (``SpentVerdicts``)."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.judged: dict[str, list[str]] = {}
        self.below: SpentVerdicts | None = None

    def start(self, commit: pygit2.Commit) -> None:
        if self.below is None:
            self.below = SpentVerdicts(self.repo, commit.parent_ids)

    def spent(self, verdict: Verdict, base: Snapshot, cid: str) -> str | None:
        """The commit before ``cid`` (in the history of ``base``) that spent ``verdict``;
        records that ``cid`` spends it."""
        seen = self.judged.setdefault(verdict.id, [])
        for found in seen:
            # Seen earlier in the walk: spent before this commit only if in its history
            # (two clones may each have been handed the verdict, on two branches).
            if (
                found != cid
                and base.oid is not None
                and (found == base.oid or self.repo.descendant_of(base.oid, found))
            ):
                return found
        if cid not in seen:
            seen.append(cid)
        return self.below.spent(verdict) if self.below is not None else None


# --- verdicts cite what they read ----------------------------------------------------------

RUN_REF_PREFIX = "refs/truss/runs/"  # runs.ledger.RUN_REF_PREFIX (a floor above this one)
_CITE = re.compile(r"^run:([A-Za-z0-9][A-Za-z0-9._-]{0,127})/(\d{1,12})$")


def cited_calls(verdict: Verdict) -> list[str]:
    """The ledger refs a verdict's votes cite: each vote's ``evidence.cites`` (a list of
    ``run:R/N``, the tool calls the reviewer relied on)."""
    out: list[str] = []
    for vote in verdict.votes:
        evidence = vote.get("evidence")
        cites = evidence.get("cites") if isinstance(evidence, Mapping) else None
        if cites is None:
            continue
        if not isinstance(cites, list):
            out.append(repr(cites))
            continue
        out.extend(c if isinstance(c, str) else repr(c) for c in cites)
    return out


def citation_problems(repo: pygit2.Repository, policy: TrustPolicy, verdict: Verdict) -> list[str]:
    """Why the calls a verdict cites cannot be believed: each ``run:R/N`` must name call N
    of run R's ledger (``refs/truss/runs/R``), a commit signed by a key allowed to sign
    commits. Empty when every citation holds (or there is none)."""
    problems: list[str] = []
    for cite in cited_calls(verdict):
        found = _CITE.fullmatch(cite)
        if found is None:
            problems.append(f"verdict {verdict.id} cites {cite[:80]}, not a run:<run-id>/<seq> ref")
            continue
        run, seq = found.group(1), int(found.group(2))
        problem = _call_problem(repo, policy, run, seq)
        if problem:
            problems.append(f"verdict {verdict.id} cites {cite}: {problem}")
    return problems


def _call_problem(repo: pygit2.Repository, policy: TrustPolicy, run: str, seq: int) -> str | None:
    try:
        ref = repo.references.get(RUN_REF_PREFIX + run)
    except (ValueError, pygit2.GitError):
        ref = None
    if ref is None:
        return f"there is no ledger of run {run} ({RUN_REF_PREFIX}{run})"
    commit: pygit2.Commit | None
    try:
        commit = ref.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        return f"the ledger of run {run} cannot be read ({exc})"
    while commit is not None:
        fields = parse_trailers(commit.message)
        if fields.get("Truss-Seq") == [str(seq)]:
            break
        commit = commit.parents[0] if commit.parents else None
    if commit is None:
        return f"run {run}'s ledger holds no call #{seq}"
    signature, payload = commit.gpg_signature
    if signature is None:
        return f"call #{seq} of run {run} ({str(commit.id)[:12]}) is unsigned"
    try:
        key = verify(signature.decode("ascii", "replace"), payload, GIT_NAMESPACE)
    except TrussError as exc:
        return f"call #{seq} of run {run}: {exc}"
    if not policy.signers.principals_for(key, GIT_NAMESPACE):
        return f"call #{seq} of run {run} is signed by a key allowed_signers does not list"
    return None
