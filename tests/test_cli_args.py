"""Bad arguments stop before any work, naming what is allowed."""

from rankcollapse.book.cli import main


def test_jobs_below_one_is_refused(capsys):
    assert main(["run", "decomposition", "--profile", "smoke", "-j", "0"]) == 2
    assert "integer >= 1" in capsys.readouterr().err


def test_underscore_parameter_is_refused(capsys):
    assert main(["run", "decomposition", "--profile", "smoke", "-p", "_big_layers", "3"]) == 2
    assert "_big_layers" in capsys.readouterr().err


def test_unknown_kernel_variant_is_refused_by_the_parser(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["check", "--profile", "smoke", "--kernels", "avx9"])


def test_record_spread_names_only_known_variants(capsys):
    assert main(["record", "--profile", "smoke", "decomposition", "--spread", "avx9"]) == 2
    assert "avx9" in capsys.readouterr().err


def test_a_bad_scheduler_address_is_refused_before_any_work(capsys, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("RCBOOK_BUILD", str(tmp_path))
    monkeypatch.delenv("RCBOOK_SCHEDULER", raising=False)
    assert main(["run", "collapse", "--profile", "smoke", "--scheduler", "not an address"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler" in err and "tcp://host:8786" in err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written
    assert "RCBOOK_SCHEDULER" not in os.environ
