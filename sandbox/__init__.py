"""The sandbox: the child side of an rlm call.

This package runs in a separate, scrubbed Python process (``python -m sandbox``).
It imports nothing from ``rlm`` and holds no secrets.  A reviewer should be able
to read all of it:

- ``protocol.py``: the msgpack frame codec shared with the host;
- ``policy.py``: the RestrictedPython policy (guards and safe builtins);
- ``modules.py``: read-only proxies for the allow-listed standard modules;
- ``worker.py``: the REPL loop that executes model code and forwards bridge calls.
"""
