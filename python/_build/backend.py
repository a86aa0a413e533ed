"""A PEP 517 build backend for the pure-Python inferx package, standard
library only: build_wheel zips inferx/*.py with the dist-info files the wheel
format requires (METADATA, WHEEL, RECORD); build_sdist tars the project.
"""
import base64
import io
import hashlib
import os
import tarfile
import zipfile

NAME, VERSION = "inferx", "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _sources():
    pkg = os.path.join(ROOT, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield os.path.join(pkg, name), f"{NAME}/{name}"


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: Python bindings of the inferx LLM inference engine (ctypes over libinferx.so)\n"
            "Requires-Python: >=3.9\n").encode()


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = f"{NAME}-{VERSION}.dist-info"
    wheel_name = f"{NAME}-{VERSION}-{TAG}.whl"
    files = [(arc, open(path, "rb").read()) for path, arc in _sources()]
    files.append((f"{dist}/METADATA", _metadata()))
    files.append((f"{dist}/WHEEL", f"Wheel-Version: 1.0\nGenerator: inferx-backend\nRoot-Is-Purelib: true\n"
                                   f"Tag: {TAG}\n".encode()))
    record = [_record_line(arc, data) for arc, data in files] + [f"{dist}/RECORD,,"]
    files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "_build/backend.py"] + [arc for _, arc in _sources()]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        meta = _metadata()
        info.size = len(meta)
        t.addfile(info, io.BytesIO(meta))
    return name
