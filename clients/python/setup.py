"""Builds the SDK with its gRPC stubs generated from the repository's proto/ at build time, so the package
always matches the API it was built with. Needs `protoc` and `grpc_python_plugin` (Debian: protobuf-compiler,
protobuf-compiler-grpc) when building from the repository; a source tree with corral/v1/*_pb2.py already
generated (an sdist) builds without them.
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.environ.get("CORRAL_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))


def generate(out_dir):
    protos = sorted(glob.glob(os.path.join(PROTO_ROOT, "corral", "v1", "*.proto")))
    if not protos:
        return False
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc is None or plugin is None:
        raise SystemExit("building the corral SDK from the repository needs protoc and grpc_python_plugin "
                         "(apt-get install protobuf-compiler protobuf-compiler-grpc)")
    os.makedirs(os.path.join(out_dir, "corral", "v1"), exist_ok=True)
    subprocess.check_call([protoc, f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--grpc_out={out_dir}",
                           f"--plugin=protoc-gen-grpc={plugin}"] + protos)
    return True


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
