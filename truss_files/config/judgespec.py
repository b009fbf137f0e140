"""``[panel.judges]``: the model judges an operator configures in the signed truss.toml.

::

    [panel.judges]
    claude = {provider = "anthropic", model = "claude-sonnet-4-5", instructions = "..."}
    gpt = {provider = "openai", model = "gpt-4.1-mini", timeout = 30, max_retries = 0}

    [panel.reviewers]
    decision = ["claude", "gpt"]          # a name stands for the judge of that name

Only the store's truss.toml may hold the table (an operator signed it): the judge's
``instructions`` reach the model as instructions, so nobody but an operator may write them.
The key and base URL are never here: the provider's SDK reads them from the environment
(``panel/modeljudge.py``). Each field is checked here, and a bad one is a ``ConfigError``
naming the file, the judge and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

PROVIDERS = ("anthropic", "openai")
JUDGES_TABLE = "[panel.judges]"
# Each provider's SDK, the variables it reads and the extra that installs it.
PROVIDER_ENV = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}
DEFAULT_MAX_TOKENS = 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
FIELDS = ("provider", "model", "instructions", "timeout", "max_tokens", "max_retries")
EXAMPLE = '{provider = "anthropic", model = "claude-sonnet-4-5"}'


@dataclass(frozen=True)
class ModelJudgeSpec:
    """One ``[panel.judges]`` entry. ``timeout`` None: the panel's; ``max_retries`` None: the
    SDK's own default."""

    name: str
    provider: str
    model: str
    instructions: str = ""
    timeout: float | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_retries: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"provider": self.provider, "model": self.model}
        if self.instructions:
            data["instructions"] = self.instructions
        if self.timeout is not None:
            data["timeout"] = self.timeout
        if self.max_tokens != DEFAULT_MAX_TOKENS:
            data["max_tokens"] = self.max_tokens
        if self.max_retries is not None:
            data["max_retries"] = self.max_retries
        return data


def parse_judges(table: Any, source: str) -> dict[str, ModelJudgeSpec]:
    """The judges of ``[panel.judges]`` in ``source``, by name."""
    if not isinstance(table, dict):
        raise ConfigError(
            f"{source}: panel.judges must be a table of name = {EXAMPLE} ({JUDGES_TABLE})"
        )
    return {name: parse_judge(name, item, source) for name, item in table.items()}


def parse_judge(name: str, item: Any, source: str) -> ModelJudgeSpec:
    where = f"{source}: panel.judges.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: a judge's name is letters, digits, '.', '_' or '-' (at most 64); rename it"
        )
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where} must be a table like {name} = {EXAMPLE}")
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        hint = ""
        if unknown[0] in ("api_key", "key", "base_url", "url"):
            names = PROVIDER_ENV.get(str(item.get("provider")), PROVIDER_ENV["anthropic"])
            hint = (
                "; keys and URLs are never in truss.toml: the SDK reads "
                + " and ".join(names)
                + " from the environment"
            )
        raise ConfigError(
            f"{where}.{unknown[0]} is not a judge setting; use {', '.join(FIELDS)}{hint}"
        )
    for need in ("provider", "model"):
        if need not in item:
            raise ConfigError(f"{where} needs {need}, e.g. {name} = {EXAMPLE}")
    provider = item["provider"]
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider is {provider!r}; use one of: {', '.join(PROVIDERS)}")
    model = item["model"]
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where}.model must be the provider's model id, got {model!r}")
    instructions = item.get("instructions", "")
    if not isinstance(instructions, str):
        raise ConfigError(f"{where}.instructions must be text, got {instructions!r}")
    timeout = item.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ConfigError(f"{where}.timeout must be a positive number of seconds, got {timeout!r}")
    max_tokens = item.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16:
        raise ConfigError(f"{where}.max_tokens must be a whole number of at least 16")
    retries = item.get("max_retries")
    if retries is not None and (
        isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10
    ):
        raise ConfigError(f"{where}.max_retries must be a whole number from 0 to 10")
    return ModelJudgeSpec(
        name,
        provider,
        model.strip(),
        instructions.strip(),
        timeout,
        max_tokens,
        retries,
    )
