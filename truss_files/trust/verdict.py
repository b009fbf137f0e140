"""Signed panel verdicts.

A verdict is canonical JSON — entry id, outcome, votes with evidence, quorum, policy, time,
signer — plus an SSHSIG signature in namespace ``truss-verdict`` over that JSON. Its id is
the hash of the signed payload, so editing any vote after signing changes what must verify.

A keyless verdict is signed with sigstore instead: its signer is a ``sigstore:<issuer>|
<identity>`` principal, its key is ``sigstore``, its signature empty, and its ``bundle`` (a
sigstore bundle over the same canonical JSON) proves who signed it. Like the signature, the
bundle is not part of the payload, so it does not change the verdict's id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import KeylessError, SignatureError, UsageError, VerdictError
from ..format.quorum import parse_quorum_text, tally, with_requirements
from ..signing import Signer, keyless
from ..signing.trustpolicy import VERDICT_NAMESPACE, TrustPolicy

OUTCOMES = ("PASS", "FAIL")
# A vote may also be ABSTAIN: a reviewer that could not judge (a hang, a crash, a garbled
# answer). Abstentions count neither way; see panel.panel.tally.
VOTE_VALUES = ("PASS", "FAIL", "ABSTAIN")
KEYLESS_PREFIX = "sigstore:"
_BLOB = re.compile(r"[0-9a-f]{40}")
_ID = re.compile(r"[0-9a-f]{32}")
_FIELDS = ("entry", "outcome", "votes", "quorum", "policy", "time", "signer", "key")


@dataclass(frozen=True)
class Verdict:
    entry: str
    outcome: str
    votes: tuple[Mapping[str, Any], ...]
    quorum: str
    policy: str
    time: str
    signer: str
    key: str
    signature: str = ""
    bundle: Mapping[str, Any] | None = None
    # The entry file's blob id the verdict judged (``basis``): a verdict authorises the one
    # transition out of that state, so it cannot be replayed after a demotion changed the
    # file. Optional in the payload (older verdicts have none), as is ``arbitration``: the
    # arbiters' decision, ``{"rival": id, "quorum": ..., "votes": [...]}``, that lets a PASS
    # supersede a verified rival under conflict policy panel-arbitrated.
    basis: str | None = None
    arbitration: Mapping[str, Any] | None = None

    def payload(self) -> bytes:
        body: dict[str, Any] = {
            "entry": self.entry,
            "outcome": self.outcome,
            "votes": [dict(v) for v in self.votes],
            "quorum": self.quorum,
            "policy": self.policy,
            "time": self.time,
            "signer": self.signer,
            "key": self.key,
        }
        if self.basis is not None:
            body["basis"] = self.basis
        if self.arbitration is not None:
            body["arbitration"] = dict(self.arbitration)
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def id(self) -> str:
        return hashlib.sha256(self.payload()).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.payload())
        data["verdict_id"] = self.id
        data["signature"] = self.signature
        if self.bundle is not None:
            data["bundle"] = dict(self.bundle)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def summary(self) -> dict[str, str]:
        return {"verdict_id": self.id, "outcome": self.outcome, "signer": self.signer}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "verdict") -> Verdict:
        if not isinstance(data, Mapping):
            raise VerdictError(f"{source}: a verdict is a JSON object")
        missing = [f for f in (*_FIELDS, "signature") if f not in data]
        if missing:
            raise VerdictError(f"{source}: missing field(s) {', '.join(missing)}")
        votes = data["votes"]
        if not isinstance(votes, list) or not all(isinstance(v, Mapping) for v in votes):
            raise VerdictError(f"{source}: 'votes' must be a list of objects")
        for name in (*_FIELDS, "signature"):
            if name != "votes" and not isinstance(data[name], str):
                raise VerdictError(f"{source}: '{name}' must be a string")
        bundle = data.get("bundle")
        if bundle is not None and not isinstance(bundle, Mapping):
            raise VerdictError(f"{source}: 'bundle' must be a sigstore bundle (a JSON object)")
        basis = data.get("basis")
        if basis is not None and not (isinstance(basis, str) and _BLOB.fullmatch(basis)):
            raise VerdictError(f"{source}: 'basis' must be the entry file's 40-hex blob id")
        arbitration = data.get("arbitration")
        if arbitration is not None:
            check_arbitration(arbitration, source)
        verdict = cls(
            entry=data["entry"],
            outcome=data["outcome"],
            votes=tuple(dict(v) for v in votes),
            quorum=data["quorum"],
            policy=data["policy"],
            time=data["time"],
            signer=data["signer"],
            key=data["key"],
            signature=data["signature"],
            bundle=dict(bundle) if bundle is not None else None,
            basis=basis,
            arbitration=dict(arbitration) if arbitration is not None else None,
        )
        claimed = data.get("verdict_id")
        if claimed is not None and claimed != verdict.id:
            raise VerdictError(
                f"{source}: verdict_id {claimed} does not match its content ({verdict.id}); "
                "the verdict was edited after signing"
            )
        return verdict

    @classmethod
    def from_json(cls, text: str, source: str = "verdict") -> Verdict:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise VerdictError(f"{source}: not JSON ({exc})") from exc
        return cls.from_dict(data, source)


def sign_verdict(
    entry_id: str,
    outcome: str,
    votes: Sequence[Mapping[str, Any]],
    *,
    signer: Signer,
    principal: str,
    quorum: str,
    policy: str,
    now: str,
    basis: str | None = None,
    arbitration: Mapping[str, Any] | None = None,
) -> Verdict:
    unsigned = _unsigned(
        entry_id, outcome, votes, quorum, policy, now, principal, signer.public_line
    )
    if arbitration is not None:
        check_arbitration(arbitration, "arbitration")
    unsigned = replace(
        unsigned,
        basis=basis,
        arbitration=dict(arbitration) if arbitration is not None else None,
    )
    signature = signer.sign(unsigned.payload(), VERDICT_NAMESPACE)
    return replace(unsigned, signature=signature)


def sign_keyless_verdict(
    entry_id: str,
    outcome: str,
    votes: Sequence[Mapping[str, Any]] | None,
    *,
    note: str = "",
    token: str | None,
    trust_config: str | None,
    quorum: str,
    policy: str,
    now: str,
    basis: str | None = None,
) -> Verdict:
    """A verdict signed with sigstore by the identity of ``token`` (or the ambient one)."""
    if outcome not in OUTCOMES:  # before the token is read
        raise VerdictError(f"outcome must be PASS or FAIL, not {outcome!r}")
    identity, raw = keyless.token_identity(token)
    principal = identity.principal
    if votes is None:
        votes = [{"reviewer": principal, "kind": "ci", "vote": outcome, "evidence": {"note": note}}]
    unsigned = _unsigned(
        entry_id, outcome, votes, quorum, policy, now, principal, keyless.KEYLESS_KEY
    )
    unsigned = replace(unsigned, basis=basis)
    _, bundle = keyless.sign(unsigned.payload(), token=raw, trust_config=trust_config)
    return replace(unsigned, bundle=bundle)


def _unsigned(
    entry_id: str,
    outcome: str,
    votes: Sequence[Mapping[str, Any]],
    quorum: str,
    policy: str,
    now: str,
    principal: str,
    key: str,
) -> Verdict:
    """The verdict both signers sign: everything but the signature or bundle."""
    if outcome not in OUTCOMES:
        raise VerdictError(f"outcome must be PASS or FAIL, not {outcome!r}")
    return Verdict(
        entry=entry_id,
        outcome=outcome,
        votes=tuple(dict(v) for v in votes),
        quorum=quorum,
        policy=policy,
        time=now,
        signer=principal,
        key=key,
    )


def check_verdict(verdict: Verdict, entry_id: str, outcome: str, policy: TrustPolicy) -> str:
    """Raise unless ``verdict`` is a valid ``outcome`` verdict for exactly ``entry_id``,
    signed by a key holding the panel role under ``policy``. Returns the signer."""
    if verdict.entry != entry_id:
        raise VerdictError(
            f"verdict {verdict.id} is for entry {verdict.entry}, not {entry_id}; "
            "a verdict applies to exactly one entry"
        )
    if verdict.outcome != outcome:
        raise VerdictError(
            f"verdict {verdict.id} says {verdict.outcome}; this needs a {outcome} verdict"
        )
    if not verdict.votes:
        raise VerdictError(f"verdict {verdict.id} has no votes; an empty panel is not a pass")
    if verdict.arbitration is not None:
        check_arbitration(verdict.arbitration, f"verdict {verdict.id}")
        if verdict.outcome != "PASS":
            raise VerdictError(
                f"verdict {verdict.id} carries an arbitration but says {verdict.outcome}; "
                "an arbiters' decision rides on the PASS that supersedes the rival"
            )
    if verdict.bundle is not None or verdict.signer.startswith(KEYLESS_PREFIX):
        check_keyless(verdict, policy)
        check_votes(verdict)
        return verdict.signer
    try:
        principal, key = policy.check_signature(
            verdict.signature, verdict.payload(), VERDICT_NAMESPACE, {"panel"}
        )
    except SignatureError as exc:
        raise VerdictError(f"verdict {verdict.id}: {exc}") from exc
    check_votes(verdict)
    if key.public_line.split()[:2] != verdict.key.split()[:2]:
        raise VerdictError(f"verdict {verdict.id}: signed by a different key than it names")
    if principal != verdict.signer and verdict.signer not in policy.signers.principals_for(
        key, VERDICT_NAMESPACE
    ):
        raise VerdictError(
            f"verdict {verdict.id} names signer {verdict.signer} but was signed by {principal}"
        )
    return principal


def check_keyless(verdict: Verdict, policy: TrustPolicy) -> Any:
    """Raise unless a keyless verdict's bundle proves that its signer -- a sigstore principal
    holding the panel role -- signed exactly this verdict. Returns what the bundle says
    (identity, issuer, log index). Offline, against the policy's trusted root."""
    what = f"verdict {verdict.id}"
    try:
        claimed = keyless.KeylessIdentity.parse(verdict.signer)
    except UsageError as exc:
        raise KeylessError("sigstore-identity", f"{what}: {exc.message}") from exc
    if claimed is None or verdict.bundle is None or verdict.key != keyless.KEYLESS_KEY:
        raise KeylessError(
            "sigstore-bundle",
            f"{what}: a keyless verdict names a sigstore:<issuer>|<identity> signer, key "
            f"'{keyless.KEYLESS_KEY}' and carries its bundle; this one has signer "
            f"{verdict.signer}, key {verdict.key[:20]!r} and "
            + ("a bundle" if verdict.bundle is not None else "no bundle"),
        )
    panel = policy.config.roles()["panel"]
    if verdict.signer not in panel:
        others = [keyless.KeylessIdentity.parse(p) for p in panel if keyless.is_keyless(p)]
        same = [o for o in others if o is not None and o.identity == claimed.identity]
        rule = "sigstore-issuer" if same else "sigstore-identity"
        raise KeylessError(
            rule,
            f"{what}: {verdict.signer} does not hold the panel role in truss.toml [roles]"
            + (f" (the panel trusts that identity from {same[0].issuer} only)" if same else "")
            + "; an operator grants it with `truss-files roles grant panel "
            f"'{verdict.signer}'`",
        )
    return keyless.verify(verdict.payload(), verdict.bundle, claimed, policy.trusted_root, what)


def check_arbitration(data: object, source: str) -> None:
    """Raise unless ``data`` is an arbiters' decision: the rival's id and the arbiters'
    votes, every one PASS (arbitration is unanimous)."""
    if not isinstance(data, Mapping):
        raise VerdictError(f"{source}: 'arbitration' must be an object")
    rival, votes = data.get("rival"), data.get("votes")
    if not (isinstance(rival, str) and _ID.fullmatch(rival)):
        raise VerdictError(f"{source}: arbitration.rival must be the rival entry's 32-hex id")
    if not isinstance(votes, list) or not votes or not all(isinstance(v, Mapping) for v in votes):
        raise VerdictError(f"{source}: arbitration.votes must be a non-empty list of votes")
    against = [str(v.get("vote")) for v in votes if v.get("vote") != "PASS"]
    if against:
        raise VerdictError(
            f"{source}: arbitration holds vote(s) {', '.join(against)}; the arbiters choose "
            "the new entry only unanimously (every vote PASS)"
        )


def check_votes(verdict: Verdict) -> None:
    """Raise unless the votes carry the outcome under the verdict's own ``K-of-N`` quorum.

    Votes marked ``"required": true`` are requirements (format/quorum.py): each must PASS besides
    the quorum, which counts the others. A panel key could sign a PASS over FAIL votes by
    mistake; the record must agree with itself. Quorum texts other than ``K-of-N`` (none
    are written today) are not tallied.
    """
    quorum = parse_quorum_text(verdict.quorum)
    if quorum is None:
        return
    need, size = quorum
    votes = [str(v.get("vote", "")) for v in verdict.votes]
    bad = sorted({v for v in votes if v not in VOTE_VALUES})
    if bad:
        raise VerdictError(
            f"verdict {verdict.id} holds vote(s) {', '.join(bad)}; votes are PASS, FAIL or ABSTAIN"
        )
    required = [str(v.get("vote")) for v in verdict.votes if v.get("required") is True]
    counted = [str(v.get("vote")) for v in verdict.votes if v.get("required") is not True]
    if len(counted) != size or need > size:
        raise VerdictError(
            f"verdict {verdict.id} states quorum {verdict.quorum} but holds {len(counted)} "
            "votes it counts"
        )
    if with_requirements(tally(counted, need), required) != verdict.outcome:
        raise VerdictError(
            f"verdict {verdict.id} says {verdict.outcome} but its votes "
            f"({', '.join(votes)}) do not reach that under quorum {verdict.quorum}"
            + (f" with {len(required)} required" if required else "")
        )
