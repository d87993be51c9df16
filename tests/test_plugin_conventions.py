"""The plugin follows pytest's conventions: an ini key for every option, isolation off under a
debugger (said once), a report header naming the kit and runtime versions, one version source."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

import fd_conformance
from fd_conformance.devices import framework_versions
from fd_conformance.isolation.plugin import DEBUGGER_NOTE
from fd_conformance.isolation.plugin import OPTIONS as ISOLATION_OPTIONS
from fd_conformance.plugin.options import OPTIONS as SUITE_OPTIONS

pytest_plugins = ["pytester"]

ALL_OPTIONS = {**SUITE_OPTIONS, **ISOLATION_OPTIONS}
# A framework installed here (--fd-runtime refuses one that is not): torch where both are, paddle
# in an environment without torch (tox -e py310 on a machine whose only CPU torch wheel is 3.11's).
INSTALLED = next((name for name, found in framework_versions().items() if found), "torch")
SHOW_OPTIONS = """
import pytest

from fd_conformance.isolation.plugin import CONTROLLER_KEY

def test_show(request):
    config = request.config
    print("VALUES", {name: config.getoption(name) for name in {names!r}})
    print("MODE", config.stash[CONTROLLER_KEY].mode)
"""


def _values(result: pytest.RunResult) -> str:
    return "\n".join(line for line in result.outlines if "VALUES" in line or "MODE" in line)


def test_every_fd_option_has_an_ini_key(pytester: pytest.Pytester) -> None:
    out = pytester.runpytest("--help").stdout.str()
    flags = set(re.findall(r"(--fd-[a-z-]+)", out))
    assert flags == set(ALL_OPTIONS), "an --fd-* option without an IniOption entry"
    ini_section = out.split("[pytest]", 1)[1]  # the ini keys section (its title varies by pytest version)
    for flag in flags:
        assert re.search(rf"^\s+{flag[2:].replace('-', '_')} ", ini_section, re.M), flag


def test_ini_value_is_used_when_the_option_is_absent_and_the_flag_wins(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        f"[pytest]\nfd_runtime = {INSTALLED}\nfd_cycles = 7\nfd_include_mutants = true\nfd_isolate = off\nfd_timeout = 42\n"
    )
    names = ["fd_runtime", "fd_cycles", "fd_include_mutants", "fd_isolate", "fd_timeout", "fd_device"]
    pytester.makepyfile(test_show=SHOW_OPTIONS.replace("{names!r}", repr(names)))
    ini_run = pytester.runpytest("-s", "-p", "no:cacheprovider")
    assert ini_run.ret == 0, ini_run.stdout.str()
    shown = _values(ini_run)
    for expected in (f"'fd_runtime': '{INSTALLED}'", "'fd_cycles': '7'", "'fd_include_mutants': True", "'fd_timeout': '42'"):
        assert expected in shown, shown
    assert "'fd_device': 'auto'" in shown  # in neither: the built-in default
    assert "MODE off" in shown
    flag_run = pytester.runpytest("-s", "-p", "no:cacheprovider", "--fd-runtime=auto", "--fd-isolate=marked", "--fd-cycles=3")
    shown = _values(flag_run)
    assert "'fd_runtime': 'auto'" in shown and "'fd_cycles': '3'" in shown and "MODE marked" in shown, shown


def test_a_repeatable_option_takes_the_ini_lines(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfd_model =\n    a:CASES\n    b:CASES\n")
    config = pytester.parseconfig()
    SUITE_OPTIONS["--fd-model"].resolve(config)
    assert config.getoption("fd_model") == ["a:CASES", "b:CASES"]
    given = pytester.parseconfig("--fd-model=c:CASES")
    SUITE_OPTIONS["--fd-model"].resolve(given)
    assert given.getoption("fd_model") == ["c:CASES"]  # the flag replaces the ini list


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfd_isolate = sometimes\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any("fd_isolate" in line and "sometimes" in line and "fix:" in line for line in result.errlines), result.errlines


def test_a_debugger_flag_turns_isolation_off_and_says_so_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_iso="""
        import os, pytest

        @pytest.mark.isolated
        def test_here():
            assert os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") is None  # in the session's own process

        @pytest.mark.isolated
        def test_here_too():
            pass
        """
    )
    result = pytester.runpytest_subprocess("--pdb", "-p", "no:cacheprovider")
    note = DEBUGGER_NOTE.format(flag="--pdb")
    assert result.stdout.str().count(note) == 1, result.stdout.str()
    result.assert_outcomes(passed=2)


def test_no_note_when_isolation_is_already_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--pdb", "--fd-isolate=off", "-p", "no:cacheprovider")
    assert "isolation is off" not in result.stdout.str()


@pytest.mark.parametrize("asks", [["--fd-runtime=auto"], ["-p", "fd_conformance"]], ids=["fd-option", "p-plugin"])
def test_report_header_names_kit_and_runtime_versions_without_importing_them(pytester: pytest.Pytester, asks: list[str]) -> None:
    """In a session that asks for the kit (an --fd-* option, even at its default, or -p fd_conformance);
    a session that does not sees no header line (test_plugin_stays_out)."""
    pytester.makepyfile(test_x="import sys\n\ndef test_x():\n    assert not {'torch', 'paddle'} & set(sys.modules)\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *asks)
    result.assert_outcomes(passed=1)
    versions = framework_versions()
    runtimes = ", ".join(f"{name} {found or 'not installed'}" for name, found in versions.items())
    assert f"fd-conformance {fd_conformance.__version__} ({runtimes})" in result.stdout.str()
    assert versions[INSTALLED] == importlib.metadata.version(INSTALLED.replace("paddle", "paddlepaddle"))


def test_version_has_one_source() -> None:
    assert fd_conformance.__version__ == importlib.metadata.version("fd-conformance")
    init = Path(fd_conformance.__file__).read_text(encoding="utf-8")
    assert not re.search(r"__version__ = \"\d+\.\d+", init)  # read from the installed metadata, not written here
