"""Generates the gRPC stubs from the repository's proto/ into turnstile_client/v1 while
the package builds, so no generated code is committed and the stubs always match the
protos of the checkout that was installed."""

import pathlib
import re

from setuptools import setup

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto"
FILES = ["common", "lock", "queue", "schedule", "semaphore"]


def generate() -> None:
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools

    out = HERE / "turnstile_client" / "v1"
    out.mkdir(exist_ok=True)
    includes = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO}",
        f"-I{includes}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
    ] + [str(PROTO / "turnstile" / "v1" / f"{name}.proto") for name in FILES]
    # protoc writes turnstile/v1/x_pb2.py under out; the modules move up into out, and
    # their absolute imports (`from turnstile.v1 import common_pb2`) become relative.
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on " + str(PROTO))
    nested = out / "turnstile" / "v1"
    for path in nested.iterdir():
        text = re.sub(r"^from turnstile\.v1 import", "from . import", path.read_text(), flags=re.M)
        (out / path.name).write_text(text)
    for path in sorted(out.joinpath("turnstile").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    out.joinpath("turnstile").rmdir()
    (out / "__init__.py").write_text('"""The generated stubs of proto/turnstile/v1 (the raw RPCs)."""\n')


# Every build step (egg_info lists the packages before build_py runs) needs the stubs,
# so they are made as soon as setup.py runs in a checkout that has the protos. A source
# distribution carries them already made.
if PROTO.is_dir():
    generate()

setup()
