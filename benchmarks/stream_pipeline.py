"""Pipelined execution: how much a run saves when code runs while the reply streams.

Run: ``python benchmarks/stream_pipeline.py [--chunk-delay 0.05] [--sub-latency 0.5]``.

The fixture model generates its replies at ``--chunk-delay`` seconds per 16
characters, read whole (``stream=False``: the step's code starts after the
whole reply) or streamed (``stream=True``: the code block starts as soon as
its closing fence arrives, while the sentence after it is still being
written).  Real sandboxes, the real clock, a 200,000-character needle
context, 16 sub-queries of ``--sub-latency`` seconds in one batch.

The ideal saving is the overlap: min(time to stream the text after the block,
time the block takes).  Not a test: nothing here asserts; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm import RLM  # after the path set-up
from rlm.fixtures.needle import generate_needle
from rlm.providers.fixture import (
    FixtureOptions,
    parse_fixture_model,
    root_reply,
    stream_pieces,
)

QUESTION = "What is the magic number?"


async def one_run(stream: bool, args: argparse.Namespace, text: str) -> tuple[float, float]:
    model = RLM(
        provider="fixture",
        fixture=FixtureOptions(chunk_delay=args.chunk_delay, sub_latency=args.sub_latency),
        stream=stream,
    )
    result = await model.acompletion(QUESTION, text)
    assert result.answer is not None, result.error
    executed = next(e for e in result.trace if e["event"] == "code_executed")
    return result.duration_s, executed["duration_s"]


def after_block_seconds(args: argparse.Namespace) -> float:
    """How long the fixture's first reply streams after its code block closes."""
    messages = [
        {"role": "system", "content": "llm_query_batched"},
        {"role": "user", "content": f"Query: {QUESTION}"},
    ]
    reply = root_reply(messages, parse_fixture_model("fixture"))  # type: ignore[arg-type]
    tail = reply[reply.rindex("```") + 3 :]
    whole = len(stream_pieces(reply, 16))
    before = len(stream_pieces(reply[: len(reply) - len(tail)], 16))
    return (whole - before) * args.chunk_delay


async def main(args: argparse.Namespace) -> None:
    text = generate_needle(200_000, seed=5).text
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for stream in (False, True):
            runs[stream].append(await one_run(stream, args, text))
    whole = statistics.median(d for d, _ in runs[False])
    piped = statistics.median(d for d, _ in runs[True])
    block = statistics.median(b for _, b in runs[True])
    overlap = min(after_block_seconds(args), block)
    print(f"chunk delay {args.chunk_delay:g} s / 16 chars, sub-query latency "
          f"{args.sub_latency:g} s, {args.rounds} rounds (medians)")
    print(f"  read whole : {whole:.3f} s")
    print(f"  pipelined  : {piped:.3f} s")
    print(f"  saving     : {whole - piped:.3f} s "
          f"(ideal {overlap:.3f} s = min(text after the block {after_block_seconds(args):.3f} s,"
          f" block {block:.3f} s); ratio {(whole - piped) / overlap if overlap else 0:.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk-delay", type=float, default=0.05)
    parser.add_argument("--sub-latency", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    trio.run(main, parser.parse_args())
