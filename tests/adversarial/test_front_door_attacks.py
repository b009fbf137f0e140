"""Attacks on the promise that every face writes and promotes through one front door, under
the same policies: a note written from Python (``MemoryStore.write``) is verified exactly as
``truss-files write`` and ``write_memory`` verify it when the verification policy is eager
for its kind, and a promotion takes the layered conflict policy -- ``--contract FILE`` or
``$TRUSS_CONTRACT`` -- wherever it is asked, the CLI's ``promote`` or ``MemoryStore.promote``,
as ``verify`` does. An eager policy that a Python caller could sidestep would leave notes it
promised verified unverified (or a failing note standing); a promotion that ignored the
contract's ``keep-both-flagged`` would retire a verified note no one chose to retire.

Every call runs in its own process: the console script, or Python opening the store as an
agent's code does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Snapshot
from truss_files.model import Entry, Trust

SCRIPT = Path(sys.executable).with_name("truss-files")
Commit = Callable[..., str]

PASSING = '[{type = "check", command = "true"}]'
FAILING = '[{type = "check", command = "false"}]'

# Python as an agent's code uses the store: open it with a key, call the library, print what
# it answered. ``settings`` (a contract) is passed only when asked, so a call without it is
# the plain library call.
API = """
import json, sys
from pathlib import Path
from truss_files.facade import MemoryStore
from truss_files.config.settings import settings_for
from truss_files.signing import Ed25519Signer
from truss_files.trust.verdict import Verdict

where, key, op = sys.argv[1:4]
args = json.loads(sys.stdin.read())
store = MemoryStore(where, signer=Ed25519Signer.load(Path(key)))
if op == "write":
    entry = store.write(args["kind"], args["key"], args["body"])
else:
    verdict = Verdict.from_json(Path(args["verdict"]).read_text(), args["verdict"])
    extra = {}
    if args.get("contract"):
        extra["settings"] = settings_for(store, contract=args["contract"])
    entry = store.promote(args["id"], verdict, **extra)
print(json.dumps({"id": entry.id, "trust": entry.trust.value, "supersedes": entry.supersedes}))
"""


def _where(store: MemoryStore) -> Path:
    return Path(str(store.git.workdir))


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    return {**os.environ, **(extra or {})}


def truss(
    store: MemoryStore,
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """The console script as the operator (who holds the panel role): exit status and the
    JSON it printed (its output is a pipe, so JSON)."""
    where = _where(store)
    done = console.run(
        [str(SCRIPT), "--store", str(where), "--key", str(where.parent / "operator_key"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(env),
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def api(
    store: MemoryStore, op: str, args: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    where = _where(store)
    done = subprocess.run(
        [sys.executable, "-c", API, str(where), str(where.parent / "operator_key"), op],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(env),
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def configure(store: MemoryStore, signed_commit: Commit, verification: str, extra: str) -> None:
    """truss.toml: the verification policy, the write tools on, and ``extra`` (reviewers,
    tiers), in one operator-signed commit."""

    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        assert 'verification = "lazy"' in text and "memory_write = false" in text
        text = text.replace('verification = "lazy"', f'verification = "{verification}"')
        text = text.replace("memory_write = false", "memory_write = true")
        return {"truss.toml": (text + extra).encode()}

    signed_commit(store, changes)


# -- the verification policy: one door for every face -------------------------------------


def write_through(store: MemoryStore, face: str, kind: str, key: str, body: str) -> Any:
    """Write one note through ``face``; what it answered (id and trust at least)."""
    if face == "cli":
        code, out = truss(store, "write", "--kind", kind, "--key", key, body)
        assert code == 0, out
        return out
    if face == "tool":
        note = json.dumps({"kind": kind, "key": key, "body": body})
        code, out = truss(store, "tool", "write_memory", stdin=note)
        assert code == 0, out
        return out
    return api(store, "write", {"kind": kind, "key": key, "body": body})


def verdict_shape(entry: Entry) -> dict[str, Any] | None:
    """What a verdict says, less what differs from one entry to the next (its id, the
    entry, the state it judged, the time and the signature)."""
    verdict = entry.provenance.verified_by
    if verdict is None:
        return None
    plain = dict(verdict)
    votes = [
        (v["reviewer"], v["kind"], v["vote"], sorted(v.get("evidence", {})))
        for v in plain.pop("votes")
    ]
    for varying in ("verdict_id", "entry", "basis", "time", "signature", "key"):
        plain.pop(varying, None)
    return {**plain, "votes": votes}


CASES = {
    # policy, truss.toml additions, kind written, the trust it must end at, the verdict's policy
    "eager-pass": (
        "eager",
        f"\n[panel.reviewers]\nfact = {PASSING}\n",
        "fact",
        "verified",
        "eager",
    ),
    "eager-fail": (
        "eager",
        f"\n[panel.reviewers]\nfact = {FAILING}\n",
        "fact",
        "rejected",
        "eager",
    ),
    "tiered-eager-kind": (
        "tiered",
        f'\n[policy.tiered]\ndecision = "eager"\n\n[panel.reviewers]\ndecision = {PASSING}\n',
        "decision",
        "verified",
        "tiered:eager",
    ),
    "tiered-eager-kind-fails": (
        "tiered",
        f'\n[policy.tiered]\ndecision = "eager"\n\n[panel.reviewers]\ndecision = {FAILING}\n',
        "decision",
        "rejected",
        "tiered:eager",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_python_write_is_verified_exactly_as_the_cli_and_the_tool_verify_it(
    store: MemoryStore, signed_commit: Commit, case: str
) -> None:
    verification, extra, kind, want, label = CASES[case]
    configure(store, signed_commit, verification, extra)
    shapes = {}
    for face in ("cli", "tool", "api"):
        # One key per face: under verified-wins a PASS would retire the previous face's note.
        said = write_through(store, face, kind, f"{face}-db", f"The database is postgres ({face}).")
        entry = store.get(said["id"])
        assert (face, said["trust"], entry.trust.value) == (face, want, want)
        shape = verdict_shape(entry)
        assert shape is not None and shape["policy"] == label, (face, shape)
        assert shape["outcome"] == ("PASS" if want == "verified" else "FAIL")
        decided = "promote" if want == "verified" else "reject"
        assert [i.op for i in store.log(entry.id)] == ["write", decided], face
        shapes[face] = shape
        if face != "api":  # the faces that print a result say what the panel did
            status = {"verified": "promoted", "rejected": "rejected"}[want]
            assert said["verification"]["status"] == status, said
    assert shapes["api"] == shapes["cli"] == shapes["tool"]
    if verification == "tiered":  # a kind the tiers leave lazy waits for verify, from every face
        for face in ("cli", "tool", "api"):
            said = write_through(store, face, "lesson", f"{face}-l", f"A lesson ({face}).")
            assert said["trust"] == "unverified" and "verification" not in said
            assert store.get(said["id"]).provenance.verified_by is None


# -- the conflict policy: promote takes the layered settings --------------------------------

KEEP_BOTH = '[policy]\nconflict = "keep-both-flagged"\n'


def rivals(store: MemoryStore, tmp_path: Path, key: str = "db") -> tuple[Entry, Entry, Path]:
    """A verified note on decision/``key``, a newer unverified rival, and a PASS verdict for
    the rival signed by the panel key (``verdict sign -o``)."""
    older = store.write("decision", key, f"We use postgres for the {key}.")
    store.promote(older.id, store.sign_verdict(older.id, "PASS"), conflict="verified-wins")
    newer = store.write("decision", key, f"We use zqxlite for the {key}.")
    verdict = tmp_path / f"pass-{key}.json"
    code, _ = truss(store, "verdict", "sign", newer.id, "--pass", "-o", str(verdict))
    assert code == 0 and store.get(older.id).trust is Trust.VERIFIED
    return older, newer, verdict


def conflicts(store: MemoryStore) -> list[Any]:
    code, out = truss(store, "query", "zqxlite", "--format", "json")
    assert code == 0, out
    found: list[Any] = out.get("conflicts", [])
    return found


def promote_through(
    store: MemoryStore, how: str, newer: Entry, verdict: Path, contract: Path | None
) -> dict[str, Any]:
    env = {"TRUSS_CONTRACT": str(contract)} if contract is not None and "env" in how else {}
    if how.startswith("cli"):
        flag = ["--contract", str(contract)] if contract is not None and how == "cli" else []
        code, out = truss(store, "promote", newer.id, "--verdict", str(verdict), *flag, env=env)
        assert code == 0, out
        found: dict[str, Any] = out
        return found
    args: dict[str, Any] = {"id": newer.id, "verdict": str(verdict)}
    if contract is not None and how == "api":
        args["contract"] = str(contract)
    return api(store, "promote", args, env=env)


@pytest.mark.parametrize("how", ["cli", "cli-env", "api", "api-env"])
def test_promote_keeps_both_and_flags_them_under_a_keep_both_flagged_contract(
    store: MemoryStore, tmp_path: Path, how: str
) -> None:
    """``promote --contract FILE``, ``$TRUSS_CONTRACT``, and ``MemoryStore.promote`` with the
    contract's settings or in its environment: the contract's keep-both-flagged holds
    (truss.toml says verified-wins), so the older verified note is not retired, and reads
    name both. The control, the same promote without the contract, retires its rival."""
    contract = tmp_path / "contract.toml"
    contract.write_text(KEEP_BOTH)
    plain_old, plain_new, plain_verdict = rivals(store, tmp_path, "cache")
    said = promote_through(store, how, plain_new, plain_verdict, None)
    assert said["trust"] == "verified" and said["supersedes"] == plain_old.id
    retired = store.get(plain_old.id)
    assert retired.trust is Trust.STALE and retired.superseded_by == plain_new.id

    older, newer, verdict = rivals(store, tmp_path)
    said = promote_through(store, how, newer, verdict, contract)
    assert said["trust"] == "verified" and said["supersedes"] is None, said
    kept = store.get(older.id)
    assert kept.trust is Trust.VERIFIED and kept.superseded_by is None
    assert store.get(newer.id).supersedes is None
    assert conflicts(store) == [{"kind": "decision", "key": "db", "ids": [older.id, newer.id]}]


def test_a_contract_cannot_take_promote_out_of_panel_arbitrated(
    store: MemoryStore, signed_commit: Commit, tmp_path: Path
) -> None:
    """truss.toml's panel-arbitrated holds whatever a contract layers: keep-both-flagged from
    ``--contract`` neither retires the rival nor lets the new note stand beside it without
    the arbiters; the promote is refused and changes nothing."""

    def arbitrated(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": text.replace('"verified-wins"', '"panel-arbitrated"').encode()}

    contract = tmp_path / "contract.toml"
    contract.write_text(KEEP_BOTH)
    older, newer, verdict = rivals(store, tmp_path)
    signed_commit(store, arbitrated)
    before = store.git.tip()
    code, out = truss(
        store, "promote", newer.id, "--verdict", str(verdict), "--contract", str(contract)
    )
    assert code == 1 and out["error"]["code"] in ("config", "conflict"), out
    assert store.git.tip() == before
    assert store.get(newer.id).trust is Trust.UNVERIFIED
    assert store.get(older.id).trust is Trust.VERIFIED
