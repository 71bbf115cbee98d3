"""hostcopy.safetensors against safetensors' own reader: header bytes run
through both, which must make the same decision (refuse, or read the same
tensors, bytes and metadata). The corpus is generated from a fixed seed:
valid files (every dtype, several tensors, metadata, names out of offset
order), then mutated one way per kind: numbers, strings and escapes,
nesting depth, whitespace, duplicate keys, offsets, dtypes, shapes, the
tensor entry's form, bytes past the data, the header length, and random
byte edits. A mismatch prints its kind, its case number and the file's
bytes.

Needs the ``safetensors`` package (PyPI; no torch: ``safetensors.deserialize``
and ``safe_open(framework="numpy")``); ci.sh installs it.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any, Callable, Optional

import pytest

import hostcopy
from hostcopy._safetensors_format import DTYPES, MAX_NESTING, parse_header

safetensors = pytest.importorskip(
    "safetensors", reason="safetensors is not installed (pip install safetensors; ci.sh installs it)"
)
pytest.importorskip("numpy", reason="safe_open(framework='numpy') reads the metadata back")

SEED = 20261204
CASES_PER_KIND = 250


class Obj(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs, in order: a key may come twice."""


class Raw(str):
    """JSON text written as it is (a number, a string with its escapes)."""


def dump(value: Any, space: Callable[[], str]) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Obj):
        pairs = (f"{space()}{dump(key, space)}{space()}:{space()}{dump(item, space)}{space()}" for key, item in value)
        return "{" + ",".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(f"{space()}{dump(item, space)}{space()}" for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def no_space() -> str:
    return ""


def file_of(text: bytes, data: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text + data


NAMES = ["a", "b.weight", "model.layers.0.mlp.up_proj.weight", "é", "😀", "", "x" * 40, "__meta__", "0"]


def valid(rng: random.Random) -> tuple[Obj, bytes]:
    """A file safetensors reads: its header as pairs, and its data."""
    header = Obj()
    if rng.random() < 0.5:
        header.append(("__metadata__", Obj([("format", "pt"), ("k", rng.choice(["", "v", "é", "a\nb"]))])))
    data = bytearray()
    for name in rng.sample(NAMES, rng.randint(0, 4)):
        dtype = rng.choice(list(DTYPES.values()))
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        count = 1
        for extent in shape:
            count *= extent
        if count * dtype.bits % 8:
            shape.append(8)
            count *= 8
        nbytes = count * dtype.bits // 8
        offsets = [len(data), len(data) + nbytes]
        header.append((name, Obj([("dtype", dtype.name), ("shape", shape), ("data_offsets", offsets)])))
        data += rng.randbytes(nbytes)
    rng.shuffle(header)
    return header, bytes(data)


def tensors_of(header: Obj) -> list[Obj]:
    return [entry for name, entry in header if name != "__metadata__"]


NUMBERS = [
    "0", "-0", "1", "-1", "0.0", "-0.0", "1.0", "1e0", "1E2", "1e-2", "1e+2", "1e308", "1e309", "-1e309",
    "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "17976931348623157e292",
    "17976931348623158e292", "179769313486231580000e288", "1.797693134862315799e308", "18446744073709551615",
    "18446744073709551616", "18446744073709551614", "184467440737095516159", "-9223372036854775808",
    "-9223372036854775809", "-18446744073709551616", "1" + "0" * 308, "2" + "0" * 308, "1" * 400, "-" + "1" * 400,
    "0." + "0" * 400 + "1e400", "0e999999999999", "1e-999999999999", "-1e999999999999", "1e2147483647",
    "1e2147483648", "0.000001e314", "1e-400", "4.9e-324", "01", "1.", ".5", "+1", "1e", "-", "--1", "1.5e",
    "0x10", "Infinity", "-Infinity", "NaN", "1_0", "\u0661", "1e5 ", "true", "null",
    "1844674407370955161.5e290", "1844674407370955161.6e290", "18446744073709551615.5e289",
]


def digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(count))


def random_number(rng: random.Random) -> str:
    if rng.random() < 0.3:  # near the float range's end, where serde_json's rounding decides
        significand = "17976931348623" + digits(rng, rng.randint(0, 10))
        point = rng.randint(1, len(significand))
        return f"{significand[:point]}.{significand[point:] or '0'}e{309 - point - rng.randint(0, 1)}"
    sign = rng.choice(["", "", "-"])
    integer = rng.choice(["0", str(rng.randint(1, 9)) + digits(rng, rng.randint(0, 25))])
    fraction = rng.choice(["", "." + digits(rng, rng.randint(1, 25))])
    power = rng.choice([rng.randint(0, 20), rng.randint(280, 330), rng.randint(0, 400)])
    exponent = rng.choice(["", f"{rng.choice('eE')}{rng.choice(['', '+', '-'])}{power}"])
    return sign + integer + fraction + exponent


def a_number(rng: random.Random) -> Raw:
    return Raw(rng.choice(NUMBERS) if rng.random() < 0.6 else random_number(rng))


STRINGS = [
    "\\ud800", "\\udc00", "\\ud800\\udc00", "\\udc00\\ud800", "\\ud800\\ud800\\udc00", "\\ud800x", "\\ud800\\n",
    "\\ud800\\u0041", "\\uD83D\\uDE00", "\\uDBFF\\uDFFF", "\\udbff", "\\u0000", "\\u001f", "\\u00e9", "é", "😀",
    "\x01", "\x1f", "\x7f", "\t", "\\x41", "\\a", "\\/", "\\\\ud800", "\\\\\\ud800", "\\u12", "\\u12G4", "\\U0041",
    "\\", "a\\\"b", "\\u0064type", "\\u005f_metadata__", "F32", "\\u0046\\u0033\\u0032", "\u2028", "\ufeff",
]


def a_string(rng: random.Random) -> Raw:
    pieces = rng.sample(STRINGS, rng.randint(1, 3)) + [rng.choice(["", "a", "b"])]
    rng.shuffle(pieces)
    return Raw('"' + "".join(pieces) + '"')


def nested(rng: random.Random, depth: int) -> Raw:
    """``depth`` objects and arrays, one inside the other (as text: a
    recursive writer would stop at Python's recursion limit)."""
    opened, closed = [], []
    for _ in range(depth):
        if rng.random() < 0.5:
            opened.append("[")
            closed.append("]")
        else:
            opened.append('{"%s":' % rng.choice(["k", "dtype", ""]))
            closed.append("}")
    inner = rng.choice(["1", '"s"', "null", "-0"]) if opened and opened[-1] != "[" else rng.choice(["", "1"])
    return Raw("".join(opened) + inner + "".join(reversed(closed)))


def some_tensor(rng: random.Random, header: Obj) -> Optional[Obj]:
    tensors = tensors_of(header)
    return rng.choice(tensors) if tensors else None


def field(entry: Obj, name: str) -> Any:
    return next(item for key, item in entry if key == name)


def set_field(entry: Obj, name: str, value: Any) -> None:
    entry[:] = [(key, value if key == name else item) for key, item in entry]


def mutate_numbers(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    where = rng.choice(["shape", "offset", "ignored", "ignored", "ignored", "metadata", "top"])
    if entry is None or where == "top":
        header.append((rng.choice(["n", "__metadata__"]), a_number(rng)))
    elif where == "shape":
        shape = list(field(entry, "shape")) or [1]
        shape[rng.randrange(len(shape))] = a_number(rng)
        set_field(entry, "shape", shape)
    elif where == "offset":
        offsets = list(field(entry, "data_offsets"))
        written = [Raw("-0"), Raw(f"{offsets[0]}.0"), Raw(f"{offsets[1]}e0"), a_number(rng)]
        offsets[rng.randrange(2)] = rng.choice(written)
        set_field(entry, "data_offsets", offsets)
    elif where == "ignored":
        entry.insert(rng.randint(0, len(entry)), ("x", rng.choice([a_number(rng), [a_number(rng), a_number(rng)]])))
    else:
        header.append(("__metadata__", Obj([("k", a_number(rng))])))
    return header, data


def mutate_strings(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    where = rng.choice(["name", "metadata key", "metadata value", "ignored key", "ignored value", "dtype", "field"])
    if entry is None or where == "name":
        index = rng.randrange(len(header)) if header else None
        if index is None or header[index][0] == "__metadata__":
            header.append((a_string(rng), Obj([("dtype", "U8"), ("shape", [0]), ("data_offsets", [0, 0])])))
        else:
            header[index] = (a_string(rng), header[index][1])
    elif where.startswith("metadata"):
        header[:] = [pair for pair in header if pair[0] != "__metadata__"]
        key, value = ("k", a_string(rng)) if where == "metadata value" else (a_string(rng), "v")
        header.append(("__metadata__", Obj([(key, value)])))
    elif where.startswith("ignored"):
        pair = (a_string(rng), 1) if where == "ignored key" else ("x", [a_string(rng)])
        entry.insert(rng.randint(0, len(entry)), pair)
    elif where == "dtype":
        set_field(entry, "dtype", a_string(rng))
    else:
        name = rng.choice(["dtype", "shape", "data_offsets"])
        escaped = Raw('"' + "".join(f"\\u{ord(c):04x}" if rng.random() < 0.3 else c for c in name) + '"')
        entry[:] = [(escaped if key == name else key, item) for key, item in entry]
    return header, data


def mutate_nesting(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    depth = rng.choice([1, 2, 60, 200, 1200] + list(range(MAX_NESTING - 4, MAX_NESTING + 3)) * 3)
    entry = some_tensor(rng, header)
    where = rng.choice(["ignored"] * 4 + ["metadata", "top", "shape"])
    if entry is None or where == "top":
        header.append(("t", nested(rng, depth)))
    elif where == "ignored":
        entry.insert(rng.randint(0, len(entry)), ("x", nested(rng, depth - 2)))
    elif where == "metadata":
        header.append(("__metadata__", nested(rng, depth - 1)))
    else:
        set_field(entry, "shape", nested(rng, depth - 2))
    return header, data


def mutate_duplicates(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    what = rng.choice(["name", "name, other entry", "field", "unknown field", "metadata key", "__metadata__"])
    if entry is None or what == "__metadata__":
        header.insert(rng.randint(0, len(header)), ("__metadata__", rng.choice([None, Obj([("k", "v")])])))
        header.insert(rng.randint(0, len(header)), ("__metadata__", rng.choice([None, Obj()])))
    elif what.startswith("name"):
        name = next(key for key, item in header if item is entry)
        other = entry if what == "name" else Obj(entry)
        if what != "name":
            set_field(other, "dtype", rng.choice(["U8", "I8", "F16", "XX"]))
        header.insert(rng.randint(0, len(header)), (name, other))
    elif what == "field":
        key = rng.choice(["dtype", "shape", "data_offsets"])
        entry.insert(rng.randint(0, len(entry)), (key, field(entry, key)))
    elif what == "unknown field":
        entry.insert(rng.randint(0, len(entry)), ("x", 1))
        entry.insert(rng.randint(0, len(entry)), ("x", [2]))
    else:
        header[:] = [pair for pair in header if pair[0] != "__metadata__"]
        header.append(("__metadata__", Obj([("k", "1"), ("j", "2"), ("k", "3")])))
    return header, data


def mutate_offsets(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    if entry is None:
        return header, data + b"\0" * rng.randint(0, 2)
    begin, end = field(entry, "data_offsets")
    offsets: Any = rng.choice(
        [
            [begin + rng.choice([-1, 1, 8]), end],
            [begin, end + rng.choice([-1, 1, 8])],
            [begin + 1, end + 1],
            [end, begin],
            [begin, 2**64 - 1],
            [2**64, end],
            [-1, end],
            [begin],
            [begin, end, end],
            Obj([("0", begin), ("1", end)]),
            [str(begin), end],
            [begin, end],
        ]
    )
    set_field(entry, "data_offsets", offsets)
    return header, data


def mutate_dtypes(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    if entry is None:
        return header, data
    name = field(entry, "dtype")
    other = rng.choice(list(DTYPES))
    set_field(
        entry,
        "dtype",
        rng.choice(
            [other, name.lower(), "F128", f" {name}", Obj([(name, None)]), Obj([(name, Obj())]),
             Obj([(name, None), (other, None)]), Obj([(name, [])]), [name], 5, None, Obj()]
        ),
    )
    return header, data


def mutate_shapes(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    if entry is None:
        return header, data
    shape = rng.choice(
        [[], [0], [1], [3], [2**64 - 1], [2**64 - 1, 2], [2**32, 2**32], [2**32, 2**32, 0], [2**62, 2], [2**61, 8],
         [2**63], [7], [5, 3], [-1], [True], [None], 1, Obj([("0", 1)])]
    )
    set_field(entry, "shape", shape)
    if rng.random() < 0.5 and isinstance(shape, list) and all(type(extent) is int and extent >= 0 for extent in shape):
        # The offsets the new shape needs, for the tensor placed last.
        dtype = DTYPES.get(field(entry, "dtype"))
        count = 1
        for extent in shape:
            count *= extent
        if dtype is not None and count * dtype.bits < 1 << 20:
            begin = len(data)
            set_field(entry, "data_offsets", [begin, begin + count * dtype.bits // 8])
            data += bytes(count * dtype.bits // 8)
    return header, data


def mutate_form(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    entry = some_tensor(rng, header)
    if entry is None or rng.random() < 0.15:
        top: Any = rng.choice([[], "x", 1, None, Obj()])
        return Obj([("__top__", top)]) if isinstance(top, Obj) else top, data
    form = rng.choice(["array", "short array", "long array", "missing", "null", "number", "string", "extra"])
    fields = [field(entry, key) for key in ("dtype", "shape", "data_offsets")]
    if form == "array":
        replacement: Any = fields
    elif form == "short array":
        replacement = fields[:2]
    elif form == "long array":
        replacement = fields + [0]
    elif form == "missing":
        replacement = Obj(entry[: rng.randrange(len(entry))])
    elif form == "extra":
        extra = (rng.choice(["x", "__metadata__", "DTYPE"]), rng.choice([1, "s", None, [1], Obj()]))
        replacement = Obj(entry + [extra])
    else:
        replacement = {"null": None, "number": 1, "string": "F32"}[form]
    header[:] = [(key, replacement if item is entry else item) for key, item in header]
    return header, data


def mutate_float_range(rng: random.Random, header: Obj, data: bytes) -> tuple[Obj, bytes]:
    """A number in a field safetensors ignores: refused only out of serde_json's range."""
    entry = some_tensor(rng, header) or Obj()
    if not entry:
        header.append(("t", Obj([("dtype", "U8"), ("shape", []), ("data_offsets", [len(data), len(data) + 1])])))
        entry, data = header[-1][1], data + b"x"
    entry.append(("x", Raw(random_number(rng))))
    return header, data


MUTATIONS = {
    "numbers": mutate_numbers,
    "float range": mutate_float_range,
    "strings": mutate_strings,
    "nesting": mutate_nesting,
    "duplicates": mutate_duplicates,
    "offsets": mutate_offsets,
    "dtypes": mutate_dtypes,
    "shapes": mutate_shapes,
    "form": mutate_form,
}

WHITESPACE = [" ", "\t", "\n", "\r", "", "", "", "  \n"]
NOT_WHITESPACE = ["\f", "\v", "\xa0", "\u2028", "\x00", "\ufeff", "\x85"]


def whitespace_file(rng: random.Random) -> bytes:
    header, data = valid(rng)
    odd = rng.random() < 0.4

    def space() -> str:
        if odd and rng.random() < 0.05:
            return rng.choice(NOT_WHITESPACE)
        return rng.choice(WHITESPACE)

    text = space() + dump(header, space) + space() + rng.choice(["", " " * rng.randint(1, 7), "\x00", "\n"])
    return file_of(text.encode(), data)


def size_file(rng: random.Random) -> bytes:
    header, data = valid(rng)
    text = dump(header, no_space).encode()
    text += b" " * (-len(text) % 8)
    whole = file_of(text, data)
    change = rng.choice(["as written", "unpadded", "length", "length", "trailing", "cut", "big", "short"])
    if change == "as written":
        return whole
    if change == "unpadded":
        return file_of(text.rstrip(b" ") + b" " * rng.randint(0, 2), data)
    if change == "length":
        length = len(text) + rng.choice([-2, -1, 1, 2, 8])
        return struct.pack("<Q", max(length, 0)) + whole[8:]
    if change == "trailing":
        return whole + rng.randbytes(rng.randint(1, 3))
    if change == "cut":
        return whole[: rng.randrange(len(whole))]
    if change == "big":
        return struct.pack("<Q", rng.choice([100_000_000, 100_000_001, 2**63, 2**64 - 1, 2**64 - 8])) + whole[8:]
    return whole[: rng.randint(0, 8)]


ALPHABET = b'{}[]:,"\\ -0123456789eE.+ntfrualsdx\x00\x80\xff\xed\xc0'


def byte_file(rng: random.Random) -> bytes:
    header, data = valid(rng)
    text = bytearray(dump(header, no_space).encode())
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        edit = rng.choice(["replace", "insert", "delete"])
        byte = rng.choice(ALPHABET) if rng.random() < 0.8 else rng.randrange(256)
        if edit == "replace" and at < len(text):
            text[at] = byte
        elif edit == "insert":
            text.insert(at, byte)
        elif at < len(text):
            del text[at]
    for bad in (b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"):
        if rng.random() < 0.03:
            at = rng.randrange(len(text) + 1)
            text[at:at] = bad
    return file_of(bytes(text), data)


def corpus(kind: str) -> list[bytes]:
    rng = random.Random(f"{SEED}-{kind}")
    files = []
    for _ in range(CASES_PER_KIND):
        if kind in MUTATIONS:
            header, data = MUTATIONS[kind](rng, *valid(rng))
            files.append(file_of(dump(header, no_space).encode(), data))
        else:
            files.append({"whitespace": whitespace_file, "size": size_file, "bytes": byte_file}[kind](rng))
    return files


KINDS = [*MUTATIONS, "whitespace", "size", "bytes"]

# The seven kinds hostcopy read and safetensors refused, and their near
# neighbours that both read.
TENSOR = '"dtype": "U8", "shape": [1], "data_offsets": [0, 1]'
FIXED = [
    '{"\\ud800": {%s}}' % TENSOR,
    '{"__metadata__": {"k": "a\\udc00"}, "t": {%s}}' % TENSOR,
    '{"t": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}}',
    '{"t": {"dtype": "U8", "shape": [1], "data_offsets": [-0, 1]}}',
    '{"t": {%s, "x": 1e999}}' % TENSOR,
    '{"t": {%s, "x": %s}}' % (TENSOR, "9" * 400),
    '{"t": {%s, "x": %s}}' % (TENSOR, "[" * 200 + "]" * 200),
    '{"\\ud800\\udc00": {%s}}' % TENSOR,
    '{"t": {%s, "x": [-0, 1e308, %s]}}' % (TENSOR, "9" * 300),
    '{"t": {%s, "x": %s}}' % (TENSOR, "[" * 125 + "]" * 125),
    '{"t": {%s, "x": %s}}' % (TENSOR, "[" * 126 + "]" * 126),
    '{"t": {%s, "x": %s}}' % (TENSOR, "[" * 1500 + "]" * 1500),
    '{"t": {%s, "x": [-0, %s]}}' % (TENSOR, "9" * 400),
    '{"t": {%s, "x": %s}}' % (TENSOR, "9" * 5000),
    '{"t": {%s, "x": {"y": [%s]}}}' % (TENSOR, "9" * 309),
]


def ours(data: bytes) -> Optional[tuple[Any, ...]]:
    try:
        header = parse_header(data, len(data))
    except hostcopy.SafetensorsError:
        return None
    region = data[header.data_offset :]
    tensors = sorted((t.name, t.dtype.name, list(t.shape), region[t.begin : t.end]) for t in header.tensors)
    order = [t.name for t in header.tensors if t.end > t.begin]
    return tensors, header.metadata, order


def theirs(data: bytes, tmp_path: Any) -> Optional[tuple[Any, ...]]:
    try:
        items = safetensors.deserialize(data)
    except safetensors.SafetensorError:
        return None
    tensors = sorted((name, item["dtype"], list(item["shape"]), bytes(item["data"])) for name, item in items)
    path = tmp_path / "case.safetensors"
    path.write_bytes(data)
    with safetensors.safe_open(str(path), framework="numpy") as opened:
        metadata = opened.metadata()
        order = [name for name in opened.offset_keys() if item_nbytes(items, name)]
    return tensors, metadata, order


def item_nbytes(items: list[tuple[str, dict[str, Any]]], name: str) -> int:
    return next(len(item["data"]) for key, item in items if key == name)


def differences(files: list[bytes], tmp_path: Any) -> tuple[list[str], int]:
    mismatches = []
    accepted = 0
    for number, data in enumerate(files):
        mine, reference = ours(data), theirs(data, tmp_path)
        accepted += reference is not None
        if mine != reference:
            said = lambda result: "refused" if result is None else f"read {result!r:.300}"  # noqa: E731
            mismatches.append(f"case {number}: {data!r:.400}\n  safetensors {said(reference)}\n  hostcopy {said(mine)}")
    return mismatches, accepted


@pytest.mark.parametrize("kind", KINDS)
def test_hostcopy_decides_as_safetensors_on_a_generated_corpus(tmp_path, kind):
    files = corpus(kind)
    mismatches, accepted = differences(files, tmp_path)
    assert not mismatches, f"{len(mismatches)} of {len(files)} {kind} cases differ:\n" + "\n".join(mismatches[:8])
    # A corpus either reader refuses entirely, or reads entirely, tests little.
    assert 0.03 * len(files) <= accepted <= 0.97 * len(files), f"{kind}: safetensors read {accepted} of {len(files)}"


def test_hostcopy_decides_as_safetensors_on_the_seven_known_kinds_and_their_neighbours(tmp_path):
    files = [file_of(text.encode(), b"x") for text in FIXED]
    mismatches, accepted = differences(files, tmp_path)
    assert not mismatches, "\n".join(mismatches)
    assert accepted == 3, "the three neighbours are read"
