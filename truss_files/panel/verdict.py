"""Signed panel verdicts.

A verdict is canonical JSON — entry id, outcome, votes with evidence, quorum, policy, time,
signer — plus an SSHSIG signature in namespace ``truss-verdict`` over that JSON. Its id is
the hash of the signed payload, so editing any vote after signing changes what must verify.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import VERDICT_NAMESPACE, TrustPolicy
from ..errors import SignatureError, VerdictError
from ..signing import Signer

OUTCOMES = ("PASS", "FAIL")
# A vote may also be ABSTAIN: a reviewer that could not judge (a hang, a crash, a garbled
# answer). Abstentions count neither way; see panel.panel.tally.
VOTE_VALUES = ("PASS", "FAIL", "ABSTAIN")
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

    def payload(self) -> bytes:
        body = {
            "entry": self.entry,
            "outcome": self.outcome,
            "votes": [dict(v) for v in self.votes],
            "quorum": self.quorum,
            "policy": self.policy,
            "time": self.time,
            "signer": self.signer,
            "key": self.key,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def id(self) -> str:
        return hashlib.sha256(self.payload()).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.payload())
        data["verdict_id"] = self.id
        data["signature"] = self.signature
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
) -> Verdict:
    if outcome not in OUTCOMES:
        raise VerdictError(f"outcome must be PASS or FAIL, not {outcome!r}")
    unsigned = Verdict(
        entry=entry_id,
        outcome=outcome,
        votes=tuple(dict(v) for v in votes),
        quorum=quorum,
        policy=policy,
        time=now,
        signer=principal,
        key=signer.public_line,
    )
    signature = signer.sign(unsigned.payload(), VERDICT_NAMESPACE)
    return Verdict(**{**unsigned.__dict__, "signature": signature})


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


def check_votes(verdict: Verdict) -> None:
    """Raise unless the votes carry the outcome under the verdict's own ``K-of-N`` quorum.

    A panel key could sign a PASS over FAIL votes by mistake; the record must agree with
    itself. Quorum texts other than ``K-of-N`` (none are written today) are not tallied.
    """
    from .panel import parse_quorum_text, tally

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
    if len(votes) != size or need > size:
        raise VerdictError(
            f"verdict {verdict.id} states quorum {verdict.quorum} but holds {len(votes)} votes"
        )
    if tally(votes, need) != verdict.outcome:
        raise VerdictError(
            f"verdict {verdict.id} says {verdict.outcome} but its votes "
            f"({', '.join(votes)}) do not reach that under quorum {verdict.quorum}"
        )
