"""The safetensors file format, read and checked in pure Python (no torch,
no numpy), and the plan of where each tensor's bytes go.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of a
UTF-8 JSON object ``{name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {str: str}}`` (the metadata optional), then the data
region: every tensor's bytes, ``begin`` and ``end`` relative to the
region's start. The checks are those of safetensors' own reader
(``safetensors/src/tensor.rs``, ``SafeTensors::read_metadata`` and
``Metadata::validate``), so a file it refuses is refused here too:

- the header: at most 100,000,000 bytes, inside the file, UTF-8, a JSON
  object; each tensor an object with a known ``dtype``, a ``shape`` of
  non-negative integers and two non-negative integer ``data_offsets``
  (other fields are ignored, as serde does); ``__metadata__`` null or an
  object of strings;
- the tensors, ordered by ``(begin, end)``, cover the data region
  exactly: the first begins at 0, each begins where the one before ended
  (a gap or an overlap is refused), and the last ends at the end of the
  file (bytes past it are refused, as a tensor past the file is);
- each tensor's byte length is its element count times its dtype's
  size (a sub-byte dtype's bits must fill whole bytes).

A tensor's field given twice is refused, as serde refuses a repeated
field; NaN and Infinity are not JSON, as serde says. Stricter than
safetensors: a tensor's name or a metadata key given twice is refused
(safetensors keeps the last one silently).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, BinaryIO, NamedTuple, Optional, Sequence

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


_WORD = 1 << 64  # safetensors reads sizes and offsets as usize


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _WORD


class _Object(dict):  # type: ignore[type-arg]
    """A JSON object that remembers the first key it was given twice
    (``json`` keeps the last silently; serde refuses a repeated field)."""

    repeated: Optional[str] = None


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    document = _Object(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                document.repeated = name
                break
            seen.add(name)
    return document


def _repeated(value: Any) -> Optional[str]:
    """The key a JSON object was given twice, if any."""
    return value.repeated if isinstance(value, _Object) else None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _tensor_info(filename: str, name: str, entry: Any) -> TensorInfo:
    def bad(message: str) -> SafetensorsError:
        return _fail(filename, "invalid_tensor_info", f"tensor {name!r}: {message}", name)

    if not isinstance(entry, dict):
        raise bad(f"expected an object with dtype, shape and data_offsets, got {type(entry).__name__}")
    if _repeated(entry) is not None:
        raise bad(f"field {_repeated(entry)!r} given twice")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise bad(f"missing field {field!r}")
    dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype_name, str):
        raise bad(f"dtype must be a string, got {dtype_name!r}")
    dtype = DTYPES.get(dtype_name)
    if dtype is None:
        raise _fail(
            filename,
            "unknown_dtype",
            f"tensor {name!r}: unknown dtype {dtype_name!r} (the format knows {', '.join(DTYPES)})",
            name,
        )
    if not isinstance(shape, list) or not all(_is_count(extent) for extent in shape):
        raise bad(f"shape must be a list of non-negative integers, got {shape!r}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(offset) for offset in offsets):
        raise bad(f"data_offsets must be two non-negative integers [begin, end], got {offsets!r}")
    return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])


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
    text = raw[_LENGTH.size : _LENGTH.size + length]
    try:
        document = json.loads(text.decode("utf-8"), object_pairs_hook=_object, parse_constant=_refuse_constant)
    except UnicodeDecodeError as error:
        raise _fail(filename, "invalid_header", f"the header is not UTF-8: {error}") from None
    except (ValueError, RecursionError) as error:  # json.JSONDecodeError, NaN and Infinity, nesting too deep
        raise _fail(filename, "invalid_header", f"the header is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise _fail(filename, "invalid_header", f"the header must be a JSON object, got {type(document).__name__}")
    twice = _repeated(document)
    if twice is not None:
        raise _fail(filename, "duplicate_name", f"the header names {twice!r} twice", twice)
    metadata = document.pop("__metadata__", None)
    if metadata is not None and (
        not isinstance(metadata, dict)
        or _repeated(metadata) is not None
        or not all(isinstance(value, str) for value in metadata.values())
    ):
        raise _fail(
            filename, "invalid_metadata", f"__metadata__ must be an object of strings, each key once, got {metadata!r}"
        )
    tensors = sorted(
        (_tensor_info(filename, name, entry) for name, entry in document.items()),
        key=lambda info: (info.begin, info.end),
    )
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
            if count >= _WORD:  # safetensors multiplies in usize, in the shape's order
                break
        bits = count * info.dtype.bits
        if count >= _WORD or bits >= _WORD:
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
