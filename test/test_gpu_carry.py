"""The GPU check for hosts without SGLang (``scripts/gpu_wheels.sh``): its ``--check``
on the CPU, once per suite run, in the session of SGLang 0.5.17 (the release the
carry holds): the wheel list resolves for CPython 3.12 on manylinux x86_64, fits in
64 MiB with the working tree, installs with ``--no-index``, and
``gpu_lean_check.py --dry`` passes in a fresh environment of torch, the GPU image's
packages and the carry (about 1 min with the downloads cached under
``~/.cache/sglang-pd-lean/gpu-wheels``). Also the check's own arithmetic and the
xgrammar stand-in it carries, by hand."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest
from helpers import run_python

ROOT = pathlib.Path(__file__).resolve().parents[1]
STAND_INS = ROOT / "test" / "gpu_site"


def script(name: str):
    """``scripts/<name>.py`` as a module (the scripts are not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_carry_check_passes_for_the_release_it_carries():
    import sglang

    carry = script("gpu_carry")
    if sglang.__version__ != carry.CARRY["sglang"][0]:
        pytest.skip(f"runs in the SGLang {carry.CARRY['sglang'][0]} session")
    done = subprocess.run(
        ["bash", "scripts/gpu_wheels.sh", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-8000:]
    assert "--check passed" in said
    assert " 0 differ" in said  # the --dry table, every phase


def test_the_allocator_figure_rounds_each_storage_up_to_its_512_byte_block():
    check = script("gpu_lean_check")
    assert (
        check.rounded({1: 136, 2: 512, 3: 0, 4: 513, 5: 68}) == 512 + 512 + 1024 + 512
    )


def test_the_carry_holds_what_the_image_lacks_or_holds_at_another_version():
    carry = script("gpu_carry")
    for name, (version, why) in carry.CARRY.items():
        assert why
        if name in carry.IMAGE:
            assert carry.IMAGE_VERSIONS.get(name) not in (None, version), name


def fake_wheel(folder: pathlib.Path, name: str, version: str, *requires: str) -> str:
    """A wheel holding only its METADATA (name, version, requirements)."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", "".join(lines))
    return str(path)


def test_a_carried_requirement_the_image_does_not_meet_is_a_conflict(tmp_path):
    """transformers 5.12.1 needs tokenizers <= 0.23.0; the image holds 0.23.2, so
    the carry brings 0.22.2. An extra's requirement is not one."""
    carry = script("gpu_carry")
    transformers = fake_wheel(
        tmp_path,
        "transformers",
        "5.12.1",
        "tokenizers<=0.23.0,>=0.22.0",
        'pytest<1; extra == "testing"',
    )
    assert carry.agreement([transformers]) == [
        "transformers needs tokenizers<=0.23.0,>=0.22.0; the host has tokenizers 0.23.2"
    ]
    tokenizers = fake_wheel(tmp_path, "tokenizers", "0.22.2")
    assert carry.agreement([transformers, tokenizers]) == []


def test_the_xgrammar_stand_in_types_a_field_as_any_and_refuses_use():
    done = run_python(
        "import pydantic, xgrammar\n"
        "from xgrammar.structural_tag import TagFormat\n"
        "assert xgrammar.STAND_IN\n"
        "class M(pydantic.BaseModel):\n"
        "    tag: xgrammar.StructuralTag | None = None\n"
        "print(M(tag={'any': 1}).tag)\n"
        "for cls in (xgrammar.StructuralTag, TagFormat):\n"
        "    try:\n"
        "        cls()\n"
        "    except RuntimeError as exc:\n"
        "        print(exc)\n",
        env={"PYTHONPATH": str(STAND_INS)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "{'any': 1}",
        "xgrammar stand-in (test/gpu_site): StructuralTag is not available",
        "xgrammar stand-in (test/gpu_site): TagFormat is not available",
    ]
