"""Bearer tokens: hashes only on disk, constant-time lookup, scopes and expiry."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from truss_files.errors import AccessError, ConfigError, ScopeError, UsageError
from truss_files.server.tokens import TokenFile, describe, load, new_token, parse_expiry

NOW = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


def test_a_token_is_checked_by_hash_scope_and_expiry(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    reader, _ = new_token(file, ["tasks:read"], name="reader")
    short, record = new_token(
        file, ["tasks:write"], name="short", expires=NOW + datetime.timedelta(hours=1)
    )
    assert record.expires == NOW + datetime.timedelta(hours=1)
    tokens = load(file)
    assert tokens.check(reader, "tasks:read", NOW).name == "reader"
    with pytest.raises(ScopeError, match="lacks the scope tasks:write"):
        tokens.check(reader, "tasks:write", NOW)
    assert tokens.check(short, "tasks:write", NOW).name == "short"
    with pytest.raises(AccessError, match="has expired"):
        tokens.check(short, "tasks:write", NOW + datetime.timedelta(hours=2))
    for bad in (None, "", reader[:-1], reader + "x", "x" * 10_000):
        with pytest.raises(AccessError) as caught:
            tokens.check(bad, "tasks:read", NOW)
        assert not isinstance(caught.value, ScopeError)


def test_the_file_holds_no_token_and_the_listing_no_hash(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    token, _ = new_token(file, ["tasks:read", "tasks:write"])
    text = file.read_text()
    assert token not in text and "sha256:" in text
    shown = describe(load(file))
    assert shown == [
        {
            "name": "token-1",
            "scopes": ["tasks:read", "tasks:write"],
            "created": shown[0]["created"],
            "expires": None,
        }
    ]


def test_new_token_refuses_unknown_scopes_names_and_duplicates(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    with pytest.raises(UsageError, match="unknown scope"):
        new_token(file, ["tasks:admin"])
    with pytest.raises(UsageError, match="at least one"):
        new_token(file, [])
    with pytest.raises(UsageError, match="token name"):
        new_token(file, ["tasks:read"], name='x"]\n[tokens.evil')
    new_token(file, ["tasks:read"], name="a")
    with pytest.raises(UsageError, match="already has a token named a"):
        new_token(file, ["tasks:read"], name="a")
    assert not file.with_name(".tokens.toml.tmp").exists()


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[tokens.a\n", "not valid TOML"),
        ('[tokens.a]\nhash = "md5:00"\nscopes = ["tasks:read"]\n', "'hash'"),
        ('[tokens.a]\nhash = "sha256:' + "0" * 64 + '"\nscopes = ["admin"]\n', "'scopes'"),
        ('[tokens.a]\nhash = "sha256:' + "0" * 64 + '"\nscopes = ["tasks:read"]\nx = 1\n', "x"),
        ("[other]\na = 1\n", r"only \[tokens\.NAME\]"),
    ],
)
def test_a_malformed_token_file_is_refused_by_name(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        TokenFile.parse(text.encode(), "tokens.toml")


def test_expiry_is_a_time_or_a_span() -> None:
    assert parse_expiry("30d", NOW) == NOW + datetime.timedelta(days=30)
    assert parse_expiry("2027-01-01T00:00:00Z", NOW).year == 2027
    with pytest.raises(UsageError, match="span like 30d"):
        parse_expiry("soon", NOW)
