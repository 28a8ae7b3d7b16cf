"""GPU runner: cubin/hsaco variants launched through the driver library, one worker per GPU.

The agent process (``GpuRunner``) never touches a GPU context: it hands jobs to one worker
process per device through ``remote_agent.supervisor`` and yields their results. A worker
(``python -m remote_agent.runners.gpu worker``) opens its device through ctypes (cuda.py on
libcuda.so.1, hip.py on libamdhip64.so), generates the shape's inputs on the device from the
bundle's seed with the bundle's fill kernel, computes the reference (torch where the node has it,
else the bundle's conservative reference kernel, itself checked against the host on a small
shape at start), and for each variant: poisons C with NaN, launches once, reduces the error
figures on the device, then times it with the selected profiler and checks the answer again.

A worker that crashes or hangs is replaced by the supervisor; the job in flight is recorded
``crash`` or ``timeout``. Errors that leave a CUDA context unusable make the worker report the
job and exit, so the next job gets a fresh process.

With several devices, each job runs once, on whichever worker is free; its row names that device.

The vendor library: where the manifest's ``library`` field asks for it (``harness build --library``),
the agent adds one job per shape, variant ``lib:torch.matmul``, and the worker times
``torch.matmul`` (cuBLAS / hipBLASLt) on the same device buffers with the same profiler and the
same checks as the kernel's variants (``library_plan``, ``Worker.run_library``).
"""

import array
import ctypes
import json
import math
import os
import struct
import sys
import time
import zlib

from .. import contract
from ..stats import summarize


class GpuError(Exception):
    """A driver call failed. ``sticky``: the context is lost; ``load``: the artifact is unusable."""

    def __init__(self, message, code=0, sticky=False, load=False):
        super().__init__(message)
        self.code = code
        self.sticky = sticky
        self.load = load


class GpuApi(object):
    """What cuda.CudaApi and hip.HipApi provide (see cuda.py for each call)."""

    backend = None
    visible_env = None


def api_for(backend):
    """The driver API of a backend. HARNESS_GPU_API=module:Class puts a stand-in in its place
    (the tests' CPU stand-in, tests/gpu_standin.py)."""
    standin = os.environ.get("HARNESS_GPU_API")
    if standin:
        import importlib

        module, cls = standin.split(":")
        return getattr(importlib.import_module(module), cls)()
    if backend == "cuda":
        from .cuda import CudaApi

        return CudaApi()
    if backend == "hip":
        from .hip import HipApi

        return HipApi()
    raise GpuError("no GPU runner for backend %r" % backend)


# ---- what an artifact holds (ELF headers, symbols, parameters), standard library only ---------
EM_CUDA = 190
EM_AMDGPU = 224
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAX_THREADS = 0x05
AMDGPU_MACH = {0x02C: "gfx900", 0x02F: "gfx908", 0x030: "gfx90a", 0x040: "gfx940", 0x041: "gfx941",
               0x04C: "gfx942", 0x04F: "gfx950", 0x036: "gfx1030", 0x041 + 0x100: "?"}


def elf_facts(data):
    """Machine, architecture, function symbols and (cubin: .nv.info; hsaco: metadata note) the
    kernel parameters of a cubin or hsaco image."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF image")
    (e_type, e_machine, _, _, _, e_shoff, e_flags, _, _, _, e_shentsize, e_shnum,
     e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, stype, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, off)
        sections.append({"name_off": name, "type": stype, "offset": offset, "size": size, "link": link,
                         "entsize": entsize})
    shstr = sections[e_shstrndx]
    for s in sections:
        s["name"] = _cstr(data, shstr["offset"] + s["name_off"])
    symbols = []
    for s in sections:
        if s["type"] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[s["link"]]
        for j in range(s["size"] // 24):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", data, s["offset"] + j * 24)
            symbols.append({"name": _cstr(data, strtab["offset"] + st_name), "type": st_info & 0xF,
                            "bind": st_info >> 4, "size": st_size})
    facts = {"machine": e_machine, "flags": e_flags, "functions": sorted({s["name"] for s in symbols
                                                                         if s["type"] == 2 and s["name"]}),
             "objects": sorted({s["name"] for s in symbols if s["type"] == 1 and s["name"]}), "kernels": {}}
    if e_machine == EM_CUDA:
        facts["format"] = "cubin"
        facts["arch"] = "sm_%d" % ((e_flags >> 8) & 0xFF) if (e_flags >> 8) & 0xFF else "sm_%d" % (e_flags & 0xFF)
        for s in sections:
            if s["name"].startswith(".nv.info."):
                facts["kernels"][s["name"][len(".nv.info."):]] = _nv_info(data[s["offset"]:s["offset"] + s["size"]])
    elif e_machine == EM_AMDGPU:
        facts["format"] = "hsaco"
        facts["arch"] = AMDGPU_MACH.get(e_flags & 0xFF, "mach 0x%x" % (e_flags & 0xFF))
        for s in sections:
            if s["type"] == 7:  # SHT_NOTE
                for meta in _notes(data[s["offset"]:s["offset"] + s["size"]]):
                    for k in meta.get("amdhsa.kernels", []):
                        facts["kernels"][k.get(".name")] = {
                            "params": [{"offset": a.get(".offset"), "size": a.get(".size"),
                                        "kind": a.get(".value_kind")} for a in k.get(".args", [])],
                            "group_segment_fixed_size": k.get(".group_segment_fixed_size"),
                            "kernarg_segment_size": k.get(".kernarg_segment_size"),
                            "wavefront_size": k.get(".wavefront_size"),
                            "vgpr_count": k.get(".vgpr_count"), "sgpr_count": k.get(".sgpr_count")}
                    if "amdhsa.target" in meta:
                        facts["target"] = meta["amdhsa.target"]
    else:
        facts["format"] = "elf"
    return facts


def _cstr(data, offset):
    end = data.index(b"\0", offset)
    return data[offset:end].decode(errors="replace")


def _nv_info(blob):
    """EIATTR records of a .nv.info.<kernel> section: parameter ordinals, offsets, sizes."""
    params, out, pos = [], {}, 0
    while pos + 2 <= len(blob):
        fmt, attr = blob[pos], blob[pos + 1]
        if fmt == 0x04:  # EIFMT_SVAL: u16 size, then data
            size = struct.unpack_from("<H", blob, pos + 2)[0]
            payload = blob[pos + 4:pos + 4 + size]
            pos += 4 + size
            if attr == EIATTR_KPARAM_INFO and size >= 12:
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", payload, 0)
                params.append({"ordinal": ordinal, "offset": offset, "size": (flags >> 18) & 0x3FFF})
            elif attr == EIATTR_MAX_THREADS and size >= 12:
                out["max_threads"] = list(struct.unpack_from("<III", payload, 0))
        elif fmt == 0x03:  # EIFMT_HVAL: u16 value
            value = struct.unpack_from("<H", blob, pos + 2)[0]
            if attr == EIATTR_CBANK_PARAM_SIZE:
                out["param_bytes"] = value
            pos += 4
        elif fmt in (0x01, 0x02):  # EIFMT_NVAL / EIFMT_BVAL
            pos += 4 if fmt == 0x01 else 4
        else:
            break
    out["params"] = sorted(params, key=lambda p: p["ordinal"])
    return out


def _notes(blob):
    pos, metas = 0, []
    while pos + 12 <= len(blob):
        namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
        name = blob[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        desc_off = pos + 12 + ((namesz + 3) & ~3)
        desc = blob[desc_off:desc_off + descsz]
        pos = desc_off + ((descsz + 3) & ~3)
        if name == b"AMDGPU" and ntype == 32:  # NT_AMDGPU_METADATA, MessagePack
            value, _ = _msgpack(desc, 0)
            if isinstance(value, dict):
                metas.append(value)
    return metas


def _msgpack(b, i):
    """The subset of MessagePack the AMDGPU code object metadata uses."""
    t = b[i]
    if t <= 0x7F:
        return t, i + 1
    if t >= 0xE0:
        return t - 0x100, i + 1
    if 0x80 <= t <= 0x8F:
        return _mp_map(b, i + 1, t & 0x0F)
    if 0x90 <= t <= 0x9F:
        return _mp_array(b, i + 1, t & 0x0F)
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n].decode(errors="replace"), i + 1 + n
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if t in simple:
        return simple[t], i + 1
    fixed = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
             0xCA: ">f", 0xCB: ">d"}
    if t in fixed:
        fmt = fixed[t]
        return struct.unpack_from(fmt, b, i + 1)[0], i + 1 + struct.calcsize(fmt)
    if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        fmt = {0xD9: "B", 0xDA: ">H", 0xDB: ">I", 0xC4: "B", 0xC5: ">H", 0xC6: ">I"}[t]
        n = struct.unpack_from(fmt, b, i + 1)[0]
        start = i + 1 + struct.calcsize(fmt)
        raw = b[start:start + n]
        return (raw.decode(errors="replace") if t >= 0xD9 else raw), start + n
    if t in (0xDC, 0xDD):
        fmt = ">H" if t == 0xDC else ">I"
        return _mp_array(b, i + 1 + struct.calcsize(fmt), struct.unpack_from(fmt, b, i + 1)[0])
    if t in (0xDE, 0xDF):
        fmt = ">H" if t == 0xDE else ">I"
        return _mp_map(b, i + 1 + struct.calcsize(fmt), struct.unpack_from(fmt, b, i + 1)[0])
    raise ValueError("msgpack type 0x%x not supported" % t)


def _mp_array(b, i, n):
    out = []
    for _ in range(n):
        v, i = _msgpack(b, i)
        out.append(v)
    return out, i


def _mp_map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = _msgpack(b, i)
        v, i = _msgpack(b, i)
        out[k] = v
    return out, i


# ---- helpers shared by the worker -----------------------------------------------------------------
ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
NAN_BITS = {"fp16": 0x7E00, "bf16": 0x7FC0, "fp32": 0x7FC00000}
CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
          "fp32": ctypes.c_float, "fp64": ctypes.c_double, "i1": ctypes.c_int8, "i8": ctypes.c_int8,
          "i16": ctypes.c_int16}


def cdiv(a, b):
    return -(-a // b)


def strides(M, N, K, layout):
    """Element strides of A (MxK), B (KxN), C (MxN) for a layout (same as harness.kernels.matmul)."""
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    return {"stride_am": 1 if a_t else K, "stride_ak": M if a_t else 1,
            "stride_bk": 1 if b_t else N, "stride_bn": K if b_t else 1, "stride_cm": N, "stride_cn": 1}


def data_seed(seed, shape, role):
    text = "%d:%d:%d:%d:%s:%s:%s" % (seed, shape["M"], shape["N"], shape["K"], shape["dtype"],
                                       shape["layout"], role)
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


class Params(object):
    """A kernel's argument values packed for cuLaunchKernel / hipModuleLaunchKernel."""

    def __init__(self, params, values):
        self.values = []
        for p in params:
            name, ty = p["name"], p["type"]
            v = values.get(name, 0 if p.get("hidden") else None)
            if v is None:
                raise GpuError("no value for kernel argument %s" % name, load=True)
            if ty.startswith("*"):
                self.values.append(ctypes.c_uint64(int(v or 0)))
            elif ty in CTYPES:
                self.values.append(CTYPES[ty](v))
            else:
                raise GpuError("argument %s has type %s, which the runner cannot pass" % (name, ty), load=True)
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values])


class Kernel(object):
    """A loaded function with its launch facts."""

    def __init__(self, api, image, launch, device_shared_max=None):
        self.api = api
        self.launch = launch
        self.module = api.load_module(image)
        self.fn = api.get_function(self.module, launch["entry"])
        if hasattr(api, "describe_function"):  # a CPU stand-in API interprets launches by their facts
            api.describe_function(self.fn, launch)
        self.shared = int(launch.get("shared", 0))
        self.block = launch.get("block") or [launch["threads"], 1, 1]
        if device_shared_max and self.shared > device_shared_max:
            raise GpuError("needs %d bytes of shared memory; the device allows %d per block"
                           % (self.shared, device_shared_max), load=True)
        if self.shared > 48 * 1024:
            api.set_dynamic_shared(self.fn, self.shared)
        self.facts = api.function_facts(self.fn)
        self.scratch = {}

    def params(self, values, grid):
        values = dict(values)
        programs = grid[0] * grid[1] * grid[2] * int(self.launch.get("num_ctas", 1))
        for name in ("global_scratch", "profile_scratch"):
            size = int(self.launch.get(name + "_size", 0) or 0)
            if size:
                need = size * programs
                have = self.scratch.get(name)
                if have is None or have[1] < need:
                    if have:
                        self.api.free(have[0])
                    self.scratch[name] = (self.api.alloc(need), need)
                values[name] = self.scratch[name][0]
        return Params(self.launch["params"], values)

    def run(self, grid, params, stream=None):
        self.api.launch(self.fn, grid, self.block, self.shared, params.array, stream)


class ShapeData(object):
    """Device buffers of one shape: inputs (rotated copies), C, the fp32 reference, workspace."""

    def __init__(self, api, shape, sets):
        self.api = api
        self.shape = shape
        M, N, K, dtype = shape["M"], shape["N"], shape["K"], shape["dtype"]
        e = ELEM_BYTES[dtype]
        self.a_bytes, self.b_bytes, self.c_bytes = M * K * e, K * N * e, M * N * e
        self.a, self.b = [], []
        self.buffers = []
        for _ in range(sets):
            self.a.append(self._alloc(self.a_bytes))
            self.b.append(self._alloc(self.b_bytes))
        self.c = self._alloc(self.c_bytes)
        self.ref = self._alloc(M * N * 4)
        self.ws = None
        self.locks = None
        self.locks_count = 0
        self.strides = strides(M, N, K, shape["layout"])

    def _alloc(self, nbytes):
        ptr = self.api.alloc(nbytes)
        self.buffers.append(ptr)
        return ptr

    def workspace(self, tiles):
        """Zeroed split-K workspace and tile counters (kept zero by the kernel itself)."""
        M, N = self.shape["M"], self.shape["N"]
        if self.ws is None:
            self.ws = self._alloc(M * N * 4)
        if self.locks_count < tiles:
            self.locks = self._alloc(tiles * 4)
            self.locks_count = tiles
        self.api.memset32(self.ws, 0, M * N)
        self.api.memset32(self.locks, 0, self.locks_count)
        return self.ws, self.locks

    def values(self, rotation=0):
        s = self.shape
        v = {"a_ptr": self.a[rotation % len(self.a)], "b_ptr": self.b[rotation % len(self.b)],
             "c_ptr": self.c, "M": s["M"], "N": s["N"], "K": s["K"]}
        v.update(self.strides)
        return v

    def release(self):
        for ptr in self.buffers:
            try:
                self.api.free(ptr)
            except GpuError:
                pass
        self.buffers = []


# ---- the worker (one per device) ------------------------------------------------------------------
class Worker(object):
    def __init__(self, bundle, manifest, device_index, options, api=None):
        self.bundle = bundle
        self.manifest = manifest
        self.options = options
        self.tolerances = manifest["tolerances"]
        self.api = api or api_for(manifest["target"]["backend"])
        self.api.init()
        self.api.open(device_index)
        self.device = self.api.facts()
        self.kernels = {}
        self.shapes = {}
        self.support = {}
        self.l2 = int(self.device.get("l2_bytes") or (64 << 20))
        self.flush_enabled = os.environ.get("HARNESS_GPU_FLUSH", "1") != "0"
        self.flush_bytes = max(256 << 20, 2 * self.l2)
        self.flush_buf = self.api.alloc(self.flush_bytes) if self.flush_enabled else None
        self.torch = None
        self._torch_error = None
        self.reference_mode = self._pick_reference(options.get("reference", "auto"))
        from ..profilers.events import gpu_profiler

        self.profiler = gpu_profiler(options.get("profiler") or "events", self.api, options)
        self.self_check = self._check_reference_kernel()

    # ---- support kernels ----
    def support_kernel(self, role, dtype):
        key = "%s_%s" % (role, dtype)
        if key not in self.support:
            facts = self.manifest["toolchain"].get("support", {}).get(key)
            if facts is None:
                raise GpuError("the bundle has no %s kernel for %s; rebuild it" % (role, dtype), load=True)
            self.support[key] = Kernel(self.api, self._read(facts["artifact"]), facts["launch"],
                                       self.device.get("shared_max"))
        return self.support[key]

    def _read(self, rel):
        with open(os.path.join(self.bundle, rel), "rb") as f:
            return f.read()

    def fill(self, ptr, n, dtype, seed):
        k = self.support_kernel("fill", dtype)
        block = int(self.manifest["toolchain"].get("support_block", 1024))
        grid = (cdiv(n, block), 1, 1)
        k.run(grid, k.params({"out_ptr": ptr, "n": n, "seed": seed}, grid))

    def errors(self, c_ptr, ref_ptr, n, dtype, rtol, atol):
        """(rel_err, max_abs_err, err_ratio) of c against ref, reduced on the device."""
        k = self.support_kernel("error", dtype)
        block = int(self.manifest["toolchain"].get("support_block", 1024))
        programs = cdiv(n, block)
        out = self.api.alloc(programs * 16)
        try:
            grid = (programs, 1, 1)
            k.run(grid, k.params({"c_ptr": c_ptr, "ref_ptr": ref_ptr, "out_ptr": out, "n": n,
                                  "rtol": rtol, "atol": atol}, grid))
            self.api.synchronize()
            raw = array.array("f")
            raw.frombytes(self.api.dtoh(out, programs * 16))
        finally:
            self.api.free(out)
        d2 = math.fsum(raw[0::4])
        r2 = math.fsum(raw[1::4])
        maxabs = max(raw[2::4]) if programs else 0.0
        bad = math.fsum(raw[3::4])
        if r2 > 0:
            rel = math.sqrt(d2 / r2) if d2 == d2 else float("nan")
        else:
            rel = 0.0 if d2 == 0 else float("inf")
        return rel, maxabs, bad / n

    def reference_kernel_run(self, data, out_ptr):
        s = data.shape
        k = self.support_kernel("reference", s["dtype"])
        cfg = self.manifest["toolchain"]["support"]["reference_%s" % s["dtype"]]["config"]
        grid = (cdiv(s["M"], cfg["BLOCK_M"]) * cdiv(s["N"], cfg["BLOCK_N"]), 1, 1)
        values = data.values(0)
        values.update(c_ptr=out_ptr, ws_ptr=0, lock_ptr=0)
        k.run(grid, k.params(values, grid))

    # ---- reference ----
    def _pick_reference(self, mode):
        mode = mode or "auto"
        if mode in ("auto", "torch") and self.manifest["target"]["backend"] in ("cuda", "hip"):
            try:
                import torch  # noqa: F401

                if torch.cuda.is_available():
                    torch.cuda.init()
                    self.torch = torch
                    return "torch"
            except Exception as exc:
                if mode == "torch":
                    raise GpuError("--reference torch, but torch is not usable here: %s" % exc)
        return "kernel"

    def _torch_view(self, ptr, rows, cols, dtype):
        torch = self.torch
        typestr = {"fp16": "<f2", "bf16": "<i2", "fp32": "<f4"}[dtype]

        class _CAI(object):
            __cuda_array_interface__ = {"shape": (rows, cols), "typestr": typestr, "data": (ptr, False),
                                        "version": 2, "strides": None}

        t = torch.as_tensor(_CAI(), device="cuda")
        return t.view(torch.bfloat16) if dtype == "bf16" else t

    def _torch_operands(self, data, rotation=0):
        """A (MxK) and B (KxN) of the shape as torch views of the device buffers, in its layout
        (a T operand is the transpose of a row-major view: no copy)."""
        s = data.shape
        M, N, K, dtype = s["M"], s["N"], s["K"], s["dtype"]
        a_ptr, b_ptr = data.a[rotation % len(data.a)], data.b[rotation % len(data.b)]
        a = self._torch_view(a_ptr, K if s["layout"][0] == "T" else M, M if s["layout"][0] == "T" else K, dtype)
        b = self._torch_view(b_ptr, N if s["layout"][1] == "T" else K, K if s["layout"][1] == "T" else N, dtype)
        return (a.t() if s["layout"][0] == "T" else a), (b.t() if s["layout"][1] == "T" else b)

    def torch_reference(self, data):
        torch = self.torch
        s = data.shape
        M, N = s["M"], s["N"]
        a, b = self._torch_operands(data)
        allow = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            ref = torch.matmul(a.float(), b.float())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow
        self._torch_view(data.ref, M, N, "fp32").copy_(ref)
        torch.cuda.synchronize()

    def _check_reference_kernel(self):
        """The reference kernel against the host (numpy or plain Python, fp64) on small odd shapes,
        one per dtype and layout in the bundle; a failure stops the run."""
        seen, report = set(), {}
        for s in self.manifest["shapes"]:
            key = (s["dtype"], s["layout"])
            if key in seen:
                continue
            seen.add(key)
            small = {"M": 67, "N": 45, "K": 83, "dtype": s["dtype"], "layout": s["layout"], "id": "selfcheck"}
            data = ShapeData(self.api, small, 1)
            try:
                self.fill(data.a[0], 67 * 83, s["dtype"], 11)
                self.fill(data.b[0], 83 * 45, s["dtype"], 12)
                self.reference_kernel_run(data, data.ref)
                self.api.synchronize()
                a = _decode(self.api.dtoh(data.a[0], data.a_bytes), s["dtype"])
                b = _decode(self.api.dtoh(data.b[0], data.b_bytes), s["dtype"])
                got = _decode(self.api.dtoh(data.ref, 67 * 45 * 4), "fp32")
            finally:
                data.release()
            want = _host_matmul(a, b, 67, 45, 83, s["layout"])
            d2 = sum((g - w) ** 2 for g, w in zip(got, want))
            r2 = sum(w * w for w in want)
            rel = math.sqrt(d2 / r2) if r2 else float("inf")
            report["%s_%s" % key] = rel
            if not rel <= 1e-5:
                exc = GpuError("the reference kernel disagrees with the host on a 67x45x83 %s %s product "
                               "(relative error %.3g); no answer can be checked" % (key[0], key[1], rel))
                exc.fatal = True
                raise exc
        return report

    # ---- shapes and variants ----
    def data_for(self, shape):
        data = self.shapes.get(shape["id"])
        if data is not None:
            return data
        for old in list(self.shapes):  # keep one shape's buffers at a time
            self.shapes.pop(old).release()
        M, N, K, dtype = shape["M"], shape["N"], shape["K"], shape["dtype"]
        inputs = (M * K + K * N) * ELEM_BYTES[dtype]
        sets = 1
        if inputs <= self.l2 and not self.flush_enabled:  # with the flush, every launch reads DRAM anyway
            sets = int(min(8, max(2, cdiv(3 * self.l2, max(1, inputs)))))
        data = ShapeData(self.api, shape, sets)
        seed = int(self.manifest.get("seed", 0))
        self.fill(data.a[0], M * K, dtype, data_seed(seed, shape, "a"))
        self.fill(data.b[0], K * N, dtype, data_seed(seed, shape, "b"))
        for i in range(1, sets):
            self.api.dtod(data.a[i], data.a[0], data.a_bytes)
            self.api.dtod(data.b[i], data.b[0], data.b_bytes)
        data.crosscheck = None
        if self.reference_mode == "torch":
            self.api.synchronize()  # torch works on its own stream: the inputs must be there
            self.torch_reference(data)
            # the conservative kernel agrees with the vendor library on this very shape?
            tmp = self.api.alloc(M * N * 4)
            try:
                self.reference_kernel_run(data, tmp)
                self.api.synchronize()
                data.crosscheck = self.errors(tmp, data.ref, M * N, "fp32", 0.0, 0.0)[0]
            finally:
                self.api.free(tmp)
        else:
            self.reference_kernel_run(data, data.ref)
        self.api.synchronize()
        self.shapes[shape["id"]] = data
        return data

    def kernel_for(self, variant):
        k = self.kernels.get(variant["id"])
        if k is None:
            image = self._read(variant["artifact"])
            k = Kernel(self.api, image, variant["launch"], self.device.get("shared_max"))
            self.kernels[variant["id"]] = k
        return k

    def run_job(self, variant, shape, grid):
        """One (variant, shape): a results dict (status, times, errors, counters, message)."""
        if (variant.get("launch") or {}).get("library"):
            return self.run_library(variant, shape)
        try:
            kernel = self.kernel_for(variant)
        except GpuError as exc:
            if exc.sticky:
                raise
            return {"status": contract.LOAD_ERROR, "message": str(exc)}
        except OSError as exc:
            return {"status": contract.LOAD_ERROR, "message": "cannot read artifact: %s" % exc}
        data = self.data_for(shape)
        values = data.values(0)
        problem = _specialization_problem(kernel.launch, values)
        if problem:
            return {"status": contract.LOAD_ERROR, "message": problem}
        cfg = variant.get("config", {})
        grid = tuple(int(g) for g in grid)
        if cfg.get("SPLIT_K", 1) > 1:
            ws, locks = data.workspace(grid[0])
        else:
            ws, locks = 0, 0
        param_sets = []
        for r in range(len(data.a)):
            v = data.values(r)
            v.update(ws_ptr=ws, lock_ptr=locks)
            param_sets.append(kernel.params(v, grid))
        counters = {"ctr:" + k: v for k, v in kernel.facts.items()}

        def launch(i, stream=None):
            kernel.run(grid, param_sets[i % len(param_sets)], stream)

        return self._check_and_time(data, shape, launch, counters, kernel, variant, grid)

    def _check_and_time(self, data, shape, launch, counters, kernel, variant, grid):
        """Poison C, launch once and check; time with the profiler; poison, launch and check again.
        ``launch(i)`` runs the product once on input copy ``i`` (a variant's kernel, or the library)."""
        dtype = shape["dtype"]
        n = shape["M"] * shape["N"]
        rtol, atol = self.tolerances["rtol"][dtype], self.tolerances["atol"][dtype]
        tol = self.tolerances["rel_err"][dtype]

        def check():
            return self.errors(data.c, data.ref, n, dtype, rtol, atol)

        self._poison(data)
        launch(0)
        self.api.synchronize()
        rel, maxabs, ratio = check()
        result = dict(counters, rel_err=rel, max_abs_err=maxabs, err_ratio=ratio)
        if not rel <= tol:
            result.update(status=contract.WRONG_ANSWER,
                          message="relative error %.3g over tolerance %.3g (%.3g%% of elements outside)"
                          % (rel, tol, 100 * ratio))
            return result

        measured = self.profiler.measure(self, launch, kernel, variant, shape, grid)
        result.update(summarize(measured["times_ns"]))
        for k, v in measured.get("counters", {}).items():
            result["ctr:" + k] = v
        # the last timed launch's C must still be right (split-K races, stale workspace)
        self._poison(data)
        launch(0)
        self.api.synchronize()
        rel2, maxabs2, ratio2 = check()
        if not rel2 <= tol:
            result.update(status=contract.WRONG_ANSWER, rel_err=rel2, max_abs_err=maxabs2, err_ratio=ratio2,
                          message="right once, wrong after timing: relative error %.3g (a race?)" % rel2)
            return result
        result["status"] = contract.OK
        notes = []
        if len(data.a) > 1:
            notes.append("inputs rotated over %d copies" % len(data.a))
        if data.crosscheck is not None:
            notes.append("ref torch (kernel ref rel %.1e)" % data.crosscheck)
        result["message"] = "; ".join(notes)
        return result

    # ---- the vendor library (lib:<name> rows) ----
    def run_library(self, variant, shape):
        """Time the library on the shape's device buffers exactly as a variant is timed (same
        inputs, reference, checks, profiler). Without a usable torch: ``load_error`` saying so."""
        try:
            launcher = self.library_launcher(variant["launch"]["library"])
        except GpuError as exc:
            if exc.sticky:
                raise
            return {"status": contract.LOAD_ERROR, "message": "%s: %s" % (variant["id"], exc)}
        data = self.data_for(shape)
        launch, context, note = launcher(data)
        with context:
            result = self._check_and_time(data, shape, launch, {}, None, variant, None)
        result["message"] = "; ".join(m for m in (note, result.get("message")) if m)
        return result

    def library_launcher(self, name):
        """``launcher(data) -> (launch(i), context to time it in, note for the row's message)``.
        A stand-in API may stand in for the library too (tests/gpu_standin.py)."""
        own = getattr(self.api, "library_launcher", None)
        if own is not None:
            return own(name)
        if name != TORCH_MATMUL:
            raise GpuError("this agent times %s only, not %r" % (TORCH_MATMUL, name), load=True)
        self._library_torch()
        return self._torch_matmul_launcher

    def _library_torch(self):
        if self.torch is not None:
            return self.torch
        if self._torch_error is None:
            try:
                import torch

                if not torch.cuda.is_available():
                    raise RuntimeError("torch %s sees no GPU" % torch.__version__)
                torch.cuda.init()
                self.torch = torch
                return torch
            except Exception as exc:  # ImportError, or a torch built without this GPU's runtime
                self._torch_error = "%s: %s" % (type(exc).__name__, exc)
        raise GpuError("torch is not usable on this node (%s); no library time" % self._torch_error, load=True)

    def _torch_matmul_launcher(self, data):
        """torch.matmul(A, B, out=C) on the worker's own stream (so the events and the L2 flush
        bracket it as they bracket a variant), on the same buffers and layouts, torch's defaults."""
        torch = self.torch
        s = data.shape
        operands = [self._torch_operands(data, r) for r in range(len(data.a))]
        c = self._torch_view(data.c, s["M"], s["N"], s["dtype"])
        stream = torch.cuda.ExternalStream(self.api.stream)

        def launch(i, stream_=None):
            a, b = operands[i % len(operands)]
            torch.matmul(a, b, out=c)

        runtime = ("hip %s" % torch.version.hip) if getattr(torch.version, "hip", None) else \
            ("cuda %s" % torch.version.cuda)
        return launch, torch.cuda.stream(stream), "torch %s (%s)" % (torch.__version__, runtime)

    def _poison(self, data):
        dtype = data.shape["dtype"]
        n = data.shape["M"] * data.shape["N"]
        if ELEM_BYTES[dtype] == 2:
            self.api.memset16(data.c, NAN_BITS[dtype], n)
        else:
            self.api.memset32(data.c, NAN_BITS[dtype], n)

    def flush(self):
        self.api.memset32(self.flush_buf, 0, self.flush_bytes // 4)


def _specialization_problem(launch, values):
    """An artifact specialized for a class (a stride of 1, divisibility by 16) must not be run on a
    shape outside it: that would be a silent wrong answer, or a fault."""
    for name, value in (launch.get("constexprs") or {}).items():
        if name in values and values[name] != value:
            return "artifact is specialized for %s=%s, the shape has %s" % (name, value, values[name])
    for name in launch.get("divisible", []):
        if name in values and not name.endswith("_ptr") and values[name] % 16:
            return "artifact assumes %s divisible by 16, the shape has %s" % (name, values[name])
    return None


def _decode(raw, dtype):
    if dtype == "fp32":
        return list(array.array("f", raw))
    if dtype == "fp16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    halves = array.array("H", raw)
    words = array.array("I", [h << 16 for h in halves])
    return list(array.array("f", words.tobytes()))


def _host_matmul(a, b, M, N, K, layout):
    """fp64 product of stored A and B (numpy when present, plain Python otherwise)."""
    try:
        import numpy as np

        A = np.array(a, dtype=np.float64).reshape((K, M) if layout[0] == "T" else (M, K))
        B = np.array(b, dtype=np.float64).reshape((N, K) if layout[1] == "T" else (K, N))
        A = A.T if layout[0] == "T" else A
        B = B.T if layout[1] == "T" else B
        return list((A @ B).ravel())
    except ImportError:
        pass
    A = [[a[k * M + m] if layout[0] == "T" else a[m * K + k] for k in range(K)] for m in range(M)]
    Bt = [[b[n * K + k] if layout[1] == "T" else b[k * N + n] for k in range(K)] for n in range(N)]
    return [math.fsum(x * y for x, y in zip(A[m], Bt[n])) for m in range(M) for n in range(N)]


def serve(handler, infile=None, outfile=None):
    """The worker side of the supervisor protocol: one JSON request per line in, one JSON reply per
    line out. ``handler(request) -> reply dict``; raising ``SystemExit`` after replying ends it."""
    from ..supervisor import protocol_streams

    infile, outfile = protocol_streams(infile, outfile)
    for line in infile:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        reply, leave = handler(request)
        reply["id"] = request.get("id")
        if leave:
            reply["exiting"] = True  # the supervisor sends this worker nothing more
        outfile.write(json.dumps(reply) + "\n")
        outfile.flush()
        if leave:
            sys.stderr.flush()
            os._exit(3)


def worker_main(argv, api=None):
    import argparse

    from ..supervisor import protocol_streams, send

    parser = argparse.ArgumentParser(prog="remote_agent.runners.gpu worker")
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    infile, outfile = protocol_streams()
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    options = json.loads(args.options)
    from ..profilers.events import gpu_profiler_class

    if getattr(gpu_profiler_class(options.get("profiler") or "events"), "wraps_process", False):
        return _wrapped_worker(args.bundle, manifest, options, infile, outfile)
    try:
        worker = Worker(args.bundle, manifest, args.device_index, options, api=api)
    except GpuError as exc:
        if getattr(exc, "fatal", False):  # e.g. the reference is wrong: no result can be trusted
            send(outfile, {"fatal": str(exc)})
        else:  # the supervisor retries, then gives the device up
            print("worker: cannot start: %s" % exc, file=sys.stderr)
        return 2
    send(outfile, {"ready": True, "device": worker.device, "reference": worker.reference_mode,
                   "self_check": worker.self_check, "profiler": worker.profiler.name})

    def handle(request):
        start = time.monotonic()
        try:
            result = worker.run_job(request["variant"], request["shape"], request["grid"])
            return {"result": result, "seconds": time.monotonic() - start}, False
        except GpuError as exc:
            status = contract.CRASH if exc.sticky or not exc.load else contract.LOAD_ERROR
            return {"result": {"status": status, "message": str(exc)[:300]}}, exc.sticky

    serve(handle, infile, outfile)
    return 0


def _wrapped_worker(bundle, manifest, options, infile, outfile):
    """A worker for ncu / rocprof: each job runs in a child process under the profiler; this
    process never opens the device itself."""
    import shutil
    import subprocess
    import tempfile

    from ..profilers.events import gpu_profiler
    from ..supervisor import send

    profiler = gpu_profiler(options["profiler"], None, options)
    tool = profiler.command(["true"], "/tmp")[0]
    if not shutil.which(tool):
        send(outfile, {"fatal": "profiler %s needs %s, which is not on PATH here" % (profiler.name, tool)})
        return 2
    send(outfile, {"ready": True, "device": {}, "reference": "kernel", "profiler": profiler.name})
    child_options = dict(options, profile_launches=profiler.launches(),
                         reference=os.environ.get("HARNESS_GPU_REFERENCE", "kernel"))

    def handle(request):
        library = (request["variant"].get("launch") or {}).get("library")
        if library:  # its kernels are the library's, not an entry this profiler can pick out
            return {"result": {"status": contract.LOAD_ERROR, "message": "%s is timed by the events profiler "
                               "only, this run uses %s" % (request["variant"]["id"], profiler.name)}}, False
        workdir = tempfile.mkdtemp(prefix="harness-prof-")
        try:
            req_path = os.path.join(workdir, "request.json")
            with open(req_path, "w") as f:
                json.dump(request, f)
            child = [sys.executable, "-m", "remote_agent.runners.gpu", "one", "--bundle", bundle,
                     "--request", req_path, "--options", json.dumps(child_options)]
            proc = subprocess.run(profiler.command(child, workdir), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True)
            result = None
            for line in proc.stdout.splitlines():
                if line.startswith(RESULT_PREFIX):
                    result = json.loads(line[len(RESULT_PREFIX):])
            if result is None:
                tail = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()][-3:]
                return {"result": {"status": contract.CRASH, "message": ("%s exited %s: %s" % (
                    profiler.name, proc.returncode, " | ".join(tail)))[:300]}}, False
            if result.get("status") == contract.OK:
                times, counters = profiler.collect(workdir, request["variant"]["launch"]["entry"],
                                                   profiler.launches())
                if not times:
                    result.update(status=contract.CRASH, message="%s recorded no launch of %s" % (
                        profiler.name, request["variant"]["launch"]["entry"]))
                result.update(summarize(times))
                for k, v in counters.items():
                    result["ctr:" + k] = v
            if os.environ.get("HARNESS_KEEP_PROFILES"):
                keep = os.path.join(os.environ["HARNESS_KEEP_PROFILES"], request["variant"]["id"] + "-" +
                                    request["shape"]["id"])
                shutil.copytree(workdir, keep, dirs_exist_ok=True)
            return {"result": result}, False
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    serve(handle, infile, outfile)
    return 0


def one_main(argv):
    """Run one job in this process and print its result (the child that ncu or rocprof wraps)."""
    import argparse

    parser = argparse.ArgumentParser(prog="remote_agent.runners.gpu one")
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--request", required=True, help="JSON file with variant, shape, grid")
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    with open(args.request) as f:
        request = json.load(f)
    options = json.loads(args.options)
    options["profiler"] = "bracket"
    try:
        worker = Worker(args.bundle, manifest, 0, options)
        result = worker.run_job(request["variant"], request["shape"], request["grid"])
    except GpuError as exc:
        result = {"status": contract.CRASH if exc.sticky or not exc.load else contract.LOAD_ERROR,
                  "message": str(exc)[:300]}
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


RESULT_PREFIX = "HARNESS_RESULT "


# ---- the agent side -------------------------------------------------------------------------------
TORCH_MATMUL = "torch.matmul"
LIBRARY_PREFIX = "lib:"


def library_plan(manifest, selected=None):
    """The library jobs a bundle asks for: ``(variants, jobs)``, one variant ``lib:<name>`` per
    library of the manifest's ``library`` field (``{name: [shape ids]}``, or a list of names for
    every shape; absent in older bundles: none) and one job per shape. With ``--select`` (a fleet
    host's share), a shape's library job goes with the shape's first job, so that exactly one
    host measures it, beside the shape's variants (a shape with no job: with job 0)."""
    wanted = manifest.get("library") or {}
    shape_ids = [s["id"] for s in manifest["shapes"]]
    if isinstance(wanted, (list, tuple)):
        wanted = dict((name, shape_ids) for name in wanted)
    first = {}
    for i, job in enumerate(manifest["jobs"]):
        first.setdefault(job["shape"], i)
    variants, jobs = [], []
    for name, ids in wanted.items():
        vid, ids = LIBRARY_PREFIX + name, set(ids or ())
        variants.append({"id": vid, "config": {}, "dtype": None, "specialization": [], "status": contract.OK,
                         "artifact": None, "sha256": None, "message": "", "launch": {"library": name},
                         "compile_seconds": 0.0})
        for sid in (i for i in shape_ids if i in ids):
            if selected is None or first.get(sid, 0) in selected:
                jobs.append({"variant": vid, "shape": sid, "grid": None})
    return variants, jobs


class GpuRunner(object):
    """Spreads a bundle's jobs over one worker process per device (see the module docstring)."""

    def __init__(self, bundle, manifest, options, log, devices, worker_command=None, worker_env=None):
        from ..profilers.events import gpu_profiler_class

        self.bundle = os.path.abspath(bundle)
        self.manifest = manifest
        self.options = options
        self.log = log
        self._devices = devices  # [(name, physical index)]
        name = _opt(options, "profiler", None) or manifest["target"].get("profiler") or "events"
        self.profiler = gpu_profiler_class(name)
        self.counter_names = list(self.profiler.counter_names)
        self.worker_command = worker_command or self._worker_command
        self.worker_env = worker_env or self._worker_env
        self.worker_facts = {}

    def devices(self):
        return [name for name, _ in self._devices]

    def library_plan(self, selected=None):
        return library_plan(self.manifest, selected)

    def worker_options(self):
        return {"profiler": self.profiler.name, "warmup": _opt(self.options, "warmup", 2),
                "iters": _opt(self.options, "iters", 10), "min_time_ms": _opt(self.options, "min_time_ms", 100.0),
                "timeout": _opt(self.options, "timeout", 60.0),
                "reference": os.environ.get("HARNESS_GPU_REFERENCE", "auto")}

    def _worker_command(self, device_name):
        return [sys.executable, "-m", "remote_agent.runners.gpu", "worker", "--bundle", self.bundle,
                "--device-index", "0", "--options", json.dumps(self.worker_options())]

    def _worker_env(self, device_name):
        index = dict(self._devices)[device_name]
        env = dict(os.environ)
        backend = self.manifest["target"]["backend"]
        env["CUDA_VISIBLE_DEVICES" if backend == "cuda" else "HIP_VISIBLE_DEVICES"] = str(index)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def run_all(self, todo, variants, shapes, broken, options):
        from ..supervisor import Supervisor

        groups = {}
        for job, device in todo:
            groups.setdefault((job["variant"], job["shape"]), []).append((job, device))
        devices = self.devices()
        requests = []
        for (vid, sid), pairs in groups.items():
            variant = variants[vid]
            if variant.get("status") != contract.OK:
                continue  # the agent recorded its compile status already
            if len(pairs) < len(devices):
                continue  # ran on another device in an earlier (resumed) run
            job = pairs[0][0]
            if vid in broken:
                yield job, pairs[0][1], {"status": contract.LOAD_ERROR, "message": broken[vid]}
                continue
            requests.append((job, {"variant": _slim_variant(variant), "shape": shapes[sid], "grid": job["grid"]}))
        # one shape after another, so each worker generates a shape's data once
        requests.sort(key=lambda r: (r[1]["shape"]["id"], r[1]["variant"]["id"]))
        sup = Supervisor(devices, self.worker_command, self.worker_env, job_timeout=_opt(options, "timeout", 60.0),
                         log=self.log)
        from ..agent import AgentError
        from ..supervisor import SupervisorError

        try:
            for job, device, result in sup.run(requests):
                yield job, device, result
        except SupervisorError as exc:
            raise AgentError(str(exc))
        finally:
            self.worker_facts = sup.ready_facts


def _slim_variant(v):
    return {"id": v["id"], "artifact": v["artifact"], "sha256": v.get("sha256"), "launch": v["launch"],
            "config": v["config"]}


def _opt(options, name, default):
    if isinstance(options, dict):
        return options.get(name, default)
    value = getattr(options, name, None)
    return default if value is None else value


def make_gpu_runner(bundle, manifest, options, log):
    """Find the devices (the agent itself opens no context) and build the runner."""
    from ..agent import AgentError

    backend = manifest["target"]["backend"]
    try:
        api = api_for(backend)
        api.init()
        count = api.device_count()
        names = [api.device_name(i) for i in range(count)]
    except GpuError as exc:
        raise AgentError("%s target, but %s" % (backend, exc))
    if count == 0:
        raise AgentError("no %s device here" % backend)
    visible_env = "CUDA_VISIBLE_DEVICES" if backend == "cuda" else "HIP_VISIBLE_DEVICES"
    visible = os.environ.get(visible_env)
    physical = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)]
    physical = physical[:count]
    chosen = list(range(count))
    wanted = _opt(options, "devices", None)
    if wanted:
        try:
            chosen = [int(x) for x in str(wanted).split(",") if x.strip()]
        except ValueError:
            raise AgentError("--devices takes GPU indices such as 0,1; got %r" % wanted)
        bad = [i for i in chosen if i < 0 or i >= count]
        if bad:
            raise AgentError("--devices %s: this node has %d %s device(s)" % (wanted, count, backend))
    arch = manifest["target"].get("gpu_arch")
    devices = [("%s:%d" % (backend, i), physical[i]) for i in chosen]
    for i in chosen:
        log("device %s:%d is %s" % (backend, i, names[i]))
        if backend == "cuda" and arch:
            major, minor = api.attribute(75, i), api.attribute(76, i)
            if "%d%d" % (major, minor) != str(arch):
                log("warning: the bundle is built for sm%s, device %d is sm%d%d" % (arch, i, major, minor))
    return GpuRunner(bundle, manifest, options, log, devices)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("worker", "one"):
        print("usage: python -m remote_agent.runners.gpu {worker|one} ...", file=sys.stderr)
        return 2
    if argv[0] == "worker":
        return worker_main(argv[1:])
    return one_main(argv[1:])


if __name__ == "__main__":
    # run the copy of this module that cuda.py and hip.py import, so that there is one GpuError
    # class (as __main__, this file would define a second one that no handler here would catch)
    from remote_agent.runners import gpu as _canonical

    sys.exit(_canonical.main())
