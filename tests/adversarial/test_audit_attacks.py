"""Attacks on the trust promise, each performed for real in a clone of a server that runs the
pre-receive gate. Every attack must be refused twice — by `truss-files audit` in the clone
and by the gate on `git push` — each refusal naming the commit, the file and the rule, and
the server must keep its published history: same tip, a clean audit, every entry readable."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest
from click.testing import CliRunner, Result

import tests.support.hand_commits as hand
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format import entryfile
from truss_files.git.gitstore import Identity
from truss_files.model import MAX_BODY, Entry, Kind, Trust
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH
from truss_files.trust.audit import audit

Commit = Callable[..., str]
Expected = tuple[str, str, str]  # (commit, path or "", rule)
AGENT = "agent@example.test"
WHO = Identity("Mallory", "mallory@example.test")


@dataclasses.dataclass
class Arena:
    """A clone of the gated server: the operator's store, its work tree and the server."""

    store: MemoryStore
    work: Path
    server: Path
    run: Callable[..., str]  # the git CLI, in a given directory
    published: str = ""

    def tip(self) -> str:
        return self.run(self.work, "rev-parse", "HEAD").strip()

    def publish(self) -> None:
        """Push the good history so far; the gate must accept it."""
        pushed = _push(self.work, "main")
        assert pushed.returncode == 0, pushed.stderr
        self.published = self.tip()

    def merge(self, tree_from: dict[str, str], parents: list[str], signer: Ed25519Signer | None):
        """A merge commit by hand: HEAD's tree with each path as it is in the commit named,
        written with `git commit-tree` (unsigned) or signed by ``signer``; main moves to it."""
        for path, rev in tree_from.items():
            self.run(self.work, "checkout", rev, "--", path)
        tree = self.run(self.work, "write-tree").strip()
        message = "Merge an older belief\n\nTruss-Op: merge"
        if signer is None:
            args = [x for p in parents for x in ("-p", p)]
            sha = self.run(self.work, "commit-tree", tree, *args, "-m", message).strip()
        else:
            oid = self.store.git.make_commit(
                pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents], message, signer, WHO
            )
            sha = str(oid)
        self.run(self.work, "update-ref", "refs/heads/main", sha)
        self.run(self.work, "reset", "-q", "--hard")
        return sha

    def refused(
        self,
        expected: list[Expected],
        *,
        gate: list[Expected] | None = None,
        push_args: tuple[str, ...] = (),
    ) -> None:
        """`truss-files audit` names every expected violation, the gate every one of ``gate``
        (default: the same), and the server keeps its published history intact."""
        server_store = MemoryStore(self.server, signer=self.store.signer)
        kept = server_store.list_entries()
        audited = _cli(self.work, "audit", "--format", "json")
        assert audited.exit_code == 1, audited.output
        found = {
            (v["commit"], v["path"], v["rule"]) for v in json.loads(audited.output)["violations"]
        }
        assert set(expected) <= found, found

        pushed = _push(self.work, *push_args, "main")
        assert pushed.returncode != 0, pushed.stderr
        lines = [ln.removeprefix("remote: ").strip() for ln in pushed.stderr.splitlines()]
        for commit, path, rule in expected if gate is None else gate:
            where = f" {path}" if path else ""
            want = f"truss-files: rejected refs/heads/main: commit {commit[:12]}{where}: [{rule}]"
            assert any(line.startswith(want) for line in lines), (want, lines)

        assert self.run(self.server, "rev-parse", "main").strip() == self.published
        assert audit(server_store.git).ok
        assert server_store.list_entries() == kept


def _push(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "push", "origin", *args], cwd=work, capture_output=True, text=True, timeout=120
    )


def _cli(work: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(work), *args], input=input)


@pytest.fixture
def arena(clone: Callable[[str], MemoryStore], server: Path, git: Callable[..., str]) -> Arena:
    store = clone("a")
    work = store.git.workdir
    assert work is not None
    # Pin the trust root in the clone as an operator would: it is not copied by `git clone`.
    git(work, "config", "truss.root", git(server, "config", "truss.root").strip())
    return Arena(store, work, server, git)


def _promoted(a: Arena, key: str) -> tuple[Entry, str]:
    """A verified entry and the commit that promoted it."""
    s = a.store
    entry = s.write("fact", key, f"What the panel checked about {key}.")
    entry = s.promote(entry.id, s.sign_verdict(entry.id, "PASS"))
    return entry, a.tip()


def _text(a: Arena, entry: Entry) -> str:
    return (a.store.snapshot().read(entry.path) or b"").decode()


def _with_agent(a: Arena, add_signer: Commit) -> Ed25519Signer:
    agent = Ed25519Signer.generate(AGENT)
    add_signer(a.store, agent, AGENT, ("agent",))
    return agent


# ------------------------------------------------------------------------------- merges


@pytest.mark.parametrize("order", ["head-first", "old-first"])
def test_an_unsigned_merge_rolls_a_demoted_entry_back_to_verified(arena: Arena, order: str) -> None:
    a, s = arena, arena.store
    entry, verified_at = _promoted(a, "db")
    s.demote(entry.id, "contradicted by the load test")
    head = a.tip()
    a.publish()
    # The reproduction: V's file into the index, `git commit-tree -p HEAD -p V`, move
    # main. With the parents the other way round the rollback is relative to the 2nd parent.
    parents = [head, verified_at] if order == "head-first" else [verified_at, head]
    merge = a.merge({entry.path: verified_at}, parents, signer=None)
    assert s.get(entry.id).trust is Trust.VERIFIED  # what reads would now believe

    a.refused([(merge, "", "signed")])


def test_a_merge_signed_by_an_agent_cannot_roll_back_a_demotion(
    arena: Arena, add_signer: Commit
) -> None:
    a, s = arena, arena.store
    agent = _with_agent(a, add_signer)
    entry, verified_at = _promoted(a, "db")
    s.demote(entry.id, "contradicted")
    head = a.tip()
    a.publish()
    merge = a.merge({entry.path: verified_at}, [head, verified_at], signer=agent)

    a.refused([(merge, "", "role")])


def test_a_merge_rolls_a_rejected_entry_back_to_unverified(
    arena: Arena, add_signer: Commit
) -> None:
    a, s = arena, arena.store
    agent = _with_agent(a, add_signer)
    entry = s.write("fact", "myth", "The cache never needs a flush.")
    written_at = a.tip()
    s.reject(entry.id, s.sign_verdict(entry.id, "FAIL"))
    head = a.tip()
    a.publish()
    merge = a.merge({entry.path: written_at}, [head, written_at], signer=agent)
    assert s.get(entry.id).trust is Trust.UNVERIFIED

    a.refused([(merge, entry.path, "transition")])


def test_a_revoked_key_restored_through_a_merge_signs_nothing(
    arena: Arena, add_signer: Commit, signed_commit: Commit
) -> None:
    a, s = arena, arena.store
    before = s.snapshot()
    old = {SIGNERS_PATH: before.read(SIGNERS_PATH), CONFIG_PATH: before.read(CONFIG_PATH)}
    panel = Ed25519Signer.generate("panel@example.test")
    added = add_signer(s, panel, "panel@example.test", ("panel",))
    signed_commit(s, old, message="truss: revoke panel@example.test\n\nTruss-Op: signers")
    entry = s.write("fact", "claim", "The service answers in 20 ms.")
    head = a.tip()
    a.publish()
    merge = a.merge({SIGNERS_PATH: added, CONFIG_PATH: added}, [head, added], signer=None)
    # The restored key now signs a promotion (by hand: the library writes nothing on a
    # history that fails the audit, and this one does from the merge on).
    as_panel = MemoryStore(a.work, signer=panel)
    hand.promote(s, panel, entry.id, as_panel.sign_verdict(entry.id, "PASS"))
    promote = a.tip()

    a.refused([(merge, "", "signed"), (promote, "", "signed"), (promote, entry.path, "verdict")])


# ------------------------------------------------------------------------------- files


@pytest.mark.parametrize("path", ["memories/fact/ab/x", f"memories/fact/cd/{'cd' * 16}.md"])
def test_a_gitlink_under_memories(arena: Arena, path: str) -> None:
    a = arena
    entry = a.store.write("fact", "db", "The panel checked the database settings.")
    a.publish()
    a.run(a.work, "update-index", "--add", "--cacheinfo", f"160000,{'ab' * 20},{path}")
    a.run(a.work, "commit", "-q", "-m", "a submodule in the store\n\nTruss-Op: write")
    link = a.tip()

    # Reading faces skip it (the listing says so) instead of crashing. The history now fails
    # the audit, so reads serve unverified entries only, and the memory tool refuses.
    listed = _cli(a.work, "list", "--format", "json")
    assert listed.exit_code == 0, listed.output
    assert [e["id"] for e in json.loads(listed.stdout)] == [entry.id]
    [skipped] = json.loads(listed.stderr)["skipped"]
    assert skipped["path"] == path and "is a gitlink (a submodule entry)" in skipped["error"]
    text = _cli(a.work, "list", "--format", "text")
    assert text.exit_code == 0 and f"warning: skipped {path}: is a gitlink" in text.stderr
    assert _cli(a.work, "show", entry.id, "--format", "json").exit_code == 0
    queried = _cli(
        a.work, "query", "panel checked", "--min-trust", "unverified", "--format", "json"
    )
    assert queried.exit_code == 0, queried.output
    assert [e["id"] for e in json.loads(queried.output)["entries"]] == [entry.id]
    view = _cli(
        a.work, "tool", "memory", "--memory-write", "--run", "R1",
        input=json.dumps({"command": "view", "path": "/memories"}),
    )  # fmt: skip
    assert view.exit_code == 1, view.output
    assert json.loads(view.output)["error"]["code"] == "untrusted_history"

    a.refused([(link, path, "gitlink"), (link, "", "signed")])


def test_a_hand_committed_body_over_the_limit(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    a.publish()
    body = ("A very long note. " * (250_000 // 18)).rstrip()
    with pytest.raises(UsageError, match=f"the limit is {MAX_BODY}"):
        s.write("fact", "big", body)
    big = Entry(Kind.FACT, "big", body, author="agent:x", created="2026-11-29T12:00:00Z")
    sha = signed_commit(
        s, {big.path: entryfile.serialize(big).encode()}, message="truss: big\n\nTruss-Op: write"
    )
    listed = _cli(a.work, "list", "--format", "text")
    assert listed.exit_code == 1  # the only entry, and it cannot be read
    assert f"warning: skipped {big.path}: field 'body': is " in listed.stderr

    a.refused([(sha, big.path, "entry")])


# ------------------------------------------------------------- attacks caught before, kept


def test_trust_edited_by_hand(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    entry = s.write("fact", "k", "Hand-promoted.")
    a.publish()
    text = _text(a, entry).replace("trust: unverified", "trust: verified")
    sha = signed_commit(s, {entry.path: text.encode()}, message="promote\n\nTruss-Op: promote")
    a.refused([(sha, entry.path, "verdict")])


def test_a_verdict_for_another_id(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    verified, _ = _promoted(a, "real")
    entry = s.write("fact", "target", "Borrowing a verdict.")
    a.publish()
    forged = dataclasses.replace(
        entry,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(
            entry.provenance, verified_by=verified.provenance.verified_by
        ),
    )
    sha = signed_commit(s, {entry.path: entryfile.serialize(forged).encode()})
    a.refused([(sha, entry.path, "verdict")])


def test_a_verdict_edited_in_the_file(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    entry, _ = _promoted(a, "db")
    a.publish()
    verdict = dict(entry.provenance.verified_by or {})
    verdict["votes"] = [{"reviewer": "mallory", "kind": "human", "vote": "PASS", "evidence": {}}]
    forged = dataclasses.replace(
        entry, provenance=dataclasses.replace(entry.provenance, verified_by=verdict)
    )
    sha = signed_commit(s, {entry.path: entryfile.serialize(forged).encode()})
    a.refused([(sha, entry.path, "verdict")])


def test_a_commit_signed_by_an_unknown_key(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    a.publish()
    stranger = Ed25519Signer.generate("stranger@example.test")
    entry = Entry(Kind.FACT, "sneaky", "Trust me.", created="2026-11-29T12:00:00Z")
    sha = signed_commit(s, {entry.path: entryfile.serialize(entry).encode()}, signer=stranger)
    a.refused([(sha, "", "signed")])


def test_a_key_added_in_the_commit_that_uses_it(
    arena: Arena, add_signer: Commit, signed_commit: Commit
) -> None:
    a, s = arena, arena.store
    a.publish()
    mallory = Ed25519Signer.generate("operator@example.test")  # under the operator's name
    added = add_signer(s, mallory, "operator@example.test", ("operator", "panel"), by=mallory)
    a.refused([(added, "", "signed")])


def test_role_escalation_by_a_non_operator(
    arena: Arena, add_signer: Commit, signed_commit: Commit
) -> None:
    a, s = arena, arena.store
    agent = _with_agent(a, add_signer)
    a.publish()
    toml = (s.snapshot().read(CONFIG_PATH) or b"").replace(
        b'panel = ["operator@example.test"',
        b'panel = ["operator@example.test", "' + AGENT.encode() + b'"',
    )
    assert AGENT.encode() in toml
    sha = signed_commit(s, {CONFIG_PATH: toml}, signer=agent)
    a.refused([(sha, "", "role")])


def test_a_deleted_entry(arena: Arena, signed_commit: Commit) -> None:
    a, s = arena, arena.store
    entry, _ = _promoted(a, "db")
    a.publish()
    sha = signed_commit(s, {entry.path: None}, message="forget\n\nTruss-Op: delete")
    a.refused([(sha, entry.path, "no-delete")])


def test_history_rewritten_and_force_pushed(arena: Arena) -> None:
    a, s = arena, arena.store
    entry, _ = _promoted(a, "db")
    a.publish()
    # The same files, signed by the operator's own key, in a history of its own.
    tree = s.git.tip()
    assert tree is not None
    oid = s.git.make_commit(tree.tree.id, [], "truss: a fresh start", s.signer, WHO)
    a.run(a.work, "update-ref", "refs/heads/main", str(oid))
    assert s.get(entry.id) == entry

    a.refused(
        [(str(oid), "", "trust-root")],
        gate=[(str(oid), "", "non-fast-forward")],
        push_args=("--force",),
    )
