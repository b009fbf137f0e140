"""Helpers shared by the tool tests (no tests here): configure a store, promote, call tools."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from click.testing import CliRunner, Result

from truss_files.facade import MemoryStore
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan
from truss_files.model import Entry
from truss_files.tools import Outcome, ToolSession

PRINCIPAL = "operator@example.test"


def configure(
    store: MemoryStore,
    *,
    memory: bool = True,
    memory_write: bool = False,
    allow_tools: Iterable[str] | None = None,
    recall_mode: str = "exact",
    default_kind: str | None = None,
    conflict: str = "verified-wins",
) -> None:
    """Rewrite truss.toml in one operator-signed commit."""
    lines = [
        "[roles]",
        f'operator = ["{PRINCIPAL}"]',
        f'panel = ["{PRINCIPAL}"]',
        f'agent = ["{PRINCIPAL}"]',
        f'trainer = ["{PRINCIPAL}"]',  # as init grants it: memory.train in members' names
        "",
        "[tools]",
        f"memory = {str(memory).lower()}",
        f"memory_write = {str(memory_write).lower()}",
    ]
    if default_kind is not None:
        lines.append(f'default_kind = "{default_kind}"')
    lines += ["", "[policy]", 'verification = "lazy"', f'conflict = "{conflict}"']
    if allow_tools is not None:
        lines.append("allow_tools = " + json.dumps(list(allow_tools)))
    lines += ["", "[recall]", f'mode = "{recall_mode}"', ""]
    text = "\n".join(lines).encode()
    message = "truss: configure\n\n" + trailers(op="config")
    store._apply(lambda _snap: Plan({"truss.toml": text}, message), {"operator"})


def promote(store: MemoryStore, entry_id: str) -> Entry:
    return store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


def reject(store: MemoryStore, entry_id: str) -> Entry:
    return store.reject(entry_id, store.sign_verdict(entry_id, "FAIL", note="wrong"))


def call(
    store: MemoryStore,
    name: str,
    tool_input: Mapping[str, Any],
    *,
    flags: Iterable[str] = ("memory", "memory_write"),
    **kwargs: Any,
) -> Outcome:
    return ToolSession(store, flags=flags, **kwargs).call(name, dict(tool_input))


def memory(store: MemoryStore, run_id: str | None = "R1", **tool_input: Any) -> Outcome:
    """One memory-tool command in run ``run_id``."""
    return call(store, "memory", tool_input, run_id=run_id)


def content(outcome: Outcome) -> str:
    assert outcome.ok, outcome.error
    return str(outcome.payload["content"])


def error(outcome: Outcome) -> str:
    assert not outcome.ok, outcome.payload
    assert outcome.error is not None
    return str(outcome.error["message"])


def cli(args: list[str], stdin: Any = None, *, key: str | None = None) -> Result:
    """Run truss-files in process; stdin may be an object (sent as JSON) or text."""
    from truss_files.faces.cli.main import cli as group

    text = stdin if isinstance(stdin, str) or stdin is None else json.dumps(stdin)
    full = (["--key", key] if key else []) + args
    return CliRunner().invoke(group, full, input=text, catch_exceptions=False)


def out(result: Result) -> Any:
    """The single JSON object a `tool` command printed."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])
