"""The texts a call sends back to its model between steps."""

from __future__ import annotations

from rlm._sandbox.launcher import ExecResult

__all__ = ["FORCE_FINAL", "REMINDER", "format_execution", "kept_reply", "skipped_blocks"]

REMINDER = (
    "Your reply had no ```repl code block and no FINAL(...) line. Write Python in a ```repl "
    "block to work with `context` (it is not in this conversation), or, if you know the answer, "
    "reply with a line FINAL(your answer)."
)

FORCE_FINAL = (
    "You have used all {n} iterations. Reply now with your best final answer as a line "
    "FINAL(your answer), or FINAL_VAR(variable_name), using what you have found so far."
)


def kept_reply(reply: str, limit: int) -> str:
    """``reply`` as its call's conversation keeps it: whole up to ``limit`` characters,
    else its first ``limit`` and a note saying the rest was cut (every later step sends
    the conversation again, so one reply may not grow it without bound)."""
    if len(reply) <= limit:
        return reply
    return (
        f"{reply[:limit]}\n[rlm cut this reply here: it had {len(reply):,} characters and "
        f"the conversation keeps the first {limit:,}. Its code ran whole. Keep replies "
        "short: hold large data in variables, not in the reply]"
    )


def format_execution(
    code: str, result: ExecResult, index: int, total: int, max_code_chars: int | None = None
) -> str:
    """What the model sees after one block ran: the code (its first ``max_code_chars``
    when given), its output, its error."""
    header = "Code executed" if total == 1 else f"Code executed (block {index} of {total})"
    shown = code.rstrip()
    if max_code_chars is not None and len(shown) > max_code_chars:
        shown = (
            f"{shown[:max_code_chars]}\n# [rlm cut this block here: {max_code_chars:,} of "
            f"its {len(shown):,} characters shown]"
        )
    parts = [f"{header}:\n```repl\n{shown}\n```"]
    if result.output:
        parts.append(f"Output:\n{result.output.rstrip()}")
        if result.output_chars > len(result.output):
            parts.append(
                f"[output truncated: showing the first {len(result.output):,} of "
                f"{result.output_chars:,} characters; print less, or summarise in code]"
            )
    if result.error:
        parts.append(f"Error:\n{result.error.rstrip()}")
    if not result.output and not result.error:
        parts.append("(no output)")
    return "\n".join(parts)


def skipped_blocks(count: int) -> str:
    """The note for blocks not run because the sandbox was lost before them."""
    return (
        f"[{count} later block(s) of this reply were not run: the sandbox was restarted, so "
        "they would have run without the variables they expect. Re-run what you need.]"
    )
