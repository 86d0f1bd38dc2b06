"""``rlm fixture needle | oolong | multidoc``: deterministic inputs from :mod:`rlm.fixtures`.

Every generator in ``fixtures/rlm/fixtures`` has a command here; ``rlm fixture`` alone
lists them.  Text goes to stdout or, atomically, to ``--output``; what was
planted (and so the right answers) goes to stderr.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import click

from rlm.fixtures.multidoc import generate_multidoc
from rlm.fixtures.needle import MIN_CHARS, generate_needle
from rlm.fixtures.oolong import generate_oolong

__all__ = ["fixture_group"]

_OUTPUT = click.option(
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write here (atomically) instead of stdout.",
)
_SEED = click.option(
    "--seed", type=int, default=0, show_default=True, help="The same seed gives the same text."
)


@click.group("fixture", invoke_without_command=True)
@click.pass_context
def fixture_group(ctx: click.Context) -> None:
    """Deterministic inputs for demos, tests and benchmarks (run alone: list them).

    \b
    Examples:
      rlm fixture needle --chars 2000000 --seed 7 > big.txt
      rlm fixture oolong --records 2000 > records.txt
      rlm fixture multidoc --docs 8 --output-dir docs/ && rlm run \\
          "What is the lead auditor?" --context-file docs/ \\
          --provider fixture
    """
    if ctx.invoked_subcommand is not None:
        return
    group = ctx.command
    assert isinstance(group, click.Group)
    click.echo("Generators (rlm fixture NAME --help for the options):")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        summary = command.get_short_help_str(limit=90) if command is not None else ""
        click.echo(f"  {name:<9} {summary}")


def _earlier_docs(facts: Path) -> list[str]:
    """The doc-NNN.txt files an earlier ``multidoc`` wrote, as its .facts.json names them."""
    try:
        named = json.loads(facts.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(named, dict):
        return []
    return [n for n in named if isinstance(n, str) and re.fullmatch(r"doc-\d{3,}\.txt", n)]


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets, not data files
            handle.write(text)
        os.replace(temp_name, path)
    except BaseException:
        # Leave no half-written temporary file behind, then report the failure.
        Path(temp_name).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """This process's umask (reading it means setting it: put straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@fixture_group.command("needle")
@click.option(
    "--chars",
    type=click.IntRange(min=MIN_CHARS),
    default=2_000_000,
    show_default=True,
    help="Exact length of the text.",
)
@_SEED
@click.option(
    "--depth",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    help="Where the needle goes: 0 = start, 1 = end.",
)
@_OUTPUT
def needle(chars: int, seed: int, depth: float, output: Path | None) -> None:
    """A long text with one planted "The magic number is N." sentence.

    Ask for it with the question "What is the magic number?".  The text is
    exactly --chars characters; where the needle landed goes to stderr.

    \b
    Example:
      rlm fixture needle --chars 5000000 --depth 0.9 --output big.txt
    """
    fixture = generate_needle(chars, seed=seed, depth=depth)
    _emit(fixture.text, output)
    click.echo(f'planted: "{fixture.needle}" at char {fixture.position} (seed {seed})', err=True)


def _emit(text: str, output: Path | None) -> None:
    """``text`` to stdout, or atomically to ``output``."""
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        _write_atomically(output, text)
    except OSError as exc:
        raise click.UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc


@fixture_group.command("oolong")
@click.option(
    "--records",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Lines of labelled records.",
)
@click.option(
    "--users", type=click.IntRange(min=1), default=20, show_default=True, help="Distinct users."
)
@_SEED
@_OUTPUT
def oolong(records: int, users: int, seed: int, output: Path | None) -> None:
    """OOLONG-style labelled records, with aggregation questions and their exact answers.

    The questions and answers go to stderr, one "Q: ... A: ..." line each.

    \b
    Example:
      rlm fixture oolong --records 5000 --output records.txt
    """
    fixture = generate_oolong(records, seed=seed, users=users)
    _emit(fixture.text + "\n", output)
    for question in fixture.questions:
        click.echo(f"Q: {question.text}  A: {question.answer}", err=True)


@fixture_group.command("multidoc")
@click.option(
    "--docs", type=click.IntRange(min=1), default=8, show_default=True, help="Documents."
)
@click.option(
    "--chars",
    type=click.IntRange(min=1000),
    default=20_000,
    show_default=True,
    help="Characters per document.",
)
@click.option(
    "--facts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Facts planted in each document.",
)
@_SEED
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write doc-NNN.txt files into (created if missing; a set written "
    "there before is replaced).",
)
def multidoc(docs: int, chars: int, facts: int, seed: int, output_dir: Path) -> None:
    """N documents with known facts each ("The project codename is ORION."), one file each.

    Pass the directory to `rlm run --context-file DIR`: each file becomes one
    document.  The planted facts go to stderr and to DIR/.facts.json.

    \b
    Example:
      rlm fixture multidoc --docs 8 --output-dir docs/
    """
    try:
        fixture = generate_multidoc(docs, chars, seed=seed, facts_per_doc=facts)
    except ValueError as exc:
        raise click.UsageError(f"{exc}; raise --chars or lower --facts") from exc
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        for number, doc in enumerate(fixture.documents, start=1):
            _write_atomically(output_dir / f"doc-{number:03d}.txt", doc.text)
        facts_by_file = {
            f"doc-{number:03d}.txt": doc.facts
            for number, doc in enumerate(fixture.documents, start=1)
        }
        stale = set(_earlier_docs(output_dir / ".facts.json")) - set(facts_by_file)
        _write_atomically(output_dir / ".facts.json", json.dumps(facts_by_file, indent=1) + "\n")
        for name in stale:  # an earlier, larger set's: the directory is this set alone
            (output_dir / name).unlink(missing_ok=True)
    except OSError as exc:
        raise click.UsageError(f"cannot write to {output_dir}: {exc.strerror or exc}") from exc
    for name, planted in facts_by_file.items():
        shown = "; ".join(f"{key}: {value}" for key, value in planted.items())
        click.echo(f"{name}: {shown}", err=True)
