"""The store: every change of belief is one signed commit.

write → unverified; promote (PASS verdict) → verified; reject (FAIL verdict) → rejected;
demote → stale; supersede links a newer verified entry over an older one; revert undoes a
trust transition with a signed revert commit. Reads are snapshots of the branch tip.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pygit2

from ..errors import (
    ConfigError,
    ConflictError,
    EntryError,
    KeylessError,
    NotFound,
    SignatureError,
    StoreError,
    TransitionError,
    TrussError,
    UsageError,
    VerdictError,
)
from ..format import entryfile
from ..format.secrets import Allow, entry_fields, mask, refuse, scan_fields, without_private
from ..format.trailers import Clock, parse_trailers, stamp, trailers, utc_now
from ..git.bulkpack import Added, PackWriter
from ..git.gitdir import GitDir
from ..git.gitstore import GitStore, Identity, Plan, Snapshot
from ..model import (
    CONFLICT_POLICIES,
    MAX_BODY,
    Entry,
    Kind,
    Layer,
    Provenance,
    Trust,
    body_size,
    check_key,
    check_ledger_ref,
    check_unicode,
    entry_path,
    merged_notes,
    normalize_body,
)
from ..signing import PublicKey, Signer
from ..signing.keys import load_signer
from ..signing.trustpolicy import (
    CONFIG_PATH,
    SIGNERS_PATH,
    TRUSTED_ROOT_PATH,
    StoreConfig,
    TrustPolicy,
)
from ..trust import authority
from ..trust.attest import describe_note, read_notes, transition_attest
from ..trust.audit import SpentVerdicts, Vouched, check_note, citation_problems, samples_of
from ..trust.readgate import advance, check_write, gate, refusal
from ..trust.verdict import (
    Verdict,
    check_keyless,
    check_verdict,
    sign_keyless_verdict,
    sign_verdict,
)
from .asof import resolve_at

_HEX_PREFIX = re.compile(r"^[0-9a-f]{8,32}$")


class Read(NamedTuple):
    """A snapshot opened through the read gate (``Store.open_read``)."""

    snap: Snapshot
    # The audit's refusal of the history read, else None: then nothing above unverified may
    # leave this read.
    withheld: str | None


@dataclass(frozen=True)
class Skipped:
    """A file under memories/ that a listing could not read, and why."""

    path: str
    error: str


_GITLINK_NOTE = (
    "is a gitlink (a submodule entry), not an entry file; remove it with "
    "`git rm --cached PATH` and commit"
)


@dataclass(frozen=True)
class LogItem:
    commit: str
    time: str
    op: str
    signer: str
    summary: str
    trust: str | None
    verdict: str | None
    reason: str | None = None  # why a demote happened (its Truss-Reason trailer)
    # A keyless verdict's signer as verified offline, or why it does not verify.
    keyless: str | None = None
    # The commit's sigstore attestation (a git note), verified offline, or why not.
    attested: str | None = None


class Store:
    """The store API every face calls; one instance per repository and signer."""

    def __init__(
        self,
        path: str | os.PathLike[str] = ".",
        *,
        signer: Signer | None = None,
        clock: Clock = utc_now,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.git = GitStore(path)
        self._signer = signer
        self.clock = clock
        self.environ = os.environ if environ is None else environ
        self._policies: dict[tuple[str | None, ...], TrustPolicy] = {}
        # The face a write outside a run came from: it names the entry's LedgerRef,
        # ``<origin>:<principal>`` (model.ORIGINS). Faces set theirs when they open a store.
        self.origin = "api"
        self._checks: dict[str | None, dict[str, str]] = {}
        self._configs: dict[str | None, StoreConfig] = {}

    # -- configuration and identity ------------------------------------------------------

    @property
    def signer(self) -> Signer:
        if self._signer is None:
            self._signer = load_signer(repo_dir=self.git.workdir, environ=self.environ)
        return self._signer

    def snapshot(self, rev: str | None = None) -> Snapshot:
        return self.git.snapshot(rev)

    def policy(self, snap: Snapshot | None = None) -> TrustPolicy:
        snap = snap or self.snapshot()
        # One write asks three times (author, identity, pre-swap check) and the two files
        # rarely change: parse once per pair of blob ids, as audit does.
        key = (
            snap.blob_id(SIGNERS_PATH),
            snap.blob_id(CONFIG_PATH),
            snap.blob_id(TRUSTED_ROOT_PATH),
        )
        found = self._policies.get(key)
        if found is None:
            found = TrustPolicy.from_files(
                snap.read(SIGNERS_PATH), snap.read(CONFIG_PATH), snap.read(TRUSTED_ROOT_PATH)
            )
            self._policies[key] = found
        return found

    def config(self, snap: Snapshot | None = None) -> StoreConfig:
        snap = snap or self.snapshot()
        # Parsed once per truss.toml blob: a query asks for it more than once; and known by
        # commit (a commit's files never change), so a query at a tip seen before reads no tree.
        commit = snap.oid
        found = self._configs.get(commit) if commit is not None else None
        if found is not None:
            return found
        key = snap.blob_id(CONFIG_PATH)
        found = self._configs.get(key)
        if found is None:
            found = StoreConfig.parse(snap.read(CONFIG_PATH))
        if len(self._configs) > 16:
            self._configs.clear()
        self._configs[key] = found
        if commit is not None:
            self._configs[commit] = found
        return found

    def principal(self, snap: Snapshot | None = None) -> str:
        key = PublicKey.from_line(self.signer.public_line)
        name, _ = self.policy(snap).roles_of(key)
        return name

    def require_role(self, need: set[str], snap: Snapshot | None = None) -> str:
        """The principal this store signs as, when it holds one of the ``need`` roles at
        ``snap`` (the tip); else ``SignatureError``, as the check before the branch moves
        would raise -- said before anything is signed."""
        key = PublicKey.from_line(self.signer.public_line)
        principal, held = self.policy(snap).roles_of(key)
        if not held & need:
            raise SignatureError(
                f"signed by {principal} ({key.fingerprint}), who holds "
                f"{', '.join(sorted(held)) or 'no role'}; this needs the "
                f"{' or '.join(sorted(need))} role in truss.toml [roles]"
            )
        return principal

    def identity(self, principal: str) -> Identity:
        env = self.environ
        cfg = self.git.repo.config
        name = env.get("GIT_COMMITTER_NAME") or _cfg(cfg, "user.name") or principal
        email = env.get("GIT_COMMITTER_EMAIL") or _cfg(cfg, "user.email") or principal
        return Identity(name, email)

    def _now(self) -> str:
        return stamp(self.clock())

    def origin_ref(self, snap: Snapshot | None = None) -> str:
        """The LedgerRef of a write outside a run: ``<face>:<principal>`` (``cli:ops@x``).
        No parent commit in it: the ref is part of the entry's id, so writing the same
        text again from the same face stays the same entry (the commit that added it is in
        the history, and the audit checks its signer)."""
        return f"{self.origin}:{self.principal(snap)}"

    # -- reading -------------------------------------------------------------------------

    def iter_entries(
        self,
        snap: Snapshot | None = None,
        kind: Kind | None = None,
        skipped: list[Skipped] | None = None,
    ) -> Iterator[Entry]:
        """Every entry below memories/ (or one kind's folder). With ``skipped``, a file that
        does not parse, or a gitlink, goes there instead of stopping the walk."""
        snap = snap or self.snapshot()
        root = f"memories/{kind.value}" if kind else "memories"
        links: list[str] = []
        for path, blob in snap.walk(root, links):
            if not path.endswith(".md"):
                continue
            if skipped is None:
                yield entryfile.parse(blob.data, path)
                continue
            try:
                yield entryfile.parse(blob.data, path)
            except EntryError as exc:
                skipped.append(Skipped(path, exc.message))
        if skipped is not None:
            skipped.extend(Skipped(path, f"{path}: {_GITLINK_NOTE}") for path in links)

    def get(self, ref: str, snap: Snapshot | None = None) -> Entry:
        """The entry whose id is ``ref`` or starts with it (8+ hex characters, as git takes
        a prefix), at any trust, as the branch holds it (or ``snap``): for people and tools
        that show one entry. Raises ``NotFound`` for no match, ``UsageError`` for a prefix
        that is too short or matches several. Agents read through ``query``/``view``, which
        keep to a trust floor."""
        snap = snap or self.snapshot()
        return entryfile.parse(snap.read(self.resolve(ref, snap)) or b"", self.resolve(ref, snap))

    def resolve(self, ref: str, snap: Snapshot | None = None) -> str:
        """The path of the entry whose id is ``ref`` or starts with it (8+ hex, like git)."""
        snap = snap or self.snapshot()
        ref = ref.strip().lower()
        if not _HEX_PREFIX.match(ref):
            raise UsageError(
                f"'{ref}' is not an entry id; give the 32-hex id or a unique prefix of 8+"
            )
        matches: list[str] = []
        for kind in Kind:
            folder = f"memories/{kind.value}/{ref[:2]}"
            matches.extend(
                f"{folder}/{name}"
                for name in snap.listdir(folder)
                if name.startswith(ref) and name.endswith(".md")
            )
        if not matches:
            raise NotFound(f"no entry with id {ref}; list ids with `truss-files list`")
        if len(matches) > 1:
            ids = ", ".join(Path(m).stem for m in matches)
            raise UsageError(f"id prefix {ref} is ambiguous ({ids}); give more characters")
        return matches[0]

    def list_entries(
        self,
        *,
        kind: Kind | None = None,
        key: str | None = None,
        trust: Trust | None = None,
        layer: Layer | None = None,
        snap: Snapshot | None = None,
        skipped: list[Skipped] | None = None,
    ) -> list[Entry]:
        """Entries matching every filter given, oldest first; see ``iter_entries`` for
        ``skipped``."""
        found = [
            e
            for e in self.iter_entries(snap, kind, skipped)
            if (key is None or e.key == key)
            and (trust is None or e.trust is trust)
            and (layer is None or e.layer is layer)
        ]
        return sorted(found, key=lambda e: (e.created, e.id))

    def same_key(self, entry: Entry, snap: Snapshot) -> list[Entry]:
        """Other entries of the same kind and key (a cheap line scan, then a full parse)."""
        needle = entryfile.key_line(entry.key)
        out = []
        for path, blob in snap.walk(f"memories/{entry.kind.value}"):
            data = blob.data
            if needle in data and not path.endswith(f"{entry.id}.md"):
                other = entryfile.parse(data, path)
                if other.key == entry.key:
                    out.append(other)
        return out

    def gate(self, git: GitDir, commit: str | None) -> str | None:
        """The read gate's verdict on the history up to ``commit`` (None: it audits clean),
        with this store's repository and environment: what recall is given to check the
        commit an index view reads."""
        return refusal(git, commit, store=self.git, environ=self.environ)

    def open_read(
        self,
        floor: Trust = Trust.VERIFIED,
        snap: Snapshot | None = None,
        *,
        at: str | None = None,
    ) -> Read:
        """The one way a read begins: ``snap`` (default: the branch tip) through the read gate
        (``readgate``). Above unverified, a history the audit rejects raises
        ``UntrustedHistory``; at unverified the read goes on with ``withheld`` saying why
        nothing above unverified may leave it.

        ``at`` (a date or a commit, ``asof.resolve_at``): the store as it was then -- the
        snapshot of that commit of the branch's history, its labels and its truss.toml,
        gated as the tip is (a past commit is trusted as far as the history that holds it)."""
        if at is not None:
            if snap is not None:
                raise TypeError("open_read takes a snapshot or at, not both")
            tip = self.snapshot()
            # Resolved in the history of the tip the gate judges, not of a newer one.
            past = resolve_at(self.git, at, self.environ, tip.commit)
            withheld = self.open_read(floor, tip).withheld
            return Read(Snapshot(self.git.repo, past), withheld)
        snap = snap or self.snapshot()
        withheld = gate(
            GitDir.discover(self.git.git_dir),
            snap.oid,
            floor,
            store=self.git,
            environ=self.environ,
        )
        return Read(snap, withheld)

    # -- writing -------------------------------------------------------------------------

    def _apply(
        self,
        plan: Callable[[Snapshot], Plan],
        need: set[str],
        *,
        vetted: Callable[[], Container[str]] = frozenset,
        vouched: Vouched | None = None,
    ) -> tuple[pygit2.Commit, Plan] | None:
        """The one way a change of the store becomes a signed commit: ``plan`` against the
        tip, each new text under memories/ or identity/ refused when it holds a credential
        (``refuse_secrets``; ``vetted()``: paths the caller has just checked itself), then
        the commit checked (signature, roles, authority) before the branch moves.
        ``vouched``: entry files the caller made itself from entries it checked (a bulk
        import), which neither check before nor after the move reads again (``Vouched``)."""
        signer = self.signer

        def secret_free(snap: Snapshot) -> Plan:
            made = plan(snap)
            self.refuse_secrets(made.changes, snap, vetted())
            return made

        def check(commit: pygit2.Commit, parent: Snapshot) -> None:
            # No write on a history the audit rejects: its labels cannot be believed, and a
            # write on it would be lost to the remedy (taking the bad commit off the branch).
            check_write(self.git, parent.oid, self.environ)
            signature, payload = commit.gpg_signature
            if signature is None:
                raise StoreError("refusing to move the branch: the new commit is unsigned")
            policy = self.policy(parent)
            _, key = policy.check_signature(signature.decode(), payload, "git", need)
            principals, held = authority.signer_principals(policy, key)
            added = _added_entries(self.git.repo, parent, commit, vouched)
            samples = vouched.samples if vouched is not None else ()
            authority.check_writes(itertools.chain(samples, added), principals, held)

        tip = self.git.tip()
        # Before planning too: a write whose content is already there makes no commit, and
        # must not answer as if stored on a history the audit rejects.
        check_write(self.git, str(tip.id) if tip is not None else None, self.environ)
        principal = self.principal()
        done = self.git.apply(secret_free, signer, self.identity(principal), check=check)
        if done is not None:
            # The commit is ours and checked: the next read need not audit it again.
            advance(self.git, done[0], self.environ, vouched)
        return done

    def allow(self, snap: Snapshot | None = None) -> Allow:
        """truss.toml's ``[secrets] allow`` at ``snap`` (the tip): the operator's exceptions."""
        return Allow.from_config(self.config(snap).raw)

    def refuse_secrets(
        self,
        changes: Mapping[str, bytes | pygit2.Oid | None],
        snap: Snapshot,
        vetted: Container[str] = frozenset(),
    ) -> None:
        """Raise ``SecretFound`` when a text ``changes`` adds under memories/ or identity/
        holds a credential-shaped value. An entry file already at its path is a trust change
        of text stored before (its path is its content's address): it passes, so a note that
        got in before can still be rejected, demoted or erased."""
        if changes is vetted:
            return  # its maker checked every path (a bulk import's tree: Store.import_entries)
        allow: Allow | None = None
        places: list[str] = []
        for path, data in changes.items():
            if data is None or path in vetted or not path.startswith(("memories/", "identity/")):
                continue
            if isinstance(data, pygit2.Oid):  # a blob a bulk write packed: read it by id
                blob = self.git.repo[data]
                assert isinstance(blob, pygit2.Blob)
                data = blob.data
            if path.startswith("memories/"):
                if snap.blob_id(path) is not None:
                    continue
                fields = entry_fields(entryfile.parse(data, path, check_path=False))
            elif snap.read(path) == data:
                continue
            else:
                fields = [(path, data.decode("utf-8", "replace"))]
            allow = allow or self.allow(snap)
            places += [f"{path}: {place}" for place in scan_fields(fields, allow)]
        refuse(places)

    def new_entry(
        self,
        kind: Kind | str,
        key: str,
        body: str,
        *,
        layer: Layer | str = Layer.TASK,
        scope: Mapping[str, str] | None = None,
        author: str | None = None,
        produced_by: str | None = None,
        sources: Iterable[str] = (),
        salience: float = 0.5,
        checks: Iterable[str] = (),
        unattended: bool = False,
    ) -> Entry:
        """A validated, unverified entry, not yet stored.

        ``unattended``: what a learner writes with no one watching (``learn``, a host hook).
        Its body is kept with each credential replaced by ``[secret:KIND]`` and the kinds in
        ``provenance.masked``, and text inside ``<private>...</private>`` is dropped, instead
        of the write being refused; a credential anywhere else is still refused."""
        sources = tuple(sources)
        masked: tuple[str, ...] = ()
        if unattended:
            body, masked = mask(without_private(body), self.allow())
        try:
            entry = self._new_entry(
                kind, key, body, layer=layer, scope=scope, author=author,
                produced_by=produced_by, sources=sources, salience=salience, checks=checks,
            )  # fmt: skip
            if masked:
                provenance = dataclasses.replace(entry.provenance, masked=masked)
                entry = dataclasses.replace(entry, provenance=provenance)
            return entry
        except TrussError:
            # A refusal that would quote a credential back (a ledger ref's shape rule names
            # what it was given) names it as one instead; the write was refused either way.
            given = [("key", str(key)), ("author", str(author or ""))]
            given += [("provenance.produced_by", str(produced_by or ""))]
            given += [(f"scope.{k}", f"{k}={v}") for k, v in dict(scope or {}).items()]
            given += [(f"provenance.sources[{n}]", str(s)) for n, s in enumerate(sources)]
            refuse(list(scan_fields(given, self.allow())))
            raise

    def _new_entry(
        self,
        kind: Kind | str,
        key: str,
        body: str,
        *,
        layer: Layer | str,
        scope: Mapping[str, str] | None,
        author: str | None,
        produced_by: str | None,
        sources: Iterable[str],
        salience: float,
        checks: Iterable[str],
    ) -> Entry:
        kind = Kind.parse(kind) if isinstance(kind, str) else kind
        layer = Layer.parse(layer) if isinstance(layer, str) else layer
        check_key(key)
        body = normalize_body(check_unicode(body, "body"))
        if not body:
            raise UsageError("body is empty; an entry needs text")
        if body_size(body) > MAX_BODY:
            raise UsageError(f"body is {body_size(body)} bytes; the limit is {MAX_BODY}")
        if produced_by is None:
            produced_by = self.origin_ref()
        check_ledger_ref(produced_by)
        sources = tuple(check_ledger_ref(s) for s in sources)
        if not 0.0 <= salience <= 1.0:
            raise UsageError("salience must be between 0 and 1")
        return Entry(
            kind=kind,
            key=key,
            body=body,
            layer=layer,
            scope=dict(scope or {}),
            author=author or f"agent:{self.principal()}",
            created=self._now(),
            salience=float(salience),
            provenance=Provenance(produced_by=produced_by, sources=sources),
            checks=self.check_names(checks),
        )

    def check_names(self, names: Iterable[object], snap: Snapshot | None = None) -> tuple[str, ...]:
        """``names`` as an entry's ``checks:`` may hold them: names truss.toml's
        ``[panel.checks]`` defines at ``snap`` (the tip), else a ``UsageError`` listing them
        (``authority.require_check_names``)."""
        names = tuple(names)
        if not names:
            return ()
        return authority.require_check_names(names, self.defined_checks(snap))

    def defined_checks(self, snap: Snapshot | None = None) -> dict[str, str]:
        """truss.toml's ``[panel.checks]`` at ``snap`` (the tip): name -> command."""
        snap = snap or self.snapshot()
        key = snap.blob_id(CONFIG_PATH)
        found = self._checks.get(key)
        if found is None:
            found = self._checks[key] = authority.defined_checks(self.config(snap).raw)
        return dict(found)

    def write(self, kind: Kind | str, key: str, body: str, **fields: Any) -> Entry:
        """Store a new entry, unverified. Writing the same content again changes nothing.

        Keyword fields are those of ``new_entry`` (layer, scope, author, produced_by, ...).
        The engine's write: faces write through ``MemoryStore.write`` (facade.py), which
        applies the verification policy after this commit.
        """
        return self.write_many([self.new_entry(kind, key, body, **fields)])[0]

    def write_many(
        self,
        entries: Iterable[Entry],
        *,
        subject: str | None = None,
        labels: Sequence[str] | None = None,
    ) -> list[Entry]:
        """Store many unverified entries in one signed commit (a bulk import).

        Returns each entry as stored: an entry whose content is already there comes back as
        it is in the store (perhaps verified since), and no commit is made for it. Raises
        ``Forbidden`` for a team or enterprise entry, or one in another's name, unless the
        key holds ``trainer`` (``authority.write_problems``), and ``UntrustedHistory`` on a
        history the audit rejects (as every write does). ``subject``: the commit's first
        line (default: ``truss: write KIND KEY``, or ``truss: write N entries``).

        A credential-shaped value in any entry's key, body or front matter refuses the whole
        batch with ``SecretFound`` (nothing is written), naming each place: ``labels`` name
        the entries there (an import's ``FILE:LINE``), else ``entry N``.
        """
        return self._write_batch(entries, subject, labels)[0]

    def _write_batch(
        self,
        entries: Iterable[Entry],
        subject: str | None = None,
        labels: Sequence[str] | None = None,
    ) -> tuple[list[Entry], frozenset[str]]:
        """``write_many``, and the ids of the entries its commit added (those not there
        before): what a write's eager panel runs on (``MemoryStore.write_entries``)."""
        batch = list(entries)
        checked: set[Allow] = set()

        def vet(snap: Snapshot) -> None:
            # Once per allow list, not once per retry of the CAS commit.
            allow = self.allow(snap)
            if allow in checked:
                return
            places: list[str] = []
            for n, entry in enumerate(batch):
                label = labels[n] if labels is not None else f"entry {n + 1}"
                found = scan_fields(entry_fields(entry), allow)
                prefix = f"{label}: " if labels is not None or len(batch) > 1 else ""
                places += [prefix + place for place in found]
            refuse(places)
            checked.add(allow)

        for entry in batch:
            if entry.trust is not Trust.UNVERIFIED or entry.provenance.verified_by:
                raise TransitionError(
                    f"entry {entry.id} is {entry.trust.value}; every write lands unverified"
                )
        stored: dict[str, Entry] = {}
        added: set[str] = set()

        def plan(snap: Snapshot) -> Plan:
            # Runs again on every retry of the CAS commit: both end as the last attempt's.
            stored.clear()
            added.clear()
            vet(snap)
            changes: dict[str, bytes | None] = {}
            for entry in batch:
                # Against the truss.toml this commit goes onto: a check removed since the
                # entry was made (or an Entry built by hand) is refused here too.
                self.check_names(entry.checks, snap)
                if entry.provenance.produced_by is None and authority.provenance_required(
                    self.config(snap).raw
                ):
                    raise UsageError(
                        f"entry {entry.id} has no provenance.produced_by; every new entry "
                        "names where it came from (truss.toml [policy] provenance = "
                        '"required"). Make it with Store.new_entry, which names this face'
                    )
                data = snap.read(entry.path)
                if data is not None:
                    stored[entry.id] = entryfile.parse(data, entry.path)
                elif entry.path not in changes:
                    changes[entry.path] = entryfile.serialize(entry).encode()
                    stored[entry.id] = entry
                    added.add(entry.id)
            new_ids = [e.id for e in batch if e.path in changes]
            only = next(e for e in batch if e.path in changes) if len(changes) == 1 else None
            return Plan(changes, _write_message(subject, new_ids, only))

        paths = frozenset(e.path for e in batch)
        self._apply(plan, {"agent", "operator"}, vetted=lambda: paths)
        return [stored[e.id] for e in batch], frozenset(added)

    def import_entries(
        self,
        entries: Iterable[Entry],
        *,
        subject: str | None = None,
        on_entry: Callable[[int], None] | None = None,
        where: Callable[[int], str] | None = None,
    ) -> list[str]:
        """``write_many`` for an import of any size: ``entries`` is read once, as it comes.

        Each new entry's file goes straight into one pack (``bulkpack``: git fast-import) and
        only its path and blob id are kept, so memory does not grow with the bodies; the
        commit is signed and checked exactly as ``write_many``'s. Returns the id of every
        entry, in order (those already stored included, as ``write_many`` returns them).
        ``on_entry(n)`` is called after the n-th entry is read and packed (progress). An
        error or interruption before the commit leaves the repository as it was.

        A credential-shaped value in any entry refuses the whole import with ``SecretFound``
        once every entry is read, naming each place (``where(n)`` names the n-th entry's
        origin, say FILE:LINE): such an entry is never packed.
        """
        tip = self.git.tip()
        # As every write: never on a history the audit rejects, whatever else is wrong.
        check_write(self.git, str(tip.id) if tip is not None else None, self.environ)
        base = Snapshot(self.git.repo, tip)
        required = authority.provenance_required(self.config(base).raw)
        ids: list[str] = []
        allow = self.allow(base)
        places: list[str] = []
        # One slim entry per (layer, author): what the layer and author rule judges (Vouched).
        shapes: dict[tuple[Layer, str], Entry] = {}
        with PackWriter(self.git.git_dir, base.oid) as pack:
            for n, entry in enumerate(entries, 1):
                self._importable(entry, base, required)
                found = list(scan_fields(entry_fields(entry), allow))
                if found:
                    label = where(n) if where is not None else f"entry {n}"
                    places += [f"{label}: {place}" for place in found]
                    continue
                ids.append(entry.id)
                path = entry.path  # made anew at each ask: once here
                # A path already stored keeps its file (it may be verified since); the same
                # entry twice in the input is the same file at the same path: git keeps one.
                if base.blob_id(path) is None:
                    pack.add(path, entryfile.serialize(entry).encode())
                    shapes.setdefault((entry.layer, entry.author), entry)
                if on_entry is not None:
                    on_entry(n)
            refuse(places)  # before the pack lands: nothing of a refused import is kept
            tree = pack.finish()
        if tree is None:
            return ids
        # What the import adds, read from the tree git built: no path or id is kept here.
        fresh = Added(self.git.repo, base.tree, tree)

        def plan(snap: Snapshot) -> Plan:
            if snap.oid == base.oid:
                changes: Mapping[str, bytes | pygit2.Oid | None] = fresh
                built: pygit2.Oid | None = tree
            else:  # another writer won the race: keep what it stored as it stored it
                if snap.blob_id(CONFIG_PATH) != base.blob_id(CONFIG_PATH):
                    # The entries were judged against the truss.toml the import began on.
                    raise ConflictError(
                        "truss.toml changed while the import ran; nothing was imported, run "
                        "the same command again"
                    )
                changes = {p: oid for p, oid in fresh.items() if snap.blob_id(p) is None}
                built = None
            count = len(changes)
            # Named in the message only when few (``_write_message``): else counted.
            named = (
                [p.rpartition("/")[2].removesuffix(".md") for p in changes] if count <= 100 else []
            )
            only = None
            if len(changes) == 1:
                ((path, oid),) = changes.items()
                assert isinstance(oid, pygit2.Oid)
                blob = self.git.repo[oid]  # packed: read back by id for the subject alone
                assert isinstance(blob, pygit2.Blob)
                only = entryfile.parse(blob.data, path)
            return Plan(changes, _write_message(subject, named, only, count), built)

        # Each fresh file was scanned above as it was read, and checked as an added entry
        # (_importable): the checks around the commit need not read the pack back.
        vouched = Vouched(fresh, samples_of(shapes.values()), base.tree, tree)
        self._apply(plan, {"agent", "operator"}, vetted=lambda: fresh, vouched=vouched)
        return ids

    def _importable(self, entry: Entry, snap: Snapshot, required: bool) -> None:
        """What ``write_many``'s plan refuses of one entry, refused as it is read."""
        if entry.trust is not Trust.UNVERIFIED or entry.provenance.verified_by:
            raise TransitionError(
                f"entry {entry.id} is {entry.trust.value}; every write lands unverified"
            )
        self.check_names(entry.checks, snap)
        if entry.provenance.produced_by is None and required:
            raise UsageError(
                f"entry {entry.id} has no provenance.produced_by; every new entry names where "
                'it came from (truss.toml [policy] provenance = "required"). Make it with '
                "Store.new_entry, which names this face"
            )

    def _transition(
        self,
        ref: str,
        op: str,
        need: set[str],
        change: Callable[[Entry, Snapshot], tuple[dict[str, Entry], dict[str, str]]],
    ) -> Entry:
        """One signed commit that rewrites the entries ``change`` returns."""
        result: list[Entry] = []

        def plan(snap: Snapshot) -> Plan:
            result.clear()
            entry = self.get(ref, snap)
            updates, extra = change(entry, snap)
            changes: dict[str, bytes | None] = {}
            moves = []
            for eid, new in updates.items():
                old = self.get(eid, snap)
                moves.append(f"{eid} {old.trust.value} -> {new.trust.value}")
                changes[new.path] = entryfile.serialize(new).encode()
            result.append(updates[entry.id])
            message = f"truss: {op} {entry.id[:12]} ({entry.kind.value} {entry.key})\n\n"
            message += trailers(op=op, entry=entry.id, trust=moves, **extra)
            return Plan(changes, message)

        done = self._apply(plan, need)
        if done is not None:
            transition_attest(self, done[0])
        return result[0]

    def promote(
        self,
        ref: str,
        verdict: Verdict,
        *,
        conflict: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> Entry:
        """``conflict`` overrides truss.toml's [policy] conflict (the layered settings, which
        ``MemoryStore.promote`` reads when it is not given); truss.toml's panel-arbitrated
        holds whatever it says (``_resolve_conflicts``). ``scope``: fields a rival
        must hold to be settled by the policy (a tenant's promotion leaves another tenant's
        entries of the same kind and key as they are)."""
        return self._decide(ref, verdict, "PASS", conflict, scope)

    def reject(self, ref: str, verdict: Verdict) -> Entry:
        """Unverified -> rejected, on a valid FAIL ``verdict`` signed for exactly this entry
        by a panel key (``sign_verdict(ref, "FAIL", note=...)``): one signed commit. The
        entry stays in the history and never reaches a query again; anything else raises
        ``VerdictError`` or ``TransitionError`` and changes nothing."""
        return self._decide(ref, verdict, "FAIL")

    def _decide(
        self,
        ref: str,
        verdict: Verdict,
        outcome: str,
        conflict: str | None = None,
        within: Mapping[str, str] | None = None,
    ) -> Entry:
        verb = "promoted" if outcome == "PASS" else "rejected"

        def change(entry: Entry, snap: Snapshot) -> tuple[dict[str, Entry], dict[str, str]]:
            if entry.trust is not Trust.UNVERIFIED and not (
                outcome == "PASS" and entry.trust is Trust.STALE
            ):
                raise TransitionError(
                    f"entry {entry.id} is {entry.trust.value}; only unverified (or, on a "
                    f"PASS re-check, stale) entries can be {verb}"
                )
            check_verdict(verdict, entry.id, outcome, self.policy(snap))
            heads = [snap.commit.id] if snap.commit is not None else []
            replayed = authority.replay_problem(
                verdict.id,
                verdict.basis,
                verdict.time,
                entry,
                snap.blob_id(entry.path),
                SpentVerdicts(self.git.repo, heads).spent(verdict),
            )
            if replayed:
                raise VerdictError(f"entry {entry.id}: {replayed}")
            cited = citation_problems(self.git.repo, self.policy(snap), verdict)
            if cited:
                raise VerdictError(f"entry {entry.id}: " + "; ".join(cited))
            new_trust = Trust.VERIFIED if outcome == "PASS" else Trust.REJECTED
            updated = _with_trust(entry, new_trust, verdict.to_dict())
            updates = {entry.id: updated}
            if outcome == "PASS":
                updates = self._resolve_conflicts(updated, snap, conflict, verdict, within)
            return updates, {"verdict": verdict.id}

        op = "promote" if outcome == "PASS" else "reject"
        # A key without the role would sign a commit only to have it refused: say so first.
        self.require_role({"panel", "operator"})
        return self._transition(ref, op, {"panel", "operator"}, change)

    def _resolve_conflicts(
        self,
        entry: Entry,
        snap: Snapshot,
        policy: str | None = None,
        verdict: Verdict | None = None,
        within: Mapping[str, str] | None = None,
    ) -> dict[str, Entry]:
        """Apply the conflict policy to older verified entries of the same kind and key.

        Under panel-arbitrated -- truss.toml's, which a layered ``policy`` cannot loosen, or
        the layered one -- a verified rival is superseded only when ``verdict`` carries the
        arbiters' decision naming it; otherwise ``ConflictError`` (the audit flags a history
        where that happened anyway). With no rival, both may stand (keep-both-flagged)."""
        stored = authority.conflict_policy(self.config(snap).raw)
        policy = policy or stored
        for name in (policy, stored):
            if name not in CONFLICT_POLICIES:
                raise ConfigError(
                    f"{CONFIG_PATH}: policy.conflict '{name}' is unknown; use one of "
                    + ", ".join(CONFLICT_POLICIES)
                )
        updates = {entry.id: entry}
        corrected = self._corrected(entry, snap)
        if corrected is not None:
            updates[corrected.id] = corrected
        for merged in self._merged(entry, snap):
            updates[merged.id] = merged
        rivals = [
            e
            for e in self.same_key(entry, snap)
            if e.trust is Trust.VERIFIED
            and e.id not in updates
            and all(e.scope.get(k) == v for k, v in (within or {}).items())
        ]
        if authority.ARBITRATED in (policy, stored):
            live = [e for e in rivals if e.superseded_by is None]
            arbitration = verdict.arbitration if verdict is not None else None
            problem = authority.arbitration_problem(entry, arbitration, live)
            if problem:
                raise ConflictError(f"entry {entry.id}: {problem}")
            policy = "verified-wins" if live else "keep-both-flagged"
        if not rivals or policy == "keep-both-flagged":
            return updates
        newest = max(rivals, key=lambda e: (e.created, e.id))
        if policy == "latest-wins" and (newest.created, newest.id) > (entry.created, entry.id):
            # The rival is newer: it keeps the key, and the promoted entry is stale at once.
            updates[entry.id] = dataclasses.replace(
                entry, trust=Trust.STALE, superseded_by=newest.id
            )
            return updates
        for rival in rivals:
            updates[rival.id] = dataclasses.replace(
                rival, trust=Trust.STALE, superseded_by=entry.id
            )
        if corrected is None:
            updates[entry.id] = dataclasses.replace(entry, supersedes=newest.id)
        return updates

    def _merged(self, entry: Entry, snap: Snapshot) -> list[Entry]:
        """A consolidated note (``truss-files consolidate``) names the notes it merged in
        its sources (``entry:<id>``); once the panel passes it, each of them still live
        verified turns stale, superseded by it (the panel judged the merge, sources shown):
        each of its own kind and layer only (``authority.may_retire``)."""
        out = []
        for merged in merged_notes(entry):
            try:
                target = self.get(merged, snap)
            except (NotFound, UsageError):
                continue
            if target.id == entry.id or target.kind is not entry.kind:
                continue
            if target.superseded_by is not None or not authority.may_retire(entry, target):
                continue
            if target.trust is Trust.VERIFIED:
                out.append(dataclasses.replace(target, trust=Trust.STALE, superseded_by=entry.id))
            elif target.trust is Trust.UNVERIFIED:  # marked, so nothing merges it again
                out.append(dataclasses.replace(target, superseded_by=entry.id))
        return out

    def _corrected(self, entry: Entry, snap: Snapshot) -> Entry | None:
        """A correction (memory.train) names the note it corrects in ``supersedes``, checked
        when it was written; once the panel passes it, that note turns stale, superseded by
        it, whatever the conflict policy. A note no longer live verified, or of another
        layer (``authority.may_retire``), is left alone."""
        if entry.kind is not Kind.CORRECTION or not entry.supersedes:
            return None
        try:
            target = self.get(entry.supersedes, snap)
        except (NotFound, UsageError):
            return None
        if target.trust is not Trust.VERIFIED or target.superseded_by is not None:
            return None
        if not authority.may_retire(entry, target):
            return None
        return dataclasses.replace(target, trust=Trust.STALE, superseded_by=entry.id)

    def demote(self, ref: str, reason: str, *, verdict: Verdict | None = None) -> Entry:
        """Verified -> stale. ``verdict``: the FAIL verdict of a failed re-check, recorded in
        the commit's trailers (the entry keeps the PASS verdict that once verified it)."""
        if not reason.strip():
            raise UsageError("give a --reason: why is this entry no longer believed?")

        def change(entry: Entry, snap: Snapshot) -> tuple[dict[str, Entry], dict[str, str]]:
            if entry.trust is not Trust.VERIFIED:
                raise TransitionError(
                    f"entry {entry.id} is {entry.trust.value}; only verified entries turn stale"
                )
            stale = dataclasses.replace(entry, trust=Trust.STALE)
            extra = {"reason": " ".join(reason.split())}
            if verdict is not None:
                check_verdict(verdict, entry.id, "FAIL", self.policy(snap))
                extra["verdict"] = verdict.id
                extra["verdict_json"] = json.dumps(
                    verdict.to_dict(), sort_keys=True, separators=(",", ":")
                )
            return {entry.id: stale}, extra

        return self._transition(ref, "demote", {"panel", "operator"}, change)

    def supersede(self, old_ref: str, new_ref: str) -> tuple[Entry, Entry]:
        """Record that verified entry ``new_ref`` replaces ``old_ref``: one signed commit
        (panel or operator role) links both ways (``supersedes`` / ``superseded_by``), and a
        verified ``old_ref`` turns stale, out of default queries. Returns ``(old, new)`` as
        stored. An entry cannot supersede itself (``UsageError``); ``new_ref`` must be
        verified, and ``old_ref`` neither rejected nor superseded by another entry
        (``TransitionError``). Under truss.toml's
        ``[policy] conflict = "panel-arbitrated"``, ``new_ref`` supersedes a verified entry
        of its kind and key only when its verdict carries the arbiters' decision naming it,
        as ``promote`` requires (``ConflictError``)."""
        snap = self.snapshot()
        new_id = self.get(new_ref, snap).id

        def change(old: Entry, snap: Snapshot) -> tuple[dict[str, Entry], dict[str, str]]:
            new = self.get(new_id, snap)
            if new.id == old.id:
                raise UsageError("an entry cannot supersede itself")
            if new.trust is not Trust.VERIFIED:
                raise TransitionError(
                    f"entry {new.id} is {new.trust.value}; promote it before it can "
                    "supersede another"
                )
            if old.trust is Trust.REJECTED:
                raise TransitionError(f"entry {old.id} is rejected; nothing to supersede")
            if old.superseded_by not in (None, new.id):
                # Its link names the entry that replaced it: moving it would rewrite history.
                raise TransitionError(
                    f"entry {old.id} is already superseded by {old.superseded_by}; supersede "
                    f"that one instead (truss-files supersede {old.superseded_by[:12]} "
                    f"{new.id[:12]})"
                )
            if authority.conflict_policy(self.config(snap).raw) == authority.ARBITRATED:
                verdict = new.provenance.verified_by or {}
                arbitration = verdict.get("arbitration")
                problem = authority.arbitration_problem(
                    new,
                    arbitration if isinstance(arbitration, Mapping) else None,
                    [old],
                    f"A supersede by hand cannot stand in for the arbiters: demote "
                    f"{new.id[:12]} and re-check it with [panel] arbiters configured "
                    f"(`truss-files recheck {new.id[:12]}`), and they decide",
                )
                if problem:
                    raise ConflictError(f"entry {new.id}: {problem}")
            trust = Trust.STALE if old.trust is Trust.VERIFIED else old.trust
            return {
                old.id: dataclasses.replace(old, trust=trust, superseded_by=new.id),
                new.id: dataclasses.replace(new, supersedes=old.id),
            }, {"superseded-by": new.id}

        old = self._transition(old_ref, "supersede", {"panel", "operator"}, change)
        return old, self.get(new_id)

    def revert(self, rev: str) -> pygit2.Commit:
        """A signed commit that undoes one trust transition or identity amendment."""
        target = self.git.commit(rev)
        fields = parse_trailers(target.message)
        op = (fields.get("Truss-Op") or [""])[0]
        if op in ("", "write", "init", "identity-propose"):
            raise UsageError(
                f"commit {str(target.id)[:12]} is "
                + (f"a '{op}'" if op else "not a truss-files commit")
                + "; only trust transitions and identity amendments can be reverted "
                "(a write is undone by rejecting or superseding the entry, a proposal by "
                "declining it)"
            )
        if len(target.parents) != 1:
            raise UsageError("only single-parent commits can be reverted")
        parent = Snapshot(self.git.repo, target.parents[0])
        changed = _changed_paths(self.git.repo, target.parents[0], target)

        def plan(snap: Snapshot) -> Plan:
            changes: dict[str, bytes | None] = {}
            for path in changed:
                now, then = snap.read(path), Snapshot(self.git.repo, target).read(path)
                if now != then:
                    raise TransitionError(
                        f"{path} changed again after {str(target.id)[:12]}; revert the later "
                        "commits first"
                    )
                changes[path] = parent.read(path)
                if changes[path] is None:
                    raise UsageError(
                        f"reverting {str(target.id)[:12]} would delete {path}; store history "
                        "only grows"
                    )
            subject = target.message.splitlines()[0]
            message = f'Revert "{subject}"\n\n' + trailers(
                op="revert", reverts=str(target.id), entry=fields.get("Truss-Entry", [])
            )
            return Plan(changes, message)

        # Identity and principal files answer to operators (and their owners), not the panel.
        personal = any(p.startswith(("identity/", "principals/")) for p in changed)
        done = self._apply(plan, {"operator"} if personal else {"panel", "operator"})
        assert done is not None
        transition_attest(self, done[0])
        return done[0]

    # -- verdicts ------------------------------------------------------------------------

    def sign_verdict(
        self,
        ref: str,
        outcome: str,
        *,
        note: str = "",
        votes: Iterable[Mapping[str, Any]] | None = None,
        quorum: str = "1-of-1",
        policy: str = "manual",
        arbitration: Mapping[str, Any] | None = None,
        cites: Iterable[str] = (),
    ) -> Verdict:
        """A verdict (``outcome`` "PASS" or "FAIL") for exactly the entry ``ref`` as it is at
        the tip, signed with this store's key, which must hold the panel role (``UsageError``
        names the fix otherwise). Its ``basis`` is the entry file's blob id, so it authorises
        only the transition out of that state. ``note`` says why; ``votes`` are the reviewers'
        (one vote by this key when omitted); ``quorum`` and ``policy`` are recorded as given;
        ``cites`` are ledger refs (``run:R/N``) the verdict relied on. Nothing is committed:
        hand the verdict to ``promote`` (PASS) or ``reject`` (FAIL)."""
        snap = self.snapshot()
        entry = self.get(ref, snap)
        principal = self.principal()
        _, roles = self.policy().roles_of(_public(self.signer))
        if "panel" not in roles:
            raise UsageError(
                f"{principal} does not hold the panel role; a verdict from this key would be "
                "refused. Ask an operator to add you to [roles] panel in truss.toml"
            )
        votes = (
            list(votes)
            if votes is not None
            else [
                {
                    "reviewer": principal,
                    "kind": "human",
                    "vote": outcome,
                    "evidence": {"note": note, **({"cites": list(cites)} if cites else {})},
                }
            ]
        )
        return sign_verdict(
            entry.id,
            outcome,
            votes,
            signer=self.signer,
            principal=principal,
            quorum=quorum,
            policy=policy,
            now=self._now(),
            basis=snap.blob_id(entry.path),
            arbitration=arbitration,
        )

    def sign_keyless_verdict(
        self,
        ref: str,
        outcome: str,
        *,
        note: str = "",
        token: str | None = None,
        trust_config: str | None = None,
    ) -> Verdict:
        """A verdict signed with sigstore by the OIDC identity of ``token`` (or the ambient
        one in CI); refused before signing when that identity does not hold the panel role."""
        # sigstore is an optional extra: only a keyless verdict loads it.
        from ..signing import keyless

        snap = self.snapshot()
        entry = self.get(ref, snap)
        identity, raw = keyless.token_identity(token)
        if identity.principal not in self.config().roles()["panel"]:
            raise UsageError(
                f"{identity.principal} does not hold the panel role; a verdict it signs would "
                "be refused. Ask an operator to run `truss-files roles grant panel "
                f"'{identity.principal}'`"
            )
        return sign_keyless_verdict(
            entry.id,
            outcome,
            None,
            note=note,
            token=raw,
            trust_config=trust_config,
            quorum="1-of-1",
            policy="manual",
            now=self._now(),
            basis=snap.blob_id(entry.path),
        )

    # -- history -------------------------------------------------------------------------

    def log(self, ref: str) -> list[LogItem]:
        """Every commit on the branch that touched the entry, oldest first."""
        path = self.resolve(ref)
        items = []
        repo = self.git.repo
        tip = self.git.tip()
        if tip is None:
            return []
        notes = read_notes(repo)
        walker = repo.walk(
            tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
        )
        for commit in walker:
            blob = _blob_at(commit, path)
            before = _blob_at(commit.parents[0], path) if commit.parents else None
            if blob == before:
                continue
            fields = parse_trailers(commit.message)
            trust = None
            keyless = None
            if blob is not None:
                data = repo[blob].data  # type: ignore[attr-defined]
                parsed = entryfile.parse(data, path)
                trust = parsed.trust.value
                if before is not None and commit.parents:
                    keyless = self._keyless_of(parsed, commit, before, path)
            items.append(
                LogItem(
                    commit=str(commit.id),
                    time=stamp(datetime.datetime.fromtimestamp(commit.commit_time, datetime.UTC)),
                    op=(fields.get("Truss-Op") or ["?"])[0],
                    signer=self._signer_of(commit),
                    summary=commit.message.splitlines()[0],
                    trust=trust,
                    verdict=next(iter(fields.get("Truss-Verdict", [])), None),
                    reason=next(iter(fields.get("Truss-Reason", [])), None),
                    keyless=keyless,
                    attested=self._attested(commit, notes),
                )
            )
        return items

    def _keyless_of(
        self, entry: Entry, commit: pygit2.Commit, before: Any, path: str
    ) -> str | None:
        """How a keyless verdict that this commit recorded checks out, offline."""
        verdict = entry.provenance.verified_by
        if not verdict or "bundle" not in verdict:
            return None
        old = entryfile.parse(self.git.repo[before].data, path)  # type: ignore[attr-defined]
        if old.provenance.verified_by == verdict:
            return None  # recorded by an earlier commit
        try:
            found = check_keyless(
                Verdict.from_dict(verdict), self.policy(Snapshot(self.git.repo, commit.parents[0]))
            )
        except KeylessError as exc:
            return f"INVALID [{exc.rule}] {exc.detail}"
        except TrussError as exc:
            return f"INVALID {exc.message}"
        return f"{found.identity} via {found.issuer}, log index {found.log_index}"

    def _attested(self, commit: pygit2.Commit, notes: Mapping[str, Any]) -> str | None:
        note = notes.get(str(commit.id))
        if note is None:
            return None
        found = check_note(self.git.repo, commit, note)
        if found:
            return "INVALID " + "; ".join(f"[{v.rule}] {v.message}" for v in found)
        said = describe_note(self.git.repo, note) or {}
        return f"{said.get('signer')}, log index {said.get('log_index')}"

    def _signer_of(self, commit: pygit2.Commit) -> str:
        signature, payload = commit.gpg_signature
        if signature is None:
            return "unsigned"
        parent = Snapshot(self.git.repo, commit.parents[0] if commit.parents else commit)
        try:
            principal, _ = self.policy(parent).check_signature(
                signature.decode(), payload, "git", set()
            )
        except Exception as exc:  # noqa: BLE001 - log shows, audit judges
            return f"INVALID ({exc})"
        return principal


def _with_trust(entry: Entry, trust: Trust, verdict: Mapping[str, Any] | None) -> Entry:
    prov = dataclasses.replace(entry.provenance, verified_by=verdict)
    return dataclasses.replace(entry, trust=trust, provenance=prov)


def _public(signer: Signer) -> Any:
    return PublicKey.from_line(signer.public_line)


def _cfg(cfg: pygit2.Config, name: str) -> str | None:
    try:
        return str(cfg[name])
    except KeyError:
        return None


def _blob_at(commit: pygit2.Commit, path: str) -> pygit2.Oid | None:
    try:
        return commit.tree[path].id
    except KeyError:
        return None


def _write_message(
    subject: str | None, new_ids: list[str], only: Entry | None, count: int | None = None
) -> str:
    """The message of a write of ``new_ids`` (``only``: the one entry, when one); ``count``:
    how many there are, when more than a hundred (then ``new_ids`` need not be listed)."""
    count = len(new_ids) if count is None else count
    if subject is not None:
        first = " ".join(subject.split())  # one line: nothing of it reads as a trailer
    elif only is not None:
        first = f"truss: write {only.kind.value} {only.key}"
    else:
        first = f"truss: write {count} entries"
    # Name each entry in the trailers of ordinary writes; a bulk import just counts.
    named = trailers(entry=new_ids) if count <= 100 else trailers(entries=str(count))
    message = f"{first}\n\n" + trailers(op="write") + "\n" + named
    return message + "\n" + trailers(trust="none -> unverified")


def _added_entries(
    repo: pygit2.Repository, parent: Snapshot, commit: pygit2.Commit, vouched: Vouched | None
) -> Iterator[Entry]:
    """The entry files ``commit`` adds under memories/ (what the layer rule judges), but
    those ``vouched`` for (their samples stand for them)."""
    if vouched is not None and vouched.whole(parent.tree, commit):
        return
    if parent.tree is None:
        diff = commit.tree.diff_to_tree(swap=True)
    else:
        diff = parent.tree.diff_to_tree(commit.tree)
    for delta in diff.deltas:
        path = delta.new_file.path
        if delta.status_char() == "A" and path.startswith("memories/") and path.endswith(".md"):
            if vouched is not None and vouched.covers(
                path, (int(delta.new_file.mode), str(delta.new_file.id))
            ):
                continue
            # The blob id from the diff: one read each, no tree lookup per path.
            blob = repo[delta.new_file.id]
            yield entryfile.parse(blob.data if isinstance(blob, pygit2.Blob) else b"", path)


def _changed_paths(repo: pygit2.Repository, a: pygit2.Commit, b: pygit2.Commit) -> list[str]:
    diff = a.tree.diff_to_tree(b.tree)
    paths = set()
    for delta in diff.deltas:
        paths.add(delta.old_file.path)
        paths.add(delta.new_file.path)
    return sorted(paths)


__all__ = ["EntryError", "LogItem", "Read", "Skipped", "Store", "entry_path"]
