"""The carry: the wheels that travel to a GPU host with no registry, and their check.

    bash scripts/gpu_wheels.sh            # here: fetch into .gpu-wheels/, print sizes
    bash scripts/gpu_wheels.sh --check    # here and in CI: resolve, fit, install, import
    bash scripts/gpu_wheels.sh --run      # on the GPU host: install, then the GPU check

The GPU hosts this project can borrow hold Python 3.12, PyTorch 2.11 (CUDA 13),
Triton, numpy, transformers and other common packages (``IMAGE``), and no SGLang,
sgl-kernel or FlashInfer; they reach no package registry, and at most 64 MiB of
files travel to them with the working tree. The carry is SGLang 0.5.17's own wheel
for Python 3.12 (installed with ``--no-deps``), this package's wheel, and what the
GPU check's code paths import (SGLang's pools, configurator, sizing, ServerArgs,
graph setup and warm-up; this package's report) that the image lacks (``CARRY``):
pure Python, and the few compiled modules SGLang imports at module level
(cp312 manylinux builds). xgrammar, imported by SGLang's function-call parsers and
never called here, does not fit (44.7 MB): ``test/gpu_site`` stands in for it where
no real one imports.

``--check`` (no GPU): every pinned wheel resolves for CPython 3.12 on
manylinux x86_64; the carry and the working tree fit in 64 MiB; each carried
wheel's requirements agree with the image's known versions; the carry installs with
``pip install --no-index --no-deps --target`` (for 3.12, as on the host); and the GPU
check runs (``gpu_lean_check.py --dry``) in a fresh environment holding only torch,
the image's packages and the carry. That environment is this machine's Python 3.11
with the shared base venv's torch: the carry's pure-Python wheels are the ones
carried (py3-none-any), its compiled ones are replaced by the cp311 builds of the
same versions, and the check says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARRY_DIR = os.path.join(ROOT, ".gpu-wheels")  # ignored (.gitignore)
STAND_INS = os.path.join(ROOT, "test", "gpu_site")
CACHE_ROOT = os.environ.get(
    "SGLANG_PD_LEAN_VENVS", os.path.expanduser("~/.cache/sglang-pd-lean")
)
CACHE = os.path.join(CACHE_ROOT, "gpu-wheels")  # cp312 downloads, kept
CACHE_HERE = os.path.join(CACHE_ROOT, "gpu-wheels-here")  # this Python's twins
LIMIT = 64 * (1 << 20)  # what travels: the working tree and the carry together
MIB = 1 << 20
HOST_SITE = "/tmp/sglang-pd-lean-site"
RUN_LIMIT_S = 480  # the whole GPU command: install and check, 8 minutes

# CPython 3.12 on manylinux x86_64 (the GPU hosts), any pure-Python wheel too.
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *("--platform", "manylinux_2_34_x86_64"),
    *("--platform", "manylinux_2_28_x86_64"),
    *("--platform", "manylinux_2_27_x86_64"),
    *("--platform", "manylinux_2_26_x86_64"),
    *("--platform", "manylinux_2_24_x86_64"),
    *("--platform", "manylinux_2_17_x86_64"),
    *("--platform", "manylinux2014_x86_64"),
    *("--platform", "manylinux1_x86_64"),
    *("--platform", "any"),
]

# name -> (version, who imports it). Versions: SGLang 0.5.17's pin where it has
# one, else the release its CPU venv (scripts/ensure_venv.sh) runs with.
CARRY = {
    "sglang": ("0.5.17", "the release checked (installed with --no-deps)"),
    # compiled, imported at module level
    "orjson": ("3.13.0", "sglang.srt.utils.common"),
    "pybase64": ("1.5.1", "sglang.srt.utils.common, sglang.utils"),
    "pydantic-core": ("2.50.5", "pydantic"),
    "msgspec": ("0.23.0", "sglang.srt.managers.io_struct"),
    "pyzmq": ("27.3.0", "sglang.srt.utils.network"),
    "setproctitle": ("1.3.8", "sglang.srt.managers.scheduler"),
    "tokenizers": (
        "0.22.2",
        "transformers 5.12.1 (it needs <=0.23.0; the image has 0.23.2)",
    ),
    # pure Python
    "transformers": (
        "5.12.1",
        "SGLang's config classes (its pin; SGLang 0.5.17 fails to import with the "
        "image's 5.17.0: 'qwen3_asr' is already used by a Transformers config)",
    ),
    "pydantic": ("2.14.4", "sglang.utils, the OpenAI protocol (ServerArgs)"),
    "annotated-types": ("0.8.0", "pydantic"),
    "typing-inspection": ("0.4.5", "pydantic"),
    "openai": ("2.6.1", "the OpenAI protocol (ServerArgs)"),
    "distro": ("1.9.0", "openai"),
    "sniffio": ("1.3.1", "openai"),
    "partial-json-parser": ("0.2.1.1.post7", "SGLang's function-call parsers"),
    "fastapi": ("0.165.0", "sglang.srt.managers.scheduler"),
    "starlette": ("1.10.0", "sglang.srt.utils.common, fastapi"),
    "python-multipart": ("0.0.34", "starlette"),
    "uvicorn": ("0.55.0", "sglang.srt.disaggregation.encode_receiver"),
    "ipython": ("9.19.1", "sglang.utils (IPython.display)"),
    "traitlets": ("5.16.1", "IPython"),
    "compressed-tensors": ("0.18.0", "sglang.srt.layers.quantization"),
    "loguru": ("0.7.3", "compressed-tensors"),
    "gguf": ("0.19.0", "sglang.srt.layers.quantization.gguf"),
    "dill": ("0.4.1", "sglang.srt.sampling.custom_logit_processor"),
    "opentelemetry-api": ("1.45.3", "sglang.srt.observability.trace"),
}

# The GPU hosts' image, as read on 2026-11-17: every package name, and the versions
# known (a pip list of that image). Carry a package only for another version.
IMAGE_VERSIONS = {
    "huggingface-hub": "1.33.0",
    "numpy": "2.5.2",
    "safetensors": "0.8.0",
    "sentencepiece": "0.2.2",
    "tiktoken": "0.14.0",
    "tokenizers": "0.23.2",
    "torch": "2.11.0",
    "torchaudio": "2.11.0",
    "torchvision": "0.26.0",
    "transformers": "5.17.0",
    "triton": "3.6.0",
}
IMAGE = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama
contourpy coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x
cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader
lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests
rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
xarray xxhash yarl zipp""".split()
)
# Built with torch: on this machine the base venv's build stands in for the image's.
TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "triton"}
# pip's arguments for installing carried wheels into a folder, offline.
INSTALL = ("install", "--no-index", "--no-deps", "--no-compile", "--target")


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def log(message: str) -> None:
    print(f"[gpu_wheels] {message}", flush=True)


def pip(python: str, *args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    command = [python, "-m", "pip", "--disable-pip-version-check", *args]
    if quiet:
        command.append("-q")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"pip {' '.join(args[:3])} ... failed:\n{done.stderr[-3000:]}")
    return done


def wheel_name(path: str) -> tuple[str, str]:
    """(canonical name, version) from a wheel's file name."""
    name, version = os.path.basename(path).split("-")[:2]
    return canonical(name), version


def cached(folder: str, name: str, version: str) -> str | None:
    if not os.path.isdir(folder):
        return None
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".whl") and wheel_name(entry) == (canonical(name), version):
            return os.path.join(folder, entry)
    return None


def fetch(folder: str, name: str, version: str, platform: list[str]) -> str:
    """The wheel of ``name==version`` for ``platform`` (empty: this Python), from
    ``folder`` where it was downloaded before, else from the registry."""
    found = cached(folder, name, version)
    if found is None:
        os.makedirs(folder, exist_ok=True)
        pip(
            sys.executable,
            "download",
            "--no-deps",
            "--only-binary=:all:",
            *platform,
            "-d",
            folder,
            f"{name}=={version}",
        )
        found = cached(folder, name, version)
    if found is None:
        raise SystemExit(f"no wheel of {name}=={version} for {platform or 'here'}")
    return found


def own_wheel(folder: str) -> str:
    """This checkout as a wheel (py3-none-any), built now."""
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory() as build:
        # A copy of what travels: the build writes nothing into the checkout.
        for path in travelling():
            target = os.path.join(build, os.path.relpath(path, ROOT))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(path, target)
        pip(
            sys.executable,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            folder,
            build,
        )
    (found,) = [f for f in os.listdir(folder) if f.startswith("sglang_pd_lean-")]
    return os.path.join(folder, found)


def gather(folder: str) -> list[str]:
    """The carry in ``folder`` (emptied first): every pinned wheel for the GPU
    hosts' platform, and this package's wheel."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    wheels = []
    for name, (version, _) in CARRY.items():
        source = fetch(CACHE, name, version, PLATFORM)
        wheels.append(shutil.copy(source, folder))
    wheels.append(own_wheel(folder))
    return wheels


def travelling() -> list[str]:
    """What travels besides the carry: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    paths = (os.path.join(ROOT, p) for p in listed if p)
    return [p for p in paths if os.path.isfile(p)]


def tree_bytes() -> int:
    return sum(map(os.path.getsize, travelling()))


def sizes(wheels: list[str]) -> int:
    """Print each wheel, the carry and what travels in all; the total."""
    for path in sorted(wheels, key=os.path.getsize, reverse=True):
        log(f"  {os.path.getsize(path) / MIB:8.2f} MiB  {os.path.basename(path)}")
    carry, tree = sum(map(os.path.getsize, wheels)), tree_bytes()
    log(
        f"carry: {len(wheels)} wheels, {carry / MIB:.2f} MiB; working tree "
        f"{tree / MIB:.2f} MiB; together {(carry + tree) / MIB:.2f} of "
        f"{LIMIT / MIB:.0f} MiB"
    )
    return carry + tree


def fetch_command() -> int:
    wheels = gather(CARRY_DIR)
    total = sizes(wheels)
    if total > LIMIT:
        log("too large to travel")
        return 1
    log("ready: carry .gpu-wheels and run `bash scripts/gpu_wheels.sh --run` there")
    return 0


# --- --check ---------------------------------------------------------------------------


def requirements(wheel: str) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return Parser().parsestr(text).get_all("Requires-Dist") or []


def agreement(wheels: list[str]) -> list[str]:
    """Each carried wheel's requirements (SGLang's own left out: --no-deps) against
    the carry and the image's known versions: the conflicts."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = {
        **default_environment(),
        "python_version": "3.12",
        "python_full_version": "3.12.3",
        "sys_platform": "linux",
        "platform_machine": "x86_64",
        "extra": "",
    }
    carried = dict(wheel_name(w) for w in wheels)
    conflicts = []
    for wheel in wheels:
        name, _ = wheel_name(wheel)
        if name == "sglang":
            continue
        for line in requirements(wheel):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = canonical(req.name)
            have = carried.get(dep) or IMAGE_VERSIONS.get(dep)
            if have is not None and not req.specifier.contains(have, prereleases=True):
                conflicts.append(f"{name} needs {req}; the host has {dep} {have}")
    return conflicts


def base_site() -> tuple[str, str]:
    """(the shared base venv's interpreter, its site-packages): torch lives there."""
    base = os.path.join(CACHE_ROOT, "base")
    python = os.path.join(base, "bin", "python")
    if not os.path.exists(python):
        raise SystemExit(f"no base venv at {base}: run scripts/ensure_venv.sh first")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return python, site


def distributions(python: str, names: list[str], closure: bool) -> dict:
    """name -> (version, top-level entries of its files) of the base venv's
    distributions ``names`` (with their requirements, recursively, if ``closure``)."""
    code = r"""
import json, sys
from importlib import metadata
from packaging.requirements import Requirement
names, closure = json.loads(sys.argv[1]), sys.argv[2] == "1"
canon = lambda n: n.lower().replace("_", "-").replace(".", "-")
todo, found = list(names), {}
while todo:
    name = canon(todo.pop())
    if name in found:
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    tops = sorted({str(f).split("/")[0] for f in dist.files or []
                   if not str(f).startswith("..") and str(f).split("/")[0] != "__pycache__"})
    found[name] = (dist.version, tops)
    for line in (dist.requires or []) if closure else []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
print(json.dumps(found))
"""
    import json

    done = subprocess.run(
        [python, "-c", code, json.dumps(names), "1" if closure else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def linked(folder: str, site: str, found: dict, skip: set) -> list[str]:
    """Symbolic links in ``folder`` to the base venv's files of ``found``."""
    os.makedirs(folder, exist_ok=True)
    for name, (_, tops) in found.items():
        if name in skip:
            continue
        for top in tops:
            target = os.path.join(folder, top)
            if not os.path.lexists(target):
                os.symlink(os.path.join(site, top), target)
    return sorted(n for n in found if n not in skip)


def image_env(work: str) -> tuple[str, list[str]]:
    """A fresh venv of this machine's Python holding only torch (the base venv's,
    and what it requires) and the image's packages (the base venv's builds, or the
    image's own versions where they differ); the lines that say what it holds."""
    base_python, site = base_site()
    torch = distributions(base_python, ["torch"], closure=True)
    image = distributions(base_python, sorted(IMAGE - set(torch)), closure=False)
    differ = sorted(
        n
        for n, (v, _) in image.items()
        if n in IMAGE_VERSIONS and n not in TORCH_FAMILY and v != IMAGE_VERSIONS[n]
    )
    versions, own_version = [], set()
    for name in differ:
        try:
            versions.append(fetch(CACHE_HERE, name, IMAGE_VERSIONS[name], []))
            own_version.add(name)
        except SystemExit:  # no build of the image's version for this Python
            pass
    linked(os.path.join(work, "torch"), site, torch, set())
    linked(os.path.join(work, "image"), site, image, own_version)
    if versions:
        pip(
            sys.executable,
            "install",
            "--no-index",
            "--no-deps",
            "--target",
            os.path.join(work, "image"),
            *versions,
        )
    real = os.path.realpath(base_python)
    venv = os.path.join(work, "venv")
    subprocess.run([real, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(purelib, "_gpu_image.pth"), "w") as f:
        f.write(f"{work}/torch\n{work}/image\n")
    said = [
        f"fresh venv of {real} (no site-packages of its own)",
        f"torch: the base venv's torch {torch['torch'][0]} and what it requires "
        f"({len(torch)} distributions)",
        f"the image's packages: {len(image)} of its {len(IMAGE)} names from the base "
        f"venv; at the image's own versions: "
        + (", ".join(f"{n} {IMAGE_VERSIONS[n]}" for n in sorted(own_version)) or "none")
        + "; at the base venv's (no build of the image's for this Python): "
        + (
            ", ".join(f"{n} {image[n][0]}" for n in differ if n not in own_version)
            or "none"
        ),
    ]
    return python, said


def import_site(work: str, wheels: list[str]) -> tuple[str, list[str]]:
    """The carry installed for this Python: pure wheels as carried, compiled ones
    as their builds for this Python at the same versions."""
    site = os.path.join(work, "carry")
    here, swapped = [], []
    for wheel in wheels:
        pure = wheel.endswith("-none-any.whl")
        name, version = wheel_name(wheel)
        if pure or name == "sglang":  # SGLang's wheel: Python on every path run
            here.append(wheel)
        else:
            here.append(fetch(CACHE_HERE, name, version, []))
            swapped.append(f"{name} {version}")
    flags = [*INSTALL, site]
    # SGLang's wheel is tagged cp312: installed for 3.12 into its own folder.
    sglang = [w for w in here if wheel_name(w)[0] == "sglang"]
    rest = [w for w in here if w not in sglang]
    pip(sys.executable, *flags, *rest)
    pip(
        sys.executable,
        *INSTALL,
        os.path.join(work, "sglang"),
        *PLATFORM,
        *sglang,
    )
    return site, swapped


def python312() -> str | None:
    """A CPython 3.12 on this machine, if any (pyenv's, say)."""
    import glob

    found = [shutil.which("python3.12") or ""]
    found += sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))
    )
    for python in found:
        if (
            python
            and subprocess.run([python, "-c", ""], capture_output=True).returncode == 0
        ):
            return python
    return None


def compiled_on_312(sites: list[str], wheels: list[str]) -> bool | None:
    """The carry's compiled modules, as installed for the host (``sites[0]``; the
    rest: the pure-Python packages they need), imported by a CPython 3.12 (no
    torch needed); None where this machine has none."""
    python = python312()
    if python is None:
        log("cp312 builds: not imported here (no Python 3.12 on this machine)")
        return None
    modules = {"pyzmq": "zmq", "pydantic-core": "pydantic_core"}
    names = [modules.get(n, n.replace("-", "_")) for n, _ in map(wheel_name, wheels)]
    compiled = [
        m for w, m in zip(wheels, names, strict=True) if not w.endswith("-none-any.whl")
    ]
    compiled = [m for m in compiled if m != "sglang"] + ["pydantic"]
    done = subprocess.run(
        [
            python,
            "-I",
            "-c",
            f"import sys; sys.path[:0] = {sites!r}; "
            + "; ".join(f"import {m}" for m in compiled),
        ],
        capture_output=True,
        text=True,
    )
    version = subprocess.run(
        [python, "-V"], capture_output=True, text=True
    ).stdout.strip()
    if done.returncode:
        log(f"cp312 builds: FAILED to import on {version}: {done.stderr[-2000:]}")
        return False
    log(
        f"cp312 builds, as installed for the host, import on {version}: "
        + ", ".join(compiled)
    )
    return True


def check_command() -> int:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglang-pd-lean-carry-") as work:
        wheels = gather(os.path.join(work, "wheels"))
        log(f"resolved for CPython 3.12, manylinux x86_64: {len(wheels)} wheels")
        fits = sizes(wheels) <= LIMIT
        conflicts = agreement(wheels)
        for line in conflicts:
            log(f"conflict: {line}")
        log(
            "installs on the host's Python (3.12): pip install --no-index --no-deps "
            "--target"
        )
        pip(
            sys.executable,
            *INSTALL,
            os.path.join(work, "host-site"),
            *PLATFORM,
            *wheels,
        )
        python, said = image_env(work)
        on_312 = compiled_on_312(
            [os.path.join(work, d) for d in ("host-site", "torch", "image")], wheels
        )
        site, swapped = import_site(work, wheels)
        for line in said:
            log(f"import check: {line}")
        log(
            f"import check: the carry's pure-Python wheels as carried; its compiled "
            f"ones as this Python's builds of the same versions: {', '.join(swapped)}"
        )
        code = dry_run(python, [site, os.path.join(work, "sglang")])
    ok = fits and not conflicts and code == 0 and on_312 is not False
    log(
        f"--check {'passed' if ok else 'FAILED'} in {time.monotonic() - start:.0f} s "
        f"(fits: {fits}, conflicts: {len(conflicts)}, cp312 builds import: {on_312}, "
        f"gpu_lean_check --dry: exit {code})"
    )
    return 0 if ok else 1


def dry_run(python: str, sites: list[str]) -> int:
    """``gpu_lean_check.py --dry`` in the fresh environment, the carry first on the
    path (as ``--run`` puts it on the host), the xgrammar stand-in where needed."""
    path = [*sites, STAND_INS]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join(path)
    env.pop("VIRTUAL_ENV", None)
    log(f"{python} scripts/gpu_lean_check.py --dry")
    done = subprocess.run(
        [python, os.path.join(ROOT, "scripts", "gpu_lean_check.py"), "--dry"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = done.stdout.splitlines()
    print("\n".join(lines[-60:]))
    if done.returncode:
        print(done.stderr[-4000:])
    return done.returncode


# --- --run (the GPU host) ------------------------------------------------------------


def run_command() -> int:
    """Install the carry with pip's --no-index --no-deps --target, then the check."""
    start = time.monotonic()
    wheels = sorted(
        os.path.join(CARRY_DIR, f) for f in os.listdir(CARRY_DIR) if f.endswith(".whl")
    )
    log(f"installing {len(wheels)} carried wheels into {HOST_SITE}")
    shutil.rmtree(HOST_SITE, ignore_errors=True)
    pip(
        sys.executable,
        *INSTALL,
        HOST_SITE,
        *wheels,
    )
    env = dict(os.environ)
    path = [HOST_SITE]
    probe = subprocess.run(
        [sys.executable, "-c", "import xgrammar"], env=env, capture_output=True
    )
    if probe.returncode:
        path.append(STAND_INS)
        log("no xgrammar here: test/gpu_site stands in for it")
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")]).rstrip(":")
    env["PYTHONUNBUFFERED"] = "1"
    left = RUN_LIMIT_S - (time.monotonic() - start)
    log(f"installed in {time.monotonic() - start:.0f} s; the check has {left:.0f} s")
    command = [
        sys.executable,
        os.path.join(ROOT, "scripts", "gpu_lean_check.py"),
        "--budget-s",
        str(int(left - 60)),
    ]
    try:
        return subprocess.run(command, cwd=ROOT, env=env, timeout=left).returncode
    except subprocess.TimeoutExpired:
        log(f"stopped after {RUN_LIMIT_S} s in all")
        return 124


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--run", action="store_true")
    args = parser.parse_args()
    if args.check:
        return check_command()
    if args.run:
        return run_command()
    return fetch_command()


if __name__ == "__main__":
    sys.exit(main())
