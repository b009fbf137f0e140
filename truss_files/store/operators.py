"""Operator changes to who may sign and in which role, each one signed, audited commit.

``.truss/allowed_signers`` says which keys exist and ``truss.toml [roles]`` which principals
hold which role; both are judged by the parent commit's policy, so every change here must be
signed by a key that already holds ``operator``. The signer's role is checked before anything
is planned (a refusal leaves no object behind that a ref could reach), and the signed commit
is put through the audit's own ``check_commit`` before the branch moves, so what this module
commits is exactly what the audit, the hooks and the server's gate accept.

Two refusals protect the store from its own operators: a change that would leave no operator
able to sign a commit (no operator principal with a key allowed in the ``git`` namespace) is
refused, since nobody could ever change the policy again; and a principal name that could
smuggle a second line, an option or a wildcard into allowed_signers is refused.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pygit2

from ..errors import ConfigError, SignatureError, StoreError, UsageError
from ..format.trailers import trailers
from ..git.gitstore import Plan, Snapshot
from ..signing import AllowedSigners, PublicKey
from ..signing.keyless import KeylessIdentity, check_trusted_root
from ..signing.trustpolicy import (
    CONFIG_PATH,
    GIT_NAMESPACE,
    ROLES,
    SIGNERS_PATH,
    TRUSTED_ROOT_PATH,
    StoreConfig,
    TrustPolicy,
)
from ..trust.audit import check_commit
from ..trust.readgate import check_write
from .store import Store

DEFAULT_NAMESPACES = (GIT_NAMESPACE, "truss-verdict")
# A principal is one token in allowed_signers and one string in [roles]: printable, no
# whitespace (an option or a second key could follow it), none of the characters OpenSSH
# reads as a list separator, a quote or a pattern (a "*" principal would match anyone).
_PRINCIPAL = re.compile(r"^[A-Za-z0-9._@+=:/~^%$&'()\[\]{}<>|;-]{1,128}$")


@dataclass(frozen=True)
class SignerInfo:
    """One principal's key as ``signers list`` shows it."""

    principal: str
    fingerprint: str
    public_key: str
    namespaces: tuple[str, ...] | None
    roles: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class OperatorResult:
    """What an operator command did: the commit (None when nothing needed changing)."""

    commit: str | None
    summary: str
    notes: tuple[str, ...] = ()


def check_principal(name: str) -> str:
    """The principal, if it is safe as one allowed_signers token and one [roles] string."""
    if not _PRINCIPAL.fullmatch(name) or name.startswith(("#", "-")):
        raise UsageError(
            f"invalid principal {name!r}: use 1-128 letters, digits and punctuation such as "
            "'.', '@', '-', '_' (no spaces, line breaks, quotes, commas, '*', '?' or '!', "
            "and not starting with '#' or '-'), e.g. 'alice@example.com'"
        )
    return name


def read_public_key(text: str, source: str) -> PublicKey:
    """The one ssh-ed25519 key of a .pub file's text; the error says what is wrong."""
    if "PRIVATE KEY" in text:
        raise UsageError(
            f"{source} holds a private key; pass the public half (the .pub file), and keep "
            "the private key where it is"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise UsageError(
            f"{source} must hold exactly one public key line, 'ssh-ed25519 AAAA... [comment]' "
            f"(found {len(lines)} non-empty lines)"
        )
    try:
        return PublicKey.from_line(lines[0])
    except ConfigError as exc:
        raise UsageError(f"{source}: {exc.message}") from exc


def list_signers(store: Store, snap: Snapshot | None = None) -> list[SignerInfo]:
    policy = store.policy(snap)
    roles = policy.config.roles()
    out = []
    for signer in policy.signers.signers:
        for principal in signer.principals:
            held = tuple(role for role in ROLES if principal in roles[role])
            out.append(
                SignerInfo(
                    principal,
                    signer.key.fingerprint,
                    signer.key.public_line,
                    signer.namespaces,
                    held,
                    signer.line,
                )
            )
    return out


def add_signer(
    store: Store,
    principal: str,
    key: PublicKey,
    namespaces: Sequence[str] = DEFAULT_NAMESPACES,
) -> OperatorResult:
    check_principal(principal)

    def change(signers: AllowedSigners, config: str) -> tuple[AllowedSigners, str]:
        for signer in signers.signers:
            if signer.key == key and principal not in signer.principals:
                raise UsageError(
                    f"key {key.fingerprint} already belongs to {', '.join(signer.principals)} "
                    f"({SIGNERS_PATH} line {signer.line}); one key signs for one principal, "
                    "so make a new key for this one"
                )
        return signers.with_signer(principal, key, tuple(namespaces)), config

    return _operator_change(
        store, "add", principal, change, f"add signer {principal} ({key.fingerprint})"
    )


def remove_signer(store: Store, principal: str) -> OperatorResult:
    def change(signers: AllowedSigners, config: str) -> tuple[AllowedSigners, str]:
        kept = []
        found = False
        for signer in signers.signers:
            if principal in signer.principals:
                found = True
                rest = tuple(p for p in signer.principals if p != principal)
                if not rest:
                    continue
                signer = type(signer)(
                    rest,
                    signer.key,
                    signer.namespaces,
                    signer.line,
                    signer.valid_after,
                    signer.valid_before,
                )
            kept.append(signer)
        if not found:
            raise UsageError(
                f"{principal!r} is not in {SIGNERS_PATH}; see `truss-files signers list`"
            )
        return AllowedSigners(tuple(kept), signers.foreign), config

    done = _operator_change(store, "remove", principal, change, f"remove signer {principal}")
    held = [r for r in ROLES if principal in store.config().roles()[r]]
    if held:
        note = (
            f"{principal} still holds {', '.join(held)} in {CONFIG_PATH} but has no key, so "
            f"signs nothing; `truss-files roles revoke ROLE {principal}` tidies that up"
        )
        done = OperatorResult(done.commit, done.summary, (*done.notes, note))
    return done


def grant_role(store: Store, role: str, principal: str) -> OperatorResult:
    _check_role(role)
    keyless = _keyless_principal(role, principal)
    if not keyless:
        check_principal(principal)

    def change(signers: AllowedSigners, config: str) -> tuple[AllowedSigners, str]:
        if not keyless and not any(principal in s.principals for s in signers.signers):
            raise UsageError(
                f"{principal!r} has no key in {SIGNERS_PATH}; add one first with "
                f"`truss-files signers add {principal} KEY.pub`"
            )
        roles = _role_lists(config)
        if principal not in roles[role]:
            roles[role].append(principal)
        return signers, set_roles(config, roles)

    return _operator_change(store, "grant", principal, change, f"grant {role} to {principal}")


def revoke_role(store: Store, role: str, principal: str) -> OperatorResult:
    _check_role(role)

    def change(signers: AllowedSigners, config: str) -> tuple[AllowedSigners, str]:
        roles = _role_lists(config)
        if principal not in roles[role]:
            raise UsageError(
                f"{principal!r} does not hold the {role} role; see `truss-files signers list`"
            )
        roles[role].remove(principal)
        return signers, set_roles(config, roles)

    return _operator_change(store, "revoke", principal, change, f"revoke {role} from {principal}")


# --------------------------------------------------------------------------- the commit


_Edit = Callable[[AllowedSigners, str], tuple[AllowedSigners, str]]


def pin_trusted_root(store: Store, data: bytes) -> OperatorResult:
    """Pin a private sigstore deployment's trusted root at ``.truss/trusted_root.json``:
    keyless verdicts and attestations are then verified against it, offline."""
    check_trusted_root(data)

    def change(signers: AllowedSigners, config: str) -> tuple[AllowedSigners, str]:
        return signers, config

    return _operator_change(
        store,
        "pin-root",
        "sigstore",
        change,
        f"pin the sigstore trusted root ({TRUSTED_ROOT_PATH})",
        files={TRUSTED_ROOT_PATH: data},
    )


def _operator_change(
    store: Store,
    action: str,
    principal: str,
    edit: _Edit,
    summary: str,
    files: Mapping[str, bytes] | None = None,
) -> OperatorResult:
    me, key = _require_operator(store)
    op = {"grant": "roles", "revoke": "roles", "pin-root": "sigstore"}.get(action, "signers")

    def plan(snap: Snapshot) -> Plan:
        signers_text = (snap.read(SIGNERS_PATH) or b"").decode("utf-8")
        config_text = (snap.read(CONFIG_PATH) or b"").decode("utf-8")
        old = AllowedSigners.parse(signers_text, SIGNERS_PATH)
        new_signers, new_config = edit(old, config_text)
        new_signers_text = new_signers.render()
        changes: dict[str, bytes | None] = {}
        if new_signers != old:
            changes[SIGNERS_PATH] = new_signers_text.encode()
        if new_config != config_text:
            changes[CONFIG_PATH] = new_config.encode()
        for path, data in (files or {}).items():
            if snap.read(path) != data:
                changes[path] = data
        if changes:
            _check_operable(new_signers, new_config)
        message = f"truss: {summary}\n\n" + trailers(
            op=op, action=action, principal=principal, signer=me
        )
        return Plan(changes, message)

    def check(commit: pygit2.Commit, parent: Snapshot) -> None:
        check_write(store.git, parent.oid, store.environ)  # no change on an untrusted history
        signature, payload = commit.gpg_signature
        if signature is None:
            raise StoreError("refusing to move the branch: the new commit is unsigned")
        store.policy(parent).check_signature(
            signature.decode(), payload, GIT_NAMESPACE, {"operator"}
        )
        found = check_commit(store.git.repo, commit, False)
        if found:
            raise StoreError(
                "refusing to move the branch: the audit would reject this change: "
                + "; ".join(f"[{v.rule}] {v.message}" for v in found)
            )

    done = store.git.apply(plan, store.signer, store.identity(me), check=check)
    if done is None:
        return OperatorResult(None, f"unchanged: {summary} (already so)")
    notes = []
    after = store.policy()
    try:
        _, held = after.roles_of(key)
    except SignatureError:
        held = set()
    if "operator" not in held:
        notes.append(
            f"your key ({me}) no longer holds the operator role here; later changes to signers "
            "and roles must be signed by another operator"
        )
    return OperatorResult(str(done[0].id), summary, tuple(notes))


def _require_operator(store: Store) -> tuple[str, PublicKey]:
    """Refuse before planning anything when this process's key is not an operator's."""
    key = PublicKey.from_line(store.signer.public_line)
    policy = store.policy()
    try:
        principal, held = policy.roles_of(key)
    except SignatureError as exc:
        raise SignatureError(
            f"your key {key.fingerprint} is not in {SIGNERS_PATH}, so it cannot change signers "
            "or roles; ask an operator to run this command"
        ) from exc
    if "operator" not in held:
        raise SignatureError(
            f"{principal} ({key.fingerprint}) holds {', '.join(sorted(held)) or 'no role'}; "
            "changing signers or roles needs the operator role (ask an operator to run this "
            "command, or to grant you the role with `truss-files roles grant operator "
            f"{principal}`)"
        )
    return principal, key


def _check_operable(signers: AllowedSigners, config: str) -> None:
    """The new policy parses and leaves at least one operator able to sign a commit."""
    parsed = TrustPolicy.from_files(signers.render().encode(), config.encode())
    operators = parsed.config.roles()["operator"]
    for signer in parsed.signers.signers:
        if set(signer.principals) & operators and signer.allows(signer.key, GIT_NAMESPACE):
            return
    raise UsageError(
        "refused: this would leave no operator with a key that can sign commits, and then "
        "nobody could ever change signers or roles again; grant the operator role to "
        "another principal with a key first (`truss-files roles grant operator NAME`)"
    )


def _keyless_principal(role: str, principal: str) -> bool:
    """Whether ``principal`` is a sigstore identity (which needs no key in allowed_signers);
    such a principal signs verdicts, never commits, so it holds only the panel role."""
    if KeylessIdentity.parse(principal) is None:
        return False
    if role != "panel":
        raise UsageError(
            f"{principal} is a sigstore identity: it signs verdicts, not commits, so it can "
            "hold the panel role only (`truss-files roles grant panel PRINCIPAL`)"
        )
    return True


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise UsageError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")


# --------------------------------------------------------------------------- truss.toml


def _role_lists(config: str) -> dict[str, list[str]]:
    # The file's own order, which roles() (a set per role) would lose.
    current = StoreConfig.parse(config.encode()).section("roles")
    return {role: list(current.get(role, [])) for role in ROLES}


def set_roles(config: str, roles: Mapping[str, Sequence[str]]) -> str:
    """``config`` with its ``[roles]`` table rewritten to ``roles``; every other byte kept.

    tomllib cannot write, so the table is edited as text: each ``role = [...]`` assignment
    (one line or several) is replaced, missing roles are appended to the table, and a store
    without a ``[roles]`` table gets one at the end. The result is parsed back and must
    hold exactly ``roles`` and the same everything else, or the edit is refused.
    """
    lines = config.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.strip() == "[roles]"), None)
    rendered = {role: f"{role} = {_toml_list(roles[role])}\n" for role in ROLES if role in roles}
    if start is None:
        sep = "" if not config or config.endswith("\n") else "\n"
        out = config + sep + "\n[roles]\n" + "".join(rendered.values())
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
            len(lines),
        )
        body: list[str] = []
        done: set[str] = set()
        i = start + 1
        while i < end:
            match = re.match(r"\s*([A-Za-z_-]+)\s*=", lines[i])
            if match and match.group(1) in rendered:
                j = _assignment_end(lines, i, end)
                body.append(rendered[match.group(1)])
                done.add(match.group(1))
                i = j
                continue
            body.append(lines[i])
            i += 1
        missing = [line for r, line in rendered.items() if r not in done]
        # New assignments go after the last non-blank line of the table.
        at = len(body)
        while at > 0 and not body[at - 1].strip():
            at -= 1
        if at > 0 and not body[at - 1].endswith("\n"):
            body[at - 1] += "\n"
        body[at:at] = missing
        out = "".join(lines[: start + 1] + body + lines[end:])
    _check_roles_edit(config, out, roles)
    return out


def _assignment_end(lines: list[str], i: int, end: int) -> int:
    """The index after the last line of the (possibly multi-line) assignment at ``i``."""
    for j in range(i + 1, end + 1):
        try:
            tomllib.loads("".join(lines[i:j]))
        except tomllib.TOMLDecodeError:
            continue
        return j
    raise ConfigError(
        f"{CONFIG_PATH} line {i + 1}: cannot read this [roles] assignment; fix the file by hand"
    )


def _toml_list(items: Sequence[str]) -> str:
    # A JSON string is a TOML basic string for the characters a checked principal may hold.
    return "[" + ", ".join(json.dumps(item, ensure_ascii=False) for item in items) + "]"


def _check_roles_edit(before: str, after: str, roles: Mapping[str, Sequence[str]]) -> None:
    try:
        old = tomllib.loads(before) if before.strip() else {}
        new = tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{CONFIG_PATH}: editing [roles] would not give valid TOML ({exc}); write the "
            'roles as a plain [roles] table of role = ["principal", ...] lines'
        ) from exc
    wanted = {role: list(roles.get(role, [])) for role in ROLES}
    old_rest = {k: v for k, v in old.items() if k != "roles"}
    new_rest = {k: v for k, v in new.items() if k != "roles"}
    got = {role: new.get("roles", {}).get(role, []) for role in ROLES}
    if got != wanted or old_rest != new_rest:
        raise ConfigError(
            f"{CONFIG_PATH}: could not edit [roles] safely as text (is it written as dotted "
            "keys or an inline table?); write the roles as a plain [roles] table of "
            'role = ["principal", ...] lines, then try again'
        )
