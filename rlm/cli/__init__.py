"""The ``rlm`` command line.  Each command lives in its own module."""

from __future__ import annotations

from rlm.cli._group import main
from rlm.cli.bench_cmd import bench
from rlm.cli.config_cmd import config_group
from rlm.cli.doctor_cmd import doctor
from rlm.cli.fixture_cmds import fixture_group, fixture_server
from rlm.cli.run_cmd import run
from rlm.cli.runs_cmd import runs
from rlm.cli.view_cmd import view
from rlm.cli.volley_cmd import volley

__all__ = ["main"]

for _command in (
    run, fixture_server, fixture_group, doctor, bench, view, volley, runs, config_group
):
    main.add_command(_command)
