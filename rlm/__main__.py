"""``python -m rlm`` is the ``rlm`` command."""

from rlm.cli import console_main

if __name__ == "__main__":
    console_main()
