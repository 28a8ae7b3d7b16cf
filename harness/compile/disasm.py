"""Disassembly of a kernel's functions in a linked ELF, and its vector instruction count.

The disassembly is written next to the ELF (``artifacts/<hash>.elf.s``, host only: not pushed)
and the count goes into the variant's launch facts as ``vector_instructions``, so that a build
that silently did not vectorize shows in the manifest and in ``harness report``.

RISC-V is disassembled with llvm-objdump and the vector extension switched on
(``--mattr=+m,+a,+f,+d,+c,+v``), falling back to the cross binutils' objdump (which takes the
extensions from the ELF's arch attribute). What counts as a vector instruction:

* riscv64: every V-extension instruction (mnemonic ``v*``: loads, stores, arithmetic, vsetvli)
* aarch64: instructions on NEON/SVE registers (``v0.4s``, ``q0``, ``z0.s``, ``p0/z``)
* x86_64: packed SSE/AVX/AVX-512 instructions (``ymm``/``zmm`` operands, or ``xmm`` ones that
  are not scalar ``*ss``/``*sd``)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

RISCV_MATTR = "+m,+a,+f,+d,+c,+v"
_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{2} )*\s*([a-z][\w.]*)\s*(.*)$")


def objdump_for(arch: str) -> list:
    """The disassembler command for an architecture (with vector extensions enabled)."""
    llvm = shutil.which("llvm-objdump-14") or shutil.which("llvm-objdump")
    if llvm:
        cmd = [llvm, "-d", "--no-show-raw-insn"]
        if arch == "riscv64":
            cmd.append("--mattr=" + RISCV_MATTR)
        elif arch == "aarch64":
            cmd.append("--mattr=+neon,+sve")
        return cmd
    gnu = {"riscv64": "riscv64-linux-gnu-objdump", "aarch64": "aarch64-linux-gnu-objdump"}.get(arch, "objdump")
    if shutil.which(gnu):
        return [gnu, "-d", "--no-show-raw-insn"]
    return []


def symbol_ranges(elf: Path, names) -> dict:
    """name -> (address, size) from the ELF's symbol table."""
    nm = shutil.which("llvm-nm-14") or shutil.which("llvm-nm") or shutil.which("nm")
    if not nm:
        return {}
    proc = subprocess.run([nm, "-S", "--defined-only", str(elf)], capture_output=True, text=True)
    wanted, found = set(names), {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] in wanted and parts[2].lower() in ("t", "w"):
            found[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return found


def is_vector(arch: str, mnemonic: str, operands: str) -> bool:
    if arch == "riscv64":
        return mnemonic.startswith("v")
    if arch == "aarch64":
        return bool(re.search(r"\b(?:v\d+\.\d*[bhsdq]|q\d+|z\d+\.[bhsdq]|p\d+/[zm])\b", operands))
    if arch == "x86_64":
        if re.search(r"%?[yz]mm\d+", operands):
            return True
        return bool(re.search(r"%?xmm\d+", operands)) and not re.search(r"(ss|sd|si2s[sd]|2si)$", mnemonic) \
            and mnemonic not in ("movd", "movq", "vmovd", "vmovq")
    return False


def count_vector(arch: str, text: str) -> tuple:
    """(vector instructions, all instructions) in objdump output."""
    vec = total = 0
    for line in text.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        total += 1
        vec += is_vector(arch, m.group(1), m.group(2))
    return vec, total


def disassemble(elf: Path, functions, arch: str, out: Path, entry: str) -> dict:
    """Disassemble the given functions of a linked ELF into ``out``; returns launch facts:
    ``vector_instructions`` (of the entry function), ``instructions``, ``vector_by_function``,
    ``disassembly`` (the file), or ``disassembly_error``."""
    cmd = objdump_for(arch)
    if not cmd:
        return {"disassembly_error": "no objdump found (install the Debian package llvm)"}
    ranges = symbol_ranges(elf, functions)
    if entry not in ranges:
        return {"disassembly_error": "symbol %s not in %s" % (entry, elf.name)}
    texts, by_function = [], {}
    for name in sorted(ranges, key=lambda n: (n != entry, ranges[n][0])):
        start, size = ranges[name]
        proc = subprocess.run(cmd + ["--start-address=%#x" % start, "--stop-address=%#x" % (start + size), str(elf)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return {"disassembly_error": (proc.stderr.strip().splitlines() or ["objdump failed"])[-1][:200]}
        body = _body(proc.stdout)
        vec, total = count_vector(arch, body)
        by_function[name] = {"vector": vec, "instructions": total}
        texts.append("; %s: %d instructions, %d vector\n%s" % (name, total, vec, body))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("; %s\n; disassembled with: %s\n\n%s" % (elf.name, " ".join([Path(cmd[0]).name] + cmd[1:]),
                                                             "\n".join(texts)))
    tmp.replace(out)
    return {"vector_instructions": by_function[entry]["vector"], "instructions": by_function[entry]["instructions"],
            "vector_by_function": by_function}


def _body(text: str) -> str:
    """objdump output without its file header."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Disassembly of section"):
            return "\n".join(lines[i + 1:]).strip("\n") + "\n"
    return text


def vector_counts(bundle: Path) -> dict:
    """variant id -> vector instructions of its kernel, from a bundle's manifest (when counted)."""
    try:
        data = json.loads((Path(bundle) / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for v in data.get("variants", []):
        n = (v.get("launch") or {}).get("vector_instructions")
        if n is not None:
            out[v["id"]] = n
    return out


def with_vector_counts(best, bundle: Path):
    """Add a ``vector_instructions`` column to report rows when the bundle counted them."""
    counts = vector_counts(bundle)
    if not counts or best is None or len(best) == 0 or "variant_id" not in best.columns:
        return best
    best = best.copy()
    best["vector_instructions"] = best["variant_id"].map(counts)
    return best


def count_for(elf: Path, arch: str, entry: str) -> Optional[int]:
    """Vector instructions of one function of an ELF (no file written)."""
    cmd = objdump_for(arch)
    ranges = symbol_ranges(elf, [entry])
    if not cmd or entry not in ranges:
        return None
    start, size = ranges[entry]
    proc = subprocess.run(cmd + ["--start-address=%#x" % start, "--stop-address=%#x" % (start + size), str(elf)],
                          capture_output=True, text=True)
    return count_vector(arch, _body(proc.stdout))[0] if proc.returncode == 0 else None
