"""``python -m rlm`` is the ``rlm`` command."""

from rlm.cli import main

if __name__ == "__main__":
    main()
