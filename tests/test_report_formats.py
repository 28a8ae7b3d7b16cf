"""Tuned outputs, each read back by what consumes it: the aiter/CK tuned CSV (pandas, aiter's
lookup by cu_num, M, N, K), Triton JSON (aiter's per-M-bucket config pick), the tune_gemm
YAML (yaml and the harness's own shapes reader), merging, counter correlation and uplift.

The results CSV is written the way the agent writes it (ResultsWriter, contract header) from
a deterministic model of kernel time, then read with pandas.
"""

import itertools
import json
import math
import statistics

import pandas as pd
import pytest
import yaml

from harness.errors import HarnessError
from harness.report import aiter_csv, counters, merge, triton_json, tune_gemm_yaml, uplift
from harness.report.common import Meta, tuned_best
from harness.shapes import read_shapes_file
from harness.shapes import tune_gemm_yaml as shapes_yaml
from harness.space import config_id
from remote_agent import contract
from remote_agent.results import ResultsWriter

META = {"arch": "gfx942", "device": "AMD Instinct MI300X", "cu_num": 304, "driver": "6.8.5 (amdgpu)",
        "toolchain": "triton 3.9.0 (hip gfx942)", "triton": "3.9.0"}
SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [64], "num_warps": [4, 8], "SPLIT_K": [1]}
SHAPES = ([(M, 4096, 4096, "bf16", "NT") for M in (1, 16, 32, 48, 64, 100, 128, 256, 1024)]
          + [(M, 1280, 8192, "bf16", "NT") for M in (16, 512)]
          + [(2048, 2048, 2048, "fp16", "TN")])
AITER_SHAPES = [x for x in SHAPES if x[4] == "NT"]  # aiter's GEMMs are X @ W^T: the TN shape is left out
WRONG = ((1024, 4096, 4096), {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "SPLIT_K": 1})


def sid(M, N, K, dtype, layout):
    return "%dx%dx%d_%s_%s" % (M, N, K, dtype, layout)


def model_ns(M, N, K, cfg, scale=1.0):
    """Kernel time: a right-sized BLOCK_M, a wide BLOCK_N on wide N, 8 warps on big tiles win."""
    best_bm = min(128, max(16, 2 ** math.ceil(math.log2(M))))
    f = 1.0 + 0.3 * abs(math.log2(cfg["BLOCK_M"] / best_bm))
    f *= (1.0 if cfg["BLOCK_N"] == 128 else 1.05) if N >= 2048 else (1.1 if cfg["BLOCK_N"] == 128 else 1.0)
    f *= (1.0 if cfg["num_warps"] == 8 else 1.04) if cfg["BLOCK_M"] >= 64 else (1.08 if cfg["num_warps"] == 8 else 1.0)
    return scale * (2.0 * M * N * K / 500e12 * 1e9 + 2000.0) * f


def lib_ns(M, N, K):
    base = 2.0 * M * N * K / 500e12 * 1e9 + 2000.0
    return base * (0.5 if M == 1 else 1.15)  # the library wins the M=1 GEMV


def simulate(path, scale=1.0, device="AMD Instinct MI300X", with_library=True):
    names = list(SPACE)
    header = contract.results_header(names, ["cache-misses", "instructions", "L2CacheHit"])
    writer = ResultsWriter(str(path), header)
    for (M, N, K, dtype, layout) in SHAPES:
        base = {"schema_version": contract.RESULTS_SCHEMA, "target": "mi300", "kernel": "matmul",
                "shape_id": sid(M, N, K, dtype, layout), "M": M, "N": N, "K": K, "dtype": dtype, "layout": layout,
                "device": device, "agent_version": contract.AGENT_VERSION, "host": "mi300-node-3",
                "timestamp": "2026-11-20T10:00:00+0000", "profiler": "events"}
        for n, values in enumerate(itertools.product(*(SPACE[k] for k in names))):
            cfg = dict(zip(names, values))
            row = dict(base, variant_id=config_id(cfg, salt=str(M % 16 == 0)))
            row.update({contract.CONFIG_PREFIX + k: v for k, v in cfg.items()})
            if cfg["BLOCK_M"] > 2 * max(M, 16):
                row.update(status=contract.PRUNED, message="tile_m_exceeds_dim: BLOCK_M larger than 2 M")
            elif ((M, N, K), cfg) == WRONG:
                row.update(status=contract.WRONG_ANSWER, rel_err=0.3, err_ratio=0.41, message="rel err 0.3")
            elif M == 256 and n == 3:
                row.update(status=contract.TIMEOUT, message="no answer in 10 s")
            else:
                t = model_ns(M, N, K, cfg, scale)
                err = 0.02 if (M == 100 and cfg["BLOCK_M"] == 128 and cfg["BLOCK_N"] == 128) else 0.0
                row.update(status=contract.OK, time_ns_median=round(t, 1), time_ns_min=round(0.97 * t, 1),
                           time_ns_p20=round(0.99 * t, 1), time_ns_p80=round(1.01 * t, 1), iterations=200,
                           tflops=round(2.0 * M * N * K / t / 1e3, 4), gbps=round(2.0 * (M * K + K * N + M * N) / t, 4),
                           rel_err=1e-3, max_abs_err=4e-3, err_ratio=err,
                           **{"ctr_cache_misses": round(2.1 * t), "ctr_instructions": 1000000 + (n * 37) % 11})
            writer.write(row)
        if with_library:
            libs = ["lib:hipblaslt", "lib:torch.matmul"] if (M, N) == (16, 1280) else ["lib:hipblaslt"]
            for i, name in enumerate(libs):
                t = lib_ns(M, N, K) * (1.0 + 0.1 * i)
                writer.write(dict(base, variant_id=name, status=contract.OK, time_ns_median=round(t, 1),
                                  time_ns_min=round(t, 1), time_ns_p20=round(t, 1), time_ns_p80=round(t, 1),
                                  iterations=200, tflops=round(2.0 * M * N * K / t / 1e3, 4), rel_err=0.0,
                                  err_ratio=0.0, profiler="torch"))
    writer.close()
    return pd.read_csv(path, dtype={"variant_id": str, "shape_id": str, "device": str})


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("res") / "results.csv")


def expected_best(df, layout=None):
    """Independently: per shape, the fastest ok row whose variant is not a library."""
    ok = df[(df["status"] == "ok") & ~df["variant_id"].str.startswith("lib:")]
    ok = ok if layout is None else ok[ok["layout"] == layout]
    return ok.loc[ok.groupby("shape_id")["time_ns_median"].idxmin()].set_index("shape_id")


def cfg_of(row):
    return {k: int(row["cfg_" + k]) for k in SPACE}


# ------------------------------------------------------------------ aiter / CK tuned CSV


def test_aiter_tuned_csv_read_back_by_pandas_and_aiter_lookup(results, tmp_path):
    out, allc = aiter_csv.write_tuned_csv(results, None, META, tmp_path / "tuned.csv",
                                          all_path=tmp_path / "tuned_all.csv")
    tuned = pd.read_csv(out)
    assert list(tuned.columns) == ["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB",
                                   "bpreshuffle", "libtype", "solidx", "splitK", "us", "kernelName", "err_ratio",
                                   "tflops", "bw", "kernelId", "layout", "device", "driver", "toolchain", "triton"]
    assert len(tuned) == len(AITER_SHAPES) and not tuned["kernelId"].str.startswith("lib:").any()
    assert set(tuned["gfx"]) == {"gfx942"} and set(tuned["cu_num"]) == {304}
    assert set(tuned["device"]) == {"AMD Instinct MI300X"} and set(tuned["triton"].astype(str)) == {"3.9.0"}
    assert set(tuned["driver"]) == {"6.8.5 (amdgpu)"} and set(tuned["toolchain"]) == {"triton 3.9.0 (hip gfx942)"}

    # what aiter does with it: index by (cu_num, M, N, K) and take the kernel
    lookup = tuned.set_index(["cu_num", "M", "N", "K"]).to_dict("index")
    best = expected_best(results)
    for (M, N, K, dtype, layout) in AITER_SHAPES:
        entry = lookup[(304, M, N, K)]
        row = best.loc[sid(M, N, K, dtype, layout)]
        assert entry["kernelId"] == row["variant_id"]
        assert entry["us"] == pytest.approx(row["time_ns_median"] / 1e3, abs=1e-4)
        assert entry["kernelName"] == "matmul_" + "_".join("%s%d" % (k, v) for k, v in cfg_of(row).items())
        assert entry["splitK"] == 0 and entry["dtype"] == "torch.bfloat16" and entry["layout"] == layout
    # the wrong answer (the fastest config on 1024) never wins
    assert lookup[(304, 1024, 4096, 4096)]["kernelName"] != "matmul_BLOCK_M128_BLOCK_N128_BLOCK_K64_num_warps8_SPLIT_K1"
    assert lookup[(304, 64, 4096, 4096)]["kernelName"] == "matmul_BLOCK_M64_BLOCK_N128_BLOCK_K64_num_warps8_SPLIT_K1"

    # -o2: every candidate (pruned ones are not candidates), failures with an empty time
    every = pd.read_csv(allc)
    assert list(every.columns) == list(tuned.columns) + ["status"]
    kernels = results[~results["variant_id"].str.startswith("lib:") & (results["status"] != "pruned")
                      & (results["layout"] == "NT")]
    assert len(every) == len(kernels)
    assert set(every["status"]) == {"ok", "wrong_answer", "timeout"}
    assert every.loc[every["status"] != "ok", "us"].isna().all()
    for (M, N, K), group in every.groupby(["M", "N", "K"], sort=False):
        assert group.iloc[0]["kernelId"] == lookup[(304, M, N, K)]["kernelId"]  # fastest first
        ok_us = group.loc[group["status"] == "ok", "us"].tolist()
        assert ok_us == sorted(ok_us)


def test_aiter_tuned_csv_sort_and_untuned_columns_come_back(results, tmp_path):
    untuned = tmp_path / "bf16_untuned_gemm.csv"
    rows = ["M,N,K,bias,dtype,outdtype"] + ["%d,%d,%d,False,torch.bfloat16,torch.bfloat16" % s[:3]
                                            for s in SHAPES if s[3] == "bf16"]
    untuned.write_text("\n".join(rows) + "\n")
    shapes = read_shapes_file(str(untuned))
    (out,) = aiter_csv.write_tuned_csv(results, None, META, tmp_path / "bf16_tuned_gemm.csv", sort=True, shapes=shapes)
    tuned = pd.read_csv(out)
    assert list(tuned.columns) == aiter_csv.columns()  # aiter's key columns: what was measured
    keys = list(zip(tuned["M"], tuned["N"], tuned["K"]))
    assert keys == sorted(keys)
    assert set(tuned["dtype"]) == {"torch.bfloat16"} and set(tuned["outdtype"]) == {"torch.bfloat16"}
    assert 2048 not in set(tuned["N"])  # the fp16 TN shape: no aiter GEMM


def test_meta_is_checked(results, tmp_path):
    with pytest.raises(HarnessError, match="unknown metadata key"):
        aiter_csv.write_tuned_csv(results, None, dict(META, gpu="x"), tmp_path / "t.csv")
    assert Meta.coerce({"arch": "sm90"}, results).device == "AMD Instinct MI300X"  # from the rows
    only_lib = results[results["variant_id"].str.startswith("lib:")]
    with pytest.raises(HarnessError, match="no shape has an ok kernel result"):
        aiter_csv.write_tuned_csv(only_lib, None, META, tmp_path / "t.csv")


# ------------------------------------------------------------------ Triton JSON


def aiter_get_config(config_dir, arch, family, M, N, K):
    """aiter's get_gemm_config on the flat folder: the (N, K) file if there is one, else the
    default; M_LEQ ascending, M_GEQ descending, any (tests/test_consumer_formats.py has the full rule)."""
    special = config_dir / ("%s-%s-N=%d-K=%d.json" % (arch, family, N, K))
    default = config_dir / "default" / ("%s-%s.json" % (arch, family))
    configs = json.loads((special if special.exists() else default).read_text())
    bounds = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    for b in bounds:
        if M <= b and "M_LEQ_%d" % b in configs:
            return configs["M_LEQ_%d" % b]
    for b in reversed(bounds):
        if M >= b and "M_GEQ_%d" % b in configs:
            return configs["M_GEQ_%d" % b]
    return configs["any"]


def from_triton(cfg):
    names = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K", "NUM_KSPLIT": "SPLIT_K"}
    return {names.get(k, k): v for k, v in cfg.items() if k not in triton_json.REQUIRED or k == "NUM_KSPLIT"}


def test_triton_json_picks_a_config_per_m_key(results, tmp_path):
    lines = []
    paths = triton_json.write_triton_json(results, None, META, tmp_path / "configs", say=lines.append)
    names = sorted(p.name for p in paths)
    assert names == ["gfx942-GEMM-A16W16-N=1280-K=8192.json", "gfx942-GEMM-A16W16-N=4096-K=4096.json",
                     "gfx942-GEMM-A16W16.json"]
    assert lines == ["triton: 2048x2048x2048_fp16_TN left out: aiter's Triton GEMM-A16W16 is X @ W^T (layout NT) "
                     "in fp16 or bf16"]
    best = expected_best(results)
    d = tmp_path / "configs"
    # a key with one tuned M gets that M's best config
    for M in (32, 100, 256, 1024):
        got = from_triton(aiter_get_config(d, "gfx942", "GEMM-A16W16", M, 4096, 4096))
        assert got == cfg_of(best.loc[sid(M, 4096, 4096, "bf16", "NT")]), M
    assert from_triton(aiter_get_config(d, "gfx942", "GEMM-A16W16", 1, 4096, 4096)) == cfg_of(
        best.loc[sid(1, 4096, 4096, "bf16", "NT")])
    # M_LEQ_16 holds 16 alone; M_LEQ_64 holds 48 and 64: the config slowest by the least on both
    ok = results[(results["status"] == "ok") & ~results["variant_id"].str.startswith("lib:") & (results["N"] == 4096)]
    sub = ok[ok["M"].isin((48, 64))].copy()
    sub["rel"] = sub["time_ns_median"] / sub.groupby("M")["time_ns_median"].transform("min")
    sub["cfg"] = sub.apply(lambda r: tuple(cfg_of(r).items()), axis=1)
    full = sub.groupby("cfg").filter(lambda g: g["M"].nunique() == 2)
    want = dict(full.groupby("cfg")["rel"].mean().idxmin())
    assert from_triton(aiter_get_config(d, "gfx942", "GEMM-A16W16", 50, 4096, 4096)) == want
    # an (N, K) not tuned falls back to the default file (in default/: aiter ships its own)
    default = json.loads((d / "default" / "gfx942-GEMM-A16W16.json").read_text())
    assert aiter_get_config(d, "gfx942", "GEMM-A16W16", 8, 999, 999) == default["M_LEQ_16"]
    # above the largest tuned M: that M's config through M_GEQ; metadata rides along under _harness
    spec = json.loads((d / "gfx942-GEMM-A16W16-N=4096-K=4096.json").read_text())
    assert from_triton(spec["M_GEQ_1024"]) == cfg_of(best.loc[sid(1024, 4096, 4096, "bf16", "NT")])
    assert spec["_harness"]["device"] == "AMD Instinct MI300X" and spec["_harness"]["cu_num"] == 304
    assert spec["_harness"]["triton"] == "3.9.0" and spec["_harness"]["tuned_M"]["M_LEQ_64"] == [48, 64]
    assert triton_json.pick_config(spec, 2000) == spec["M_GEQ_1024"]  # the harness's copy of aiter's rule


def test_triton_json_needs_an_arch(results, tmp_path):
    with pytest.raises(HarnessError, match="arch"):
        triton_json.write_triton_json(results, None, dict(META, arch=""), tmp_path)
    assert triton_json.key_for(31) == "M_LEQ_32" and triton_json.key_for(33) == "M_LEQ_64"
    assert triton_json.key_for(1) == "M_LEQ_1" and triton_json.key_for(8193) == "M_GEQ_8192"


# ------------------------------------------------------------------ tune_gemm YAML


def test_tune_gemm_yaml_loads_and_reads_back_as_shapes_with_configs(results, tmp_path):
    path = tune_gemm_yaml.write_tuned_yaml(results, None, META, tmp_path / "tuning_results.yaml")
    text = path.read_text()
    assert "# arch: gfx942" in text and "# cu_num: 304" in text and "# triton: 3.9.0" in text
    items = yaml.safe_load(text)
    assert isinstance(items, list) and len(items) == len(SHAPES)
    best = expected_best(results)
    for item in items:
        M, N, K = item["M"], item["N"], item["K"]
        # tune_gemm's process_item: rowMajor 'T' = row-major; our NT is their TN
        layout = "NT" if (item["rowMajorA"], item["rowMajorB"]) == ("T", "N") else "TN"
        assert (item["rowMajorA"], item["rowMajorB"]) in (("T", "N"), ("N", "T"))
        row = best.loc[sid(M, N, K, item["dtype"], layout)]
        assert {k: item[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "SPLIT_K")} == {
            "BLOCK_SIZE_M": cfg_of(row)["BLOCK_M"], "BLOCK_SIZE_N": cfg_of(row)["BLOCK_N"],
            "BLOCK_SIZE_K": 64, "num_warps": cfg_of(row)["num_warps"], "SPLIT_K": 1}
    # and the harness reads it as a shapes file (compare-without-tuning starts here)
    shapes = read_shapes_file(str(path))
    assert sorted(s.id for s in shapes) == sorted(best.index)
    for s in shapes:
        want = cfg_of(best.loc[s.id])
        assert {k: v for k, v in shapes_yaml.config_of(s).items() if k in want} == want
    frame, meta = tune_gemm_yaml.read_tuned_yaml(path)
    assert meta["device"] == "AMD Instinct MI300X"
    assert frame["us"].tolist() == pytest.approx([best.loc[sid(r.M, r.N, r.K, r.dtype, "NT" if r.rowMajorA == "T" else "TN"),
                                                           "time_ns_median"] / 1e3 for r in frame.itertuples()], abs=0.01)


# ------------------------------------------------------------------ merging


def test_merge_csv_keeps_fastest_and_refuses_other_arch(tmp_path):
    fast = simulate(tmp_path / "a.csv", scale=0.9)
    slow = simulate(tmp_path / "b.csv", scale=1.0)
    (a,) = aiter_csv.write_tuned_csv(fast[fast["M"] <= 128], None, META, tmp_path / "a_tuned.csv")
    (b,) = aiter_csv.write_tuned_csv(slow, None, META, tmp_path / "b_tuned.csv")
    out = merge.merge_tuned([b, a], tmp_path / "merged.csv")
    merged = pd.read_csv(out)
    ta, tb = pd.read_csv(a), pd.read_csv(b)
    assert list(merged.columns) == list(tb.columns)
    assert len(merged) == len(AITER_SHAPES) and not merged.duplicated(["M", "N", "K"]).any()
    for _, row in merged.iterrows():
        candidates = pd.concat([ta, tb])
        same = candidates[(candidates["M"] == row["M"]) & (candidates["N"] == row["N"]) & (candidates["K"] == row["K"])]
        assert row["us"] == same["us"].min()
    key = ["M", "N", "K"]
    from_a = merged.merge(ta[key + ["us"]], on=key, suffixes=("", "_a"))
    assert len(from_a) == len(ta) and (from_a["us"] == from_a["us_a"]).all()  # the faster run won there
    rest = merged[merged["M"] > 128].merge(tb[key + ["us", "kernelId"]], on=key, suffixes=("", "_b"))
    assert (rest["us"] == rest["us_b"]).all() and (rest["kernelId"] == rest["kernelId_b"]).all()

    (other,) = aiter_csv.write_tuned_csv(slow, None, dict(META, arch="gfx950", cu_num=256,
                                                          device="AMD Instinct MI355X"), tmp_path / "c_tuned.csv")
    with pytest.raises(HarnessError) as err:
        merge.merge_tuned([a, other], tmp_path / "m2.csv")
    assert "different arch" in str(err.value) and "gfx950" in str(err.value) and "--force" in str(err.value)
    forced = pd.read_csv(merge.merge_tuned([a, other], tmp_path / "m2.csv", force=True))
    assert len(forced) == len(ta) + len(AITER_SHAPES)  # both archs keep their rows
    same_arch_other_device = aiter_csv.write_tuned_csv(slow, None, dict(META, device="AMD Instinct MI300A"),
                                                       tmp_path / "d_tuned.csv")[0]
    with pytest.raises(HarnessError, match="different device"):
        merge.merge_tuned([a, same_arch_other_device], tmp_path / "m3.csv")


def test_merge_reads_aiter_own_files_with_gfx_column(tmp_path):
    own = tmp_path / "a8w8_tuned_gemm.csv"
    own.write_text(
        "gfx,cu_num,M,N,K,q_dtype_w,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
        "gfx942,80,1,1280,8192,torch.int8,34,0,20.5611,a8w8_rowwise_256x16x64x512,1.02,510.5,0.0\n"
        "gfx942,80,32,1280,8192,torch.int8,34,0,19.9841,a8w8_rowwise_256x16x64x512,33.58,541.92,0.0\n")
    newer = tmp_path / "a8w8_tuned_gemm_new.csv"
    newer.write_text(
        "gfx,cu_num,M,N,K,q_dtype_w,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
        "gfx942,80,1,1280,8192,torch.int8,78,0,18.0,a8w8_rowwise_64x16x16x128,1.16,580.0,0.0\n"
        "gfx942,80,64,1280,8192,torch.int8,21,0,19.65,a8w8_rowwise_256x64x128x256,68.3,568.4,0.0\n")
    merged = pd.read_csv(merge.merge_tuned([own, newer], tmp_path / "out.csv"))
    assert list(merged.columns)[:5] == ["gfx", "cu_num", "M", "N", "K"]
    assert merged[["M", "kernelId"]].values.tolist() == [[1, 78], [32, 34], [64, 21]]


def test_merge_yaml_and_refusals(results, tmp_path):
    a = tune_gemm_yaml.write_tuned_yaml(results, None, META, tmp_path / "a.yaml")
    faster = simulate(tmp_path / "f.csv", scale=0.5)
    b = tune_gemm_yaml.write_tuned_yaml(faster[faster["M"] == 64], None, META, tmp_path / "b.yaml")
    out = merge.merge_tuned([a, b], tmp_path / "merged.yaml")
    items = yaml.safe_load(out.read_text())
    assert len(items) == len(SHAPES)
    frame, meta = tune_gemm_yaml.read_tuned_yaml(out)
    assert meta["arch"] == "gfx942"
    us64 = frame.loc[(frame["M"] == 64), "us"].iloc[0]
    assert us64 == pytest.approx(tune_gemm_yaml.read_tuned_yaml(b)[0]["us"].iloc[0])
    c = tune_gemm_yaml.write_tuned_yaml(results, None, dict(META, arch="sm90", device="NVIDIA H100"), tmp_path / "c.yaml")
    with pytest.raises(HarnessError, match="different arch"):
        merge.merge_tuned([a, c], tmp_path / "m.yaml")
    with pytest.raises(HarnessError, match="different kinds"):
        merge.merge_tuned([a, tmp_path / "x.csv"], tmp_path / "m.yaml")


# ------------------------------------------------------------------ counters and uplift


def test_counter_correlation_lists_counters_that_track_time(results, tmp_path):
    table = counters.counter_correlation(results, threshold=0.9)
    assert list(table.columns) == counters.COLUMNS
    cycles = table[table["counter"] == "cache_misses"]
    assert len(cycles) == len(SHAPES) and (cycles["r"] > 0.999).all() and cycles["listed"].all()
    instr = table[table["counter"] == "instructions"]
    assert not instr["listed"].any() and (instr["abs_r"] < 0.9).all()
    assert "L2CacheHit" not in set(table["counter"])  # never measured: no r, not a zero
    # n: the ok variants of the shape (pruned, wrong and timed-out ones have no time)
    ok = results[(results["status"] == "ok") & ~results["variant_id"].str.startswith("lib:")]
    assert cycles.set_index("shape_id")["n"].to_dict() == ok.groupby("shape_id").size().to_dict()
    path = counters.write_counter_correlation(results, tmp_path / "corr.csv", threshold=0.9)
    listed = pd.read_csv(path)
    assert set(listed["counter"]) == {"cache_misses"} and list(listed.columns) == counters.COLUMNS
    # the threshold is inclusive, and library rows never count
    edge = instr["abs_r"].max()
    again = counters.counter_correlation(results, threshold=edge)
    assert again.loc[(again["counter"] == "instructions") & (again["abs_r"] == edge), "listed"].all()
    assert counters.counter_correlation(results[results["variant_id"].str.startswith("lib:")]).empty


def test_library_uplift_filter_and_weighted_total(results, tmp_path):
    summary_csv = tmp_path / "log_summary.csv"
    # weights as the hipBLASLt summary CSV gives them: shape_id, weight (calls x batch)
    weights = {sid(*s): (100 if s[0] == 1 else 10) for s in SHAPES}
    pd.DataFrame({"shape_id": list(weights), "weight": list(weights.values())}).to_csv(summary_csv, index=False)
    table, summary = uplift.library_uplift(results, None, summary_csv, max_err_ratio=0.01)
    assert list(table.columns) == uplift.COLUMNS
    t = table.set_index("shape_id")
    best = expected_best(results)
    for s in SHAPES:
        M, N, K = s[:3]
        row = t.loc[sid(*s)]
        assert row["library_ns"] == pytest.approx(lib_ns(M, N, K), abs=0.1)  # fastest library row
        assert row["speedup"] == pytest.approx(row["library_ns"] / best.loc[sid(*s), "time_ns_median"])
    assert t.loc[sid(16, 1280, 8192, "bf16", "NT"), "library"] == "lib:hipblaslt"
    gemv = t.loc[sid(1, 4096, 4096, "bf16", "NT")]
    assert not gemv["kept"] and gemv["reason"] == "not faster than lib:hipblaslt" and gemv["uplift_pct"] < 0
    m100 = t.loc[sid(100, 4096, 4096, "bf16", "NT")]
    assert not m100["kept"] and m100["reason"].startswith("err_ratio 0.02")
    assert t["kept"].sum() == len(SHAPES) - 2
    # the table says which shapes fall back to the library: the two dropped entries
    fell_back = [sid(1, 4096, 4096, "bf16", "NT"), sid(100, 4096, 4096, "bf16", "NT")]
    assert sorted(t.index[t["uses"] == "library"]) == sorted(fell_back)
    assert (t.loc[t["kept"], "uses"] == "tuned").all() and sorted(summary["fell_back"]) == sorted(fell_back)
    # weighted total: dropped entries fall back to the library time
    used = t.apply(lambda r: r["tuned_ns"] if r["kept"] else r["library_ns"], axis=1)
    w = pd.Series(weights)
    want = (w * t["library_ns"]).sum() / (w * used).sum()
    assert summary["weighted_speedup"] == pytest.approx(want)
    assert summary["weighted_uplift_pct"] == pytest.approx((want - 1) * 100)
    assert summary["kept"] == len(SHAPES) - 2 and summary["compared"] == len(SHAPES)

    keep = uplift.keep_faster_than_library(results, None, max_err_ratio=0.01)
    assert len(keep) == len(SHAPES) - 2 and sid(1, 4096, 4096, "bf16", "NT") not in set(keep["shape_id"])
    (out,) = aiter_csv.write_tuned_csv(results, keep, META, tmp_path / "filtered.csv")
    written = pd.read_csv(out)
    assert len(written) == len(AITER_SHAPES) - 2 and 1 not in set(written["M"]) and 100 not in set(written["M"])
    # a best table that names the library for a shape still gets the fastest kernel there
    with_lib = results[results["variant_id"] == "lib:hipblaslt"]
    assert len(tuned_best(results, with_lib)) == len(SHAPES)
    assert not tuned_best(results, with_lib)["variant_id"].str.startswith("lib:").any()
    path, s2 = uplift.write_uplift(results, None, tmp_path / "uplift.csv", weights=weights)
    assert list(pd.read_csv(path).columns) == uplift.COLUMNS and s2["dropped"] == 1


def test_report_table_says_which_shapes_fall_back_to_the_library(results, tmp_path, capsys, monkeypatch):
    from harness import ui
    from harness.api.report import _uplift

    monkeypatch.setattr(ui.out, "_width", 250)
    _uplift(results, None, tmp_path, "matmul", None, 0.01)
    out = capsys.readouterr().out
    assert "2 of %d shapes fall back to the library" % len(SHAPES) in out
    for s in SHAPES:
        row = next(l for l in out.splitlines() if l.startswith("│ %s " % sid(*s)))
        uses = row.rstrip(" │").rsplit("│", 1)[1].strip()
        assert uses == ("library" if s[0] in (1, 100) else "tuned"), row


def test_uplift_without_library_rows_keeps_everything(tmp_path):
    df = simulate(tmp_path / "r.csv", with_library=False)
    table, summary = uplift.library_uplift(df)
    assert table["kept"].all() and set(table["reason"]) == {"no library time"}
    assert summary["weighted_speedup"] is None and summary["compared"] == 0


def test_tuned_csv_configs_come_back_for_compare_without_tuning(results, tmp_path):
    (out,) = aiter_csv.write_tuned_csv(results, None, META, tmp_path / "tuned.csv")
    pairs = aiter_csv.read_tuned_configs(out)
    best = expected_best(results, "NT")
    assert sorted(s.id for s, _ in pairs) == sorted(best.index)
    for shape, config in pairs:
        assert config == cfg_of(best.loc[shape.id])
    bad = tmp_path / "bad.csv"
    frame = pd.read_csv(out)
    frame.loc[2, "kernelName"] = "a8w8_rowwise_256x16x64x512_16x16"
    frame.to_csv(bad, index=False)
    with pytest.raises(HarnessError) as err:
        aiter_csv.read_tuned_configs(bad)
    assert err.value.where == "%s:4" % bad and "does not spell a config" in str(err.value)
    assert aiter_csv.parse_kernel_name("flash_attn_BLOCK_M64_num_warps4", kernel="flash_attn") == {
        "BLOCK_M": 64, "num_warps": 4}


def test_uplift_times_the_library_over_the_remeasure_rounds(tmp_path):
    """The library joins every round of a winners' re-measure; its time is then taken over those
    rounds as the winner's is (here the median: GPU rows), not from its latest row alone, and
    neither its search row nor a failed round counts. The rounds are an H200's (4096x51200x5120 fp8:
    its latest round alone read 1799.9 us, as fast as a winner whose median was 1800.2)."""
    import csv as csv_mod

    from harness.api.report import with_library_times
    from harness.remeasure import library_times

    rounds = [1963.6, 1885.3, 1863.4, 1878.5, 1967.6, 1873.2, 1871.8, 1873.2, 1869.2, 1799.9]
    rows = [dict(shape_id="s1", variant_id="lib:torch._scaled_mm", status="ok", time_ns=1765.5, estimator="median"),
            dict(shape_id="s2", variant_id="lib:torch._scaled_mm", status="ok", time_ns=50.0, estimator="median")]
    rows += [dict(shape_id="s1", variant_id="lib:torch._scaled_mm", status="ok", time_ns=t, estimator="median")
             for t in rounds]
    rows += [dict(shape_id="s1", variant_id="lib:torch._scaled_mm", status="timeout", time_ns="", estimator="median"),
             dict(shape_id="s1", variant_id="v1", status="ok", time_ns=1800.2, estimator="median")]
    results = tmp_path / "results.csv"
    with results.open("w", newline="") as f:
        w = csv_mod.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (tmp_path / "winners.json").write_text(json.dumps({
        "shapes": {"s1": {"variant_id": "v1", "median_ns": 1800.2, "estimator": "median"}},
        "remeasure_rows": list(range(2, len(rows))), "sift_rows": []}))
    times = library_times(results)
    assert times == {"s1": pytest.approx(statistics.median(rounds))}  # 1873.2, not 1799.9 nor 1765.5
    df = pd.DataFrame([dict(r, time_ns=float(r["time_ns"] or "nan")) for r in (rows[1], rows[11], rows[-1])])
    out = with_library_times(df, times)
    assert list(out["time_ns"]) == [50.0, pytest.approx(1873.2), 1800.2]  # s2 (no re-measure) and v1 unchanged
    assert list(df["time_ns"]) == [50.0, 1799.9, 1800.2]  # the caller's frame is left alone
