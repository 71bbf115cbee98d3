"""hostcopy.safetensors without a GPU: the header checks (one test per way a
file can be wrong, each refused as safetensors refuses it, with its
``reason``), the plan of views (order, alignment, empty tensors, F4), and
the data region copied into simulated device memory, its tensors read
back with numpy. Files are written by hand (``encode``): no safetensors
package, no torch.
"""

import json
import struct

import pytest

import hostcopy
import hostcopy.safetensors as st
from conftest import pattern
from hostcopy._safetensors_format import encode, parse_header


def header_bytes(document, pad: bool = True) -> bytes:
    text = json.dumps(document).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def refused(data: bytes, reason: str, tmp_path, tensor=None) -> hostcopy.SafetensorsError:
    """Refused as bytes and as a file, with ``reason`` (and ``tensor``)."""
    with pytest.raises(hostcopy.SafetensorsError) as caught:
        parse_header(data, len(data))
    assert caught.value.reason == reason, caught.value
    assert caught.value.tensor == tensor
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(hostcopy.SafetensorsError) as from_file:
        st.read_header(path)
    assert from_file.value.reason == reason and from_file.value.filename == str(path)
    assert str(path) in str(from_file.value)
    return caught.value


def one(dtype="F32", shape=(2,), offsets=(0, 8), **extra):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets), **extra}


def test_a_file_safetensors_would_write_reads_back_in_the_order_of_its_bytes(tmp_path):
    tensors = [
        ("z.weight", "F32", [2, 3], pattern(24, 1)),
        ("a.bias", "BF16", [3], pattern(6, 2)),
        ("m", "U8", [], b"\x07"),
    ]
    data = encode(tensors, {"format": "pt"})
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    header = st.read_header(path)
    assert [info.name for info in header.tensors] == ["z.weight", "a.bias", "m"]
    assert header.metadata == {"format": "pt"}
    assert header.data_offset % 8 == 0 and header.data_offset + header.data_len == len(data)
    assert [(info.begin, info.end) for info in header.tensors] == [(0, 24), (24, 30), (30, 31)]
    assert header.tensors[2].shape == ()


def test_tensors_listed_out_of_order_in_the_header_come_out_in_offset_order(tmp_path):
    document = {"b": one(offsets=(8, 16)), "a": one(offsets=(0, 8)), "__metadata__": None}
    header = parse_header(header_bytes(document) + bytes(16), len(header_bytes(document)) + 16)
    assert [info.name for info in header.tensors] == ["a", "b"]
    assert header.metadata is None


def test_no_tensors_is_a_valid_file():
    data = header_bytes({})
    header = parse_header(data, len(data))
    assert header.tensors == () and header.data_len == 0


def test_unknown_fields_of_a_tensor_are_ignored_as_safetensors_does():
    data = header_bytes({"a": one(extra=1)}) + bytes(8)
    assert parse_header(data, len(data)).tensors[0].name == "a"


# One test per way the file can be wrong.


def test_a_file_shorter_than_the_length_word(tmp_path):
    refused(b"\x01\x00\x00", "header_too_small", tmp_path)


def test_a_header_length_over_safetensors_limit(tmp_path):
    refused(struct.pack("<Q", 100_000_001) + b"{}", "header_too_large", tmp_path)


def test_a_header_length_beyond_the_file(tmp_path):
    refused(struct.pack("<Q", 64) + b'{"a": 1}', "invalid_header_length", tmp_path)


def test_a_header_cut_short_is_a_header_beyond_the_file(tmp_path):
    whole = encode([("a", "F32", [2], bytes(8))])
    refused(whole[:20], "invalid_header_length", tmp_path)


def test_a_header_that_is_not_json(tmp_path):
    text = b'{"a": {"dtype": "F32",'
    refused(struct.pack("<Q", len(text)) + text, "invalid_header", tmp_path)


def test_a_header_that_is_not_utf8(tmp_path):
    text = b'{"\xff": 1}'
    refused(struct.pack("<Q", len(text)) + text, "invalid_header", tmp_path)


def test_a_header_that_is_not_an_object(tmp_path):
    refused(header_bytes([1, 2]), "invalid_header", tmp_path)


def test_a_name_given_twice_is_its_last_entry_as_in_safetensors():
    text = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}'
    data = struct.pack("<Q", len(text)) + text + b"\x00"
    (info,) = parse_header(data, len(data)).tensors
    assert (info.name, info.dtype.name) == ("a", "I8")


def test_a_name_given_twice_needs_every_entry_to_be_a_tensors(tmp_path):
    text = b'{"a": {"dtype": "U9", "shape": [1], "data_offsets": [0, 1]}, "a": ["I8", [1], [0, 1]]}'
    refused(struct.pack("<Q", len(text)) + text + b"\x00", "unknown_dtype", tmp_path, tensor="a")


def test_a_field_of_a_tensor_given_twice(tmp_path):
    text = b'{"a": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}'
    error = refused(struct.pack("<Q", len(text)) + text + b"\x00", "invalid_tensor_info", tmp_path, tensor="a")
    assert "'dtype' given twice" in str(error)


def test_an_unknown_field_given_twice_is_ignored_twice():
    text = b'{"a": {"x": 1, "dtype": "U8", "x": [2], "shape": [1], "data_offsets": [0, 1]}}'
    data = struct.pack("<Q", len(text)) + text + b"\x00"
    assert parse_header(data, len(data)).tensors[0].name == "a"


def test_a_metadata_key_given_twice_is_its_last_value_as_in_safetensors():
    text = b'{"__metadata__": {"k": "1", "k": "2"}}'
    data = struct.pack("<Q", len(text)) + text
    assert parse_header(data, len(data)).metadata == {"k": "2"}


def test_metadata_given_twice(tmp_path):
    text = b'{"__metadata__": {"k": "1"}, "__metadata__": null}'
    refused(struct.pack("<Q", len(text)) + text, "invalid_metadata", tmp_path)


def test_a_tensor_as_the_array_of_its_fields_reads_as_serde_reads_it(tmp_path):
    text = b'{"a": ["U8", [1], [0, 1]], "b": {"dtype": {"I8": null}, "shape": [], "data_offsets": [1, 2]}}'
    data = struct.pack("<Q", len(text)) + text + b"xy"
    assert [(info.name, info.dtype.name, info.shape) for info in parse_header(data, len(data)).tensors] == [
        ("a", "U8", (1,)),
        ("b", "I8", ()),
    ]
    text = b'{"a": ["U8", [1], [0, 1], 0]}'
    refused(struct.pack("<Q", len(text)) + text + b"x", "invalid_tensor_info", tmp_path, tensor="a")
    text = b'{"a": {"dtype": {"U8": {}}, "shape": [1], "data_offsets": [0, 1]}}'
    refused(struct.pack("<Q", len(text)) + text + b"x", "invalid_tensor_info", tmp_path, tensor="a")


# JSON that Python's json reads and serde_json (so safetensors) refuses.

TENSOR = '"dtype": "U8", "shape": [1], "data_offsets": [0, 1]'


def header_text(text: str, data: bytes = b"x") -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"\\ud800": {%s}}' % TENSOR, "invalid_header"),
        ('{"__metadata__": {"k": "a\\udc00"}, "t": {%s}}' % TENSOR, "invalid_header"),
        ('{"t": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}}', "invalid_tensor_info"),
        ('{"t": {"dtype": "U8", "shape": [1], "data_offsets": [-0, 1]}}', "invalid_tensor_info"),
        ('{"t": {%s, "x": 1e999}}' % TENSOR, "invalid_header"),
        ('{"t": {%s, "x": %s}}' % (TENSOR, "9" * 400), "invalid_header"),
        ('{"t": {%s, "x": %s}}' % (TENSOR, "[" * 200 + "]" * 200), "invalid_header"),
    ],
    ids=[
        "lone-surrogate-in-a-name",
        "lone-surrogate-in-a-metadata-value",
        "minus-zero-extent",
        "minus-zero-offset",
        "1e999-ignored",
        "400-digits-ignored",
        "nested-200-deep-ignored",
    ],
)
def test_json_that_serde_json_refuses_is_refused(tmp_path, text, reason):
    refused(header_text(text), reason, tmp_path, tensor="t" if reason == "invalid_tensor_info" else None)


def test_the_same_json_within_serde_jsons_rules_is_read():
    for text in (
        '{"\\ud800\\udc00": {%s}}' % TENSOR,
        '{"t": {%s, "x": [-0, 1e308, %s, "\\ud83d\\ude00"]}}' % (TENSOR, "9" * 300),
        '{"t": {%s, "x": %s}}' % (TENSOR, "[" * 125 + "]" * 125),
    ):
        data = header_text(text)
        assert len(parse_header(data, len(data)).tensors) == 1, text


def test_nesting_one_past_serde_jsons_limit_is_refused(tmp_path):
    # The header's object, the tensor's, then 126 arrays: 128 open at once.
    refused(header_text('{"t": {%s, "x": %s}}' % (TENSOR, "[" * 126 + "]" * 126)), "invalid_header", tmp_path)


def test_nan_is_not_json(tmp_path):
    text = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": NaN}}'
    refused(struct.pack("<Q", len(text)) + text + b"\x00", "invalid_header", tmp_path)


def test_a_shape_whose_size_overflows_64_bits_even_with_a_zero_after_it(tmp_path):
    entry = one(shape=(2**40, 2**40, 0), offsets=(0, 0))
    refused(header_bytes({"a": entry}), "validation_overflow", tmp_path, tensor="a")


def test_an_extent_of_64_bits_or_more_is_no_size(tmp_path):
    refused(header_bytes({"a": one(shape=(2**64,), offsets=(0, 0))}), "invalid_tensor_info", tmp_path, tensor="a")


@pytest.mark.parametrize("metadata", [[1], {"k": 1}, "text"])
def test_metadata_that_is_not_an_object_of_strings(tmp_path, metadata):
    refused(header_bytes({"__metadata__": metadata}), "invalid_metadata", tmp_path)


@pytest.mark.parametrize("missing", ["dtype", "shape", "data_offsets"])
def test_a_tensor_missing_a_field(tmp_path, missing):
    entry = one()
    del entry[missing]
    refused(header_bytes({"a": entry}) + bytes(8), "invalid_tensor_info", tmp_path, tensor="a")


@pytest.mark.parametrize(
    "entry",
    [
        "F32",
        one(dtype=32),
        one(shape=(-1,)),
        one(shape=(2.0,)),
        one(shape=(True,)),
        {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]},
        one(offsets=(0,)),
        one(offsets=(0, 8, 9)),
        one(offsets=(-8, 0)),
        one(offsets=(0, "8")),
    ],
    ids=[
        "not-an-object",
        "dtype-int",
        "negative-extent",
        "float-extent",
        "bool-extent",
        "shape-int",
        "one-offset",
        "three-offsets",
        "negative-offset",
        "string-offset",
    ],
)
def test_a_tensor_field_of_the_wrong_type(tmp_path, entry):
    refused(header_bytes({"a": entry}) + bytes(8), "invalid_tensor_info", tmp_path, tensor="a")


def test_an_unknown_dtype(tmp_path):
    error = refused(header_bytes({"a": one(dtype="F128")}) + bytes(8), "unknown_dtype", tmp_path, tensor="a")
    assert "F128" in str(error) and "BF16" in str(error)


def test_a_byte_length_that_is_not_the_shapes(tmp_path):
    error = refused(
        header_bytes({"a": one(shape=(3,), offsets=(0, 8))}) + bytes(8), "invalid_tensor_info", tmp_path, tensor="a"
    )
    assert "12 bytes" in str(error) and "hold 8" in str(error)


def test_sub_byte_elements_that_do_not_fill_whole_bytes(tmp_path):
    refused(
        header_bytes({"a": one(dtype="F4", shape=(3,), offsets=(0, 2))}) + bytes(2),
        "misaligned_slice",
        tmp_path,
        tensor="a",
    )


def test_a_gap_at_the_start_of_the_data(tmp_path):
    error = refused(header_bytes({"a": one(offsets=(8, 16))}) + bytes(16), "invalid_offsets", tmp_path, tensor="a")
    assert "gap" in str(error)


def test_a_gap_between_tensors(tmp_path):
    document = {"a": one(offsets=(0, 8)), "b": one(offsets=(12, 20))}
    refused(header_bytes(document) + bytes(20), "invalid_offsets", tmp_path, tensor="b")


def test_overlapping_tensors(tmp_path):
    document = {"a": one(offsets=(0, 8)), "b": one(offsets=(4, 12))}
    error = refused(header_bytes(document) + bytes(12), "invalid_offsets", tmp_path, tensor="b")
    assert "overlaps" in str(error)


def test_two_tensors_on_the_same_bytes(tmp_path):
    document = {"a": one(offsets=(0, 8)), "b": one(offsets=(0, 8))}
    refused(header_bytes(document) + bytes(8), "invalid_offsets", tmp_path, tensor="b")


def test_offsets_that_end_before_they_begin(tmp_path):
    document = {"a": one(offsets=(0, 8)), "b": one(shape=(0,), offsets=(8, 4))}
    error = refused(header_bytes(document) + bytes(8), "invalid_offsets", tmp_path, tensor="b")
    assert "ends before it begins" in str(error)


def test_tensors_past_the_end_of_the_file(tmp_path):
    whole = encode([("a", "F32", [4], bytes(16))])
    error = refused(whole[:-1], "data_truncated", tmp_path)
    assert "16 bytes" in str(error) and "holds 15" in str(error)


def test_bytes_past_the_last_tensor(tmp_path):
    refused(encode([("a", "F32", [4], bytes(16))]) + b"\x00", "trailing_bytes", tmp_path)


def test_the_errors_are_value_errors_exported_from_the_package():
    assert issubclass(hostcopy.SafetensorsError, ValueError)
    assert st.SafetensorsError is hostcopy.SafetensorsError


# The plan: what load_file makes of each tensor.


def test_every_dtype_of_the_format_plans_with_torchs_dtype_or_refuses():
    for dtype in st.DTYPES.values():
        shape = [4]
        data = encode([("t", dtype.name, shape, bytes(4 * dtype.bits // 8))])
        header = parse_header(data, len(data))
        if dtype.torch_name is None:
            with pytest.raises(hostcopy.SafetensorsError) as caught:
                st.plan_views(header)
            assert caught.value.reason == "unsupported_dtype" and caught.value.tensor == "t"
            continue
        (view,) = st.plan_views(header)
        assert view.torch_dtype == dtype.torch_name and view.placement == "view"
        assert view.shape == ((2,) if dtype.name == "F4" else (4,))


def test_a_tensor_at_an_offset_that_is_no_multiple_of_its_element_size_gets_its_own_copy():
    data = encode(
        [
            ("byte", "U8", [3], b"abc"),
            ("f32", "F32", [2], bytes(8)),
            ("f16", "F16", [1], bytes(2)),
            ("i64", "I64", [1], bytes(8)),
        ]
    )
    plans = {view.name: view for view in st.plan_views(parse_header(data, len(data)))}
    assert plans["byte"].placement == "view"
    assert (plans["f32"].begin, plans["f32"].placement) == (3, "copy")
    assert (plans["f16"].begin, plans["f16"].placement) == (11, "copy")
    assert (plans["i64"].begin, plans["i64"].placement) == (13, "copy")
    aligned = encode(
        [
            ("i64", "I64", [1], bytes(8)),
            ("f32", "F32", [1], bytes(4)),
            ("f16", "F16", [1], bytes(2)),
            ("b", "BOOL", [1], b"\x01"),
        ]
    )
    assert [view.placement for view in st.plan_views(parse_header(aligned, len(aligned)))] == ["view"] * 4


def test_an_empty_tensor_is_planned_empty_whatever_its_offset():
    data = encode([("a", "U8", [1], b"x"), ("none", "F32", [0, 5], b""), ("b", "F32", [1], bytes(4))])
    views = st.plan_views(parse_header(data, len(data)))
    assert [(view.name, view.placement, view.shape) for view in views] == [
        ("a", "view", (1,)),
        ("none", "empty", (0, 5)),
        ("b", "copy", (1,)),
    ]


def test_empty_tensors_at_one_offset_keep_the_headers_order():
    data = encode([("z", "F32", [0], b""), ("a", "F32", [0], b""), ("m", "U8", [1], b"x")])
    assert [view.name for view in st.plan_views(parse_header(data, len(data)))] == ["z", "a", "m"]


def test_an_f4_tensor_needs_an_even_last_dimension_for_torch():
    data = encode([("f4", "F4", [2, 3], bytes(3))])  # 24 bits: the format takes it
    with pytest.raises(hostcopy.SafetensorsError) as caught:
        st.plan_views(parse_header(data, len(data)))
    assert caught.value.reason == "invalid_tensor_info" and "even" in str(caught.value)
    data = encode([("f4", "F4", [3, 2], bytes(3))])
    assert st.plan_views(parse_header(data, len(data)))[0].shape == (3, 1)


# The data region into (simulated) device memory, read back with numpy.


def numpy_file(numpy, tmp_path, misaligned: bool = False):
    rng = numpy.random.default_rng(7)
    arrays = {
        "embed.weight": ("F32", rng.standard_normal((33, 17)).astype(numpy.float32)),
        "ids": ("I64", rng.integers(-(2**40), 2**40, (5, 3), dtype=numpy.int64)),
        "half": ("F16", rng.standard_normal(11).astype(numpy.float16)),
        "flags": ("BOOL", rng.integers(0, 2, (4, 4)).astype(numpy.bool_)),
        "raw": ("U8", numpy.frombuffer(pattern(1001, 3), numpy.uint8)),
        "nothing": ("F32", numpy.zeros((0, 4), numpy.float32)),
        "scalar": ("F64", numpy.array(3.25)),
        "u16": ("U16", rng.integers(0, 2**16, 9, dtype=numpy.uint16)),
    }
    # As safetensors writes them, the widest elements first: every tensor
    # aligned. Misaligned: 1001 bytes of U8 first, the rest after it.
    order = sorted(arrays, key=lambda name: -arrays[name][1].itemsize)
    if misaligned:
        order.remove("raw")
        order.insert(0, "raw")
    tensors = [(name, arrays[name][0], arrays[name][1].shape, arrays[name][1].tobytes()) for name in order]
    path = tmp_path / "numpy.safetensors"
    path.write_bytes(encode(tensors, {"source": "numpy"}))
    return path, {name: arrays[name][1] for name in order}


NUMPY_DTYPES = {
    "float32": "<f4",
    "int64": "<i8",
    "float16": "<f2",
    "bool": "?",
    "uint8": "u1",
    "float64": "<f8",
    "uint16": "<u2",
}


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
def test_the_data_region_arrives_in_device_memory_in_one_transfer_and_each_plan_reads_its_tensor(
    sim, numpy, device, tmp_path, misaligned
):
    path, arrays = numpy_file(numpy, tmp_path, misaligned)
    header = st.read_header(path)
    target = sim.array(device, bytes(header.data_len))
    stager = hostcopy.Stager(device, chunk=4096, buffers=2, workers=2, driver_path_below=0)
    before = sim.copies_queued(device)
    assert st.copy_data_to_device(target, path, stager=stager) == header
    on_device = target.read()
    assert on_device == path.read_bytes()[header.data_offset :]
    assert sim.copies_queued(device) - before >= header.data_len // 4096, "staged in chunks"
    views = st.plan_views(header)
    assert [view.name for view in views] == list(arrays)
    for view in views:
        expected = arrays[view.name]
        got = numpy.frombuffer(on_device[view.begin : view.end], NUMPY_DTYPES[view.torch_dtype]).reshape(view.shape)
        assert got.dtype == expected.dtype.newbyteorder("<") or got.dtype == expected.dtype, view.name
        assert got.shape == expected.shape and got.tobytes() == expected.tobytes(), view.name
    assert ("copy" in [view.placement for view in views]) == misaligned
    stager.close()
    sim.assert_no_violations(device)


def test_the_default_stager_copies_the_region_too(sim, device, tmp_path):
    data = encode([("big", "U8", [3 << 20], pattern(3 << 20, 4)), ("tail", "I32", [3], bytes(12))])
    path = tmp_path / "big.safetensors"
    path.write_bytes(data)
    target = sim.array(device, bytes(parse_header(data, len(data)).data_len))
    header = st.copy_data_to_device(target, path)
    assert target.read() == data[header.data_offset :]
    sim.assert_no_violations(device)


def test_a_refused_file_copies_nothing(sim, device, tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(encode([("a", "F32", [4], bytes(16))]) + b"\x00")
    target = sim.array(device, bytes(64))
    before = sim.copies_queued(device)
    with pytest.raises(hostcopy.SafetensorsError):
        st.copy_data_to_device(target, path)
    assert sim.copies_queued(device) == before


def test_device_memory_smaller_than_the_region_is_out_of_bounds(sim, device, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(encode([("a", "U8", [100], pattern(100, 1))]))
    with pytest.raises(hostcopy.OutOfBounds):
        st.copy_data_to_device(sim.array(device, bytes(99)), path)


def test_a_file_without_data_copies_nothing(sim, device, tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(encode([("none", "F32", [0], b"")]))
    before = sim.copies_queued(device)
    header = st.copy_data_to_device(sim.array(device, bytes(1)), path)
    assert header.data_len == 0 and sim.copies_queued(device) == before


# The torch half (views of one buffer), on the CPU where torch is installed.


def test_views_share_one_buffer_and_match_the_bytes(tmp_path):
    torch = pytest.importorskip(
        "torch",
        reason="torch is not installed (ci.sh does not install it; gpu.sh's test_gpu_safetensors.py runs load_file)",
    )
    data = encode(
        [
            ("u8", "U8", [3], b"abc"),
            ("f32", "F32", [2], struct.pack("<2f", 1.5, -2.0)),
            ("bf", "BF16", [2, 1], b"\x80\x3f\x00\x40"),
            ("e", "F32", [0], b""),
        ]
    )
    header = parse_header(data, len(data))
    views = st.plan_views(header)
    region = torch.frombuffer(bytearray(data[header.data_offset :]), dtype=torch.uint8)
    tensors = st._tensors_of(torch, region, views, st._torch_dtypes(torch, views, ""))
    assert list(tensors) == ["u8", "f32", "bf", "e"]
    assert tensors["f32"].tolist() == [1.5, -2.0]  # misaligned: its own copy
    assert tensors["f32"].untyped_storage().data_ptr() != region.untyped_storage().data_ptr()
    assert tensors["u8"].untyped_storage().data_ptr() == region.untyped_storage().data_ptr()
    assert tensors["bf"].dtype == torch.bfloat16 and tensors["bf"].shape == (2, 1)
    assert tensors["bf"].flatten().tolist() == [1.0, 2.0]
    assert tensors["e"].shape == (0,)


def test_without_torch_load_file_says_it_needs_torch_before_opening_the_file(tmp_path):
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here: the message for its absence cannot be seen")
    for call in (
        lambda: st.load_file(tmp_path / "absent.safetensors"),
        lambda: st.safe_open(tmp_path / "absent.safetensors"),
    ):
        with pytest.raises(ImportError, match="torch"):
            call()
