"""The sandbox: the child side of an rlm call.

This package runs in a separate, scrubbed Python process (``python -m rlm_sandbox``).
It imports nothing from ``rlm`` and holds no secrets.  A reviewer should be able
to read all of it:

- ``protocol.py``: the msgpack frame codec shared with the host;
- ``policy.py``: the RestrictedPython policy (guards and safe builtins);
- ``modules.py``: read-only proxies for the allow-listed standard modules;
- ``worker.py``: the REPL loop that executes model code and forwards bridge calls;
- ``isolation.py``: the OS layers applied before any model code runs, and their report;
- ``landlock.py`` / ``seccomp.py``: the two kernel filters, through ctypes;
- ``shared_context.py``: receiving a large context as a sealed memfd;
- ``zygote.py``: the pre-started process that forks hardened sandboxes.
"""
