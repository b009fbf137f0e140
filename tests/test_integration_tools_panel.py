"""Where the agent tools meet the panel and the layered settings.

- The verification policy (eager / tiered / lazy / off) applies to the tools' writes —
  ``write_memory`` and every writing command of the ``memory`` binding — as it does to the
  CLI's ``write``, with the binding's texts kept word for word.
- ``memory_query`` and ``memory_view`` report keep-both-flagged conflicts as ``query`` does.
- The read tools take their recall mode from the layered settings (user config, agent,
  contract), cold or with the store open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fastloop import starts_processes
from tests.support.tools_support import PRINCIPAL, call, cli, content, error, out, promote
from truss_files.config.settings import global_config_path
from truss_files.config.tipconfig import user_config_file
from truss_files.facade import MemoryStore
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan
from truss_files.model import Kind, Trust
from truss_files.signing import Ed25519Signer
from truss_files.tools import ToolSession
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict

# Shell checks: the panel runs each through `sh -c` (not in the fast loop).
PASSING = starts_processes('[{type = "check", command = "true"}]')
FAILING = starts_processes('[{type = "check", command = "false"}]')


def set_toml(
    store: MemoryStore,
    *,
    verification: str = "lazy",
    conflict: str = "verified-wins",
    recall: str = "exact",
    extra: str = "",
) -> None:
    """Rewrite truss.toml (tools on, both gates) in one operator-signed commit."""
    text = f"""[roles]
operator = ["{PRINCIPAL}"]
panel = ["{PRINCIPAL}"]
agent = ["{PRINCIPAL}"]

[tools]
memory = true
memory_write = true

[policy]
verification = "{verification}"
conflict = "{conflict}"

[recall]
mode = "{recall}"
{extra}
"""
    message = "truss: configure\n\n" + trailers(op="config")
    store._apply(lambda _snap: Plan({"truss.toml": text.encode()}, message), {"operator"})


def reviewers(**per_kind: str) -> str:
    return "\n[panel.reviewers]\n" + "".join(f"{k} = {v}\n" for k, v in per_kind.items())


def trust_of(store: MemoryStore, entry_id: str) -> Trust:
    return store.get(entry_id).trust


# -- 1. the verification policy on the tools' write path ---------------------------------


def test_write_memory_under_eager_ends_verified(store: MemoryStore) -> None:
    set_toml(store, verification="eager", extra=reviewers(fact=PASSING))
    done = call(store, "write_memory", {"kind": "fact", "key": "db", "body": "Postgres 16."})
    result = done.payload
    assert result["trust"] == "verified"
    assert result["verification"]["status"] == "promoted"
    assert result["verification"]["id"] == result["id"]
    assert "note" not in result
    entry = store.get(result["id"])
    assert entry.trust is Trust.VERIFIED
    verdict = Verdict.from_dict(entry.provenance.verified_by or {})
    assert verdict.policy == "eager" and verdict.outcome == "PASS"
    assert done.note is not None and "eager verification" in done.note
    # Verified, so a fresh run (not the writer) finds it by default.
    found = call(store, "memory_query", {"query": "postgres"}, run_id="other")
    assert [e["id"] for e in found.payload["entries"]] == [result["id"]]
    assert audit(store.git).ok


def test_write_memory_under_eager_with_a_failing_check_is_rejected(store: MemoryStore) -> None:
    set_toml(store, verification="eager", extra=reviewers(fact=FAILING))
    result = call(store, "write_memory", {"kind": "fact", "key": "db", "body": "Oracle."}).payload
    assert result["trust"] == "rejected" and result["verification"]["status"] == "rejected"
    assert trust_of(store, result["id"]) is Trust.REJECTED


@pytest.mark.parametrize("mode", ["lazy", "off"])
def test_write_memory_under_lazy_or_off_stays_unverified(store: MemoryStore, mode: str) -> None:
    set_toml(store, verification=mode, extra=reviewers(fact=PASSING))
    done = call(store, "write_memory", {"kind": "fact", "key": "db", "body": "Postgres 16."})
    assert done.payload == {"id": done.payload["id"], "trust": "unverified"}
    assert trust_of(store, done.payload["id"]) is Trust.UNVERIFIED
    assert done.note is None


def test_eager_with_no_reviewers_stays_unverified_and_says_so(store: MemoryStore) -> None:
    set_toml(store, verification="eager")
    result = call(store, "write_memory", {"kind": "fact", "key": "db", "body": "x"}).payload
    assert result["trust"] == "unverified"
    assert result["verification"]["status"] == "no-reviewers"


def test_tiered_decides_per_kind_for_the_binding(store: MemoryStore) -> None:
    tiers = '\n[policy.tiered]\ndecision = "eager"\n'
    set_toml(
        store,
        verification="tiered",
        extra=tiers + reviewers(decision=PASSING, fact=PASSING),
    )
    made = call(
        store,
        "memory",
        {"command": "create", "path": "/memories/decisions/db.md", "file_text": "Postgres."},
        run_id="R1",
    )
    # The model reads the SDK's text, word for word; the panel's word goes to people.
    assert content(made) == "File created successfully at: /memories/decisions/db.md"
    assert made.note is not None and "promoted" in made.note
    lazy = call(
        store,
        "memory",
        {"command": "create", "path": "/memories/facts/os.md", "file_text": "Linux."},
        run_id="R1",
    )
    assert content(lazy) == "File created successfully at: /memories/facts/os.md"
    assert lazy.note is None
    by_key = {e.key: e.trust for e in store.list_entries()}
    assert by_key == {"db": Trust.VERIFIED, "os": Trust.UNVERIFIED}
    # Another run sees the verified decision, not the lazy fact.
    listing = content(call(store, "memory", {"command": "view", "path": "/memories"}, run_id="R2"))
    assert "/memories/decisions/db.md" in listing and "os.md" not in listing


def test_every_binding_write_goes_through_the_policy(store: MemoryStore) -> None:
    set_toml(store, verification="eager", extra=reviewers(default=PASSING))

    def memory(**tool_input: object) -> str:
        return content(call(store, "memory", tool_input, run_id="R1"))

    assert memory(command="create", path="/memories/notes/a.md", file_text="one\ntwo") == (
        "File created successfully at: /memories/notes/a.md"
    )
    assert memory(
        command="str_replace", path="/memories/notes/a.md", old_str="two", new_str="deux"
    ).startswith("The memory file has been edited.")
    assert memory(
        command="insert", path="/memories/notes/a.md", insert_line=0, insert_text="0"
    ) == ("The file /memories/notes/a.md has been edited.")
    assert memory(command="create", path="/memories/notes/b.md", file_text="bee") == (
        "File created successfully at: /memories/notes/b.md"
    )
    assert memory(command="delete", path="/memories/notes/b.md") == (
        "Successfully deleted /memories/notes/b.md"
    )
    assert memory(
        command="rename", old_path="/memories/notes/a.md", new_path="/memories/notes/c.md"
    ) == ("Successfully renamed /memories/notes/a.md to /memories/notes/c.md")
    # Nothing the tool wrote waits for `verify`: creates, edits, tombstones, moved copies
    # were all verified at once (the entries each newer one replaced turned stale).
    trusts = [e.trust for e in store.list_entries()]
    assert len(trusts) == 7 and set(trusts) == {Trust.VERIFIED, Trust.STALE}
    # The verified tombstones took effect for everyone: only the moved copy is left.
    listing = content(
        call(store, "memory", {"command": "view", "path": "/memories/notes"}, run_id="R9")
    )
    assert "notes/c.md" in listing
    assert "notes/a.md" not in listing and "notes/b.md" not in listing
    assert "[unverified]" not in listing
    shown = content(
        call(store, "memory", {"command": "view", "path": "/memories/notes/c.md"}, run_id="R9")
    )
    assert shown.endswith("     1\t0\n     2\tone\n     3\tdeux\n     4\t")  # insert ends a line
    assert audit(store.git).ok


def test_eager_in_a_durable_run_keeps_the_note(store: MemoryStore) -> None:
    set_toml(store, verification="eager", extra=reviewers(fact=PASSING))
    done = call(
        store,
        "memory",
        {"command": "create", "path": "/memories/facts/x.md", "file_text": "x"},
        run_id="R-d",
        durable=True,
    )
    assert content(done) == "File created successfully at: /memories/facts/x.md"
    assert done.ledger_ref == "run:R-d/1"
    assert done.note is not None and "promoted" in done.note
    [entry] = store.list_entries(kind=Kind.FACT)
    assert entry.trust is Trust.VERIFIED and entry.provenance.produced_by == "run:R-d/1"


def test_eager_without_the_panel_role_writes_unverified_and_says_why(
    store: MemoryStore,
    add_signer: Callable[..., str],
    tmp_path: Path,
) -> None:
    set_toml(store, verification="eager", extra=reviewers(fact=PASSING))
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    where = store.git.workdir
    assert where is not None
    env = {k: v for k, v in os.environ.items() if k != "TRUSS_PANEL_KEY"}
    as_agent = MemoryStore(where, signer=agent, environ=env)

    result = call(as_agent, "write_memory", {"kind": "fact", "key": "a", "body": "by the agent"})
    assert result.payload["trust"] == "unverified"
    assert "does not hold the panel role" in result.payload["note"]
    assert "verification" not in result.payload
    assert trust_of(store, result.payload["id"]) is Trust.UNVERIFIED

    made = call(
        as_agent,
        "memory",
        {"command": "create", "path": "/memories/facts/b.md", "file_text": "b"},
        run_id="R1",
    )
    assert content(made) == "File created successfully at: /memories/facts/b.md"
    assert made.note is not None and "does not hold the panel role" in made.note

    # With TRUSS_PANEL_KEY the write path borrows the panel key; the write stays the agent's.
    borrowed = MemoryStore(
        where, signer=agent, environ=dict(env, TRUSS_PANEL_KEY=str(tmp_path / "operator_key"))
    )
    done = call(borrowed, "write_memory", {"kind": "fact", "key": "c", "body": "checked"})
    assert done.payload["trust"] == "verified"
    assert store.get(done.payload["id"]).author == "agent:agent@example.test"
    assert audit(store.git).ok


def test_write_policy_comes_from_the_layers(store: MemoryStore, tmp_path: Path) -> None:
    set_toml(store, extra=reviewers(fact=PASSING))  # the store alone: lazy
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "eager"\n')
    eager = call(
        store, "write_memory", {"kind": "fact", "key": "a", "body": "x"}, contract=contract
    )
    assert eager.payload["trust"] == "verified"
    plain = call(store, "write_memory", {"kind": "fact", "key": "b", "body": "y"})
    assert plain.payload["trust"] == "unverified"


def test_a_broken_policy_refuses_the_write_before_anything_lands(
    store: MemoryStore, tmp_path: Path
) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "sometimes"\n')
    before = store.git.tip()
    refused = call(
        store, "write_memory", {"kind": "fact", "key": "a", "body": "x"}, contract=contract
    )
    assert "policy.verification" in error(refused) and str(contract) in error(refused)
    assert store.git.tip() == before


def test_cli_tool_write_reads_the_contract_from_the_environment(
    store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_toml(store, extra=reviewers(fact=PASSING))
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "eager"\n')
    monkeypatch.setenv("TRUSS_CONTRACT", str(contract))
    key = str(tmp_path / "operator_key")
    path = str(store.git.workdir)
    done = cli(
        ["--store", path, "tool", "write_memory"],
        {"kind": "fact", "key": "db", "body": "Postgres."},
        key=key,
    )
    assert done.exit_code == 0, done.output
    assert out(done)["trust"] == "verified"
    made = cli(
        ["--store", path, "tool", "memory", "--run", "R1"],
        {"command": "create", "path": "/memories/facts/os.md", "file_text": "Linux."},
        key=key,
    )
    assert out(made) == {"content": "File created successfully at: /memories/facts/os.md"}
    assert "eager verification" in made.stderr and "promoted" in made.stderr


# -- 2. conflicts in the read tools ------------------------------------------------------


def two_verified_on_one_key(store: MemoryStore) -> tuple[str, str]:
    set_toml(store, conflict="keep-both-flagged")
    old = store.write("fact", "db", "The database is postgres 15.")
    promote(store, old.id)
    new = store.write("fact", "db", "The database is postgres 16.")
    promote(store, new.id)
    assert trust_of(store, old.id) is trust_of(store, new.id) is Trust.VERIFIED
    return old.id, new.id


def test_memory_query_reports_keep_both_flagged_conflicts(store: MemoryStore) -> None:
    old, new = two_verified_on_one_key(store)
    other = store.write("fact", "os", "The servers run postgres on linux.")
    promote(store, other.id)
    result = call(store, "memory_query", {"query": "database postgres"}).payload
    assert list(result) == ["recall_mode", "min_trust", "entries", "conflicts"]
    assert {e["id"] for e in result["entries"]} == {old, new, other.id}
    assert result["conflicts"] == [{"kind": "fact", "key": "db", "ids": [old, new]}]
    # Shown one side only, a reader still learns of the other.
    one = call(store, "memory_query", {"query": "database postgres", "limit": 1}).payload
    assert len(one["entries"]) == 1
    assert one["conflicts"] == [{"kind": "fact", "key": "db", "ids": [old, new]}]
    # No conflict among what was returned, no field.
    plain = call(store, "memory_query", {"query": "linux servers", "key": "os"}).payload
    assert list(plain) == ["recall_mode", "min_trust", "entries"]


def test_cold_memory_query_reports_conflicts_too(store: MemoryStore) -> None:
    old, new = two_verified_on_one_key(store)
    session = ToolSession(str(store.git.workdir), flags=["memory"])
    result = session.call("memory_query", {"query": "database"}).payload
    assert not session.store_open  # the index answered: the cold path
    assert result["conflicts"] == [{"kind": "fact", "key": "db", "ids": [old, new]}]


def test_memory_view_reports_conflicts(store: MemoryStore) -> None:
    old, new = two_verified_on_one_key(store)
    other = store.write("fact", "os", "Linux.")
    promote(store, other.id)
    one = call(store, "memory_view", {"id": new}).payload
    assert [e["id"] for e in one["entries"]] == [new]
    assert one["conflicts"] == [{"kind": "fact", "key": "db", "ids": [old, new]}]
    assert list(one) == ["min_trust", "entries", "filtered", "missing", "conflicts"]
    plain = call(store, "memory_view", {"id": other.id}).payload
    assert list(plain) == ["min_trust", "entries", "filtered", "missing"]
    via_read = call(store, "read_memory", {"id": old}).payload
    assert via_read["conflicts"] == [{"kind": "fact", "key": "db", "ids": [old, new]}]


def test_superseded_entries_are_no_conflict(store: MemoryStore) -> None:
    set_toml(store)  # verified-wins: the older turns stale
    old = store.write("fact", "db", "The database is postgres 15.")
    promote(store, old.id)
    new = store.write("fact", "db", "The database is postgres 16.")
    promote(store, new.id)
    wide = call(store, "memory_view", {"ids": [old.id, new.id], "min_trust": "stale"}).payload
    assert len(wide["entries"]) == 2 and "conflicts" not in wide
    query = call(store, "memory_query", {"query": "postgres", "min_trust": "stale"}).payload
    assert len(query["entries"]) == 2 and "conflicts" not in query


# -- 3. the recall mode from the layered settings ----------------------------------------


def user_config(text: str) -> Path:
    path = Path(os.environ["TRUSS_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("cold", [True, False])
def test_recall_mode_from_the_user_config(store: MemoryStore, cold: bool) -> None:
    set_toml(store, recall="exact")
    user_config('[recall]\nmode = "semantic"\n')
    session = (
        ToolSession(str(store.git.workdir), flags=["memory"])
        if cold
        else ToolSession(store, flags=["memory"])
    )
    result = session.call("memory_query", {"query": "anything"})
    assert result.payload["recall_mode"] == "semantic"
    assert session.store_open is not cold


def test_recall_mode_from_agent_and_contract(
    store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_toml(store, recall="exact", extra='\n[agents.bot.recall]\nmode = "semantic"\n')
    query = {"query": "anything"}
    assert call(store, "memory_query", query).payload["recall_mode"] == "exact"
    assert call(store, "memory_query", query, agent="bot").payload["recall_mode"] == "semantic"
    monkeypatch.setenv("TRUSS_AGENT", "bot")
    cold = ToolSession(str(store.git.workdir), flags=["memory"])
    assert cold.call("memory_query", query).payload["recall_mode"] == "semantic"
    contract = tmp_path / "contract.toml"
    contract.write_text('[recall]\nmode = "exact"\n')
    last = call(store, "memory_query", query, contract=contract)  # the contract wins
    assert last.payload["recall_mode"] == "exact"
    contract.write_text('[recall]\nmode = "fuzzy"\n')
    bad = error(call(store, "memory_query", query, contract=contract))
    assert str(contract) in bad and "recall.mode" in bad


@pytest.mark.parametrize(
    "env",
    [
        {"XDG_CONFIG_HOME": None},
        {"XDG_CONFIG_HOME": "/somewhere/else"},
        {"XDG_CONFIG_HOME": "relative/ignored"},
        {"XDG_CONFIG_HOME": ""},
        {"HOME": "/home/someone/", "XDG_CONFIG_HOME": None},
    ],
)
def test_cheap_user_config_path_matches_the_settings_one(
    env: dict[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRUSS_CONFIG_DIR")
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert user_config_file(os.environ) == global_config_path(os.environ)
    monkeypatch.setenv("TRUSS_CONFIG_DIR", "/elsewhere")
    assert user_config_file(os.environ) == global_config_path(os.environ)


def test_cold_path_with_a_user_config_stays_light(store: MemoryStore) -> None:
    """The layers are read without pygit2, the signing stack or an embedder: the user config
    says exact over the store's semantic, and the answer comes from the index."""
    entry = store.write("fact", "db", "The database is postgres.")
    promote(store, entry.id)
    set_toml(store, recall="semantic")
    user_config('[recall]\nmode = "exact"\n')
    probe = (
        "import sys\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'tool', 'memory_query']\n"
        "from truss_files.faces.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('pygit2', 'yaml', 'cryptography', 'truss_files.store.store',\n"
        "         'truss_files.facade',\n"
        "         'truss_files.signing.keys',\n"
        "         'platformdirs', 'numpy', 'wordllama', 'truss_files.recall.encoders.minilm')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    for _ in range(2):  # the first call may build the index; the second is the warm path
        done = subprocess.run(
            [sys.executable, "-c", probe, str(store.git.workdir)],
            input=json.dumps({"query": "postgres"}),
            capture_output=True,
            text=True,
            check=False,
        )
    result = json.loads(done.stdout)
    assert result["recall_mode"] == "exact"
    assert [e["id"] for e in result["entries"]] == [entry.id]
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_a_bad_panel_key_leaves_the_write_standing(store: MemoryStore, tmp_path: Path) -> None:
    """The entry is committed before the panel is looked for: a TRUSS_PANEL_KEY that names no
    key file is a note, not a failed write an agent would retry."""
    set_toml(store, verification="eager", extra=reviewers(fact=PASSING))
    where = store.git.workdir
    assert where is not None
    env = dict(os.environ, TRUSS_PANEL_KEY=str(tmp_path / "no-such-key"))
    odd = MemoryStore(where, signer=Ed25519Signer.load(tmp_path / "operator_key"), environ=env)
    done = call(odd, "write_memory", {"kind": "fact", "key": "a", "body": "x"})
    assert done.ok, done.error
    assert done.payload["trust"] == "unverified"
    assert "TRUSS_PANEL_KEY" in done.payload["note"]
    assert trust_of(store, done.payload["id"]) is Trust.UNVERIFIED
