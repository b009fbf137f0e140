"""Clones converge: the same event trained on two clones ends as one note after both sync.

A retried webhook reaches two servers, each with a clone of one bare remote guarded by the
real pre-receive gate (``hooks install --server``) and its own key of one server principal
(agent and trainer, no panel role). Both train the same 36 events (each stamping its own
``created``) and a few of their own, then both ``sync`` through the installed console
script, in both orders, twice: the clones end at one tip holding one note per event, the
merge that joined them is signed by the syncing server's own key, and a fresh clone audits
clean from the root. The attacks: a merge under that agent key that joins the notes *and*
sneaks in a trust change, a verdict, a supersede link, another salience or a rollback of a
promotion is refused by the audit and by the gate, and the remote keeps its history.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.format.entryfile import parse, serialize
from truss_files.git.gitstore import Identity
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.sync import sync
from truss_files.tools import RunContext
from truss_files.tools.train import train

SCRIPT = Path(sys.executable).with_name("truss-files")
SERVER = "server@example.test"
CONTEXT = {"taskId": "T-1", "enterpriseId": "acme"}
SHARED = 36
GitRunner = Callable[..., str]


class _Clock:
    """Each clone's own clock: B's is an hour behind A's, so every note it trains first is
    the earlier one whatever the sync order."""

    def __init__(self, hour: int) -> None:
        self.now = datetime.datetime(2026, 11, 29, hour, 0, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=1)
        return self.now


@dataclasses.dataclass(frozen=True)
class Deployment:
    remote: Path
    root: str
    clones: dict[str, Path]
    keys: dict[str, Path]
    signers: dict[str, Ed25519Signer]
    operator: Path
    tmp: Path

    def store(self, name: str, hour: int = 10) -> MemoryStore:
        return MemoryStore(self.clones[name], signer=self.signers[name], clock=_Clock(hour))


def cli(
    where: Path, key: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), "--store", str(where), "--key", str(key), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "TRUSS_KEY"},
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.args, done.stdout[-1500:], done.stderr[-3000:])
    return done.stdout


@pytest.fixture
def deployment(
    bare_store: MemoryStore, tmp_path: Path, operator_key: Ed25519Signer, git: GitRunner
) -> Deployment:
    """The bare remote with the gate, two keys of one server principal (agent, trainer) and
    a clone per server, each pinned to the root."""
    remote = bare_store.git.git_dir
    operator = tmp_path / "operator_key"
    root = git(remote, "rev-list", "--max-parents=0", "main").split()[0]
    signers, keys = {}, {}
    for name in ("a", "b"):
        signer = Ed25519Signer.generate(f"{name}@{SERVER}")
        keys[name] = tmp_path / f"server-{name}.key"
        signer.save(keys[name])
        (tmp_path / f"server-{name}.pub").write_text(signer.public_line + "\n")
        signers[name] = signer
        ok(cli(remote, operator, "signers", "add", SERVER, str(tmp_path / f"server-{name}.pub")))
    for role in ("agent", "trainer"):
        ok(cli(remote, operator, "roles", "grant", role, SERVER))
    ok(cli(remote, operator, "hooks", "install", "--server", "--root", root))
    assert (remote / "hooks" / "pre-receive").exists()
    clones = {}
    for name in ("a", "b"):
        git(tmp_path, "clone", "-q", str(remote), name)
        git(tmp_path / name, "config", "truss.root", root)
        clones[name] = tmp_path / name
    return Deployment(remote, root, clones, keys, signers, operator, tmp_path)


def event(n: int) -> dict[str, Any]:
    return {
        "body": f"Webhook {n}: the deploy of service {n} needs the migration flag.",
        "source": {"eventId": f"wh-{n}", "revision": "1"},
    }


def train_all(store: MemoryStore, numbers: list[int]) -> dict[int, Entry]:
    """memory.train (the function every face calls) for each event; the stored notes."""
    ctx = RunContext.from_dict(CONTEXT)
    out = {}
    for n in numbers:
        result = train(store, ctx, event(n))
        assert result["status"] in ("accepted", "consolidating"), result
        out[n] = store.get(result["entry"]["id"])
    return out


def train_cli(dep: Deployment, name: str, n: int) -> dict[str, Any]:
    """memory.train through the installed console script, as a harness calls it."""
    ctx = dep.tmp / "ctx.json"
    ctx.write_text(json.dumps(CONTEXT))
    done = cli(
        dep.clones[name],
        dep.keys[name],
        "tool",
        "memory.train",
        "--memory-write",
        "--run-context",
        str(ctx),
        stdin=json.dumps(event(n)),
    )
    result: dict[str, Any] = json.loads(ok(done))
    assert result["status"] in ("accepted", "consolidating", "retained"), result
    return result


def notes(path: Path) -> dict[str, list[Entry]]:
    """Every note in the tree, by its key."""
    repo = pygit2.Repository(str(path))
    tree = repo.revparse_single("main").peel(pygit2.Tree)
    found: dict[str, list[Entry]] = {}

    def walk(t: pygit2.Tree, prefix: str) -> None:
        for item in t:
            name = f"{prefix}{item.name}"
            if isinstance(item, pygit2.Tree):
                walk(item, name + "/")
            elif isinstance(item, pygit2.Blob) and name.endswith(".md"):
                entry = parse(item.data, name)
                found.setdefault(entry.key, []).append(entry)

    walk(tree["memories"].peel(pygit2.Tree), "memories/")
    return found


def tip(path: Path, git: GitRunner) -> str:
    return git(path, "rev-parse", "main").strip()


def signed_by(path: Path, commit: str, key: Ed25519Signer, git: GitRunner) -> bool:
    """The real ``git verify-commit`` against an allowed-signers file holding only ``key``."""
    allowed = path.parent / f"only-{key.fingerprint[-8:].replace('/', '_')}.allowed"
    allowed.write_text(f'{SERVER} namespaces="git" {key.public_line}\n')
    done = subprocess.run(
        ["git", "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}"]
        + ["verify-commit", commit],
        cwd=path,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and f'Good "git" signature for {SERVER}' in done.stderr


def fresh_audit(dep: Deployment, git: GitRunner, name: str = "fresh") -> dict[str, Any]:
    git(dep.tmp, "clone", "-q", str(dep.remote), name)
    done = cli(dep.tmp / name, dep.operator, "audit", "--root", dep.root, "--format", "json")
    report: dict[str, Any] = json.loads(done.stdout)
    assert (done.returncode == 0) == report["ok"], (done.stdout, done.stderr)
    return report


# -- the promise --------------------------------------------------------------------------------


# Which clone joins first is symmetric: the other order is the long run's (TRUSS_SLOW=1).
@pytest.mark.parametrize("first", ["a", pytest.param("b", marks=pytest.mark.slow)])
def test_the_same_events_on_two_clones_end_as_one_note_each(
    deployment: Deployment, git: GitRunner, first: str
) -> None:
    dep = deployment
    second = "b" if first == "a" else "a"
    shared = list(range(1, SHARED + 1))
    on_a = train_all(dep.store("a", hour=11), [*shared, 101, 102])
    on_b = train_all(dep.store("b", hour=10), [*shared, 201, 202])
    # One more of each kind through the console script: a shared event and an own one.
    train_cli(dep, "a", 300)
    train_cli(dep, "b", 300)
    train_cli(dep, "a", 103)
    train_cli(dep, "b", 203)
    for n in shared:  # one id, two created times: what used to strand the merge
        assert on_a[n].id == on_b[n].id and on_a[n].created != on_b[n].created

    for _round in range(2):
        for name in (first, second):
            ok(cli(dep.clones[name], dep.keys[name], "sync", "--format", "json"))

    assert tip(dep.clones["a"], git) == tip(dep.clones["b"], git) == tip(dep.remote, git)
    assert git(dep.clones["a"], "status", "--porcelain") == ""
    assert git(dep.clones["b"], "status", "--porcelain") == ""
    found = notes(dep.remote)
    wanted = {f"event:wh-{n}" for n in [*shared, 101, 102, 103, 201, 202, 203, 300]}
    assert set(found) == wanted
    assert all(len(v) == 1 for v in found.values()), {k: len(v) for k, v in found.items()}
    for n in shared:
        (note,) = found[f"event:wh-{n}"]
        # The join's rule: the earlier created (B's clock is behind), nothing else changed.
        assert note.created == on_b[n].created
        assert note.trust is Trust.UNVERIFIED and note.provenance.verified_by is None
        assert note.provenance.sources == (f"event:wh-{n}#1",)

    merges = git(dep.remote, "rev-list", "--merges", "main").split()
    assert len(merges) == 1, merges  # the second round had nothing to join
    assert signed_by(dep.clones[second], merges[0], dep.signers[second], git)
    assert not signed_by(dep.clones[second], merges[0], dep.signers[first], git)
    report = fresh_audit(dep, git)
    assert report["ok"] and report["checked"] > SHARED * 2, report
    assert report["root"] == dep.root


def test_a_note_one_clone_promoted_joins_as_the_promoted_note(
    deployment: Deployment, git: GitRunner, operator_key: Ed25519Signer
) -> None:
    """One clone's panel reviewed the note before the sync: the join keeps the review."""
    dep = deployment
    on_a = train_all(dep.store("a", hour=11), [1, 2])
    train_all(dep.store("b", hour=10), [1, 2])
    panel = MemoryStore(dep.clones["a"], signer=operator_key)
    panel.promote(on_a[1].id, panel.sign_verdict(on_a[1].id, "PASS", note="checked"))
    for name in ("b", "a", "b", "a"):
        ok(cli(dep.clones[name], dep.keys[name], "sync"))
    assert tip(dep.clones["a"], git) == tip(dep.clones["b"], git) == tip(dep.remote, git)
    found = notes(dep.remote)
    assert [e.trust for e in found["event:wh-1"]] == [Trust.VERIFIED]
    assert [e.trust for e in found["event:wh-2"]] == [Trust.UNVERIFIED]
    assert fresh_audit(dep, git)["ok"]


# -- the attacks --------------------------------------------------------------------------------


class _Stop(Exception):
    """Stops a sync after its merge moved the local branch, before the push."""


def _stop(attempt: int) -> None:
    raise _Stop


def _tamper(entry: Entry, how: str, other: Entry, panel: MemoryStore) -> bytes:
    """The joined note with one change only a panel may make."""
    if how in ("verified", "rejected"):
        outcome = "PASS" if how == "verified" else "FAIL"
        verdict = panel.sign_verdict(entry.id, outcome, note="looks fine").to_dict()
        prov = dataclasses.replace(entry.provenance, verified_by=verdict)
        trust = Trust.VERIFIED if how == "verified" else Trust.REJECTED
        entry = dataclasses.replace(entry, trust=trust, provenance=prov)
    elif how == "superseded":
        entry = dataclasses.replace(entry, superseded_by=other.id)
    elif how == "salience":
        entry = dataclasses.replace(entry, salience=1.0)
    else:
        raise AssertionError(how)
    return serialize(entry).encode()


@pytest.mark.parametrize("how", ["verified", "rejected", "superseded", "salience", "rollback"])
def test_a_join_that_sneaks_in_a_change_of_belief_is_refused(
    deployment: Deployment, git: GitRunner, operator_key: Ed25519Signer, how: str
) -> None:
    dep = deployment
    on_a = train_all(dep.store("a", hour=11), [1, 2])
    on_b = train_all(dep.store("b", hour=10), [1, 2])
    panel = MemoryStore(dep.clones["a"], signer=operator_key)
    if how == "rollback":  # A's panel reviewed note 1 before the sync
        panel.promote(on_a[1].id, panel.sign_verdict(on_a[1].id, "PASS", note="checked"))
    ok(cli(dep.clones["a"], dep.keys["a"], "sync"))
    pushed = git(dep.remote, "for-each-ref")

    # B's honest join, stopped before its push: the merge the attacker starts from.
    b = dep.store("b")
    with pytest.raises(_Stop):
        sync(b, before_push=_stop)
    honest = b.git.tip()
    assert honest is not None and len(honest.parents) == 2
    report = json.loads(ok(cli(dep.clones["b"], dep.keys["b"], "audit", "--format", "json")))
    assert report["ok"], report  # the join itself is accepted under the agent key

    path = on_b[1].path
    joined = parse(b.snapshot().read(path) or b"", path)
    if how == "rollback":
        assert joined.trust is Trust.VERIFIED  # the join kept A's review ...
        text = serialize(on_b[1]).encode()  # ... the attacker takes B's unreviewed add
    else:
        text = _tamper(joined, how, on_b[2], MemoryStore(dep.clones["b"], signer=operator_key))
    repo = b.git.repo
    index = pygit2.Index()
    index.read_tree(honest.tree)
    index.add(pygit2.IndexEntry(path, repo.create_blob(text), pygit2.enums.FileMode.BLOB))
    forged = b.git.make_commit(
        index.write_tree(repo),
        list(honest.parent_ids),
        honest.message,
        dep.signers["b"],
        Identity("Server B", SERVER),
    )
    work = dep.clones["b"]
    git(work, "update-ref", "refs/heads/main", str(forged))
    git(work, "reset", "-q", "--hard")

    audited = cli(work, dep.keys["b"], "audit", "--format", "json")
    assert audited.returncode == 1, (audited.stdout, audited.stderr)
    found = {(v["commit"], v["rule"]) for v in json.loads(audited.stdout)["violations"]}
    assert (str(forged), "role") in found, found
    role = next(v for v in json.loads(audited.stdout)["violations"] if v["rule"] == "role")
    assert "panel" in role["message"], role

    done = git(work, "push", "--porcelain", "origin", "main", check=False)
    assert "[remote rejected]" in done, done
    assert git(dep.remote, "for-each-ref") == pushed
    assert fresh_audit(dep, git)["ok"]
    assert [e.trust for e in notes(dep.remote)["event:wh-1"]] == [
        Trust.VERIFIED if how == "rollback" else Trust.UNVERIFIED
    ]
