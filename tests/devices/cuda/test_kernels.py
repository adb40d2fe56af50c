"""kernels: the .cu sources compile to PTX that reads %globaltimer under the
unmangled names the loader asks for; the loader finds them from a source tree
and from an installed wheel; every failure path (no CUDA, no CuPy, a broken
CuPy, a failed compile, bad arguments) is a CutimelineError that says what to
do. Launches themselves are tested on a GPU, in tests/gpu/."""

import shutil
import subprocess
import sys
import types
import zipfile
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch

import cutimeline.devices.cuda.loader as loader
import cutimeline.devices.cuda.kernels as K
from cutimeline import CutimelineError

ROOT = Path(__file__).resolve().parents[3]
NVCC = shutil.which("nvcc")


@pytest.fixture(autouse=True)
def _fresh_loader():
    """Loader caches are per process; each test starts and ends clean."""
    caches = (loader.import_cupy, loader._module, loader.compiled, K._launcher)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@pytest.fixture
def cuda_present(monkeypatch):
    """Pretend torch has CUDA 13.0 and two devices, current one 0."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def fake_cupy(kernel_error=None, device_error=None):
    """A stand-in for the CuPy API the loader uses, recording what it did."""
    made = []

    class Kernel:
        @property
        def kernel(self):
            if kernel_error is not None:
                raise kernel_error
            return object()

    class RawModule:
        def __init__(self, *, code, options):
            made.append((code, options))

        def get_function(self, name):
            return Kernel()

    def get_device_count():
        if device_error is not None:
            raise device_error
        return 2

    cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=get_device_count,
                                      getDevice=lambda: 0),
        Device=lambda index: nullcontext())
    return types.SimpleNamespace(RawModule=RawModule, cuda=cuda), made


# ---------------------------------------------------------------- sources --

@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("stem", sorted(loader.KERNELS))
def test_every_source_compiles_to_ptx_that_reads_globaltimer(stem, tmp_path):
    ptx = tmp_path / f"{stem}.ptx"
    run = subprocess.run(
        [NVCC, "--ptx", "-arch=sm_90", str(ROOT / "kernels" / f"{stem}.cu"),
         "-o", str(ptx)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    text = ptx.read_text()
    assert "%globaltimer" in text
    # extern "C": the entry keeps its plain name, which RawModule looks up
    assert f".entry {loader.KERNELS[stem]}(" in text
    assert text.count(".entry ") == 1
    if stem == "stamp":
        assert "%clock64" in text and "%smid" in text
    if stem in ("spin", "probe"):
        # one read before the loop and one inside it (volatile asm is not
        # hoisted out of the loop)
        assert text.count("%globaltimer") >= 2


def test_sources_are_found_in_the_source_tree():
    assert loader.source_dir() == ROOT / "kernels"
    assert "ctl_stamp" in loader.source("stamp")


def test_unknown_source_names_the_choices():
    with pytest.raises(CutimelineError, match=r"'probe', 'spin', 'stamp'"):
        loader.source("stamps")


def test_missing_sources_say_where_they_were_looked_for(monkeypatch, tmp_path):
    empty = (tmp_path / "a", tmp_path / "b")
    monkeypatch.setattr(loader, "_SEARCH_PATH", empty)
    with pytest.raises(CutimelineError, match="reinstall cutimeline") as err:
        loader.source_dir()
    assert str(empty[0]) in str(err.value) and "stamp.cu" in str(err.value)


def test_packaged_sources_come_first(monkeypatch, tmp_path):
    for stem in loader.KERNELS:
        (tmp_path / f"{stem}.cu").write_text("// packaged\n")
    monkeypatch.setattr(loader, "_SEARCH_PATH", (tmp_path, ROOT / "kernels"))
    assert loader.source_dir() == tmp_path


def _setuptools_at_least(floor: tuple[int, ...]) -> bool:
    import setuptools
    try:
        have = tuple(int(p) for p in setuptools.__version__.split(".")[:len(floor)])
    except ValueError:  # a development version: assume it is new enough
        return True
    return have >= floor


@pytest.mark.skipif(not _setuptools_at_least((68,)),
                    reason="pyproject.toml builds with setuptools>=68, older here")
def test_a_built_wheel_ships_the_sources_and_finds_them(tmp_path):
    # Build from a copy so no build/ or egg-info lands in the working tree.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "cutimeline", src / "cutimeline", ignore=ignore)
    shutil.copytree(ROOT / "kernels", src / "kernels", ignore=ignore)
    build = subprocess.run(
        [sys.executable, "-c",
         "import sys; from setuptools import build_meta as b; "
         "print(b.build_wheel(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=src, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    wheel = tmp_path / "dist" / build.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    for stem in loader.KERNELS:
        assert f"cutimeline/_cuda/{stem}.cu" in names
    # Imported from the unpacked wheel (PYTHONPATH wins over the editable
    # install's finder), the loader must find the packaged copy.
    probe = subprocess.run(
        [sys.executable, "-c",
         "import cutimeline.devices.cuda.loader as k; print(k.__file__); "
         "print(k.source_dir())"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    module_file, found = probe.stdout.split()
    site = (tmp_path / "site").resolve()
    assert Path(module_file).resolve().is_relative_to(site)
    assert Path(found) == site / "cutimeline" / "_cuda"


def test_importing_the_module_loads_neither_cupy_nor_torch():
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys; import cutimeline.devices.cuda.kernels; "
         "print('cupy' in sys.modules, 'torch' in sys.modules)"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False"]


# ------------------------------------------------------ missing pieces --

def test_a_torch_without_cuda_says_to_install_a_cuda_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(CutimelineError, match="install a CUDA build of torch"):
        K.Stamper(4)


def test_no_visible_device_says_so(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CutimelineError, match="No CUDA device is visible"):
        K.probe_granularity()


@pytest.mark.parametrize("cuda, wheel, extra", [
    ("13.0", "cupy-cuda13x", False),
    ("12.4", "cupy-cuda12x", True),
])
def test_missing_cupy_names_the_wheel_for_torchs_cuda(
        cuda_present, monkeypatch, cuda, wheel, extra):
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now fails
    with pytest.raises(CutimelineError, match="CuPy is not installed") as err:
        K.Stamper(4)
    assert f"pip install {wheel}" in str(err.value)
    assert f"CUDA {cuda}" in str(err.value)
    # the [gpu] extra pins cupy-cuda12x, so it is offered only for CUDA 12
    assert ("cutimeline[gpu]" in str(err.value)) == extra


def test_a_cupy_that_fails_to_import_is_reported_with_its_reason(
        cuda_present, monkeypatch):
    class Broken:
        def find_spec(self, name, path=None, target=None):
            if name == "cupy":
                raise ImportError("libnvrtc.so.13: cannot open shared object")
            return None

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    with pytest.raises(CutimelineError, match="libnvrtc.so.13") as err:
        K.spin(1000)
    assert "pip install cupy-cuda13x" in str(err.value)


def test_a_cupy_that_cannot_see_the_gpu_is_reported(cuda_present, monkeypatch):
    cupy, _ = fake_cupy(device_error=RuntimeError("CUDA driver too old"))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with pytest.raises(CutimelineError, match="cannot use the GPU") as err:
        K.spin(1000)
    assert "CUDA driver too old" in str(err.value)


def test_each_source_is_compiled_once_per_process(cuda_present, monkeypatch):
    cupy, made = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    first = loader.compiled("stamp", 0)
    assert loader.compiled("stamp", 0) is first
    loader.compiled("stamp", 1)  # another device: CuPy loads it there itself
    assert made == [(loader.source("stamp"), loader._NVRTC_OPTIONS)]


class Recorded:
    """A context-manager stand-in for a CuPy device or stream."""
    active = []

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        Recorded.active.append(self.what)

    def __exit__(self, *exc):
        Recorded.active.pop()


@pytest.mark.parametrize("new_cupy", [True, False])
def test_launches_go_to_the_callers_device_and_stream(
        cuda_present, monkeypatch, new_cupy):
    cupy, _ = fake_cupy()
    cupy.cuda.Device = lambda index: Recorded(("device", index))
    wrapped = []
    if new_cupy:  # CuPy >= 14: Stream.from_external and the stream protocol
        def from_external(obj):
            wrapped.append(obj.__cuda_stream__())
            return Recorded(("stream", obj.__cuda_stream__()[1]))
        cupy.cuda.Stream = types.SimpleNamespace(from_external=from_external)
    else:
        cupy.cuda.Stream = types.SimpleNamespace()

        def external(handle, device):
            wrapped.append((handle, device))
            return Recorded(("stream", handle))
        cupy.cuda.ExternalStream = external
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    current = types.SimpleNamespace(cuda_stream=0xABC)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: current)
    launches = []

    def kernel(grid, block, args):
        launches.append((grid, block, args, list(Recorded.active)))

    launch = K._launcher(1)
    launch(kernel, (np.int32(5),), None)       # torch's current stream
    launch(kernel, (np.int32(6),), None)       # its wrapper is reused
    launch(kernel, (np.int32(7),), 0xDEF)      # a raw handle
    assert [a[:2] for a in launches] == [((1,), (1,))] * 3
    assert [a[3] for a in launches] == [
        [("device", 1), ("stream", 0xABC)]] * 2 + [
        [("device", 1), ("stream", 0xDEF)]]
    assert wrapped == ([(0, 0xABC), (0, 0xDEF)] if new_cupy
                       else [(0xABC, 1), (0xDEF, 1)])
    assert Recorded.active == []
    # on its own device already: no switch (nor a Device object threads share)
    cupy.cuda.runtime.getDevice = lambda: 1
    launch(kernel, (np.int32(8),), 0xDEF)
    assert launches[-1][3] == [("stream", 0xDEF)]


def test_a_failed_compile_names_the_file_and_the_cause(
        cuda_present, monkeypatch):
    cupy, _ = fake_cupy(kernel_error=RuntimeError("nvrtc: error: bad PTX"))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with pytest.raises(CutimelineError, match="spin.cu with CuPy failed") \
            as err:
        loader.compiled("spin", 0)
    assert "bad PTX" in str(err.value)
    assert isinstance(err.value.__cause__, RuntimeError)


# ------------------------------------------------------- bad arguments --

@pytest.mark.parametrize("duration", [-1, 1.5, True, "10", K.MAX_SPIN_NS + 1])
def test_spin_rejects_bad_durations_before_touching_cuda(duration):
    with pytest.raises(CutimelineError, match="duration_ns=.* split longer"):
        K.spin(duration)


def test_spin_slots_need_a_stamper():
    with pytest.raises(CutimelineError, match="without a stamper"):
        K.spin(1000, begin_slot=0)


@pytest.mark.parametrize("slots", [0, -3, 2.0, True, 2**31])
def test_stamper_rejects_bad_slot_counts(slots):
    with pytest.raises(CutimelineError, match="slots=.* int32"):
        K.Stamper(slots)


@pytest.mark.parametrize("kw", [dict(steps=0), dict(steps=1.0),
                                dict(max_reads=0), dict(steps=2**31)])
def test_probe_rejects_bad_counts(kw):
    with pytest.raises(CutimelineError, match="is not an integer in 1.."):
        K.probe_granularity(**kw)


@pytest.mark.parametrize("slot, ok", [(0, True), (9, True), (-1, False),
                                      (10, False), (1.0, False), (None, False),
                                      (np.int64(3), True)])
def test_slot_checks(slot, ok):
    if ok:
        K._check_slot("slot", slot, 10, allow_none=False)
    else:
        with pytest.raises(CutimelineError, match="slot"):
            K._check_slot("slot", slot, 10, allow_none=False)


def test_minus_one_means_no_slot_only_where_allowed():
    K._check_slot("end_slot", -1, 10, allow_none=True)
    with pytest.raises(CutimelineError, match="or -1 for none"):
        K._check_slot("end_slot", -2, 10, allow_none=True)


def test_device_resolution(cuda_present):
    assert K._device_index(None) == 0
    assert K._device_index(1) == 1
    assert K._device_index("cuda") == 0
    assert K._device_index(torch.device("cuda", 1)) == 1
    for bad, words in [("cpu", "not a CUDA device"), ("cuda:2", "does not"),
                       (True, "not a CUDA device"), (1.0, "not a CUDA")]:
        with pytest.raises(CutimelineError, match=words):
            K._device_index(bad)


def test_stream_resolution():
    assert K._stream_handle(12345, 0) == 12345
    assert K._stream_handle(types.SimpleNamespace(cuda_stream=7), 0) == 7
    assert K._stream_handle(types.SimpleNamespace(ptr=9), 0) == 9  # cupy
    with pytest.raises(CutimelineError, match="not a CUDA stream"):
        K._stream_handle("default", 0)
