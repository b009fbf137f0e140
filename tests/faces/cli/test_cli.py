"""The `truss-files` command line through click's CliRunner, plus a few end-to-end runs of
the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.signing import Ed25519Signer

SCRIPT = Path(sys.executable).parent / "truss-files"


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name)


def _groups(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _groups(cmd, (*path, name))


class Cli:
    """Invoke the CLI against one store with the operator's key."""

    def __init__(self, store: MemoryStore, key: Path) -> None:
        self.store = store
        self.path = store.git.workdir or store.git.git_dir
        self.key = key
        self.runner = CliRunner()

    def run(self, *args: str, input: str | None = None, fmt: str | None = "json") -> Result:
        extra = ["--format", fmt] if fmt else []
        argv = ["--store", str(self.path), "--key", str(self.key), *args, *extra]
        return self.runner.invoke(cli, argv, input=input)

    def ok(self, *args: str, input: str | None = None) -> Any:
        result = self.run(*args, input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return json.loads(result.output)

    def write(self, kind: str, key: str, body: str) -> str:
        data = self.ok("write", "--kind", kind, "--key", key, body)
        assert data["trust"] == "unverified"
        return str(data["id"])

    def verdict(self, entry_id: str, outcome: str, tmp: Path) -> Path:
        out = tmp / f"{entry_id}-{outcome}.json"
        flag = "--pass" if outcome == "PASS" else "--fail"
        result = self.runner.invoke(
            cli,
            ["--store", str(self.path), "--key", str(self.key)]
            + ["verdict", "sign", entry_id, flag, "--note", "checked", "-o", str(out)],
        )
        assert result.exit_code == 0, result.output
        return out


@pytest.fixture
def tf(store: MemoryStore, tmp_path: Path) -> Cli:
    return Cli(store, tmp_path / "operator_key")


# --------------------------------------------------------------------------- documentation


def _every_command(group: click.Group) -> list[tuple[str, ...]]:
    """Every group (but the top one) and every subcommand, as the words that reach it."""
    return sorted({*_commands(group), *(p for p in _groups(group) if p)})


def test_every_command_covers_the_groups_and_their_subcommands() -> None:
    every = _every_command(cli)
    for path in [("verdict",), ("verdict", "sign"), ("config",), ("keys",), ("keys", "new")]:
        assert path in every
    for path in [("runs",), ("runs", "show"), ("tools",), ("hooks",), ("hooks", "install")]:
        assert path in every


@pytest.mark.parametrize("path", _every_command(cli), ids=" ".join)
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert f"truss-files {' '.join(path)}" in result.output  # the example runs this command


# Commands whose output is fixed by whoever reads it, so --format would have nothing to choose:
# git's textconv and merge-driver interfaces and a git hook's own output.
NO_FORMAT = {("textconv",), ("merge-driver",), ("hook",)}


@pytest.mark.parametrize("path", sorted(_commands(cli)), ids=" ".join)
def test_every_command_takes_format(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert ("--format" in result.output) is (path not in NO_FORMAT), result.output


def test_dash_v_prints_the_version() -> None:
    from importlib.metadata import version

    for flag in ("-V", "--version"):
        result = CliRunner().invoke(cli, [flag])
        assert result.exit_code == 0
        assert result.output == f"truss-files, version {version('truss-files')}\n"
    done = console.run([str(SCRIPT), "-V"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and version("truss-files") in done.stdout


def test_shell_completion_prints_a_script(tmp_path: Path) -> None:
    """The line the docs give for bash completion prints a script that completes our
    commands (run through the installed console script, as a shell would)."""
    env = dict(os.environ, _TRUSS_FILES_COMPLETE="bash_source")
    done = console.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "_truss_files_completion" in done.stdout and "complete " in done.stdout
    # The script asks the program back for completions: that answer names our commands.
    asked = {"COMP_WORDS": "truss-files ver", "COMP_CWORD": "1"}
    env = dict(os.environ, _TRUSS_FILES_COMPLETE="bash_complete", **asked)
    done = console.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "plain,verdict" in done.stdout.split(), done.stdout
    assert "plain,verify" in done.stdout.split()


@pytest.mark.parametrize("path", list(_groups(cli)), ids=lambda p: " ".join(p) or "truss-files")
def test_every_group_lists_its_commands(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    group = cli
    for name in path:
        found = group.commands[name]
        assert isinstance(found, click.Group)
        group = found
    for name in group.commands:
        assert name in result.output


def test_top_level_help_shows_how_to_start() -> None:
    result = CliRunner().invoke(cli, ["-h"])
    assert result.exit_code == 0
    assert "truss-files init" in result.output and "truss-files query" in result.output
    version = CliRunner().invoke(cli, ["--version"])
    assert version.exit_code == 0 and "0." in version.output


def test_verdict_sign_formats(tf: Cli, tmp_path: Path) -> None:
    """json (the default, even asked for): the signed verdict itself, which promote reads;
    text: one line naming it; with -o, json names the file and the file holds the verdict."""
    eid = tf.write("lesson", "formats", "Sign what you checked.")
    signed = tf.run("verdict", "sign", eid, "--fail", fmt="json")
    assert signed.exit_code == 0 and json.loads(signed.output)["entry"] == eid
    line = tf.run("verdict", "sign", eid, "--fail", fmt="text")
    assert line.exit_code == 0 and line.output.startswith("verdict ") and "FAIL on" in line.output
    out = tmp_path / "v.json"
    named = tf.ok("verdict", "sign", eid, "--pass", "-o", str(out))
    assert named["path"] == str(out) and named["outcome"] == "PASS" and named["entry"] == eid
    assert json.loads(out.read_text())["entry"] == eid
    assert tf.ok("promote", eid, "--verdict", str(out))["trust"] == "verified"
    refused = tf.run("verdict", "sign", "0" * 12, "--pass", fmt="json")
    assert refused.exit_code == 1 and "error" in json.loads(refused.output)


def test_show_text_is_the_belief_and_raw_is_the_file(tf: Cli, tmp_path: Path) -> None:
    """On a terminal `show` says what is believed and who vouched for it, without the YAML
    or the SSHSIG block; --raw prints the stored file byte for byte; JSON is unchanged."""
    eid = tf.write("lesson", "ci-flakes", "Retry the network tests once.")
    tf.ok("promote", eid, "--verdict", str(tf.verdict(eid, "PASS", tmp_path)))
    text = tf.run("show", eid, fmt="text")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0] == f"{eid[:12]}  lesson/ci-flakes  [verified]"
    said = tf.ok("show", eid)
    verdict = said["provenance"]["verified_by"]
    assert any(
        line.startswith(f"verified by {verdict['signer']} at ")
        and verdict["verdict_id"][:12] in line
        for line in lines
    )
    assert lines[-1] == "Retry the network tests once."
    assert "SSH SIGNATURE" not in text.output and "---" not in text.output
    raw = tf.run("show", eid, "--raw", fmt=None)
    stored = tf.store.snapshot().read(said["path"])
    assert raw.exit_code == 0 and raw.stdout_bytes == stored
    assert b"-----BEGIN SSH SIGNATURE-----" in stored
    assert set(said) >= {"id", "kind", "key", "body", "trust", "provenance", "path"}
    unverified = tf.write("fact", "db", "Postgres.")
    assert "not verified by a panel" in tf.run("show", unverified, fmt="text").output


# --------------------------------------------------------------------------- the life of an entry


def test_write_show_list_promote_log_audit(tf: Cli, tmp_path: Path) -> None:
    eid = tf.write("lesson", "rust-borrow-checker", "Scope the index guard before any await.")
    shown = tf.ok("show", eid[:8])
    assert shown["id"] == eid and shown["trust"] == "unverified" and shown["kind"] == "lesson"
    assert shown["path"] == f"memories/lesson/{eid[:2]}/{eid}.md"
    assert [e["id"] for e in tf.ok("list")] == [eid]
    assert tf.ok("list", "--trust", "verified") == []

    verdict = tf.verdict(eid, "PASS", tmp_path)
    promoted = tf.ok("promote", eid[:10], "--verdict", str(verdict))
    assert promoted == {"id": eid, "trust": "verified", "supersedes": None, "superseded_by": None}
    assert tf.ok("show", eid)["provenance"]["verified_by"]["outcome"] == "PASS"

    log = tf.ok("log", eid)
    assert [i["op"] for i in log] == ["write", "promote"]
    assert all(i["signer"] == "operator@example.test" for i in log)
    assert log[1]["verdict"] == json.loads(verdict.read_text())["verdict_id"]

    report = tf.ok("audit")
    assert report["ok"] is True and report["checked"] == 3 and report["violations"] == []


def test_list_skips_a_malformed_entry_file_and_says_so(
    tf: Cli, signed_commit: Callable[..., str]
) -> None:
    eid = tf.write("fact", "good", "Still listed.")
    bad = "memories/fact/ba/" + "ba" * 16 + ".md"
    signed_commit(tf.store, {bad: b"---\nid: [unclosed\n---\nbody\n"})

    listed = tf.run("list")
    assert listed.exit_code == 0, listed.output
    assert [e["id"] for e in json.loads(listed.stdout)] == [eid]
    skipped = json.loads(listed.stderr)["skipped"]
    assert [s["path"] for s in skipped] == [bad] and skipped[0]["error"].startswith(bad)
    text = tf.run("list", fmt="text")
    assert text.exit_code == 0 and f"{eid[:12]}  unverified  fact/good" in text.stdout
    assert text.stderr.startswith(f"warning: skipped {bad}: ")
    # A filter nothing matches is no error; a folder where nothing can be read is.
    assert tf.run("list", "--key", "nothing-matches", fmt="text").exit_code == 0
    signed_commit(tf.store, {f"memories/fact/{eid[:2]}/{eid}.md": None})
    none = tf.run("list", fmt="text")
    assert none.exit_code == 1 and "nothing to list: 1 file(s)" in none.stderr


def test_write_dash_reads_stdin(tf: Cli) -> None:
    body = "Read from stdin.\nSecond line.\n"
    data = tf.ok(
        "write", "--kind", "fact", "--key", "stdin", "--source", "event:e1#2", "-", input=body
    )
    shown = tf.ok("show", data["id"])
    assert shown["body"] == "Read from stdin.\nSecond line."
    assert shown["ledger_ref"] == "event:e1#2"


def test_demote_revert_supersede_reject(tf: Cli, tmp_path: Path) -> None:
    old = tf.write("decision", "db", "Use sqlite.")
    tf.ok("promote", old, "--verdict", str(tf.verdict(old, "PASS", tmp_path)))
    assert tf.ok("demote", old, "--reason", "too small")["trust"] == "stale"
    head = tf.store.git.tip()
    assert head is not None
    reverted = tf.ok("revert", str(head.id))
    assert reverted["reverts"] == str(head.id)
    assert tf.ok("show", old)["trust"] == "verified"

    new = tf.write("decision", "database", "Use postgres.")
    tf.ok("promote", new, "--verdict", str(tf.verdict(new, "PASS", tmp_path)))
    sup = tf.ok("supersede", old, new)
    assert sup == {"old": old, "old_trust": "stale", "new": new}

    bad = tf.write("fact", "earth", "The earth is flat.")
    assert (
        tf.ok("reject", bad, "--verdict", str(tf.verdict(bad, "FAIL", tmp_path)))["trust"]
        == "rejected"
    )
    assert tf.ok("audit")["ok"] is True


def test_verdict_sign_prints_json_to_stdout(tf: Cli) -> None:
    eid = tf.write("fact", "k", "body")
    result = tf.runner.invoke(
        cli, ["--store", str(tf.path), "--key", str(tf.key), "verdict", "sign", eid, "--pass"]
    )
    assert result.exit_code == 0
    verdict = json.loads(result.output)
    assert verdict["entry"] == eid and verdict["outcome"] == "PASS"
    assert verdict["signature"].startswith("-----BEGIN SSH SIGNATURE-----")
    promoted = tf.ok("promote", eid, "--verdict", "-", input=result.output)
    assert promoted["trust"] == "verified"


# --------------------------------------------------------------------------- query and the floor


def test_query_respects_the_trust_floor(tf: Cli, tmp_path: Path) -> None:
    ids = {}
    for name in ("verified", "stale", "unverified", "rejected"):
        ids[name] = tf.write("lesson", f"{name}-one", f"flaky network tests need a retry ({name})")
    tf.ok(
        "promote", ids["verified"], "--verdict", str(tf.verdict(ids["verified"], "PASS", tmp_path))
    )
    tf.ok("promote", ids["stale"], "--verdict", str(tf.verdict(ids["stale"], "PASS", tmp_path)))
    tf.ok("demote", ids["stale"], "--reason", "outdated")
    tf.ok(
        "reject", ids["rejected"], "--verdict", str(tf.verdict(ids["rejected"], "FAIL", tmp_path))
    )

    def found(*extra: str) -> set[str]:
        data = tf.ok("query", "flaky network retry", *extra)
        return {ids_by_value[e["id"]] for e in data["entries"]}

    ids_by_value = {v: k for k, v in ids.items()}
    default = tf.ok("query", "flaky network retry")
    assert default["min_trust"] == "verified"
    assert found() == {"verified"}
    assert found("--min-trust", "verified") == {"verified"}
    assert found("--min-trust", "stale") == {"verified", "stale"}
    assert found("--min-trust", "unverified") == {"verified", "stale", "unverified"}
    assert found("--min-trust", "unverified", "--limit", "1") <= {"verified", "stale", "unverified"}
    assert len(tf.ok("query", "flaky", "--min-trust", "unverified", "--limit", "2")["entries"]) == 2
    assert found("--min-trust", "unverified", "--kind", "fact") == set()
    assert found("--min-trust", "unverified", "--key", "stale-one") == {"stale"}
    for entry in tf.ok("query", "flaky", "--min-trust", "unverified")["entries"]:
        assert entry["trust"] != "rejected" and "score" in entry
    # rejected is no floor at all
    refused = tf.run("query", "flaky", "--min-trust", "rejected")
    assert refused.exit_code == 2


def test_query_text_output(tf: Cli, tmp_path: Path) -> None:
    eid = tf.write("lesson", "ci", "Retry the flaky network tests once.")
    nothing = tf.run("query", "flaky", fmt="text")
    assert nothing.exit_code == 0 and "nothing at or above verified" in nothing.output
    tf.ok("promote", eid, "--verdict", str(tf.verdict(eid, "PASS", tmp_path)))
    text = tf.run("query", "flaky", fmt="text")
    assert text.exit_code == 0 and eid[:12] in text.output and "[verified]" in text.output


# --------------------------------------------------------------------------- errors and usage


def _error(result: Result) -> dict[str, str]:
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert set(data) == {"error"} and set(data["error"]) == {"code", "message"}
    return dict(data["error"])


def test_errors_exit_1_with_a_json_error_object(tf: Cli, tmp_path: Path) -> None:
    missing = _error(tf.run("show", "0123456789abcdef"))
    assert missing["code"] == "not_found" and "truss-files list" in missing["message"]
    assert _error(tf.run("show", "xyz"))["code"] == "invalid_input"

    eid = tf.write("fact", "k", "body")
    other = tf.write("fact", "other", "other body")
    wrong = tf.verdict(other, "PASS", tmp_path)
    bad = _error(tf.run("promote", eid, "--verdict", str(wrong)))
    assert bad["code"] == "bad_verdict" and other in bad["message"]
    assert tf.ok("show", eid)["trust"] == "unverified"

    edited = json.loads(tf.verdict(eid, "PASS", tmp_path).read_text())
    edited["votes"][0]["evidence"]["note"] = "edited"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(edited))
    assert _error(tf.run("promote", eid, "--verdict", str(forged)))["code"] == "bad_verdict"
    assert (
        _error(tf.run("promote", eid, "--verdict", str(tmp_path / "nope.json")))["code"]
        == "invalid_input"
    )
    assert _error(tf.run("demote", eid, "--reason", "x"))["code"] == "illegal_transition"
    assert _error(tf.run("write", "--kind", "fact", "--key", "k", "   "))["code"] == "invalid_input"
    neither = tf.run("verdict", "sign", eid, fmt=None)  # bad usage: neither --pass nor --fail
    assert neither.exit_code == 2 and "say --pass or --fail" in neither.output


def test_errors_in_text_mode_go_to_stderr(tf: Cli) -> None:
    result = tf.run("show", "0123456789abcdef", fmt="text")
    assert result.exit_code == 1
    assert "error: no entry with id" in result.output  # CliRunner mixes stderr in


def test_no_signing_key_is_a_clear_error(store: MemoryStore) -> None:
    path = store.git.workdir
    result = CliRunner().invoke(
        cli,
        ["--store", str(path), "write", "--kind", "fact", "--key", "k", "b", "--format", "json"],
    )
    error = _error(result)
    assert error["code"] == "config" and "truss-files keys new" in error["message"]


def test_not_a_store_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", str(tmp_path), "list", "--format", "json"])
    error = _error(result)
    assert error["code"] == "store" and "truss-files init" in error["message"]


@pytest.mark.parametrize(
    "argv",
    [
        ["write", "--key", "k", "body"],  # --kind missing
        ["write", "--kind", "memo", "--key", "k", "body"],
        ["write", "--kind", "fact", "--key", "k"],  # BODY missing
        ["query", "x", "--limit", "0"],
        ["list", "--trust", "trusted"],
        ["no-such-command"],
        ["show"],
        ["promote", "abcdef12"],  # --verdict missing
        ["log", "--format", "yaml", "abcdef12"],
    ],
)
def test_bad_usage_exits_2(tf: Cli, argv: list[str]) -> None:
    tip = tf.store.git.tip()
    result = CliRunner().invoke(cli, ["--store", str(tf.path), "--key", str(tf.key), *argv])
    assert result.exit_code == 2, result.output
    assert tf.store.git.tip() == tip


def test_audit_reports_violations_with_exit_1(tf: Cli, signed_commit: Callable[..., str]) -> None:
    eid = tf.write("fact", "k", "body")
    path = f"memories/fact/{eid[:2]}/{eid}.md"
    text = (tf.store.snapshot().read(path) or b"").replace(b"trust: unverified", b"trust: verified")
    sha = signed_commit(tf.store, {path: text})
    result = tf.run("audit")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False
    assert [(v["commit"], v["path"], v["rule"]) for v in report["violations"]] == [
        (sha, path, "verdict")
    ]
    text_run = tf.run("audit", fmt="text")
    assert text_run.exit_code == 1
    assert f"{sha[:12]} {path}: [verdict]" in text_run.output
    ranged = tf.run("audit", f"{sha}..HEAD", fmt="text")
    assert ranged.exit_code == 0 and "ok: 0 commits" in ranged.output


# --------------------------------------------------------------------------- the console script


def _script(*args: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed")


@needs_script
def test_console_script_end_to_end(tmp_path: Path, git: Callable[..., str]) -> None:
    repo = tmp_path / "memory"
    init = _script("init", str(repo), cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert json.loads(init.stdout)["new_key"] is True  # piped: JSON without asking
    # Inside the repository, --store is not needed.
    wrote = _script(
        "write",
        "--kind",
        "lesson",
        "--key",
        "ci",
        "-",
        cwd=repo,
        input="Retry the flaky network tests once.",
    )
    assert wrote.returncode == 0, wrote.stderr
    eid = json.loads(wrote.stdout)["id"]
    verdict = _script("verdict", "sign", eid[:8], "--pass", cwd=repo)
    assert verdict.returncode == 0, verdict.stderr
    promoted = _script("promote", eid[:8], "--verdict", "-", cwd=repo, input=verdict.stdout)
    assert promoted.returncode == 0, promoted.stderr
    hits = json.loads(_script("query", "flaky tests", cwd=repo).stdout)["entries"]
    assert [h["id"] for h in hits] == [eid]
    audited = _script("audit", cwd=repo)
    assert audited.returncode == 0 and json.loads(audited.stdout)["ok"] is True
    assert git(repo, "status", "--porcelain") == ""
    signers = repo / ".truss" / "allowed_signers"
    shown = git(
        repo,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"gpg.ssh.allowedSignersFile={signers}",
        "log",
        "--show-signature",
        "--format=%s",
    )
    assert shown.count('Good "git" signature') == 3


@needs_script
def test_console_script_exit_codes(tmp_path: Path, operator_key: Ed25519Signer) -> None:
    from truss_files.store.initstore import init_store

    repo = tmp_path / "s"
    init_store(repo, operator_key, "operator@example.test")
    key = str(tmp_path / "operator_key")
    missing = _script("--key", key, "show", "0123456789abcdef", cwd=repo)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "not_found"
    usage = _script("--key", key, "write", "--kind", "memo", "--key", "k", "b", cwd=repo)
    assert usage.returncode == 2 and "memo" in usage.stderr
    text = _script("--key", key, "show", "0123456789abcdef", "--format", "text", cwd=repo)
    assert text.returncode == 1 and text.stdout == "" and text.stderr.startswith("error: ")


@needs_script
def test_console_script_help_is_fast_to_reach(tmp_path: Path) -> None:
    result = _script("--help", cwd=tmp_path)
    assert result.returncode == 0 and "Start here" in result.stdout
