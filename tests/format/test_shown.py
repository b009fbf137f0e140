"""format/secrets.py ``shown``: outputs that return stored text mask a credential in it.

A credential that got into the store past the write path (a hand commit from before the gate)
is shown as ``[secret:KIND]`` by every output -- the CLI's query, show and list, the read
tools, the memory tool's view, ask -- while the stored file, the id and the trust stay as they
are. The detector loads only for a text where some detector's gate finds a place.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from tests.support.credentials import CREDENTIALS, LOOKALIKES
from tests.support.tools_support import call, configure, content, memory
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.entryfile import serialize
from truss_files.format.views import entry_text, entry_view, shown
from truss_files.model import Entry, Kind, Provenance

TOKEN = CREDENTIALS["github-token"]
KEY = CREDENTIALS["aws-access-key-id"]
BODY = f"Deploy from CI with {TOKEN}.\nThe bucket key is {KEY} (rotated monthly)."
MASKED = (
    "Deploy from CI with [secret:github-token].\n"
    "The bucket key is [secret:aws-access-key-id] (rotated monthly)."
)


def _leaked(store: MemoryStore, signed_commit: Callable[..., str]) -> Entry:
    """A verified lesson holding two credentials, committed past the write path."""
    entry = Entry(
        Kind.LESSON, "deploy", BODY, created="2026-12-07T11:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )  # fmt: skip
    signed_commit(
        store, {entry.path: serialize(entry).encode()}, message="truss: by hand\n\nTruss-Op: write"
    )
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="before the gate"))
    return entry


def test_shown_masks_the_text_and_keeps_the_id() -> None:
    entry = Entry(Kind.FACT, "deploy", BODY, created="2026-12-07T11:00:00Z")
    seen = shown(entry)
    assert seen.body == MASKED and seen.id == entry.id and seen.path == entry.path
    assert entry.body == BODY  # the value given is untouched
    assert shown(seen).body == MASKED  # a mask is text: masking again changes nothing
    view = entry_view(entry, full=True)
    assert view["id"] == entry.id and view["body"] == MASKED and TOKEN not in json.dumps(view)
    assert TOKEN not in entry_text(entry) and "[secret:github-token]" in entry_text(entry)


def test_look_alikes_are_shown_as_they_are() -> None:
    for name, text in LOOKALIKES.items():
        entry = Entry(Kind.FACT, "k", text, created="2026-12-07T11:00:00Z")
        assert shown(entry) is entry, name


def test_the_cli_shows_masked_text_and_keeps_the_file(
    store: MemoryStore, tmp_path: Path, signed_commit: Callable[..., str]
) -> None:
    entry = _leaked(store, signed_commit)
    path = store.git.workdir
    assert path is not None
    base = ["--store", str(path), "--key", str(tmp_path / "operator_key")]
    runner = CliRunner()

    found = runner.invoke(cli, [*base, "query", "deploy bucket", "--format", "json"])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.output)["entries"]
    assert [(h["id"], h["trust"], h["body"]) for h in hits] == [(entry.id, "verified", MASKED)]
    for args in (
        ["query", "deploy bucket", "--format", "text"],
        ["show", entry.id, "--format", "text"],
        ["show", entry.id, "--format", "json"],
        ["list", "--format", "json"],
    ):
        said = runner.invoke(cli, [*base, *args])
        assert said.exit_code == 0, (args, said.output)
        assert TOKEN not in said.output and KEY not in said.output, args
        assert "[secret:github-token]" in said.output, args
    # What is stored is the file as committed: --raw prints it, byte for byte.
    raw = runner.invoke(cli, [*base, "show", entry.id, "--raw"])
    assert raw.output == serialize(store.get(entry.id))
    assert TOKEN in raw.output


def test_the_read_tools_and_the_memory_tool_show_masked_text(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    configure(store)
    entry = _leaked(store, signed_commit)

    queried = call(store, "memory_query", {"query": "deploy bucket"})
    assert queried.ok, queried.error
    assert [e["body"] for e in queried.payload["entries"]] == [MASKED]
    assert queried.payload["entries"][0]["id"] == entry.id
    viewed = call(store, "memory_view", {"id": entry.id})
    assert viewed.ok, viewed.error
    assert TOKEN not in json.dumps(viewed.payload)
    assert [(e["id"], e["body"]) for e in viewed.payload["entries"]] == [(entry.id, MASKED)]

    text = content(memory(store, command="view", path="/memories/lesson/deploy.md"))
    assert "[secret:github-token]" in text and "[secret:aws-access-key-id]" in text
    assert TOKEN not in text and KEY not in text
    assert store.get(entry.id).body == BODY  # the store is unchanged


def test_an_output_without_a_candidate_never_loads_the_detector() -> None:
    code = (
        "import sys\n"
        "from truss_files.format.views import entry_view, entry_text\n"
        "from truss_files.model import Entry, Kind\n"
        "e = Entry(Kind.FACT, 'ci', 'Retry the flaky network tests once, then file a bug.',"
        " created='2026-12-07T11:00:00Z')\n"
        "entry_view(e, full=True); entry_text(e)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('detect_secrets','requests')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
