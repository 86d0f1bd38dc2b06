"""Reading the context is bounded: what is not a file is refused, sizes are capped before
they are read, and a named pipe must deliver within the run's timeout (issue 27, item 11).

Real files, devices and named pipes; nothing here waits longer than a fraction of a second.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rlm._files import ReadLimits, read_text
from rlm.cli._context_input import read_context
from rlm.errors import UsageError
from tests.helpers import rlm_in_process


def test_a_device_is_refused_before_anything_is_read() -> None:
    with pytest.raises(UsageError, match=r"/dev/zero is not a file \(a character device\)"):
        read_context(("/dev/zero",), "utf-8")


def test_a_file_larger_than_the_cap_is_refused_by_its_size(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.bin"
    with sparse.open("wb") as handle:
        handle.truncate(2 << 30)  # 2 GiB that take no disk: reading it would take 2 GiB
    with pytest.raises(UsageError, match="more than the 512MiB left of --max-context-bytes"):
        read_context((str(sparse),), "utf-8")


def test_the_cap_counts_every_file_together(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("x" * 600)
    paths = (str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))
    assert read_context(paths, "utf-8", limits=ReadLimits(1200)) == ["x" * 600, "x" * 600]
    with pytest.raises(UsageError, match=r"b.txt holds more than the 400B left"):
        read_context(paths, "utf-8", limits=ReadLimits(1000))
    with pytest.raises(UsageError, match="more than 10,000 files or 1000B"):
        read_context((str(tmp_path),), "utf-8", limits=ReadLimits(1000))


def test_a_named_pipe_with_no_writer_ends_at_the_timeout(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(UsageError, match=r"named pipe\) sent no end of data within --timeout"):
        read_text(str(pipe), "utf-8", limits=ReadLimits(wait=0.2))


def test_a_named_pipe_is_read_until_its_writer_closes_it(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)

    def write() -> None:
        with pipe.open("w") as handle:
            handle.write("the magic number is 42\n" * 1000)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        text = read_text(str(pipe), "utf-8", limits=ReadLimits(wait=30))
    finally:
        writer.join()
    assert text == "the magic number is 42\n" * 1000


def test_a_named_pipe_past_the_cap_is_cut_off_not_buffered(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    stop = threading.Event()

    def flood() -> None:  # like `cat /dev/urandom > pipe`: it would never end by itself
        with pipe.open("wb") as handle:
            while not stop.is_set():
                try:
                    handle.write(b"y" * 65536)
                except BrokenPipeError:
                    return

    writer = threading.Thread(target=flood)
    writer.start()
    try:
        with pytest.raises(UsageError, match=r"more than the .* left of --max-context-bytes"):
            read_text(str(pipe), "utf-8", limits=ReadLimits(1 << 20, wait=30))
    finally:
        stop.set()
        writer.join()


def test_stdin_is_capped_and_the_message_names_the_setting(tmp_path: Path) -> None:
    done = rlm_in_process("run", "q", "--context-file", "-", "--provider", "fixture",
                          "--max-context-bytes", "1KiB", stdin="z" * 5000)
    assert done.returncode == 2
    assert "stdin holds more than the 1KiB left of --max-context-bytes" in done.stderr


def test_the_python_api_holds_a_context_to_the_same_setting() -> None:
    from rlm import RLM, SettingError

    with pytest.raises(SettingError, match="more than max_context_bytes=100"):
        RLM(provider="fixture", max_context_bytes=100).completion("q", "x" * 101)
