"""Code-block and FINAL parsing, with hypothesis for the tricky bits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlm._run.parsing import find_code_blocks, find_final

safe_text = st.text(
    alphabet=st.characters(exclude_characters="`()\r", exclude_categories=["Cs"]), max_size=60
)


def test_repl_and_python_fences_are_code() -> None:
    reply = "Let me look.\n```repl\nx = 1\n```\nand\n```python\ny = 2\n```\n```bash\nls\n```"
    assert find_code_blocks(reply) == ["x = 1\n", "y = 2\n"]


def test_a_fence_inside_a_string_does_not_end_the_block() -> None:
    code = 'fence = "```"\nprint(f"{fence}python\\nx\\n{fence}")\ns = """\n  ```x\n"""\n'
    reply = f"Here:\n```repl\n{code}```\nFINAL_VAR(s)"
    assert find_code_blocks(reply) == [code]
    assert find_final(reply) is not None and find_final(reply).variable == "s"  # type: ignore[union-attr]
    assert find_code_blocks("```python\r\nx = 1\r\n```\r\n") == ["x = 1\r\n"]


def test_inline_backticks_in_prose_hide_no_final() -> None:
    assert find_final("Use ```FINAL``` when done.\nFINAL(42)").answer == "42"  # type: ignore[union-attr]


def test_final_inside_code_is_not_a_final_line() -> None:
    assert find_final("```repl\nFINAL(1)\n```\nstill working") is None


def test_final_var_and_quotes() -> None:
    assert find_final("done\nFINAL_VAR(answer)").variable == "answer"  # type: ignore[union-attr]
    assert find_final("FINAL_VAR('answer')").variable == "answer"  # type: ignore[union-attr]
    assert find_final('FINAL("42")').answer == "42"  # type: ignore[union-attr]


def test_first_directive_wins_and_trailing_prose_is_ignored() -> None:
    final = find_final("FINAL(7)\nThanks (really) for asking.\nFINAL_VAR(x)")
    assert final is not None and final.answer == "7"


@given(answer=safe_text.filter(lambda s: "\n" not in s), before=safe_text, after=safe_text)
def test_final_line_round_trips(answer: str, before: str, after: str) -> None:
    reply = f"{before}\nFINAL({answer})\n{after}"
    final = find_final(reply)
    assert final is not None
    assert final.answer == answer.strip() or (
        len(answer.strip()) >= 2 and answer.strip()[0] in "\"'"
    )


@given(lines=st.lists(safe_text.filter(lambda s: "\n" not in s), min_size=2, max_size=5))
def test_multiline_final_runs_to_the_last_parenthesis(lines: list[str]) -> None:
    body = "\n".join(lines)
    final = find_final(f"FINAL({body})")
    assert final is not None
    assert final.answer == body.strip() or body.strip()[:1] in "\"'"


@given(code=st.lists(safe_text, min_size=1, max_size=4))
def test_every_block_is_found_in_order(code: list[str]) -> None:
    reply = "\n".join(f"step {i}\n```repl\n{c}\n```" for i, c in enumerate(code))
    assert find_code_blocks(reply) == [f"{c}\n" for c in code]


@given(text=st.text(max_size=300))
def test_parsing_never_crashes(text: str) -> None:
    find_code_blocks(text)
    find_final(text)
