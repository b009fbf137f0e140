"""format/secrets.py: which values are credentials, where they are, and how they are masked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.credentials import CREDENTIALS, KIND, LOOKALIKES, PLUGIN_SHAPES
from truss_files.errors import ConfigError, SecretFound
from truss_files.format import secrets
from truss_files.format.secrets import Allow, find, mask, refuse, scan_fields, where

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT.parent.parent / "shared" / "data" / "locomo-dev.json"


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_each_shape_is_found_with_its_kind_and_exact_place(name: str) -> None:
    value = CREDENTIALS[name]
    text = f"Deploy notes.\nThe value is {value} -- keep it safe."
    [hit] = find(text)
    assert hit.kind == KIND[name]
    assert value.startswith(text[hit.start : hit.end]) or text[hit.start : hit.end] in value
    # The hit covers the value's secret part, and nothing of the prose around it.
    assert text[hit.start - 1] in " :" and hit.start >= text.index(value)
    assert hit.end <= text.index(value) + len(value)


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_masking_leaves_no_part_of_the_secret_a_model_could_use(name: str) -> None:
    value = CREDENTIALS[name]
    masked, kinds = mask(f"before {value} after")
    assert kinds == (KIND[name],)
    assert f"[secret:{KIND[name]}]" in masked
    assert masked.startswith("before ") and masked.endswith(" after")
    # No run of 12 characters of the value survives (the scheme's prefix and a PEM's END
    # line are not the secret).
    secret_part = value.replace("-----END OPENSSH PRIVATE KEY-----", "")
    for i in range(len(secret_part) - 12):
        chunk = secret_part[i : i + 12]
        if chunk.isalnum() and not chunk.isalpha():
            assert chunk not in masked, (name, chunk)


@pytest.mark.parametrize("name", sorted(PLUGIN_SHAPES))
def test_the_plugin_shapes_are_found_and_masked(name: str) -> None:
    """detect-secrets' own shapes, most a value assigned to a name: each found with its kind
    in prose (its prefilter lets none of them by), and masked."""
    kind, value = PLUGIN_SHAPES[name]
    text = f"Ops notes.\n{value}\nRotate monthly."
    assert [h.kind for h in find(text)] == [kind]
    masked, kinds = mask(text)
    assert kinds == (kind,) and f"[secret:{kind}]" in masked
    assert masked.startswith("Ops notes.") and masked.endswith("Rotate monthly.")


_PIECES = [
    *CREDENTIALS.values(),
    *(text for _, text in PLUGIN_SHAPES.values()),
    *LOOKALIKES.values(),
    "https://example.com/a?b=c",
    "agent:ops@example.test",
    "caf\u00e9 \U0001f600 na\u00efve",
]
_WORDS = [
    "the",
    "deploy",
    "token",
    "was",
    "rotated",
    "after",
    "we",
    "saw",
    "it",
    "in",
    "the",
    "log",
    "on",
    "friday",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(_WORDS), st.sampled_from(_PIECES)), max_size=40),
    st.lists(st.sampled_from([" ", "\n", "\t", " = ", ": ", '"', "'", "", "  ", "\u00a0"])),
    st.integers(0, 400),
)
def test_the_prefilter_never_loses_what_every_detector_finds(
    pieces: list[str], seps: list[str], pad: int
) -> None:
    """``find`` runs the detectors only in windows around the places a credential can be;
    over the whole text (``_find``) they must find exactly the same, wherever a value sits
    (glued to its neighbours, far into a long text, beside text other than ASCII)."""
    seps = seps or [" "]
    text = "x " * pad + "".join(p + seps[n % len(seps)] for n, p in enumerate(pieces))
    assert find(text) == secrets._find(text, Allow())


@pytest.mark.parametrize("name", sorted(LOOKALIKES))
def test_lookalikes_are_ordinary_text(name: str) -> None:
    assert find(LOOKALIKES[name]) == []
    assert mask(LOOKALIKES[name]) == (LOOKALIKES[name], ())


def test_two_secrets_in_one_text_are_two_hits_in_order() -> None:
    a, b = CREDENTIALS["github-token"], CREDENTIALS["anthropic-key"]
    hits = find(f"{b}\nand\n{a}")
    assert [h.kind for h in hits] == ["anthropic-key", "github-token"]
    assert mask(f"{b} {a}")[0] == "[secret:anthropic-key] [secret:github-token]"


def test_where_names_line_and_column() -> None:
    text = "one\ntwo three\n" + CREDENTIALS["github-token"]
    [hit] = find(text)
    assert where(text, hit.start) == "line 3, column 1"
    assert where("abc", 1) == "line 1, column 2"


def test_the_refusal_names_field_place_and_kind_never_the_value() -> None:
    value = CREDENTIALS["aws-access-key-id"]
    places = list(scan_fields([("key", "deploy"), ("body", f"use\n  {value}")]))
    assert places == ["field 'body', line 2, column 3: aws-access-key-id"]
    with pytest.raises(SecretFound) as caught:
        refuse(places)
    assert caught.value.code == "secret"
    assert value not in caught.value.message and value[4:] not in caught.value.message
    assert "field 'body', line 2, column 3: aws-access-key-id" in caught.value.message
    assert "[secrets] allow" in caught.value.message
    refuse([])  # nothing found: nothing raised


def test_allow_takes_exact_values_and_whole_value_patterns() -> None:
    value = CREDENTIALS["aws-access-key-id"]
    other = CREDENTIALS["github-token"]
    text = f"{value} {other}"
    assert [h.kind for h in find(text, Allow((value,)))] == ["github-token"]
    assert [h.kind for h in find(text, Allow(("AKIA[A-Z0-9]{16}",)))] == ["github-token"]
    # A pattern allows only values it matches whole: a prefix is not enough.
    assert len(find(text, Allow(("AKIA",)))) == 2
    # A string that is no regular expression still allows itself exactly.
    assert find("x", Allow(("(",))) == []


def test_allow_reads_the_top_level_table_and_refuses_a_malformed_one() -> None:
    assert Allow.from_config({}) == Allow()
    assert Allow.from_config({"secrets": {"allow": ["a", "b"]}}).values == ("a", "b")
    for bad in ("AKIA", [1], [""], {"x": 1}):
        with pytest.raises(ConfigError, match="secrets.allow"):
            Allow.from_config({"secrets": {"allow": bad}})


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_no_refusal_over_the_locomo_conversations() -> None:
    """Precision on what agents really write: every string of the LoCoMo dev set (read in
    place from the shared data folder; never copied into the repository)."""
    if not LOCOMO.is_file():
        pytest.skip(f"{LOCOMO} is not on this machine (the shared LoCoMo dev set)")
    texts = list(_strings(json.loads(LOCOMO.read_text(encoding="utf-8"))))
    assert len(texts) > 1000
    found = [(t[:60], h.kind) for t in texts for h in find(t)]
    assert found == []


def test_no_refusal_over_the_bundled_memories_and_fixtures() -> None:
    roots = [ROOT / "memories", ROOT / "tests" / "assets", ROOT / "identity", ROOT / "examples"]
    files = [p for root in roots if root.is_dir() for p in sorted(root.rglob("*")) if p.is_file()]
    assert len(files) > 20
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [(str(path.relative_to(ROOT)), h.kind) for h in find(text)]
    assert found == []


def test_a_read_never_imports_the_detector() -> None:
    """detect-secrets (and requests under it) load on a write only: the query path and the
    CLI's start stay as fast as they were."""
    code = (
        "import sys, truss_files.format.secrets, truss_files.tools.query, truss_files.faces.cli;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('detect_secrets','requests')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_private_text_is_dropped_whole_and_an_unclosed_tag_hides_the_rest() -> None:
    from truss_files.format.secrets import without_private

    text = "Keep this. <private>my salary is 10k</private> Keep that. <PRIVATE>x</Private>!"
    assert without_private(text) == "Keep this.  Keep that. !"
    assert without_private("a <private>never closed\nmore") == "a "
    assert without_private("no tags here") == "no tags here"
