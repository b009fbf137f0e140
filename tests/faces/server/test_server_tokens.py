"""Bearer tokens: hashes only on disk, constant-time lookup, scopes, expiry and tenant binding."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from truss_files.errors import AccessError, ConfigError, Forbidden, NotFound, ScopeError, UsageError
from truss_files.faces.server.tasks import TaskRegistry
from truss_files.faces.server.tokens import (
    TokenFile,
    admit,
    describe,
    digest,
    load,
    new_token,
    parse_expiry,
    revoke_token,
)

NOW = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


def test_a_token_is_checked_by_hash_scope_and_expiry(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    reader, _ = new_token(file, ["tasks:read"], name="reader", any_task=True)
    short, record = new_token(
        file,
        ["tasks:write"],
        name="short",
        expires=NOW + datetime.timedelta(hours=1),
        enterprises=["acme"],
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
    token, _ = new_token(file, ["tasks:read", "tasks:write"], tasks=["T-1", "T-2"])
    text = file.read_text()
    assert token not in text and "sha256:" in text
    shown = describe(load(file))
    assert shown == [
        {
            "name": "token-1",
            "scopes": ["tasks:read", "tasks:write"],
            "binding": {"tasks": ["T-1", "T-2"]},
            "created": shown[0]["created"],
            "expires": None,
        }
    ]


def test_new_token_refuses_unknown_scopes_names_and_duplicates(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    with pytest.raises(UsageError, match="unknown scope"):
        new_token(file, ["tasks:admin"], any_task=True)
    with pytest.raises(UsageError, match="at least one"):
        new_token(file, [], any_task=True)
    with pytest.raises(UsageError, match="token name"):
        new_token(file, ["tasks:read"], name='x"]\n[tokens.evil', any_task=True)
    new_token(file, ["tasks:read"], name="a", any_task=True)
    with pytest.raises(UsageError, match="already has a token named a"):
        new_token(file, ["tasks:read"], name="a", any_task=True)
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


# --------------------------------------------------------------------------- tenant bindings

REGISTRY = TaskRegistry.parse(
    b'[tasks.T-acme]\nmember = "m-1"\nrole = "r"\nteam = "t"\nenterprise = "acme"\n\n'
    b'[tasks.T-evil]\nmember = "m-2"\nrole = "r"\nteam = "t"\nenterprise = "evilcorp"\n'
)


def test_admit_lets_a_token_act_only_for_its_tenants_tasks(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    acme, _ = new_token(file, ["tasks:write"], name="acme", enterprises=["acme"])
    one, _ = new_token(file, ["tasks:write"], name="one", tasks=["T-evil", "T-later"])
    anyone, _ = new_token(file, ["tasks:write"], name="any", any_task=True)
    tokens = load(file)

    def admit_(token: str, task: str) -> object:
        return admit(tokens, f"Bearer {token}", "tasks:write", task, REGISTRY, NOW)

    context = admit_(acme, "T-acme")
    assert getattr(context, "enterprise", None) == "acme"
    with pytest.raises(Forbidden, match="acts for enterprise acme only"):
        admit_(acme, "T-evil")
    # A task the registry lacks: 403 for an enterprise token (it learns nothing of other
    # tenants' ids), None (404) for a token that would act for that id.
    with pytest.raises(Forbidden):
        admit_(acme, "T-missing")
    assert admit_(one, "T-later") is None and admit_(anyone, "T-missing") is None
    assert getattr(admit_(one, "T-evil"), "task", None) == "T-evil"
    with pytest.raises(Forbidden, match="acts for task T-evil,T-later only"):
        admit_(one, "T-acme")
    assert getattr(admit_(anyone, "T-evil"), "task", None) == "T-evil"
    # The token is checked before the binding: a wrong scope is still a ScopeError.
    with pytest.raises(ScopeError):
        admit(tokens, f"Bearer {acme}", "tasks:read", "T-acme", REGISTRY, NOW)
    with pytest.raises(AccessError, match="Bearer"):
        admit(tokens, f"Basic {acme}", "tasks:write", "T-acme", REGISTRY, NOW)


def test_a_token_from_before_bindings_fails_closed_and_is_listed_unbound(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    token = "tft_" + "A" * 43
    file.write_text(
        f'[tokens.old]\nhash = "{digest(token)}"\nscopes = ["tasks:read", "tasks:write"]\n'
    )
    tokens = load(file)
    assert tokens.unbound() == ["old"]
    assert describe(tokens)[0]["binding"] is None
    with pytest.raises(Forbidden, match="before tokens were bound.*tokens new.*--any-task"):
        admit(tokens, f"Bearer {token}", "tasks:read", "T-acme", REGISTRY, NOW)
    # The documented migration: the operator adds the binding to the token's own table.
    file.write_text(file.read_text() + 'enterprises = ["acme"]\n')
    migrated = load(file)
    assert migrated.unbound() == []
    assert admit(migrated, f"Bearer {token}", "tasks:read", "T-acme", REGISTRY, NOW)


def test_new_token_needs_exactly_one_binding_and_the_file_exactly_one(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    for bad in ({}, {"enterprises": ["acme"], "any_task": True},
                {"enterprises": ["acme"], "tasks": ["T-1"]}):  # fmt: skip
        with pytest.raises(UsageError, match="exactly one of --enterprise E, --task T"):
            new_token(file, ["tasks:read"], **bad)
    with pytest.raises(UsageError, match="no enterprise or task id"):
        new_token(file, ["tasks:read"], tasks=["../T-1"])
    assert not file.exists()
    hashed = 'hash = "sha256:' + "0" * 64 + '"\nscopes = ["tasks:read"]\n'
    for text, problem in [
        (hashed + 'enterprises = ["acme"]\nany_task = true\n', "exactly one"),
        (hashed + "any_task = false\n", "'any_task' must be true"),
        (hashed + "enterprises = []\n", "'enterprises' must list"),
        (hashed + 'tasks = ["a/b"]\n', "'tasks' must list"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            TokenFile.parse(f"[tokens.a]\n{text}".encode(), "tokens.toml")


def test_revoke_removes_one_token_and_names_an_unknown_one(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    keep, _ = new_token(file, ["tasks:read"], name="keep", any_task=True)
    gone, _ = new_token(file, ["tasks:read"], name="gone", enterprises=["acme"])
    assert revoke_token(file, "gone").name == "gone"
    tokens = load(file)
    assert [t.name for t in tokens.tokens] == ["keep"]
    kept = tokens.named("keep")
    assert kept is not None and kept.binding is not None and kept.binding.any_task
    with pytest.raises(AccessError):
        tokens.check(gone, "tasks:read", NOW)
    with pytest.raises(NotFound, match="no token named 'gone'.*keep"):
        revoke_token(file, "gone")
    assert tokens.check(keep, "tasks:read", NOW).name == "keep"
