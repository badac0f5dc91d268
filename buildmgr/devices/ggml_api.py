"""The ctypes adapter over ggml's device API: a build's own libraries say what each device is.

Run as a child process (`python -m buildmgr.devices.ggml_api LIB_DIR [BACKEND_DIR]`), so that a driver that
crashes or hangs takes down only the child; it prints one JSON line after MARKER on stdout.
The declarations below mirror `struct ggml_backend_dev_props` of the pinned ggml-backend.h;
`layout_mismatches` compares them with a header, so a layout change in a new llama.cpp fails loudly.
"""

from __future__ import annotations

import ctypes
import json
import re
import sys
from pathlib import Path

MARKER = "buildmgr-ggml-api:"
# enum ggml_backend_dev_type, in order.
DEVICE_TYPES = ("cpu", "gpu", "igpu", "accel", "meta")


class DevCaps(ctypes.Structure):
    _fields_ = [
        ("async", ctypes.c_bool),
        ("host_buffer", ctypes.c_bool),
        ("buffer_from_host_ptr", ctypes.c_bool),
        ("events", ctypes.c_bool),
        ("mmap_support", ctypes.c_bool),
    ]


class DevProps(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("memory_free", ctypes.c_size_t),
        ("memory_total", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("device_id", ctypes.c_char_p),
        ("caps", DevCaps),
    ]


# C spelling of each ctypes field type, to compare with the header.
_C_TYPES = {
    ctypes.c_bool: "bool",
    ctypes.c_char_p: "const char *",
    ctypes.c_size_t: "size_t",
    ctypes.c_int: "enum ggml_backend_dev_type",
    DevCaps: "struct ggml_backend_dev_caps",
}


def _header_struct(header: str, name: str) -> list[tuple[str, str]]:
    match = re.search(r"struct\s+" + name + r"\s*\{(.*?)\};", header, flags=re.DOTALL)
    if not match:
        return []
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", match.group(1), flags=re.DOTALL)
    fields = []
    for declaration in body.split(";"):
        words = " ".join(declaration.split())
        if words:
            field = re.fullmatch(r"(.+?)\s*\b(\w+)", words)
            if field:
                fields.append((field.group(2), field.group(1).strip()))
    return fields


def _header_enum(header: str, name: str) -> list[str]:
    match = re.search(r"enum\s+" + name + r"\s*\{(.*?)\};", header, flags=re.DOTALL)
    body = re.sub(r"//[^\n]*", "", match.group(1)) if match else ""
    return [item.split("=")[0].strip() for item in body.split(",") if item.strip()]


def layout_mismatches(header: str) -> list[str]:
    """Differences between the declarations above and a ggml-backend.h; empty when they agree."""
    problems = []
    for struct in (DevProps, DevCaps):
        c_name = "ggml_backend_dev_props" if struct is DevProps else "ggml_backend_dev_caps"
        ours = [(field[0], _C_TYPES[field[1]]) for field in struct._fields_]
        theirs = _header_struct(header, c_name)
        if ours != theirs:
            problems.append(f"struct {c_name}: header has {theirs}, buildmgr expects {ours}")
    enum = [
        item.removeprefix("GGML_BACKEND_DEVICE_TYPE_").lower() for item in _header_enum(header, "ggml_backend_dev_type")
    ]
    if tuple(enum) != DEVICE_TYPES:
        problems.append(f"enum ggml_backend_dev_type: header has {enum}, buildmgr expects {list(DEVICE_TYPES)}")
    return problems


def _text(value: bytes | None) -> str | None:
    return value.decode("utf-8", "replace") if value is not None else None


def read_devices(lib_dir: Path, backend_dir: Path | None = None) -> list[dict[str, object]]:
    """Every device ggml registers, in registry order (the order llama.cpp walks them)."""
    for name in ("libggml-base.so", "libggml.so"):
        ctypes.CDLL(str(lib_dir / name), mode=ctypes.RTLD_GLOBAL)
    ggml = ctypes.CDLL(str(lib_dir / "libggml.so"))
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_get_props.argtypes = [ctypes.c_void_p, ctypes.POINTER(DevProps)]
    ggml.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    if backend_dir is not None:  # a GGML_BACKEND_DL build: its backends are modules loaded at run time
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load_all_from_path(str(backend_dir).encode())
    devices = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        props = DevProps()
        ggml.ggml_backend_dev_get_props(device, ctypes.byref(props))
        devices.append(
            {
                "index": index,
                "name": _text(props.name),
                "backend": _text(ggml.ggml_backend_reg_name(ggml.ggml_backend_dev_backend_reg(device))),
                "description": _text(props.description),
                "memory_free": props.memory_free,
                "memory_total": props.memory_total,
                "type": DEVICE_TYPES[props.type] if 0 <= props.type < len(DEVICE_TYPES) else f"unknown({props.type})",
                "device_id": _text(props.device_id),
                "caps": {field[0]: bool(getattr(props.caps, field[0])) for field in DevCaps._fields_},
            }
        )
    return devices


def main(argv: list[str]) -> int:
    lib_dir = Path(argv[0])
    backend_dir = Path(argv[1]) if len(argv) > 1 else None
    devices = read_devices(lib_dir, backend_dir)
    sys.stdout.write(MARKER + json.dumps(devices) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
