"""The run history: past runs' traces and summaries in the user's state directory.

``rlm run`` keeps every run here unless ``--no-history`` or ``RLM_HISTORY=off``;
``rlm runs`` lists them, ``rlm runs show ID`` prints one, ``rlm view last``
draws the newest.  See :mod:`rlm.history.store`.
"""

from rlm.history.record import summary_of
from rlm.history.store import DEFAULT_CAP_BYTES, HISTORY_ENV, RunEntry, RunHistory, history_enabled

__all__ = [
    "DEFAULT_CAP_BYTES",
    "HISTORY_ENV",
    "RunEntry",
    "RunHistory",
    "history_enabled",
    "summary_of",
]
