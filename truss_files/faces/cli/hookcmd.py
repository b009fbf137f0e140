"""``hook``: the one command every installed hook runs, git's and the hosts'.

Kept apart from the other review commands so a host hook starts without the facade: Claude
Code runs ``hook stop`` after every turn, and that one only notes the session beside the
store. The git hooks load their checks (``faces/hooks.py``: pygit2, the audit) when they run.
"""

from __future__ import annotations

import sys
from typing import Final

import click

from ..host.hookrun import HOST_HOOKS, main_stdio
from .app import Ctx, cli, handled, pass_ctx

# faces/hooks.py's HOOK_NAMES, spelled out so listing them imports no pygit2 (a test checks).
GIT_HOOKS: Final = ("pre-commit", "commit-msg", "pre-push", "pre-receive")
_STDIN_HOOKS: Final = ("pre-push", "pre-receive")


@cli.command("hook", context_settings={"ignore_unknown_options": True, "allow_extra_args": False})
@click.argument("name", type=click.Choice((*GIT_HOOKS, *HOST_HOOKS)))
@click.option("--chain", metavar="PATH", help="A git hook to run first, with the same input.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
@handled
def hook(obj: Ctx, name: str, chain: str | None, args: tuple[str, ...]) -> None:
    """Run one hook (the installed git hook scripts and host configs call this).

    \b
    Git hooks (installed by `truss-files hooks install`):
      pre-commit, commit-msg, pre-push, pre-receive
    Exit 0 to let git go on; otherwise one line per problem, naming commit, file and rule.
    pre-push and pre-receive read git's ref lines from stdin.

    \b
    Host hooks (written by `truss-files setup claude-code`):
      session-start   print the context a session starts from (the host's JSON on stdin)
      pre-compact     learn from the transcript so far
      session-end     learn from the whole transcript
      stop            note the session's transcript
    A host hook always exits 0; what went wrong goes to the log `truss-files doctor` names.
    Options after the name: --agent RUN (the project's agent run), --principal P.

    \b
    Examples:
      exec truss-files hook pre-push --chain "$0.local" -- "$@"
      echo '{"session_id": "s1"}' | truss-files hook session-start --agent agent-demo
    """
    if name in HOST_HOOKS:
        sys.exit(main_stdio(name, args, obj.store_path))
    from ..hooks import run_hook  # pygit2 and the audit: only for a git hook

    stdin = sys.stdin.buffer.read() if name in _STDIN_HOOKS else None
    result = run_hook(name, list(args), stdin=stdin, chain=chain)
    for line in result.lines:
        click.echo(line, err=True)
    sys.exit(result.code)
