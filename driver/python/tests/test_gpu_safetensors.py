"""GPU tests of hostcopy.safetensors against safetensors itself: a file
written by ``safetensors.torch.save_file`` with every dtype this torch has
(bf16, f16, f32, f64, i8 to i64, u8 to u64, bool, the float8 types,
complex64), odd shapes, a scalar, zero-size tensors and metadata, loaded
by ``hostcopy.safetensors.load_file`` and by ``safetensors.torch.load_file``:
the same names in the same order, dtypes, shapes, device and bytes. Then
a hand-written file whose tensors are misaligned, the views' shared
allocation, ``safe_open``, and a refused file.

Skipped, with the reason, where torch, safetensors or a GPU is missing;
HOSTCOPY_REQUIRE_GPU=1 (the GPU bundle sets it) makes that a failure.
"""

import importlib
import json
import os
import struct

import pytest

import hostcopy

REQUIRE = os.environ.get("HOSTCOPY_REQUIRE_GPU") == "1"


def _need(module: str):
    try:
        return importlib.import_module(module)
    except Exception as missing:  # ImportError, or a CUDA init failure at import
        if REQUIRE:
            pytest.fail(f"HOSTCOPY_REQUIRE_GPU=1 but {module} is unusable: {missing}", pytrace=False)
        pytest.skip(f"{module} is unusable here: {missing}", allow_module_level=True)


torch = _need("torch")
safetensors_torch = _need("safetensors.torch")
safetensors = _need("safetensors")
import hostcopy.safetensors as hst  # noqa: E402

if not torch.cuda.is_available():
    if REQUIRE:
        pytest.fail("HOSTCOPY_REQUIRE_GPU=1 but torch sees no GPU", pytrace=False)
    pytest.skip("no GPU (torch.cuda.is_available() is False)", allow_module_level=True)


def _random(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    count = 1
    for extent in shape:
        count *= extent
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (count * itemsize,), dtype=torch.uint8, generator=generator)
    return raw.view(dtype).reshape(shape).clone()


def _dtypes():
    names = [
        "bfloat16",
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
        "complex64",
    ]
    names += ["uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"]
    usable = []
    for name in names:
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        try:  # this safetensors writes and reads it
            safetensors_torch.load(safetensors_torch.save({"x": torch.zeros(2, dtype=dtype)}))
        except Exception as refused:
            print(f"safetensors {safetensors.__version__} cannot round-trip {name}: {refused}")
            continue
        usable.append(dtype)
    return usable


def _version(text):
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def _model():
    tensors = {}
    shapes = [(7, 13), (1,), (3, 1, 5), (257,), (2, 3, 4, 5), (1023, 3)]
    for index, dtype in enumerate(_dtypes()):
        name = str(dtype).split(".")[-1]
        if dtype == torch.bool:
            tensors[f"layer.{index}.{name}"] = (
                torch.rand(shapes[index % len(shapes)], generator=torch.Generator().manual_seed(index)) > 0.5
            )
        else:
            tensors[f"layer.{index}.{name}"] = _random(shapes[index % len(shapes)], dtype, index)
    tensors["big.bf16"] = _random((4096, 1025), torch.bfloat16, 99)  # 8 MiB: staged
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.float32)
    tensors["empty.f32"] = torch.empty((0, 7), dtype=torch.float32)
    tensors["empty.i64"] = torch.empty((3, 0), dtype=torch.int64)
    tensors["a.first.by.name"] = _random((5,), torch.int16, 5)
    return tensors


def _same(ours, theirs):
    if _version(safetensors.__version__) >= (0, 6):
        assert list(ours) == list(theirs), "names or their order differ"
    else:  # safetensors before 0.6 returned them sorted by name
        assert sorted(ours) == list(theirs), "names differ"
    for name, tensor in theirs.items():
        mine = ours[name]
        assert mine.dtype == tensor.dtype, name
        assert mine.shape == tensor.shape, name
        assert mine.device == tensor.device, name
        assert torch.equal(
            mine.contiguous().view(-1).view(torch.uint8), tensor.contiguous().view(-1).view(torch.uint8)
        ), name


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("safetensors") / "model.safetensors"
    tensors = _model()
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt", "note": "hostcopy test"})
    return path, tensors


def test_load_file_matches_safetensors_bit_exact_with_every_dtype(model_file):
    path, tensors = model_file
    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}, dtypes {[str(d) for d in _dtypes()]}")
    theirs = safetensors_torch.load_file(str(path), device="cuda:0")
    ours = hst.load_file(path, device="cuda:0")
    _same(ours, theirs)
    for name, tensor in tensors.items():
        assert torch.equal(
            ours[name].cpu().view(-1).view(torch.uint8), tensor.contiguous().view(-1).view(torch.uint8)
        ), name


def test_load_file_with_a_side_stream_current(model_file):
    path, tensors = model_file
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        ours = hst.load_file(path, device="cuda:0")
        for name, tensor in tensors.items():  # read by kernels on the side stream
            assert torch.equal(
                ours[name].view(-1).view(torch.uint8).cpu(), tensor.contiguous().view(-1).view(torch.uint8)
            ), name
    side.synchronize()


def test_device_forms_and_the_shared_allocation(model_file):
    path, _ = model_file
    header = hst.read_header(path)
    for device in ("cuda", 0, torch.device("cuda:0")):
        ours = hst.load_file(path, device=device)
        assert all(tensor.device == torch.device("cuda:0") for tensor in ours.values())
    storages = {tensor.untyped_storage().data_ptr() for tensor in ours.values() if tensor.numel()}
    assert len(storages) == 1, "safetensors' own layout is aligned: every tensor is a view of one allocation"
    assert next(iter(ours.values())).untyped_storage().nbytes() == header.data_len


def test_safe_open_matches_safetensors(model_file):
    path, _ = model_file
    with (
        safetensors.safe_open(str(path), framework="pt", device="cuda:0") as theirs,
        hst.safe_open(path, framework="pt", device="cuda:0") as ours,
    ):
        assert ours.keys() == list(theirs.keys())
        assert ours.metadata() == theirs.metadata()
        for name in theirs.keys():
            _same({name: ours.get_tensor(name)}, {name: theirs.get_tensor(name)})


def test_a_misaligned_file_gets_its_own_copies_and_the_same_bytes(tmp_path):
    rows = [
        ("u8", "U8", [3], bytes([1, 2, 3])),
        ("f32", "F32", [2], struct.pack("<2f", 1.5, -2.0)),
        ("i64", "I64", [1], struct.pack("<q", -(2**40))),
    ]
    header, offset = {}, 0
    for name, dtype, shape, data in rows:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    path = tmp_path / "misaligned.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(row[3] for row in rows))
    ours = hst.load_file(path)
    try:
        theirs = safetensors_torch.load_file(str(path), device="cuda:0")
    except Exception as refused:  # hostcopy's values are checked below either way
        print(f"safetensors {safetensors.__version__} refuses a misaligned file: {refused}")
    else:
        _same(ours, theirs)
    assert ours["f32"].tolist() == [1.5, -2.0] and ours["i64"].tolist() == [-(2**40)]
    assert ours["f32"].data_ptr() % 4 == 0 and ours["i64"].data_ptr() % 8 == 0


def test_a_refused_file_allocates_nothing(tmp_path):
    path = tmp_path / "truncated.safetensors"
    safetensors_torch.save_file({"a": torch.ones(1000)}, str(path))
    path.write_bytes(path.read_bytes()[:-1])
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(hostcopy.SafetensorsError) as caught:
        hst.load_file(path)
    assert caught.value.reason == "data_truncated"
    with pytest.raises(Exception):
        safetensors_torch.load_file(str(path), device="cuda:0")
    assert torch.cuda.memory_allocated() == before
