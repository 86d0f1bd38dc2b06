"""Config files and profiles (issue 11, item 10): flags > env > profile > top-level > defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm._profiles import load_profile
from rlm.errors import UsageError
from tests.helpers import rlm_in_process

RLM_CMD = [sys.executable, "-m", "rlm"]

PROJECT = """
max_iterations = 12
model = "top-level-model"

[profiles.fast-local]
base_url = "http://127.0.0.1:8000/v1"
model = "qwen"
max_concurrent = 16
rpm = 600
require_isolation = ["seccomp"]

[profiles.demo]
provider = "fixture"
max_iterations = 3
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "rlm.toml").write_text(PROJECT)
    return tmp_path


def test_profiles_merge_user_file_project_file_and_the_chosen_profile(
    project: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user.toml"
    user.write_text('max_retries = 5\nmax_iterations = 30\n[profiles.fast-local]\ntpm = 90000\n')
    profile = load_profile("fast-local", cwd=project, user_file=user)
    assert profile.values == {
        "max_retries": 5,
        "max_iterations": 12,  # the project file wins over the user's
        "model": "qwen",  # the profile wins over top-level keys
        "tpm": 90000.0,
        "base_url": "http://127.0.0.1:8000/v1",
        "max_concurrent": 16,
        "rpm": 600.0,
        "require_isolation": ("seccomp",),
    }
    assert profile.sources["rpm"].endswith("rlm.toml [profiles.fast-local]")
    assert profile.sources["max_retries"] == str(user)
    assert set(profile.available) == {"fast-local", "demo"}
    assert load_profile(None, cwd=project, user_file=user).values["model"] == "top-level-model"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_iteration = 3", r"unknown setting 'max_iteration' \(did you mean 'max_iterations'"),
        ("rpm = 'fast'", r"rpm must be a number"),
        ("max_depth = true", r"max_depth must be an integer"),
        ("provider = 'gemini'", r"provider must be 'openai', 'anthropic' or 'fixture'"),
        ("api_key = 'sk-1'", r"API keys do not belong in config files"),
        ("rpm = ", r"is not valid TOML"),
    ],
)
def test_a_bad_config_file_names_the_file_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "rlm.toml").write_text(text + "\n")
    with pytest.raises(UsageError, match=message) as caught:
        load_profile(None, cwd=tmp_path, user_file=tmp_path / "none.toml")
    assert "rlm.toml" in str(caught.value)


def test_an_unknown_profile_lists_the_known_ones(project: Path) -> None:
    with pytest.raises(UsageError, match=r"no profile 'fast'.*demo, fast-local"):
        load_profile("fast", cwd=project, user_file=project / "none.toml")


def _cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_"))}
    full_env["XDG_CONFIG_HOME"] = str(cwd / "no-user-config")
    full_env.update(env or {})
    return subprocess.run([*RLM_CMD, *args], cwd=cwd, env=full_env, capture_output=True,
                          timeout=60, check=False)


def _config_in_process(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`rlm config ...` (it starts nothing) through the CLI entry in this process."""
    monkeypatch.chdir(cwd)
    return rlm_in_process("config", *args,
                          env={"XDG_CONFIG_HOME": str(cwd / "no-user-config"), **(env or {})})


def test_config_show_reports_values_and_sources_in_precedence_order(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _config_in_process(project, monkeypatch, "show", "--json", "--profile", "fast-local",
                              env={"RLM_MODEL": "from-env"})
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["settings"]
    assert shown["model"] == {"value": "from-env", "source": "env RLM_MODEL"}
    assert shown["rpm"]["value"] == 600 and "[profiles.fast-local]" in shown["rpm"]["source"]
    assert shown["max_iterations"]["value"] == 12
    assert shown["max_iterations"]["source"].endswith("rlm.toml")
    assert shown["burst"] == {"value": 1, "source": "default"}


def test_a_profile_drives_a_run_and_flags_still_win(project: Path) -> None:
    (project / "ctx.txt").write_text("The magic number is 31.")
    done = _cli(project, "run", "What is the magic number?", "--context-file", "ctx.txt",
                "--profile", "demo", "--max-iterations", "5", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "31"
    started = json.loads(done.stdout)
    assert started["status"] == "answered"
    env_profile = _cli(project, "run", "What is the magic number?", "--context-file", "ctx.txt",
                       "-q", env={"RLM_PROFILE": "demo"})
    assert env_profile.returncode == 0 and env_profile.stdout == b"31\n"


def test_a_bad_config_file_is_blamed_on_the_file_not_on_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rlm.toml").write_text("max_iteration = 3\n")
    done = _config_in_process(tmp_path, monkeypatch, "show")
    assert done.returncode == 2 and "rlm.toml: unknown setting 'max_iteration'" in done.stderr
    assert "--profile" not in done.stderr.split("Error:")[-1]


def test_a_flag_beats_the_profile_and_the_environment_beats_it_too(tmp_path: Path) -> None:
    """The profile's ceiling would stop the run (17 calls): a flag lifts it; RLM_MODEL replaces
    the profile's model."""
    (tmp_path / "rlm.toml").write_text(
        '[profiles.tight]\nprovider = "fixture"\nmax_llm_calls = 2\nmodel = "no-such-model"\n'
    )
    (tmp_path / "ctx.txt").write_text("filler. " * 2000 + "The magic number is 31.")
    args = ["run", "What is the magic number?", "--context-file", "ctx.txt", "--profile", "tight",
            "--json"]
    profile_only = _cli(tmp_path, *args, env={"RLM_MODEL": "fixture"})
    assert profile_only.returncode == 3, profile_only.stderr  # the profile's ceiling held
    flag_wins = _cli(tmp_path, *args, "--max-llm-calls", "100", env={"RLM_MODEL": "fixture"})
    assert flag_wins.returncode == 0, flag_wins.stderr
    result = json.loads(flag_wins.stdout)
    assert result["answer"] == "31"
    assert set(result["usage_detail"]["by_model"]) == {"fixture"}  # RLM_MODEL, not the profile's


def test_a_config_file_nested_thousands_deep_is_named(tmp_path: Path) -> None:
    (tmp_path / "rlm.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(UsageError, match=r"rlm.toml nests arrays or tables too deeply"):
        load_profile(None, cwd=tmp_path, user_file=tmp_path / "absent.toml")
