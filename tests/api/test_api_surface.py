"""The Python API speaks Python; the CLI speaks flags; both read one table of defaults."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import pydoc
from pathlib import Path

import pytest
from click.testing import CliRunner

import rlm
from rlm import RLM, BudgetExceeded, RunConfig, SettingError, UsageError
from rlm._config import DEFAULTS, PROVIDERS
from rlm._spelling import settings_spelled_as
from rlm._traffic.budget import Budget, BudgetLimits
from rlm.cli import main
from rlm.cli._flags import cli_setting
from rlm.providers.fixture import FixtureProvider
from rlm.testing.provider import FunctionProvider

NOT_SETTINGS = {"trace_path", "sinks", "providers", "sandboxes", "tools", "fixture"}


def test_rlm_takes_every_setting_as_a_keyword_with_the_config_default() -> None:
    parameters = inspect.signature(RLM).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    settings = {name: p.default for name, p in parameters.items() if name not in NOT_SETTINGS}
    fields = {f.name: getattr(DEFAULTS, f.name) for f in dataclasses.fields(RunConfig)}
    # model: None means the config's default for the fixture, and "name one" for an API.
    assert settings.pop("model") is None
    assert RLM(provider="fixture").config.model == fields.pop("model")
    assert settings == fields


def test_a_misspelt_setting_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="max_detph"):
        RLM(max_detph=2)  # type: ignore[call-arg]  # what an editor flags


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_depth": 0}, "max_depth must be a positive integer, got 0"),
        ({"root_permits": 8}, "root_permits (8) must be less than max_concurrent (8)"),
        ({"provider": "openai", "base_url": "ftp://x"}, "base_url must start with http://"),
        # Parsed as the HTTP client will parse it: a bad port or no host is a setting
        # error before the run, not an InvalidURL from inside it.
        ({"provider": "openai", "model": "m", "base_url": "http://[::1"},
         "base_url is not a URL the HTTP client can use (Invalid port"),
        ({"provider": "openai", "model": "m", "base_url": "http:///v1"},
         "base_url is not a URL the HTTP client can use (it names no host)"),
        ({"provider": "anthropic", "model": ""}, 'no model: pass model="M", or use provider='),
        # No model at all: a hosted API has no model called "fixture" (it was sent that name).
        ({"provider": "openai"}, 'no model: pass model="M", or use provider='),
        ({"provider": "anthropic", "api_key": "k"}, 'no model: pass model="M", or use provider='),
        # A wrong type is named, not met as a TypeError deep in the run.
        ({"provider": "fixture", "max_depth": "3"}, "max_depth must be an integer, got '3'"),
        ({"provider": "fixture", "timeout": True}, "timeout must be a number or None, got True"),
        ({"provider": "fixture", "require_isolation": [3]}, "must be a list of str, got (3,)"),
        ({"provider": "ollama"}, "provider must be 'openai', 'anthropic' or 'fixture'"),
    ],
)
def test_api_errors_name_python_parameters(settings: dict[str, object], message: str) -> None:
    with pytest.raises(SettingError) as caught:
        RLM(**settings)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "--" not in str(caught.value)
    assert isinstance(caught.value, UsageError)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "fixture", "--max-depth", "0"], "--max-depth must be a positive integer"),
        (["--provider", "fixture", "--root-permits", "8"], "--root-permits (8) must be less"),
        (["--provider", "openai", "--model", ""], "no model: pass --model M (or set RLM_MODEL)"),
        # No --model at all (and no RLM_MODEL): the same message, not a type error about None.
        (["--provider", "openai"], "no model: pass --model M (or set RLM_MODEL)"),
        (["--provider", "anthropic"], "no model: pass --model M (or set RLM_MODEL)"),
        # NaN and infinity are no limit and no duration (NaN reached trio as a ValueError).
        (["--provider", "fixture", "--stream-idle-timeout", "nan"],
         "Invalid value for '--stream-idle-timeout': the value must be a duration like"),
        (["--provider", "fixture", "--exec-timeout", "inf"],
         "Invalid value for '--exec-timeout': the value must be a duration like"),
        (["--provider", "fixture", "--rpm", "nan"], "--rpm must be a positive rate per minute"),
        (["--provider", "fixture", "--max-cost", "inf"], "--max-cost must be a positive amount"),
        (["--provider", "fixture", "--max-cost", "nan"], "--max-cost must be a positive amount"),
        (["--provider", "fixture", "--max-concurrent", "100000"],
         "--max-concurrent must be at most 4,096, got 100,000"),
    ],
)
def test_cli_errors_name_flags(args: list[str], message: str) -> None:
    env = {"RLM_BASE_URL": None, "RLM_MODEL": None, "RLM_PROVIDER": None, "RLM_API_KEY": "k"}
    result = CliRunner().invoke(main, ["run", "q", *args], env=env)
    assert result.exit_code == 2
    assert f"Error: {message}" in result.output


@pytest.mark.parametrize(
    ("config", "args", "env", "message"),
    [
        ("max_concurrent = 100000\n", [], {},
         '"max_concurrent" in {toml} must be at most 4,096, got 100,000'),
        ("[profiles.big]\nmax_concurrent = 100000\n", ["--profile", "big"], {},
         '"max_concurrent" in {toml} [profiles.big] must be at most 4,096, got 100,000'),
        ("", ["--provider", "openai", "--model", "m"], {"RLM_BASE_URL": "ftp://x"},
         "RLM_BASE_URL must start with http:// or https://, got 'ftp://x'"),
        # Given as a flag, it is named as the flag, whatever else also sets it.
        ("max_concurrent = 8\n", ["--max-concurrent", "100000"], {},
         "--max-concurrent must be at most 4,096, got 100,000"),
    ],
)
def test_cli_errors_name_where_a_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, args: list[str],
    env: dict[str, str], message: str,
) -> None:
    # A value from a config file or the environment was reported as the flag
    # (`--max-concurrent must be ...`), which the person never gave.
    (tmp_path / "rlm.toml").write_text(config)
    monkeypatch.chdir(tmp_path)
    unset = {"RLM_BASE_URL": None, "RLM_MODEL": None, "RLM_PROVIDER": None, "RLM_API_KEY": "k"}
    result = CliRunner().invoke(main, ["run", "q", "--provider", "fixture", *args],
                                env={**unset, **env})
    assert result.exit_code == 2
    assert result.output.endswith(f"Error: {message.format(toml=tmp_path / 'rlm.toml')}\n")


def test_help_lists_every_provider_and_the_version_exists() -> None:
    text = pydoc.render_doc(RLM)
    assert all(f'"{name}"' in text for name in PROVIDERS)
    assert rlm.__version__ == importlib.metadata.version("rlm")


async def test_injected_providers_need_no_endpoint_and_fixture_answers_are_marked() -> None:
    scripted = FunctionProvider.scripted(["FINAL(done)"])
    model = RLM(providers={"root": scripted, "sub": scripted})
    assert model.config.provider == "openai"  # not silently switched to the fixture
    result = await model.acompletion("q", "ctx")
    assert result.answer == "done" and result.answered_by == (scripted.name,)
    marked = await RLM(providers=FixtureProvider()).acompletion(  # one provider, both lanes
        "What is the magic number?", "the magic number is 7"
    )
    assert marked.answer == "7" and marked.answered_by == ("fixture",)


def test_a_limit_met_in_a_python_run_names_the_parameter() -> None:
    result = RLM(provider="fixture", max_llm_calls=2).completion(
        "What is the magic number?", "filler. " * 3000 + "The magic number is 3."
    )
    assert result.status == "budget_exceeded"
    assert "max_llm_calls=2 reached" in (result.error or "")
    assert "max_llm_calls=None lifts it" in (result.error or "")
    assert "--" not in (result.error or "")


def test_the_cli_spells_the_same_limit_as_its_flag() -> None:
    budget = Budget(limits=BudgetLimits(max_llm_calls=1, max_cost=0.5))
    with pytest.raises(BudgetExceeded, match=r"only 1 of max_llm_calls=1 remain"):
        budget.check_batch(2)
    with settings_spelled_as(cli_setting), pytest.raises(
        BudgetExceeded, match=r"only 1 of --max-llm-calls 1 remain"
    ):
        budget.check_batch(2)
    with settings_spelled_as(cli_setting), pytest.raises(
        BudgetExceeded, match=r"--max-cost cannot be enforced .* add it with --prices FILE"
    ):
        budget.check_priced("no-such-model")
    with pytest.raises(BudgetExceeded, match=r'add it with prices_path="FILE"'):
        budget.check_priced("no-such-model")  # and the spelling did not outlive the block
