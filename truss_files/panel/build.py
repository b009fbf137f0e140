"""From a configured reviewer (``settings.ReviewerSpec``) to the ``Reviewer`` that runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .modeljudge import ModelJudge
from .reviewers import DEFAULT_TIMEOUT, CheckReviewer, JudgeReviewer, Reviewer

if TYPE_CHECKING:
    from ..config.settings import ReviewerSpec

__all__ = ["build_reviewer", "is_judge"]


def build_reviewer(spec: ReviewerSpec, default_timeout: float = DEFAULT_TIMEOUT) -> Reviewer:
    timeout = spec.timeout if spec.timeout is not None else default_timeout
    if spec.judge is not None:
        return ModelJudge(spec.judge, timeout)
    if spec.type == "check":
        return CheckReviewer(spec.command, timeout, spec.name)
    return JudgeReviewer(spec.command, timeout, spec.name)


def is_judge(reviewer: Reviewer) -> bool:
    """A reviewer that reads the entry and answers (a judge command or a model), as an
    arbitration needs; a check's exit status cannot compare two entries."""
    return isinstance(reviewer, JudgeReviewer | ModelJudge)
