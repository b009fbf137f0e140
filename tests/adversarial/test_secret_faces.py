"""Every credential shape, offered through every face: refused (or, where learning is
unattended, masked), never echoed, and never in an object under ``.git``.

test_secret_attacks.py tries each promise once per face; here each face is given every shape
(tests/support/credentials.py: the providers' tokens and detect-secrets' assignments), in
process and on one store per face, and the repository is searched once afterwards for every
value (``git cat-file --batch-all-objects --batch``: reachable or not, and every file under
``.git``: logs, hook state, learn state). The faces: the CLI (click's runner), import, the
memory tool and write_memory (the dispatcher), the MCP SDK's own client, the Anthropic SDK
adapter, a running HTTP server's train route, ``learn`` and the host hooks (masking), and the
gates: a hand-made signed commit offered to the server's pre-receive and staged under the
pre-commit hook. Real processes, one shape each: `write` and `import` through the console
script (test_secret_attacks.py), a push to the installed server gate (tests/trust/
test_leaks.py), and `truss-files hook session-end` here (with TRUSS_SLOW=1: it loads the
model SDK; run_host_hook, which it calls, is tried in process with every shape).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from examples.fake_provider import FakeProvider
from tests.adversarial.test_secret_attacks import Repo, silent
from tests.support.credentials import CREDENTIALS, KIND, PLUGIN_SHAPES
from tests.support.host_support import Transcript
from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from tests.support.model_judges import add_to_config, with_env
from tests.support.tools_support import configure
from truss_files.config.settings import settings_for
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.faces.hooks import pre_commit, pre_receive
from truss_files.faces.host.hookrun import run_host_hook
from truss_files.faces.host.learn import learn
from truss_files.faces.host.transcript import read_transcript
from truss_files.format.entryfile import serialize
from truss_files.format.secrets import find
from truss_files.model import Entry, Kind, Provenance
from truss_files.tools import ToolSession

# (name, kind, text offered, the secret part of it: what must reach no object)
SHAPES: list[tuple[str, str, str, str]] = []
for _name, _value in CREDENTIALS.items():
    SHAPES.append((_name, KIND[_name], _value, _value))
for _name, (_kind, _text) in PLUGIN_SHAPES.items():
    SHAPES.append((_name, _kind, _text, _text))
SHAPES = [
    (name, kind, text, text[hit.start : hit.end])
    for name, kind, text, _ in SHAPES
    for hit in find(text)[:1]
]
assert len(SHAPES) == len(CREDENTIALS) + len(PLUGIN_SHAPES)

LEARN = '\n[learn]\nprovider = "anthropic"\nmodel = "learn-test"\nmax_notes = 64\n'


def pieces(secret: str) -> list[str]:
    """What of ``secret`` must not be stored: the whole, and each of its lines of 12 or more
    characters (a PEM key's material, however it was re-wrapped)."""
    return [secret, *(line for line in secret.splitlines() if len(line.strip()) >= 12)]


def nowhere(repo: Repo) -> None:
    """No object and no file under .git holds any shape's secret part (every object and
    file read once, not once per value)."""
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo.git_dir,
        capture_output=True,
        check=True,
    ).stdout
    files = {
        str(path.relative_to(repo.git_dir)): path.read_bytes()
        for path in repo.git_dir.rglob("*")
        if path.is_file()
    }
    assert len(objects) > 0 and "HEAD" in files
    leaked = {}
    for name, _, _, secret in SHAPES:
        for piece in map(str.encode, pieces(secret)):
            where = ["an object"] if piece in objects else []
            where += [path for path, data in files.items() if piece in data]
            if where:
                leaked[name] = where
    assert leaked == {}


# -- refused ---------------------------------------------------------------------------------


def test_the_cli_refuses_every_shape_in_a_body_and_in_a_scope(
    store: MemoryStore, tmp_path: Path
) -> None:
    repo = Repo(store)
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    runner = CliRunner()
    for name, kind, text, secret in SHAPES:
        for where, args in (
            ("field 'body'", ["--key", "db", f"connect with {text}"]),
            ("field 'key'", ["--key", f"db {text}", "plain"]),
        ):
            done = runner.invoke(cli, [*base, "write", "--kind", "fact", "--format", "json", *args])
            assert done.exit_code == 1, (name, done.output)
            error = json.loads(done.output)["error"]
            assert error["code"] == "secret", (name, error)
            assert where in error["message"] and kind in error["message"], (name, error)
            silent(done.output, secret)
    repo.untouched()
    nowhere(repo)


def test_import_refuses_a_file_of_every_shape_naming_each_line(
    store: MemoryStore, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.jsonl"
    lines = [{"kind": "fact", "key": "plain", "body": "Nothing to hide."}]
    lines += [{"kind": "fact", "key": f"k-{n}", "body": text} for n, (_, _, text, _) in
              enumerate(SHAPES)]  # fmt: skip
    notes.write_text("".join(json.dumps(x) + "\n" for x in lines))
    repo = Repo(store)
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    done = CliRunner().invoke(cli, [*base, "import", str(notes), "--format", "json"])
    assert done.exit_code == 1, done.output
    error = json.loads(done.output)["error"]
    assert error["code"] == "secret"
    for n, (name, _, _, secret) in enumerate(SHAPES, 2):
        assert f"{notes}:{n}: field 'body', line 1, column " in error["message"], name
        silent(done.output, secret)
    assert f"{notes}:1:" not in error["message"]
    kinds = {kind for _, kind, _, _ in SHAPES}
    assert all(kind in error["message"] for kind in kinds)
    repo.untouched()
    nowhere(repo)
    assert store.list_entries() == []


def test_the_memory_tool_and_write_memory_refuse_every_shape(store: MemoryStore) -> None:
    configure(store, memory=True, memory_write=True)
    repo = Repo(store)
    session = ToolSession(store, flags=["memory_write"], run_id="R-faces", durable=True)
    for name, kind, text, secret in SHAPES:
        for tool, given in (
            ("memory", {"command": "create", "path": "/memories/ops/db.md", "file_text": text}),
            ("write_memory", {"kind": "fact", "key": "db", "body": f"uses {text}"}),
        ):
            done = session.call(tool, given)
            assert not done.ok and done.error is not None, (name, tool)
            assert done.error["code"] == "secret" and kind in done.error["message"], (name, tool)
            silent(json.dumps(done.error), secret)
            assert done.ledger_ref is None  # refused before the run's ledger recorded it
    repo.untouched()
    nowhere(repo)


def test_the_mcp_tools_refuse_every_shape(store: MemoryStore) -> None:
    mcp = pytest.importorskip("mcp")
    from truss_files.faces.mcp import build_server

    configure(store, memory=True, memory_write=True)
    repo = Repo(store)
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="M-faces")

    async def main() -> None:
        async with mcp.Client(build_server(session)) as client:
            for name, kind, text, secret in SHAPES:
                for tool, given in (
                    ("write_memory", {"kind": "fact", "key": "db", "body": f"uses {text}"}),
                    ("memory", {"command": "create", "path": "/memories/x.md", "file_text": text}),
                ):
                    made = await client.call_tool(tool, given)
                    assert made.is_error, (name, tool)
                    said = made.content[0].text  # type: ignore[union-attr]
                    assert "secret" in said and kind in said, (name, tool, said)
                    silent(said, secret)

    anyio.run(main)
    repo.untouched()
    nowhere(repo)


def test_the_anthropic_sdk_adapter_refuses_every_shape(store: MemoryStore) -> None:
    anthropic = pytest.importorskip("anthropic")
    from truss_files.faces.anthropic_adapter import TrussMemoryTool

    repo = Repo(store)
    tool = TrussMemoryTool(store, run_id="sdk-faces")
    for name, kind, text, secret in SHAPES:
        given = {"command": "create", "path": "/memories/ops/db.md", "file_text": f"uses {text}\n"}
        with pytest.raises(anthropic.lib.tools.ToolError) as caught:
            tool.call(given)
        said = str(caught.value)
        assert "secret" in said and kind in said, (name, said)
        silent(said, secret)
    repo.untouched()
    nowhere(repo)


@pytest.mark.spawns  # a real `truss-files serve`
def test_http_train_refuses_every_shape(served: Callable[..., Served], store: MemoryStore) -> None:
    pytest.importorskip("uvicorn")
    server = served()
    repo = Repo(store)
    for n, (name, kind, text, secret) in enumerate(SHAPES):
        answer = server.train(
            "T-1",
            {
                "body": f"The key is {text}\nRotate it.",
                "source": {"eventId": f"e-{n}", "revision": "1"},
            },
        )
        assert answer.status == 422, (name, answer.raw)
        assert answer.body["error"]["code"] == "secret" and kind in answer.body["error"]["message"]
        silent(answer.raw.decode(), secret)
    log = server.stop()
    for _, _, _, secret in SHAPES:
        silent(log, secret)
    repo.untouched()
    nowhere(repo)


# -- the gates: a hand-made signed commit ------------------------------------------------------


def _entry(n: int, text: str) -> Entry:
    return Entry(
        Kind.FACT, f"hand-{n}", f"Deploy with {text} from CI.", created="2026-12-07T11:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )  # fmt: skip


def test_the_server_gate_refuses_a_signed_hand_commit_of_every_shape(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    """Each commit made with the operator's key and checked by nothing (as ``git commit -S``
    makes one), then offered to pre-receive as a push would: the objects are there, the
    branch has not moved. The gate refuses it, naming entry and kind, never the value."""
    repo = store.git.repo
    old = str(repo.references["refs/heads/main"].target)
    for n, (name, kind, text, secret) in enumerate(SHAPES):
        entry = _entry(n, text)
        new = signed_commit(
            store,
            {entry.path: serialize(entry).encode()},
            message=f"deploy\n\nTruss-Op: write\nTruss-Entry: {entry.id}",
        )
        # As the server sees a push: the objects are there, the commit is new to its branch.
        repo.references.create("refs/heads/main", old, force=True)
        lines = pre_receive(repo, f"{old} {new} refs/heads/main\n", os.environ)
        said = [x for x in lines if "[secret]" in x]
        assert len(said) == 1 and f"entry {entry.id}" in said[0] and kind in said[0], (name, lines)
        silent("\n".join(lines), secret)


def test_the_pre_commit_hook_refuses_staging_every_shape(store: MemoryStore) -> None:
    work = Path(str(store.git.workdir))
    repo = store.git.repo
    tip = str(repo.head.target)
    for n, (name, kind, text, secret) in enumerate(SHAPES):
        entry = _entry(n, text)
        (work / entry.path).parent.mkdir(parents=True, exist_ok=True)
        (work / entry.path).write_text(serialize(entry))
        repo.index.read()
        repo.index.add(entry.path)
        repo.index.write()
        lines = pre_commit(repo)
        said = [x for x in lines if "[secret]" in x]
        assert len(said) == 1 and f"entry {entry.id}" in said[0] and kind in said[0], (name, lines)
        silent("\n".join(lines), secret)
        repo.index.remove(entry.path)
        repo.index.write()
        (work / entry.path).unlink()
    assert str(repo.head.target) == tip


# -- unattended: masked, never stored raw ------------------------------------------------------


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def _env(fake: FakeProvider) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.url}


def _said(n: int, text: str) -> str:
    """A lesson line holding ``text`` as a model would write one: on one line (a PEM key's
    newlines as the two characters a JSON string writes)."""
    return f"Fact: shape {n} deploy bot authenticates with {text.replace(chr(10), chr(92) + 'n')}."


def _masked(store: MemoryStore) -> dict[str, Entry]:
    return {e.key: e for e in store.list_entries()}


def test_learn_masks_every_shape_and_never_learns_private_text(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider
) -> None:
    add_to_config(store, LEARN)
    store = with_env(store, _env(fake))
    t = Transcript(tmp_path / "s.jsonl", "sess-faces", tmp_path)
    t.user("Deploy with the bot account. <private>Fact: the pager pin is 4417.</private>")
    for n, (_, _, text, _) in enumerate(SHAPES):
        t.assistant(_said(n, text))
    learn(store, read_transcript(t.path), settings=settings_for(store), state=tmp_path / "st")
    stored = _masked(store)
    for n, (name, kind, _, _) in enumerate(SHAPES):
        [entry] = [e for key, e in stored.items() if key.startswith(f"shape-{n}-")]
        assert f"[secret:{kind}]" in entry.body, (name, entry.body)
        assert kind in entry.provenance.masked, name
    assert not any("4417" in e.body for e in stored.values())
    repo = Repo(store)
    nowhere(repo)
    assert repo.holds("4417") == []


def test_the_learning_hooks_mask_every_shape_in_process(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_to_config(store, LEARN)
    # The hook opens the store itself, with this process's environment.
    for name, value in {**_env(fake), "TRUSS_KEY": str(tmp_path / "operator_key")}.items():
        monkeypatch.setenv(name, value)
    t = Transcript(tmp_path / "s.jsonl", "sess-hook", tmp_path)
    t.user("Deploy with the bot account.")
    for n, (_, _, text, _) in enumerate(SHAPES):
        t.assistant(_said(n, text))
    for hook in ("pre-compact", "session-end"):
        out = io.StringIO()
        raw = json.dumps({"session_id": "sess-hook", "transcript_path": str(t.path)}).encode()
        code = run_host_hook(
            hook, [], store_path=str(store.git.workdir), stdin=io.BytesIO(raw), stdout=out,
            environ=os.environ,
        )  # fmt: skip
        assert code == 0
        for _, _, _, secret in SHAPES:
            silent(out.getvalue(), secret)
    stored = _masked(store)
    for n, (name, kind, _, _) in enumerate(SHAPES):
        [entry] = [e for key, e in stored.items() if key.startswith(f"shape-{n}-")]
        assert f"[secret:{kind}]" in entry.body, (name, entry.body)
    nowhere(Repo(store))


@pytest.mark.slow  # the process imports the model SDK: ~5 s alone, far more on a busy machine
@pytest.mark.spawns  # the console script, as the host runs it
def test_the_session_end_hook_process_masks_a_pasted_token(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider
) -> None:
    add_to_config(store, LEARN)
    token = CREDENTIALS["anthropic-key"]
    t = Transcript(tmp_path / "s.jsonl", "sess-proc", tmp_path)
    t.user(f"Here is the key, use it: {token}")
    t.assistant(f"Fact: the release job signs in with {token} from the vault.")
    env = {**os.environ, **_env(fake), "TRUSS_KEY": str(tmp_path / "operator_key")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("truss-files")), "--store", str(store.git.workdir),
         "hook", "session-end"],
        input=json.dumps({"session_id": "sess-proc", "transcript_path": str(t.path)}),
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    silent(done.stdout + done.stderr, token)
    [entry] = [e for e in store.list_entries() if e.key.startswith("the-release-job")]
    assert "[secret:anthropic-key]" in entry.body and entry.provenance.masked == ("anthropic-key",)
    assert Repo(store).holds(token) == []
