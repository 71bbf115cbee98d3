"""The Python blocks of docs/offload.md, the offload guide: each runs in
a test or says, where the reader sees it, why it is not run here.

A block that imports none of torch, transformers and accelerate runs as
written in a fresh interpreter against the simulated driver (as
test_readme_sim.py runs the README's), and every ``# prints: TEXT`` comment
in it must appear in what it printed. A block that needs those libraries
and a GPU carries, on the line above it, ``*Not run in CI: REASON*``. CI
compiles it and checks what it names of hostcopy against the package:
every ``hostcopy.…`` name it uses exists, every keyword it passes to a
hostcopy callable is a parameter of it, and every attribute it reads of
what hostcopy returned (``off.hosts``, ``handle.skipped``,
``cache.counters``) is one that object has. The same check runs on the
names the guide's text gives in backquotes (``cache.layers[i].host``).
``hostcopy.offload.transformers`` imports torch, so it is loaded over
test_offload_sim.py's stand-ins for torch and transformers. The
signatures driver/python/docs/offload.rst writes out (Sphinx, standing in
for transformers, cannot read them) are checked against the classes too,
and the README's offload example (``<!-- not run: ... -->``, run by
test_readme_sim.py only with HOSTCOPY_GUIDE_DOWNLOADS=1) has its hostcopy
names checked as the guide's marked blocks have.

On a GPU host with torch, transformers and accelerate, this file runs the
marked blocks too (those that download a model only with
``HOSTCOPY_GUIDE_DOWNLOADS=1``):

    python -m pytest -q -rs driver/python/tests/test_offload_guide_sim.py
"""

import ast
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

import hostcopy
import hostcopy.offload
import hostcopy.offload.accelerate
from test_offload_sim import fake_cache_utils, fake_torch
from test_readme_sim import (
    ROOT,
    SIM_PRELUDE,
    gpu_count,
    has_simulator,
    imported_modules,
    module_present,
    not_run_reason,
    python_blocks,
)

GUIDE = "docs/offload.md"

#: What a marked block needs, by imported top-level module (the distribution to install).
GPU_MODULES = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate"}

#: The line above a block that is not run in CI, as the reader sees it.
NOT_RUN = re.compile(r"^\*Not run in CI: (?P<reason>[^*]+)\*$")

GPU_HOST_COMMAND = "python -m pytest -q -rs driver/python/tests/test_offload_guide_sim.py"


class Block:
    def __init__(self, line, source, reason, document=GUIDE):
        self.line, self.source, self.reason, self.document = line, source, reason, document

    @property
    def id(self):
        return f"{self.document}:{self.line}"


def guide_blocks():
    """Every ```python block of the guide, with the reason it is not run
    (``None`` for a block run in CI)."""
    lines = (ROOT / GUIDE).read_text(encoding="utf-8").splitlines()
    blocks = []
    for line, source in python_blocks(GUIDE):
        before = [text for text in lines[: line - 2] if text.strip()]
        marked = NOT_RUN.match(before[-1]) if before else None
        blocks.append(Block(line, source, marked.group("reason").strip() if marked else None))
    return blocks


BLOCKS = guide_blocks()

#: The README's blocks that use hostcopy.offload (not run in CI: they need
#: a GPU and a model), whose hostcopy names are checked as the guide's.
README_BLOCKS = [
    Block(line, source, not_run_reason("README.md", line), "README.md")
    for line, source in python_blocks("README.md")
    if "hostcopy.offload" in source
]


def test_the_readme_has_an_offload_block_marked_as_not_run():
    assert README_BLOCKS, "README.md: no block uses hostcopy.offload"
    assert all(block.reason for block in README_BLOCKS), "README.md: an offload block without <!-- not run: ... -->"


def test_the_guide_has_blocks_run_here_and_blocks_that_say_why_not():
    assert [block for block in BLOCKS if block.reason is None], f"{GUIDE}: no block runs in CI"
    assert [block for block in BLOCKS if block.reason is not None], f"{GUIDE}: no block marked as not run"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_block_is_valid_python(block):
    compile(block.source, block.id, "exec")


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_a_block_runs_here_or_says_why_not(block):
    needs = sorted(imported_modules(block.source) & GPU_MODULES.keys())
    if block.reason is None:
        assert not needs, (
            f"the block at {block.id} imports {needs}, which CI does not have: "
            "mark it with the line *Not run in CI: REASON* above it, or make it run without them"
        )
    else:
        assert len(block.reason) > 20, f"the block at {block.id} is marked as not run without a reason"


def prints(source):
    """The texts of the block's ``# prints: TEXT`` comments."""
    return re.findall(r"#\s*prints:\s*(.+?)\s*$", source, re.M)


def run_block(block, script, cwd):
    # A fresh interpreter per block, in an empty folder, as test_readme_sim.py runs them.
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (
        f"the block at {block.id} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    for text in prints(block.source):
        assert text in result.stdout, f"the block at {block.id} should print {text!r}; it printed:\n{result.stdout}"


@pytest.mark.parametrize("block", [block for block in BLOCKS if block.reason is None], ids=lambda block: block.id)
def test_a_block_without_a_gpu_library_runs_against_the_simulated_driver(block, tmp_path):
    if has_simulator():
        script = SIM_PRELUDE + block.source
    elif os.environ.get("HOSTCOPY_REQUIRE_SIM") == "1":
        pytest.fail("this wheel has no simulated driver (ci.sh builds one with --features simulator)")
    elif gpu_count() == 0:
        pytest.skip("this wheel has no simulated driver and the driver reports no GPU")
    else:
        script = block.source
    run_block(block, script, tmp_path)


@pytest.mark.parametrize("block", [block for block in BLOCKS if block.reason is not None], ids=lambda block: block.id)
def test_a_marked_block_runs_on_a_gpu_host(block, tmp_path):
    needs = sorted(imported_modules(block.source) & GPU_MODULES.keys())
    missing = [GPU_MODULES[name] for name in needs if not module_present(name)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; on a GPU host: {GPU_HOST_COMMAND}")
    if gpu_count() == 0:
        pytest.skip(f"the driver reports no GPU; on a GPU host: {GPU_HOST_COMMAND}")
    if "download" in block.reason and os.environ.get("HOSTCOPY_GUIDE_DOWNLOADS") != "1":
        pytest.skip(f"it downloads a model: HOSTCOPY_GUIDE_DOWNLOADS=1 {GPU_HOST_COMMAND}")
    run_block(block, block.source, tmp_path)


# -- what the blocks and the text name of hostcopy ----------------------------


@pytest.fixture
def package(monkeypatch):
    """``hostcopy`` with ``hostcopy.offload.transformers`` importable: the
    real one where torch and transformers are installed, else loaded over
    test_offload_sim.py's stand-ins (under its own name, so the real
    module stays unimported)."""
    modules = {"hostcopy.offload": hostcopy.offload, "hostcopy.offload.accelerate": hostcopy.offload.accelerate}
    if module_present("torch") and module_present("transformers"):
        import hostcopy.offload.transformers as kv_cache
    else:
        cache_utils = fake_cache_utils()
        transformers = types.ModuleType("transformers")
        transformers.cache_utils = cache_utils
        monkeypatch.setitem(sys.modules, "torch", fake_torch([]))
        monkeypatch.setitem(sys.modules, "transformers", transformers)
        monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
        path = pathlib.Path(hostcopy.offload.__file__).with_name("transformers.py")
        spec = importlib.util.spec_from_file_location("hostcopy.offload._guide_transformers_with_stand_ins", path)
        kv_cache = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, kv_cache)  # for inspect.getsource
        spec.loader.exec_module(kv_cache)
    modules["hostcopy.offload.transformers"] = kv_cache
    return modules


def resolve(dotted, modules):
    """The object ``hostcopy.a.b`` names, or raises AssertionError."""
    parts = dotted.split(".")
    assert parts[0] == "hostcopy"
    obj = hostcopy
    for index in range(1, len(parts)):
        prefix = ".".join(parts[: index + 1])
        if prefix in modules:
            obj = modules[prefix]
            continue
        owner = ".".join(parts[:index])
        assert hasattr(obj, parts[index]), f"{GUIDE} names {dotted}, but {owner} has no {parts[index]!r}"
        obj = getattr(obj, parts[index])
    return obj


def class_named(name, home):
    """The class ``name`` (an annotation's text) names in the module of ``home``."""
    module = sys.modules[home.__module__]
    found = getattr(module, name.strip("'\""), None)
    return found if isinstance(found, type) else None


def returned_class(obj):
    """The class of what calling ``obj`` gives: the class itself, or the
    class its return annotation names."""
    if isinstance(obj, type):
        return obj
    annotation = inspect.signature(obj).return_annotation
    if isinstance(annotation, type):
        return annotation
    if isinstance(annotation, str):
        return class_named(annotation, obj)
    return None


def own_sources(cls):
    """The source of ``cls`` and of its bases that hostcopy defines."""
    sources = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("hostcopy"):
            try:
                sources.append((klass, inspect.getsource(klass)))
            except (OSError, TypeError):
                pass
    return sources


def has_attribute(cls, name):
    if hasattr(cls, name):
        return True
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
    return any(re.search(rf"\bself\.{name}\b(\s*:[^=\n]*)?\s*=[^=]", source) for _, source in own_sources(cls))


def attribute_class(cls, name):
    """The class of ``cls().name`` where the source says (``self.name = Class(``)."""
    for klass, source in own_sources(cls):
        made = re.search(rf"\bself\.{name}\b(\s*:[^=\n]*)?\s*=\s*(\w+)\(", source)
        if made:
            found = class_named(made.group(2), klass)
            if found is not None:
                return found
    return None


def hostcopy_names(tree):
    """Each outermost ``hostcopy.a.b`` attribute chain of the tree, as text."""
    names, inner = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain, part = [], node
            while isinstance(part, ast.Attribute):
                inner.add(id(part.value))
                chain.append(part.attr)
                part = part.value
            if isinstance(part, ast.Name) and part.id == "hostcopy":
                names.append((node, ".".join(["hostcopy", *reversed(chain)])))
    return names


def variables(modules):
    """What the guide's blocks assign from hostcopy calls, by variable
    name: ``off``, ``handle``, ``cache``, ``progress``, ``refused``."""
    found = {}
    for block in BLOCKS:
        tree = ast.parse(block.source)
        names = {id(node): name for node, name in hostcopy_names(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
                target, called = node.targets[0], names.get(id(node.value.func))
                if isinstance(target, ast.Name) and called is not None:
                    cls = returned_class(resolve(called, modules))
                    if cls is not None:
                        found[target.id] = cls
            elif isinstance(node, ast.ExceptHandler) and node.name and id(node.type) in names:
                found[node.name] = resolve(names[id(node.type)], modules)
    return found


@pytest.mark.parametrize("block", BLOCKS + README_BLOCKS, ids=lambda block: block.id)
def test_what_a_block_names_of_hostcopy_exists_and_takes_its_keywords(block, package):
    tree = ast.parse(block.source)
    names = {}
    for node, name in hostcopy_names(tree):
        resolve(name, package)
        names[id(node)] = name
    for node in ast.walk(tree):
        name = names.get(id(node.func)) if isinstance(node, ast.Call) else None
        if name is None:
            continue
        parameters = inspect.signature(resolve(name, package)).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        for keyword in node.keywords:
            if keyword.arg is not None and not takes_any:
                assert keyword.arg in parameters, f"{block.id}: {name} has no parameter {keyword.arg!r}"


def attribute_paths(text):
    """``var.attr.attr`` and ``cache.layers[i].attr`` paths in the source or
    backquoted text, as (variable, [attributes])."""
    paths = []
    for match in re.finditer(r"\b([a-z_]\w*)((?:\.\w+|\[i\]\.\w+)+)", text):
        attributes = re.findall(r"(\[i\]\.)?(\w+)", match.group(2))
        paths.append((match.group(1), [("[i]." if item else "") + attr for item, attr in attributes]))
    return paths


def check_path(variable, attributes, known, modules, where):
    cls = known[variable]
    for attribute in attributes:
        if attribute.startswith("[i]."):
            # cache.layers[i].x: an offloaded layer of the cache.
            cls = modules["hostcopy.offload.transformers"].HostLayer
            attribute = attribute[len("[i].") :]
        if cls is None:
            return
        assert has_attribute(cls, attribute), f"{where}: {variable} is a {cls.__name__}, which has no {attribute!r}"
        cls = attribute_class(cls, attribute)


def test_what_the_blocks_read_of_what_hostcopy_returned_exists(package):
    known = variables(package)
    assert {"off", "handle", "cache"} <= known.keys(), known
    for block in BLOCKS + README_BLOCKS:
        tree = ast.parse(block.source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in known:
                check_path(node.value.id, [node.attr], known, package, block.id)


def test_the_names_the_text_gives_in_backquotes_exist(package):
    """``hostcopy.…`` names and ``off.…``, ``handle.…``, ``cache.…`` paths in
    the guide's inline code (outside the blocks)."""
    text = re.sub(r"^```.*?^```$", "", (ROOT / GUIDE).read_text(encoding="utf-8"), flags=re.S | re.M)
    known = variables(package)
    checked = 0
    for code in re.findall(r"`([^`\n]+)`", text):
        for name in re.findall(r"\bhostcopy(?:\.\w+)+", code):
            resolve(name, package)
            checked += 1
        for variable, attributes in attribute_paths(code):
            if variable in known and variable in ("off", "handle", "cache"):
                check_path(variable, attributes, known, package, f"{GUIDE}: `{code}`")
                checked += 1
    assert checked > 10, f"only {checked} names checked in the guide's text: the extraction found too few"


# -- the API reference's written-out signatures ------------------------------

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "offload.rst"


def written_signatures():
    """(module, name, signature text) of each ``.. autoclass:: Name(...)``
    of driver/python/docs/offload.rst: written out there because Sphinx,
    standing in for transformers, would show the stand-in's."""
    found, module = [], None
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        current = re.match(r"\.\. currentmodule:: (\S+)", line)
        if current:
            module = current.group(1)
        written = re.match(r"\.\. autoclass:: (\w+)\((.*)\)\s*$", line)
        if written:
            found.append((module, written.group(1), written.group(2)))
    return found


def test_the_references_written_out_signatures_are_the_classes(package):
    written = written_signatures()
    assert {name for _, name, _ in written} >= {"HostOffloadedCache", "HostLayer"}, written
    for module, name, text in written:
        cls = getattr(package.get(module) or importlib.import_module(module), name)
        arguments = ast.parse(f"def f({text}): pass").body[0].args
        shown = [(a.arg, "positional") for a in arguments.args] + [(a.arg, "keyword") for a in arguments.kwonlyargs]
        real = [
            (p.name, "keyword" if p.kind is inspect.Parameter.KEYWORD_ONLY else "positional")
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self"
        ]
        assert shown == real, f"offload.rst shows {name}({text}); the class takes {real}"
