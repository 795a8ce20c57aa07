from pathlib import Path

import pytest

from common.flags import (
    FlagError,
    FlagTable,
    boolean,
    duration,
    flag,
    integer,
    milliseconds,
    optional_path,
    string_list,
)

TABLE = FlagTable(
    "tool",
    "a tool",
    "TOOL_",
    [
        flag("-i", "--interval", field="interval", parse=milliseconds(100, 10_000), default="1000",
             env=("PEER_INTERVAL",), help="interval"),
        flag("--port", field="net.port", parse=integer(1, 65535), default="80", help="port"),
        flag("--debug", field="debug", parse=boolean, default="false", switch=True, help="debug"),
        flag("--names", field="names", parse=string_list, default="a", repeated=True, help="names"),
        flag("--file", field="file", parse=optional_path, help="file"),
        flag("--ttl", field="net.ttl", parse=duration(0, 60, "0s to 1m"), default="10s", help="ttl"),
        flag("--old", env=("PEER_OLD",), help="", ignored="the peer's own setting"),
    ],
)  # fmt: skip


def test_defaults_are_parsed_from_the_table() -> None:
    assert TABLE.default("interval") == 1.0
    assert TABLE.default("file") is None
    values = TABLE.read([], {})
    assert values.fields() == {"interval": 1.0, "debug": False, "names": ("a",), "file": None}
    assert values.fields("net") == {"port": 80, "ttl": 10.0}
    assert values.given == frozenset()
    assert values.ignored == ()


def test_a_flag_wins_over_our_variable_which_wins_over_the_peers() -> None:
    env = {"PEER_INTERVAL": "300", "TOOL_INTERVAL": "200"}
    assert TABLE.read([], {"PEER_INTERVAL": "300"})["interval"] == 0.3
    assert TABLE.read([], env)["interval"] == 0.2
    assert TABLE.read(["-i", "400"], env)["interval"] == 0.4
    assert TABLE.read(["--interval=500"], env).given == frozenset({"interval"})


def test_switches_repeats_and_empty_lists() -> None:
    values = TABLE.read(["--debug", "--names=x,y", "--names", "z", "--file=/etc/f"], {})
    assert values["debug"] is True
    assert values["names"] == ("x", "y", "z")
    assert values["file"] == Path("/etc/f")
    assert TABLE.read(["--debug=false"], {})["debug"] is False
    assert TABLE.read(["--names="], {})["names"] == ()  # given but empty: an empty list, not the default
    assert TABLE.read([], {"TOOL_NAMES": "p, q"})["names"] == ("p", "q")


def test_ignored_flags_are_reported_when_given_by_flag_or_variable() -> None:
    assert TABLE.read(["--old"], {}).ignored == ("--old",)
    assert TABLE.read(["--old", "value"], {}).ignored == ("--old",)
    assert TABLE.read([], {"PEER_OLD": "1"}).ignored == ("--old",)
    assert "old" not in TABLE.read(["--old"], {}).fields()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-i", "50"], {}, "--interval (or TOOL_INTERVAL, PEER_INTERVAL): 50 is outside the valid range 100 to 10000"),
        ([], {"PEER_INTERVAL": "x"}, "environment variable PEER_INTERVAL (--interval): 'x' is not a whole number"),
        (["--debug=maybe"], {}, "--debug (or TOOL_DEBUG): 'maybe' is not a boolean (true or false)"),
        (["--ttl=2m"], {}, "--ttl (or TOOL_TTL): 2m is outside the valid range 0s to 1m"),
        (["--ttl=10"], {}, "'10' is not a duration like 30s, 1m30s or 500ms"),
        (["--nope"], {}, "unknown flag or argument: --nope"),
        (["stray"], {}, "unknown flag or argument: stray"),
        (["--port"], {}, "expected one argument"),
    ],
)
def test_errors_name_the_flag_or_variable_and_what_is_valid(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(FlagError) as e:
        TABLE.read(argv, env)
    assert message in str(e.value)


def test_help_names_the_variables_and_defaults_and_hides_ignored_flags() -> None:
    text = " ".join(TABLE.usage().split())  # as wrapped for the terminal
    assert "[env $TOOL_INTERVAL, $PEER_INTERVAL; default 1000]" in text
    assert "--old" not in text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("1s", 1), ("1m30s", 90), ("1.5h", 5400), ("500ms", 0.5), ("100us", 0.0001)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert duration(0, 86400, "")(text) == pytest.approx(seconds)
