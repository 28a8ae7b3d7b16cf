"""Each tuned file read back by a reader written to its consumer's own rules (aiter e4048607,
ROCm/triton tune_gemm 4a7afd26, vLLM 007d5005, SGLang 008601fa: tests/data/consumers/README.md),
checked for every M; and the consumers' own untuned lists read with every row tuned or listed.

The results CSVs are written the way the agent writes them (ResultsWriter, contract header) from
a deterministic model of kernel time.
"""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.errors import HarnessError
from harness.report import aiter_blockscale_csv, aiter_csv, triton_json, tune_gemm_yaml, vllm_json
from harness.report.common import config_of
from harness.shapes import MATMUL, sources
from harness.space import config_id
from remote_agent import contract
from remote_agent.results import ResultsWriter

DATA = Path(__file__).parent / "data" / "consumers"
META = {"arch": "gfx942", "device": "AMD Instinct MI300X", "cu_num": 304, "driver": "6.8.5",
        "toolchain": "triton 3.9.0 (hip gfx942)", "triton": "3.9.0"}
STANDARD_M_BOUNDS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


# ------------------------------------------------------------------ results of a modelled kernel


def write_results(path, kernel, shapes, configs, model, device="AMD Instinct MI300X"):
    """One ok row per (shape, config) with the modelled time; shapes are (M, N, K, dtype, layout)."""
    names = list(dict.fromkeys(k for c in configs for k in c))
    writer = ResultsWriter(str(path), contract.results_header(names, []))
    for (M, N, K, dtype, layout) in shapes:
        sid = "%dx%dx%d_%s" % (M, N, K, dtype) + ("_%s" % layout if layout else "")
        for cfg in configs:
            t = model(M, N, K, cfg)
            row = {"schema_version": contract.RESULTS_SCHEMA, "target": "t", "kernel": kernel,
                   "variant_id": config_id(cfg), "shape_id": sid, "M": M, "N": N, "K": K, "dtype": dtype,
                   "layout": layout, "device": device, "agent_version": contract.AGENT_VERSION, "host": "node",
                   "timestamp": "2026-11-26T10:00:00+0000", "profiler": "events", "status": contract.OK,
                   "time_ns_median": round(t, 1), "time_ns_min": round(t, 1), "time_ns_p20": round(t, 1),
                   "time_ns_p80": round(t, 1), "iterations": 10, "tflops": round(2.0 * M * N * K / t / 1e3, 4),
                   "gbps": 1.0, "rel_err": 1e-3, "err_ratio": 0.0}
            row.update({contract.CONFIG_PREFIX + k: v for k, v in cfg.items()})
            writer.write(row)
    writer.close()
    return pd.read_csv(path, dtype={"variant_id": str, "shape_id": str, "device": str, "layout": str})


def fastest(df, shape_id, accept=lambda cfg: True):
    rows = df[(df["shape_id"] == shape_id)]
    rows = rows[[accept(config_of(r)) for _, r in rows.iterrows()]]
    return config_of(rows.loc[rows["time_ns_median"].idxmin()])


MATMUL_CONFIGS = [dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=sk, num_warps=4, num_stages=2,
                       waves_per_eu=0, matrix_instr_nonkdim=16, kpack=1)
                  for bm in (16, 64, 256) for sk in (1, 2, 3)]


def matmul_model(M, N, K, cfg):
    """A right-sized BLOCK_M wins; a 3-way split wins on the one skinny deep shape."""
    best_bm = 16 if M <= 32 else (64 if M <= 512 else 256)
    t = (2.0 * M * N * K / 300e12 * 1e9 + 3000.0) * (1.0 + 0.3 * abs(math.log2(cfg["BLOCK_M"] / best_bm)))
    if (M, K) == (8, 16384):
        return t * {1: 1.0, 2: 0.8, 3: 0.7}[cfg["SPLIT_K"]]
    return t * (1.0 + 0.01 * cfg["SPLIT_K"])


MATMUL_SHAPES = ([(M, 4096, 4096, "bf16", "NT") for M in (1, 16, 48, 64, 100, 500, 3000, 10000)]
                 + [(8, 1024, 16384, "bf16", "NT"), (64, 1024, 1024, "fp16", "NN"), (64, 1024, 1024, "fp32", "NT")])


@pytest.fixture(scope="module")
def matmul_results(tmp_path_factory):
    return write_results(tmp_path_factory.mktemp("mm") / "results.csv", "matmul", MATMUL_SHAPES, MATMUL_CONFIGS,
                         matmul_model)


# ------------------------------------------------------------------ aiter's bf16/fp16 tuned CSV


def aiter_a16w16_lookup(path):
    """aiter.tuned_gemm.get_GEMM_A16W16_config_: read, drop duplicates, index by its ten keys."""
    df = pd.read_csv(path).drop_duplicates()
    return df.set_index(["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB",
                         "bpreshuffle"]).to_dict("index")


def test_aiter_csv_is_what_aiters_bf16_dispatch_looks_up(matmul_results, tmp_path):
    lines = []
    (path,) = aiter_csv.write_tuned_csv(matmul_results, None, META, tmp_path / "bf16_tuned_gemm.csv",
                                        say=lines.append)
    table = aiter_a16w16_lookup(path)  # the old file (arch, no libtype) fails here: no 'gfx' column
    ours = pd.read_csv(path)
    assert list(ours.columns[:10]) == ["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB",
                                       "bpreshuffle"]
    for (M, N, K, dtype, layout) in MATMUL_SHAPES:
        sid = "%dx%dx%d_%s_%s" % (M, N, K, dtype, layout)
        torch_dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}[dtype]
        key = ("gfx942", 304, M, N, K, False, torch_dtype, torch_dtype, False, False)
        if layout != "NT":
            assert key not in table and any(sid in line and "left out" in line for line in lines)
            continue
        row = table[key]
        assert row["libtype"] == "triton" and row["solidx"] == 0  # aiter's solMap runs its Triton GEMM
        want = fastest(matmul_results, sid, lambda c: c["SPLIT_K"] in (1, 2, 4, 8))
        assert 2 ** row["splitK"] == want["SPLIT_K"]  # aiter's KBatch = 2^splitK
        assert row["kernelName"] == "matmul_" + "_".join("%s%s" % kv for kv in want.items())
    # the 3-way split was fastest on 8x1024x16384: never written as another split, the 2-way instead
    assert table[("gfx942", 304, 8, 1024, 16384, False, "torch.bfloat16", "torch.bfloat16", False, False)][
        "splitK"] == 1
    assert any("8x1024x16384_bf16_NT gets" in line and "splits K 3 ways" in line for line in lines)
    assert any("fp32 rows are keyed torch.float32" in line for line in lines)


def test_aiters_own_bf16_tuned_file_reads_with_the_same_lookup():
    table = aiter_a16w16_lookup(DATA / "aiter" / "bf16_tuned_gemm.head.csv")
    row = table[("gfx950", 256, 64, 256, 5120, False, "torch.bfloat16", "torch.float32", False, False)]
    assert row["libtype"] == "asm" and row["splitK"] == 13


def test_aiter_blockscale_csv_is_refused_for_a_triton_kernel():
    with pytest.raises(HarnessError, match="ck or cktile only.*--format triton"):
        aiter_blockscale_csv.write_tuned_csv(pd.DataFrame(), None, META, "x.csv")


# ------------------------------------------------------------------ aiter's Triton JSON


def aiter_get_gemm_config(folder, arch, family, M, N, K):
    """aiter.ops.triton.utils.gemm_config_utils._get_gemm_config_cached on the flat gemm/ folder:
    the default file must exist, the N,K file replaces it, M_LEQ ascending, M_GEQ descending, any."""
    folder = Path(folder)
    default = folder / ("%s-%s.json" % (arch, family))
    assert default.exists(), "Required config file doesn't exist: %s" % default
    configs, is_tuned = json.loads(default.read_text()), False
    special = folder / ("%s-%s-N=%d-K=%d.json" % (arch, family, N, K))
    if special.exists():
        configs, is_tuned = json.loads(special.read_text()), True
    for bound in STANDARD_M_BOUNDS:
        if M <= bound and "M_LEQ_%d" % bound in configs:
            return configs["M_LEQ_%d" % bound], is_tuned
    for bound in reversed(STANDARD_M_BOUNDS):
        if M >= bound and "M_GEQ_%d" % bound in configs:
            return configs["M_GEQ_%d" % bound], is_tuned
    if "any" in configs:
        return configs["any"], False
    raise KeyError(M)


def as_aiter(cfg):
    names = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
             "GROUP_M": "GROUP_SIZE_M", "SPLIT_K": "NUM_KSPLIT"}
    return {names.get(k, k): v for k, v in cfg.items()}


def test_our_aiter_lookup_reads_aiters_own_files_as_aiter_does():
    cfg, tuned = aiter_get_gemm_config(DATA / "aiter", "gfx942", "GEMM-A8W8_BLOCKSCALE", 3, 2112, 7168)
    assert tuned and cfg["NUM_KSPLIT"] == 14 and cfg["BLOCK_SIZE_K"] == 128
    assert aiter_get_gemm_config(DATA / "aiter", "gfx942", "GEMM-A8W8_BLOCKSCALE", 64, 99, 99)[1] is False
    for M in (1, 64, 65, 9000):  # the shipped default's keys, through the harness's copy of the rule
        shipped = json.loads((DATA / "aiter" / "gfx942-GEMM-A16W16.json").read_text())
        assert triton_json.pick_config(shipped, M) == aiter_get_gemm_config(
            DATA / "aiter", "gfx942", "GEMM-A16W16", M, 1, 1)[0]


@pytest.mark.slow
def test_triton_json_gives_every_m_a_tuned_key(matmul_results, tmp_path):
    lines = []
    paths = triton_json.write_triton_json(matmul_results, None, META, tmp_path, say=lines.append)
    names = sorted(p.name for p in paths)
    assert "gfx942-GEMM-A16W16-N=4096-K=4096.json" in names and "gfx942-GEMM-A16W16-N=1024-K=16384.json" in names
    # aiter's default stays aiter's: ours goes to default/ (the lookup needs one: give it ours)
    assert (tmp_path / "default" / "gfx942-GEMM-A16W16.json").exists()
    (tmp_path / "gfx942-GEMM-A16W16.json").write_text((tmp_path / "default" / "gfx942-GEMM-A16W16.json").read_text())
    doc = json.loads((tmp_path / "gfx942-GEMM-A16W16-N=4096-K=4096.json").read_text())
    assert not [k for k in doc if k in ("small", "large", "xlarge") or k.startswith("medium")]
    tuned = [s for s in MATMUL_SHAPES if s[1:3] == (4096, 4096)]
    for M in list(range(0, 9000)) + [10000, 20000, 65536]:
        cfg, is_tuned = aiter_get_gemm_config(tmp_path, "gfx942", "GEMM-A16W16", M, 4096, 4096)
        assert is_tuned, M  # the old file: every M fell to "any", is_tuned False
        for key in triton_json.REQUIRED:
            assert key in cfg  # every key aiter's GEMM JSON must carry
    for (M, N, K, dtype, layout) in tuned:  # a bound with one tuned M holds that M's best
        same = [m for (m, *_r) in tuned if triton_json.key_for(m) == triton_json.key_for(M)]
        cfg, _ = aiter_get_gemm_config(tmp_path, "gfx942", "GEMM-A16W16", M, N, K)
        if len(same) == 1:
            want = as_aiter(fastest(matmul_results, "%dx%dx%d_%s_%s" % (M, N, K, dtype, layout)))
            assert {k: cfg[k] for k in want} == want
    # NN and fp32 have no aiter family: said, not written
    assert any("64x1024x1024_fp16_NN left out" in line for line in lines)
    assert any("64x1024x1024_fp32_NT left out" in line for line in lines)


def test_triton_json_never_writes_zero_files_silently(matmul_results, tmp_path):
    nn = matmul_results[matmul_results["layout"] == "NN"]
    with pytest.raises(HarnessError, match="0 files"):
        triton_json.write_triton_json(nn, None, META, tmp_path, say=lambda line: None)


FP8_CONFIGS = [dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=4, num_stages=2,
                    waves_per_eu=0, matrix_instr_nonkdim=16, kpack=1)
               for bm in (16, 64) for bk in (64, 128) for sk in (1, 2)]
FP8_SHAPES = [(M, 2112, 7168, "fp8e4m3fnuz", "") for M in (1, 16, 200, 5000)]


def fp8_model(M, N, K, cfg):
    """BLOCK_K 64 and a 2-way split win everywhere; a right-sized BLOCK_M wins."""
    right = 16 if M <= 16 else 64
    t = (2.0 * M * N * K / 600e12 * 1e9 + 3000.0) * (1.0 + 0.3 * abs(math.log2(cfg["BLOCK_M"] / right)))
    return t * (0.9 if cfg["BLOCK_K"] == 64 else 1.0) * (0.95 if cfg["SPLIT_K"] == 2 else 1.0)


@pytest.fixture(scope="module")
def fp8_results(tmp_path_factory):
    return write_results(tmp_path_factory.mktemp("fp8") / "results.csv", "fp8_blockscale", FP8_SHAPES, FP8_CONFIGS,
                         fp8_model)


def test_fp8_blockscale_goes_to_aiters_blockscale_triton_json(fp8_results, tmp_path):
    with pytest.raises(HarnessError, match="--format triton"):
        aiter_csv.write_tuned_csv(fp8_results, None, META, tmp_path / "x.csv")
    lines = []
    paths = triton_json.write_triton_json(fp8_results, None, META, tmp_path, say=lines.append)
    assert [p.name for p in paths] == ["gfx942-GEMM-A8W8_BLOCKSCALE-N=2112-K=7168.json",
                                       "gfx942-GEMM-A8W8_BLOCKSCALE.json"]
    (tmp_path / "gfx942-GEMM-A8W8_BLOCKSCALE.json").write_text(paths[1].read_text())
    for (M, N, K, dtype, _) in FP8_SHAPES:
        cfg, tuned = aiter_get_gemm_config(tmp_path, "gfx942", "GEMM-A8W8_BLOCKSCALE", M, N, K)
        want = as_aiter(fastest(fp8_results, "%dx%dx%d_%s" % (M, N, K, dtype), lambda c: c["BLOCK_K"] == 128))
        assert tuned and cfg["BLOCK_SIZE_K"] == 128  # aiter asserts GROUP_K == BLOCK_SIZE_K
        assert {k: cfg[k] for k in want} == want
    assert sum("has BLOCK_K 64" in line for line in lines) == len(FP8_SHAPES)


# ------------------------------------------------------------------ tune_gemm's YAML


def tune_gemm_read(path):
    """tune_gemm.py main + process_item + read_config + gen_configStr on every entry."""
    out = []
    for item in yaml.safe_load(Path(path).read_text()):
        M, N, K = item.pop("M"), item.pop("N"), item.pop("K")
        col_a, col_b = item.pop("rowMajorA") != "T", item.pop("rowMajorB") != "T"
        keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "SPLIT_K", "num_warps", "num_stages",
                "waves_per_eu", "matrix_instr_nonkdim", "kpack", "instruction_sched_variant")
        bm, bn, bk, gm, sk, nw, ns, eu, mfma, kp, sched = (item.get(k) for k in keys)
        sched = sched.upper().replace("-", "_")  # the old file: 'NoneType' object has no attribute 'upper'
        out.append(((M, N, K, col_a, col_b),
                    f"BM{bm}_BN{bn}_BK{bk}_GM{gm}_SK{sk}_nW{nw}_nS{ns}_EU{eu}_kP{kp}_mfma{mfma}_sched{sched}"))
    return out


def test_yaml_holds_every_key_tune_gemm_reads(matmul_results, tmp_path):
    path = tune_gemm_yaml.write_tuned_yaml(matmul_results, None, META, tmp_path / "tuning_results.yaml",
                                           say=lambda line: None)
    entries = tune_gemm_read(path)
    assert len(entries) == len(MATMUL_SHAPES)
    (first_key, first_str) = entries[0]
    assert first_str.endswith("_EU0_kP1_mfma16_schedNONE") and "None" not in first_str


def test_yaml_of_a_cuda_target_fills_tune_gemms_keys_and_says_so(tmp_path):
    cfgs = [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3, TMA=t) for t in (0, 1)]
    df = write_results(tmp_path / "r.csv", "matmul", [(64, 64, 64, "fp16", "NN")], cfgs,
                       lambda M, N, K, c: 1000.0 - 100 * c["TMA"], device="NVIDIA H100")
    lines = []
    path = tune_gemm_yaml.write_tuned_yaml(df, None, dict(META, arch="sm90"), tmp_path / "t.yaml", say=lines.append)
    ((_, configstr),) = tune_gemm_read(path)
    assert configstr == "BM64_BN64_BK32_GM8_SK1_nW4_nS3_EU0_kP1_mfma16_schedNONE"
    assert "# filled: SPLIT_K, waves_per_eu, matrix_instr_nonkdim, kpack, instruction_sched_variant" in path.read_text()
    assert any("uses TMA" in line for line in lines)  # the TMA winner is no tune_gemm kernel


def test_yaml_refuses_fp8_blockscale_in_one_line(fp8_results, tmp_path):
    with pytest.raises(HarnessError, match="no block scales"):  # the old file: TypeError, float not subscriptable
        tune_gemm_yaml.write_tuned_yaml(fp8_results, None, META, tmp_path / "t.yaml")


def test_tune_gemms_own_tuned_yaml_is_taken_by_compare(tmp_path):
    from harness.kernels import get
    from harness.report.compare import read_entries
    from harness.targets import load_targets

    target = load_targets(Path(__file__).parent.parent / "targets.yaml")["mi300"]
    entries = read_entries(DATA / "tune_gemm" / "fallback_tuned_configs.yaml", get("matmul"), target)
    assert len(entries) == len(yaml.safe_load((DATA / "tune_gemm" / "fallback_tuned_configs.yaml").read_text()))
    e = entries[0]
    assert e.shape.id == "4864x4096x4096_fp16_NT" and e.config["BLOCK_M"] == 256 and e.config["kpack"] == 2
    bad = tmp_path / "sched.yaml"
    bad.write_text("- {'M': 64, 'N': 64, 'K': 64, 'rowMajorA': 'T', 'rowMajorB': 'N', 'BLOCK_SIZE_M': 64, "
                   "'instruction_sched_variant': 'iglp0'}\n")
    with pytest.raises(HarnessError, match="iglp0"):
        read_entries(bad, get("matmul"), target)


# ------------------------------------------------------------------ vLLM / SGLang block-fp8 JSON


def vllm_configs(folder, N, K, device, block_n=128, block_k=128, sglang=False):
    """get_w8a8_block_fp8_configs: the file name it builds, {int(M): config}."""
    name = "N=%d,K=%d,device_name=%s,dtype=fp8_w8a8,block_shape=[%d,%s%d].json" % (
        N, K, device.replace(" ", "_"), block_n, " " if sglang else "", block_k)
    path = Path(folder) / name
    if not path.exists():
        return None
    return {int(k): v for k, v in json.loads(path.read_text()).items()}


def vllm_pick(configs, M):
    return configs[min(configs.keys(), key=lambda x: abs(x - M))]


def test_vllm_own_file_reads_with_our_reader():
    configs = vllm_configs(DATA / "vllm", 2112, 7168, "NVIDIA H100 80GB HBM3")
    assert vllm_pick(configs, 1000)["BLOCK_SIZE_M"] == 256 and vllm_pick(configs, 20) == configs[16]
    assert vllm_json.lookup(json.loads(next((DATA / "vllm").glob("*.json")).read_text()), 20) == configs[16]


@pytest.mark.parametrize("consumer", ["vllm", "sglang"])
def test_vllm_and_sglang_json_for_every_m(fp8_results, tmp_path, consumer):
    lines = []
    (path,) = vllm_json.write_vllm_json(fp8_results, None, META, tmp_path, consumer=consumer, say=lines.append)
    configs = vllm_configs(tmp_path, 2112, 7168, "AMD Instinct MI300X", sglang=consumer == "sglang")
    assert configs is not None and sorted(configs) == [1, 16, 200, 5000]

    def runs(cfg):  # their kernel: no split-K, BLOCK_K divides 128
        return cfg["SPLIT_K"] == 1 and 128 % cfg["BLOCK_K"] == 0

    wants = {}
    for m in (1, 16, 200, 5000):
        want = fastest(fp8_results, "%dx2112x7168_fp8e4m3fnuz" % m, runs)
        wants[m] = {"BLOCK_SIZE_M": want["BLOCK_M"], "BLOCK_SIZE_N": want["BLOCK_N"],
                    "BLOCK_SIZE_K": want["BLOCK_K"], "GROUP_SIZE_M": want["GROUP_M"],
                    "num_warps": want["num_warps"], "num_stages": want["num_stages"], "waves_per_eu": 0,
                    "matrix_instr_nonkdim": 16, "kpack": 1}
    for M in range(1, 6000):
        assert vllm_pick(configs, M) == wants[min((1, 16, 200, 5000), key=lambda x: abs(x - M))], M
    assert sum("splits K 2 ways" in line for line in lines) == len(FP8_SHAPES)


def test_vllm_refuses_the_matmul(matmul_results, tmp_path):
    with pytest.raises(HarnessError, match="fp8_blockscale"):
        vllm_json.write_vllm_json(matmul_results, None, META, tmp_path)


# ------------------------------------------------------------------ aiter's untuned lists


def read(name, problem=MATMUL, dtype="fp16"):
    lines = []
    shapes = sources.read(DATA / "aiter" / name, "auto", dtype, warn=lines.append, problem=problem)
    return shapes, lines


def rows_of(name):
    return len(pd.read_csv(DATA / "aiter" / name))


def test_a8w8_list_keeps_fp8_rows_apart_from_int8_rows():
    from harness.kernels.fp8_blockscale import PROBLEM as FP8

    shapes, lines = read("a8w8_untuned_gemm.csv", FP8, "fp8e4m3fn")
    listed = [line for line in lines if "not tuned" in line]
    assert len(shapes) + len(listed) == rows_of("a8w8_untuned_gemm.csv") == 66  # every row, one way or the other
    assert len(shapes) == 40 and all(s.dtype == "fp8e4m3fn" for s in shapes)  # the old reader: 62 fp16 shapes
    assert len(listed) == 26 and all("int8" in line for line in listed)
    assert any("scales per row and column" in line for line in lines)
    with pytest.raises(HarnessError, match="66 rows listed"):
        read("a8w8_untuned_gemm.csv")  # the matmul runs neither int8 nor fp8


def test_batched_list_weighs_each_shape_by_its_batch():
    shapes, lines = read("bf16_untuned_batched_gemm.csv")
    table = pd.read_csv(DATA / "aiter" / "bf16_untuned_batched_gemm.csv", skipinitialspace=True)
    assert len(shapes) == len(table) and all(s.dtype == "bf16" for s in shapes)
    assert [s.weight for s in shapes] == [float(b) for b in table["B"]]  # the old reader: weight 1
    assert any("batch count B" in line and "weighted by B" in line for line in lines)
    with pytest.raises(HarnessError, match="26 rows listed"):
        read("a8w8_untuned_batched_gemm.csv")  # aiter's a8w8 batched GEMM is int8


def test_bf16_list_lists_fp32_out_rows_instead_of_tuning_them_as_bf16():
    shapes, lines = read("bf16_untuned_gemm.csv")
    table = pd.read_csv(DATA / "aiter" / "bf16_untuned_gemm.csv")
    fp32_out = int((table["outdtype"] == "torch.float32").sum())
    listed = [line for line in lines if "outdtype torch.float32" in line]
    assert fp32_out == 112 and len(listed) == fp32_out
    kept_rows = len(table) - fp32_out
    merged = [line for line in lines if "its weight" in line]
    assert len(shapes) + len(merged) == kept_rows and sum(s.weight for s in shapes) == kept_rows
    assert all(dict(s.extra)["outdtype"] == "torch.bfloat16" for s in shapes)


def test_blockscale_list_feeds_fp8_blockscale_directly():
    from harness.api.build import read_shapes
    from harness.kernels import get
    from harness.targets import load_targets

    target = load_targets(Path(__file__).parent.parent / "targets.yaml")["mi300"]
    shapes = read_shapes(target, None, str(DATA / "aiter" / "a8w8_blockscale_untuned_gemm.csv"), "auto", None, 1.0,
                         None, get("fp8_blockscale"))  # the old path: exit 2, unknown dtype 'fp16'
    assert len(shapes) == rows_of("a8w8_blockscale_untuned_gemm.csv") == 80
    assert {s.dtype for s in shapes} == {"fp8e4m3fnuz"} and {s.layout for s in shapes} == {""}  # gfx942's


# ------------------------------------------------------------------ hipBLASLt --thr


def test_hipblaslt_thr_follows_measured_time_x_calls_where_the_log_has_it(tmp_path):
    from harness.shapes import hipblaslt_log
    from tests.test_shapes_sources import gemm_line

    # a big GEMM called once vs a small one called often: FLOPs x calls keep the big one, time x calls
    # (what hipBLASLt's workflow ranks by) the small one, which takes most of the workload's time
    big, small = gemm_line(4096, 4096, 4096, "T", "N", "bf16_r", 1), gemm_line(64, 64, 64, "T", "N", "bf16_r", 1000)
    plain = tmp_path / "plain.yaml"
    plain.write_text(big + "\n" + small + "\n")
    lines = []
    shapes = sources.read(plain, "auto", "fp16", thr=50.0, warn=lines.append)
    assert [s.id for s in shapes] == ["4096x4096x4096_bf16_NT"]
    assert any("FLOPs x calls (the log has no measured time)" in line for line in lines)
    timed = tmp_path / "timed.yaml"
    timed.write_text(big.replace("}", ", us: 900.0}") + "\n" + small.replace("}", ", us: 5.0}") + "\n")
    lines = []
    shapes = sources.read(timed, "auto", "fp16", thr=50.0, warn=lines.append)
    assert [s.id for s in shapes] == ["64x64x64_bf16_NT"]  # 5 us x 1000 calls against 900 us x 1
    assert any("measured time x calls (hipBLASLt's rule)" in line for line in lines)
    work = hipblaslt_log.load(timed, thr=0.0)
    assert [round(g.share, 2) for g in work.gemms] == [round(100 * 5000 / 5900, 2), round(100 * 900 / 5900, 2)]


def test_report_takes_the_vllm_and_sglang_formats():
    from harness.api.report import _formats

    assert _formats(["vllm,sglang", "triton"]) == ["vllm", "sglang", "triton"]  # before: unknown --format 'vllm'
