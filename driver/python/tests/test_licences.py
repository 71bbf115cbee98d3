"""The installed package carries the licence texts of the repository.

pyproject.toml names them (`license-files`); maturin writes them under the
wheel's ``.dist-info/licenses/`` and lists them as ``License-File`` in its
metadata. The texts are compared with the repository's, where this file
runs from one (driver/python/tests).
"""

from importlib.metadata import distribution
from pathlib import Path

LICENCES = ["LICENSE-MIT", "LICENSE-APACHE"]
ROOT = Path(__file__).resolve().parents[3]


def test_the_installed_metadata_lists_both_licence_files():
    listed = distribution("hostcopy").metadata.get_all("License-File") or []
    assert sorted(listed) == sorted(LICENCES), listed


def test_the_installed_licence_files_are_the_repositorys_texts():
    installed = distribution("hostcopy")
    for name in LICENCES:
        text = installed.read_text(f"licenses/{name}")
        assert text, f"the installed hostcopy has no .dist-info/licenses/{name}"
        source = ROOT / name
        if source.is_file():
            assert text == source.read_text(), f"the installed {name} differs from {source}"
