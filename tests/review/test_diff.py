"""`truss-files diff`: the semantic change set of a range, and the textconv driver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.git.gitstore import Identity, Plan, Snapshot
from truss_files.review.diff import change_set
from truss_files.review.render import to_markdown, to_text
from truss_files.review.textconv import ATTRIBUTES_LINE, textconv
from truss_files.signing import Ed25519Signer


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _commit_raw(store: MemoryStore, changes: dict[str, bytes | None], signer: object) -> str:
    """A hand edit committed through GitStore.apply, signed and checked by nothing."""
    done = store.git.apply(
        lambda _snap: Plan(changes, "truss: hand edit\n\nTruss-Op: config"),
        signer,  # type: ignore[arg-type]
        Identity("Test Operator", "operator@example.test"),
    )
    assert done is not None
    return str(done[0].id)


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def test_change_set_names_additions_transitions_reviewers_and_links(store: MemoryStore) -> None:
    base = _tip(store)
    older = store.write("decision", "db-engine", "Use SQLite for the cache.")
    store.promote(older.id, store.sign_verdict(older.id, "PASS", note="fits"))
    newer = store.write("decision", "db-engine", "Use Postgres for the cache.")
    votes = [
        {"reviewer": "pytest", "kind": "check", "vote": "PASS", "evidence": {"exit": 0}},
        {"reviewer": "alice", "kind": "human", "vote": "PASS", "evidence": {"note": "ok"}},
    ]
    verdict = store.sign_verdict(newer.id, "PASS", votes=votes, quorum="2-of-2")
    store.promote(newer.id, verdict)  # verified-wins: the older entry turns stale
    bad = store.write("fact", "moon", "The moon is made of cheese.")
    store.reject(bad.id, store.sign_verdict(bad.id, "FAIL", note="no"))

    cs = change_set(store.git, f"{base}..HEAD")

    assert {a.id for a in cs.added} == {older.id, newer.id, bad.id}
    assert next(a for a in cs.added if a.id == bad.id).body == "The moon is made of cheese."
    moves = {t.id: (t.before, t.after) for t in cs.transitions}
    assert moves == {
        older.id: ("new", "stale"),
        newer.id: ("new", "verified"),
        bad.id: ("new", "rejected"),
    }
    promoted = next(t for t in cs.transitions if t.id == newer.id)
    assert promoted.verdict is not None
    assert promoted.verdict.verdict_id == verdict.id
    assert promoted.verdict.quorum == "2-of-2"
    assert promoted.verdict.reviewers == ("pytest (check): PASS", "alice (human): PASS")
    assert promoted.signer == "operator@example.test"
    assert [(s.new, s.old) for s in cs.supersedes] == [(newer.id, older.id)]
    assert cs.violations == () and cs.audited == len(cs.commits) == 6
    assert [c.op for c in cs.commits] == ["write", "promote", "write", "promote", "write", "reject"]

    md = to_markdown(cs)
    assert "new → **verified**" in md and "pytest (check) PASS" in md
    assert f"`{newer.id[:12]}` supersedes `{older.id[:12]}`" in md
    assert "✅ audit: clean (6 commits)" in md
    text = to_text(cs)
    assert f"{bad.id[:12]} fact/moon: new → rejected" in text


def test_a_demotion_carries_its_reason_and_an_identity_amendment_its_diff(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = store.write("lesson", "ci", "Pin the runner image.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="ok"))
    base = _tip(store)
    store.demote(entry.id, "the image is pinned upstream now")
    _commit_raw(store, {"identity/self.md": b"# Self\n\nTerse and exact.\n"}, operator_key)

    cs = change_set(store.git, f"{base}..HEAD")

    (move,) = cs.transitions
    assert (move.before, move.after, move.reason) == (
        "verified",
        "stale",
        "the image is pinned upstream now",
    )
    (amended,) = cs.files
    # init writes a self.md template, so the amendment modifies it.
    assert (amended.path, amended.status, amended.area) == ("identity/self.md", "M", "identity")
    assert "+Terse and exact." in amended.diff
    assert amended.signer == "operator@example.test"
    assert cs.added == ()


def test_audit_violations_of_the_range_are_reported(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    base = _tip(store)
    entry = store.write("fact", "sky", "The sky is blue.")
    forged = Path(store.git.workdir or ".") / entry.path
    text = forged.read_text().replace("trust: unverified", "trust: verified")
    _commit_raw(store, {entry.path: text.encode()}, operator_key)

    cs = change_set(store.git, f"{base}..HEAD")

    assert [v["rule"] for v in cs.violations] == ["verdict"]
    assert cs.transitions[0].verdict is None
    md = to_markdown(cs)
    assert "❌ audit: 1 violation(s)" in md and "`verdict`" in md


def test_markdown_stays_under_64kb_and_says_what_was_cut(store: MemoryStore) -> None:
    base = _tip(store)
    for i in range(40):
        store.write("artifact", f"log-{i}", f"line {i} " + "x" * 3000)
    cs = change_set(store.git, f"{base}..HEAD")

    md = to_markdown(cs)

    assert len(md.encode()) < 65_536
    assert "Cut to stay under 64 KB" in md
    assert "added entries" in md and "commits" in md.split("Cut to stay under 64 KB")[1]
    assert "more characters; `truss-files show" in md  # each body is capped too
    assert "log-0" in md  # what fits is kept, in order
    small = to_markdown(cs, limit=10_000)
    assert len(small.encode()) < 10_000


def test_three_dot_range_diffs_against_the_merge_base(store: MemoryStore) -> None:
    work = store.git.workdir
    assert work is not None
    _git(work, "branch", "feature")
    store.write("fact", "on-main", "Only on main.")
    _git(work, "checkout", "-q", "feature")
    mine = store.write("fact", "on-feature", "Only on the feature branch.")

    cs = change_set(store.git, "main...feature")

    assert [a.id for a in cs.added] == [mine.id]


def test_cli_diff_json_and_markdown(store: MemoryStore) -> None:
    base = _tip(store)
    entry = store.write("goal", "ship", "Ship the sync command.")
    runner = CliRunner()
    path = str(store.git.workdir)
    out = runner.invoke(cli, ["--store", path, "diff", f"{base}..HEAD", "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["added"][0]["id"] == entry.id and data["violations"] == []
    md = runner.invoke(cli, ["--store", path, "diff", base, "--format", "markdown"])
    assert md.exit_code == 0 and md.output.startswith("### truss-files: memory changes")


def test_textconv_shows_the_header_then_the_body(store: MemoryStore) -> None:
    entry = store.write("lesson", "borrow", "Scope the guard before any await.")
    verified = store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="ok"))
    data = Snapshot(store.git.repo, store.git.tip()).read(verified.path)
    assert data is not None

    text = textconv(data)

    first, *rest = text.splitlines()
    assert first == (
        "lesson 'borrow' — verified — PASS 1/1 by operator@example.test "
        f"(verdict {verified.provenance.verified_by['verdict_id'][:12]}, quorum 1-of-1)"  # type: ignore[index]
    )
    assert rest[-1] == "Scope the guard before any await."
    assert "vote operator@example.test (human): PASS" in rest
    assert textconv(b"not an entry").startswith("(not a valid entry: ")


def test_install_drivers_makes_git_log_readable(store: MemoryStore) -> None:
    work = store.git.workdir
    assert work is not None
    entry = store.write("fact", "tz", "Servers run in UTC.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="ok"))

    def truss(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "truss_files", *args],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )

    first = truss("install-drivers", "--format", "json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["attributes_added"] is True
    again = truss("install-drivers", "--format", "json")
    assert json.loads(again.stdout)["attributes_added"] is False
    assert (work / ".gitattributes").read_text().splitlines().count(ATTRIBUTES_LINE) == 1
    assert "textconv" in _git(work, "config", "diff.truss.textconv")

    patch = _git(work, "log", "-p", "-1")
    assert "-fact 'tz' — unverified" in patch
    assert "+fact 'tz' — verified — PASS 1/1 by operator@example.test" in patch
    assert "+vote operator@example.test (human): PASS" in patch


def _row(md: str, entry_id: str) -> str:
    (row,) = [line for line in md.splitlines() if line.startswith(f"| `{entry_id[:12]}`")]
    return row


def test_each_body_sits_beside_its_transition_and_a_stale_row_says_why(
    store: MemoryStore,
) -> None:
    base = _tip(store)
    older = store.write("decision", "db-engine", "Use SQLite for the cache.\nIt is one file.")
    store.promote(older.id, store.sign_verdict(older.id, "PASS", note="fits the load"))
    newer = store.write("decision", "db-engine", "Use Postgres for the cache.")
    store.promote(newer.id, store.sign_verdict(newer.id, "PASS", note="many writers now"))
    lesson = store.write("lesson", "ci", "Pin the runner image.")
    store.promote(lesson.id, store.sign_verdict(lesson.id, "PASS", note="ok"))
    store.demote(lesson.id, "the image is pinned upstream now")
    waiting = store.write("fact", "queue", "The queue holds **100** jobs.")

    md = to_markdown(change_set(store.git, f"{base}..HEAD"))

    promoted = _row(md, newer.id)
    assert "new → **verified**" in promoted and "Use Postgres for the cache." in promoted
    assert "operator@example.test (human) PASS: many writers now" in promoted
    stale = _row(md, older.id)
    assert f"superseded by {newer.id[:12]}" in stale
    assert "Use SQLite for the cache. / It is one file." in stale
    assert "PASS" not in stale and "fits the load" not in stale  # not the old verdict
    assert "demoted: the image is pinned upstream now" in _row(md, lesson.id)
    # No collapsed list repeats the moved bodies; the one entry that did not move is listed.
    assert "<details>" not in md
    assert md.count("Use Postgres for the cache.") == 1
    added = md.split("#### Entries added, still unverified")[1]
    assert f"`{waiting.id[:12]}` fact" in added and "\\*\\*100\\*\\* jobs" in added
    assert older.id[:12] not in added.split("#### Commits")[0]


def test_one_signer_is_named_once_with_what_they_did(store: MemoryStore) -> None:
    base = _tip(store)
    entry = store.write("fact", "sky", "The sky is blue.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="looked up"))

    md = to_markdown(change_set(store.git, f"{base}..HEAD"))

    row = _row(md, entry.id)
    assert row.count("operator@example.test") == 2  # once as a person, once in the vote's line
    assert "operator@example.test (commit, verdict, vote PASS)" in row
    text = to_text(change_set(store.git, f"{base}..HEAD"))
    assert "by operator@example.test (commit, verdict, vote PASS)" in text


def test_an_illegal_move_is_never_counted_as_promoted(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    bad = store.write("fact", "moon", "The moon is made of cheese.")
    store.reject(bad.id, store.sign_verdict(bad.id, "FAIL", note="no"))
    base = _tip(store)
    # Someone with a key flips the rejected entry to verified by hand, reusing a verdict.
    good = store.write("fact", "sun", "The sun is a star.")
    verdict = store.sign_verdict(good.id, "PASS", note="yes")
    store.promote(good.id, verdict)
    path = Path(store.git.workdir or ".") / bad.path
    text = path.read_text().replace("trust: rejected", "trust: verified")
    _commit_raw(store, {bad.path: text.encode()}, operator_key)

    cs = change_set(store.git, f"{base}..HEAD")
    md = to_markdown(cs)

    flipped = next(t for t in cs.transitions if t.id == bad.id)
    assert (flipped.before, flipped.after, flipped.legal) == ("rejected", "verified", False)
    counts = md.splitlines()[2]
    assert "1 promoted" in counts and "1 illegal trust move" in counts  # the sun only
    assert "⚠️ rejected → verified (illegal)" in _row(md, bad.id)
    assert "illegal move rejected → verified" in to_text(cs)
    assert "rejected -.->|1 illegal| verified" in md


def test_a_mermaid_diagram_sums_up_the_moves(store: MemoryStore) -> None:
    base = _tip(store)
    for key in ("a", "b"):
        entry = store.write("fact", key, f"Fact {key}.")
        store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="ok"))
    store.write("fact", "c", "Fact c.")
    bad = store.write("fact", "d", "Fact d.")
    store.reject(bad.id, store.sign_verdict(bad.id, "FAIL", note="no"))

    md = to_markdown(change_set(store.git, f"{base}..HEAD"))

    diagram = md.split("```mermaid\n")[1].split("\n```")[0].splitlines()
    assert diagram[0] == "flowchart LR"
    assert "  new -->|1 written| unverified" in diagram
    assert "  new -->|2| verified" in diagram and "  new -->|1| rejected" in diagram
    assert md.index("```mermaid") < md.index("#### Trust transitions")


def test_no_message_in_the_product_cites_a_design_document() -> None:
    package = Path(__file__).resolve().parents[2] / "truss_files"
    cited = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "§" in line or "DESIGN.md" in line
    ]
    assert cited == []
