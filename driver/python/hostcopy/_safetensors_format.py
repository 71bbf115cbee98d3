"""The safetensors file format, read and checked in pure Python (no torch,
no numpy), and the plan of where each tensor's bytes go.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of a
UTF-8 JSON object ``{name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {str: str}}`` (the metadata optional), then the data
region: every tensor's bytes, ``begin`` and ``end`` relative to the
region's start. A file is accepted exactly when safetensors' own reader
(0.8: ``safetensors/src/tensor.rs``, ``SafeTensors::read_metadata``)
accepts it, with the same tensors and metadata:

- the header: at most 100,000,000 bytes, inside the file, UTF-8, one JSON
  value as serde_json reads it (below) with only JSON whitespace around
  it (safetensors pads with spaces; no padding is needed);
- that value an object. ``__metadata__`` at most once, null or an object
  of strings (a key given twice: its last value). Every other key names a
  tensor (a name given twice: its last entry, though every entry must
  read): an object with a known ``dtype``, a ``shape`` of integers in
  ``0 .. 2**64`` and ``data_offsets``, two such integers, each field once
  (other fields are read as JSON and ignored), or serde's other form of
  that struct, the array ``[dtype, shape, data_offsets]``. A dtype is its
  name, or serde's enum form ``{"F32": null}``;
- the tensors, ordered by ``(begin, end)``, cover the data region
  exactly: the first begins at 0, each begins where the one before ended
  (a gap or an overlap is refused), and the last ends at the end of the
  file (bytes past it are refused, as a tensor past the file is);
- each tensor's byte length is its element count times its dtype's size
  (a sub-byte dtype's bits must fill whole bytes), counted in 64 bits.

JSON as serde_json reads it (``src/de.rs``, ``src/read.rs``), where
Python's ``json`` differs: objects and arrays nest at most 127 deep; NaN
and Infinity are not JSON; a ``\\u`` escape of a UTF-16 surrogate must be
a leading one followed by a trailing one (no lone halves); a number is an
integer only as a u64 or a negative i64, anything else (``-0``, ``1.0``,
``1e2``, ``18446744073709551616``) is a float and no size, and a number
beyond the float range (``1e999``, 400 digits) is refused wherever it is.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from typing import Any, BinaryIO, Iterable, NamedTuple, Optional, Sequence, Union

from ._errors import SafetensorsError

#: safetensors' own limit on the header's length.
MAX_HEADER_SIZE = 100_000_000
_LENGTH = struct.Struct("<Q")


class Dtype(NamedTuple):
    """A dtype of the format: its name in the header, its size in bits, and
    the torch dtype it loads as (an attribute of ``torch``; ``None`` where
    torch has none)."""

    name: str
    bits: int
    torch_name: Optional[str]

    @property
    def torch_itemsize(self) -> int:
        """Bytes per element of the torch tensor: ``float4_e2m1fn_x2``
        packs two F4 values in one byte."""
        return max(1, self.bits // 8)


#: Every dtype safetensors knows (its ``Dtype`` enum), with the torch dtype
#: ``safetensors.torch`` gives it.
DTYPES: dict[str, Dtype] = {
    dtype.name: dtype
    for dtype in (
        Dtype("BOOL", 8, "bool"),
        Dtype("F4", 4, "float4_e2m1fn_x2"),
        Dtype("F6_E2M3", 6, None),
        Dtype("F6_E3M2", 6, None),
        Dtype("U8", 8, "uint8"),
        Dtype("I8", 8, "int8"),
        Dtype("F8_E5M2", 8, "float8_e5m2"),
        Dtype("F8_E4M3", 8, "float8_e4m3fn"),
        Dtype("F8_E8M0", 8, "float8_e8m0fnu"),
        Dtype("F8_E4M3FNUZ", 8, "float8_e4m3fnuz"),
        Dtype("F8_E5M2FNUZ", 8, "float8_e5m2fnuz"),
        Dtype("I16", 16, "int16"),
        Dtype("U16", 16, "uint16"),
        Dtype("F16", 16, "float16"),
        Dtype("BF16", 16, "bfloat16"),
        Dtype("I32", 32, "int32"),
        Dtype("U32", 32, "uint32"),
        Dtype("F32", 32, "float32"),
        Dtype("C64", 64, "complex64"),
        Dtype("F64", 64, "float64"),
        Dtype("I64", 64, "int64"),
        Dtype("U64", 64, "uint64"),
    )
}


class TensorInfo(NamedTuple):
    """One tensor of the header: ``begin`` and ``end`` are byte offsets into
    the data region."""

    name: str
    dtype: Dtype
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


class Header(NamedTuple):
    """A checked header. ``tensors`` are in the order of their bytes (the
    order ``safetensors.torch.load_file`` returns them in, safetensors >=
    0.6; tensors at the same offsets, which only empty ones can be, keep
    the header's order). The data region is ``data_len`` bytes at byte
    ``data_offset`` of the file."""

    metadata: Optional[dict[str, str]]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    data_len: int


class TensorView(NamedTuple):
    """Where one tensor comes from in the device copy of the data region:
    bytes ``begin:end`` of it, seen as ``shape`` of torch's ``torch_dtype``.

    ``placement``: ``"view"`` (a view of the shared allocation), ``"copy"``
    (``begin`` is not a multiple of the element size, and a torch view with
    a dtype must be: the bytes are copied on the device into an allocation
    of the tensor's own), ``"empty"`` (no bytes: a fresh empty tensor)."""

    name: str
    torch_dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    placement: str


def _fail(filename: str, reason: str, message: str, tensor: Optional[str] = None) -> SafetensorsError:
    where = f"{filename}: " if filename else ""
    return SafetensorsError(f"{where}{message}", filename=filename, reason=reason, tensor=tensor)


# JSON as serde_json reads it. Python's json reads the text (its grammar is
# serde_json's: the same literals, numbers, escapes, control characters
# and whitespace), with hooks that keep a key given twice (``_object``) and
# give numbers serde_json's types and range (``_integer``, ``_float``);
# ``_check_surrogates`` adds serde_json's surrogate rule, and
# ``_check_ignored`` its nesting limit and the range of integers where the
# hooks leave them to it.

#: The most objects and arrays open at once: serde_json's recursion limit
#: (``remaining_depth`` starts at 128, is decremented on entering one, and
#: refuses at 0).
MAX_NESTING = 127

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I32_MAX = (1 << 31) - 1
_POW10 = [float(f"1e{exponent}") for exponent in range(309)]  # serde_json's POW10 table
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class _NotSerdeJson(ValueError):
    """Text that Python's ``json`` reads and serde_json refuses."""


def _serde_f64(text: str) -> float:
    """The float serde_json makes of a JSON number's text, as safetensors
    builds it (without the ``float_roundtrip`` feature: ``parse_integer``,
    ``parse_decimal``, ``parse_exponent``, ``f64_from_parts``): the digits
    that fit a u64 are kept and later ones dropped (an integer's then count
    as powers of ten), and the result is one multiplication or division by
    a power of ten. Raises ``_NotSerdeJson`` where serde_json says "number
    out of range", as it does for an infinite result."""
    positive = not text.startswith("-")
    mantissa, _, exponent_text = text.lstrip("-").replace("E", "e").partition("e")
    integer, _, fraction = mantissa.partition(".")
    significand = exponent = 0
    dropping = False
    for digit in integer:
        dropping = dropping or significand * 10 + int(digit) > _U64_MAX
        if dropping:
            exponent += 1
        else:
            significand = significand * 10 + int(digit)
    for digit in fraction:
        if significand * 10 + int(digit) > _U64_MAX:
            break  # this digit and every later one dropped
        significand = significand * 10 + int(digit)
        exponent -= 1
    if exponent_text:
        negative_exponent = exponent_text.startswith("-")
        digits = exponent_text.lstrip("+-").lstrip("0") or "0"
        if len(digits) > 10 or int(digits) > _I32_MAX:  # past serde_json's i32
            if significand and not negative_exponent:
                raise _NotSerdeJson(f"number out of range: {text[:40]}")
            return 0.0 if positive else -0.0
        exponent += -int(digits) if negative_exponent else int(digits)
        exponent = max(-_I32_MAX - 1, min(_I32_MAX, exponent))  # serde_json adds saturating
    value = float(significand)
    while True:
        if abs(exponent) < len(_POW10):
            if exponent >= 0:
                value *= _POW10[exponent]
                if math.isinf(value):
                    raise _NotSerdeJson(f"number out of range: {text[:40]}")
            else:
                value /= _POW10[-exponent]
            break
        if value == 0.0:
            break
        if exponent >= 0:
            raise _NotSerdeJson(f"number out of range: {text[:40]}")
        value /= 1e308
        exponent += 308
    return value if positive else -value


def _integer(text: str) -> Union[int, float]:
    """A JSON integer as serde_json reads it: a u64, a negative i64, or else
    a float (``-0`` among them), which is no size."""
    if len(text) <= 20 and text != "-0":
        value = int(text)
        if _I64_MIN <= value <= _U64_MAX:
            return value
    return _serde_f64(text)


def _float(text: str) -> float:
    """A JSON number with a fraction or an exponent: a float, refused
    where serde_json's is out of range."""
    value = float(text)
    if abs(value) < 1e300:
        # serde_json's float is at most this one (it drops digits) times
        # (1 + 3 ulp) (it rounds three times): finite too.
        return value
    return _serde_f64(text)


def _not_a_number(name: str) -> None:
    raise _NotSerdeJson(f"{name} is not JSON")


class _Pairs(tuple):  # type: ignore[type-arg]
    """A JSON object with a key given twice: its ``(key, value)`` pairs,
    in order (a dict would keep one of them)."""


def _object(pairs: list[tuple[str, Any]]) -> Union[dict[str, Any], _Pairs]:
    """A JSON object: a dict, or ``_Pairs`` where a key comes twice."""
    unique = dict(pairs)
    return unique if len(unique) == len(pairs) else _Pairs(pairs)


def _pairs(value: Union[dict[str, Any], _Pairs]) -> Iterable[tuple[str, Any]]:
    return value.items() if isinstance(value, dict) else value


def _check_surrogates(document: Any) -> None:
    """Python's json keeps a lone surrogate escape (``"\\ud800"``) as a
    code point; serde_json refuses it. Both join a leading one and the
    trailing one after it, so a surrogate code point left in a key or a
    string is a lone escape."""
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise _NotSerdeJson(f"{value[:40]!r} has a lone UTF-16 surrogate escape")
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, (dict, _Pairs)):
            for pair in _pairs(value):
                pending.extend(pair)


def _read_json(text: str) -> Any:
    """The header's JSON value, read as serde_json reads it but for the
    nesting limit and the range of integers safetensors ignores
    (``_check_ignored``). An object is a dict, or ``_Pairs`` where a key
    comes twice."""
    # Python's int reads -0 as 0, serde_json as a float: only then is a
    # call per integer worth its time.
    parse_int = _integer if "-0" in text else int
    document = json.loads(
        text, object_pairs_hook=_object, parse_int=parse_int, parse_float=_float, parse_constant=_not_a_number
    )
    if _SURROGATE_ESCAPE.search(text):  # else no string holds a surrogate
        _check_surrogates(document)
    return document


def _check_ignored(filename: str, value: Any, level: int) -> None:
    """A value safetensors ignores (a tensor's unknown field, at nesting
    ``level`` if it is an object or an array) is read by serde_json all
    the same: it refuses objects and arrays nested past ``MAX_NESTING``,
    and integers past the float range (Python's int has no range). Every
    other value must be of a type (a size, a string, a dtype, a tensor's
    fields) that neither nests deeper than 3 nor is such an integer, so
    only ignored values need this check."""
    pending = [(value, level)]
    while pending:
        value, level = pending.pop()
        if type(value) is int and not _I64_MIN <= value <= _U64_MAX:
            try:
                _serde_f64(str(value))
            except _NotSerdeJson as error:
                raise _fail(filename, "invalid_header", f"the header is not JSON: {error}") from None
        elif isinstance(value, (list, dict, _Pairs)):
            if level > MAX_NESTING:
                raise _fail(
                    filename,
                    "invalid_header",
                    f"the header is not JSON: objects and arrays nest past serde_json's limit of {MAX_NESTING}",
                )
            items = value if isinstance(value, list) else [item for _, item in _pairs(value)]
            pending.extend((item, level + 1) for item in items)


# The header's meaning, as serde derives safetensors' structs from it.

_FIELDS = ("dtype", "shape", "data_offsets")
_INFO_LEVEL = 2  # a tensor's object, inside the header's


def _are_counts(value: Any) -> bool:
    """A JSON array of integers serde reads as usizes (64-bit ones): no
    float (serde_json's ``-0``, ``1.0``, ``2**64``), bool or negative."""
    if type(value) is not list:
        return False
    for item in value:
        if type(item) is not int or not 0 <= item <= _U64_MAX:
            return False
    return True


def _tensor_info(filename: str, name: str, entry: Any) -> TensorInfo:
    if isinstance(entry, (dict, _Pairs)):
        if len(entry) != len(_FIELDS) or isinstance(entry, _Pairs):  # a field missing, twice, or unknown
            seen = set()
            for key, value in _pairs(entry):
                if key in seen and key in _FIELDS:
                    raise _bad_info(filename, name, f"field {key!r} given twice")
                seen.add(key)
                if key not in _FIELDS:
                    _check_ignored(filename, value, _INFO_LEVEL + 1)
        fields = entry if isinstance(entry, dict) else dict(entry)
        try:
            dtype_name, shape, offsets = fields["dtype"], fields["shape"], fields["data_offsets"]
        except KeyError as missing:
            raise _bad_info(filename, name, f"missing field {missing}") from None
    elif isinstance(entry, list) and len(entry) == len(_FIELDS):
        dtype_name, shape, offsets = entry  # serde reads a struct from the array of its fields too
    else:
        raise _bad_info(
            filename,
            name,
            f"expected an object with dtype, shape and data_offsets (or the array of the three), got {entry!r:.80}",
        )
    if type(dtype_name) is dict and len(dtype_name) == 1 and None in dtype_name.values():
        (dtype_name,) = dtype_name  # serde's form of an enum's unit variant: {"F32": null}
    if not isinstance(dtype_name, str):
        raise _bad_info(filename, name, f"dtype must be a string, got {dtype_name!r:.80}")
    dtype = DTYPES.get(dtype_name)
    if dtype is None:
        raise _fail(
            filename,
            "unknown_dtype",
            f"tensor {name!r}: unknown dtype {dtype_name!r} (the format knows {', '.join(DTYPES)})",
            name,
        )
    if not _are_counts(shape):
        raise _bad_info(filename, name, f"shape must be a list of integers in 0 .. 2**64, got {shape!r:.80}")
    if not _are_counts(offsets) or len(offsets) != 2:
        raise _bad_info(
            filename, name, f"data_offsets must be two integers [begin, end] in 0 .. 2**64, got {offsets!r:.80}"
        )
    return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])


def _bad_info(filename: str, name: str, message: str) -> SafetensorsError:
    return _fail(filename, "invalid_tensor_info", f"tensor {name!r}: {message}", name)


def _metadata(filename: str, value: Any) -> Optional[dict[str, str]]:
    if value is None:
        return None
    if not isinstance(value, (dict, _Pairs)) or not all(type(text) is str for _, text in _pairs(value)):
        raise _fail(
            filename, "invalid_metadata", f"__metadata__ must be null or an object of strings, got {value!r:.80}"
        )
    return dict(_pairs(value))  # a key given twice: its last value, as serde's HashMap keeps


def _data_order(info: TensorInfo) -> tuple[int, int]:
    return info.begin, info.end


def parse_header(raw: bytes, file_size: int, filename: str = "") -> Header:
    """Checks a file's first bytes (at least its length word and header;
    the rest is not read) against a file of ``file_size`` bytes, as
    safetensors does; raises ``SafetensorsError`` with a ``reason`` (see
    its docstring) otherwise."""
    if len(raw) < _LENGTH.size or file_size < _LENGTH.size:
        raise _fail(
            filename,
            "header_too_small",
            f"a safetensors file starts with 8 bytes of header length; this one has {file_size} bytes",
        )
    (length,) = _LENGTH.unpack_from(raw)
    if length > MAX_HEADER_SIZE:
        raise _fail(
            filename,
            "header_too_large",
            f"header length {length} is over safetensors' limit of {MAX_HEADER_SIZE} bytes",
        )
    if _LENGTH.size + length > file_size or _LENGTH.size + length > len(raw):
        raise _fail(
            filename,
            "invalid_header_length",
            f"header length {length} reaches past the end of the {file_size}-byte file",
        )
    try:
        text = raw[_LENGTH.size : _LENGTH.size + length].decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(filename, "invalid_header", f"the header is not UTF-8: {error}") from None
    try:
        document = _read_json(text)
    except (ValueError, RecursionError) as error:  # json.JSONDecodeError, _NotSerdeJson, past Python's own nesting
        raise _fail(filename, "invalid_header", f"the header is not JSON: {error}") from None
    if not isinstance(document, (dict, _Pairs)):
        kind = "an array" if isinstance(document, list) else type(document).__name__
        raise _fail(filename, "invalid_header", f"the header must be a JSON object, got {kind}")
    metadata: Optional[dict[str, str]] = None
    metadata_seen = False
    entries: dict[str, TensorInfo] = {}
    for name, entry in _pairs(document):
        if name == "__metadata__":
            if metadata_seen:
                raise _fail(filename, "invalid_metadata", "the header gives __metadata__ twice")
            metadata_seen = True
            metadata = _metadata(filename, entry)
        else:
            # A name given twice: its last entry, as serde's HashMap keeps
            # (every entry is read, so each must be a tensor's).
            entries[name] = _tensor_info(filename, name, entry)
    tensors = sorted(entries.values(), key=_data_order)
    start = 0
    for info in tensors:
        if info.begin != start or info.end < info.begin:
            if info.end < info.begin:
                what = "ends before it begins"
            elif info.begin < start:
                what = "overlaps the tensor before it"
            else:
                what = "leaves a gap before it"
            raise _fail(
                filename,
                "invalid_offsets",
                f"tensor {info.name!r} at data_offsets [{info.begin}, {info.end}] {what} "
                f"(tensors must fill the data region in order, the next beginning at byte {start})",
                info.name,
            )
        start = info.end
        count = 1
        for extent in info.shape:
            count *= extent
            if count > _U64_MAX:  # safetensors multiplies in usize, in the shape's order
                break
        bits = count * info.dtype.bits
        if bits > _U64_MAX:
            raise _fail(
                filename,
                "validation_overflow",
                f"tensor {info.name!r}: shape {list(info.shape)} of {info.dtype.name} overflows a 64-bit size",
                info.name,
            )
        if bits % 8:
            raise _fail(
                filename,
                "misaligned_slice",
                f"tensor {info.name!r}: {count} elements of {info.dtype.name} ({info.dtype.bits} bits) do not fill whole bytes",
                info.name,
            )
        if bits // 8 != info.nbytes:
            raise _fail(
                filename,
                "invalid_tensor_info",
                f"tensor {info.name!r}: shape {list(info.shape)} of {info.dtype.name} is {bits // 8} bytes, "
                f"its data_offsets [{info.begin}, {info.end}] hold {info.nbytes}",
                info.name,
            )
    data_offset = _LENGTH.size + length
    data_len = file_size - data_offset
    if start != data_len:
        if start > data_len:
            reason, what = (
                "data_truncated",
                f"the tensors need {start} bytes of data, the file holds {data_len} (truncated?)",
            )
        else:
            reason, what = (
                "trailing_bytes",
                f"the file has {data_len - start} bytes past the last tensor's end ({start})",
            )
        raise _fail(filename, reason, what)
    return Header(metadata, tuple(tensors), data_offset, data_len)


def read_header(file: BinaryIO, filename: str = "") -> Header:
    """Reads and checks the header of an open file (from its start)."""
    size = os.fstat(file.fileno()).st_size
    file.seek(0)
    first = file.read(_LENGTH.size)
    if len(first) == _LENGTH.size:
        (length,) = _LENGTH.unpack(first)
        if length <= MAX_HEADER_SIZE and _LENGTH.size + length <= size:
            first += file.read(length)
    return parse_header(first, size, filename)


def plan_views(header: Header, filename: str = "") -> list[TensorView]:
    """What ``load_file`` makes of each tensor, in the header's order: a
    view of the shared device allocation, a device copy of its own (a
    ``begin`` that is no multiple of the torch element size), or a fresh
    empty tensor. Raises ``SafetensorsError`` (``"unsupported_dtype"``) for
    a dtype torch has no counterpart of (F6_E2M3, F6_E3M2), and
    (``"invalid_tensor_info"``) for an F4 tensor whose last dimension is
    odd or missing (torch holds F4 as ``float4_e2m1fn_x2``, two a byte)."""
    views = []
    for info in header.tensors:
        dtype = info.dtype
        if dtype.torch_name is None:
            raise _fail(
                filename, "unsupported_dtype", f"tensor {info.name!r}: torch has no dtype for {dtype.name}", info.name
            )
        shape = info.shape
        if dtype.bits < 8:
            if not shape or shape[-1] % 2:
                raise _fail(
                    filename,
                    "invalid_tensor_info",
                    f"tensor {info.name!r}: F4 loads as float4_e2m1fn_x2, so its last dimension must be even; shape {list(shape)}",
                    info.name,
                )
            shape = (*shape[:-1], shape[-1] // 2)
        if info.nbytes == 0:
            placement = "empty"
        elif info.begin % dtype.torch_itemsize:
            placement = "copy"
        else:
            placement = "view"
        views.append(TensorView(info.name, dtype.torch_name, shape, info.begin, info.end, placement))
    return views


def encode(
    tensors: Sequence[tuple[str, str, Sequence[int], bytes]], metadata: Optional[dict[str, str]] = None
) -> bytes:
    """A safetensors file's bytes from ``(name, dtype, shape, data)``, the
    data laid out in the order given, the header padded with spaces to a
    multiple of 8 bytes as safetensors writes it: for tests and for data
    written without torch."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return _LENGTH.pack(len(text)) + text + b"".join(data for *_, data in tensors)
