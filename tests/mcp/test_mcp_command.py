"""`rlm mcp` before it serves: its help and docs (a client config that parses), what it
refuses to start with, and the roots it reads from (in this process: nothing here
starts a server)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import click
import pytest

from rlm.cli._mcp_roots import Roots
from rlm.cli.mcp_cmd import mcp
from rlm.errors import UsageError
from tests.helpers import rlm_in_process

ROOT = Path(__file__).resolve().parents[2]
needs_sdk = pytest.mark.skipif(importlib.util.find_spec("mcp") is None,
                               reason="the MCP SDK is the extra rlm[mcp]")


def _client_config(text: str) -> dict[str, object]:
    """The first ``{"mcpServers": ...}`` object in ``text``."""
    start = text.index('{\n', text.index("mcpServers") - 40)
    config: dict[str, object] = json.JSONDecoder().raw_decode(text[start:].lstrip())[0]
    return config


@pytest.mark.parametrize("source", ["help", "docs"])
def test_the_help_and_the_docs_give_a_client_config_the_command_accepts(source: str) -> None:
    if source == "help":
        done = rlm_in_process("mcp", "--help")
        assert done.returncode == 0
        text = re.sub(r"^  ", "", done.stdout, flags=re.MULTILINE)
    else:
        text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    server = _client_config(text)["mcpServers"]["rlm"]  # type: ignore[index]
    assert server["command"] == "rlm" and server["args"][0] == "mcp"
    assert set(server["env"]) == {"RLM_API_KEY"}
    ctx = mcp.make_context("mcp", list(server["args"][1:]))  # the flags exist, as written
    assert ctx.params["roots"] == ("/path/to/project",)


def test_the_docs_page_is_in_the_site_nav() -> None:
    mkdocs = ROOT / "mkdocs.yml"
    if not mkdocs.exists():
        pytest.skip("no docs site yet (mkdocs.yml)")
    assert "mcp.md" in mkdocs.read_text(encoding="utf-8")


@needs_sdk
@pytest.mark.parametrize(("args", "env", "code", "message"), [
    (["--root", "/no/such/dir"], {}, 2, "Error: --root /no/such/dir is not a directory"),
    (["--provider", "openai"], {}, 2, "Error: no model: pass --model"),
    (["--provider", "openai", "--model", "gpt-4.1"], {}, 4, "Error: no API key for"),
    (["--provider", "fixture", "--max-llm-calls", "0"], {}, 2, "--max-llm-calls must be"),
    (["--provider", "fixture"], {"RLM_PROFILE": "nope"}, 2, "nope"),
])
def test_what_it_refuses_to_start_with(args: list[str], env: dict[str, str], code: int,
                                       message: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = rlm_in_process("mcp", *args, env=env)
    assert done.returncode == code, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""  # stdout is the protocol's: nothing else goes there


def test_roots_refuse_what_lies_outside_them_links_followed(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    (root / "sub").mkdir(parents=True)
    other.mkdir()
    (root / "sub" / "a.txt").write_text("a")
    (other / "secret.txt").write_text("s")
    (root / "link.txt").symlink_to(other / "secret.txt")
    (root / "inner.txt").symlink_to(root / "sub" / "a.txt")
    (root / "sub" / "out").symlink_to(other, target_is_directory=True)
    roots = Roots([str(root)])
    assert roots.resolve("sub/a.txt") == root / "sub" / "a.txt"
    assert roots.resolve(str(root / "inner.txt")) == root / "sub" / "a.txt"
    assert roots.resolve(".") == root
    for outside in ("../other/secret.txt", "link.txt", "sub/out/secret.txt", "/etc/hostname"):
        with pytest.raises(UsageError, match="outside the directories this server reads"):
            roots.resolve(outside)
    with pytest.raises(UsageError, match="does not exist"):
        roots.resolve("missing.txt")
    assert roots.read(["sub"], glob="*", encoding="utf-8", max_bytes=100) == ["a"]
    with pytest.raises(UsageError, match="links outside"):
        roots.read(["."], glob="*.txt", encoding="utf-8", max_bytes=100)
    both = Roots([str(root), str(other), str(root / "sub")])
    assert both.resolve("link.txt") == other / "secret.txt"
    assert both.read(["link.txt", "sub/a.txt"], glob="*", encoding="utf-8",
                     max_bytes=100) == ["s", "a"]
    with pytest.raises(UsageError, match="holds more than"):
        both.read(["link.txt", "sub/a.txt"], glob="*", encoding="utf-8", max_bytes=1)


@pytest.mark.parametrize("swapped", ["a file", "a directory of the path"])
def test_a_link_swapped_in_after_the_check_is_refused_once_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped: str
) -> None:
    # The race a client could run: the path is checked (inside the root), then replaced
    # by a link out of it before it is read.
    root, other = tmp_path / "root", tmp_path / "other"
    (root / "docs").mkdir(parents=True)
    other.mkdir()
    (root / "docs" / "a.txt").write_text("a")
    (other / "a.txt").write_text("secret")
    roots = Roots([str(root)])
    check = roots.resolve

    def check_then_swap(given: str) -> Path:
        checked = check(given)
        if swapped == "a file":
            checked.unlink()
            checked.symlink_to(other / "a.txt")
        else:
            (root / "docs").rename(root / "gone")
            (root / "docs").symlink_to(other, target_is_directory=True)
        return checked

    monkeypatch.setattr(roots, "resolve", check_then_swap)
    with pytest.raises(UsageError, match="is outside the directories this server reads"):
        roots.read(["docs/a.txt"], glob="*", encoding="utf-8", max_bytes=100)


def test_a_root_prefix_is_not_a_root(tmp_path: Path) -> None:
    """``/x/root`` serves ``/x/root/...``, not ``/x/root2``."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root2").mkdir()
    (tmp_path / "root2" / "f.txt").write_text("f")
    with pytest.raises(UsageError, match="outside"):
        Roots([str(tmp_path / "root")]).resolve(str(tmp_path / "root2" / "f.txt"))


def test_devices_and_pipes_inside_a_root_are_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UsageError, match="not a regular file or a directory"):
        Roots([str(tmp_path)]).resolve("pipe")
    with pytest.raises(UsageError, match="not a regular file or a directory"):
        Roots(["/dev"]).resolve("null")


def test_the_command_is_listed_with_its_settings() -> None:
    help_text = mcp.get_help(click.Context(mcp))
    for flag in ("--root", "--profile", "--max-llm-calls", "--max-cost", "--timeout",
                 "--max-context-bytes", "--sandbox-memory", "--require-isolation"):
        assert flag in help_text
