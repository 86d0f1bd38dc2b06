"""stderr through rich: colour, and the spinner that says what a run waits for.

Used when stderr is a terminal (or a person asked for colour with
FORCE_COLOR / TTY_COMPATIBLE=1) and by the commands that draw tables.
Progress on a pipe or in a file needs none of it and does not import rich
(``_progress.py``), which a plain ``rlm run`` would otherwise load for
nothing.
"""

from __future__ import annotations

import os
import time

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from rlm._symbols import symbol
from rlm.cli._terminal import silence

__all__ = ["RichProgressOutput", "stderr_console"]

Segments = list[tuple[str, str | None]]


class _StderrConsole(Console):
    """A console whose broken pipe silences it, and only it.

    Rich's default answers a broken pipe by pointing *stdout* at /dev/null and
    raising SystemExit: that would cost the run its answer.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence()


def stderr_console() -> Console:
    """The console progress goes to: stderr, no wrapping, no colour under NO_COLOR."""
    no_color = bool(os.environ.get("NO_COLOR"))
    return _StderrConsole(
        stderr=True,
        highlight=False,
        soft_wrap=True,
        color_system=None if no_color else "auto",
        no_color=no_color,
    )


class _Elapsed:
    """The spinner line: what the run waits for and for how long."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.doing = "starting"
        self._spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._spinner.update(
            text=Text(f"{self.doing} {symbol('sep')} {time.monotonic() - self.started:.1f}s",
                      style="dim")
        )
        yield self._spinner


class RichProgressOutput:
    """Progress lines in colour on ``console``, under a spinner when ``spinner`` is on."""

    def __init__(self, console: Console | None = None, *, spinner: bool | None = None) -> None:
        self.console = console or stderr_console()
        want_spinner = self.console.is_terminal if spinner is None else spinner
        self._elapsed = _Elapsed() if want_spinner else None
        self._live: Live | None = None

    def line(self, segments: Segments) -> None:
        self.console.print(Text.assemble(*((text, style or "") for text, style in segments)))

    def doing(self, what: str) -> None:
        if self._elapsed is not None:
            self._elapsed.doing = what

    def start(self) -> None:
        """Show the spinner (the run has started)."""
        if self._elapsed is None or self._live is not None:
            return
        self._live = Live(
            self._elapsed,
            console=self.console,
            transient=True,
            refresh_per_second=8,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def stop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()
