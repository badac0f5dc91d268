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


def answer(stdout: str) -> str | None:
    """The JSON the child printed after MARKER, None where it printed none."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(MARKER)), None)
    return line[len(MARKER) :] if line is not None else None


def _text(value: bytes | None) -> str | None:
    return value.decode("utf-8", "replace") if value is not None else None


def read_devices(
    lib_dir: Path, backend_dir: Path | None = None, remote: tuple[str, str, list[str]] | None = None
) -> list[dict[str, object]]:
    """Every device ggml registers, in registry order (the order llama.cpp walks them); with `remote` (a registry's
    name, its function that adds a server, the servers), the servers' devices too, added as llama.cpp's tools add
    them for --rpc (each server's registry registered after the others)."""
    ggml = _loaded(lib_dir)
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
    if remote is not None:
        _add_servers(ggml, *remote)
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


class InitParams(ctypes.Structure):
    """struct ggml_init_params (ggml.h)."""

    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def measure_link(
    lib_dir: Path, registry: str, function: str, server: str, size: int, rounds: int, pings: int
) -> dict[str, object]:
    """A server's link as ggml's own client crosses it: `pings` round trips (each a device-memory query, which the
    server answers at once), then `rounds` of one tensor of `size` bytes written to a buffer on the server (a
    round trip after it, for a write is not answered) and read back. Every sample kept, in seconds."""
    import os
    import time

    ggml = _loaded(lib_dir)
    ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size_p = ctypes.POINTER(ctypes.c_size_t)
    ggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
    ggml.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buft_alloc_buffer.restype = ctypes.c_void_p
    ggml.ggml_backend_buft_alloc_buffer.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ggml.ggml_backend_buffer_get_base.restype = ctypes.c_void_p
    ggml.ggml_backend_buffer_get_base.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buffer_free.argtypes = [ctypes.c_void_p]
    ggml.ggml_init.restype = ctypes.c_void_p
    ggml.ggml_init.argtypes = [InitParams]
    ggml.ggml_free.argtypes = [ctypes.c_void_p]
    ggml.ggml_new_tensor_1d.restype = ctypes.c_void_p
    ggml.ggml_new_tensor_1d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    ggml.ggml_backend_tensor_alloc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    ggml.ggml_backend_tensor_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    ggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    [reg] = _add_servers(ggml, registry, function, [server])
    device = ggml.ggml_backend_reg_dev_get(reg, 0)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()

    def ping() -> float:
        start = time.perf_counter()
        ggml.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        return time.perf_counter() - start

    size -= size % 4  # a tensor of F32 (type 0, the one ggml will never renumber)
    # the buffer holds the client's connection, as a model's buffers do: without one, each query connects anew
    buffer = ggml.ggml_backend_buft_alloc_buffer(ggml.ggml_backend_dev_buffer_type(device), size)
    trips = [ping() for _ in range(pings)]
    context = ggml.ggml_init(InitParams(1 << 20, None, True))
    tensor = ggml.ggml_new_tensor_1d(context, 0, size // 4)
    ggml.ggml_backend_tensor_alloc(buffer, tensor, ggml.ggml_backend_buffer_get_base(buffer))
    data = ctypes.create_string_buffer(os.urandom(size), size)
    up, down = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        ggml.ggml_backend_tensor_set(tensor, data, 0, size)
        ping()  # answered only once the write before it is done: the server takes one command at a time
        up.append(time.perf_counter() - start)
        start = time.perf_counter()
        ggml.ggml_backend_tensor_get(tensor, data, 0, size)
        down.append(time.perf_counter() - start)
    ggml.ggml_backend_buffer_free(buffer)
    ggml.ggml_free(context)
    return {"server": server, "bytes": size, "round_trips_s": trips, "upload_s": up, "download_s": down}


def _loaded(lib_dir: Path) -> ctypes.CDLL:
    for name in ("libggml-base.so", "libggml.so"):
        ctypes.CDLL(str(lib_dir / name), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(str(lib_dir / "libggml.so"))


def _add_servers(ggml: ctypes.CDLL, registry: str, function: str, servers: list[str]) -> list[int]:
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    reg = ggml.ggml_backend_reg_by_name(registry.encode())
    if not reg:
        raise SystemExit(f"this build has no {registry} backend")
    address = ggml.ggml_backend_reg_get_proc_address(reg, function.encode())
    if not address:
        raise SystemExit(f"its {registry} backend has no {function}")
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    registries = []
    for server in servers:
        added = add(server.encode())
        if not added:
            raise SystemExit(f"{server} has no devices")
        ggml.ggml_backend_register(added)
        registries.append(added)
    return registries


def main(argv: list[str]) -> int:
    """LIB_DIR [BACKEND_DIR] [--remote REGISTRY FUNCTION SERVER,…], or LIB_DIR --link REGISTRY FUNCTION SERVER BYTES
    ROUNDS PINGS"""
    if "--link" in argv:
        registry, function, server, size, rounds, pings = argv[argv.index("--link") + 1 :]
        found = measure_link(Path(argv[0]), registry, function, server, int(size), int(rounds), int(pings))
        sys.stdout.write(MARKER + json.dumps(found) + "\n")
        sys.stdout.flush()
        return 0
    remote = None
    if "--remote" in argv:
        at = argv.index("--remote")
        registry, function, servers = argv[at + 1 : at + 4]
        remote, argv = (registry, function, servers.split(",")), argv[:at]
    lib_dir = Path(argv[0])
    backend_dir = Path(argv[1]) if len(argv) > 1 else None
    devices = read_devices(lib_dir, backend_dir, remote)
    sys.stdout.write(MARKER + json.dumps(devices) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
