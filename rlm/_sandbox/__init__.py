"""The host side of sandboxes: processes, the launcher and its pool, the zygote, isolation."""
