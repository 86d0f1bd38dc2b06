"""``rlm bench``: fixture scenarios measured against their physical limit.

Never imported by the runtime.
"""
