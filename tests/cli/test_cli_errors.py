"""How a command ends when an error comes out of a trio nursery: as it would on its own.

Ctrl-C during `rlm bench` reaches the top of the CLI as a KeyboardInterrupt
inside (nested) exception groups, and a stdout reader that went away during
`rlm run --stream --output-format jsonl | head -1` as a BrokenPipeError
inside one; each must read as the bare error does: "interrupted" and
exit 130, or a silent exit 1, never a traceback.
"""

from __future__ import annotations

import pytest

from rlm.cli._errors import RLMGroup
from rlm.errors import UsageError


def _group_raising(error: BaseException) -> RLMGroup:
    group = RLMGroup("rlm")

    @group.command("boom")
    def boom() -> None:
        raise error

    return group


def _ends(error: BaseException, capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    with pytest.raises(SystemExit) as ended:
        _group_raising(error).main(["boom"])
    return ended.value.code, capsys.readouterr().err


def test_ctrl_c_inside_nested_nurseries_is_an_interrupt_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nested = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [KeyboardInterrupt()])])
    code, err = _ends(nested, capsys)
    assert code == 130
    assert err == "interrupted\n"


def test_a_broken_pipe_inside_a_nursery_ends_silently(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _ends(ExceptionGroup("stream", [BrokenPipeError(32, "Broken pipe")]), capsys)
    assert code == 1
    assert err == ""


def test_an_rlm_error_inside_a_nursery_keeps_its_message_and_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _ends(ExceptionGroup("run", [UsageError("pass --model M")]), capsys)
    assert code == 2
    assert err == "Error: pass --model M\n"


def test_a_system_exit_inside_a_nursery_is_not_reported_as_an_error() -> None:
    group = BaseExceptionGroup("run", [SystemExit(3)])
    with pytest.raises(BaseExceptionGroup) as raised:
        _group_raising(group).main(["boom"])
    assert raised.value is group


def test_a_ctrl_c_python_wrapped_is_an_interrupt_not_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Python 3.11 wraps what a class's __set_name__ raises (a dataclass being made
    # while a command's modules load) in a RuntimeError caused by it.
    wrapped = RuntimeError("Error calling __set_name__ on '_FieldInfo' instance 'x' in 'Config'")
    wrapped.__cause__ = KeyboardInterrupt()
    code, err = _ends(wrapped, capsys)
    assert code == 130
    assert err == "interrupted\n"


def test_an_error_without_a_ctrl_c_behind_it_is_still_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrapped = RuntimeError("something broke")
    wrapped.__context__ = ValueError("inner")
    code, err = _ends(wrapped, capsys)
    assert code == 1
    assert err.startswith("Error: RuntimeError: something broke")
