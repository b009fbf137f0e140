"""Hostile tool input: every input yields exactly one JSON object, and nothing in the store moves.

Each attack of the tool faces is performed for real -- through the installed console script
(``truss-files tool ...`` as a process, stdin as raw bytes) and through the library's
dispatcher (``ToolSession.call``) -- and must be refused with a known error code (mostly
``invalid_input``), exit 1 or 2, no traceback, and the store's refs, index and work tree
exactly as they were. Then a hypothesis fuzz drives every tool in the registry with arbitrary
JSON values and with schema-shaped inputs full of hostile strings, numbers and nesting.

Examples: ``TRUSS_FUZZ_EXAMPLES=N`` sets the fuzz's examples per tool and strategy (default
100, 300 with ``TRUSS_SLOW=1``: thousands in all, in-process); the process fuzz runs a
tenth of that (at least 10).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import console
from tests.support.gated import search
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.model import check_key
from truss_files.recall.bounds import MAX_QUERY_CHARS, MAX_QUERY_TERMS, query_terms
from truss_files.recall.pipeline import Filter
from truss_files.tools import RunContext, ToolSession
from truss_files.tools.registry import all_tools
from truss_files.tools.schema import MAX_DEPTH, check_json

# A bounded sample by default; the long run (``TRUSS_SLOW=1``) tries three times as many.
FUZZ_EXAMPLES = int(
    os.environ.get("TRUSS_FUZZ_EXAMPLES", "300" if os.environ.get("TRUSS_SLOW") == "1" else "100")
)
settings.register_profile(
    "tool-fuzz",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
FUZZ = settings.get_profile("tool-fuzz")
PROCESS_FUZZ = settings(FUZZ, max_examples=max(10, FUZZ_EXAMPLES // 10))

SCRIPT = Path(sys.executable).with_name("truss-files")
FLAGS = ("memory", "memory_write")
# What a refusal may say: the library's user errors and the memory tool's SDK-worded ones.
# Never "bug", "store" or "invalid_entry": those mean the input reached something it broke.
KNOWN_CODES = frozenset(
    {
        "invalid_input",
        "not_found",
        "unknown_tool",
        "tool_not_served",
        "invalid_path",
        "forbidden_path",
        "not_a_file",
        "no_match",
        "ambiguous",
        "invalid_line",
        "already_exists",
        "no_run_context",
    }
)


# -- the store and its state -------------------------------------------------------------


@pytest.fixture
def seeded(store: MemoryStore) -> MemoryStore:
    """A store with a verified and an unverified entry, so reads have something to find."""
    entry = store.write("fact", "db", "The database is postgres.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))
    store.write("lesson", "ci", "Retry a flaky check once.")
    return store


def refs(store: MemoryStore) -> dict[str, str]:
    """Every ref and what it points at: the branch, the run ledgers, anything."""
    repo = store.git.repo
    return {name: str(repo.references[name].resolve().target) for name in repo.references}


def git_state(store: MemoryStore) -> tuple[dict[str, str], str]:
    """Refs plus `git status` (index and work tree against HEAD), for the process tests."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=store.git.workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return refs(store), status


def run_tool(store: MemoryStore, args: list[str], stdin: bytes) -> tuple[int, Any, str]:
    """``truss-files --store S tool ARGS`` as a process: exit code, the one object, stderr."""
    done = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), "tool", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "TRUSS_KEY": str(Path(store.git.workdir).parent / "operator_key")},
    )
    stderr = done.stderr.decode("utf-8", "replace")
    return done.returncode, one_object(done.stdout), stderr


def one_object(stdout: bytes) -> dict[str, Any]:
    """Exactly one JSON object, as UTF-8, on one line: what a harness reads."""
    text = stdout.decode("utf-8")  # raises on anything that is not UTF-8
    assert text.endswith("\n") and text.count("\n") == 1, stdout[:500]
    value = json.loads(text)
    assert isinstance(value, dict), text[:500]
    return value


def assert_refused(value: Mapping[str, Any], code: str = "invalid_input") -> str:
    assert set(value) == {"error"}, value
    assert set(value["error"]) == {"code", "message"}, value
    assert value["error"]["code"] == code, value
    message = value["error"]["message"]
    assert isinstance(message, str) and message
    return message


# -- each attack through the installed console script --------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000
HUGE_INT = b'{"query": "x", "limit": ' + b"9" * 5000 + b"}"

PROCESS_ATTACKS = [
    # (id, tool arguments, stdin bytes, exit code, what the message must say)
    ("surrogate-id", ["memory_view"], b'{"id": "\\ud800"}', 1, "surrogate"),
    (
        "surrogate-key",
        ["write_memory"],
        b'{"kind": "fact", "key": "\\ud800", "body": "x"}',
        1,
        "surrogate",
    ),
    ("surrogate-field-name", ["memory_query"], b'{"\\udfff": 1}', 1, "not valid text"),
    ("nested-5000", ["memory_query"], DEEP, 2, "nested"),
    ("nested-5000-in-object", ["memory_query"], b'{"query": ' + DEEP + b"}", 2, "nested"),
    ("nested-40", ["memory_query"], b'{"query": ' + b"[" * 40 + b"]" * 40 + b"}", 1, "nested"),
    ("digits-5000", ["memory_query"], HUGE_INT, 2, "5,000 digits"),
    ("int-2-64", ["memory_query"], b'{"query": "x", "limit": 18446744073709551616}', 1, "integers"),
    ("infinity", ["memory_query"], b'{"query": "x", "limit": 1e400}', 1, "finite"),
    ("nan", ["memory_query"], b'{"query": NaN}', 2, "NaN"),
    ("latin-1", ["memory_query"], b'{"query": "caf\xe9"}', 2, "not UTF-8"),
    ("lone-utf8-continuation", ["memory_query"], b'{"query": "\x80"}', 2, "not UTF-8"),
    ("encoded-surrogate", ["memory_query"], b'{"query": "\xed\xa0\x80"}', 2, "not UTF-8"),
    ("not-json", ["memory_query"], b"{not json", 2, "not JSON"),
    ("not-an-object", ["memory_query"], b"[1, 2]", 2, "JSON object"),
    ("option-minus-1", ["-1"], b"{}", 2, "-1"),
    ("unknown-option", ["memory_query", "--frobnicate"], b"{}", 2, "frobnicate"),
    ("extra-argument", ["memory_query", "more"], b"{}", 2, "more"),
    (
        "block-surrogate-id",
        ["--block"],
        b'{"type": "tool_use", "id": "\\ud800", "name": "memory_query", "input": {}}',
        2,
        "surrogate",
    ),
    (
        "bidi-key",
        ["write_memory"],
        b'{"kind": "fact", "key": "a\\u202eb", "body": "x"}',
        1,
        "U+202E",
    ),
    (
        "dot-leader-path",
        ["memory"],
        b'{"command": "create", "path": "/memories/\\u2025/identity/core.md", "file_text": "x"}',
        1,
        "U+2025",
    ),
    ("query-1mb", ["memory_query"], json.dumps({"query": "word " * 200_000}).encode(), 1, "limit"),
]


@pytest.mark.parametrize(
    ("args", "stdin", "exit_code", "says"),
    [pytest.param(*case[1:], id=case[0]) for case in PROCESS_ATTACKS],
)
def test_attack_through_the_console_script(
    seeded: MemoryStore, args: list[str], stdin: bytes, exit_code: int, says: str
) -> None:
    before = git_state(seeded)
    code, value, stderr = run_tool(seeded, [*args, "--memory-tools", "--memory-write"], stdin)
    expected = "invalid_path" if args == ["memory"] else "invalid_input"
    message = assert_refused(value, expected)
    assert says in message
    assert code == exit_code, (code, value, stderr)
    assert "Traceback" not in stderr
    assert git_state(seeded) == before


def test_non_utf8_tool_name_is_one_object(seeded: MemoryStore) -> None:
    """argv bytes that are not UTF-8 reach Python as surrogates: still one JSON object."""
    done = subprocess.run(
        [os.fsencode(str(SCRIPT)), b"--store", os.fsencode(str(seeded.git.workdir)), b"tool"]
        + [b"memory_\xff"],
        input=b"{}",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert_refused(one_object(done.stdout), "unknown_tool")


def test_stdin_over_the_size_bound(seeded: MemoryStore) -> None:
    from truss_files.faces.cli.tools import MAX_STDIN

    filler = b" " * (MAX_STDIN + 10)
    code, value, _ = run_tool(seeded, ["memory_query", "--memory-tools"], b"{}" + filler)
    assert code == 2 and "bytes" in assert_refused(value)


def test_ordinary_call_still_answers(seeded: MemoryStore) -> None:
    """The control: the same faces still answer a good call (so the refusals above mean it)."""
    code, value, _ = run_tool(seeded, ["memory_query", "--memory-tools"], b'{"query": "postgres"}')
    assert code == 0 and [e["key"] for e in value["entries"]] == ["db"]
    code, value, _ = run_tool(
        seeded, ["memory_query", "--memory-tools"], '{"query": "caf\u00e9 postgres"}'.encode()
    )
    assert code == 0 and [e["key"] for e in value["entries"]] == ["db"]


# -- the same attacks through the library's dispatcher ------------------------------------


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


LIBRARY_ATTACKS = [
    ("memory_view", {"id": "\ud800"}, "surrogate"),
    ("memory_view", {"ids": ["abc", "\udc80"]}, "ids[1]"),
    ("write_memory", {"kind": "fact", "key": "\ud800", "body": "x"}, "surrogate"),
    ("write_memory", {"kind": "fact", "key": "k", "body": "tail \udfff"}, "surrogate"),
    ("memory_query", {"query": nested(5000)}, "nested"),
    ("memory_query", {"query": nested(100_000)}, "nested"),
    ("memory_query", {"query": "x", "limit": 10**5000}, "digits"),
    ("memory_query", {"query": "x", "limit": float("nan")}, "finite"),
    ("memory_query", {"query": "x", "limit": float("-inf")}, "finite"),
    ("memory_query", {"query": {"a": set()}}, "not a JSON value"),
    ("memory_query", {"query": b"bytes"}, "not a JSON value"),
    ("memory_query", {1: "x"}, "field name"),
    ("memory_query", {"query": "word " * 200_000}, "limit"),
    ("memory_query", {"query": " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1))}, "distinct"),
    ("read_memory", {"query": "x" * (MAX_QUERY_CHARS + 1)}, "characters"),
    ("memory", {"command": "view", "path": "/memories/\u2025"}, "U+2025"),
    ("memory", {"command": "create", "path": "/memories/a\u202e.md", "file_text": "x"}, "U+202E"),
    (
        "memory",
        {"command": "create", "path": "/memories/\uff0e\uff0e/x.md", "file_text": "x"},
        "U+FF0E",
    ),
    ("write_memory", {"kind": "fact", "key": "core\u2024md", "body": "x"}, "U+2024"),
    ("write_memory", {"kind": "fact", "key": "\u2066x\u2069", "body": "x"}, "U+2066"),
]


@pytest.mark.parametrize(("name", "tool_input", "says"), LIBRARY_ATTACKS)
def test_attack_through_the_dispatcher(
    seeded: MemoryStore, name: str, tool_input: Any, says: str
) -> None:
    before = refs(seeded)
    outcome = ToolSession(seeded, flags=FLAGS, run_id="R-attack").call(name, tool_input)
    assert not outcome.ok
    expected = "invalid_path" if name == "memory" else "invalid_input"
    assert says in assert_refused(outcome.payload, expected)
    json.dumps(outcome.payload, ensure_ascii=False).encode("utf-8")  # printable as UTF-8
    assert refs(seeded) == before


def test_attacks_on_a_durable_run_record_nothing(seeded: MemoryStore) -> None:
    """A durable run hashes its input for the memo key: hostile input stops before that."""
    session = ToolSession(seeded, flags=FLAGS, run_id="R-durable", durable=True)
    before = refs(seeded)
    for name, tool_input, _says in LIBRARY_ATTACKS[:8]:
        assert not session.call(name, tool_input).ok
    assert refs(seeded) == before
    assert session.call("memory_query", {"query": "postgres"}).ok  # the control


def test_attacks_through_mcp(seeded: MemoryStore) -> None:
    """The MCP face shares the dispatcher: the same inputs are tool errors, not crashes."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client
    from mcp.types import CallToolRequestParams

    from truss_files.faces.mcp import build_server

    session = ToolSession(seeded, flags=FLAGS, run_id="R-mcp")
    before = refs(seeded)

    async def main() -> None:
        async with Client(build_server(session)) as client:
            for name, tool_input, says in LIBRARY_ATTACKS:
                if not isinstance(tool_input, dict) or not all(
                    isinstance(k, str) for k in tool_input
                ):
                    continue
                try:
                    json.dumps(tool_input, allow_nan=False)
                    # The client's own request model: it refuses to send what nests past its
                    # serialization depth (a few hundred), whatever json.dumps managed.
                    CallToolRequestParams(name=name, arguments=tool_input).model_dump(mode="json")
                except (TypeError, ValueError, RecursionError):
                    continue  # not something a JSON-RPC client can send
                done = await client.call_tool(name, tool_input)
                assert done.is_error, (name, says)
                text = done.content[0].text  # type: ignore[union-attr]
                assert says in text, text
            good = await client.call_tool("memory_query", {"query": "postgres"})
            assert not good.is_error

    anyio.run(main)
    assert refs(seeded) == before


def test_bad_tool_names_are_refused(seeded: MemoryStore) -> None:
    session = ToolSession(seeded, flags=FLAGS)
    for name in ("\ud800", "x" * 10_000, None, 7, "memory\u202e"):
        outcome = session.call(name, {})  # type: ignore[arg-type]
        assert not outcome.ok and outcome.error is not None
        assert outcome.error["code"] in {"invalid_input", "unknown_tool"}
        json.dumps(outcome.payload, ensure_ascii=False).encode("utf-8")


def test_depth_bound_is_exact() -> None:
    check_json({"a": nested(MAX_DEPTH - 1)})
    with pytest.raises(UsageError, match="nested"):
        check_json({"a": nested(MAX_DEPTH)})


# -- query bounds: the CLI, the tools and the Python API refuse alike ---------------------


def test_query_bounds_in_the_python_api(seeded: MemoryStore) -> None:
    path = str(seeded.git.workdir)
    too_long = "postgres " * 200
    too_many = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1))
    for text, says in ((too_long, "characters"), (too_many, "distinct words")):
        with pytest.raises(UsageError, match=says):
            search(path, text, Filter())
        with pytest.raises(UsageError, match=says):
            query_terms(text)
    # At the bounds: accepted.
    at_bound = " ".join(["postgres"] + [f"w{i}" for i in range(MAX_QUERY_TERMS - 1)])
    assert [h.entry.key for h in search(path, at_bound).hits] == ["db"]


def test_a_repeated_term_is_scored_once(seeded: MemoryStore) -> None:
    path = str(seeded.git.workdir)
    once = search(path, "postgres database").hits
    many = search(path, "postgres " * 100 + "database").hits
    assert [(h.entry.id, h.score) for h in many] == [(h.entry.id, h.score) for h in once]


def test_query_bound_through_the_cli_query(seeded: MemoryStore) -> None:
    done = console.run(
        [str(SCRIPT), "--store", str(seeded.git.workdir), "query", "--format", "json"]
        + ["word " * 20_000],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "1,000" in assert_refused(one_object(done.stdout))


# -- keys: look-alikes refused where keys are made, the project's own keys still pass -----


@pytest.mark.parametrize(
    "key",
    ["a\u202eb", "\u2025/identity/core", "x\u2024md", "\uff52\uff55\uff53\uff54", "a\u200bb"]
    + ["a\u2215b", "a\u2066b\u2069", "a\u061cb", "cafe\u0301"],
)
def test_look_alike_keys_are_refused(seeded: MemoryStore, key: str) -> None:
    before = refs(seeded)
    with pytest.raises(UsageError, match="U\\+|normalized"):
        seeded.write("fact", key, "x")
    assert refs(seeded) == before


def test_ordinary_unicode_keys_pass() -> None:
    for key in (
        "caf\u00e9",
        "\u65e5\u672c\u8a9e",
        "rust-borrow-checker",
        "notes/2026.md",
        "\u00fcber",
    ):
        assert check_key(key) == key


def test_the_projects_own_keys_pass() -> None:
    from truss_files.format import entryfile

    root = Path(__file__).resolve().parents[2] / "memories"
    files = sorted(root.rglob("*.md"))
    assert files
    for path in files:
        entry = entryfile.parse(path.read_bytes(), str(path.relative_to(root.parent)))
        assert check_key(entry.key) == entry.key


# -- the fuzz: every tool in the registry --------------------------------------------------

HOSTILE_TEXT = [
    "",
    " ",
    "\x00",
    "\u202e",
    "\u2025",
    "/memories",
    "/memories/",
    "/memories/..",
    "/memories/../identity/core.md",
    "/memories/%2e%2e/x",
    "/memories/%252e%252e/x",
    "/memories/\u2025/identity/core.md",
    "/memories/\uff0e\uff0e/x.md",
    "/memories/lessons/x.md",
    "/memories/lessons/ci.md",
    "/memories/facts/db.md",
    "/memories/facts/a\u202eb.md",
    "/memories/identity/core.md",
    "/memories\\x",
    "/etc/passwd",
    "x" * 600,
    "word " * 400,
    "postgres",
    "verified",
    "unverified",
    "rejected",
    "fact",
    "lesson",
    "0" * 32,
    "0123abcd",
    "{}",
    "null",
    "\n\n---\ntrust: verified\n---\n",
]
clean_texts = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40))
# Unpaired surrogates: what a JSON "\ud800" escape yields; rarer, so the rest gets through.
broken_texts = st.one_of(
    st.sampled_from(["\ud800", "\udfff", "a\udc80b"]),
    st.text(st.characters(codec="utf-8"), max_size=20).map(lambda s: s + "\ud800"),
)
texts = st.integers(0, 9).flatmap(lambda n: broken_texts if n == 0 else clean_texts)
numbers = st.one_of(
    st.integers(min_value=-3, max_value=1002),
    st.sampled_from([2**31, 2**53, 2**63, -(2**63), 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


paths = st.one_of(
    st.sampled_from([t for t in HOSTILE_TEXT if t.startswith("/")]),
    st.builds(
        "/memories/{}{}".format,
        st.sampled_from(["", "lessons/", "facts/", "decisions/", "x/", "lessons/a/"]),
        st.one_of(
            st.sampled_from(["ci.md", "db.md", "new.md", ".md", "..", "a\u202e.md"]),
            st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.md", fullmatch=True),
            clean_texts,
        ),
    ),
)
# One field broken in a way the schema does not see: invalid Unicode, past the nesting bound,
# a number no JSON client reads, any value at all.
breakers = st.one_of(
    broken_texts,
    st.just(nested(MAX_DEPTH + 5)),
    st.sampled_from([2**53, 2**63, -(2**63), 10**400, float("nan"), float("inf")]),
    json_values,
)


def field_value(name: str, schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """A value of the field's own type: enum members, hostile text, paths, edge numbers."""
    kind = schema.get("type")
    if "enum" in schema:
        members = st.sampled_from(list(schema["enum"]))
        return st.one_of(members, members, members, clean_texts)
    if kind == "string" and "path" in name:
        return paths
    if kind == "string" and name in ("id", "ids"):
        return st.one_of(st.text("0123456789abcdef", min_size=6, max_size=32), clean_texts)
    if kind == "string":
        return clean_texts
    if kind == "integer":
        return st.one_of(st.integers(min_value=-3, max_value=1002), st.integers())
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(field_value(name, schema.get("items", {})), max_size=4)
    if kind == "object" and "properties" in schema:  # memory.train's source and supersedes
        return st.one_of(schema_shaped(schema), json_values)
    return json_values


MEMORY_FIELDS = {
    "view": {"path"},
    "create": {"path", "file_text"},
    "str_replace": {"path", "old_str", "new_str"},
    "insert": {"path", "insert_line", "insert_text"},
    "delete": {"path"},
    "rename": {"old_path", "new_path"},
}


@st.composite
def schema_shaped(draw: st.DrawFn, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Fields of the right types, usually the required ones among them; then, half the
    time, one field broken or one unknown field added."""
    props: Mapping[str, Any] = schema.get("properties", {})
    wanted = set(schema.get("required", ()))
    out: dict[str, Any] = {}
    command = props.get("command", {}).get("enum")
    if command:  # the memory tool: the fields of one command, as a model would send them
        out["command"] = draw(st.sampled_from(command))
        wanted |= MEMORY_FIELDS.get(out["command"], set())
    for name, sub in props.items():
        if name not in out and draw(st.integers(0, 9)) < (9 if name in wanted else 3):
            out[name] = draw(field_value(name, sub))
    mode = draw(st.integers(0, 3))
    if mode == 1 and props:
        out[draw(st.sampled_from(sorted(props)))] = draw(breakers)
    elif mode == 2:
        out[draw(clean_texts)] = draw(json_values)
    return out


TOOLS = [tool.name for tool in all_tools()]
SCHEMAS = {tool.name: tool.input_schema for tool in all_tools()}


@pytest.fixture
def fuzz_session(seeded: MemoryStore) -> Iterator[ToolSession]:
    # A run context, so that memory.ask and memory.train run their rules, not just refuse.
    context = RunContext.from_dict(
        {
            "taskId": "T-fuzz",
            "teamId": "t",
            "enterpriseId": "e",
            "memberId": "m",
            "grants": [{"layer": "team", "eventPrefix": "ci:"}],
        }
    )
    yield ToolSession(seeded, flags=FLAGS, run_id="R-fuzz", context=context)


def check_outcome(store: MemoryStore, session: ToolSession, name: str, tool_input: Any) -> None:
    before = refs(store)
    outcome = session.call(name, tool_input)  # an exception here fails the test
    payload = outcome.payload
    assert isinstance(payload, dict)
    json.dumps(payload, ensure_ascii=False).encode("utf-8")
    if not outcome.ok:
        assert outcome.error is not None
        assert outcome.error["code"] in KNOWN_CODES, outcome.error
        assert isinstance(outcome.error["message"], str) and outcome.error["message"]
        assert refs(store) == before, f"{name} refused {tool_input!r} but the store moved"


@pytest.mark.heavy  # hypothesis run inside the test: many generated inputs
@pytest.mark.parametrize("name", TOOLS)
def test_fuzz_arbitrary_json(seeded: MemoryStore, fuzz_session: ToolSession, name: str) -> None:
    @FUZZ
    @given(json_values)
    def attack(tool_input: Any) -> None:
        check_outcome(seeded, fuzz_session, name, tool_input)

    attack()


@pytest.mark.heavy  # hypothesis run inside the test: many generated inputs
@pytest.mark.parametrize("name", TOOLS)
def test_fuzz_schema_shaped(seeded: MemoryStore, fuzz_session: ToolSession, name: str) -> None:
    @FUZZ
    @given(schema_shaped(SCHEMAS[name]))
    def attack(tool_input: dict[str, Any]) -> None:
        check_outcome(seeded, fuzz_session, name, tool_input)

    attack()


def test_fuzz_through_the_console_script(seeded: MemoryStore) -> None:
    """A sample of the fuzz as real processes: raw stdin bytes (sometimes not UTF-8)."""
    encoded = st.one_of(
        st.tuples(st.sampled_from(TOOLS), json_values).map(
            lambda p: (p[0], json.dumps(p[1]).encode())
        ),
        st.tuples(st.sampled_from(TOOLS), st.binary(max_size=60)),
    )

    @PROCESS_FUZZ
    @given(encoded)
    def attack(case: tuple[str, bytes]) -> None:
        name, stdin = case
        before = refs(seeded)
        code, value, stderr = run_tool(seeded, [name, "--memory-tools", "--memory-write"], stdin)
        assert "Traceback" not in stderr, stderr
        if code == 0:
            assert "error" not in value
            return
        assert code in (1, 2), (code, value, stderr)
        assert value["error"]["code"] in KNOWN_CODES, value
        assert refs(seeded) == before

    attack()
