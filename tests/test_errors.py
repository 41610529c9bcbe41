"""The shared CLI boundary: domain errors are one line and exit 2, bugs keep their traceback."""

import pytest

from lrsim.errors import DomainError, InputError, OneLineParser, UsageError, run_command


def test_domain_error_is_one_line_exit_2(capsys):
    def bad():
        raise InputError("alpha1 must lie in [0, 1]\nsecond line")

    assert run_command("prog", bad) == 2
    err = capsys.readouterr().err
    assert err == "prog: error: alpha1 must lie in [0, 1]\n"


def test_oserror_is_one_line_exit_2(tmp_path, capsys):
    def unwritable():
        open(tmp_path / "missing-dir" / "out.csv", "w")

    assert run_command("prog", unwritable) == 2
    err = capsys.readouterr().err
    assert err.startswith("prog: error: ") and "out.csv" in err and err.count("\n") == 1


def test_internal_bug_keeps_its_traceback():
    def bug():
        raise ValueError("an internal bug, not bad input")

    with pytest.raises(ValueError, match="internal bug"):
        run_command("prog", bug)


def test_output_and_exit_codes(capsys):
    assert run_command("prog", lambda: "hello") == 0
    assert capsys.readouterr().out == "hello\n"
    assert run_command("prog", lambda: 3) == 3
    assert run_command("prog", lambda: None) == 0


def test_parser_errors_are_usage_errors():
    p = OneLineParser(prog="prog")
    p.add_argument("--n", type=int)
    with pytest.raises(UsageError):
        p.parse_args(["--n", "x"])
    assert issubclass(UsageError, InputError) and issubclass(InputError, ValueError)
    assert issubclass(InputError, DomainError)
