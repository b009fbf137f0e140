"""Who may do what: the one place each trust rule at the edges is decided.

The library's check before a ref moves, the audit and the server gate all call these
functions, so a new face (a tool, a route, a hook) cannot forget a rule by forgetting to
copy it. Each section below is one promise of "Who may do what, at every edge"; the attack
on it lives in ``tests/adversarial/``.
"""

from __future__ import annotations

# --- layers and authors: who may write above the task layer or in another's name ---------


# --- checks: which commands may run as reviewers -----------------------------------------


# --- a run's own notes: proven by signature, shared with parent and siblings -------------
