"""The packed, register-blocked CPU matmul (templates/cpu/matmul_kernel.cpp.j2): right answers for
ragged shapes, every dtype and layout, on the emulated RVV and aarch64 boards (qemu over the
loopback sshd) and natively; the vector FMA of the ISA in the kernel function's disassembly; the
rules that prune by vector registers and cache sizes; the ISA and caches taken from the target."""

import json
import re
import subprocess

import pandas as pd
import pytest

from harness.compile.disasm import objdump_for
from harness.cpu_facts import cache_sizes, vector_isa
from harness.kernels import get
from harness.shapes import make_shape
from harness.space import expand, first_pruning_rule
from harness.targets import Target
from tests.conftest import ANSWERS_ONLY, needs

# M, N and K off every block and micro-tile, one-element and one-row products, the four layouts,
# fp16 and bf16 inputs (packed to fp32)
RAGGED = "37x51x29,1x1x1,7x13x1000,24x40x56:fp16,33x70x129:bf16:TN,64x64x64:fp32:NT,5x200x300:fp32:TT"
SPACE = "MR: [1, 6]\nNR: [8, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n"
FMA = {"riscv64": re.compile(r"\bvfmacc\.v[vf]\b"), "aarch64": re.compile(r"\bfmla\s+v\d+\.4s"),
       "x86_64": re.compile(r"\bvfmadd\d+ps\s+.*%?[yz]mm")}


def kernel_disassembly(elf, arch: str) -> str:
    """``objdump -d`` of the kernel function alone (llvm-objdump with the vector extensions where
    the harness has it, else the binutils of the arch)."""
    cmd = objdump_for(arch)
    symbol = ["--disassemble-symbols=matmul_kernel"] if "llvm" in cmd[0] else ["--disassemble=matmul_kernel"]
    return subprocess.run(cmd + symbol + [str(elf)], capture_output=True, text=True, check=True).stdout


def check_board_results(ws, target: str, arch: str):
    df = pd.read_csv(ws.path / "results" / target / "matmul" / "results.csv")
    assert set(df.status) <= {"ok", "pruned"}, df[df.status != "ok"][["shape_id", "status", "message"]]
    ok = df[df.status == "ok"]
    assert set(ok.shape_id) == {"37x51x29_fp32_NN", "1x1x1_fp32_NN", "7x13x1000_fp32_NN", "24x40x56_fp16_NN",
                                "33x70x129_bf16_TN", "64x64x64_fp32_NT", "5x200x300_fp32_TT"}
    for dtype, tol in (("fp32", 1e-5), ("fp16", 1e-2), ("bf16", 1e-2)):
        assert (ok[ok.dtype == dtype].rel_err < tol).all(), ok[ok.dtype == dtype][["shape_id", "rel_err"]]
    assert (ok.err_ratio == 0).all()
    assert set(ok.cfg_PACK_B) == {0, 1}  # B read in place and packed both ran
    manifest = json.loads((ws.path / "build" / target / "matmul" / "manifest.json").read_text())
    elves = [ws.path / "build" / target / "matmul" / v["artifact"] for v in manifest["variants"] if v.get("artifact")]
    assert elves
    for elf in elves:
        text = kernel_disassembly(elf, arch)
        assert "<matmul_kernel>" in text
        assert FMA[arch].search(text), "no vector FMA in %s" % elf.name
    return manifest


@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_ragged_shapes_on_an_rvv_board(workspace):
    ws = workspace
    (ws.path / "space.yaml").write_text(SPACE)
    ws.harness("build", "matmul", "--target", "rv", "--shapes", RAGGED, "--space", "space.yaml")
    ws.harness("push", "rv")
    ws.harness("run", "--remote", "rv", "--iters", "2", *ANSWERS_ONLY)
    ws.harness("report")  # brings the results home
    manifest = check_board_results(ws, "rv", "riscv64")
    assert manifest["target"]["vlen"] == 256
    src = next((ws.path / "build" / "rv" / "matmul" / "src").glob("*.cpp")).read_text()
    assert "#define VB 32" in src  # 256-bit vectors: the target's VLEN, not a guess


@pytest.mark.slow
@needs("qemu-aarch64", "clang", "aarch64-linux-gnu-ld")
def test_ragged_shapes_on_an_aarch64_board(workspace):
    ws = workspace
    (ws.path / "space.yaml").write_text(SPACE)
    ws.harness("build", "matmul", "--target", "arm", "--shapes", RAGGED, "--space", "space.yaml")
    ws.harness("push", "arm")
    ws.harness("run", "--remote", "arm", "--iters", "2", *ANSWERS_ONLY)
    ws.harness("report")
    check_board_results(ws, "arm", "aarch64")


@pytest.mark.slow
def test_ragged_shapes_natively_on_two_threads(local_workspace):
    # threads: 2 shares the MC blocks of M among the programs (grid y) as well as the NC blocks
    ws = local_workspace
    (ws.path / "targets.yaml").write_text(ws.targets_yaml() + "two:\n  arch: native\n  threads: 2\n"
                                          "  profiler: wallclock\n")
    (ws.path / "space.yaml").write_text("MR: [1, 4]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n")
    ws.harness("build", "matmul", "--target", "two", "--shapes", RAGGED + ",70x129x33", "--space", "space.yaml")
    ws.harness("run", "--target", "two", "--iters", "2", *ANSWERS_ONLY)
    df = pd.read_csv(ws.path / "results" / "two" / "matmul" / "results.csv")
    assert set(df.status) <= {"ok", "pruned"}
    ok = df[df.status == "ok"]
    assert len(set(ok.shape_id)) == 8
    assert (ok[ok.dtype == "fp32"].rel_err < 1e-5).all() and (ok.err_ratio == 0).all()
    manifest = json.loads((ws.path / "build" / "two" / "matmul" / "manifest.json").read_text())
    grids = {(j["shape"], tuple(j["grid"])) for j in manifest["jobs"]}
    assert ("70x129x33_fp32_NN", (3, 2, 1)) in grids  # 129 columns in NC 64 blocks, 70 rows in two shares
    import platform
    if platform.machine() == "x86_64":  # every fp32 kernel vectorized (bf16 ones use vdpbf16ps where the CPU has it)
        elves = [v["artifact"] for v in manifest["variants"] if v.get("artifact") and v["dtype"] == "fp32"]
        assert elves
        for elf in elves:
            assert FMA["x86_64"].search(kernel_disassembly(ws.path / "build" / "two" / "matmul" / elf, "x86_64")), elf


def _target(**kw) -> Target:
    return Target(name=kw.pop("name", "t"), **kw)


def test_registers_and_caches_prune_the_space(tmp_path):
    kernel = get("matmul")
    rules = kernel.rules_for(_target(arch="riscv64", march="rv64gcv", vlen=256))
    shape = make_shape(512, 512, 2048)

    def why(cfg, target):
        rule = first_pruning_rule(kernel.rules_for(target), dict(dict(MR=6, NR=32, KC=256, MC=128, NC=512,
                                                                      PACK_B=1), **cfg), shape, target)
        return rule.name if rule else None

    rv256 = _target(name="rv256", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=256)
    rv128 = _target(name="rv128", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=128)
    assert vector_isa(rv256).vector_bytes == 32 and vector_isa(rv128).vector_bytes == 16
    assert why({}, rv256) is None  # 6 x 4 accumulators + 4 of B + 1 = 29 of 32
    assert why({"MR": 8}, rv256) == "registers_exceeded"  # 8 x 4 + 5 = 37
    assert why({"MR": 6}, rv128) == "registers_exceeded"  # 32 columns are 8 vectors of 128 bits
    assert why({"NR": 12}, rv256) == "nr_off_vectors"
    arm = _target(name="arm", arch="aarch64", toolchain="clang")
    assert vector_isa(arm).name == "neon"
    assert why({"MR": 6, "NR": 16}, arm) is None and why({"MR": 8, "NR": 16}, arm) == "registers_exceeded"
    # caches: the defaults (32 KiB L1d, 512 KiB L2) where nothing was probed, else the probed sizes
    assert cache_sizes(rv256, tmp_path).source == "default"
    assert why({"MR": 4, "NR": 32, "KC": 512}, rv256) is None  # 64 KiB panel: twice L1d
    assert why({"MR": 4, "NR": 64, "KC": 512}, _target(name="rvx", arch="riscv64", toolchain="clang",
                                                       march="rv64gcv", vlen=512)) == "b_panel_over_l1"
    assert why({"MC": 512, "KC": 512}, rv256) == "a_block_over_l2"  # 1 MiB of A over a 512 KiB L2
    from harness import state
    state.remember(tmp_path, "rv256", cpu_caches={"l1d": 65536, "l2": 4 << 20})
    assert cache_sizes(rv256, tmp_path).l2 == 4 << 20
    # shapes: blocks past the next power of two of their dimension repeat smaller ones
    small = make_shape(3, 20, 100)
    kept = [c for c in expand(kernel.space_for(rv256)) if first_pruning_rule(rules, c, small, rv256) is None]
    assert kept and {c["MR"] for c in kept} == {1, 2, 4} and {c["KC"] for c in kept} == {64, 128}
    assert {c["NC"] for c in kept} == {64} and {c["MC"] for c in kept} == {16}
    assert all(first_pruning_rule(rules, dict(c, PACK_B=0), make_shape(3, 20, 100, "bf16"), rv256) is not None
               for c in kept)  # bf16 B is always packed (converted to fp32)


def test_seeds_fill_the_registers_of_each_isa():
    kernel = get("matmul")
    for target, tiles in ((_target(name="rvs", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=256),
                           {(6, 32), (8, 24), (14, 16), (16, 8)}),
                          (_target(name="arms", arch="aarch64", toolchain="clang"), {(6, 16), (8, 12), (14, 8), (16, 4)}),
                          (_target(name="avx2", arch="x86_64", toolchain="gcc", march="x86-64-v3"),
                           {(2, 32), (4, 24), (6, 16), (14, 8)})):
        seeds = kernel.seed_configs(make_shape(256, 512, 2048), target)
        assert {(c["MR"], c["NR"]) for c in seeds} == tiles, target.name
        decode = kernel.seed_configs(make_shape(1, 4096, 4096), target)
        assert decode and all(c["MR"] == 1 and c["PACK_B"] == 0 for c in decode)


def test_seeds_reading_b_rows_in_place_keep_the_a_block_in_a_quarter_of_l1():
    from harness.cpu_facts import cache_sizes
    from harness.kernels.matmul import CPU_SPACE

    kernel = get("matmul")
    target = _target(name="arms", arch="aarch64", toolchain="clang")
    l1d = cache_sizes(target).l1d

    def l1_rows(kc):  # the most rows within a quarter of L1d, at least the space's smallest MC
        return max([v for v in CPU_SPACE["MC"] if v * kc * 4 <= l1d // 4] or [min(CPU_SPACE["MC"])])

    for shape in (make_shape(256, 512, 2048), make_shape(512, 512, 512, "fp32", "TN"), make_shape(128, 128, 64)):
        seeds = kernel.seed_configs(shape, target)
        in_place = [c for c in seeds if c["PACK_B"] == 0]
        assert in_place and all(c["MC"] == l1_rows(c["KC"]) for c in in_place), (shape, in_place)
        assert all(c["MC"] == 128 for c in seeds if c["PACK_B"] == 1)  # packed B: BLIS's L2-sized A block


def _cpu_flags() -> set:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set()
    return set(next((l.split(":", 1)[1].split() for l in text.splitlines() if l.startswith("flags")), []))


# B stored N x K: read in place as dot products (PACK_B 0, M off the 4-row tile, K off the vector) and
# packed through the 16 x 16 transpose (K = 129: eight whole blocks and a tail); bf16 through vdpbf16ps:
# odd K (a zero-padded pair), K over KC (sums carried in C), every layout
NT_AND_BF16 = ("3x40x19:fp32:NT,33x70x129:fp32:NT,37x51x29:bf16:NT,33x70x129:bf16:TN,64x96x256:bf16:NT,"
               "24x40x57:bf16:NN,5x200x300:bf16:TT")


@pytest.mark.skipif("avx512_bf16" not in _cpu_flags() or "avx512f" not in _cpu_flags(),
                    reason="needs an x86-64 CPU with AVX512_BF16")
def test_dot_products_transposed_packs_and_bf16_pairs_natively(local_workspace):
    ws = local_workspace
    (ws.path / "space.yaml").write_text("MR: [4]\nNR: [32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n")
    ws.harness("build", "matmul", "--target", "local", "--shapes", NT_AND_BF16, "--space", "space.yaml")
    ws.harness("run", "--target", "local", "--iters", "2", *ANSWERS_ONLY)
    df = pd.read_csv(ws.path / "results" / "local" / "matmul" / "results.csv")
    assert set(df.status) <= {"ok", "pruned"}, df[df.status != "ok"][["shape_id", "status", "message"]]
    ok = df[df.status == "ok"]
    assert len(set(ok.shape_id)) == 7
    fp32, bf16 = ok[ok.dtype == "fp32"], ok[ok.dtype == "bf16"]
    assert (fp32.rel_err < 1e-5).all() and (bf16.rel_err < 1e-2).all() and (ok.err_ratio == 0).all()
    assert set(fp32.cfg_PACK_B) == {0, 1} and len(fp32) == 4  # dot products and transposed packs both ran
    assert set(bf16.cfg_PACK_B) == {1} and len(bf16) == 5  # bf16's B is always packed (pairs)
    manifest = json.loads((ws.path / "build" / "local" / "matmul" / "manifest.json").read_text())
    bf_elves = [v["artifact"] for v in manifest["variants"] if v.get("dtype") == "bf16" and v.get("artifact")
                and not v["id"].startswith("lib:")]
    assert bf_elves
    for artifact in bf_elves:
        text = subprocess.run(objdump_for("x86_64") + ["-d", str(ws.path / "build" / "local" / "matmul" / artifact)],
                              capture_output=True, text=True, check=True).stdout
        assert re.search(r"\bvdpbf16ps\s+.*%zmm", text), artifact


def test_b_read_in_place_where_its_layout_allows():
    kernel = get("matmul")
    target = _target(name="avx512", arch="x86_64", toolchain="gcc", march="skylake-avx512")
    rules = kernel.rules_for(target)
    cfg = dict(MR=4, NR=64, KC=64, MC=16, NC=1024, PACK_B=0)

    def pruned(c, shape):
        rule = first_pruning_rule(rules, c, shape, target)
        return rule.name if rule else None

    assert pruned(cfg, make_shape(16, 4096, 4096, "fp32", "NT")) is None  # dot products along K
    assert pruned(cfg, make_shape(16, 4096, 4096, "fp32", "NN")) is None  # B's rows into the micro-kernel
    assert pruned(cfg, make_shape(16, 4096, 4096, "fp32", "TT")) == "pack_b_moot"
    assert pruned(cfg, make_shape(16, 4096, 4096, "bf16", "NT")) == "pack_b_moot"
    assert pruned(dict(cfg, KC=256), make_shape(16, 4096, 4096, "fp32", "NT")) == "kc_moot_for_dots"
    assert pruned(dict(cfg, KC=256), make_shape(16, 4096, 4096, "fp32", "NN")) is None
    # the dot-product seeds: every row of A (up to 8) against one to four rows of B at once, NC 64 and 1024
    seeds = kernel.seed_configs(make_shape(8, 2048, 8192, "fp32", "NT"), target)
    assert {(c["MR"], c["NR"], c["NC"]) for c in seeds if not c["PACK_B"]} == {
        (8, nr, nc) for nr in (16, 32, 48) for nc in (64, 1024)}  # 8 x 4 vectors would need 37 registers
    decode = kernel.seed_configs(make_shape(1, 2048, 8192, "fp32", "NT"), target)
    assert {(c["MR"], c["NR"]) for c in decode} == {(1, nr) for nr in (16, 32, 48, 64)}
    assert all(c["KC"] == 64 and c["PACK_B"] == 0 for c in decode)
    assert vector_isa(target).bf16_dot is False  # skylake-avx512 has no AVX512_BF16
    assert vector_isa(_target(name="cpx", arch="x86_64", toolchain="gcc", march="cooperlake")).bf16_dot is True
