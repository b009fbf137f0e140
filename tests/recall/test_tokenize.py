from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from truss_files.recall.tokenize import STOPWORDS, tokenize

# The package re-exports the function under the module's name, so fetch the module itself.
tokenize_module = importlib.import_module("truss_files.recall.tokenize")


def stems(words: list[str]) -> list[str]:
    """Expected tokens are written as words; the suffix stripper is tested on its own below."""
    return [tokenize_module._stem(w) for w in words]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("snake_case", ["snake", "case", "snakecase"]),
        ("BorrowChecker", ["borrow", "checker", "borrowchecker"]),
        ("CamelCase", ["camel", "case", "camelcase"]),
        ("HTTPServer", ["http", "server", "httpserver"]),
        ("parseJSON", ["parse", "json", "parsejson"]),
        ("store.rs", ["store", "rs"]),
        ("--flag", ["flag"]),
        ("--dry-run", ["dry", "run", "dryrun"]),
        ("v2", ["v2"]),
        ("2026", ["2026"]),
        ("release v2 in 2026", ["release", "v2", "2026"]),
        ("HTTP2Server", ["http2", "server", "http2server"]),
        ("base64Encode", ["base64", "encode", "base64encode"]),
        ("APIs", ["api"]),
        ("CPUs and PRs", ["cpu", "pr"]),
        ("2026-01-15", ["2026", "01", "15"]),
        ("max_retries", ["max", "retry", "maxretry"]),
        ("PgBouncer", ["pg", "bouncer", "pgbouncer"]),
        ("don't", ["dont"]),
    ],
)
def test_identifiers_and_words(text: str, expected: list[str]) -> None:
    assert tokenize(text) == stems(expected)


def test_identifier_spellings_meet() -> None:
    # borrow checker <-> BorrowChecker, both directions, through the parts.
    camel = set(tokenize("BorrowChecker"))
    plain = set(tokenize("borrow checker"))
    assert plain <= camel
    # Every spelling of an identifier yields the same compound.
    spellings = ["MaxRetries", "max_retries", "maxRetries", "max-retries", "maxretries"]
    compounds = [tokenize(s)[-1] for s in spellings]
    assert len(set(compounds)) == 1
    # The lowercase spelling of a CamelCase name matches through the compound.
    assert tokenize("pgbouncer")[0] in tokenize("PgBouncer")


def test_unicode() -> None:
    assert tokenize("Café résumé") == stems(["café", "résumé"])
    assert tokenize("Straße") == stems(["strasse"])  # casefold, not lower
    assert tokenize("Straße") == tokenize("STRASSE") == tokenize("strasse")
    assert tokenize("ＨＴＴＰ２ ｓｅｒｖｅｒ") == ["http2", "server"]  # full-width forms via NFKC
    assert tokenize("ﬁle") == stems(["file"])  # ligature via NFKC
    assert tokenize("ÉcoleNormale") == stems(["école", "normale", "écolenormale"])
    assert tokenize("Ελληνικά κείμενα") == ["ελληνικά", "κείμενα"]
    assert tokenize("ΣΊΣΥΦΟΣ") == tokenize("σίσυφος")
    assert tokenize("ÉCUs") == ["écu"]  # all-caps plural outside ASCII
    assert tokenize("ΑλφαΒήτα") == stems(["αλφα", "βήτα", "αλφαβήτα"])


def test_cjk_characters_are_tokens() -> None:
    assert tokenize("借用检查器") == ["借", "用", "检", "查", "器"]
    assert tokenize("Rustの借用") == ["rust", "の", "借", "用"]
    # Katakana runs stay words.
    assert tokenize("チェッカー") == ["チェッカー"]
    assert tokenize("東京 tokyo") == ["東", "京", "tokyo"]


def test_stopwords_dropped() -> None:
    assert tokenize("The cat and the hat is on a mat") == ["cat", "hat", "mat"]
    assert tokenize("the of to in is and or for on with") == []
    # A stopword inside an identifier is dropped as a part, but the compound keeps it.
    assert tokenize("is_valid") == ["valid", "isvalid"]
    assert all(tokenize(w) == [] for w in STOPWORDS)


def test_empty_and_separator_only() -> None:
    assert tokenize("") == []
    assert tokenize("   \n\t") == []
    assert tokenize("--- ___ ... !!!") == []
    assert tokenize("_") == []


def test_stem_rules() -> None:
    # Snowball English (Porter2): the inflections a hand-written stripper left apart now meet.
    stem = tokenize_module._stem
    meet = [
        ["retry", "retries", "retried", "retrying"],
        ["policy", "policies"],
        ["cache", "caches", "cached", "caching"],
        ["silence", "silenced", "silences", "silencing"],
        ["rotate", "rotated", "rotation", "rotating"],
        ["deploy", "deployed", "deploying", "deployment"],
        ["throttle", "throttled", "throttling"],
    ]
    for group in meet:
        assert len({stem(w) for w in group}) == 1, group
    # Different words stay apart.
    assert stem("string") != stem("stre")
    assert stem("status") != stem("stat")
    assert stem("news") != stem("new")


def test_stem_leaves_identifiers_and_other_scripts_alone() -> None:
    stem = tokenize_module._stem
    for token in ["k8s", "v2", "http2", "base64", "ab", "écoles", "λόγοι"]:
        assert stem(token) == token


def test_stemmer_is_snowball_english() -> None:
    import Stemmer

    snowball = Stemmer.Stemmer("english")
    words = ["generalizations", "connected", "hopefulness", "running", "agreed", "ponies"]
    assert [tokenize_module._stem(w) for w in words] == snowball.stemWords(words)


def test_tokenizer_version_marks_the_snowball_analyzer() -> None:
    # Caches built by the old suffix stripper carry version 1 and must be rebuilt.
    assert tokenize_module.TOKENIZER_VERSION >= 2


def test_stemming() -> None:
    same = [
        ("cache caches cached caching", 1),
        ("test tests tested testing", 1),
        ("retry retries retried retrying", 1),
        ("branch branches", 1),
        ("class classes", 1),
        ("policy policies", 1),
        ("deploy deployed deploys", 1),
        ("stop stopped stopping", 1),
        ("log logs logging logged", 1),
    ]
    for text, distinct in same:
        assert len(set(tokenize(text))) == distinct, (text, tokenize(text))
    # Not plurals: each keeps a stem of its own.
    assert len(set(tokenize("status analysis redis bus string"))) == 5


def test_deterministic_and_cache_independent() -> None:
    text = "The BorrowChecker rejected HTTPServer's max_retries in store.rs, 借用 Straße"
    first = tokenize(text)
    tokenize_module._CACHE.clear()
    assert tokenize(text) == first
    assert tokenize(text) == first


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenize_module, "_CACHE_MAX", 10)
    tokenize_module._CACHE.clear()
    tokenize(" ".join(f"word{i}" for i in range(100)))
    assert len(tokenize_module._CACHE) <= 10
    tokenize_module._CACHE.clear()


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_never_raises_and_tokens_are_clean(text: str) -> None:
    tokens = tokenize(text)
    assert isinstance(tokens, list)
    for tok in tokens:
        assert isinstance(tok, str)
        assert tok
        assert tok == tok.casefold()
        assert not any(c.isspace() for c in tok)
        assert tok not in STOPWORDS


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet="abcXYZ09_-. 'é借ß", min_size=0, max_size=12),
        min_size=0,
        max_size=6,
    )
)
def test_identifier_like_text(words: list[str]) -> None:
    text = " ".join(words)
    tokens = tokenize(text)
    assert all(tok and tok == tok.casefold() for tok in tokens)
    # Tokenizing word by word gives the same multiset as the whole text (words are independent).
    assert sorted(tokens) == sorted(t for w in words for t in tokenize(w))
