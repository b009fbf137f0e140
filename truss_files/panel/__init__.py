"""The verification panel: verdicts, reviewers, policies."""
