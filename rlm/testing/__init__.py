"""Test support: the fixture server (the fixture model over real HTTP).

Never imported by the runtime.
"""
