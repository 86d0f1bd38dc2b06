"""``rlm fixture-server`` and ``rlm fixture needle``: the built-in fixture model's tools."""

from __future__ import annotations

import errno
import os
import signal
import sys
import tempfile
from pathlib import Path

import click
import trio

from rlm.fixtures.needle import MIN_CHARS, generate_needle
from rlm.testing.server import FixtureServer, FixtureServerOptions

__all__ = ["fixture_group", "fixture_server"]

KEY_ENV = "RLM_FIXTURE_KEY"


async def _serve_forever(server: FixtureServer, host: str, port: int) -> None:
    """Bind (raising ``OSError`` if that fails), announce, then serve until cancelled."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = int(listeners[0].socket.getsockname()[1])
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"fixture server (scripted, not a language model) listening on http://{shown}:{bound}/v1",
        err=True,
    )
    await server.serve_listeners(listeners)


def _only_interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C, possibly wrapped in trio's exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_interrupts(inner) for inner in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


@click.command("fixture-server")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="TCP port to listen on (0 picks a free one).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--latency",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds each root step takes.",
)
@click.option(
    "--sub-latency",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds each sub-query takes.",
)
@click.option(
    "--chunks",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Chunks the scripted root splits the context into (model fixture:N overrides).",
)
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    default=None,
    help="Answer 429 with retry-after when more requests than this are in flight.",
)
@click.option(
    "--require-key",
    is_flag=True,
    help=f"Require 'Authorization: Bearer <key>', the key read from ${KEY_ENV}.",
)
@click.option(
    "--chunk-chars",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Characters per event when a request asks to stream.",
)
@click.option(
    "--chunk-delay",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds before each streamed piece (a slow stream for demos).",
)
@click.option(
    "--cut-streams",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Cut the first N streamed replies half-way (fault injection).",
)
def fixture_server(
    port: int,
    host: str,
    latency: float,
    sub_latency: float,
    chunks: int,
    max_concurrent: int | None,
    require_key: bool,
    chunk_chars: int,
    chunk_delay: float,
    cut_streams: int,
) -> None:
    """Serve the fixture model over an OpenAI-compatible HTTP API.

    The fixture model is scripted, not a language model: the root writes code
    that chunks the context and asks a sub-model about each chunk; the
    sub-model finds "the <key> is <value>" sentences.  Model names:
    fixture (batched), fixture-sequential, with an optional :N chunk count.
    Requests with "stream": true are answered with Server-Sent Events.
    Runs until Ctrl-C.

    \b
    Example:
      rlm fixture-server --port 8765 --latency 0.5 --sub-latency 0.2 &
      rlm run "What is the magic number?" --context-file big.txt \\
          --base-url http://127.0.0.1:8765/v1 --model fixture:32
    """
    api_key: str | None = None
    if require_key:
        api_key = os.environ.get(KEY_ENV)
        if not api_key:
            click.echo(f"Error: --require-key needs the key in ${KEY_ENV}", err=True)
            sys.exit(2)
    options = FixtureServerOptions(
        root_latency=latency,
        sub_latency=sub_latency,
        chunks=chunks,
        api_key=api_key,
        max_concurrent=max_concurrent,
        chunk_chars=chunk_chars,
        chunk_delay=chunk_delay,
        cut_streams=cut_streams,
    )
    # A shell without job control starts background commands with SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler: a script's
    # `rlm fixture-server & ... kill -INT $!` would never stop the server.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        trio.run(_serve_forever, FixtureServer(options), host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            click.echo(f"Error: port {port} is in use; pick another with --port", err=True)
        else:
            click.echo(f"Error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except BaseException as exc:
        if not _only_interrupts(exc):
            raise
        click.echo("fixture server stopped", err=True)


@click.group("fixture")
def fixture_group() -> None:
    """Deterministic inputs for demos, tests and benchmarks.

    \b
    Example:
      rlm fixture needle --chars 2000000 --seed 7 > big.txt
    """


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(temp_name, path)
    except BaseException:
        # Leave no half-written temporary file behind, then report the failure.
        Path(temp_name).unlink(missing_ok=True)
        raise


@fixture_group.command("needle")
@click.option(
    "--chars",
    type=click.IntRange(min=MIN_CHARS),
    default=2_000_000,
    show_default=True,
    help="Exact length of the text.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed: the same seed gives the same text.",
)
@click.option(
    "--depth",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    help="Where the needle goes: 0 = start, 1 = end.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write here (atomically) instead of stdout.",
)
def needle(chars: int, seed: int, depth: float, output: Path | None) -> None:
    """Generate a long text with one planted "The magic number is N." sentence.

    Ask for it with the question "What is the magic number?".  The text is
    exactly --chars characters; where the needle landed goes to stderr.

    \b
    Example:
      rlm fixture needle --chars 5000000 --depth 0.9 --output big.txt
    """
    fixture = generate_needle(chars, seed=seed, depth=depth)
    if output is None:
        click.echo(fixture.text, nl=False)
    else:
        try:
            _write_atomically(output, fixture.text)
        except OSError as exc:
            raise click.UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f'planted: "{fixture.needle}" at char {fixture.position} (seed {seed})', err=True)
