"""The exceptions truss-files raises.

Every error is a ``TrussError``; callers catch the root, faces translate it to an exit code
or a JSON error object. Library code translates pygit2, YAML and OS errors at the boundary
with ``raise ... from exc``.

    TrussError
    ├── UsageError            bad input from a person or a tool call (exit 1 / code "invalid_input")
    │   ├── SecretFound       a credential-shaped value in text on its way into memory
    │   ├── NotFound          no entry, commit or key by that name
    │   │   └── UnknownTool   a tool name no face serves
    │   ├── BadCursor         a context/delta cursor that is garbage, damaged or foreign
    │   ├── BindingError      a memory-tool call the SDK's binding refuses, in the SDK's words
    │   ├── NoRunContext      a tool that needs a run context called without one
    │   └── ToolNotServed     a tool this store's truss.toml does not turn on
    ├── EntryError            an entry file that does not parse or validate (names file + field)
    ├── SignatureError        a signature that does not verify, or a signer without the role
    │   ├── KeylessError      a sigstore bundle that does not verify (``rule`` names the check)
    │   └── ProvenanceError   a run's memo without a matching signed ledger entry
    ├── VerdictError          a verdict that is invalid for the entry it is applied to
    ├── TransitionError       a trust change the state machine does not allow
    ├── ConflictError         the store moved under us, or a work tree path has local edits
    ├── ConfigError           truss.toml / allowed_signers / user config problems
    │   └── NotConfigured     learn asked with no [learn] model: nothing sent, nothing stored
    ├── LearnFailed           the learn model could not be asked, or did not answer as asked
    ├── Forbidden             a write the signing key's roles do not allow (layer, author)
    ├── UntrustedHistory      a read above unverified from a history the audit rejects
    ├── IndexUnavailable      a recall cache that is damaged and cannot be rebuilt right now
    │   └── FloorError        one trust floor's index is missing, damaged or at another commit
    ├── VectorsMissing        a semantic query that would embed too many notes: `truss-files index`
    ├── StoreError            anything else about the repository (not a store, corrupt object)
    │   └── RepositoryDamaged a truncated index or pack, a malformed ref: git fsck / repair
    └── AccessError           an HTTP request without a valid token (401) or its scope (403)
        └── ScopeError        a valid token that lacks the scope the route needs

Each error has its own ``code``; the HTTP face may answer several with one status and code
(a missing token scope and a refused tenant are both 403 ``forbidden`` there).
"""

from __future__ import annotations

from collections.abc import Sequence


class TrussError(Exception):
    """Root of every error truss-files raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(TrussError):
    code = "invalid_input"


class NotFound(UsageError):
    code = "not_found"


class BadCursor(UsageError):
    code = "bad_cursor"


class UnknownTool(NotFound):
    code = "unknown_tool"


class BindingError(UsageError):
    """An error the memory tool reports, worded as the SDK words it."""

    def __init__(self, message: str, code: str = "invalid_input") -> None:
        super().__init__(message)
        self.code = code


class NoRunContext(UsageError):
    code = "no_run_context"


class ToolNotServed(UsageError):
    code = "tool_not_served"


class SecretFound(UsageError):
    """A credential-shaped value in something a write would store: nothing was written.
    ``places`` name the field (or import line) and where in it, with the kind; the message
    never holds the value itself. (HTTP 422; exit 1.)"""

    code = "secret"

    def __init__(self, places: Sequence[str], *, what: str = "the write") -> None:
        self.places = tuple(places)
        count = len(self.places)
        super().__init__(
            f"{what} holds {count} credential-shaped value{'s' if count != 1 else ''}, so "
            "nothing was stored: "
            + "; ".join(self.places)
            + ". Take the value out (write where it is kept, not what it is); an operator "
            "allows a value known harmless with [secrets] allow in truss.toml (docs/secrets.md)"
        )


class EntryError(TrussError):
    code = "invalid_entry"

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None):
        where = path or "<entry>"
        if field:
            where = f"{where}: field '{field}'"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.field = field


class SignatureError(TrussError):
    code = "bad_signature"


class VerdictError(TrussError):
    code = "bad_verdict"


class TransitionError(TrussError):
    code = "illegal_transition"


class ConflictError(TrussError):
    code = "conflict"


class ConfigError(TrussError):
    code = "config"


class NotConfigured(ConfigError):
    """No ``[learn]`` model: nothing is sent and nothing stored."""


class LearnFailed(TrussError):
    """The model could not be asked, or did not answer as asked."""

    code = "learn_failed"


class Forbidden(TrussError):
    """A write the signing key may not make: a layer above the task or another author's
    name needs the ``trainer`` role (``roles grant trainer PRINCIPAL``)."""

    code = "forbidden"


class UntrustedHistory(TrussError):
    """The branch's history breaks an audit rule, so its trust labels cannot be believed:
    nothing above unverified is served until the offending commit is off the branch."""

    code = "untrusted_history"


class IndexUnavailable(TrussError):
    """A cache under ``.git/truss/`` is damaged and could not be rebuilt for this call; the
    next call tries again. Never a crash, never a wrong answer."""

    code = "index_unavailable"


class FloorError(IndexUnavailable):
    """A floor index that is missing, damaged, planted (a link) or at another commit than
    the index head says: rebuild (``IndexUnavailable`` if it escapes the rebuild)."""


class VectorsMissing(TrussError):
    """A semantic or hybrid query whose notes lack more vectors than a query embeds: it says
    so at once (``truss-files index`` embeds them, with progress) instead of embedding for
    minutes inside the query."""

    code = "vectors_missing"


class StoreError(TrussError):
    code = "store"


class RepositoryDamaged(StoreError):
    """git's own files are damaged (a truncated ``.git/index``, a bad pack, a malformed ref):
    the message names the file and what to run (``git fsck``, ``truss-files repair``)."""

    code = "repository_damaged"


class AccessError(TrussError):
    """No token, an unknown one or an expired one: the HTTP face answers 401."""

    code = "unauthorized"


class ScopeError(AccessError):
    """A valid token without the scope a route needs: the HTTP face answers 403."""

    code = "insufficient_scope"


class KeylessError(SignatureError):
    """A sigstore bundle that does not verify; ``rule`` names the check it failed."""

    code = "bad_keyless_signature"

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"[{rule}] {message}")
        self.rule = rule
        self.detail = message


PROVENANCE_MESSAGE = "memory memo missing matching signed provenance"


class ProvenanceError(SignatureError):
    """A memo without a matching signed ledger entry; ``detail`` says which check failed."""

    code = "memo_provenance"

    def __init__(self, detail: str) -> None:
        super().__init__(PROVENANCE_MESSAGE)
        self.detail = detail
