"""The top-level click group."""

from __future__ import annotations

import click

from rlm.cli._errors import RLMGroup


@click.group(cls=RLMGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="rlm")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    help="Show the traceback when a command fails (or set RLM_DEBUG=1).",
)
def main() -> None:
    """rlm: run recursive language models fast, bounded and sandboxed.

    The root model never reads a huge input directly: the input sits as
    `context` in a sandboxed Python REPL, the model writes code that slices and
    searches it, and calls sub-models on the pieces with llm_query /
    llm_query_batched.

    \b
    Examples:
      rlm fixture needle --chars 2000000 > big.txt
      rlm run "What is the magic number?" --context-file big.txt --provider fixture
      RLM_API_KEY=... rlm run "Summarise the errors" --context-file app.log \\
          --base-url https://api.openai.com/v1 --model gpt-4.1-mini

    The built-in fixture model (--provider fixture, rlm fixture-server) is a
    scripted stand-in for demos, tests and benchmarks: it is not a language
    model, and its answers say so in their metadata.
    """
