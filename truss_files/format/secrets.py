"""Credential-shaped values: found in text before it becomes memory.

A note is a blob in a signed history that ``sync`` pushes to every clone: a token stored once
costs an erasure and every clone's next sync to take out again. So the store refuses one on
the way in (``Store._apply`` calls ``refuse``; the error names the kind and where, never the
value), what is learned unattended keeps its lesson with the value masked (``mask``), and the
audit finds one that got in before (``find`` over stored text).

Detection is value-shaped and precision first. detect-secrets' regex plugins do most of the work,
chosen by measurement (``_PLUGINS``): its high-entropy plugins are left out because git SHAs,
sha256 digests and UUIDs are high-entropy hex that notes hold all the time; its public-IP
plugin because an address is not a credential; its keyword plugin because it reads
``password = x`` in prose as a secret. The shapes it lacks that agents meet today (Anthropic,
OpenAI project keys, GitHub fine-grained tokens, ...) are ``_SHAPES`` here. Every candidate
a plugin's regex finds is confirmed by the plugin's own ``analyze_string``, so its filters
(a JWT must decode) hold.

The detectors run only where a credential can be (``_windows``: around a long dense run, a
URL, a key's BEGIN line), and detect-secrets (with the ``requests`` its base module imports)
loads only for a text that has such a place: a write or an output of stored text that holds
nothing of the kind never imports it.

The module sits on the format floor because every floor that turns an entry into output
masks with it (format/views.py ``shown``), and the write path (store/store.py) checks with it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..errors import ConfigError, SecretFound
from ..model import Entry

__all__ = [
    "Allow",
    "Hit",
    "entry_fields",
    "find",
    "mask",
    "refuse",
    "scan_fields",
    "shown",
    "where",
    "without_private",
]

# detect-secrets plugin class -> the kinds a message names (one per regex of the plugin, the
# last for the rest: AWS finds the key id, then a secret key assigned to a name), its gate,
# and its reach. The gate is a few cheap regexes over the lowered text, one of which every
# match of the plugin's regexes holds: where they find nothing, those do not run. Each gate
# regex starts with a literal, which the regex engine looks for as a plain substring: one
# starting with an alternation or a class is tried at every offset, ~10x slower. A plugin
# regex that tries at every offset (an assignment, a leading character class) runs only in
# a window ``reach`` = (before, after) around each place a gate found. Measured on 10 KB of
# conversation (benchmarks/bench_secrets.py): every regex over the whole text, ~19 ms;
# gated, ~1.5 ms; gated and in ``_windows``, well under 0.5 ms.
_KEYWORDS = ("key", "pwd", "pw", "password", "pass", "token")
_ASSIGNED = rf"(?:{'|'.join(_KEYWORDS)})"
_NEAR = (40, 160)  # an assignment: a name before the keyword, `= "value"` after it
_PLUGINS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[int, int] | None]] = {
    "artifactory.ArtifactoryDetector": (
        ("artifactory-token", "artifactory-password"),
        (r"akc[a-z0-9]{8}", r"ap[\da-f][a-z0-9]{8}"),
        (1, 512),
    ),
    "aws.AWSKeyDetector": (
        ("aws-access-key-id", "aws-secret-access-key"),
        (
            "aws",
            r"a3t[a-z0-9]{17}",
            r"abia[0-9a-z]{16}",
            r"acca[0-9a-z]{16}",
            r"akia[0-9a-z]{16}",
            r"asia[0-9a-z]{16}",
        ),
        None,
    ),
    "azure_storage_key.AzureStorageKeyDetector": (("azure-storage-key",), ("accountkey=",), None),
    "basic_auth.BasicAuthDetector": (("password-in-url",), (r"://[^\s@]+@",), None),
    "cloudant.CloudantDetector": (
        ("cloudant-credentials",),
        (rf"cl(?:oudant|ou)?[-_]?(?:api)?{_ASSIGNED}", r"cloudant\.com"),
        (512, 160),
    ),
    "discord.DiscordBotTokenDetector": (
        ("discord-bot-token",),
        (r"\.[a-z\d_-]{6}\.[a-z\d_-]{27}",),
        (26, 36),
    ),
    "github_token.GitHubTokenDetector": (("github-token",), (r"gh[pousr]_",), None),
    "gitlab_token.GitLabTokenDetector": (
        ("gitlab-token",),
        (r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-", "gr1348941"),
        None,
    ),
    "ibm_cloud_iam.IbmCloudIamDetector": (
        ("ibm-cloud-iam-key",),
        tuple(rf"{k}['\"\]]? *(?:=|:|=>| |::) *['\"]?[a-z0-9_\-]{{44}}" for k in _KEYWORDS),
        (40, 60),
    ),
    "ibm_cos_hmac.IbmCosHmacDetector": (
        ("ibm-cos-hmac-secret",),
        (r"secret[-_]?(?:access)?[-_]?key",),
        _NEAR,
    ),
    "jwt.JwtTokenDetector": (("jwt",), ("eyj",), None),
    "mailchimp.MailchimpDetector": (("mailchimp-key",), (r"-us\d",), (34, 4)),
    "npm.NpmDetector": (("npm-token",), (":_authtoken=",), None),
    "openai.OpenAIDetector": (("openai-key",), ("t3blbkfj",), None),
    "pypi_token.PypiTokenDetector": (("pypi-token",), ("pypi-ag",), None),
    "sendgrid.SendGridDetector": (("sendgrid-key",), (r"sg\.[a-z0-9_-]{22}\.",), None),
    "slack.SlackDetector": (
        ("slack-token", "slack-webhook"),
        (r"xox[abposr]-", r"hooks\.slack\.com"),
        None,
    ),
    "softlayer.SoftlayerDetector": (
        ("softlayer-key",),
        (
            rf"softlayer[-_]?(?:api)?[-_]?{_ASSIGNED}",
            rf"sl[-_]?(?:api)?[-_]?{_ASSIGNED}",
            r"api\.softlayer\.com",
        ),
        _NEAR,
    ),
    "square_oauth.SquareOAuthDetector": (("square-oauth-secret",), ("sq0csp-",), None),
    "stripe.StripeDetector": (("stripe-key",), ("k_live_",), None),
    "telegram_token.TelegramBotTokenDetector": (
        ("telegram-bot-token",),
        (r":[0-9a-z_-]{35}",),  # the digits before the colon are within the reach
        (10, 38),
    ),
    "twilio.TwilioKeyDetector": (("twilio-key",), (r"ac[a-z0-9]{32}", r"sk[a-z0-9]{32}"), None),
}

# Shapes detect-secrets 1.5 does not know, from the providers' documented prefixes (kind,
# gate, regex). Each starts at a word boundary and needs a long tail, so a prefix in prose
# ("sk-ant-" in a page about keys) stays text.
_SHAPES: tuple[tuple[str, str, str], ...] = (
    # detect-secrets' private-key plugin fires on the BEGIN line alone, which notes about key
    # files quote (and this repository's own tests do): here the key material must follow.
    (
        "private-key",
        "private key",
        # (a JSON string's newlines are the two characters \n: the class holds \ and n)
        r"-----BEGIN[A-Z0-9 ]{0,24} PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s\\]{64,}",
    ),
    ("anthropic-key", "sk-ant-", r"\bsk-ant-[a-z]{2,8}\d{0,3}-[A-Za-z0-9_\-]{32,}"),
    ("openai-key", "sk-", r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{32,}"),
    ("github-token", "github_pat_", r"\bgithub_pat_[A-Za-z0-9_]{50,}"),
    ("google-api-key", "aiza", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    ("huggingface-token", "hf_", r"\bhf_[A-Za-z0-9]{34,}\b"),
    ("groq-key", "gsk_", r"\bgsk_[A-Za-z0-9]{48,}\b"),
    ("xai-key", "xai-", r"\bxai-[A-Za-z0-9]{60,}\b"),
    ("npm-token", "npm_", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("stripe-key", "_live_", r"\b(?:sk|rk)_live_[0-9a-zA-Z]{24,}\b"),
    # detect-secrets' Artifactory token must be followed by a blank or a quote: the period
    # that ends a sentence ("the token is AKC....") let one through.
    ("artifactory-token", "akc", r"\bAKC[a-zA-Z0-9]{10,}\b"),
)

_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-+/=.]*")
_BLANK = re.compile(r"\s")

# Edges a plugin's regex takes in besides the value (artifactory's leading blank or quote).
_EDGES = " \t\r\n\"'=:"

_SEPARATOR = "\n\x00\n"  # no detector's pattern spans it: texts are scanned as one


@dataclass(frozen=True)
class Hit:
    """A credential-shaped value in a text: its kind and where (``text[start:end]``)."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Allow:
    """truss.toml's ``[secrets] allow``: values the operator knows harmless (a documented
    example key), each an exact value or a regular expression the whole value matches."""

    values: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> Allow:
        """truss.toml's top-level ``[secrets] allow`` (config/settings.py checks its shape
        where the settings are read; a write refuses a malformed one here too)."""
        section = raw.get("secrets")
        found = section.get("allow", []) if isinstance(section, Mapping) else []
        if not isinstance(found, list) or not all(isinstance(v, str) and v for v in found):
            raise ConfigError(
                "truss.toml: secrets.allow must be a list of values or patterns, e.g. "
                '[".*EXAMPLE"]; an operator fixes it with a signed commit'
            )
        return cls(tuple(found))

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        return value in self.values or any(p.fullmatch(value) for p in _patterns(self.values))


@cache
def _patterns(values: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    found = []
    for value in values:
        try:
            found.append(re.compile(value))
        except re.error:
            continue  # not a pattern: it allows that exact value only
    return tuple(found)


@dataclass(frozen=True)
class _Detector:
    kind: str
    regex: re.Pattern[str]
    gate: tuple[re.Pattern[str], ...]  # see _PLUGINS
    reach: tuple[int, int] | None
    confirm: Any  # the plugin whose analyze_string must agree, or None for our own shapes

    def matches(self, text: str, lowered: str) -> Iterator[re.Match[str]]:
        """The regex's matches in ``text`` (whose gate found a place in ``lowered``), only in
        the windows around the gate's places when it has a reach."""
        if self.reach is None:
            yield from self.regex.finditer(text)
            return
        before, after = self.reach
        end = 0
        places = sorted(m.span() for g in self.gate for m in g.finditer(lowered))
        for start, stop in places:
            hi = min(len(text), stop + after)
            at = max(start - before, end)
            while at < hi and (match := self.regex.search(text, at, hi)) is not None:
                yield match
                at = max(match.end(), at + 1)
            end = max(end, hi)


def _gate(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@cache
def _detectors() -> tuple[_Detector, ...]:
    # detect-secrets imports requests at module level (≈ 60 ms): only a write pays for it.
    import importlib

    found: list[_Detector] = []
    for name, (kinds, gate, reach) in _PLUGINS.items():
        module, _, cls = name.rpartition(".")
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls)()
        compiled = _gate(gate)
        for n, regex in enumerate(plugin.denylist):
            kind = kinds[min(n, len(kinds) - 1)]
            found.append(_Detector(kind, regex, compiled, reach, plugin))
    found.extend(
        _Detector(kind, re.compile(pattern), _gate((gate,)), None, None)
        for kind, gate, pattern in _SHAPES
    )
    return tuple(found)


@cache
def _gated() -> tuple[tuple[tuple[re.Pattern[str], ...], tuple[_Detector, ...]], ...]:
    """The detectors by gate, in their order: a plugin's regexes share one gate, tried once."""
    groups: dict[tuple[re.Pattern[str], ...], list[_Detector]] = {}
    for detector in _detectors():
        groups.setdefault(detector.gate, []).append(detector)
    return tuple((gate, tuple(group)) for gate, group in groups.items())


def _span(match: re.Match[str]) -> tuple[int, int]:
    """The value inside a match: its last group that matched when that is value-sized (basic
    auth's password; GitHub's group is its short prefix, ``ghp``), else the match less the
    edges a regex takes in around it."""
    for group in range(len(match.groups()), 0, -1):
        if match.group(group):
            if len(match.group(group)) >= 8:
                return match.span(group)
            break
    start, end = match.span()
    text = match.string
    while start < end and text[start] in _EDGES:
        start += 1
    while end > start and text[end - 1] in _EDGES:
        end -= 1
    return start, end


# Where a credential can be: the prefilter. Every value a detector here finds holds a run of
# 16 or more characters of ``_DENSE_CHARS`` (the shortest: a SendGrid key's 22-character
# middle), but for three shapes: a password in a URL (after ``://``), a PEM key (its lines
# may be short; its BEGIN line names it) and an Artifactory token or password (AKC or AP and
# 8+ characters). So the detectors run only in windows from ``_BEFORE`` characters before
# such a run or mark to ``_AFTER`` after it, widened to the blanks around them and joined
# into one text: a note's author (``agent:ops@example.test``: no dense run), a git SHA in
# prose or a URL costs a scan of a few hundred characters, not of the whole note, and a text
# with none of them is not scanned (detect-secrets is not even loaded). A window reaches
# further back than a plugin's match from the value it holds: an assignment's name, quotes,
# operator and padding (AWS's ``aws.{0,20}?key.{0,20}?"``: ~60), a closing quote after.
# tests/format/test_secrets.py checks that the windows find what the whole text does.
# Measured on 10 KB (benchmarks/bench_secrets.py, CPU medians): every detector over the
# whole text ~0.4-0.8 ms; windowed, ~0.03-0.06 ms on prose and ~0.2-0.4 ms on a developer's
# note with a URL, a commit id or a path every 700 characters.
_DENSE_RUN = 16
_DENSE_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-"
_DENSE = re.compile(rf"[{re.escape(_DENSE_CHARS)}]{{{_DENSE_RUN}}}")
# The same test as bytes: each dense character made x, every other byte a blank. A bytes
# translation and a substring search cost ~20 us on 10 KB; a split or a regex scan, ~150.
_AS_X = bytes(0x78 if chr(b) in _DENSE_CHARS else 0x20 for b in range(256))
_X_RUN = b"x" * _DENSE_RUN
_ARTIFACTORY = re.compile(r"A(?:KC|P[\dA-F])[a-zA-Z0-9]{8}")  # as its plugin: capitals
_BEFORE, _AFTER = 96, 16


def _dense_runs(text: str) -> Iterator[tuple[int, int]]:
    """Where ``text`` holds a run of ``_DENSE_RUN`` dense characters: each such run's span
    (in a text with other than ASCII, the whole blank-free token holding it)."""
    mapped = text.encode("utf-8", "surrogatepass").translate(_AS_X)
    at = mapped.find(_X_RUN)
    if at < 0:
        return
    if text.isascii():  # a byte is a character: the run is where the bytes say
        while at >= 0:
            end = mapped.find(b" ", at + _DENSE_RUN)
            end = len(mapped) if end < 0 else end
            yield at, end
            at = mapped.find(_X_RUN, end)
        return
    at = 0
    for token in text.split():
        if len(token) >= _DENSE_RUN and _DENSE.search(token):
            # Between two such tokens only shorter or sparser ones lie, which cannot hold
            # this one: its next occurrence is where it is.
            at = text.index(token, at)
            yield at, at + len(token)
            at += len(token)


def _windows(text: str) -> list[tuple[int, int]]:
    """The spans of ``text`` a detector could find anything in (see ``_DENSE_RUN``), merged,
    in order, each starting after a blank (or at 0) and ending before one (or at the end):
    cheap, and never missing a place ``find`` would find."""
    marks = list(_dense_runs(text))
    at = text.find("://")
    while at >= 0:
        marks.append((at, at + 3))
        at = text.find("://", at + 3)
    at = text.find("PRIVATE KEY")
    while at >= 0:
        if text.startswith(("-----", " BLOCK-----"), at + 11):
            # A key's lines may all be short: the window runs to its END line.
            end = text.find("-----END", at)
            marks.append((at, len(text) if end < 0 else end + 64))
        at = text.find("PRIVATE KEY", at + 11)
    if "A" in text:
        marks += [m.span() for m in _ARTIFACTORY.finditer(text)]
    if not marks:
        return []
    marks.sort()
    spans: list[tuple[int, int]] = []
    size = len(text)
    for start, end in marks:
        lo, hi = max(0, start - _BEFORE), min(size, end + _AFTER)
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    widened: list[tuple[int, int]] = []
    for lo, hi in spans:
        while lo > 0 and not text[lo - 1].isspace():
            lo -= 1
        while hi < size and not text[hi].isspace():
            hi += 1
        if widened and lo <= widened[-1][1]:
            widened[-1] = (widened[-1][0], max(widened[-1][1], hi))
        else:
            widened.append((lo, hi))
    return widened


def _candidate(text: str) -> bool:
    """``text`` may hold a credential: cheap, and never False where ``find`` finds one."""
    return bool(_windows(text))


def find(text: str, allow: Allow = Allow()) -> list[Hit]:
    """Every credential-shaped value in ``text`` that ``allow`` does not name, in order,
    overlapping hits merged under the first kind found."""
    if not text:
        return []
    spans = _windows(text)
    if not spans:
        return []
    if len(spans) == 1 and spans[0] == (0, len(text)):
        return _find(text, allow)
    # The windows as one text (no detector's pattern spans the separator; each window
    # starts and ends at a blank, as in ``text``), its hits moved back to ``text``.
    joined = _SEPARATOR.join(text[lo:hi] for lo, hi in spans)
    starts, at = [], 0
    for lo, hi in spans:
        starts.append(at)
        at += hi - lo + len(_SEPARATOR)
    hits, n = [], 0
    for hit in _find(joined, allow):
        while n + 1 < len(starts) and starts[n + 1] <= hit.start:
            n += 1
        shift = spans[n][0] - starts[n]
        hits.append(Hit(hit.kind, hit.start + shift, hit.end + shift))
    return hits


def _find(text: str, allow: Allow) -> list[Hit]:
    hits: list[Hit] = []
    lowered = text.lower()
    # A loop, not a generator per detector: on a window of a few hundred characters the
    # Python around each gate costs more than its search.
    for gate, group in _gated():
        for pattern in gate:
            if pattern.search(lowered):
                break
        else:
            continue
        for detector, match in ((d, m) for d in group for m in d.matches(text, lowered)):
            if detector.confirm is not None and not any(
                detector.confirm.analyze_string(match.group(0))
            ):
                continue
            start, end = _span(match)
            if detector.kind != "private-key" and (blank := _BLANK.search(text, start, end)):
                end = blank.start()  # npm's `_authToken=npm_.+` runs on to the line's end
            if detector.kind == "jwt":
                # detect-secrets' regex ends lazily after the payload: take the signature too.
                end = _TOKEN_TAIL.match(text, end).end()  # type: ignore[union-attr]
            if end <= start or text[start:end] in allow or match.group(0).strip() in allow:
                continue
            hits.append(Hit(detector.kind, start, end))
    hits.sort(key=lambda h: (h.start, -h.end))
    merged: list[Hit] = []
    for hit in hits:
        if merged and hit.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Hit(last.kind, last.start, max(last.end, hit.end))
        else:
            merged.append(hit)
    return merged


def mask(text: str, allow: Allow = Allow()) -> tuple[str, tuple[str, ...]]:
    """``text`` with each credential-shaped value replaced by ``[secret:KIND]``, and the
    kinds replaced (none: ``text`` as it was)."""
    hits = find(text, allow)
    if not hits:
        return text, ()
    parts: list[str] = []
    at = 0
    for hit in hits:
        parts += [text[at : hit.start], f"[secret:{hit.kind}]"]
        at = hit.end
    parts.append(text[at:])
    return "".join(parts), tuple(dict.fromkeys(h.kind for h in hits))


# Entry id -> (hash of key and body, the masked key and body, or None when nothing is masked):
# an output of a stored entry scans its text once per process, not once per query. Bounded:
# a long-lived server forgets it all past _SHOWN_MAX rather than grow with the store.
_SHOWN: dict[str, tuple[int, tuple[str, str] | None]] = {}
_SHOWN_MAX = 65536


def shown(entry: Entry) -> Entry:
    """``entry`` as an output shows it: each credential-shaped value in its key and body
    replaced by ``[secret:KIND]``. Its id, trust and path stay the stored entry's; the file is
    untouched (the remedy, an erasure, needs the stored text). Any ``[secrets] allow`` is the
    write check's: an output masks every value of a credential's shape."""
    seen = hash((entry.key, entry.body))
    cached = _SHOWN.get(entry.id)
    if cached is None or cached[0] != seen:
        found: tuple[str, str] | None = None
        if _candidate(f"{entry.key}\n{entry.body}"):  # one cheap look at both, most often all
            key, kinds = mask(entry.key)
            body, more = mask(entry.body)
            found = (key, body) if kinds or more else None
        if len(_SHOWN) >= _SHOWN_MAX:
            _SHOWN.clear()
        cached = _SHOWN[entry.id] = (seen, found)
    if cached[1] is None:
        return entry
    key, body = cached[1]
    masked = dataclasses.replace(entry, key=key, body=body)
    object.__setattr__(masked, "_id", entry.id)  # the id names the stored text (Entry.id)
    return masked


_PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)


def without_private(text: str) -> str:
    """``text`` less what a person wrapped in ``<private>...</private>`` (claude-mem's
    convention, which its users already type); an unclosed tag hides the rest."""
    return _PRIVATE.sub("", text) if "<" in text else text


def where(text: str, offset: int) -> str:
    """``offset`` in ``text`` as a person finds it: ``line L, column C`` (1-based)."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def entry_fields(entry: Entry) -> list[tuple[str, str]]:
    """The texts of ``entry`` a caller sets, by field name: what a write must check."""
    fields = [("key", entry.key), ("body", entry.body), ("author", entry.author)]
    fields += [(f"scope.{name}", f"{name}={value}") for name, value in entry.scope.items()]
    if entry.memory_path:
        fields.append(("path", entry.memory_path))
    if entry.provenance.produced_by:
        fields.append(("provenance.produced_by", entry.provenance.produced_by))
    fields += [(f"provenance.sources[{n}]", s) for n, s in enumerate(entry.provenance.sources)]
    return fields


def scan_fields(fields: Iterable[tuple[str, str]], allow: Allow = Allow()) -> Iterator[str]:
    """For each (field, text): one line per hit, ``field 'F', line L, column C: KIND``.
    The fields go through the detector as one text (a write's fields cost one scan, not one
    each: the per-scan overhead is most of a small note's check)."""
    fields = [(name, text) for name, text in fields if text]
    starts, at = [], 0
    for _, text in fields:
        starts.append(at)
        at += len(text) + len(_SEPARATOR)
    joined = _SEPARATOR.join(text for _, text in fields)
    n = 0
    for hit in find(joined, allow):
        while n + 1 < len(starts) and starts[n + 1] <= hit.start:
            n += 1
        name, text = fields[n]
        yield f"field '{name}', {where(text, hit.start - starts[n])}: {hit.kind}"


def refuse(places: Sequence[str], *, what: str = "the write") -> None:
    """Raise ``SecretFound`` naming ``places`` (from ``scan_fields``), when there are any."""
    if places:
        raise SecretFound(places, what=what)
