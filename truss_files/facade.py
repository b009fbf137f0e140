"""``MemoryStore``: the store as agents and faces use it -- writes, trust transitions, reads.

The facade stands above every engine. It is the front door of every face (the CLI, the tools
and so MCP and HTTP, the SDK adapter, Python callers): what a face may not forget is decided
here once, not in each face --

- a write (``write``, ``write_entries``) is the store's one signed commit, landing
  unverified, and then the verification policy of the layered settings: where it is eager
  for the entry's kind, the panel runs at once (``panel.eager``);
- a promotion (``promote``) takes the conflict policy of the layered settings (truss.toml,
  user config, ``[agents.NAME]``, contract), as ``verify`` does; truss.toml's
  ``panel-arbitrated`` is the store's to enforce whatever is layered (``Store.promote``);
- a read (``query``, ``view``) notes the entries it returned in the usage file, under this
  store's face (``origin``);
- a read or decision given a ``scope`` (``tenant_scope`` of a task: the HTTP face) keeps to
  the entries holding it -- their conflicts, rivals and queue too -- and an entry outside
  answers as no entry at all.

Each read here opens one gated snapshot (``Store.open_read``) and hands it to the engine
that answers -- recall for ``query``, the run context for ``context`` and ``delta_since``,
the review engine (with the run ledger's resolver) for ``why``. It implements the ``Memory``
protocol that faces and tools depend on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .config.settings import Settings, load_settings, settings_for
from .config.storeprobe import has_layers_above_store
from .context.assemble import Prefix, build_context, goal_ledger, run_settings
from .context.compact import compact as _compact
from .context.delta import Delta
from .context.delta import delta_since as _delta_since
from .context.instruction import BUILT_IN, instruction_table, pick
from .errors import NotFound, StoreError
from .format.scope import Reader, parse_scope_pairs, stamp
from .format.secrets import shown
from .format.trailers import parse_trailers
from .git.gitdir import GitDir
from .git.gitstore import GitStore
from .git.usage import record
from .identity import changes as identity_changes
from .identity.layers import identity_layers
from .identity.principals import set_principal, show_principal
from .model import Conflict, Entry, Kind, Layer, Trust
from .recall.engine import Embedded, RecallResult, Searcher, embed_written
from .recall.pipeline import Filter
from .recall.query import answer, query_filter
from .review.diff import change_set as diff_change_set
from .review.queue import Queue
from .review.queue import pending as _pending
from .review.why import explain
from .runs.ledger import RunLedger, RunSummary, list_runs, resolve_call
from .runs.runcontext import RunContext
from .runs.start import load_start
from .signing.trustpolicy import ROLES
from .store import asof, belief, operators
from .store.erase import ErasurePlan, plan_erasure
from .store.erasing import Erased, erase
from .store.export import Exported, entries_to_export
from .store.export import record as _export_record
from .store.initstore import init_store
from .store.operators import DEFAULT_NAMESPACES, OperatorResult, SignerInfo
from .store.store import Store
from .store.sync import SyncResult, sync
from .tools.tenancy import scope_of
from .tools.tenancy import tenant_scope as _tenant_scope
from .trust.attest import NOTES_REF, Attested, attest
from .trust.audit import audit
from .trust.verdict import Verdict, check_keyless, check_verdict, check_votes

if TYPE_CHECKING:
    from .format.proposal import Proposal
    from .git.gitstore import Snapshot
    from .git.recovery import Repaired
    from .identity.amend import Proposed
    from .identity.changes import Amendment
    from .identity.judge import Judged
    from .memory import Memory
    from .panel.eager import Written
    from .panel.report import Report
    from .review.diff import ChangeSet
    from .signing import Signer
    from .store.initstore import InitResult
    from .trust.audit import AuditReport

# ROLES and NOTES_REF: the role names a face offers, and where attestations are kept.
__all__ = [
    "NOTES_REF",
    "ROLES",
    "MemoryStore",
    "audit_history",
    "change_set",
    "effective_settings",
    "export_record",
    "init",
    "read_verdict",
    "repair",
    "run_resource",
    "scope_stamp",
    "tenant_scope",
]


class MemoryStore(Store):
    """A store at a path: ``Store``'s writes and transitions under the layered policies, and
    the gated reads."""

    def settings(
        self, *, agent: str | None = None, contract: str | os.PathLike[str] | None = None
    ) -> Settings:
        """The layered settings a command runs under: truss.toml at the tip, the user config,
        ``[agents.agent]`` (default ``$TRUSS_AGENT``), the ``contract`` file (default
        ``$TRUSS_CONTRACT``) -- ``settings_for(self)``, as every face passes it on."""
        return settings_for(self, agent=agent, contract=contract)

    # -- writes and transitions: the policies every face gets ---------------------------

    def write(
        self,
        kind: Kind | str,
        key: str,
        body: str,
        *,
        settings: Settings | None = None,
        **fields: Any,
    ) -> Entry:
        """Store a new entry: one signed commit, landing unverified; then, where the
        verification policy is eager for its kind, the panel at once (``write_entries``).
        Returns the entry as it then stands -- verified or rejected when the panel decided.
        Writing the same content again changes nothing.

        Keyword fields are those of ``new_entry`` (layer, scope, author, produced_by, ...);
        ``settings``: the layered settings to write under (default ``settings_for(self)``:
        truss.toml, the user config, ``$TRUSS_AGENT``, ``$TRUSS_CONTRACT``)."""
        entry = self.new_entry(kind, key, body, **fields)
        return self.write_entries([entry], settings=settings).entries[0]

    def write_entries(
        self,
        entries: Iterable[Entry],
        *,
        settings: Settings | None = None,
        subject: str | None = None,
    ) -> Written:
        """The one way a face writes: ``entries`` (unverified, from ``new_entry``) in one
        signed commit (``Store.write_many``; ``subject`` is its first line), then the
        verification policy of ``settings`` (default ``settings_for(self)``) on the entries
        that commit added: where it is eager for their kind, the panel runs now, each PASS
        or FAIL a second, panel-signed commit (``panel.eager.verify_written``). An entry
        already stored keeps its own history.

        Returns each entry as it stands after both, the panel's outcomes, and why the
        panel could not run when it could not (say, this key lacks the panel role and no
        ``TRUSS_PANEL_KEY`` is set): the entries then stay unverified for ``verify``.
        ``truss-files write`` comes here; ``write_memory`` and the ``memory`` tool, below the
        facade, call the same ``panel.eager.write_and_verify``."""
        # The panel (its runner, reviewers, judges) loads only on a write, never on a read.
        from .panel.eager import write_and_verify

        return write_and_verify(self, entries, settings=settings, subject=subject)

    def promote(
        self,
        ref: str,
        verdict: Verdict,
        *,
        conflict: str | None = None,
        settings: Settings | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> Entry:
        """Unverified (or stale) -> verified, on a valid PASS ``verdict`` signed for exactly
        this entry by a panel key: one signed commit, which also applies the conflict
        policy to verified entries of the same kind and key. The policy is ``conflict``
        when given, else that of ``settings`` (default ``settings_for(self)``: truss.toml,
        the user config, ``$TRUSS_AGENT``, ``$TRUSS_CONTRACT``), as ``verify`` takes it;
        under ``keep-both-flagged`` both stay verified and every read names the conflict.
        truss.toml's ``panel-arbitrated`` holds whatever is layered (``Store.promote``).
        ``scope``: fields the entry must hold (a tenant), else ``NotFound`` as for no entry;
        the conflict policy then settles only rivals that hold them too."""
        self.entry_within(ref, scope)
        if conflict is None:
            conflict = (settings or settings_for(self)).conflict
        return super().promote(ref, verdict, conflict=conflict, scope=scope)

    def reject(
        self, ref: str, verdict: Verdict, *, scope: Mapping[str, str] | None = None
    ) -> Entry:
        """Unverified -> rejected on a FAIL ``verdict`` (``Store.reject``); ``scope`` as for
        ``promote``."""
        self.entry_within(ref, scope)
        return super().reject(ref, verdict)

    def entry_within(self, ref: str, scope: Mapping[str, str] | None) -> Entry:
        """The entry ``ref`` at the tip, when it holds every field of ``scope``; one outside
        it raises ``NotFound`` worded as for an unknown id, so a tenant cannot tell another's
        entries from none."""
        return _within(self.get(ref), ref, scope)

    def write_for(self, context: RunContext, kind: Kind | str, key: str, body: str) -> Written:
        """A write for a task's run ``context`` (the HTTP face's ``POST .../entries``):
        the task layer, the run's scope (task, team, enterprise, project), its member as
        author, through the one write path (``write_entries``): landing unverified, the
        credential check, the bounds and errors of every write."""
        entry = self.new_entry(
            kind,
            key,
            body,
            layer=Layer.TASK,
            scope=scope_of(context, Layer.TASK),
            author=f"member:{context.member}" if context.member else None,
        )
        return self.write_entries([entry], subject=f"truss: write {entry.kind.value} {key}")

    def pending(
        self,
        *,
        kind: Kind | str | None = None,
        limit: int | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> Queue:
        """The review queue: unverified entries waiting for a verdict, newest session first
        (``review.queue.pending``); ``scope``: fields each must hold (a tenant)."""
        found = Kind.parse(kind) if isinstance(kind, str) else kind
        return _pending(self, kind=found, limit=limit, within=scope)

    def export(
        self,
        min_trust: Trust | str = Trust.VERIFIED,
        *,
        at: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> Exported:
        """The entries at or above ``min_trust`` at the tip (or ``at``), oldest first, through
        the read gate (``store.export``); ``scope``: fields each must hold (a tenant)."""
        found = entries_to_export(self, min_trust, at=at)
        if not scope:
            return found
        kept = tuple(e for e in found.entries if _holds(e, scope))
        return dataclasses.replace(found, entries=kept)

    def verify(
        self,
        ids: Iterable[str] = (),
        *,
        pending: bool = False,
        settings: Settings | None = None,
        on_start: Callable[[int], None] | None = None,
        on_done: Callable[[Any], None] | None = None,
    ) -> Report:
        """Run the verification panel over the named (or, with ``pending``, every)
        unverified entries under ``settings`` (default ``settings_for(self)``): each PASS
        or FAIL its own signed commit (``truss-files verify``). ``on_start`` hears how many
        entries, ``on_done`` each outcome."""
        from .panel.runner import verify  # the panel loads only when it runs

        return verify(
            self, ids, pending=pending, settings=settings, on_start=on_start, on_done=on_done
        )

    def recheck(
        self,
        ids: Iterable[str] = (),
        *,
        all_verified: bool = False,
        settings: Settings | None = None,
        on_start: Callable[[int], None] | None = None,
        on_done: Callable[[Any], None] | None = None,
    ) -> Report:
        """Re-run the checks of the named verified or stale entries (or, with
        ``all_verified``, every verified one): a FAIL demotes to stale, a named stale entry
        that passes is verified again (``truss-files recheck``)."""
        from .panel.runner import recheck  # the panel loads only when it runs

        return recheck(
            self,
            ids,
            all_verified=all_verified,
            settings=settings,
            on_start=on_start,
            on_done=on_done,
        )

    def judge_identity(self, settings: Settings | None = None) -> tuple[list[Judged], str | None]:
        """Judge every pending identity proposal against core when ``[identity] policy`` is
        self_amend (``verify --pending``'s identity half); otherwise nothing, and None. The
        note says why a panel could not run."""
        from .identity.judge import judge_pending  # the panel loads only when it runs

        return judge_pending(self, settings or settings_for(self))

    def decisions_since(self, since: Any) -> dict[str, int]:
        """How many promote, reject and demote commits the branch gained after commit
        ``since`` (None: in all its history), read from their ``Truss-Op`` trailers."""
        ops = {"promote": "promoted", "reject": "rejected", "demote": "demoted"}
        found: dict[str, int] = {}
        tip = self.git.tip()
        if tip is None:
            return found
        walker = self.git.repo.walk(tip.id)
        if since is not None:
            walker.hide(since)
        for commit in walker:
            op = (parse_trailers(commit.message).get("Truss-Op") or [""])[0]
            if op in ops:
                found[ops[op]] = found.get(ops[op], 0) + 1
        return found

    # -- reads -----------------------------------------------------------------------------

    def query(
        self,
        text: str,
        *,
        kind: Kind | str | None = None,
        key: str | None = None,
        layer: Layer | str | None = None,
        min_trust: Trust | str = Trust.VERIFIED,
        limit: int = 10,
        mode: str | None = None,
        reader: Reader | None = None,
        salience: str | None = None,
        at: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> RecallResult:
        """Rank entries at or above ``min_trust`` at the branch tip (filter, then BM25 over
        the candidates, through the recall index and the read gate). ``reader`` applies
        ``memory.scope`` (``scope.Reader``); None reads every scope, as a reviewer does.
        ``at`` (a date or a commit): the store as it was then (``Store.open_read``).
        ``scope``: fields every entry returned holds (a tenant, over HTTP)."""
        gate: Any = self.gate
        if at is None:
            snap = self.snapshot()
        else:
            past = self.open_read(Trust.floor(min_trust), at=at)
            snap, gate = past.snap, asof.Judged(past.withheld)
        config = self.config(snap)
        if reader is not None and reader.mode is None:
            reader = dataclasses.replace(
                reader, mode=str(config.get("memory", "scope", "per-agent"))
            )
        layered = has_layers_above_store(self.environ)
        if salience is None and not layered:
            salience = str(config.get("policy", "salience", "off"))
        found = answer(
            text,
            query_filter(min_trust, kind=kind, key=key, layer=layer, reader=reader, scope=scope),
            limit,
            at=(self, snap),
            gate=gate,
            usage=self._gitdir,
            origin=self.origin,
            mode=mode,
            salience=salience,
            # The layered settings, as the CLI's query and the read tools take them.
            settings=(lambda: settings_for(self, snap=snap)) if layered else None,
            environ=self.environ,
        )
        return found if not scope else _scoped(found, scope)

    def plan_erasure(
        self, refs: Sequence[str], reason: str, *, member: str | None = None
    ) -> ErasurePlan:
        """Every place the entries ``refs`` (and, with ``member``, every entry by or about
        that member) live: what an erasure would rewrite (``store.erase``); operators only."""
        return plan_erasure(self, refs, reason, member=member)

    def erase(self, refs: Sequence[str], reason: str, *, member: str | None = None) -> Erased:
        """Erase the entries ``refs`` (and, with ``member``, every entry by or about that
        member) for good: history rewritten without them, an operator-signed erasure record,
        ledgers, attestations, caches and usage lines cleaned, reflogs expired and
        unreachable objects pruned (``store.erasing``); operators only."""
        return erase(self, refs, reason, member=member)

    @functools.cached_property
    def _gitdir(self) -> GitDir:
        # Found once: every query records its use there (``usage``).
        return GitDir.discover(self.git.git_dir)

    def view(
        self,
        refs: Iterable[str],
        *,
        min_trust: Trust | str = Trust.VERIFIED,
        reader: Reader | None = None,
        at: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> list[Entry]:
        """The entries named by id (or unique 8+ hex prefix) at or above ``min_trust``, through
        the read gate; ids below the floor, rejected, out of scope or unknown are left out.
        ``at`` (a date or a commit): as they were then (``Store.open_read``). ``scope``:
        fields every entry returned holds (a tenant)."""
        floor = Trust.floor(min_trust)
        snap, withheld = self.open_read(floor, at=at)
        flt = Filter(
            min_trust=floor,
            ceiling=Trust.UNVERIFIED if withheld else None,
            reader=reader,
            scope=dict(scope or {}),
        )
        out: dict[str, Entry] = {}
        for ref in refs:
            try:
                entry = self.get(ref, snap)
            except NotFound:
                continue
            if flt.admits(entry):
                out.setdefault(entry.id, entry)
        record(self._gitdir, list(out), self.origin, environ=self.environ)
        return list(out.values())

    def check_verdict(self, verdict: Verdict) -> dict[str, Any] | None:
        """Whether this store accepts ``verdict``: an SSH-signed one against
        .truss/allowed_signers, a keyless one against the trusted root and truss.toml's panel
        role (then its identity, issuer and log index are returned; None for an SSH one). A
        verdict this store refuses raises ``VerdictError`` naming the rule it breaks."""
        policy = self.policy()
        if verdict.bundle is not None or verdict.signer.startswith("sigstore:"):
            keyless = check_keyless(verdict, policy).to_dict()
            check_votes(verdict)
            return keyless
        check_verdict(verdict, verdict.entry, verdict.outcome, policy)
        return None

    def reader_for(self, agent: str, snap: Snapshot | None = None) -> Reader:
        """What ``agent`` may read under the layered ``[memory] scope`` at ``snap`` (the
        branch tip)."""
        snap = snap or self.snapshot()
        return Reader(run_settings(self, snap, agent).memory_scope, agent)

    # -- identity and principals (identity/): the same operations as the CLI's commands ------

    def identity_show(self) -> dict[str, Any]:
        """core.md and self.md in force at the branch tip, through the read gate."""
        return identity_changes.show(self)

    def identity_propose(
        self, text: str, *, settings: Settings | None = None, run: str | None = None
    ) -> Proposed:
        """Store a signed proposal for a new self.md; under self_amend the panel judges it
        when verification is eager for kind ``identity`` (``identity.amend.propose``)."""
        # The panel (through the proposal's eager judging) loads only on a proposal.
        from .identity.amend import propose

        return propose(self, text, settings=settings, run=run)

    def identity_proposals(self, *, status: str | None = "pending") -> list[Proposal]:
        """Identity proposals with ``status`` (None: all), oldest first."""
        return identity_changes.proposals(self, status=status)

    def identity_approve(self, ref: str) -> dict[str, Any]:
        """An operator's approval: self.md becomes proposal ``ref``'s text, one commit."""
        return identity_changes.approve(self, ref)

    def identity_decline(self, ref: str) -> dict[str, Any]:
        """An operator declines proposal ``ref``; it is kept, declined, for the record."""
        return identity_changes.decline(self, ref)

    def identity_set(self, which: str, text: str) -> dict[str, Any]:
        """An operator's change of core.md or self.md (``which``: core, self)."""
        return identity_changes.set_identity(self, which, text)

    def identity_log(self) -> list[Amendment]:
        """Every commit on the branch that changed core.md or self.md, oldest first."""
        return identity_changes.log(self)

    def principal_set(self, name: str, text: str) -> dict[str, Any]:
        """Write principals/NAME.md (that principal's own key or an operator's)."""
        return set_principal(self, name, text)

    def principal_show(self, name: str) -> dict[str, Any]:
        """principals/NAME.md at the branch tip, through the read gate."""
        return show_principal(self, name)

    def runs(self) -> list[RunSummary]:
        """Every durable run recorded in this store: its calls, last update and tip."""
        return list_runs(self)

    def run_ledger(self, run: str) -> RunLedger:
        """The signed ledger of durable run ``run``: its records and whether a replay would
        trust it."""
        return RunLedger(self, run)

    # -- signers, roles, remotes and attestations: the operator's commands ------------------

    def signers(self) -> list[SignerInfo]:
        """Each principal of .truss/allowed_signers, its key, namespaces and roles."""
        return operators.list_signers(self)

    def add_signer(
        self,
        principal: str,
        key: str,
        *,
        source: str,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
    ) -> OperatorResult:
        """Add ``principal``'s public key (the one ssh-ed25519 line of a .pub file's text
        ``key``, read from ``source``) to .truss/allowed_signers, in one signed commit; the key
        alone grants no role."""
        found = operators.read_public_key(key, source)
        return operators.add_signer(self, principal, found, namespaces)

    def remove_signer(self, principal: str) -> OperatorResult:
        """Remove ``principal``'s key from .truss/allowed_signers, in one signed commit."""
        return operators.remove_signer(self, principal)

    def grant_role(self, role: str, principal: str) -> OperatorResult:
        """Give ``principal`` ``role`` in truss.toml [roles] (one of ``ROLES``)."""
        return operators.grant_role(self, role, principal)

    def revoke_role(self, role: str, principal: str) -> OperatorResult:
        """Take ``role`` from ``principal`` in truss.toml [roles]."""
        return operators.revoke_role(self, role, principal)

    def pin_trusted_root(self, data: bytes) -> OperatorResult:
        """Pin a private sigstore deployment's trusted root at .truss/trusted_root.json."""
        return operators.pin_trusted_root(self, data)

    def attest(
        self, rev: str | None = None, *, token: str | None = None, trust_config: str | None = None
    ) -> list[Attested]:
        """Attest ``rev`` (a commit, or ``A..B``; default the tip) keylessly: a sigstore
        bundle over each commit id, as a git note under ``NOTES_REF``."""
        return attest(self, rev, token=token, trust_config=trust_config)

    def sync(self, remote: str = "origin", *, root: str | None = None) -> SyncResult:
        """Bring the store's branch and ``remote``'s in line (``store.sync``); a process that
        asked semantic queries embeds what came in (``recall.engine.embed_written``)."""
        done = sync(self, remote, root=root)
        embed_written(self)
        return done

    def import_entries(
        self,
        entries: Iterable[Entry],
        *,
        subject: str | None = None,
        on_entry: Callable[[int], None] | None = None,
        where: Callable[[int], str] | None = None,
    ) -> list[str]:
        """``Store.import_entries``; a process that asked semantic queries embeds the
        imported notes at once (``recall.engine.embed_written``)."""
        done = super().import_entries(entries, subject=subject, on_entry=on_entry, where=where)
        embed_written(self)
        return done

    def index(self, *, progress: Callable[[int, int], None] | None = None) -> Embedded:
        """Embed every note at the tip that has no vector yet for the store's embedder
        (``[recall] embedder``), so no semantic or hybrid query has to (``truss-files
        index``). ``progress(done, missing)`` hears each batch; an interrupted run keeps what
        it embedded."""
        searcher = Searcher(gate=self.gate, git=self._gitdir, repo=self.git.repo)
        return searcher.embed_missing(progress)

    # -- a belief's life (store/belief.py): the same operations as the CLI's commands ----------

    def salience_update(self, *, dry_run: bool = False) -> belief.Done:
        """Fold use (``.git/truss/usage``), age and trust into each entry's salience, in one
        signed commit (``truss-files salience update``)."""
        return belief.salience_update(self, dry_run=dry_run)

    def evict(self, *, dry_run: bool = False, settings: Settings | None = None) -> belief.Done:
        """Move verified entries over ``[policy.eviction]`` to stale, in one signed commit
        (``truss-files evict``)."""
        return belief.evict(self, dry_run=dry_run, settings=settings)

    def consolidate(self, *, dry_run: bool = False) -> belief.Done:
        """One merged, unverified note per group train flagged (``truss-files consolidate``)."""
        return belief.consolidate(self, dry_run=dry_run)

    def delta_since(self, cursor: str, *, reader: Reader | None = None) -> Delta:
        """What changed in verified L2 since ``cursor`` (from ``context`` or an earlier
        delta), with a new cursor; a bad or unknown cursor raises ``BadCursor``."""
        return _delta_since(self, cursor, reader=reader)

    def context(
        self,
        run: str,
        *,
        principal: str | None = None,
        agent: str | None = None,
        project: str | None = None,
        gates: Iterable[str] = (),
        parent: str | None = None,
        fmt: str | None = None,
        model: str | None = None,
        run_context: RunContext | None = None,
        purpose: str | None = None,
    ) -> Prefix:
        """The prefix of run ``run``: ``context.assemble.build_context`` (its docstring says
        what each option does). The signature is ``Memory.context``'s, which the type
        checker holds this method to (below) and the conformance suite compares."""
        return build_context(
            self,
            run,
            principal=principal,
            agent=agent,
            project=project,
            gates=gates,
            parent=parent,
            fmt=fmt,
            model=model,
            run_context=run_context,
            purpose=purpose,
        )

    def why(self, ref: str, *, scope: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Why the store believes entry ``ref`` (an id or a unique 8+ hex prefix), for
        people: ``{"entry", "history", "produced_by", "sources"}`` (``review.why``), plus
        ``withheld`` when the read gate holds back what is above unverified. As ``show``:
        any trust, and refused (``UntrustedHistory``) for an entry above unverified while
        the branch's history fails the audit; an unknown id raises ``NotFound``, and so does
        one outside ``scope`` (fields the entry must hold: a tenant)."""
        snap = self.snapshot()
        entry = _within(self.get(ref, snap), ref, scope)
        floor = entry.trust if entry.trust.rank > 0 else Trust.UNVERIFIED
        read = self.open_read(floor, snap)
        answer = explain(self, entry, read.snap, lambda run, seq: resolve_call(self, run, seq))
        if read.withheld:
            answer["withheld"] = read.withheld
        return answer

    def compact(self, run: str, summary: str) -> Entry:
        """Record ``summary`` (the harness's own) as run ``run``'s ``context_summary``: one
        unverified entry, the run's own, that stands in for the notes it covers in the run's
        L4 (they stay in the store); ``context`` shows it first."""
        return _compact(self, run, summary)


def _holds(entry: Entry, scope: Mapping[str, str]) -> bool:
    return all(entry.scope.get(k) == v for k, v in scope.items())


def _scoped(result: RecallResult, scope: Mapping[str, str]) -> RecallResult:
    """``result`` whose conflicts and related entries keep to ``scope`` too: a rival of one
    kind and key outside it is none of the reader's business, not even by id."""

    def related() -> list[Entry]:
        return [e for e in result.related if _holds(e, scope)]

    def conflicts() -> list[Conflict]:
        kept = {e.id for e in related()}
        out = []
        for found in result.conflicts:
            ids = tuple(i for i in found.ids if i in kept)
            if len(ids) > 1:
                out.append(dataclasses.replace(found, ids=ids))
        return out

    return dataclasses.replace(result, _conflicts=conflicts, _related=related)


def _within(entry: Entry, ref: str, scope: Mapping[str, str] | None) -> Entry:
    # Worded as ``Store.resolve`` words an unknown id: outside the tenant reads as no entry.
    if scope and not _holds(entry, scope):
        raise NotFound(f"no entry with id {ref.strip().lower()}; list ids with `truss-files list`")
    return entry


# -- what faces ask besides a store's own operations ------------------------------------------


def effective_settings(
    store: MemoryStore | None,
    *,
    agent: str | None = None,
    contract: str | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> tuple[Settings, dict[str, Any]]:
    """The layered settings (built-in defaults, ``store``'s truss.toml, the user config,
    ``[agents.agent]``, ``contract``) and which ``[context.instruction]`` entry applies for
    ``provider`` and ``model``: ``{"applies", "provider", "model", "source"}``. Outside a
    store (None, or one whose truss.toml cannot be read) only the user config file and the
    contract apply (``truss-files config show``)."""
    raw = None
    if store is not None:
        with contextlib.suppress(StoreError):
            raw = store.config().raw
    settings = load_settings(raw, agent=agent, contract=contract)
    found = pick(instruction_table(settings), provider, model)
    name = found[0] if found is not None else BUILT_IN
    key = f"context.instruction.{name}"
    if key not in settings.values and name == "default":
        key = "context.instruction"
    source = settings.values[key].source if key in settings.values else "default"
    return settings, {"applies": name, "provider": provider, "model": model, "source": source}


def tenant_scope(context: RunContext) -> dict[str, str]:
    """The scope fields every entry a task's tenant may reach holds (``tools.tenancy``): the
    ``scope`` the HTTP face passes to every read and decision of the whole store."""
    return _tenant_scope(context)


def export_record(entry: Entry) -> dict[str, Any]:
    """One entry as the JSON line ``export --format jsonl`` writes and ``import`` reads, a
    credential found in it masked as every output of stored text masks it (``shown``)."""
    return _export_record(shown(entry))


def read_verdict(text: str, source: str) -> Verdict:
    """A verdict file's text as a ``Verdict`` (``source`` names it in errors); check it with
    ``MemoryStore.check_verdict``."""
    return Verdict.from_json(text, source)


def scope_stamp(pairs: Iterable[str], *, agent: str | None = None) -> dict[str, str]:
    """The scope stamp of a write from ``KEY=VALUE`` pairs and the writing agent."""
    return dict(stamp(parse_scope_pairs(tuple(pairs)), agent=agent))


def init(path: str | os.PathLike[str], signer: Signer, principal: str) -> InitResult:
    """Make (or join) a store at ``path``: the trust root, ``signer``'s key as ``principal``
    with the operator role, in one signed commit (``truss-files init``)."""
    return init_store(path, signer, principal)


def audit_history(
    path: str | os.PathLike[str],
    rev_range: str | None = None,
    *,
    root: str | None = None,
    on_commit: Callable[[str, int, int], None] | None = None,
) -> AuditReport:
    """Re-check the history of the repository at ``path`` (``A..B``, one commit, or the
    branch) from the trust root, without opening the store (``truss-files audit``), naming
    the entries it adds that hold a credential too (``AuditReport.secrets``)."""
    return audit(GitStore(path), rev_range, root=root, on_commit=on_commit, secrets=True)


def repair(path: str | os.PathLike[str], *, force: bool = False) -> Repaired:
    """Clear stale locks, replay interrupted writes and bring the store paths of the work
    tree back in step with the branch, without opening the store (``truss-files repair``)."""
    return GitStore(path).repair(force=force)


def change_set(
    path: str | os.PathLike[str], rev_range: str, *, root: str | None = None
) -> ChangeSet:
    """The semantic change set of ``rev_range`` in the repository at ``path`` (``truss-files
    diff``)."""
    return diff_change_set(GitStore(path), rev_range, root=root)


def run_resource(store: Store, run: str, uri: str, agent: str | None) -> str:
    """An MCP resource's text as run ``run`` sees it: identity (``truss://identity/core``,
    ``truss://identity/self``) as of the run's start (the tip when the run has not started),
    goals (``truss://goals``) at the tip -- through the read gate, like the context."""
    tip = store.open_read(Trust.VERIFIED).snap
    start = load_start(store, run)
    if uri == "truss://goals":
        agent = start.agent if start is not None else agent
        reader = Reader(run_settings(store, tip, agent).memory_scope, agent)
        goals = tuple(goal_ledger(store, tip, reader))
        if start is None:
            return "\n".join(f"- {g.key} ({g.id[:12]}): {g.body}" for g in map(shown, goals))
        return Prefix(start.run, start, False, (), (), goals, (), "", "").goal_text()
    snap = store.snapshot(start.commit) if start is not None else tip
    core, self_ = identity_layers(snap, None)
    return (core if uri.endswith("/core") else self_).text


if TYPE_CHECKING:

    def _conforms(store: MemoryStore) -> Memory:
        return store  # the type checker holds MemoryStore to the Memory protocol
