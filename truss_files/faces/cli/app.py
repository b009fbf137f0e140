"""The click side of ``truss-files``: the group, the context its commands share, and the
error handler every command is wrapped in.

The commands live in ``setup``, ``host``, ``hookcmd``, ``store``, ``read``, ``query``,
``review``, ``panel``, ``config``, ``queue``, ``tools``, ``operator``, ``identity``, ``context``,
``serve`` and ``sigstore``. The group imports only the module of the command being
run, and lists the commands (``--help``, a bare ``truss-files``) from its own table of names,
modules and short helps, so listing them imports none. Each module imports what it needs at
its top; only the module ``query`` shares with every command (this one) keeps pygit2 and
cryptography inside the functions that need them.

Exit codes: 0 ok, 1 a user or tool error, 2 usage, 3 an unexpected bug, 141 the reader of
the output went away (``| head``: git's status on SIGPIPE, without a traceback; ``LazyGroup``
decides it once for every command).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable, MutableMapping
from gettext import gettext
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from ...config.storeprobe import require_store
from ...errors import StoreError, TrussError
from ...git.gitdamage import damage_at
from ...model import Kind, Layer, Trust
from .output import fail, reader_gone

if TYPE_CHECKING:
    from ...facade import MemoryStore

F = TypeVar("F", bound=Callable[..., Any])

# Choices for click, from the model's enums.
KINDS = [k.value for k in Kind]
TRUSTS = [t.value for t in Trust]
LAYERS = [layer.value for layer in Layer]


class Ctx:
    def __init__(self, store: str | None, key: str | None, signer: str | None) -> None:
        self.store_path = store
        self.key = os.path.expanduser(key) if key else key
        self.signer_kind = signer
        self._store: MemoryStore | None = None

    @property
    def store_path(self) -> str | None:
        return self._store_path

    @store_path.setter
    def store_path(self, value: str | None) -> None:
        # `--store '~/m'` and TRUSS_STORE=~/m reach us unexpanded (quoted, or no shell at all).
        self._store_path = os.path.expanduser(value) if value else value

    def store_or_none(self) -> MemoryStore | None:
        """The store, or None outside one (a command that also works without a store)."""
        try:
            return self.store()
        except StoreError:
            return None

    def store(self) -> MemoryStore:
        if self._store is None:
            from ...facade import MemoryStore  # pygit2: only for a command that opens the store

            path = self.store_path or "."
            store = MemoryStore(path)
            # A git repository that holds no store is said by every command alike (an empty
            # `list` there would read as "no entries").
            require_store(path)
            store.origin = "cli"  # an entry written here names cli:<principal> (its LedgerRef)
            if self.key or self.signer_kind:
                from ...signing.keys import (
                    load_signer,  # cryptography: only for a command that signs
                )

                store._signer = load_signer(
                    self.key, signer=self.signer_kind, repo_dir=store.git.workdir
                )
            self._store = store
        return self._store


pass_ctx = click.make_pass_decorator(Ctx)


# Each top-level command: the module that defines it (imported on first use) and its short
# help, the first sentence of its docstring, which the group lists without importing anything
# (tests/faces/cli/test_cli_startup.py checks that this table names every command, each where it is
# defined and with its docstring's first sentence). A command missing here still works -- an
# unknown name loads every module before click says "No such command" -- but is not listed.
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "attest": (
        "sigstore",
        "Attest commits keylessly: a sigstore bundle over each commit id, as a git note.",
    ),
    "audit": (
        "read",
        "Re-check history from the trust root: signatures, roles, entries, verdicts.",
    ),
    "config": (
        "config",
        "Layered settings: truss.toml → user config → [agents.NAME] → --contract FILE.",
    ),
    "context": (
        "context",
        "Print a run's prefix in cache order: tools, system (L0, L1), messages (L3, L4).",
    ),
    "delta": (
        "context",
        "What changed in verified memory since CURSOR: newly verified, stale, superseded or"
        " rejected entries, with a new cursor.",
    ),
    "consolidate": (
        "belief",
        "Merge the notes memory.train flagged consolidating: one unverified note per group.",
    ),
    "demote": ("store", "Turn a verified entry stale (demoted, never deleted)."),
    "diff": ("review", "The semantic change set of RANGE: what a reviewer of memory needs."),
    "doctor": (
        "host",
        "Check the install, the store, keys and roles, host configs and the hooks' last runs.",
    ),
    "hook": (
        "hookcmd",
        "Run one hook (the installed git hook scripts and host configs call this).",
    ),
    "hooks": (
        "review",
        "Git hooks that enforce signatures and the audit (thin shims over it).",
    ),
    "identity": (
        "identity",
        "The agent's identity: core.md (operator-signed) and self.md (amendable under policy).",
    ),
    "evict": (
        "belief",
        "Move verified entries over their kind's [policy.eviction] budget to stale.",
    ),
    "erase": (
        "forget",
        "Erase entries for good (operator only); --dry-run lists every place their text lives.",
    ),
    "export": (
        "transfer",
        "Write the store's entries out: JSON lines that import back, markdown, /memories files.",
    ),
    "index": (
        "index",
        "Embed every note that has no vector yet, for semantic and hybrid recall.",
    ),
    "import": (
        "store",
        "Bulk-import entries in one commit: JSON lines, or notes kept elsewhere (--from).",
    ),
    "init": ("setup", "Create or adopt a git repository as a store."),
    "install-drivers": (
        "review",
        "Configure git's diff and merge drivers for entry files in this repository.",
    ),
    "keys": ("setup", "Manage your signing keys (kept under your user config dir, mode 0600)."),
    "learn": (
        "host",
        "Learn from a transcript: a model's lessons, decisions and facts, as unverified notes.",
    ),
    "list": ("read", "List entries, oldest first, with filters."),
    "log": ("read", "Every commit that touched an entry, with its signer and verdict."),
    "mcp": (
        "tools",
        "Serve this store's agent tools over MCP on stdio (needs the [mcp] extra).",
    ),
    "merge-driver": (
        "review",
        "Merge two versions of one entry file by the trust state machine (git runs this).",
    ),
    "principal": (
        "identity",
        "Principals (L1): principals/<principal>.md, what the agent knows of one user.",
    ),
    "promote": (
        "store",
        "Mark an entry verified, on a PASS verdict signed by a panel key for exactly this id.",
    ),
    "query": (
        "query",
        "Rank entries at or above a trust floor (BM25 statistics from those entries only).",
    ),
    "recheck": (
        "panel",
        "Re-run the checks of verified entries; a failure turns the entry stale.",
    ),
    "reject": (
        "store",
        "Mark an entry rejected on a FAIL verdict; it is kept for audit, never returned.",
    ),
    "repair": (
        "store",
        "Bring the work tree and index back in step with the branch after a crash.",
    ),
    "review": ("queue", "Review pending entries: pass, fail or skip each, newest session first."),
    "revert": (
        "store",
        "Undo a trust transition or identity amendment with a signed revert commit.",
    ),
    "roles": (
        "operator",
        "Who holds which role in truss.toml [roles]: operator, panel, agent or trainer.",
    ),
    "runs": ("tools", "Durable runs: the signed tool-call ledgers under refs/truss/runs/."),
    "serve": (
        "serve",
        "Serve memory.ask, memory.train and the whole store over HTTP (needs the [http] extra).",
    ),
    "salience": ("belief", "Fold use, age and verification into each entry's salience."),
    "setup": (
        "host",
        "Set a host up to use this store: its MCP server entry and, for Claude Code, hooks.",
    ),
    "show": ("read", "Show one entry (any trust, for people; agents use the tools)."),
    "signers": (
        "operator",
        "Who may sign: the keys in .truss/allowed_signers (operators only change them).",
    ),
    "sigstore": (
        "sigstore",
        "The store's sigstore settings: the trusted root keyless signatures are checked by.",
    ),
    "supersede": ("store", "Record that verified entry NEW replaces OLD (OLD turns stale)."),
    "sync": ("review", "Fetch, audit what came in, integrate, and push by compare-and-swap."),
    "textconv": (
        "review",
        "Print an entry file readably (git's diff.truss.textconv runs this).",
    ),
    "tokens": (
        "serve",
        "Bearer tokens of the HTTP API (only their hashes are stored), each bound to a tenant.",
    ),
    "tool": (
        "tools",
        "Call one agent tool: its JSON input on stdin, one JSON object on stdout.",
    ),
    "tools": ("tools", "The agent tools this store serves, for harness configuration."),
    "verdict": ("store", "Panel verdicts: signed PASS/FAIL records for exactly one entry."),
    "verify": ("panel", "Run the verification panel on unverified entries."),
    "why": (
        "read",
        "Why the store believes an entry: its history, verdicts, producer and sources.",
    ),
    "write": ("store", "Write an entry; it lands unverified."),
}
LAZY_COMMANDS: Final = {name: module for name, (module, _summary) in COMMANDS.items()}
COMMAND_MODULES: Final = tuple(sorted(set(LAZY_COMMANDS.values())))


class LazyGroup(click.Group):
    """A group whose commands are imported from their module when first asked for.

    ``commands`` (what code walking the tree reads) holds every command: reading it imports
    every module. ``get_command`` imports only the module of the command being run, and the
    command list of ``--help`` (or of a bare ``truss-files``) comes from ``COMMANDS`` alone.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._registered: MutableMapping[str, click.Command] = {}
        self._all_loaded = False
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        self._load_all()
        return self._registered

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._registered = value

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name is None:
            raise TypeError("Command has no name.")
        self._registered[name] = cmd  # not through .commands: that would import everything

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = self._registered.get(cmd_name)
        if found is None:
            module = LAZY_COMMANDS.get(cmd_name)
            if module is not None:
                importlib.import_module(f"{__package__}.{module}")
            else:
                self._load_all()
            found = self._registered.get(cmd_name)
        return found

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # The group's own --help and --version print while their options are parsed.
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            reader_gone()

    def invoke(self, ctx: click.Context) -> Any:
        """Every command runs here: a reader that left its output (``truss-files list |
        head -1``, ``verdict sign | promote --bad-option``) ends it as SIGPIPE ends git
        (``output.reader_gone``), whatever the command was writing and wherever."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self._registered})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """What ``click.Group.format_commands`` prints, from the table instead of the modules:
        each summary shortened to the same width, the same way."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, _shorten(self._summary(name), limit)) for name in names]
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)

    def _summary(self, name: str) -> str:
        if name in COMMANDS:
            return COMMANDS[name][1]
        return self._registered[name].get_short_help_str(limit=sys.maxsize)

    def _load_all(self) -> None:
        if not self._all_loaded:
            self._all_loaded = True
            for module in COMMAND_MODULES:
                importlib.import_module(f"{__package__}.{module}")


def _shorten(text: str, limit: int) -> str:
    """Click's own shortening of a short help to ``limit`` characters (words kept whole)."""
    if len(text) <= limit:
        return text
    if limit < len("..."):
        return "..."
    import textwrap  # only to list the commands: never on a query's path

    return textwrap.shorten(text, limit, placeholder="...", break_on_hyphens=False)


def handled(func: F, *, error_format: str | None = None) -> F:
    """Turn library errors into exit 1 with the message (JSON when asked, or always in
    ``error_format``), bugs into 3; a closed output is the group's (``LazyGroup.invoke``)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fmt = error_format or kwargs.get("fmt")
        try:
            return func(*args, **kwargs)
        except TrussError as exc:
            fail(exc, fmt)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort, BrokenPipeError):
            raise  # a closed output is no bug: the group ends the command (LazyGroup.invoke)
        except Exception:  # noqa: BLE001 - the last line of defence
            damaged = _damage_here()
            if damaged is not None:  # git's own files, not our bug: say which and what to run
                fail(damaged, fmt)
                sys.exit(1)
            import traceback  # only on a bug: with linecache and tokenize, ~3 ms of any command

            traceback.print_exc()
            click.echo("error: an unexpected bug; please report the trace above", err=True)
            sys.exit(3)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__click_params__ = getattr(func, "__click_params__", [])  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _damage_here() -> TrussError | None:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(Ctx) if ctx is not None else None
    return damage_at(obj.store_path if obj is not None else None)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--store",
    metavar="PATH",
    envvar="TRUSS_STORE",
    help="The store's git repository (default: the repository around the current directory).",
)
@click.option("--key", metavar="PATH", envvar="TRUSS_KEY", help="Private key to sign with.")
@click.option(
    "--signer",
    type=click.Choice(["builtin", "ssh-keygen"]),
    envvar="TRUSS_SIGNER",
    help="builtin: in-process Ed25519 (default); ssh-keygen: your git user.signingkey.",
)
@click.version_option(None, "-V", "--version", package_name="truss-files", prog_name="truss-files")
@click.pass_context
def cli(ctx: click.Context, store: str | None, key: str | None, signer: str | None) -> None:
    """Signed, reviewable, revertible memory for LLM agents.

    Memory is markdown files with YAML front matter under memories/<kind>/ in a git
    repository. Every write lands unverified; only a signed panel verdict makes it verified;
    every trust change is a signed commit you can revert.

    \b
    Start here:
      truss-files init                       # make this repository a store
      truss-files write --kind lesson --key ci-flakes "Retry the network tests once."
      truss-files query "flaky ci"           # verified entries only, by default
    """
    if ctx.invoked_subcommand != "query":
        # The console script pauses the cyclic collector for a query, a process that answers
        # and exits (faces/cli/main.py); any other command may run long (mcp, serve, verify).
        gc.enable()
    ctx.obj = Ctx(store, key, signer)
