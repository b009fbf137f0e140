"""Attacks on who decides what passes: every setting an unsigned layer might loosen.

The panel belongs to the operator. The layers above truss.toml are files whoever shares the
machine may write (the user config, a file named by ``--contract`` or ``TRUSS_CONTRACT``),
and the work tree's truss.toml is not what an operator signed. Each key of the settings
schema declares its authority (``settings.SETTINGS``); the attacks here are made from that
table, so a key added later is attacked without a line written here: for every key of
authority ``operator`` a layer plants one of its examples, for every ``tighten`` key a layer
sets its loosest example over truss.toml's strictest. Each goes through the installed console
script as the operator's routine ``verify --pending``: it exits 1 with code ``config``
naming the key, no check runs (marker files) and the agent's note stays unverified.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.script import run
from truss_files.config.settings import (
    FREE,
    OPERATOR,
    SETTINGS,
    TIGHTEN,
    load_settings,
    render_value,
)
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit

CONFIG = "truss.toml"
Commit = Callable[..., str]

# The kind and the name a ``.*`` key is tried with.
STAND_IN = {"panel.reviewers.*": "fact", "policy.tiered.*": "fact", "policy.eviction.*": "fact"}
LAYERS = ("--contract", "TRUSS_CONTRACT", "user config", "work tree [agents.NAME]")
ATTACKED = sorted(k for k, s in SETTINGS.items() if s.authority != FREE)


def dotted(key: str) -> list[str]:
    return key.replace("*", STAND_IN.get(key, "extra")).split(".")


def nest(key: str, value: Any) -> dict[str, Any]:
    for part in reversed(dotted(key)):
        value = {part: value}
    return value


def merge(into: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in more.items():
        if isinstance(value, Mapping) and isinstance(into.get(name), dict):
            merge(into[name], value)
        else:
            into[name] = value
    return into


def dump(table: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """TOML text for nested tables of plain values (what these attacks write)."""
    plain = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
    lines = [f"[{'.'.join(prefix)}]"] if plain and prefix else []
    lines += [f"{k} = {render_value(v)}" for k, v in plain]
    lines += [dump(v, (*prefix, k)) for k, v in table.items() if isinstance(v, Mapping)]
    return "\n".join(lines) + "\n"


def strict_toml(marks: Path) -> dict[str, Any]:
    """What the operator signs: the checks (each leaves a mark when it runs; ``tests``
    fails) and every tighten key at its strictest example."""
    out: dict[str, Any] = {
        "panel": {
            "checks": {
                "tests": f"touch {marks / 'tests-ran'}; exit 1",
                "lint": f"touch {marks / 'lint-ran'}",
            }
        }
    }
    for key, declared in SETTINGS.items():
        if declared.authority == TIGHTEN:
            merge(out, nest(key, declared.examples[0]))
    return out


def verify(store: MemoryStore, *extra: str, **env: str) -> tuple[int, dict[str, Any]]:
    done = run(store, "operator_key", "verify", "--pending", *extra, "--format", "json", **env)
    return done.returncode, json.loads(done.stdout)


class Bench:
    """A store whose signed truss.toml holds the strict settings, and one pending note an
    agent-only key wrote; ``attack(layer, text)`` runs the operator's verify under it."""

    def __init__(self, store: MemoryStore, tmp_path: Path, signed_commit: Commit) -> None:
        self.store, self.marks = store, tmp_path / "marks"
        self.marks.mkdir()

        def sign_strict(snap: Snapshot) -> dict[str, bytes | None]:
            current = tomllib.loads((snap.read(CONFIG) or b"").decode())
            return {CONFIG: dump(merge(current, strict_toml(self.marks))).encode()}

        signed_commit(store, sign_strict, message="truss: strict panel\n\nTruss-Op: config")
        done = run(store, "agent_key", "write", "--kind", "fact", "--key", "sky", "Green sky.")
        assert done.returncode == 0, done.stderr
        self.note = json.loads(done.stdout)["id"]
        self.contract = tmp_path / "contract.toml"
        self.user = Path(os.environ["TRUSS_CONFIG_DIR"]) / "config.toml"
        self.user.parent.mkdir(parents=True, exist_ok=True)
        self.tree = Path(str(store.git.workdir)) / CONFIG

    def attack(self, layer: str, text: str) -> tuple[int, dict[str, Any]]:
        if layer == "--contract":
            self.contract.write_text(text)
            return verify(self.store, "--contract", str(self.contract))
        if layer == "TRUSS_CONTRACT":
            self.contract.write_text(text)
            return verify(self.store, TRUSS_CONTRACT=str(self.contract))
        if layer == "user config":
            self.user.write_text(text)
            try:
                return verify(self.store)
            finally:
                self.user.unlink()
        signed = self.tree.read_text()
        self.tree.write_text(signed + "\n" + dump({"agents": {"evil": tomllib.loads(text)}}))
        try:
            return verify(self.store, "--agent", "evil")
        finally:
            self.tree.write_text(signed)

    def untouched(self) -> None:
        assert sorted(p.name for p in self.marks.iterdir()) == []  # no check ran
        assert self.store.get(self.note).trust is Trust.UNVERIFIED


@pytest.fixture
def bench(
    store: MemoryStore, agent_key: Ed25519Signer, tmp_path: Path, signed_commit: Commit
) -> Iterator[Bench]:
    made = Bench(store, tmp_path, signed_commit)
    yield made
    assert audit(store.git).ok


def test_every_operator_and_tighten_key_has_examples_to_attack_it() -> None:
    """The table, not this file, says what to try (``Setting`` refuses a key without)."""
    assert {"panel.workdir", "panel.quorum", "panel.reviewers.*", "policy.conflict"} <= set(
        ATTACKED
    )
    for key in ATTACKED:
        declared = SETTINGS[key]
        assert declared.examples, key
        if declared.authority == TIGHTEN:
            assert declared.loosens is not None


@pytest.mark.parametrize("key", ATTACKED)
def test_no_unsigned_layer_may_set_an_operator_key_or_loosen_a_tighten_key(
    bench: Bench, key: str
) -> None:
    declared = SETTINGS[key]
    planted = declared.examples[0] if declared.authority == OPERATOR else declared.examples[-1]
    text = dump(nest(key, planted))
    named = ".".join(dotted(key)) if "." in key else f"[{key}]"
    if key == "panel.checks.*" or key == "panel.judges.*":
        named = ".".join(dotted(key)[:2])  # the table is refused as a whole
    for layer in LAYERS:
        code, out = bench.attack(layer, text)
        assert code == 1 and out["error"]["code"] == "config", (layer, out)
        said = out["error"]["message"]
        if layer.startswith("work tree"):  # never read: the signed tip has no such table
            assert "[agents.evil]" in said, said
        else:
            assert named in said and (
                "has authority operator" in said or "loosens what the signed truss.toml" in said
            ), said
        bench.untouched()
    # Without the attack the operator's strict panel runs and rejects the note.
    code, out = verify(bench.store)
    assert code == 0, out
    assert [e["status"] for e in out["entries"]] == ["rejected"]


@pytest.mark.parametrize("key", [k for k in ATTACKED if SETTINGS[k].authority == TIGHTEN])
def test_a_layer_may_tighten_what_truss_toml_set_loosely(key: str) -> None:
    """The other half of the rule, from the same examples: the strictest value over
    truss.toml's loosest is taken, and shown as coming from the layer."""
    declared = SETTINGS[key]
    checks = {"panel": {"checks": {"tests": "true", "lint": "true"}}}
    store_toml = merge(checks, nest(key, declared.examples[-1]))
    layer = nest(key, declared.examples[0])
    settings = load_settings(store_toml, environ={}, contract=None, global_path=Path("/none"))
    path = Path(os.environ["TRUSS_CONFIG_DIR"]) / "tight.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(layer))
    tightened = load_settings(store_toml, environ={}, contract=path, global_path=Path("/none"))
    name = ".".join(dotted(key))
    assert tightened.source(name) == str(path), (name, settings.source(name))


def test_an_edit_to_a_signed_agent_table_in_the_work_tree_is_never_read(
    bench: Bench, signed_commit: Commit
) -> None:
    """The tip's [agents.ci] is what runs; the work tree's loosening of it is not read."""

    def add_agent(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read(CONFIG) or b"").decode()
        return {CONFIG: (text + "\n[agents.ci.panel]\ntimeout = 30\n").encode()}

    signed_commit(bench.store, add_agent, message="truss: agent ci\n\nTruss-Op: config")
    signed = bench.tree.read_text()
    loosened = "timeout = 30\nquorum = 1\nentry_checks = false\n"
    bench.tree.write_text(signed.replace("timeout = 30\n", loosened))
    try:
        code, out = verify(bench.store, "--agent", "ci")
    finally:
        bench.tree.write_text(signed)
    assert code == 0, out
    assert [e["status"] for e in out["entries"]] == ["rejected"]  # the strict panel ran
    assert bench.store.get(bench.note).trust is Trust.REJECTED


def test_the_reported_workdir_attack_runs_nothing(bench: Bench, tmp_path: Path) -> None:
    """Item 1 as reported: the agent's folder holds its own .truss/checks/tests.sh and the
    user config points the panel's workdir at it."""
    own = tmp_path / "agent-folder"
    (own / ".truss" / "checks").mkdir(parents=True)
    (own / ".truss" / "checks" / "tests.sh").write_text(f"id > {bench.marks / 'pwned'}\n")
    code, out = bench.attack("user config", f'[panel]\nworkdir = "{own}"\n')
    assert code == 1 and out["error"]["code"] == "config"
    assert "panel.workdir has authority operator" in out["error"]["message"]
    bench.untouched()


def test_a_writer_naming_a_check_twice_does_not_outvote_the_operator(
    store: MemoryStore, agent_key: Ed25519Signer, tmp_path: Path, signed_commit: Commit
) -> None:
    """Item 4 as reported: quorum majority, truss.toml's reviewer a check that fails; the
    agent names a harmless defined check twice. It runs once, as a requirement beside the
    quorum, and the operator's FAIL stands."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def majority(snap: Snapshot) -> dict[str, bytes | None]:
        current = tomllib.loads((snap.read(CONFIG) or b"").decode())
        panel = {
            "quorum": "majority",
            "checks": {"strict": "exit 1", "lint": f"echo ran >> {marks / 'lint'}"},
            "reviewers": {"fact": ["strict"]},
        }
        return {CONFIG: dump(merge(current, {"panel": panel})).encode()}

    signed_commit(store, majority, message="truss: majority\n\nTruss-Op: config")
    done = run(
        store, "agent_key", "write", "--kind", "fact", "--key", "k", "--check", "lint",
        "--check", "lint", "--format", "json", "Stuffed.",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    note = json.loads(done.stdout)["id"]
    code, out = verify(store)
    assert code == 0, out
    (entry,) = out["entries"]
    assert entry["status"] == "rejected", entry
    assert [(v["reviewer"], v["vote"]) for v in entry["votes"]] == [
        ("lint", "PASS"),
        ("strict", "FAIL"),
    ]
    assert (marks / "lint").read_text() == "ran\n"  # once
    assert store.get(note).trust is Trust.REJECTED
    assert audit(store.git).ok
