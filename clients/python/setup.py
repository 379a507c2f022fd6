"""Builds leasehold-client with its gRPC stubs generated from the repository's proto/.

The stubs are generated at build time (never committed) into the wheel as the package
``leasehold.v1``, the proto package they mirror, so ``pip install ./clients/python`` and
``pip wheel ./clients/python`` from a checkout need nothing but PyPI.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# An sdist carries its own copy of the protos (BuildSdist); a checkout has the repository's.
BUNDLED = os.path.join(HERE, "proto")
PROTO = BUNDLED if os.path.isdir(BUNDLED) else os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTOS = ["leasehold/v1/lock.proto", "leasehold/v1/election.proto",
          "leasehold/v1/session.proto"]


class BuildWithStubs(build_py):
    """build_py, then protoc (from grpcio-tools) into the build directory."""

    def run(self):
        super().run()
        if not os.path.isdir(PROTO):
            raise RuntimeError(f"{PROTO} not found: build from a checkout of the repository, "
                               "with pip 21.3 or newer (older ones build in a copy of "
                               "clients/python, away from proto/)")
        from grpc_tools import protoc

        out = self.build_lib
        args = ["grpc_tools.protoc", f"-I{PROTO}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *[os.path.join(PROTO, p) for p in PROTOS]]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(PROTOS))
        for package in ("leasehold", os.path.join("leasehold", "v1")):
            open(os.path.join(out, package, "__init__.py"), "a").close()


class BuildSdist(sdist):
    """sdist with the protos copied in (proto/, beside setup.py): `python -m build` builds the
    wheel from the sdist, and a user's pip builds from it alone, away from the repository."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        for path in PROTOS:
            target = os.path.join(base_dir, "proto", path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(PROTO, path), target)


def requirements():
    """The package's dependencies. The generated stubs check their runtime when imported: they
    refuse a grpcio older than the grpcio-tools that generated them, and a protobuf older than
    its protoc. So the minimums are this build's versions, not fixed numbers that would let pip
    keep an older grpcio the stubs then refuse. grpcio-status and googleapis-common-protos read
    the server's error details (google.rpc.Status, ErrorInfo, RetryInfo); pip picks the
    grpcio-status that matches the grpcio."""
    from importlib.metadata import version

    return [f"grpcio>={version('grpcio-tools')}", f"protobuf>={version('protobuf')}",
            "grpcio-status>=1.60", "googleapis-common-protos>=1.56"]


setup(cmdclass={"build_py": BuildWithStubs, "sdist": BuildSdist}, install_requires=requirements())
