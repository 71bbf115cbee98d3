"""Every variant of the Rust layer's error has its own arm in src/errors.rs,
and every class that arm names exists, is exported and is documented: the
wildcard arm is left for variants newer than this package."""

import pathlib
import re

import pytest

import hostcopy
from hostcopy import _errors

HERE = pathlib.Path(__file__).resolve().parent
BINDING = HERE.parent / "src" / "errors.rs"
LAYER = HERE.parent.parent / "src" / "cuda" / "error.rs"


def source(path: pathlib.Path) -> str:
    if not path.exists():
        pytest.skip(f"{path} is not here (tests run from a checkout)")
    return path.read_text()


def variants() -> list[str]:
    enum = source(LAYER).split("pub enum Error {", 1)[1].split("\n}", 1)[0]
    return re.findall(r"^    ([A-Z]\w*)\b", enum, re.MULTILINE)


def test_every_variant_of_the_layers_error_has_an_arm():
    binding = source(BINDING)
    names = variants()
    assert "InvalidOption" in names and "Driver" in names, names
    missing = [name for name in names if f"Error::{name}" not in binding]
    assert missing == [], f"src/errors.rs has no arm for Error::{missing}"


def test_every_class_the_arms_name_is_exported_and_documented():
    named = set(re.findall(r'"([A-Z]\w+)"', source(BINDING)))
    assert {"InvalidOption", "NoCurrentContext", "NotPrimaryContext", "RecordPoolError"} <= named
    for name in sorted(named):
        cls = getattr(_errors, name)
        assert issubclass(cls, Exception) and cls.__doc__, name
        assert getattr(hostcopy, name) is cls and name in hostcopy.__all__, name
