"""user:password in a base URL (HTTP Basic, rlm/_url_userinfo.py) is used to send and shown
nowhere: not in a trace, a journal, or an error; a stored URL lost them, so a volley
resumed from its journal asks for the URL again instead of sending without them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from rlm import RLM, SettingError
from rlm._config import RunConfig, public_settings
from rlm._url_userinfo import redact_url, redacted_params
from rlm.errors import AuthenticationError
from tests.helpers import rlm_in_process, serving

RLM_BIN = str(Path(sys.executable).with_name("rlm"))
SECRET = "s3cret"


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{SECRET}@", 1)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:s3cret@host:8000/v1", "http://***@host:8000/v1"),
        ("https://tok@host/v1?a=b@c", "https://***@host/v1?a=b@c"),
        ("http://a:p@ss@host/v1", "http://***@host/v1"),
        ("http://host:8000/v1", "http://host:8000/v1"),
        ("http://host/v1/x@y", "http://host/v1/x@y"),
        ("alice:s3cret@host/v1", "***@host/v1"),
        ("host/v1@x", "host/v1@x"),
    ],
)
def test_redact_url_takes_out_only_the_userinfo(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@host/v1?api_key=sk-abc", "https://***@host/v1?api_key=***"),
        ("https://host/v1?api-version=2024-02-01&KEY=k1&x=1",
         "https://host/v1?api-version=2024-02-01&KEY=***&x=1"),
        ("host/v1?token=t&apikey=a&access_token=b&secret=c&password=d&sig=e&Signature=f#frag",
         "host/v1?token=***&apikey=***&access_token=***&secret=***&password=***&sig=***"
         "&Signature=***#frag"),
        ("http://host/v1?X-Amz-Credential=c%2Fd&region=eu&Api_Key=",
         "http://host/v1?X-Amz-Credential=***&region=eu&Api_Key="),
        ("http://host/v1?keyword=k&flag&a=b?c", "http://host/v1?keyword=k&flag&a=b?c"),
        ("http://host/v1#api_key=k", "http://host/v1#api_key=k"),
    ],
)
def test_redact_url_takes_out_secret_query_values_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redacted_params(shown) == [p for p in ("api_key", "KEY", "token", "apikey",
                                                  "access_token", "secret", "password", "sig",
                                                  "Signature", "X-Amz-Credential")
                                      if f"{p}=***" in shown]


def test_public_settings_and_repr_never_show_query_credentials() -> None:
    config = RunConfig(base_url="https://user:pw@host/v1?api_key=sk-abc",
                       sub_base_url="http://h2/v1?api-version=1&token=tk-123", model="m")
    public = public_settings(config)
    assert public["base_url"] == "https://***@host/v1?api_key=***"
    assert public["sub_base_url"] == "http://h2/v1?api-version=1&token=***"
    for text in (repr(config), str(config)):
        assert "sk-abc" not in text and "tk-123" not in text and "pw" not in text, text
        assert "base_url='https://***@host/v1?api_key=***'" in text, text
        assert "api-version=1&token=***'" in text, text


def test_a_base_url_with_a_redacted_query_value_is_refused_with_what_to_do() -> None:
    with pytest.raises(SettingError) as caught:
        RunConfig(base_url="http://h/v1?v=2&api_key=***", model="m").validate_endpoint()
    message = str(caught.value)
    assert "value of api_key is never written down" in message, message
    assert "pass base_url again with it" in message, message
    # A real value, even one with stars in it, is not taken for a redacted one.
    RunConfig(base_url="http://h/v1?api_key=a***", model="m").validate_endpoint()


def test_public_settings_never_hold_the_key_or_url_credentials() -> None:
    config = RunConfig(base_url="http://alice:s3cret@h/v1", sub_base_url="http://b:pw@h2/v1",
                       api_key="sk-secret", model="m")
    public = public_settings(config)
    assert "api_key" not in public
    assert (public["base_url"], public["sub_base_url"]) == ("http://***@h/v1", "http://***@h2/v1")


def test_a_configs_repr_and_str_never_show_url_credentials() -> None:
    config = RunConfig(base_url="http://alice:s3cret@h/v1", sub_base_url="https://b:pw2@h2/v1",
                       api_key="sk-secret", model="m")
    for text in (repr(config), str(config), f"{config}", repr([config])):
        assert SECRET not in text and "pw2" not in text and "sk-secret" not in text, text
        assert "alice" not in text and "base_url='http://***@h/v1'" in text, text
        assert "sub_base_url='https://***@h2/v1'" in text and "model='m'" in text, text
    assert repr(RunConfig()).startswith("RunConfig(model='fixture', base_url=None, ")


def test_a_malformed_base_url_is_quoted_without_its_credentials() -> None:
    for url in ("ftp://alice:s3cret@h/v1", "alice:s3cret@h/v1"):
        with pytest.raises(SettingError) as caught:
            RunConfig(base_url=url, model="m", provider="openai").validate_endpoint()
        message = str(caught.value)
        assert "must start with http:// or https://" in message and "***@h/v1" in message
        assert SECRET not in message and "alice" not in message, message


def test_an_unparsable_base_url_is_quoted_without_its_credentials() -> None:
    with pytest.raises(SettingError) as caught:
        RunConfig(base_url="http://alice:s3cret@h:port/v1?api_key=KEY", model="m",
                  provider="openai").validate_endpoint()
    message = str(caught.value)
    assert "not a URL the HTTP client can use" in message and "***@h:port/v1" in message
    assert SECRET not in message and "alice" not in message and "KEY" not in message, message


def test_a_redacted_base_url_is_refused_with_what_to_do() -> None:
    with pytest.raises(SettingError) as caught:
        RunConfig(base_url="http://***@h/v1", model="m").validate_endpoint()
    assert "pass base_url again with them" in str(caught.value)


async def test_a_run_sends_the_credentials_and_its_trace_never_holds_them(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    async with serving() as (url, server):
        model = RLM(base_url=with_credentials(url), model="fixture", trace_path=str(trace))
        result = await model.acompletion("What is the magic number?", "The magic number is 7.")
    assert result.status == "answered" and server.stats.total_requests > 0
    text = trace.read_text()
    assert SECRET not in text and SECRET not in repr(result.trace)
    assert redact_url(with_credentials(url)) in text


async def test_refused_url_credentials_are_named_as_such_never_shown() -> None:
    # The server wants a bearer key; the URL's user:password went as Basic auth instead.
    async with serving(api_key="sk-wanted") as (url, _):
        model = RLM(base_url=with_credentials(url), model="fixture", max_retries=0)
        with pytest.raises(AuthenticationError) as caught:
            await model.acompletion("What is the magic number?", "The magic number is 7.")
    message = str(caught.value)
    assert "refused the user:password in the base URL" in message, message
    assert "refused the key" not in message
    assert SECRET not in message and "alice" not in message


def journal_bytes(folder: Path) -> bytes:
    """The journal's files (the database and its write-ahead log, if any), as stored."""
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("j."))


async def rlm(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    return await trio.run_process([RLM_BIN, *args], env=env, capture_stdout=True,
                                  capture_stderr=True, check=False)


async def test_a_volley_journal_keeps_no_credentials_and_work_asks_for_the_url_again(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.sqlite3"
    async with serving() as (url, server):
        secret_url = with_credentials(url)
        created = await rlm("volley", "create", "--journal", str(journal), "a", "b",
                            "--base-url", secret_url, "--model", "fixture")
        assert created.returncode == 0, created.stderr.decode()
        volley_id = created.stdout.decode().strip()
        stored = journal_bytes(tmp_path)
        assert SECRET.encode() not in stored and b"***@127.0.0.1" in stored

        refused = await rlm("volley", "work", volley_id, "--journal", str(journal), "-q")
        assert refused.returncode == 2
        message = refused.stderr.decode()
        assert "--base-url" in message and "again" in message and SECRET not in message
        assert server.stats.total_requests == 0

        worked = await rlm("volley", "work", volley_id, "--journal", str(journal), "-q",
                           "--base-url", secret_url)
        assert worked.returncode == 0, worked.stderr.decode()
        assert server.stats.total_requests == 2


def test_config_show_names_the_base_url_without_its_credentials() -> None:
    for args in (("config", "show"), ("config", "show", "--json")):
        done = rlm_in_process(*args, env={"RLM_BASE_URL": "http://alice:s3cret@h/v1?key=sk-q"})
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout and "sk-q" not in done.stdout, done.stdout
        assert "http://***@h/v1?key=***" in done.stdout


def test_a_cache_journals_password_is_kept_out_of_the_trace_and_the_repr(tmp_path: Path) -> None:
    # --cache postgresql://user:password@host/db: run_started recorded it whole.
    cache = f"postgresql://alice:{SECRET}@127.0.0.1:1/db"
    assert SECRET not in repr(RunConfig(cache_path=cache))
    assert "cache_path='postgresql://***@127.0.0.1:1/db'" in repr(RunConfig(cache_path=cache))
    assert public_settings(RunConfig(cache_path=cache))["cache_path"] == cache  # to use again
    trace = tmp_path / "t.jsonl"
    done = rlm_in_process("run", "What is the magic number?", "--provider", "fixture",
                          "--cache", cache, "--trace", str(trace), "--no-history", "-q",
                          stdin="")
    assert done.returncode == 1  # nothing listens on port 1
    text = trace.read_text(encoding="utf-8")
    assert '"cache_path": "postgresql://***@127.0.0.1:1/db"' in text
    assert SECRET not in text and SECRET not in done.stderr


def test_a_cache_journal_url_that_does_not_parse_keeps_its_password_out_of_the_error(
    tmp_path: Path,
) -> None:
    # libpq quotes a URL it cannot parse whole: the password went to stderr and the trace.
    cache = f"postgresql://alice:{SECRET}@[::1"
    trace = tmp_path / "t.jsonl"
    done = rlm_in_process("run", "What is the magic number?", "--provider", "fixture",
                          "--cache", cache, "--trace", str(trace), "--no-history", "-q",
                          "--debug", stdin="")
    assert done.returncode != 0
    assert "cannot open journal postgresql://alice:***@[::1" in done.stderr, done.stderr
    assert SECRET not in done.stderr, done.stderr  # --debug: the traceback too
    assert not trace.exists() or SECRET not in trace.read_text(encoding="utf-8")
