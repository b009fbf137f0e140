"""Helpers for the keyless tests: a store that trusts the private sigstore instance, keyless
verdicts from it, and an offline run of the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.sigstore_local import DEFAULT_IDENTITY, LocalSigstore
from truss_files.facade import MemoryStore
from truss_files.store.operators import grant_role, pin_trusted_root
from truss_files.trust.verdict import Verdict

SCRIPT = Path(sys.executable).parent / "truss-files"

# A child process whose every socket connection fails: what "offline" means in these tests.
OFFLINE = (
    "import socket, sys\n"
    "def refuse(*args, **kwargs):\n"
    "    raise OSError('network access is disabled for this process')\n"
    "socket.socket.connect = refuse\n"
    "socket.create_connection = refuse\n"
    "from truss_files.faces.cli.main import main\n"
    "sys.argv = ['truss-files', *sys.argv[1:]]\n"
    "main()\n"
)


def principal(
    sigstore: LocalSigstore, identity: str = DEFAULT_IDENTITY, issuer: str | None = None
) -> str:
    return f"sigstore:{issuer or sigstore.issuer_url}|{identity}"


def trust_instance(store: MemoryStore, sigstore: LocalSigstore, *principals: str) -> str:
    """Pin the instance's trusted root and grant the panel role to ``principals`` (default:
    the instance's default identity), each in an operator-signed commit."""
    pin_trusted_root(store, sigstore.trusted_root_json.read_bytes())
    names = principals or (principal(sigstore),)
    for name in names:
        grant_role(store, "panel", name)
    return names[0]


def keyless_verdict(
    store: MemoryStore, sigstore: LocalSigstore, entry_id: str, outcome: str = "PASS", **token: Any
) -> Verdict:
    from truss_files.trust.verdict import sign_keyless_verdict

    return sign_keyless_verdict(
        store.get(entry_id).id,
        outcome,
        None,
        token=sigstore.issue_token(**token),
        trust_config=str(sigstore.trust_config_json),
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T12:00:00Z",
    )


def run_offline(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script's ``main`` in a child process that cannot open a socket."""
    return subprocess.run(
        [sys.executable, "-c", OFFLINE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def audit_json(path: Path) -> dict[str, Any]:
    done = run_offline("--store", str(path), "audit", "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found
