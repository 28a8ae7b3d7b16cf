"""Triton-CPU kernels to board ELFs: imported IR directories, the launcher ABI, disassembly, errors.

Triton-CPU cannot be installed here (it is not on PyPI), so the IR is made for real the way it
reaches users: a C kernel in Triton-CPU's calling convention, compiled by clang for this x86
host (AVX2 features, like Triton-CPU's host-targeted ``asm["llir"]``) and dumped with opaque
pointers, then decorated with constructs only a newer LLVM prints (``getelementptr inbounds
nuw``, ``captures(none)``, ``icmp samesign``, ``memory(...)``, ``trunc nuw nsw``), laid out as
``<kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/`` with ``blk_constants.json``.
"""

import json
import re
import shutil
import struct
import subprocess

import pandas as pd
import pytest

from harness.compile import ir_import
from harness.compile.triton_cpu import IrElfBuilder, render_launcher, triton_cpu_status
from harness.targets import Target
from tests.conftest import ANSWERS_ONLY, QEMU_RV, REPO, needs

DATA = REPO / "tests" / "data" / "triton_cpu"
CONFIGS = [(8, 16, 8, 4), (16, 8, 16, 1), (4, 16, 16, 1)]  # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M
SHAPES = "64x48x32,40x24x16,32x32x32:fp32:TN"
# Triton-CPU's launcher for the tutorial matmul names arguments by their index in the Python
# signature; 7, 9 and 11 (stride_ak, stride_bn, stride_cn, equal to 1) were specialized away.
USERS_LAUNCHER = """// matmul_kernel launcher (Triton-CPU)
#include <stdint.h>
using matmul_kernel_kernel_ptr_t = void(*)(void*, void*, void*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t);
void matmul_kernel_wrap(uint32_t gridX, uint32_t gridY, uint32_t gridZ, int num_threads, matmul_kernel_kernel_ptr_t kernel_ptr , void* arg0, void* arg1, void* arg2, int32_t arg3, int32_t arg4, int32_t arg5, int32_t arg6, int32_t arg8, int32_t arg10);
"""


def c_to_llir(source, out, defines=()):
    """clang -O2 for the x86 host, dumped as opaque-pointer LLVM IR; then as a newer LLVM prints it."""
    bc = out.with_suffix(".bc")
    subprocess.run(["clang", "-O2", "-c", "-emit-llvm", "-march=x86-64-v3"] + ["-D%s" % d for d in defines]
                   + [str(source), "-o", str(bc)], check=True)
    subprocess.run(["llvm-dis", "-opaque-pointers", str(bc), "-o", str(out)], check=True)
    bc.unlink()
    text = out.read_text()
    text = text.replace("getelementptr inbounds ", "getelementptr inbounds nuw ").replace("nocapture", "captures(none)")
    text = re.sub(r"\bicmp (\w+) ", r"icmp samesign \1 ", text).replace("argmemonly", "memory(argmem: readwrite)")
    out.write_text(text.replace("trunc ", "trunc nuw nsw "))


@pytest.fixture(scope="module")
def ir_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-ir")
    for bm, bn, bk, g in CONFIGS:
        d = root / "matmul" / ("matmul_%d_%d_%d_%d" % (bm, bn, bk, g))
        d.mkdir(parents=True)
        c_to_llir(DATA / "matmul_kernel.c", d / "matmul_kernel.llir",
                  ["BLOCK_M=%d" % bm, "BLOCK_N=%d" % bn, "BLOCK_K=%d" % bk, "GROUP_M=%d" % g])
        (d / "blk_constants.json").write_text(json.dumps(
            {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g}))
        (d / "matmul_kernel_launcher.cpp").write_text(USERS_LAUNCHER)
        (d / "matmul_kernel.ttcir").write_text("// not a real dump: kept in the bundle as the users' files are\n")
    return root


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
@needs("qemu-riscv64", "clang", "llc", "riscv64-linux-gnu-ld")
def test_imported_ir_whole_flow_on_the_rvv_board_over_ssh(workspace, ir_root):
    ws = workspace
    llir = ir_root / "matmul" / "matmul_8_16_8_4" / "matmul_kernel.llir"
    plain = subprocess.run(["llvm-as", "-opaque-pointers", str(llir), "-o", "/dev/null"], capture_output=True, text=True)
    assert plain.returncode != 0 and "error" in plain.stderr  # LLVM 14 cannot read the dump as it is

    out = ws.harness("build", "matmul", "--target", "rv", "--from-ir", ir_root, "--shapes", SHAPES).stdout
    assert "3 variants (3 compiled" in out
    bundle = ws.path / "build/rv/matmul"
    manifest = json.loads((bundle / "manifest.json").read_text())
    tc = manifest["toolchain"]
    assert tc["kind"] == "triton-cpu" and tc["frontend"] == "ir-import"
    assert "-riscv-v-vector-bits-min=256" in tc["llc_flags"] and "-mattr=+m,+a,+f,+d,+c,+v" in tc["llc_flags"]
    assert sorted((v["config"]["BLOCK_M"], v["config"]["BLOCK_N"], v["config"]["BLOCK_K"], v["config"]["GROUP_M"])
                  for v in manifest["variants"]) == sorted(CONFIGS)
    for v in manifest["variants"]:
        launch = v["launch"]
        assert v["status"] == "ok", v["message"]
        assert launch["params"][-3:] == ["int32_t stride_am", "int32_t stride_bk", "int32_t stride_cm"]
        assert launch["fixed"] == {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
        for construct in ("getelementptr nuw/nusw (LLVM 19)", "captures(none) (LLVM 21)", "icmp samesign (LLVM 20)",
                          "memory(...) (LLVM 16)"):
            assert launch["ir_rewrites"][construct] > 0  # what LLVM 14 could not read was rewritten
        assert launch["vector_instructions"] > 0  # RVV code: the IR's <8 x float> became vle32/vfmacc
        asm = (bundle / launch["disassembly"]).read_text()
        assert "<matmul_kernel>:" in asm and re.search(r"\tvle32\.v\t", asm)
        assert launch["vector_instructions"] == len(re.findall(r"^\s+[0-9a-f]+:\s+v[a-z0-9.]+\t", asm, re.M))
        assert (bundle / launch["elf_name"]).samefile(bundle / v["artifact"])
        assert re.fullmatch(r"named/VL256_matmul_\d+_\d+_\d+_g_static_O2\.elf", launch["elf_name"])
        src = bundle / launch["source"]  # the users' dumps are kept, with the IR that was compiled
        assert {"blk_constants.json", "matmul_kernel.llir", "matmul_kernel.ttcir", "matmul_kernel_launcher.cpp",
                "matmul_kernel.portable.ll"} <= {p.name for p in src.iterdir()}
    # the IR has unit inner strides baked in: a TN shape is pruned with the reason
    assert {(p["shape"], p["rule"]) for p in manifest["pruned"]} == {("32x32x32_fp32_TN", "ir_specialization")}
    assert all("stride_ak = 1" in p["why"] for p in manifest["pruned"])

    ws.harness("push", "rv")
    ws.harness("run", "--remote", "rv", "--iters", "3", "--warmup", "1", *ANSWERS_ONLY)
    report = ws.harness("report").stdout
    df = pd.read_csv(ws.path / "results/rv/matmul/results.csv")
    measured = df[df.shape_id != "32x32x32_fp32_TN"]
    assert len(measured) == 6 and set(measured.status) == {"ok"}  # every config, every shape: checked answers
    assert (measured.rel_err <= 1e-5).all()
    assert set(df[df.shape_id == "32x32x32_fp32_TN"].status) == {"pruned"}
    assert "vec instr" in report  # the report shows the kernel's vector instruction count
    best = json.loads((ws.path / "tuned/rv/matmul.json").read_text())["best"]
    assert sorted(b["shape"] for b in best) == ["40x24x16_fp32_NN", "64x48x32_fp32_NN"]


@needs("qemu-riscv64", "clang", "llc", "riscv64-linux-gnu-ld")
def test_launcher_abi_float_scalars_program_ids_and_grid_reach_the_kernel(tmp_path):
    d = tmp_path / "echo" / "echo_1_1_1_1"
    d.mkdir(parents=True)
    c_to_llir(DATA / "echo_kernel.c", d / "echo_kernel.llir")
    signature = {"out": "*i64", "x32": "fp32", "x16": "fp16", "xb16": "bf16", "i8": "i8", "i16": "i16",
                 "i32": "i32", "i64": "i64", "u32": "u32"}
    (d / "blk_constants.json").write_text(json.dumps({"BLOCK_SIZE_M": 1, "signature": signature}))
    ir = ir_import.load_ir_dir(d, "riscv64")
    assert [p.ctype for p in ir.params] == ["void*", "float", "float", "float", "int8_t", "int16_t", "int32_t",
                                            "int64_t", "uint32_t"]  # Triton-CPU's ty_to_cpp
    assert ir.portable.rewrites["trunc nuw/nsw (LLVM 19)"] == 1
    target = Target(name="rvomp", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=256, threads=2)
    builder = IrElfBuilder(target, tmp_path / "bundle")
    launcher = render_launcher(ir, [(p.ctype, p.name) for p in ir.params], threads=2)
    assert "#pragma omp parallel for" in launcher and "(float)x16" in launcher and "(int8_t)i8" in launcher
    elf = tmp_path / "bundle" / "artifacts" / "echo.elf"
    res = builder.build(ir, {"launcher.cpp": launcher, "echo_main.cpp": (DATA / "echo_main.cpp").read_text()}, elf, 120)
    assert res.status == "ok", res.message
    out = subprocess.run(QEMU_RV.split() + [str(elf)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    records = [list(map(int, line.split()[1:])) for line in out.stdout.splitlines() if line.startswith("rec")]
    f32 = lambda v: struct.unpack("<I", struct.pack("<f", v))[0]
    assert sorted(tuple(r[:3]) for r in records) == [(x, y, z) for x in range(3) for y in range(2) for z in range(2)]
    for r in records:
        assert r[3:6] == [3, 2, 2]  # the grid
        assert r[6:9] == [f32(3.14159274), f32(0.0999755859375), f32(0.10009765625)]  # fp32, fp16, bf16 as float
        assert r[9:13] == [-7, -300, -123456789, -5000000000123]  # integers at their width
        assert r[13] == (-5000000000123) & 0xFFFFFFFF and r[14] == 4000000000 and r[15] == 0x7E57


def test_missing_triton_cpu_is_one_clear_error(local_workspace):
    if triton_cpu_status()[0]:
        pytest.skip("Triton-CPU is installed here")
    proc = local_workspace.harness("build", "matmul", "--target", "local", "--frontend", "triton-cpu", check=False)
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "Triton-CPU is not installed" in lines[0]
    assert "github.com/triton-lang/triton-cpu" in lines[0] and "--from-ir DIR" in lines[0]


@needs("clang", "llc")
def test_unusable_ir_file_is_one_clear_error(local_workspace, ir_root, tmp_path):
    ws = local_workspace
    cases = {
        # a construct LLVM 14 has no equivalent for
        "future": lambda t: t.replace("  ret void", "  %h1 = call i32 @llvm.ucmp.i32.i32(i32 %3, i32 %4)\n  ret void", 1),
        # a damaged file: cut in the middle of the kernel
        "damaged": lambda t: t[:len(t) // 3],
    }
    for name, damage in cases.items():
        root = tmp_path / name
        shutil.copytree(ir_root, root)
        llir = root / "matmul" / "matmul_4_16_16_1" / "matmul_kernel.llir"
        text = damage(llir.read_text())
        llir.write_text(text)
        proc = ws.harness("build", "matmul", "--target", "local", "--from-ir", root, "--shapes", "64x48x32",
                          check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        assert len(lines) == 1, proc.stderr
        m = re.search(r"matmul_4_16_16_1/matmul_kernel\.llir:(\d+): ", lines[0])
        assert m, lines[0]
        if name == "future":
            assert "llvm.scmp/ucmp intrinsics (LLVM 19)" in lines[0]
            assert "@llvm.ucmp" in text.split("\n")[int(m.group(1)) - 1]
        else:
            assert "LLVM 14 cannot read" in lines[0]


def test_portability_rewrites_and_what_the_dumps_say(tmp_path):
    newer = """; ModuleID = 'k'
source_filename = "k"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @k(ptr noalias captures(none) %0, i64 range(i64 0, 100) %1, i32 %2, i32 %3, i32 %4, i32 %5, i32 %6, i32 %7) #0 !dbg !4 {
  %9 = trunc nuw nsw i64 %1 to i32, !dbg !8
  %10 = zext nneg i32 %9 to i64
  %11 = getelementptr inbounds nuw float, ptr %0, i64 %10
  %12 = icmp samesign ult i32 %9, 64
  %13 = or disjoint i32 %9, 1
    #dbg_value(i32 %13, !7, !DIExpression(), !8)
  %14 = load <8 x float>, ptr %11, align 4
  %15 = fmul <8 x float> %14, splat (float 2.000000e+00)
  store <8 x float> %15, ptr %11, align 4
  ret void
}

attributes #0 = { nounwind memory(argmem: readwrite) uwtable(sync) "target-cpu"="skylake-avx512" "target-features"="+avx512f" }

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!2, !3}
!0 = distinct !DICompileUnit(language: DW_LANG_C11, file: !1, producer: "triton", isOptimized: true, emissionKind: LineTablesOnly)
!1 = !DIFile(filename: "k.py", directory: "/")
!2 = !{i32 2, !"Debug Info Version", i32 3}
!3 = !{i32 1, !"wchar_size", i32 4}
!4 = distinct !DISubprogram(name: "k", scope: !1, file: !1, line: 1, type: !5, scopeLine: 1, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0, keyInstructions: true)
!5 = !DISubroutineType(types: !6)
!6 = !{}
!7 = !DILocalVariable(name: "x", scope: !4, file: !1, line: 2, type: !9)
!8 = !DILocation(line: 2, column: 3, scope: !4, atomGroup: 1, atomRank: 1)
!9 = !DIBasicType(name: "int", size: 32, encoding: DW_ATE_signed)
"""
    portable = ir_import.make_portable(newer, "k.llir", "riscv64")
    ir_import.verify(portable, "k.llir")  # LLVM 14 reads it now
    assert len(portable.text.split("\n")) == len(newer.split("\n"))  # errors keep pointing at the original lines
    assert "<float 2.000000e+00, float 2.000000e+00" in portable.text and "skylake" not in portable.text
    for construct in ("trunc nuw/nsw", "zext nneg", "getelementptr nuw/nusw", "icmp samesign", "or disjoint",
                      "captures(none)", "range(...)", "memory(...)", "uwtable(sync)", "splat constants",
                      "debug info (dropped)"):
        assert any(k.startswith(construct) for k in portable.rewrites), construct
    with pytest.raises(Exception, match=r"k\.llir:\d+: .*x86"):  # host intrinsics cannot be retargeted
        ir_import.make_portable(newer.replace("  ret void", "  call void @llvm.x86.sse.sfence()\n  ret void"),
                                "k.llir", "riscv64")

    # what a directory says without Triton-CPU's launcher: names from the count, facts from the .ttcir
    d = tmp_path / "matmul" / "matmul_16_32_16_8"
    d.mkdir(parents=True)
    params = ", ".join(["ptr %%%d" % i for i in range(3)] + ["i32 %%%d" % i for i in range(3, 15)])
    (d / "matmul_kernel.llir").write_text("define void @matmul_kernel(%s) {\n  ret void\n}\n" % params)
    (d / "blk_constants.json").write_text(json.dumps({"USE_BLOCK_POINTERS": False}))
    (d / "matmul_kernel.ttcir").write_text(
        "tt.func public @matmul_kernel(%arg0: !tt.ptr<f16> {tt.divisibility = 16 : i32}, %arg1: !tt.ptr<f16> "
        "{tt.divisibility = 16 : i32}, %arg2: !tt.ptr<f16> {tt.divisibility = 16 : i32}, %arg3: i32 "
        "{tt.divisibility = 16 : i32}, %arg4: i32, %arg5: i32 {tt.divisibility = 16 : i32}, %arg6: i32, "
        "%arg7: i32, %arg8: i32) attributes {noinline = false} {\n")
    from harness import kernels
    from harness.compile.triton_cpu import UNIT_ARGS, aliases, harness_args
    from harness.shapes import parse_shape_list
    matmul = kernels.get("matmul")
    ir = ir_import.load_ir_dir(d, "riscv64", harness_args(matmul), aliases(matmul), UNIT_ARGS)
    assert ir.config == {"USE_BLOCK_POINTERS": 0, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8}
    assert (ir.dtype, ir.dtype_source, ir.divisibility_from) == ("fp16", "ttcir", "ttcir")
    assert [p.name for p in ir.params if p.divisible] == ["a", "b", "c", "M", "K"]
    values = lambda s: {"M": s.M, "N": s.N, "K": s.K, "stride_ak": 1 if s.layout[0] == "N" else s.M}
    ok, odd_m, fp32, tn = parse_shape_list("64x40x32:fp16,40x40x32:fp16,64x40x32:fp32,64x40x32:fp16:TN", "fp16")
    assert ir.serves(ok, values(ok)) is None  # N = 40 is fine: the IR assumes nothing of N
    assert "M divisible by 16" in ir.serves(odd_m, values(odd_m))
    assert "is for fp16" in ir.serves(fp32, values(fp32))
    assert "stride_ak = 1" in ir.serves(tn, values(tn))
