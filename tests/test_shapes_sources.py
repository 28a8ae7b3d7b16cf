"""Shape sources: tune_gemm YAML, aiter/CK untuned CSV, hipBLASLt logs, plain lists.

Files are written as users have them: a hipBLASLt log captured with HIPBLASLT_LOG_MASK=64/128,
a tune_gemm --gemm_size_file list, an aiter untuned CSV.
"""

import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.shapes import read_shapes_file, sources
from harness.shapes import hipblaslt_log, tune_gemm_yaml

# One line exactly as hipBLASLt writes it (from the hipBLASLt tuning workflow's docs).
DOC_LINE = (
    "- {function: matmul, M: 16032, N: 109, K: 16384, lda: 16384, ldb: 16384, ldc: 16032, ldd: 16032, "
    "stride_a: 0, stride_b: 0, stride_c: 0, stride_d: 0, alpha: 1.0, beta: 0.0, transA: T, transB: N, "
    "batch_count: 1, scaleA: 0, scaleB: 0, scaleAlpha_vector: false, gradient: false, use_e: false, "
    "bias_vector: false, bias_source: d, a_type: bf16_r, b_type: bf16_r, c_type: bf16_r, d_type: bf16_r, "
    "scale_type: f32_r, bias_type: f32_r, compute_type: c_f32_r, activation_type: none, flush: false, "
    "rotating: 512, cold_iters: 0, iters: 0, call_count: 1}")


def gemm_line(M, N, K, ta, tb, dtype, calls, batch=1, compute="c_f32_r", extended=False):
    """A profile line with the fields hipBLASLt fills in (column-major leading dimensions)."""
    lda = K if ta == "T" else M
    ldb = N if tb == "T" else K
    fields = [
        "function: matmul", "M: %d" % M, "N: %d" % N, "K: %d" % K, "lda: %d" % lda, "ldb: %d" % ldb,
        "ldc: %d" % M, "ldd: %d" % M, "stride_a: %d" % (0 if batch == 1 else M * K),
        "stride_b: %d" % (0 if batch == 1 else K * N), "stride_c: %d" % (0 if batch == 1 else M * N),
        "stride_d: %d" % (0 if batch == 1 else M * N), "alpha: 1.0", "beta: 0.0", "transA: %s" % ta,
        "transB: %s" % tb, "batch_count: %d" % batch, "scaleA: 0", "scaleB: 0", "scaleAlpha_vector: false",
        "gradient: false", "use_e: false", "bias_vector: false", "bias_source: d",
        "a_type: %s" % dtype, "b_type: %s" % dtype, "c_type: %s" % dtype, "d_type: %s" % dtype,
        "scale_type: f32_r", "bias_type: f32_r", "compute_type: %s" % compute, "activation_type: none",
        "flush: false", "rotating: 512", "cold_iters: 0", "iters: 0",
    ]
    if extended:  # HIPBLASLT_LOG_MASK=128 adds what the heuristic picked
        fields += ["aux_type: f32_r", "solution_index: 117243", "algo_method: heuristic"]
    fields.append("call_count: %d" % calls)
    return "- {" + ", ".join(fields) + "}"


# (line number in the file) -> what is on it
LOG_LINES = [
    DOC_LINE,                                                                      # 1
    gemm_line(4096, 4096, 4096, "T", "N", "bf16_r", 100),                          # 2
    gemm_line(8192, 1024, 4096, "N", "N", "f16_r", 50),                            # 3
    gemm_line(128, 4096, 4096, "N", "T", "f32_r", 10),                             # 4
    gemm_line(4096, 4096, 4096, "T", "N", "f8_r", 40),                             # 5: types not tuned here
    gemm_line(512, 512, 64, "T", "N", "bf16_r", 200, batch=96),                    # 6: batched attention GEMM
    gemm_line(1, 4096, 4096, "T", "N", "bf16_r", 3),                               # 7: tiny share
    "[2026-11-20 10:01:02][HIPBLASLT][1862601][Api][rocblaslt_matmul] A=0x7f1c M=4096 N=4096",  # 8: trace
    "- {function: matmul, M: 2048, N: 2048, K: 2048, lda: 2048, ldb: 2048, transA: T",         # 9: cut off
    gemm_line(4096, 4096, 4096, "T", "N", "bf16_r", 28),                           # 10: same GEMM again
    gemm_line(2048, 8192, 1024, "T", "N", "bf16_r", 5, extended=True),             # 11: mask 128 line
    gemm_line(3072, 3072, 3072, "T", "N", "bf16_r", 5).replace("M: 3072", "M: 30x72"),  # 12: bad value
    gemm_line(256, 256, 256, "C", "N", "bf16_r", 5),                               # 13: conjugate
    "",
]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def flops_calls(M, N, K, calls, batch=1):
    return 2 * M * N * K * batch * calls


def test_hipblaslt_log_is_weighted_grouped_cut_at_thr_and_summarised(tmp_path):
    log = write(tmp_path, "hipblaslt-log-mask64.yaml", "\n".join(LOG_LINES))
    assert sources.detect(log.read_text()) == "hipblaslt"
    warnings = []
    summary = tmp_path / "out" / "summary.csv"
    shapes = sources.read(log, "auto", "fp32", thr=1.0, summary_path=summary, warn=warnings.append)

    # the weighted contributions, computed independently
    contrib = {
        "16032x109x16384_bf16_NT": flops_calls(16032, 109, 16384, 1),
        "4096x4096x4096_bf16_NT": flops_calls(4096, 4096, 4096, 128),
        "8192x1024x4096_fp16_TT": flops_calls(8192, 1024, 4096, 50),
        "128x4096x4096_fp32_TN": flops_calls(128, 4096, 4096, 10),
        "f8": flops_calls(4096, 4096, 4096, 40),
        "512x512x64_bf16_NT": flops_calls(512, 512, 64, 200, batch=96),
        "1x4096x4096_bf16_NT": flops_calls(1, 4096, 4096, 3),
        "2048x8192x1024_bf16_NT": flops_calls(2048, 8192, 1024, 5),
    }
    total = sum(contrib.values())
    share = {k: 100.0 * v / total for k, v in contrib.items()}
    expected = [k for k in sorted(share, key=share.get, reverse=True) if k != "f8" and share[k] >= 1.0]
    assert [s.id for s in shapes] == expected  # kept, largest share first
    assert "1x4096x4096_bf16_NT" not in expected and "16032x109x16384_bf16_NT" not in expected

    by_id = {s.id: s for s in shapes}
    big = by_id["4096x4096x4096_bf16_NT"]
    assert big.weight == 128  # 100 + 28 calls of one GEMM logged on two lines
    extra = dict(big.extra)
    assert extra["calls"] == 128 and extra["transA"] == "T" and extra["transB"] == "N"
    assert extra["group"] == "bf16_r/bf16_r/bf16_r/bf16_r/c_f32_r/TN" and extra["line"] == 2
    assert extra["share"] == pytest.approx(share["4096x4096x4096_bf16_NT"], rel=1e-5)
    assert by_id["512x512x64_bf16_NT"].weight == 200 * 96  # every batch entry is one M x N x K product
    assert dict(by_id["512x512x64_bf16_NT"].extra)["batch_count"] == 96
    # column-major transposes -> our storage letters; a_type -> dtype
    assert by_id["8192x1024x4096_fp16_TT"].dtype == "fp16"   # hipBLASLt NN

    # every bad line reported with its line number, and nothing else lost
    text = "\n".join(warnings)
    assert "hipblaslt-log-mask64.yaml:8: skipped: not a hipBLASLt profile line" in text
    assert "hipblaslt-log-mask64.yaml:9: skipped: the line is cut off" in text
    assert "hipblaslt-log-mask64.yaml:12: skipped: M: '30x72' is not a whole number" in text
    assert "hipblaslt-log-mask64.yaml:13: skipped: transA: 'C' is not N or T" in text
    assert "f8_r/f8_r/f8_r/f8_r/c_f32_r/TN" in text and "left out" in text
    assert len([w for w in warnings if "skipped" in w]) == 4

    # the summary CSV, read by pandas with its exact columns
    table = pd.read_csv(summary)
    assert list(table.columns) == hipblaslt_log.SUMMARY_COLUMNS
    assert list(table.columns[:4]) == ["shape", "group", "calls", "share"]
    assert len(table) == 8  # distinct GEMMs, kept or not
    assert table["share"].sum() == pytest.approx(100.0, abs=1e-3)
    assert list(table["share"]) == sorted(table["share"], reverse=True)
    f8 = table[table["a_type"] == "f8_r"].iloc[0]
    assert not f8["kept"] and pd.isna(f8["shape_id"]) and f8["calls"] == 40
    row = table[table["shape_id"] == "4096x4096x4096_bf16_NT"].iloc[0]
    assert row["shape"] == "4096x4096x4096" and row["calls"] == 128 and row["kept"]
    assert table.loc[table["shape_id"] == "512x512x64_bf16_NT", "shape"].iloc[0] == "512x512x64 (batch 96)"
    assert set(table.loc[table["kept"], "shape_id"]) == set(expected)
    f32 = table[table["a_type"] == "f32_r"].iloc[0]  # hipBLASLt NT, fp32, under 1 %: listed, not kept
    assert f32["shape_id"] == "128x4096x4096_fp32_TN" and not f32["kept"] and f32["share"] < 1.0


def test_hipblaslt_threshold_zero_keeps_every_tunable_gemm_and_load_api(tmp_path):
    log = write(tmp_path, "gemms.log", "\n".join(LOG_LINES))
    work = hipblaslt_log.load(log, thr=0.0, summary_path=tmp_path / "s.csv")
    assert len(work.shapes) == 7  # all but the f8 one
    assert [n for n, _ in work.skipped] == [8, 9, 12, 13]
    assert (tmp_path / "s.csv").is_file()
    with pytest.raises(HarnessError, match="percentage"):
        hipblaslt_log.load(log, thr=150)


def test_hipblaslt_threshold_that_keeps_nothing_is_an_error(tmp_path):
    log = write(tmp_path, "gemms.log", "\n".join([gemm_line(64, 64, 64, "T", "N", "bf16_r", 1),
                                                  gemm_line(64, 64, 64, "N", "N", "bf16_r", 1)]))
    assert len(sources.read(log, "auto", "fp32", thr=50.0, warn=lambda m: None)) == 2  # 50 % each
    with pytest.raises(HarnessError, match="lower --thr"):
        sources.read(log, "auto", "fp32", thr=60.0, warn=lambda m: None)


def test_hipblaslt_log_without_a_readable_line_names_the_first_problem(tmp_path):
    log = write(tmp_path, "broken.log", "\n".join([
        "- {function: matmul, M: 16, N: 16, transA: T, transB: N, a_type: bf16_r}",
        "- {function: matmul, M: 16, N: 16, K: 16, transA: T, transB: N, a_type: bf16_r, call_count: 0}"]))
    with pytest.raises(HarnessError) as err:
        sources.read(log, "hipblaslt", "fp32", warn=lambda m: None)
    assert "broken.log" in str(err.value) and "line 1: missing K" in str(err.value)


TUNE_GEMM_YAML = """\
# sizes for tune_gemm.py --gemm_size_file
- {'M': 4864, 'N': 4096, 'K': 8192, 'rowMajorA': 'T', 'rowMajorB': 'N'}
- {'M': 8192, 'N': 8192, 'K': 8192, 'rowMajorA': 'T', 'rowMajorB': 'N'}
- {M: 512, N: 512, K: 512, rowMajorA: N, rowMajorB: T, dtype: bf16}
- {'M': 1, 'N': 1280, 'K': 8192, 'rowMajorA': 'T', 'rowMajorB': 'N', 'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 256, 'GROUP_SIZE_M': 1, 'SPLIT_K': 4, 'num_warps': 4, 'num_stages': 0, 'waves_per_eu': 0, 'matrix_instr_nonkdim': 16, 'kpack': 2}
- M: 2048
  N: 2048
  K: 1024
  rowMajorA: true
  rowMajorB: true
"""


def test_tune_gemm_yaml_list(tmp_path):
    path = write(tmp_path, "gemm_sizes.yaml", TUNE_GEMM_YAML)
    assert sources.detect(TUNE_GEMM_YAML) == "tune_gemm"
    shapes = read_shapes_file(str(path), default_dtype="fp16")
    assert [s.id for s in shapes] == ["4864x4096x8192_fp16_NT", "8192x8192x8192_fp16_NT", "512x512x512_bf16_TN",
                                      "1x1280x8192_fp16_NT", "2048x2048x1024_fp16_NN"]
    tuned = shapes[3]
    assert tune_gemm_yaml.config_of(tuned) == {
        "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_M": 1, "SPLIT_K": 4, "num_warps": 4,
        "num_stages": 0, "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}
    assert tune_gemm_yaml.config_of(shapes[0]) == {}


@pytest.mark.parametrize("entry, line, message", [
    ("- {M: 512, N: 512, rowMajorA: T, rowMajorB: N}", 3, "entry lacks K"),
    ("- {M: 512, N: 512, K: 512, rowMajorA: X, rowMajorB: N}", 3, "rowMajorA: 'X' should be T"),
    ("- {M: -5, N: 512, K: 512, rowMajorA: T, rowMajorB: N}", 3, "M=-5"),
    ("- {M: 512, N: 512, K: 512, dtype: int8}", 3, "dtype: 'int8' is not a dtype"),
    ("- {M: 512, N: 512, K: 512, rowMajorA: T", 4, "malformed YAML"),
    ("- [512, 512, 512]", 3, "not a mapping"),
])
def test_tune_gemm_yaml_errors_name_the_line(tmp_path, entry, line, message):
    text = "# tune these\n- {M: 64, N: 64, K: 64, rowMajorA: T, rowMajorB: N}\n%s\n" % entry
    path = write(tmp_path, "sizes.yaml", text)
    with pytest.raises(HarnessError) as err:
        read_shapes_file(str(path), fmt="tune_gemm")
    assert message in str(err.value)
    assert err.value.where == "%s:%d" % (path, line)


AITER_BF16_UNTUNED = """\
M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle
64,256,5120,False,torch.bfloat16,torch.float32,False,False
1, 128, 6144, False, torch.bfloat16, torch.bfloat16, False, False
128,2048,6144,True,torch.bfloat16,torch.bfloat16,False,True
"""

AITER_A8W8_UNTUNED = "M,N,K\n1, 1280, 8192\n32, 1280, 8192\n\n64, 1280, 8192\n1, 1280, 8192\n"


def test_aiter_untuned_csv_keeps_extra_columns_and_lists_what_matmul_cannot_run(tmp_path):
    path = write(tmp_path, "bf16_untuned_gemm.csv", AITER_BF16_UNTUNED)
    assert sources.detect(AITER_BF16_UNTUNED) == "aiter_csv"
    lines = []
    shapes = sources.read(path, "auto", "fp32", warn=lines.append)
    assert [s.id for s in shapes] == ["1x128x6144_bf16_NT"]
    assert dict(shapes[0].extra) == {"bias": "False", "dtype": "torch.bfloat16", "outdtype": "torch.bfloat16",
                                     "scaleAB": "False", "bpreshuffle": "False"}
    assert lines == ["%s:2: 64x256x5120 not tuned: outdtype torch.float32: this kernel writes C as bf16 from bf16 "
                     "inputs" % path, "%s:4: 128x2048x6144 not tuned: bias: the kernel has no bias epilogue" % path]

    plain = write(tmp_path, "untuned.csv", AITER_A8W8_UNTUNED)
    lines = []
    shapes = sources.read(plain, "auto", "fp16", warn=lines.append)
    assert [(s.id, s.weight) for s in shapes] == [("1x1280x8192_fp16_NT", 2.0), ("32x1280x8192_fp16_NT", 1.0),
                                                  ("64x1280x8192_fp16_NT", 1.0)]
    assert shapes[0].extra == () and "shape of line 2" in lines[0]  # the repeated row adds its weight
    with pytest.raises(HarnessError, match="4 rows listed"):  # aiter's a8w8 lists without q_dtype_w are int8
        sources.read(write(tmp_path, "a8w8_untuned_gemm.csv", AITER_A8W8_UNTUNED), "auto", "fp16", warn=lines.append)


@pytest.mark.parametrize("row, message", [
    ("1, 1280", "2 values for 3 columns"),
    ("abc, 1280, 8192", "M='abc'"),
    ("1, 1280, 0", "K=0"),
])
def test_aiter_csv_errors_name_the_line(tmp_path, row, message):
    path = write(tmp_path, "untuned.csv", "M,N,K\n1, 1280, 8192\n%s\n" % row)
    with pytest.raises(HarnessError) as err:
        read_shapes_file(str(path), fmt="aiter_csv")
    assert message in str(err.value) and err.value.where == "%s:3" % path


def test_aiter_csv_dtype_and_header_errors(tmp_path):
    path = write(tmp_path, "u.csv", "M,N,K,dtype\n1,128,256,torch.bfloat16\n16,128,256,torch.int8\n")
    lines = []
    assert [s.id for s in sources.read(path, "auto", "fp32", warn=lines.append)] == ["1x128x256_bf16_NT"]
    assert lines == ["%s:3: 16x128x256 not tuned: dtype torch.int8: no harness kernel runs that type" % path]
    path = write(tmp_path, "v.csv", "M,N,K,layout\n16,128,256,TN\n16,128,256,XY\n")
    with pytest.raises(HarnessError) as err:
        read_shapes_file(str(path), fmt="aiter_csv")
    assert "layout 'XY'" in str(err.value) and err.value.where == "%s:3" % path
    assert read_shapes_file(str(write(tmp_path, "w.csv", "M,N,K,layout\n16,128,256,tn\n")))[0].layout == "TN"
    path = write(tmp_path, "x.csv", "# shapes\nm,n,k_dim\n1,2,3\n")
    with pytest.raises(HarnessError) as err:
        read_shapes_file(str(path), fmt="aiter_csv")
    assert "no M, N, K column" in str(err.value) and err.value.where == "%s:2" % path


def test_plain_list_still_detected_and_unknown_format_refused(tmp_path):
    path = write(tmp_path, "shapes.txt", "# mine\n256x256x128:fp16:NN, 512x512x512\n")
    assert sources.detect(path.read_text()) == "list"
    assert [s.id for s in read_shapes_file(str(path))] == ["256x256x128_fp16_NN", "512x512x512_fp32_NN"]
    with pytest.raises(HarnessError, match="unknown shapes format 'rocblas'"):
        read_shapes_file(str(path), fmt="rocblas")
    assert set(sources.FORMATS) == {"auto", "list", "tune_gemm", "aiter_csv", "hipblaslt"}


def test_hipblaslt_gemm_too_large_for_the_harness_is_reported_not_fatal(tmp_path):
    log = write(tmp_path, "big.log", "\n".join([gemm_line(4096, 4096, 4096, "T", "N", "bf16_r", 1),
                                               gemm_line(3000000, 64, 64, "T", "N", "bf16_r", 1)]))
    warnings = []
    shapes = sources.read(log, "auto", "fp32", warn=warnings.append, summary_path=tmp_path / "s.csv")
    assert [s.id for s in shapes] == ["4096x4096x4096_bf16_NT"]
    assert any(w.startswith("%s:2: skipped: M=3000000" % log) for w in warnings), warnings
    assert pd.read_csv(tmp_path / "s.csv")["kept"].tolist().count(True) == 1
