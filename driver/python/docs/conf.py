"""Sphinx configuration of the hostcopy Python API reference.

Built from the installed package's docstrings (``import hostcopy`` must
work: the compiled ``hostcopy._native`` gives the docstrings of the classes
written in Rust). CI builds it with warnings as errors
(``driver/python/ci.sh``)::

    python -m sphinx -W --keep-going -b html driver/python/docs OUT
"""

from __future__ import annotations

import hostcopy
import hostcopy.safetensors

project = "hostcopy"
author = "the hostcopy authors"
copyright = "the hostcopy authors"
release = hostcopy.__version__
version = release

extensions = ["sphinx.ext.autodoc"]

# hostcopy.offload's entry points take torch modules, accelerate's hooks and
# transformers' cache classes, none of which the reference is built with (CI
# installs none of them). hostcopy.offload and hostcopy.offload.accelerate
# import them only when called; hostcopy.offload.transformers imports torch
# and transformers, and subclasses transformers' DynamicCache and
# DynamicLayer, when it is imported. Sphinx stands in for the three while it
# imports the documented modules, so that page shows those base classes by
# name only (offload.rst says so).
autodoc_mock_imports = ["torch", "transformers", "accelerate"]

# The docstrings are reStructuredText: ``literals`` and ``::`` blocks.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
# The text of a type written as a string in an annotation (numpy, torch and
# typing_extensions names appear only under TYPE_CHECKING).
autodoc_type_aliases: dict[str, str] = {}
nitpicky = False

html_theme = "alabaster"
html_title = f"hostcopy {release} Python API"
exclude_patterns = ["_build"]


def _resolve(name: str) -> object:
    """The object a documented dotted name stands for, or None."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def _every_public_name_documented(app, env) -> None:  # type: ignore[no-untyped-def]
    """Warns (an error under -W) for a name of ``hostcopy.__all__`` or
    ``hostcopy.safetensors.__all__`` that no page documents, under that
    name or, for a re-export, under another."""
    from sphinx.util import logging

    documented = set(env.get_domain("py").objects)
    documented_ids = {id(_resolve(name)) for name in documented}
    for module in (hostcopy, hostcopy.safetensors):
        for name in module.__all__:
            full = f"{module.__name__}.{name}"
            obj = getattr(module, name)
            reexport = isinstance(obj, type) and id(obj) in documented_ids
            if full not in documented and not reexport:
                logging.getLogger(__name__).warning("%s is public (in __all__) but no page documents it", full)


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("env-check-consistency", _every_public_name_documented)
