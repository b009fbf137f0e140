"""trust/leaks.py: a credential that got into the history past the write path.

A commit made with plain ``git commit`` never meets the library's check: the server gate and
the pre-commit hook refuse it (rule ``secret``); ``truss-files audit`` names one already in the
history and exits 1, while reads keep serving verified memory and the remedy (reject, demote)
keeps working. Everything runs real git, real ssh signatures and the installed hooks; the
credential is made at run time (tests/support/credentials.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from truss_files.facade import MemoryStore, audit_history
from truss_files.faces.cli.main import cli
from truss_files.faces.hooks import install_hooks
from truss_files.format.entryfile import serialize
from truss_files.model import Entry, Kind, Provenance
from truss_files.signing import Ed25519Signer

from ..support.credentials import CREDENTIALS

TOKEN = CREDENTIALS["github-token"]
BY_HAND = Provenance(produced_by="cli:operator@example.test")
SCRIPT_DIR = str(Path(sys.executable).parent)


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stdout}{done.stderr}")
    return done


def _tip(path: Path) -> str:
    return _git(path, "rev-parse", "refs/heads/main").stdout.strip()


def _by_hand(work: Path, key: Path, body: str, name: str) -> Entry:
    """An entry file written with an editor and committed with plain ``git commit -S`` (ssh
    signature by the operator's key): no library check runs."""
    entry = Entry(Kind.FACT, name, body, created="2026-12-07T11:00:00Z", provenance=BY_HAND)
    target = work / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(serialize(entry))
    _git(work, "add", entry.path)
    signing = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
    done = _git(
        work, *signing, "commit", "-S", "-q", "-m", f"{name}\n\nTruss-Op: write", check=False
    )
    assert done.returncode == 0 or "[secret]" in done.stderr, done.stderr
    return entry


# -- the gate --------------------------------------------------------------------------------


def test_the_server_gate_refuses_a_hand_commit_adding_a_credential(
    server: Path, clone: Callable[[str], MemoryStore], tmp_path: Path
) -> None:
    work = tmp_path / "a"
    clone("a")
    key = tmp_path / "operator_key"
    # A signed hand commit of a plain entry passes the gate: what follows is the credential's.
    plain = _by_hand(work, key, "The deploy key lives in the vault.", "vault")
    assert _git(work, "push", "-q", "origin", "main", check=False).returncode == 0
    before = _tip(server)
    leaked = _by_hand(work, key, f"Deploy with {TOKEN} from CI.", "deploy")
    sha = _tip(work)

    pushed = _git(work, "push", "origin", "main", check=False)

    assert pushed.returncode != 0
    lines = [x for x in pushed.stderr.splitlines() if "[secret]" in x]
    assert len(lines) == 1, pushed.stderr
    assert f"commit {sha[:12]} {leaked.path}: [secret] entry {leaked.id}" in lines[0]
    assert "field 'body', line 1, column 13: github-token" in lines[0]
    assert TOKEN not in pushed.stderr and TOKEN[4:20] not in pushed.stderr
    assert _tip(server) == before
    assert plain.id != leaked.id


def test_the_operators_allow_lets_the_gate_pass_a_known_value(
    server: Path,
    clone: Callable[[str], MemoryStore],
    tmp_path: Path,
    signed_commit: Callable[..., str],
) -> None:
    a = clone("a")
    work = tmp_path / "a"
    toml = (work / "truss.toml").read_text()
    signed_commit(a, {"truss.toml": (toml + f'\n[secrets]\nallow = ["{TOKEN}"]\n').encode()})
    _by_hand(work, tmp_path / "operator_key", f"The docs' example is {TOKEN}.", "example")

    pushed = _git(work, "push", "origin", "main", check=False)

    assert pushed.returncode == 0, pushed.stderr
    assert _tip(server) == _tip(work)


def test_the_pre_commit_hook_refuses_staging_a_credential(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = store.git.workdir
    assert work is not None
    install_hooks(work, command=f"{sys.executable} -m truss_files")
    before = _tip(work)
    body = f"Connect with {CREDENTIALS['password-in-url']} for now."
    entry = Entry(Kind.FACT, "db", body, created="2026-12-07T11:00:00Z", provenance=BY_HAND)
    (work / entry.path).parent.mkdir(parents=True, exist_ok=True)
    (work / entry.path).write_text(serialize(entry))
    _git(work, "add", entry.path)
    key = tmp_path / "operator_key"

    done = _git(
        work, "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}",
        "commit", "-S", "-q", "-m", "db\n\nTruss-Op: write", check=False,
    )  # fmt: skip

    assert done.returncode != 0
    assert f"truss-files pre-commit: {entry.path}: [secret] entry {entry.id}" in done.stderr
    assert "password-in-url" in done.stderr
    assert CREDENTIALS["password-in-url"] not in done.stderr
    assert _tip(work) == before


# -- the audit -------------------------------------------------------------------------------


def test_the_audit_names_an_old_credential_and_reads_and_remedies_go_on(
    store: MemoryStore,
    tmp_path: Path,
    signed_commit: Callable[..., str],
    operator_key: Ed25519Signer,
) -> None:
    good = store.write("fact", "ci", "The CI runs on every push.")
    store.promote(good.id, store.sign_verdict(good.id, "PASS", note="checked"))
    leaked = Entry(
        Kind.FACT, "deploy", f"Deploy with {TOKEN} from CI.",
        created="2026-12-07T11:00:00Z", provenance=BY_HAND,
    )  # fmt: skip
    # Past the write path: a signed commit no library check ran on (as before the gate was).
    sha = signed_commit(
        store,
        {leaked.path: serialize(leaked).encode()},
        message="truss: by hand\n\nTruss-Op: write",
    )
    path = store.git.workdir
    assert path is not None

    report = audit_history(path)
    assert report.ok and not report.violations  # the history keeps the store's rules
    assert [(v.commit, v.path, v.rule) for v in report.secrets] == [(sha, leaked.path, "secret")]
    assert f"entry {leaked.id}" in report.secrets[0].message
    assert "github-token" in report.secrets[0].message and TOKEN not in str(report)

    runner = CliRunner()
    base = ["--store", str(path), "--key", str(tmp_path / "operator_key")]
    text = runner.invoke(cli, [*base, "audit", "--format", "text"])
    assert text.exit_code == 1, text.output
    assert f"{sha[:12]} {leaked.path}: [secret] entry {leaked.id}" in text.output
    assert TOKEN not in text.output
    data = runner.invoke(cli, [*base, "audit", "--format", "json"])
    assert data.exit_code == 1
    found = json.loads(data.output)
    assert found["ok"] is False and found["violations"] == []
    assert [s["path"] for s in found["secrets"]] == [leaked.path]

    # Reads keep serving verified memory: the read gate does not weigh the finding.
    hits = store.query("CI push", min_trust="verified")
    assert [h.entry.id for h in hits.hits] == [good.id]
    # The remedy still writes: reject the entry (and the audit still names it: only an
    # erasure takes the text out of history).
    rejected = store.reject(leaked.id, store.sign_verdict(leaked.id, "FAIL", note="a token"))
    assert rejected.trust.value == "rejected"
    again = audit_history(path)
    assert again.ok and [v.path for v in again.secrets] == [leaked.path]


def test_a_demote_of_a_verified_entry_holding_a_credential_still_works(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    leaked = Entry(
        Kind.FACT, "deploy", f"Deploy with {TOKEN} from CI.",
        created="2026-12-07T11:00:00Z", provenance=BY_HAND,
    )  # fmt: skip
    signed_commit(
        store,
        {leaked.path: serialize(leaked).encode()},
        message="truss: by hand\n\nTruss-Op: write",
    )
    store.promote(leaked.id, store.sign_verdict(leaked.id, "PASS", note="before the audit"))
    assert [h.entry.id for h in store.query("deploy", min_trust="verified").hits] == [leaked.id]

    demoted = store.demote(leaked.id, "holds a token")

    assert demoted.trust.value == "stale"
    assert store.query("deploy", min_trust="verified").hits == []


def test_a_clean_history_audits_clean(store: MemoryStore) -> None:
    store.write("fact", "look-alike", "Fixed in 3f786850e387550fdab836ed7e6dc881de23001b on main.")
    path = store.git.workdir
    assert path is not None
    report = audit_history(path)
    assert report.clean and report.secrets == ()
