"""Secrets never become memory: each credential offered through every face is refused.

Each attack goes through a real face (the console script, the import, the memory tool and
write_memory through the dispatcher, the MCP SDK's own client, the Python API, an identity
amendment; a running HTTP server: test_secret_faces.py) against a real signed store, and
then the repository is searched: no object under ``.git`` (``git cat-file
--batch-all-objects``, reachable or not) and no file under ``.git`` holds the value, no ref
moved, and the refusal never echoes it. The look-alikes are stored as they are; an
operator's signed ``[secrets] allow`` lets a value through.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.credentials import CREDENTIALS, KIND, LOOKALIKES
from tests.support.script import run
from tests.support.tools_support import configure, promote
from truss_files.errors import SecretFound
from truss_files.facade import MemoryStore
from truss_files.format.secrets import find
from truss_files.git.gitstore import Snapshot
from truss_files.identity.amend import propose
from truss_files.signing.trustpolicy import CONFIG_PATH
from truss_files.tools import ToolSession

GITHUB = CREDENTIALS["github-token"]


class Repo:
    """What a refused write must leave exactly as it was: every object (reachable or not),
    every ref (the branch, run ledgers, notes), every file under .git."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.git_dir = Path(store.git.git_dir)
        self.before = self.state()

    def objects(self) -> set[str]:
        out = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"],
            cwd=self.git_dir,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return set(out.split())

    def state(self) -> tuple[set[str], str]:
        refs = subprocess.run(
            ["git", "for-each-ref", "--format=%(refname) %(objectname)"],
            cwd=self.git_dir,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return self.objects(), refs

    def holds(self, value: str) -> list[str]:
        """Where ``value`` is: in an object's content, or in a file under .git."""
        found = []
        content = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"],
            cwd=self.git_dir,
            capture_output=True,
            check=True,
        ).stdout
        if value.encode() in content:
            found.append("an object")
        for path in self.git_dir.rglob("*"):
            if path.is_file() and value.encode() in path.read_bytes():
                found.append(str(path.relative_to(self.git_dir)))
        return found

    def untouched(self, *values: str) -> None:
        assert self.state() == self.before
        for value in values:
            assert self.holds(value) == [], value


def silent(text: str, value: str) -> None:
    """The refusal names no part of the value (nor a long run of it)."""
    assert value not in text
    for i in range(0, max(1, len(value) - 16), 4):
        assert value[i : i + 16] not in text


# -- the Python API -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_every_shape_is_refused_by_the_front_door_and_nothing_is_written(
    store: MemoryStore, name: str
) -> None:
    value = CREDENTIALS[name]
    repo = Repo(store)
    with pytest.raises(SecretFound) as caught:
        store.write("fact", "deploy", f"The deploy token is {value} for now.")
    assert caught.value.code == "secret"
    column = 21 + find(value)[0].start  # where the secret part starts (a URL's password)
    assert f"field 'body', line 1, column {column}: {KIND[name]}" in caught.value.message
    silent(caught.value.message, value)
    repo.untouched(value)


@pytest.mark.parametrize(
    ("field", "fields", "said"),
    [
        ("key", {"key": "tok-" + GITHUB}, "field 'key'"),
        ("scope", {"scope": {"project": GITHUB}}, "field 'scope.project'"),
        ("author", {"author": "agent:" + GITHUB}, "field 'author'"),
        ("sources", {"sources": ["run:R-1/" + GITHUB]}, "field 'provenance.sources[0]'"),
    ],
)
def test_a_secret_in_any_front_matter_field_is_refused(
    store: MemoryStore, field: str, fields: dict[str, Any], said: str
) -> None:
    repo = Repo(store)
    key = fields.pop("key", "deploy")
    with pytest.raises(Exception) as caught:
        store.write("fact", key, "Plain text.", **fields)
    # A ledger ref has its own shape rule, whose refusal would quote it: a credential in it
    # is refused as one instead.
    silent(str(caught.value), GITHUB)
    assert isinstance(caught.value, SecretFound), caught.value
    assert said in caught.value.message, caught.value.message
    repo.untouched(GITHUB)


def test_a_batch_is_refused_whole_naming_each_entry(store: MemoryStore) -> None:
    repo = Repo(store)
    entries = [
        store.new_entry("fact", "a", "Plain."),
        store.new_entry("fact", "b", "Token " + GITHUB),
        store.new_entry("fact", "c", "Also plain."),
        store.new_entry("fact", "d", CREDENTIALS["aws-access-key-id"]),
    ]
    with pytest.raises(SecretFound) as caught:
        store.write_many(entries)
    assert caught.value.places == (
        "entry 2: field 'body', line 1, column 7: github-token",
        "entry 4: field 'body', line 1, column 1: aws-access-key-id",
    )
    repo.untouched(GITHUB)
    assert store.list_entries() == []


def test_an_identity_amendment_holding_a_secret_is_refused(store: MemoryStore) -> None:
    repo = Repo(store)
    with pytest.raises(SecretFound) as caught:
        propose(store, f"# Self\n\nI deploy with {GITHUB}.\n")
    assert "identity/proposals/" in caught.value.message and "github-token" in caught.value.message
    silent(caught.value.message, GITHUB)
    repo.untouched(GITHUB)


def test_a_secret_stored_before_can_still_be_demoted(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    """The check refuses new text, never a trust change of text already there: a note that
    got in before (a hand-made commit) must stay removable through the ordinary paths."""
    from truss_files.format import entryfile

    entry = store.new_entry("fact", "old", "Token " + GITHUB)
    signed_commit(
        store,
        {entry.path: entryfile.serialize(entry).encode()},
        message=f"truss: write fact old\n\nTruss-Op: write\nTruss-Entry: {entry.id}",
    )
    promote(store, entry.id)
    demoted = store.demote(entry.id, "holds a credential; erase it")
    assert demoted.trust.value == "stale"


# -- the CLI -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["password-in-url"])  # every shape: test_secret_faces.py
def test_the_cli_write_exits_1_with_code_secret_and_never_prints_the_value(
    store: MemoryStore, name: str
) -> None:
    value = CREDENTIALS[name]
    repo = Repo(store)
    done = run(store, "operator_key", "write", "--kind", "fact", "--key", "db", "--format",
               "json", f"connect with {value}")  # fmt: skip
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "secret"
    column = 14 + find(value)[0].start
    assert f"field 'body', line 1, column {column}: {KIND[name]}" in error["message"]
    silent(done.stdout + done.stderr, value)
    text = run(store, "operator_key", "write", "--kind", "fact", "--key", "db", "--scope",
               f"project={value}", "Plain.")  # fmt: skip
    assert text.returncode == 1 and "scope.project" in text.stdout + text.stderr
    silent(text.stdout + text.stderr, value)
    repo.untouched(value)


def test_import_is_all_or_nothing_and_names_every_offending_line(
    store: MemoryStore, tmp_path: Path
) -> None:
    value, other = GITHUB, CREDENTIALS["slack-token"]
    lines = [
        {"kind": "fact", "key": "a", "body": "Plain."},
        {"kind": "fact", "key": "b", "body": f"Use {value}."},
        {"kind": "fact", "key": "c", "body": "Also plain."},
        {"kind": "fact", "key": "d", "body": "Plain.", "scope": {"project": other}},
    ]
    notes = tmp_path / "notes.jsonl"
    notes.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    repo = Repo(store)
    done = run(store, "operator_key", "import", str(notes), "--format", "json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "secret"
    assert f"{notes}:2: field 'body', line 1, column 5: github-token" in error["message"]
    assert f"{notes}:4: field 'scope.project'" in error["message"]
    assert f"{notes}:1" not in error["message"] and f"{notes}:3" not in error["message"]
    silent(done.stdout + done.stderr, value)
    silent(done.stdout + done.stderr, other)
    repo.untouched(value, other)


def test_the_lookalikes_are_stored_as_they_are(store: MemoryStore, tmp_path: Path) -> None:
    notes = tmp_path / "lookalikes.jsonl"
    notes.write_text(
        "\n".join(
            json.dumps({"kind": "fact", "key": f"look-{n}", "body": text})
            for n, text in enumerate(LOOKALIKES.values())
        )
        + "\n"
    )
    done = run(store, "operator_key", "import", str(notes), "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["imported"] == len(LOOKALIKES)
    assert sorted(e.body for e in store.list_entries()) == sorted(LOOKALIKES.values())


# -- the tools: the memory tool, write_memory, MCP ---------------------------------------------


def test_the_memory_tool_refuses_a_secret_in_file_text_or_path(store: MemoryStore) -> None:
    configure(store, memory=True, memory_write=True)
    repo = Repo(store)
    session = ToolSession(store, flags=["memory_write"], run_id="R-secret", durable=True)
    attempts = [
        {"command": "create", "path": "/memories/ops/deploy.md", "file_text": f"tok {GITHUB}\n"},
        {"command": "create", "path": f"/memories/ops/{GITHUB}.md", "file_text": "plain\n"},
    ]
    for attempt in attempts:
        done = session.call("memory", attempt)
        assert not done.ok and done.error is not None
        assert done.error["code"] == "secret", done.error
        silent(json.dumps(done.error), GITHUB)
        # Refused before anything was stored: no ledger commit either.
        assert done.ledger_ref is None
    written = session.call("write_memory", {"kind": "fact", "key": "k", "body": "x " + GITHUB})
    assert written.error is not None and written.error["code"] == "secret"
    repo.untouched(GITHUB)


def test_mcp_answers_a_tool_error_and_stores_nothing(store: MemoryStore) -> None:
    mcp = pytest.importorskip("mcp")
    from truss_files.faces.mcp import build_server

    configure(store, memory=True, memory_write=True)
    repo = Repo(store)
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="M-secret")

    async def main() -> None:
        async with mcp.Client(build_server(session)) as client:
            made = await client.call_tool(
                "write_memory", {"kind": "fact", "key": "deploy", "body": f"token {GITHUB}"}
            )
            assert made.is_error
            text = made.content[0].text  # type: ignore[union-attr]
            assert "secret" in text and "github-token" in text
            silent(text, GITHUB)
            made = await client.call_tool(
                "memory",
                {"command": "create", "path": "/memories/x.md", "file_text": GITHUB},
            )
            assert made.is_error
            silent(made.content[0].text, GITHUB)  # type: ignore[union-attr]

    anyio.run(main)
    repo.untouched(GITHUB)


# -- the operator's exceptions ---------------------------------------------------------------


def test_a_value_the_signed_truss_toml_allows_is_stored(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    value = CREDENTIALS["aws-access-key-id"]

    def allow(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read(CONFIG_PATH) or b"").decode()
        return {CONFIG_PATH: (text + f'\n[secrets]\nallow = ["{value}"]\n').encode()}

    signed_commit(store, allow)
    entry = store.write("fact", "docs", f"The documented example key is {value}.")
    assert value in store.get(entry.id).body
    # Only that value: another credential in the same store is still refused.
    with pytest.raises(SecretFound):
        store.write("fact", "other", GITHUB)


def test_an_unsigned_layer_cannot_allow_a_value(store: MemoryStore, tmp_path: Path) -> None:
    """The user config, a contract or the environment cannot switch the check off: the
    allow list is read from the signed truss.toml alone (authority ``operator``; the
    generated attacks in test_authority_attacks.py try every layer)."""
    value = CREDENTIALS["aws-access-key-id"]
    contract = tmp_path / "contract.toml"
    contract.write_text(f'[secrets]\nallow = ["{value}"]\n')
    repo = Repo(store)
    done = run(store, "operator_key", "write", "--kind", "fact", "--key", "k", "--format",
               "json", value, TRUSS_CONTRACT=str(contract))  # fmt: skip
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] in ("config", "secret")
    silent(done.stdout + done.stderr, value)
    repo.untouched(value)


# -- what is learned unattended: masked, not refused ---------------------------------------------


def test_an_unattended_write_keeps_the_lesson_with_the_value_masked(store: MemoryStore) -> None:
    value = CREDENTIALS["github-token"]
    transcript = (
        f"Deploys failed until the token {value} was rotated. "
        "<private>The on-call phone is 555-0100.</private>Rotate before Friday."
    )
    before = store.git.tip()
    entry = store.write("lesson", "deploy-token", transcript, unattended=True)
    assert entry.body == (
        "Deploys failed until the token [secret:github-token] was rotated. Rotate before Friday."
    )
    assert entry.provenance.masked == ("github-token",)
    stored = store.get(entry.id)
    assert stored.provenance.masked == ("github-token",) and stored.body == entry.body
    # Learning the same transcript twice stores nothing new.
    tip = store.git.tip()
    again = store.write("lesson", "deploy-token", transcript, unattended=True)
    assert again.id == entry.id and store.git.tip() == tip and tip != before
    # The recall index reads the masked note back the same (its fast path hands a file with
    # a provenance.masked line to the strict parser).
    found = store.query("deploys failed token rotated", min_trust="unverified")
    assert [h.entry.id for h in found.hits] == [entry.id]
    assert found.hits[0].entry.provenance.masked == ("github-token",)
    repo = Repo(store)
    assert repo.holds(value) == [] and repo.holds("555-0100") == []


def test_an_unattended_write_still_refuses_a_credential_outside_the_body(
    store: MemoryStore,
) -> None:
    repo = Repo(store)
    with pytest.raises(SecretFound):
        store.write("lesson", "k", "Plain.", scope={"project": GITHUB}, unattended=True)
    repo.untouched(GITHUB)
