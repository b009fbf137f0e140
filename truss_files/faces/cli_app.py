"""The click side of ``truss-files``: the group, the context its commands share, and the
error handler every command is wrapped in.

The commands live in ``cli_setup``, ``cli_store``, ``cli_read``, ``cli_query``, ``cli_review``,
``cli_panel``, ``cli_tools``, ``cli_operator``, ``cli_identity``, ``cli_context``, ``cli_serve``
and ``cli_sigstore``. The group imports only the module of the command being run (all of them
when every command must be listed: ``--help``, completion, ``.commands``), so a command pays
for its own imports and nobody else's; each module imports what it needs at its top, except
what would put pygit2, PyYAML, tomllib, cryptography or an optional extra on ``--help``.

Exit codes: 0 ok, 1 a user or tool error, 2 usage, 3 an unexpected bug.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from ..errors import TrussError
from ..gitdamage import damage_at
from ..model import Kind, Layer, Trust
from .output import fail

if TYPE_CHECKING:
    from ..facade import MemoryStore

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

    def store(self) -> MemoryStore:
        if self._store is None:
            from ..facade import MemoryStore  # pygit2: only for a command that opens the store

            path = self.store_path or "."
            store = MemoryStore(path)
            if self.key or self.signer_kind:
                from ..keys import load_signer  # cryptography: only for a command that signs

                store._signer = load_signer(
                    self.key, signer=self.signer_kind, repo_dir=store.git.workdir
                )
            self._store = store
        return self._store


pass_ctx = click.make_pass_decorator(Ctx)


# Which module defines each top-level command (imported on first use). A command missing here
# still works -- an unknown name loads every module before click says "No such command" -- and
# tests/test_cli_startup.py checks that this table names every command.
LAZY_COMMANDS: Final = {
    **dict.fromkeys(("init", "keys"), "cli_setup"),
    **dict.fromkeys(
        (
            *("write", "import", "verdict", "promote", "reject", "demote", "supersede"),
            *("revert", "repair"),
        ),
        "cli_store",
    ),
    **dict.fromkeys(("show", "list", "log", "audit"), "cli_read"),
    "query": "cli_query",
    **dict.fromkeys(
        ("diff", "textconv", "install-drivers", "merge-driver", "hooks", "hook", "sync"),
        "cli_review",
    ),
    **dict.fromkeys(("verify", "recheck", "config"), "cli_panel"),
    **dict.fromkeys(("tool", "tools", "runs", "mcp"), "cli_tools"),
    **dict.fromkeys(("identity", "principal"), "cli_identity"),
    **dict.fromkeys(("context", "delta"), "cli_context"),
    **dict.fromkeys(("signers", "roles"), "cli_operator"),
    **dict.fromkeys(("serve", "tokens"), "cli_serve"),
    **dict.fromkeys(("attest", "sigstore"), "cli_sigstore"),
}
COMMAND_MODULES: Final = (
    "cli_context",
    "cli_identity",
    "cli_operator",
    "cli_panel",
    "cli_query",
    "cli_read",
    "cli_review",
    "cli_serve",
    "cli_setup",
    "cli_sigstore",
    "cli_store",
    "cli_tools",
)


class LazyGroup(click.Group):
    """A group whose commands are imported from their module when first asked for.

    ``commands`` (what code walking the tree reads) holds every command: reading it imports
    every module. ``get_command`` imports only the module of the command being run.
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

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        return sorted(self._registered)

    def _load_all(self) -> None:
        if not self._all_loaded:
            self._all_loaded = True
            for module in COMMAND_MODULES:
                importlib.import_module(f"{__package__}.{module}")


def handled(func: F, *, error_format: str | None = None) -> F:
    """Turn library errors into exit 1 with the message (JSON when asked, or always in
    ``error_format``), bugs into 3."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fmt = error_format or kwargs.get("fmt")
        try:
            return func(*args, **kwargs)
        except TrussError as exc:
            fail(exc, fmt)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
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
        # and exits (faces/cli.py); any other command may run long (mcp, serve, verify).
        gc.enable()
    ctx.obj = Ctx(store, key, signer)
