"""`signers add/remove/list` and `roles grant/revoke`: one operator-signed commit each, accepted
by the audit, the commit-msg hook and the server's gate; and every way to misuse them refused
before anything moves."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from truss_files.errors import ConfigError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.app import cli
from truss_files.faces.hooks import install_hooks
from truss_files.format.trailers import parse_trailers
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH
from truss_files.store.operators import set_roles
from truss_files.trust.audit import audit


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc


class Operator:
    """The CLI against one store, signing with one private key file."""

    def __init__(self, path: Path, key: Path) -> None:
        self.path, self.key = path, key

    def run(self, *args: str, input: str | None = None) -> Result:
        # Before any "--", after which every word is an argument.
        cut = args.index("--") if "--" in args else len(args)
        tail = [*args[:cut], "--format", "json", *args[cut:]]
        argv = ["--store", str(self.path), "--key", str(self.key), *tail]
        return CliRunner().invoke(cli, argv, input=input)

    def ok(self, *args: str, input: str | None = None) -> Any:
        result = self.run(*args, input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return json.loads(result.output)

    def refused(self, *args: str, input: str | None = None) -> str:
        result = self.run(*args, input=input)
        assert result.exit_code == 1, (result.output, result.exception)
        message: str = json.loads(result.output)["error"]["message"]
        return message


def _key(tmp_path: Path, name: str) -> tuple[Ed25519Signer, Path, Path]:
    signer = Ed25519Signer.generate(f"{name}@example.test")
    signer.save(tmp_path / name)
    pub = tmp_path / f"{name}.pub"
    pub.write_text(signer.public_line + "\n")
    return signer, tmp_path / name, pub


def _state(store: MemoryStore) -> tuple[str, bytes | None, bytes | None]:
    """The branch tip and both policy files, in git and in the work tree."""
    snap = store.snapshot()
    work = store.git.workdir
    assert work is not None
    assert (work / SIGNERS_PATH).read_bytes() == snap.read(SIGNERS_PATH)
    assert (work / CONFIG_PATH).read_bytes() == snap.read(CONFIG_PATH)
    return str(snap.oid), snap.read(SIGNERS_PATH), snap.read(CONFIG_PATH)


@pytest.fixture
def op(store: MemoryStore, tmp_path: Path) -> Operator:
    work = store.git.workdir
    assert work is not None
    return Operator(work, tmp_path / "operator_key")


def test_add_and_grant_are_one_signed_commit_each_that_the_audit_accepts(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    alice, alice_key, alice_pub = _key(tmp_path, "alice")
    before = store.git.tip()
    assert before is not None

    added = op.ok("signers", "add", "alice@example.test", str(alice_pub))
    granted = op.ok("roles", "grant", "agent", "alice@example.test")

    tip = store.git.tip()
    assert tip is not None and str(tip.id) == granted["commit"]
    assert [str(p.id) for p in tip.parents] == [added["commit"]]
    assert [str(p.id) for p in store.git.commit(added["commit"]).parents] == [str(before.id)]
    fields = parse_trailers(tip.message)
    assert fields["Truss-Op"] == ["roles"] and fields["Truss-Action"] == ["grant"]
    assert parse_trailers(store.git.commit(added["commit"]).message)["Truss-Op"] == ["signers"]
    report = audit(store.git)
    assert report.ok and report.checked == 3, report.violations
    # git itself verifies the signature against the file the commit was judged by.
    work = store.git.workdir
    assert work is not None
    _git(work, "config", "gpg.ssh.allowedSignersFile", str(work / SIGNERS_PATH))
    _git(work, "verify-commit", added["commit"])

    rows = {r["principal"]: r for r in op.ok("signers", "list")}
    assert rows["alice@example.test"]["roles"] == ["agent"]
    assert rows["alice@example.test"]["namespaces"] == ["git", "truss-verdict"]
    assert rows["operator@example.test"]["roles"] == ["operator", "panel", "agent", "trainer"]
    # The new key now writes as an agent, and only as one.
    written = MemoryStore(work, signer=alice).write("fact", "from-alice", "Alice writes.")
    assert written.author == "agent:alice@example.test"
    assert audit(store.git).ok
    # Running the same change again changes nothing and makes no commit.
    again = op.ok("roles", "grant", "agent", "alice@example.test")
    assert again["commit"] is None and "unchanged" in again["summary"]
    assert Operator(work, alice_key).refused("roles", "grant", "operator", "alice@example.test")


def test_remove_and_revoke_commit_and_the_removed_key_can_no_longer_write(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    bob, _, bob_pub = _key(tmp_path, "bob")
    op.ok("signers", "add", "bob@example.test", str(bob_pub))
    op.ok("roles", "grant", "agent", "bob@example.test")
    revoked = op.ok("roles", "revoke", "agent", "bob@example.test")
    assert revoked["commit"]
    op.ok("roles", "grant", "panel", "bob@example.test")
    removed = op.ok("signers", "remove", "bob@example.test")
    assert removed["commit"] and "still holds panel" in removed["notes"][0]
    assert "bob@example.test" not in (store.snapshot().read(SIGNERS_PATH) or b"").decode()
    assert audit(store.git).ok
    with pytest.raises(Exception, match="not in .truss/allowed_signers"):
        MemoryStore(store.git.workdir or ".", signer=bob).write("fact", "late", "Too late.")


def test_a_key_from_stdin_is_added(store: MemoryStore, op: Operator, tmp_path: Path) -> None:
    carol, _, carol_pub = _key(tmp_path, "carol")
    done = op.ok("signers", "add", "carol@example.test", "-", input=carol_pub.read_text())
    assert done["commit"]
    assert carol.public_line.split()[1] in (store.snapshot().read(SIGNERS_PATH) or b"").decode()


@pytest.mark.parametrize(
    "argv",
    [
        ("signers", "add", "mallory@example.test", "{pub}"),
        ("signers", "remove", "operator@example.test"),
        ("roles", "grant", "operator", "mallory@example.test"),
        ("roles", "grant", "operator", "agent@example.test"),
        ("roles", "revoke", "operator", "operator@example.test"),
    ],
    ids=["signers-add", "signers-remove", "roles-grant-self", "roles-grant-other", "revoke"],
)
@pytest.mark.parametrize("who", ["agent-role", "unknown-key"])
def test_a_non_operator_is_refused_before_anything_moves(
    store: MemoryStore,
    op: Operator,
    tmp_path: Path,
    argv: tuple[str, ...],
    who: str,
) -> None:
    _, agent_key, agent_pub = _key(tmp_path, "agent")
    op.ok("signers", "add", "agent@example.test", str(agent_pub))
    op.ok("roles", "grant", "agent", "agent@example.test")
    _, mallory_key, mallory_pub = _key(tmp_path, "mallory")
    if who == "agent-role":
        # The agent even lists mallory's key first, so a grant has someone to name.
        op.ok("signers", "add", "mallory@example.test", str(mallory_pub))
    before = _state(store)
    objects = _git(store.git.workdir or tmp_path, "count-objects", "-v").stdout

    attacker = Operator(op.path, agent_key if who == "agent-role" else mallory_key)
    message = attacker.refused(*(a.format(pub=mallory_pub) for a in argv))

    if who == "agent-role":
        assert "agent@example.test" in message and "needs the operator role" in message
    else:
        assert "is not in .truss/allowed_signers" in message
    assert _state(store) == before
    # Refused before signing: not even a dangling commit object was written.
    assert _git(store.git.workdir or tmp_path, "count-objects", "-v").stdout == objects
    assert audit(store.git).ok


def test_removing_the_last_operator_is_refused_with_a_clear_message(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    before = _state(store)
    for argv in (
        ("roles", "revoke", "operator", "operator@example.test"),
        ("signers", "remove", "operator@example.test"),
    ):
        message = op.refused(*argv)
        assert "leave no operator with a key that can sign commits" in message
        assert "truss-files roles grant operator" in message
        assert _state(store) == before
    # An operator principal without a key does not count as a second operator.
    text = (before[2] or b"").decode()
    paper = text.replace(
        'operator = ["operator@example.test"]',
        'operator = ["operator@example.test", "ghost@example.test"]',
    )
    assert paper != text
    store.git.apply(
        lambda _s: __import__("truss_files.git.gitstore").git.gitstore.Plan(
            {CONFIG_PATH: paper.encode()}, "truss: ghost\n\nTruss-Op: roles"
        ),
        store.signer,
        store.identity("operator@example.test"),
    )
    assert "leave no operator" in op.refused("roles", "revoke", "operator", "operator@example.test")


def test_revoking_your_own_operator_role_needs_another_operator_and_then_binds(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    _, dana_key, dana_pub = _key(tmp_path, "dana")
    op.ok("signers", "add", "dana@example.test", str(dana_pub))
    op.ok("roles", "grant", "operator", "dana@example.test")

    done = op.ok("roles", "revoke", "operator", "operator@example.test")

    assert done["commit"] and "no longer holds the operator role" in done["notes"][0]
    assert audit(store.git).ok
    before = _state(store)
    message = op.refused("roles", "grant", "operator", "operator@example.test")
    assert "needs the operator role" in message
    assert _state(store) == before
    # The remaining operator can give it back.
    assert Operator(op.path, dana_key).ok("roles", "grant", "operator", "operator@example.test")
    assert audit(store.git).ok


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "exactly one public key line"),
        ("not a key at all\n", "ssh-ed25519"),
        ("ssh-ed25519 AAAA!!notbase64\n", "not valid base64"),
        ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 rsa@example.test\n", "ssh-ed25519"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n",
            "holds a private key",
        ),
        ("{line}\n{line}\n", "exactly one public key line"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== short\n", "ssh-ed25519"),
    ],
    ids=["empty", "garbage", "bad-base64", "rsa", "private", "two-lines", "truncated"],
)
def test_a_malformed_public_key_file_is_refused(
    store: MemoryStore, op: Operator, tmp_path: Path, content: str, expected: str
) -> None:
    _, _, pub = _key(tmp_path, "erin")
    bad = tmp_path / "bad.pub"
    bad.write_text(content.format(line=pub.read_text().strip()))
    before = _state(store)

    message = op.refused("signers", "add", "erin@example.test", str(bad))

    assert expected in message and str(bad) in message
    assert _state(store) == before
    missing = op.refused("signers", "add", "erin@example.test", str(tmp_path / "nope.pub"))
    assert "cannot read the public key file" in missing


@pytest.mark.parametrize(
    "principal",
    [
        "evil\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOmvbx2JfTVs5xqn1e3jXUUZtXrG3cMkRz2qJvQzMb1z",
        "evil\rroot",
        "a b",
        'x namespaces="*"',
        "*",
        "eve@example.test,operator@example.test",
        '"quoted"',
        "#comment",
        "-o",
        "tab\there",
        "",
        "x" * 129,
        "line\u2028sep",
    ],
    ids=lambda p: repr(p)[:24],
)
def test_a_principal_that_could_inject_into_allowed_signers_is_refused(
    store: MemoryStore, op: Operator, tmp_path: Path, principal: str
) -> None:
    _, _, pub = _key(tmp_path, "frank")
    before = _state(store)

    add = op.refused("signers", "add", "--", principal, str(pub))
    grant = op.refused("roles", "grant", "panel", "--", principal)

    assert "invalid principal" in add and "invalid principal" in grant
    assert _state(store) == before


def test_one_key_cannot_sign_for_two_principals(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    _, _, pub = _key(tmp_path, "gina")
    op.ok("signers", "add", "gina@example.test", str(pub))
    before = _state(store)
    message = op.refused("signers", "add", "operator-too@example.test", str(pub))
    assert "already belongs to gina@example.test" in message
    assert _state(store) == before
    assert "no key in .truss/allowed_signers" in op.refused("roles", "grant", "panel", "nobody")


def test_the_commit_msg_hook_accepts_the_commit_as_made(
    store: MemoryStore, op: Operator, tmp_path: Path
) -> None:
    work = store.git.workdir
    assert work is not None
    install_hooks(work)
    _, _, pub = _key(tmp_path, "hana")
    done = op.ok("signers", "add", "hana@example.test", str(pub))
    message = store.git.commit(done["commit"]).message
    # Stage the same change by hand and commit it with the same message through real git.
    _git(work, "reset", "-q", "--soft", "HEAD~1")
    (tmp_path / "msg").write_text(message)
    made = _git(work, "commit", "-q", "-F", str(tmp_path / "msg"), check=False)
    assert made.returncode == 0, made.stderr
    # The hook still refuses the same change without the trailers.
    _git(work, "reset", "-q", "--soft", "HEAD~1")
    bare = _git(work, "commit", "-q", "-m", "add hana", check=False)
    assert bare.returncode != 0 and "[trailers]" in bare.stderr
    assert "truss-files signers add" in bare.stderr


def test_the_server_gate_takes_the_operator_commit_and_refuses_a_forged_one(
    clone: Callable[[str], MemoryStore], server: Path, tmp_path: Path
) -> None:
    local = clone("work")
    work = local.git.workdir
    assert work is not None
    op = Operator(work, tmp_path / "operator_key")
    _, ivan_key, ivan_pub = _key(tmp_path, "ivan")
    op.ok("signers", "add", "ivan@example.test", str(ivan_pub))
    op.ok("roles", "grant", "agent", "ivan@example.test")
    pushed = _git(work, "push", "-q", "origin", "main", check=False)
    assert pushed.returncode == 0, pushed.stderr
    assert _git(server, "rev-parse", "main").stdout == _git(work, "rev-parse", "main").stdout

    # Ivan (an agent) grants himself operator by hand-editing the file and signing the commit.
    from truss_files.git.gitstore import Identity, Plan

    ivan = Ed25519Signer.load(ivan_key)
    text = (local.snapshot().read(CONFIG_PATH) or b"").decode()
    forged = text.replace(
        'operator = ["operator@example.test"]',
        'operator = ["operator@example.test", "ivan@example.test"]',
    )
    local.git.apply(
        lambda _s: Plan({CONFIG_PATH: forged.encode()}, "truss: grant\n\nTruss-Op: roles"),
        ivan,
        Identity("ivan", "ivan@example.test"),
    )
    refused = _git(work, "push", "-q", "origin", "main", check=False)
    assert refused.returncode != 0 and "[role]" in refused.stderr


def test_set_roles_keeps_the_rest_of_the_file_and_refuses_what_it_cannot_edit() -> None:
    text = (
        '# top comment\n[roles]\n# who operates\noperator = [\n  "a",\n  "b", # two\n]\n'
        'panel = ["a"]\n\n[policy]\nverification = "lazy"\n'
    )
    out = set_roles(text, {"operator": ["a"], "panel": ["a", "c"], "agent": ["c"]})
    assert out.startswith('# top comment\n[roles]\n# who operates\noperator = ["a"]\n')
    assert 'panel = ["a", "c"]\nagent = ["c"]\n\n[policy]\nverification = "lazy"\n' in out
    assert set_roles("[policy]\nx = 1\n", {"operator": ["a"], "panel": [], "agent": []}).endswith(
        '[roles]\noperator = ["a"]\npanel = []\nagent = []\n'
    )
    with pytest.raises(ConfigError, match="plain \\[roles\\] table"):
        set_roles('roles.operator = ["a"]\n', {"operator": ["b"], "panel": [], "agent": []})


def test_the_signers_block_can_be_run_again(tmp_path: Path) -> None:
    """tests/test_docs.py runs every docs block once, in order; this one twice."""
    from tests.test_docs import run_as_newcomer, sh_block

    home = tmp_path / "home"
    home.mkdir()
    start = sh_block("A store in five commands", ". .venv/bin/activate")
    assert run_as_newcomer(home, start).returncode == 0
    block = ". .venv/bin/activate\n" + sh_block(
        "Managing signers and roles", "cd ~/agent-memory", page="docs/operators/enforcement.md"
    )
    for _ in range(2):
        done = run_as_newcomer(home, block)
        assert done.returncode == 0, done.stderr
        assert "alice@example.com" in done.stdout and "\tpanel" in done.stdout
        assert "ok:" in done.stdout.splitlines()[-1]
    signers = (home / "agent-memory" / SIGNERS_PATH).read_text()
    assert "alice@example.com" not in signers
