"""memory.scope on write (a stamp from the run) and on read (a reader), and the salience seam."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.context.test_context import set_file
from tests.support.tools_support import call, promote
from truss_files.config.settings import SALIENCE_POLICIES
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.scope import Reader, parse_scope_pairs, stamp
from truss_files.recall.salience import POLICIES
from truss_files.tools import RunContext


@pytest.mark.parametrize(
    ("reader", "seen"),
    [
        (Reader("per-agent", "a", "p"), {"own", "shared", "project"}),
        (Reader("per-agent", None, None), {"shared"}),
        (Reader("per-project", "a", "p"), {"own", "other", "shared", "project"}),
        (Reader("per-project", "a", None), {"shared"}),
        (Reader("shared", None, None), {"own", "other", "shared", "project", "foreign"}),
    ],
)
def test_reader_rules(reader: Reader, seen: set[str]) -> None:
    scopes = {
        "own": {"agent": "a", "project": "p"},
        "other": {"agent": "b", "project": "p"},
        "shared": {},
        "project": {"project": "p"},
        "foreign": {"agent": "a", "project": "q"},
    }
    assert {name for name, scope in scopes.items() if reader.sees(scope)} == seen


def test_stamp_adds_the_run_and_refuses_a_contradiction() -> None:
    assert stamp({"task": "T-1"}, agent="a", project="p") == {
        "task": "T-1",
        "agent": "a",
        "project": "p",
    }
    with pytest.raises(UsageError, match="contradicts"):
        stamp({"agent": "b"}, agent="a")
    assert parse_scope_pairs(["project=p-3", "agent=x"]) == {"project": "p-3", "agent": "x"}
    for bad in ("noequals", "=v", "k="):
        with pytest.raises(UsageError, match="NAME=VALUE"):
            parse_scope_pairs([bad])


def test_salience_vocabularies_agree() -> None:
    assert SALIENCE_POLICIES == POLICIES


def _agent_write(store: MemoryStore, agent: str, key: str, body: str, **ctx: Any) -> str:
    out = call(
        store,
        "write_memory",
        {"kind": "lesson", "key": key, "body": body},
        run_id=f"run-{agent}",
        context=RunContext(agent=agent, **ctx),
    )
    assert out.ok, out.error
    return str(out.payload["id"])


def _ids(store: MemoryStore, agent: str | None, **ctx: Any) -> set[str]:
    out = call(
        store,
        "memory_query",
        {"query": "deploy"},
        context=RunContext(agent=agent, **ctx) if agent or ctx else None,
    )
    assert out.ok, out.error
    return {e["id"] for e in out.payload["entries"]}


def test_tool_writes_are_stamped_from_the_run_and_reads_filtered(store: MemoryStore) -> None:
    mine = _agent_write(store, "a", "deploy-a", "Deploy with the blue pool.", project="p")
    theirs = _agent_write(store, "b", "deploy-b", "Deploy on Fridays.", project="p")
    shared = store.write("lesson", "deploy", "Deploy only after the audit passes.").id
    for entry_id in (mine, theirs, shared):
        promote(store, entry_id)
    assert dict(store.get(mine).scope) == {"agent": "a", "project": "p"}
    assert _ids(store, "a", project="p") == {mine, shared}
    assert _ids(store, "b", project="p") == {theirs, shared}
    assert _ids(store, None) == {shared}  # who does not say who it is sees shared only
    set_scope(store, "per-project")
    assert _ids(store, "a", project="p") == {mine, theirs, shared}
    assert _ids(store, "a", project="q") == {shared}
    set_scope(store, "shared")
    assert _ids(store, None) == {mine, theirs, shared}


def test_cli_write_stamps_agent_and_scope_and_query_reads_as_an_agent(
    store: MemoryStore, tmp_path: Path
) -> None:
    root = str(store.git.workdir)
    key = str(tmp_path / "operator_key")

    def run(*args: str) -> Any:
        argv = ["--store", root, "--key", key, *args]
        out = CliRunner().invoke(cli, argv, catch_exceptions=False)
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    a = run(
        "write",
        "--kind",
        "fact",
        "--key",
        "db",
        "--agent",
        "a",
        "--scope",
        "project=p",
        "--format",
        "json",
        "Deploy db is postgres.",
    )["id"]
    b = run(
        "write",
        "--kind",
        "fact",
        "--key",
        "db2",
        "--agent",
        "b",
        "--layer",
        "team",
        "--format",
        "json",
        "Deploy db is mysql.",
    )["id"]
    promote(store, a)
    promote(store, b)
    assert dict(store.get(a).scope) == {"agent": "a", "project": "p"}
    assert store.get(b).layer.value == "team"
    everyone = {e["id"] for e in run("query", "deploy db", "--format", "json")["entries"]}
    assert everyone == {a, b}  # a person reviewing memory reads every scope
    as_b = run("query", "deploy db", "--agent", "b", "--format", "json")["entries"]
    assert [e["id"] for e in as_b] == [b]
    as_a = run("query", "deploy db", "--agent", "a", "--project", "p", "--format", "json")
    assert [e["id"] for e in as_a["entries"]] == [a]
    shared = run("query", "deploy db", "--agent", "a", "--scope", "shared", "--format", "json")
    assert {e["id"] for e in shared["entries"]} == {a, b}
    team = run("query", "deploy db", "--layer", "team", "--format", "json")["entries"]
    assert [e["id"] for e in team] == [b]


def set_scope(store: MemoryStore, mode: str) -> None:
    text = (store.snapshot().read("truss.toml") or b"").decode()
    text = re.sub(r'\n\[memory\]\nscope = "[^"]*"\n', "\n", text)
    set_file(store, "truss.toml", text + f'\n[memory]\nscope = "{mode}"\n', op="config")


def test_salience_changes_order_only_when_on(store: MemoryStore) -> None:
    plain = store.write("lesson", "one", "Rotate the signing key yearly.")
    loud = store.write("lesson", "two", "Rotate the signing key yearly, always.", salience=1.0)
    filler = [store.write("fact", f"f{n}", f"Unrelated note number {n}.") for n in range(4)]
    for entry in (plain, loud, *filler):
        promote(store, entry.id)

    def ranked() -> list[tuple[str, float]]:
        return [(h.entry.id, h.score) for h in store.query("rotate signing key").hits]

    off = ranked()
    # Off: recall's order alone -- the shorter entry scores higher, whatever its salience.
    assert [i for i, _ in off] == [plain.id, loud.id] and off[0][1] > off[1][1]
    text = (store.snapshot().read("truss.toml") or b"").decode()
    on_text = text.replace("[policy]\n", '[policy]\nsalience = "prior"\n', 1)
    set_file(store, "truss.toml", on_text, op="config")
    on = ranked()
    assert [i for i, _ in on] == [loud.id, plain.id]
    # An entry at the default salience keeps its score under the prior.
    assert dict(on)[plain.id] == pytest.approx(dict(off)[plain.id])
    set_file(store, "truss.toml", text + "\n", op="config")
    assert [i for i, _ in ranked()] == [plain.id, loud.id]
