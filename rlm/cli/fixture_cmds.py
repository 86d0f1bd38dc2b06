"""``rlm fixture-server`` and the ``rlm fixture`` generators: the built-in fixture model's tools."""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import TYPE_CHECKING

import click

from rlm.cli.fixture_generators import fixture_group

if TYPE_CHECKING:
    from rlm.testing.server import FixtureServer

__all__ = ["fixture_group", "fixture_server"]

KEY_ENV = "RLM_FIXTURE_KEY"


async def _serve_forever(server: FixtureServer, host: str, port: int) -> None:
    """Bind (raising ``OSError`` if that fails), announce, then serve until cancelled."""
    import trio

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
    "--latency-sigma",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Make sub-query latencies lognormal with median --sub-latency and this sigma "
    "(seeded draws; each reply's id names its latency).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True,
    help="Seed of the latency draws.",
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
    "--rpm",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Requests per minute to allow (GCRA); earlier ones get 429 with retry-after.",
)
@click.option(
    "--rpm-burst",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Requests that may arrive back to back before --rpm spacing applies.",
)
@click.option(
    "--announce-rpm",
    is_flag=True,
    help="Announce --rpm in every reply's x-ratelimit-limit-requests header, as providers do.",
)
@click.option(
    "--rpm-strict",
    is_flag=True,
    help="Enforce --rpm as a strict token bucket: no arrival early at all, even by a "
    "millisecond of jitter.",
)
@click.option(
    "--retry-after",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds every 429 asks the client to wait.",
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
@click.option(
    "--batch-delay",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds a batch (OpenAI's /v1/batches, Anthropic's /v1/messages/batches) takes "
    "to end; its requests are done evenly over them.",
)
@click.option(
    "--batch-error-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Part of a batch's requests that fail (seeded by --seed: the same ones each time).",
)
def fixture_server(
    port: int,
    host: str,
    latency: float,
    sub_latency: float,
    latency_sigma: float,
    seed: int,
    chunks: int,
    max_concurrent: int | None,
    rpm: float | None,
    rpm_burst: int,
    announce_rpm: bool,
    rpm_strict: bool,
    retry_after: float,
    require_key: bool,
    chunk_chars: int,
    chunk_delay: float,
    cut_streams: int,
    batch_delay: float,
    batch_error_rate: float,
) -> None:
    """Serve the fixture model over an OpenAI-compatible HTTP API.

    The fixture model is scripted, not a language model: the root writes code
    that chunks the context and asks a sub-model about each chunk; the
    sub-model finds "the <key> is <value>" sentences.  Model names:
    fixture (batched), fixture-sequential, with an optional :N chunk count.
    Requests with "stream": true are answered with Server-Sent Events.  Both
    batch services are served too (OpenAI's Batch API, Anthropic's Message
    Batches), for `rlm volley --batch-api`.  Runs until Ctrl-C.

    \b
    Example:
      rlm fixture-server --port 8765 --latency 0.5 --sub-latency 0.2 &
      rlm run "What is the magic number?" --context-file big.txt \\
          --base-url http://127.0.0.1:8765/v1 --model fixture:32
    """
    # Imported here: the fixture server is test code, and `rlm --help` must not load it.
    import trio

    from rlm.bench.timer import precise_sleep
    from rlm.testing.batch_service import BatchServiceOptions
    from rlm.testing.server import FixtureServer, FixtureServerOptions

    api_key: str | None = None
    if require_key:
        api_key = os.environ.get(KEY_ENV)
        if not api_key:
            click.echo(f"Error: --require-key needs the key in ${KEY_ENV}", err=True)
            sys.exit(2)
    options = FixtureServerOptions(
        root_latency=latency,
        sub_latency=sub_latency,
        latency_sigma=latency_sigma,
        seed=seed,
        chunks=chunks,
        api_key=api_key,
        max_concurrent=max_concurrent,
        rpm=rpm,
        rpm_burst=rpm_burst,
        announce_rpm=announce_rpm,
        rpm_strict=rpm_strict,
        retry_after=retry_after,
        chunk_chars=chunk_chars,
        chunk_delay=chunk_delay,
        cut_streams=cut_streams,
        batch=BatchServiceOptions(delay=batch_delay, error_rate=batch_error_rate, seed=seed),
    )
    # A shell without job control starts background commands with SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler: a script's
    # `rlm fixture-server & ... kill -INT $!` would never stop the server.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Latencies end on a timerfd, not trio's timeouts, which Linux rounds up to the
        # next millisecond: a provider's answer wakes its client when it comes.
        server = FixtureServer(options, sleep=precise_sleep)
        trio.run(_serve_forever, server, host, port)
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
