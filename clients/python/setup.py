"""Builds leasehold-client with its gRPC stubs generated from the repository's proto/.

The stubs are generated at build time (never committed) into the wheel as the package
``leasehold.v1``, the proto package they mirror, so ``pip install ./clients/python`` and
``pip wheel ./clients/python`` from a checkout need nothing but PyPI.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTOS = ["leasehold/v1/lock.proto", "leasehold/v1/election.proto"]


class BuildWithStubs(build_py):
    """build_py, then protoc (from grpcio-tools) into the build directory."""

    def run(self):
        super().run()
        if not os.path.isdir(PROTO):
            raise RuntimeError(f"{PROTO} not found: build from a checkout of the repository")
        from grpc_tools import protoc

        out = self.build_lib
        args = ["grpc_tools.protoc", f"-I{PROTO}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *[os.path.join(PROTO, p) for p in PROTOS]]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(PROTOS))
        for package in ("leasehold", os.path.join("leasehold", "v1")):
            open(os.path.join(out, package, "__init__.py"), "a").close()


setup(cmdclass={"build_py": BuildWithStubs})
