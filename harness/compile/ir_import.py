"""Import Triton-CPU IR dumps made on another machine, and make their LLVM IR portable.

Users' layout (one directory per block configuration)::

    <kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/
        blk_constants.json        the block constants (BLOCK_SIZE_M, ... GROUP_SIZE_M)
        <fn>.llir                 LLVM IR of the kernel function <fn> (Triton-CPU's ``asm["llir"]``)
        <fn>.ttcir, <fn>.tttcir   Triton-CPU MLIR dumps (optional; kept, and read for facts)
        <fn>_launcher.cpp         Triton-CPU's launcher (optional; kept, and read for arg indices)

The kernel function takes the Triton kernel's run-time arguments (pointers as ``ptr``,
integers at their width, fp16/bf16/fp32 scalars as ``float``), then six ``i32``: program ids
x, y, z and grid x, y, z. Arguments that Triton specialized away (integers equal to 1 become
constants; constexprs such as a baked-in M) are not parameters: a variant built from this IR
serves only shapes with those values, and only shapes that keep the divisibility by 16 the IR
was compiled for. ``blk_constants.json`` may carry these optional keys, which harness reads:

    "dtype": "fp32"                       element type of the matrices (else from .ttcir, else fp32)
    "signature": {"a_ptr": "*fp32", ...}  run-time arguments in order with Triton types
    "args": ["a", "b", ...]               or just their names, in order
    "shape": [M, N, K]                    the shape the IR was generated for (or "M", "N", "K")

IR from an LLVM newer than the cross compiler's (14 here) is rewritten line by line where a
construct only adds optimization facts (``trunc nuw nsw`` -> ``trunc``, ``captures(none)`` ->
``nocapture``, ...); anything else LLVM 14 cannot read is an error naming the construct and
file:line. Debug info is dropped (newer DI metadata does not parse in LLVM 14), and so are the
host's ``target triple``, ``datalayout``, ``target-cpu`` and ``target-features``: the IR is
retargeted to the board.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import HarnessError

GRID_PARAMS = ("pid_x", "pid_y", "pid_z", "grid_x", "grid_y", "grid_z")
KEY_ALIASES = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K",
               "GROUP_SIZE_M": "GROUP_M", "SPLIT_SIZE_K": "SPLIT_K"}
HARNESS_KEYS = ("dtype", "signature", "args", "shape", "layout", "M", "N", "K")
DTYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp16": "fp16"}
TYPED_PTR_DTYPES = {"float": "fp32", "half": "fp16", "bfloat": "bf16"}
INT_CTYPES = {"i1": "int32_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t"}
UNSIGNED = {"u1": "uint32_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t"}
# Triton scalar type -> the IR type Triton-CPU's kernel takes for it
TRITON_IR_TYPES = {"fp16": ("float",), "bf16": ("float",), "fp32": ("float",), "f32": ("float",),
                   "fp64": ("double",), "i1": ("i1", "i32"), "u1": ("i1", "i32"), "i8": ("i8",), "u8": ("i8",),
                   "i16": ("i16",), "u16": ("i16",), "i32": ("i32",), "u32": ("i32",), "i64": ("i64",),
                   "u64": ("i64",)}


# ---------------------------------------------------------------------------------------------
# Portability: newer-LLVM constructs -> what LLVM 14 reads, or a clear error
# ---------------------------------------------------------------------------------------------
_A = r"(?<![%@\w.$\"-])"  # an attribute keyword, not part of a name or a string


@dataclass(frozen=True)
class Rewrite:
    construct: str  # how the message names it
    since: str  # the LLVM that introduced it
    pattern: "re.Pattern"
    repl: object  # str or callable


REWRITES = [
    Rewrite("trunc nuw/nsw", "LLVM 19", re.compile(r"\btrunc ((?:nuw |nsw )+)"), "trunc "),
    Rewrite("getelementptr nuw/nusw", "LLVM 19", re.compile(r"\bgetelementptr (inbounds )?((?:nuw |nusw )+)"),
            lambda m: "getelementptr " + (m.group(1) or "")),
    Rewrite("icmp samesign", "LLVM 20", re.compile(r"\bicmp samesign "), "icmp "),
    Rewrite("zext nneg", "LLVM 18", re.compile(r"\bzext nneg "), "zext "),
    Rewrite("uitofp nneg", "LLVM 19", re.compile(r"\buitofp nneg "), "uitofp "),
    Rewrite("or disjoint", "LLVM 18", re.compile(r"\bor disjoint "), "or "),
    Rewrite("captures(none)", "LLVM 21", re.compile(_A + r"captures\(none\)"), "nocapture"),
    Rewrite("captures(...)", "LLVM 21", re.compile(_A + r"captures\([^)]*\) ?"), ""),
    Rewrite("memory(...)", "LLVM 16", re.compile(_A + r"memory\([^)]*\) ?"), ""),
    Rewrite("nofpclass(...)", "LLVM 17", re.compile(_A + r"nofpclass\([^)]*\) ?"), ""),
    Rewrite("range(...)", "LLVM 19", re.compile(_A + r"range\(i\d+ [^)]*\) ?"), ""),
    Rewrite("initializes(...)", "LLVM 19", re.compile(_A + r"initializes\((?:\([^)]*\)(?:, )?)+\) ?"), ""),
    Rewrite("dead_on_unwind", "LLVM 18", re.compile(_A + r"dead_on_unwind\b ?"), ""),
    Rewrite("dead_on_return", "LLVM 21", re.compile(_A + r"dead_on_return\b ?"), ""),
    Rewrite("writable", "LLVM 18", re.compile(_A + r"writable\b ?"), ""),
    Rewrite("nocallback", "LLVM 15", re.compile(_A + r"nocallback\b ?"), ""),
    Rewrite("allockind/allocptr", "LLVM 15", re.compile(_A + r"(?:allockind\(\"[^\"]*\"\)|allocptr\b) ?"), ""),
    Rewrite("uwtable(sync)", "LLVM 15", re.compile(_A + r"uwtable\((?:sync|async)\)"), "uwtable"),
    Rewrite("llvm.vector.insert/extract/reverse/splice", "LLVM 16",
            re.compile(r"@llvm\.vector\.(insert|extract|reverse|splice)\b"),
            lambda m: "@llvm.experimental.vector." + m.group(1)),
    Rewrite("llvm.stepvector", "LLVM 20", re.compile(r"@llvm\.stepvector\b"), "@llvm.experimental.stepvector"),
]

# constructs LLVM 14 has no equivalent for: rejected with their name
REJECTS = [
    (re.compile(r"@llvm\.(scmp|ucmp)\."), "llvm.scmp/ucmp intrinsics", "LLVM 19"),
    (re.compile(r"@llvm\.(ldexp|frexp)\."), "llvm.ldexp/frexp intrinsics", "LLVM 16"),
    (re.compile(r"@llvm\.exp10\."), "llvm.exp10 intrinsic", "LLVM 18"),
    (re.compile(r"@llvm\.(tan|asin|acos|atan|atan2|sinh|cosh|tanh|sincos)\."), "llvm trigonometric intrinsics",
     "LLVM 19"),
    (re.compile(r"@llvm\.(minimumnum|maximumnum)\."), "llvm.minimumnum/maximumnum intrinsics", "LLVM 20"),
    (re.compile(r"@llvm\.is\.fpclass\."), "llvm.is.fpclass intrinsic", "LLVM 16"),
    (re.compile(r"@llvm\.(experimental\.)?vector\.(interleave|deinterleave)\d"), "vector (de)interleave intrinsics",
     "LLVM 16"),
    (re.compile(r"@llvm\.vector\.reduce\.f(maximum|minimum)\."), "llvm.vector.reduce.fmaximum/fminimum", "LLVM 17"),
    (re.compile(r"<vscale x [^>]*> splat \("), "splat of a scalable vector", "LLVM 19"),
]
# the IR was made for the host's vector unit: these cannot run elsewhere
ARCH_INTRINSICS = {"x86_64": re.compile(r"@llvm\.x86\.|\bx86_(?:amx|mmx|fp80)\b"),
                   "aarch64": re.compile(r"@llvm\.aarch64\."),
                   "riscv64": re.compile(r"@llvm\.riscv\.")}

_SPLAT = re.compile(r"\bsplat \(([^()\s]+) ([^()]+|\w+ \([^()]*\))\)")
_VEC = re.compile(r"<(\d+) x ([^<>]+?)>")
_DBG_ATTACH = re.compile(r",? !dbg !\d+")
_DI_DEF = re.compile(r"^(\s*!\d+\s*=\s*)(?:distinct\s+)?!(?:DI|GenericDINode)")
_DBG_RECORD = re.compile(r"^\s*#dbg_\w+\(")
_DBG_CALL = re.compile(r"^\s*(?:tail\s+)?call void @llvm\.dbg\.(?:value|declare|label|assign|addr)\(")
_RETARGET = [
    (re.compile(r"^\s*target (?:triple|datalayout)\s*="), None),
    (re.compile(r" ?\"(?:target-cpu|target-features|tune-cpu|probe-stack|stack-probe-size)\"=\"[^\"]*\""), ""),
]


@dataclass
class PortableIR:
    text: str
    rewrites: dict  # construct -> count
    opaque_pointers: bool


def make_portable(text: str, path: str, arch: str) -> PortableIR:
    """Rewrite newer-LLVM constructs, drop debug info and the host's target; line numbers are
    kept (a dropped line becomes an empty one) so errors point into the original file."""
    lines = text.split("\n")
    counts: dict = {}
    arch_re = [(a, r) for a, r in ARCH_INTRINSICS.items() if a != arch]
    out = []
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if stripped.startswith(";"):
            out.append(line)
            continue
        for pattern, construct, since in REJECTS:
            if pattern.search(line):
                raise HarnessError("%s (%s) has no LLVM 14 equivalent; harness cross-compiles with LLVM 14: "
                                   "regenerate the IR without it" % (construct, since),
                                   where="%s:%d" % (path, number))
        for host, pattern in arch_re:
            m = pattern.search(line)
            if m:
                raise HarnessError("%s uses %s, made for a %s host's vector unit; it cannot run on %s: "
                                   "generate the IR without host-specific lowering (for Triton-CPU on x86, "
                                   "TRITON_CPU_VECTOR_XSMM=0 and no AMX/AVX-512 dot lowering)"
                                   % (path.rsplit("/", 1)[-1], m.group(0).strip(), host, arch),
                                   where="%s:%d" % (path, number))
        if _DBG_RECORD.match(line) or _DBG_CALL.match(line) or stripped.startswith("!llvm.dbg.cu"):
            _count(counts, "debug info (dropped)")
            out.append("")
            continue
        m = _DI_DEF.match(line)
        if m:
            _count(counts, "debug info (dropped)")
            out.append(m.group(1) + '!{!"harness: debug info dropped"}')
            continue
        if _RETARGET[0][0].match(line):
            _count(counts, "host target triple/datalayout (retargeted)")
            out.append("")
            continue
        new = _RETARGET[1][0].sub("", line)
        if new != line:
            _count(counts, "host target-cpu/target-features (retargeted)")
        if "!dbg" in new:
            new = _DBG_ATTACH.sub("", new)
        for rw in REWRITES:
            new, n = rw.pattern.subn(rw.repl, new)
            if n:
                _count(counts, "%s (%s)" % (rw.construct, rw.since), n)
        if "splat (" in new:
            new = _expand_splats(new, path, number, counts)
        out.append(new)
    portable = "\n".join(out)
    return PortableIR(portable, counts, bool(re.search(r"(?<![%@\w.])ptr\b", portable)))


def _count(counts: dict, key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def _expand_splats(line: str, path: str, number: int, counts: dict) -> str:
    """``<8 x float> ... splat (float 1.0)`` -> ``<float 1.0, ...>`` (LLVM 19's constant syntax);
    the width comes from the nearest vector type of that element type before it on the line."""
    pos, out = 0, []
    for m in _SPLAT.finditer(line):
        elem, value = m.group(1), m.group(2).strip()
        widths = [v for v in _VEC.finditer(line, 0, m.start()) if v.group(2).strip() == elem]
        if not widths:
            raise HarnessError("cannot tell the width of `%s`; LLVM 14 has no splat constants"
                               % m.group(0), where="%s:%d" % (path, number))
        n = int(widths[-1].group(1))
        out.append(line[pos:m.start()])
        out.append("<" + ", ".join(["%s %s" % (elem, value)] * n) + ">")
        pos = m.end()
        _count(counts, "splat constants (LLVM 19)")
    out.append(line[pos:])
    return "".join(out)


def llvm_tool(name: str) -> str:
    for candidate in ("%s-14" % name, name):
        if shutil.which(candidate):
            return candidate
    raise HarnessError("%s not found; install the Debian package llvm (LLVM 14 tools: llc, llvm-as, "
                       "llvm-objdump)" % name)


_AS_ERROR = re.compile(r":(\d+):(\d+): error: (.*)")


def verify(portable: PortableIR, path: str) -> None:
    """Parse the rewritten IR with LLVM 14's llvm-as; an error names the construct and file:line."""
    cmd = [llvm_tool("llvm-as")] + (["-opaque-pointers"] if portable.opaque_pointers else []) + ["-o", "/dev/null", "-"]
    proc = subprocess.run(cmd, input=portable.text, capture_output=True, text=True)
    if proc.returncode == 0:
        return
    m = _AS_ERROR.search(proc.stderr)
    if not m:
        raise HarnessError("LLVM 14 cannot read it: %s" % _first_line(proc.stderr), where=path)
    number, col, message = int(m.group(1)), int(m.group(2)), m.group(3).strip()
    lines = portable.text.split("\n")
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    rest = line[max(col - 1, 0):]
    token = re.match(r"[\w.$@%!#\"-]+(?:\([^)]*\))?", rest)
    construct = token.group(0) if token else (rest.strip()[:60] or "..." + line.strip()[-50:])
    raise HarnessError("LLVM 14 cannot read `%s` (%s); the IR is from a newer LLVM or damaged: regenerate it, "
                       "or with an LLVM no newer than 14" % (construct, message), where="%s:%d" % (path, number))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "no message"


# ---------------------------------------------------------------------------------------------
# The kernel function's signature
# ---------------------------------------------------------------------------------------------
@dataclass
class IrParam:
    name: str
    ir_type: str  # ptr, i32, float, ...
    ctype: str  # what the launcher passes
    triton_type: Optional[str] = None
    divisible: bool = False  # tt.divisibility = 16 in the .ttcir

    @property
    def is_pointer(self) -> bool:
        return self.ctype == "void*"


_DEFINE = re.compile(r"^define\b[^@]*@(\"[^\"]+\"|[\w.$-]+)\s*\(")
_TYPE = re.compile(r"^(ptr(?:\s+addrspace\(\d+\))?|i\d+\**|half\**|bfloat\**|float\**|double\**|"
                   r"%[\w.$\"-]+\**|<[^>]+>\**|\{[^}]*\}\**|\[[^\]]*\]\**)")


def defined_functions(text: str) -> dict:
    """name -> (line number, parameter text) of every function the module defines."""
    found = {}
    for number, line in enumerate(text.split("\n"), 1):
        m = _DEFINE.match(line)
        if m:
            name = m.group(1).strip('"')
            found[name] = (number, _balanced(line, m.end() - 1), line.split("(", 1)[0])
    return found


def _balanced(line: str, start: int) -> str:
    depth = 0
    for i in range(start, len(line)):
        c = line[i]
        if c in "(<{[":
            depth += 1
        elif c in ")>}]":
            depth -= 1
            if depth == 0:
                return line[start + 1:i]
    return line[start + 1:]


def split_params(text: str) -> list:
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "(<{[":
            depth += 1
        elif c in ")>}]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def param_types(param_text: str) -> list:
    types = []
    for part in split_params(param_text):
        m = _TYPE.match(part)
        types.append(re.sub(r"\s+", " ", m.group(1)) if m else part.split()[0])
    return types


def ctype_for(ir_type: str, triton_type: Optional[str], where: str, index: int) -> str:
    """Triton-CPU's launcher ABI: pointers as void*, integers at their width, fp16/bf16/fp32 as float."""
    if ir_type.startswith("ptr") or ir_type.endswith("*"):
        if triton_type and not triton_type.startswith("*"):
            raise HarnessError("parameter %d is a pointer in the IR but %s in the signature" % (index, triton_type),
                               where=where)
        return "void*"
    if triton_type:
        allowed = TRITON_IR_TYPES.get(triton_type)
        if allowed is None:
            raise HarnessError("parameter %d has Triton type %r, which harness cannot pass" % (index, triton_type),
                               where=where)
        if ir_type not in allowed:
            raise HarnessError("parameter %d is %s in the signature but %s in the IR (Triton-CPU takes %s as %s)"
                               % (index, triton_type, ir_type, triton_type, " or ".join(allowed)), where=where)
        if triton_type in UNSIGNED:
            return UNSIGNED[triton_type]
    if ir_type in INT_CTYPES:
        return INT_CTYPES[ir_type]
    if ir_type == "float":
        return "float"
    if ir_type == "double":
        return "double"
    if ir_type in ("half", "bfloat"):
        raise HarnessError("parameter %d is a %s scalar; Triton-CPU passes fp16/bf16 scalars as float, so this "
                           "kernel was not made by Triton-CPU (or by a version harness does not know)"
                           % (index, ir_type), where=where)
    raise HarnessError("parameter %d has type %s, which a launcher cannot pass" % (index, ir_type), where=where)


# ---------------------------------------------------------------------------------------------
# One imported directory
# ---------------------------------------------------------------------------------------------
@dataclass
class IrKernel:
    dir: Path
    name: str  # the directory's name
    function: str  # the kernel function in the IR
    llir: Path
    config: dict  # normalized block constants (BLOCK_M, ...)
    constants: dict  # blk_constants.json as read
    dtype: str
    dtype_source: str
    params: list  # IrParam, the run-time arguments before the six grid ones
    fixed: dict  # argument -> value it was specialized to (not a parameter)
    divisibility_from: str  # "ttcir", "shape", or "unknown"
    recorded_shape: Optional[tuple]
    portable: PortableIR
    functions: list = field(default_factory=list)  # every function the IR defines
    files: list = field(default_factory=list)

    def serves(self, shape, values: dict) -> Optional[str]:
        """None when this IR computes the shape; else why not (a pruning reason)."""
        if shape.dtype != self.dtype:
            return "IR %s is for %s (%s); the shape is %s" % (self.name, self.dtype, self.dtype_source, shape.dtype)
        for name, want in self.fixed.items():
            if name in values and values[name] != want:
                return "IR %s was specialized for %s = %s; the shape has %s" % (self.name, name, want, values[name])
        if self.divisibility_from == "ttcir":
            for p in self.params:
                if p.divisible and p.name in values and values[p.name] % 16:
                    return "IR %s assumes %s divisible by 16 (tt.divisibility); the shape has %s" % (
                        self.name, p.name, values[p.name])
        elif self.divisibility_from == "shape":
            rec = dict(zip(("M", "N", "K"), self.recorded_shape))
            for name, v in rec.items():
                if name in values and v % 16 == 0 and values[name] % 16:
                    return ("IR %s was generated for %s = %d, divisible by 16, which Triton may assume; the "
                            "shape has %s" % (self.name, name, v, values[name]))
        return None

    def source_hash_parts(self) -> list:
        return [self.portable.text, json.dumps(self.fixed, sort_keys=True), self.function]


def find_ir_dirs(root, kernel_name: str) -> list:
    """The IR directories under --from-ir DIR: DIR itself, DIR/*/, DIR/<kernel>/*/ or DIR/*/*/."""
    root = Path(root)
    if not root.is_dir():
        raise HarnessError("--from-ir %s is not a directory" % root)
    if (root / "blk_constants.json").is_file():
        return [root]
    for base in (root, root / kernel_name):
        dirs = sorted(p.parent for p in base.glob("*/blk_constants.json"))
        if dirs:
            return dirs
    dirs = sorted(p.parent for p in root.glob("*/*/blk_constants.json"))
    if dirs:
        return dirs
    raise HarnessError("no IR directories under %s: expected <kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/ with "
                       "blk_constants.json and <kernel>.llir (Triton-CPU's dumps)" % root)


_DIRNAME = re.compile(r"^(?P<kernel>.+?)_(?P<m>\d+)_(?P<n>\d+)_(?P<k>\d+)_(?P<g>\d+)$")


def load_ir_dir(path, arch: str, full_args=(), aliases=None, unit_args=(), verify_ir: bool = True) -> IrKernel:
    """Read one IR directory: config, signature, specialization, and the IR made portable.

    ``full_args``: the harness's names for the kernel's run-time arguments, in the Triton
    kernel's order; ``aliases``: other names for them (a_ptr -> a); ``unit_args``: those that
    Triton specializes to 1 in the harness's default layout (used when nothing else names the
    IR's parameters)."""
    path = Path(path)
    aliases = aliases or {}
    blk_file = path / "blk_constants.json"
    try:
        constants = json.loads(blk_file.read_text())
    except FileNotFoundError:
        raise HarnessError("no blk_constants.json", where=str(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise HarnessError("not valid JSON (%s)" % exc, where=str(blk_file))
    if not isinstance(constants, dict):
        raise HarnessError("expected a JSON object of block constants", where=str(blk_file))
    llirs = sorted(path.glob("*.llir")) or sorted(path.glob("*.ll"))
    if len(llirs) != 1:
        raise HarnessError("expected one <kernel>.llir, found %s" % (", ".join(p.name for p in llirs) or "none"),
                           where=str(path))
    llir = llirs[0]
    try:
        text = llir.read_text()
    except UnicodeDecodeError:
        raise HarnessError("not a text LLVM IR file (bitcode is not read; dump it with llvm-dis)", where=str(llir))
    functions = defined_functions(text)
    if not functions:
        raise HarnessError("no function is defined here: not LLVM IR, or an empty dump", where=str(llir))
    fn = llir.stem if llir.stem in functions else None
    if fn is None:
        public = [n for n, (_, _, head) in functions.items() if not re.search(r"\b(internal|private)\b", head)]
        if len(public) != 1:
            raise HarnessError("cannot tell the kernel function: %s defines %s and none is named %s"
                               % (llir.name, ", ".join(sorted(functions)), llir.stem), where=str(llir))
        fn = public[0]
    line_no, param_text, _ = functions[fn]
    where = "%s:%d" % (llir, line_no)
    types = param_types(param_text)
    if len(types) < 6 or any(t != "i32" for t in types[-6:]):
        raise HarnessError("@%s does not end with six i32 parameters (program ids x, y, z and grid x, y, z: the "
                           "Triton-CPU calling convention); it takes (%s)" % (fn, ", ".join(types)), where=where)
    run_types = types[:-6]

    signature = constants.get("signature")
    ttcir = _read_ttcir(path, fn)
    names, triton_types = _param_names(constants, signature, run_types, path, full_args, unit_args, where)
    params = []
    for i, (name, ir_type) in enumerate(zip(names, run_types)):
        ttype = triton_types[i] if triton_types else None
        params.append(IrParam(aliases.get(name, name), ir_type, ctype_for(ir_type, ttype, where, i), ttype))
    divisibility_from = "unknown"
    if ttcir is not None and len(ttcir) == len(params):
        for p, (ttype, div) in zip(params, ttcir):
            p.divisible = div
        divisibility_from = "ttcir"

    recorded = _recorded_shape(constants, blk_file)
    if divisibility_from == "unknown" and recorded:
        divisibility_from = "shape"
    present = {p.name for p in params}
    fixed = {}
    for name in full_args:
        if name not in present:
            if name in ("M", "N", "K") and recorded:
                fixed[name] = recorded[("M", "N", "K").index(name)]
            elif name in constants and isinstance(constants[name], int):
                fixed[name] = constants[name]
            else:
                fixed[name] = 1  # Triton's equal-to-1 specialization

    dtype, dtype_source = _dtype(constants, signature, ttcir_text=_ttcir_text(path, fn), typed_ir=text,
                                 params=param_text)
    config = _config(constants, path, fn, blk_file)
    portable = make_portable(text, str(llir), arch)
    if verify_ir:
        verify(portable, str(llir))
    files = sorted(p for p in path.iterdir() if p.is_file())
    return IrKernel(dir=path, name=path.name, function=fn, llir=llir, config=config, constants=constants,
                    dtype=dtype, dtype_source=dtype_source, params=params, fixed=fixed,
                    divisibility_from=divisibility_from, recorded_shape=recorded, portable=portable,
                    functions=sorted(functions), files=files)


def _param_names(constants, signature, run_types, path, full_args, unit_args, where):
    n = len(run_types)
    if signature is not None:
        if not isinstance(signature, dict):
            raise HarnessError("\"signature\" must map argument names to Triton types", where=str(path / "blk_constants.json"))
        items = [(k, v) for k, v in signature.items() if v != "constexpr"]
        if len(items) != n:
            raise HarnessError("\"signature\" names %d run-time arguments but @kernel takes %d before the grid"
                               % (len(items), n), where=where)
        return [k for k, _ in items], [v for _, v in items]
    if "args" in constants:
        args = constants["args"]
        if not isinstance(args, list) or len(args) != n:
            raise HarnessError("\"args\" must list the %d run-time argument names" % n,
                               where=str(path / "blk_constants.json"))
        return [str(a) for a in args], None
    indices = _launcher_indices(path)
    if indices and len(indices) == n and full_args and max(indices) < len(full_args):
        return [full_args[i] for i in indices], None
    if full_args and n == len(full_args):
        return list(full_args), None
    if full_args and n == len(full_args) - len(unit_args):
        return [a for a in full_args if a not in unit_args], None
    raise HarnessError("cannot tell which arguments the kernel's %d parameters before the grid are (harness "
                       "knows %s); name them in blk_constants.json: \"args\": [...]"
                       % (n, ", ".join(full_args) or "none"), where=where)


_LAUNCHER_ARG = re.compile(r"\b(?:void\s*\*|u?int(?:8|16|32|64)_t|float|double)\s+arg(\d+)\b")


def _launcher_indices(path: Path) -> list:
    """Triton-CPU's launcher names arguments by their index in the Python signature
    (``void* arg0, ..., int32_t arg6, int32_t arg8``): the gaps are what was specialized."""
    for launcher in sorted(path.glob("*launcher*.cpp")) + sorted(path.glob("*launcher*.c")):
        try:
            text = launcher.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for line in text.splitlines():
            if "kernel_ptr" in line and "arg" in line:
                found = [int(i) for i in _LAUNCHER_ARG.findall(line)]
                if found:
                    return found
    return []


def _ttcir_text(path: Path, fn: str) -> Optional[str]:
    for suffix in (".ttcir", ".tttcir"):
        candidates = [path / (fn + suffix)] + sorted(path.glob("*" + suffix))
        for c in candidates:
            if c.is_file():
                try:
                    return c.read_text()
                except (UnicodeDecodeError, OSError):
                    return None
    return None


_TT_FUNC = re.compile(r"tt\.func\s+(?:public\s+|private\s+)?@([\w.$-]+)\s*\(")
_TT_ARG = re.compile(r"%arg\d+\s*:\s*([^\s{,)]+(?:<[^>]*>)?)\s*(\{[^}]*\})?")


def _read_ttcir(path: Path, fn: str) -> Optional[list]:
    """[(type, divisible by 16)] of the tt.func's arguments, from the .ttcir dump when present."""
    text = _ttcir_text(path, fn)
    if not text:
        return None
    for m in _TT_FUNC.finditer(text):
        if m.group(1) != fn:
            continue
        args = _balanced(text, m.end() - 1)
        return [(a.group(1), bool(a.group(2) and re.search(r"tt\.divisibility\s*=\s*16\b", a.group(2))))
                for a in _TT_ARG.finditer(args)]
    return None


def _recorded_shape(constants: dict, blk_file: Path) -> Optional[tuple]:
    shape = constants.get("shape")
    if shape is None and all(k in constants for k in ("M", "N", "K")):
        shape = [constants["M"], constants["N"], constants["K"]]
    if shape is None:
        return None
    if isinstance(shape, dict):
        shape = [shape.get("M"), shape.get("N"), shape.get("K")]
    if not isinstance(shape, list) or len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape):
        raise HarnessError("\"shape\" must be [M, N, K] (positive integers)", where=str(blk_file))
    return tuple(shape)


def _dtype(constants, signature, ttcir_text, typed_ir, params):
    if "dtype" in constants:
        d = DTYPES.get(str(constants["dtype"]))
        if d:
            return d, "blk_constants.json"
    if isinstance(signature, dict):
        for t in signature.values():
            if isinstance(t, str) and t.startswith("*") and DTYPES.get(t[1:]):
                return DTYPES[t[1:]], "signature"
    if ttcir_text:
        m = re.search(r"!tt\.ptr<(f32|f16|bf16)>", ttcir_text)
        if m:
            return DTYPES[m.group(1)], "ttcir"
    m = re.match(r"\s*(float|half|bfloat)\*", params)
    if m:
        return TYPED_PTR_DTYPES[m.group(1)], "typed IR pointer"
    return "fp32", "default (nothing names it)"


def _config(constants: dict, path: Path, fn: str, blk_file: Path) -> dict:
    config = {}
    for key, value in constants.items():
        if key in HARNESS_KEYS or isinstance(value, (dict, list, str, float)) or value is None:
            continue
        name = key
        for prefix in (fn + "_", fn.replace("_kernel", "") + "_"):
            if name.startswith(prefix) and name[len(prefix):].isupper():
                name = name[len(prefix):]
        name = KEY_ALIASES.get(name, name)
        config[name] = int(value)
    m = _DIRNAME.match(path.name)
    if m:
        for key, group in (("BLOCK_M", "m"), ("BLOCK_N", "n"), ("BLOCK_K", "k"), ("GROUP_M", "g")):
            config.setdefault(key, int(m.group(group)))
    if not config:
        raise HarnessError("no block constants (e.g. BLOCK_SIZE_M) and the directory name is not "
                           "<kernel>_<BM>_<BN>_<BK>_<G>", where=str(blk_file))
    return config


def recorded_shapes(root, kernel_name: str) -> list:
    """The shapes the IR directories were generated for, as MxNxK strings (for a default)."""
    out = []
    for d in find_ir_dirs(root, kernel_name):
        try:
            constants = json.loads((d / "blk_constants.json").read_text())
            shape = _recorded_shape(constants, d / "blk_constants.json") if isinstance(constants, dict) else None
        except (ValueError, HarnessError, OSError):
            shape = None
        if shape:
            text = "x".join(str(v) for v in shape)
            if "dtype" in constants and DTYPES.get(str(constants["dtype"])):
                text += ":" + DTYPES[str(constants["dtype"])]
            if text not in out:
                out.append(text)
    return out


def copy_dumps(ir: IrKernel, dest: Path) -> None:
    """Keep the user's dumps in the bundle's src/ (and the IR harness actually compiled)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ir.files:
        target = dest / f.name
        if not target.exists() or target.stat().st_size != f.stat().st_size:
            shutil.copyfile(f, target)
    portable = dest / ("%s.portable.ll" % ir.function)
    if not portable.exists() or portable.read_text() != ir.portable.text:
        with tempfile.NamedTemporaryFile("w", dir=str(dest), delete=False, suffix=".tmp") as tmp:
            tmp.write(ir.portable.text)
        Path(tmp.name).replace(portable)
