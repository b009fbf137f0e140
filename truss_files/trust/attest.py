"""Commit attestations: a sigstore bundle over a commit id, kept as a git note.

``truss-files attest [COMMIT|RANGE]`` (and ``[sigstore] attest = true``, on each trust
transition) signs ``truss-files attest <commit id>`` keylessly and stores the note
``{"commit", "signer", "bundle"}`` under ``refs/notes/truss-sigstore``. The note is outside
the branch, so it changes no commit; it is self-authenticating, so the notes ref itself needs
no signature: the audit, the gate and ``log`` verify each note offline against the trusted
root in force once the annotated commit is made, and a note's signer must be a sigstore
principal the store names there -- in ``[roles]`` or in ``[sigstore] attesters``.

Notes are read straight from the notes ref's tree (one blob per annotated commit, named by its
id, possibly fanned out as ``ab/cdef...``), so an audit without notes pays nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pygit2

from ..errors import KeylessError, StoreError, UsageError
from ..signing.trustpolicy import TrustPolicy

if TYPE_CHECKING:
    from ..git.gitstore import GitStore, Identity
    from ..signing.trustpolicy import StoreConfig


class AttestingStore(Protocol):
    """What attesting needs of a store (``store.store.Store`` has it): the repository, the policy
    and truss.toml at the tip, the committer identity of a principal, the environment."""

    git: GitStore
    environ: Mapping[str, str]

    def policy(self) -> TrustPolicy: ...

    def config(self) -> StoreConfig: ...

    def identity(self, principal: str) -> Identity: ...


NOTES_REF = "refs/notes/truss-sigstore"
MAX_NOTE = 1 << 20


def payload(commit_id: str) -> bytes:
    """The bytes an attestation signs: a line that cannot be mistaken for a verdict."""
    return f"truss-files attest {commit_id}\n".encode()


@dataclass(frozen=True)
class Attested:
    commit: str
    signer: str
    log_index: int | None


def read_notes(repo: pygit2.Repository, ref: str = NOTES_REF) -> dict[str, pygit2.Oid]:
    """Annotated commit id -> the note's blob id, from the tip of ``ref`` (empty if none)."""
    try:
        target = repo.references[ref].resolve().target
    except KeyError:
        return {}
    return notes_of(repo, target)


def notes_of(repo: pygit2.Repository, notes_commit: Any) -> dict[str, pygit2.Oid]:
    try:
        tree = repo[notes_commit].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError):
        return {}
    return dict(_walk(repo, tree, ""))


def _walk(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> Iterator[tuple[str, Any]]:
    for item in tree:
        name = prefix + (item.name or "")
        if item.type == pygit2.enums.ObjectType.TREE:
            yield from _walk(repo, repo[item.id].peel(pygit2.Tree), name)
        elif item.type == pygit2.enums.ObjectType.BLOB:
            yield name, item.id


def note_problems(
    repo: pygit2.Repository, commit_id: str, blob: Any, policy: TrustPolicy
) -> list[tuple[str, str]]:
    """(rule, message) for each reason the note on ``commit_id`` is not a valid attestation."""
    # sigstore is an optional extra: only attesting loads it.
    from ..signing import keyless

    try:
        data = repo[blob].peel(pygit2.Blob).data
        note = json.loads(data[:MAX_NOTE].decode("utf-8"))
    except (KeyError, ValueError, UnicodeDecodeError, pygit2.GitError):
        return [("sigstore-bundle", f"the note on {commit_id[:12]} is not JSON")]
    if not isinstance(note, dict) or not isinstance(note.get("signer"), str):
        return [("sigstore-bundle", "the note is not a truss-files attestation")]
    if note.get("commit") != commit_id:
        return [
            (
                "sigstore-artifact",
                f"the note attests commit {str(note.get('commit'))[:12]}, not this one: a "
                "bundle moved from another commit",
            )
        ]
    signer = note["signer"]
    try:
        claimed = keyless.KeylessIdentity.parse(signer)
    except UsageError as exc:
        return [("sigstore-identity", exc.message)]
    if claimed is None:
        return [("sigstore-identity", f"{signer} is not a sigstore principal")]
    allowed = attesters(policy)
    if signer not in allowed:
        same = [p for p in allowed if p.startswith(keyless.PREFIX) and p.endswith(claimed.identity)]
        return [
            (
                "sigstore-issuer" if same else "sigstore-identity",
                f"{signer} may not attest here: name it in truss.toml [roles] or [sigstore] "
                "attesters (an operator's commit)",
            )
        ]
    try:
        keyless.verify(
            payload(commit_id),
            note.get("bundle"),
            claimed,
            policy.trusted_root,
            f"attestation of {commit_id[:12]}",
        )
    except KeylessError as exc:
        return [(exc.rule, exc.detail)]
    return []


def attesters(policy: TrustPolicy) -> frozenset[str]:
    named = set().union(*policy.config.roles().values())
    extra = policy.config.get("sigstore", "attesters", [])
    if isinstance(extra, list):
        named |= {p for p in extra if isinstance(p, str)}
    return frozenset(p for p in named if p.startswith("sigstore:"))


def describe_note(repo: pygit2.Repository, blob: Any) -> dict[str, Any] | None:
    """What a note claims (signer, log index), unverified: for ``log`` and ``diff``."""
    try:
        note = json.loads(repo[blob].peel(pygit2.Blob).data[:MAX_NOTE])
        entries = note["bundle"]["verificationMaterial"]["tlogEntries"]
        return {"signer": note["signer"], "log_index": int(entries[0]["logIndex"])}
    except (KeyError, ValueError, TypeError, IndexError, pygit2.GitError):
        return None


def attest(
    store: AttestingStore,
    rev: str | None = None,
    *,
    token: str | None = None,
    trust_config: str | None = None,
) -> list[Attested]:
    """Attest ``rev`` (a commit, or ``A..B``: every commit in it; default: the tip)."""
    # sigstore is an optional extra: only attesting loads it.
    from ..signing import keyless

    repo = store.git.repo
    commits = _commits(store, rev)
    identity, raw = keyless.token_identity(token)
    allowed = attesters(store.policy())
    if identity.principal not in allowed:
        raise UsageError(
            f"{identity.principal} may not attest in this store; an operator names it in "
            "truss.toml [sigstore] attesters (or [roles] panel)"
        )
    who = store.identity(identity.principal)
    sig = pygit2.Signature(who.name, who.email)
    done = []
    for commit_id in commits:
        _, bundle = keyless.sign(payload(commit_id), token=raw, trust_config=trust_config)
        note = {"commit": commit_id, "signer": identity.principal, "bundle": bundle}
        text = json.dumps(note, sort_keys=True, separators=(",", ":")) + "\n"
        try:
            repo.create_note(text, sig, sig, commit_id, NOTES_REF, True)
        except pygit2.GitError as exc:
            raise StoreError(f"could not write the note on {commit_id[:12]}: {exc}") from exc
        entries = bundle.get("verificationMaterial", {}).get("tlogEntries", [{}])
        done.append(Attested(commit_id, identity.principal, _index(entries)))
    return done


def _index(entries: Any) -> int | None:
    try:
        return int(entries[0]["logIndex"])
    except (KeyError, ValueError, TypeError, IndexError):
        return None


def _commits(store: AttestingStore, rev: str | None) -> list[str]:
    repo = store.git.repo
    if rev is None:
        tip = store.git.tip()
        if tip is None:
            raise UsageError("the branch has no commits yet: nothing to attest")
        return [str(tip.id)]
    try:
        if ".." in rev:
            start, _, end = rev.partition("..")
            tip = repo.revparse_single(end or "HEAD").peel(pygit2.Commit)
            walker = repo.walk(
                tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
            )
            if start:
                walker.hide(repo.revparse_single(start).peel(pygit2.Commit).id)
            return [str(c.id) for c in walker]
        return [str(repo.revparse_single(rev).peel(pygit2.Commit).id)]
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise UsageError(f"no commit or range {rev!r}: {exc}") from exc


def transition_attest(store: AttestingStore, commit: pygit2.Commit) -> None:
    """``[sigstore] attest = true``: attest a trust transition just made, with the token in
    SIGSTORE_IDENTITY_TOKEN or the ambient CI identity."""
    config = store.config()
    if config.get("sigstore", "attest", False) is not True:
        return
    env: Mapping[str, str] = store.environ
    trust_config = env.get("TRUSS_SIGSTORE_TRUST_CONFIG") or config.get("sigstore", "trust_config")
    try:
        attest(
            store,
            str(commit.id),
            token=env.get("SIGSTORE_IDENTITY_TOKEN"),
            trust_config=trust_config,
        )
    except (UsageError, KeylessError) as exc:
        raise StoreError(
            f"commit {str(commit.id)[:12]} is made, but [sigstore] attest = true and its "
            f"attestation failed: {exc.message}; attest it with `truss-files attest "
            f"{str(commit.id)[:12]}`"
        ) from exc
