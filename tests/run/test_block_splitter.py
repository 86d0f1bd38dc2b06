"""Finding code blocks while a reply streams: the same blocks, each as soon as it closes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlm._run.parsing import BlockSplitter, find_code_blocks

# Replies built from fence-heavy pieces, so openers, closers and partial fences abound.
fragments = st.sampled_from(
    [
        "```repl\n",
        "```python\n",
        "```py \n",
        "```bash\n",
        "```",
        "``",
        "`",
        "\n",
        "x = 1\n",
        "print(2)",
        "FINAL(3)\n",
        "text ",
        "```repl\r\n",
        "python\n",
        "repl",
    ]
)


def feed_in_pieces(reply: str, cuts: list[int]) -> list[str]:
    splitter = BlockSplitter()
    blocks: list[str] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(reply)]:
        blocks += splitter.feed(reply[start:cut])
        start = cut
    return blocks + splitter.close()


@given(parts=st.lists(fragments, max_size=30), data=st.data())
def test_streamed_pieces_find_exactly_the_blocks_of_the_whole_reply(
    parts: list[str], data: st.DataObject
) -> None:
    reply = "".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(reply)), max_size=20))
    assert feed_in_pieces(reply, cuts) == find_code_blocks(reply)


def test_a_block_is_reported_when_its_closing_fence_arrives() -> None:
    splitter = BlockSplitter()
    assert splitter.feed("Let me count.\n```re") == []
    assert splitter.feed("pl\nn = len(context)\nprint(n)\n``") == []
    assert splitter.feed("`\nNow I wait") == ["n = len(context)\nprint(n)\n"]
    # The fence's line has not ended yet: "```x" would be no fence.
    assert splitter.feed(" for it.\n```python\nprint(1)\n```") == []
    assert splitter.feed("") == []
    assert splitter.close() == ["print(1)\n"]
