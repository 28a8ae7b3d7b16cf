"""The offline HTML report: built from a results CSV as the agent writes it, checked for its
tables and embedded PNGs, then rendered in headless Chromium (Debian package ``chromium``)
to see that the tables and images are shown."""

import base64
import io
import itertools
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from harness.report.html import LIB_COLOR, STATUS_COLORS, TUNED_COLOR, write_html
from harness.space import config_id
from remote_agent import contract
from remote_agent.results import ResultsWriter

META = {"arch": "sm90", "device": "NVIDIA H100 80GB HBM3 <b>&", "cu_num": 132, "driver": "580.95.05",
        "toolchain": "triton 3.9.0 (cuda sm90)", "triton": "3.9.0"}
SPACE = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "num_warps": [4, 8]}
SHAPES = [(4096, 4096, 4096), (1024, 4096, 4096), (64, 8192, 1024)]


def results_csv(path, with_library=True, with_counters=True):
    names = list(SPACE)
    writer = ResultsWriter(str(path), contract.results_header(names, ["lts__t_sectors.sum", "dram__bytes"]
                                                                if with_counters else []))
    for M, N, K in SHAPES:
        base = {"schema_version": 1, "target": "gpu-node", "kernel": "matmul", "shape_id": "%dx%dx%d_fp16_NN" % (M, N, K),
                "M": M, "N": N, "K": K, "dtype": "fp16", "layout": "NN", "device": META["device"],
                "agent_version": contract.AGENT_VERSION, "host": "h100-1", "timestamp": "2026-11-20T10:00:00",
                "profiler": "events"}
        for n, values in enumerate(itertools.product(*(SPACE[k] for k in names))):
            cfg = dict(zip(names, values))
            row = dict(base, variant_id=config_id(cfg), **{"cfg_" + k: v for k, v in cfg.items()})
            if M == 64 and cfg["BLOCK_M"] == 128:
                row.update(status="pruned", message="tile_m_exceeds_dim")
            elif n % 11 == 5:
                row.update(status=["crash", "timeout", "wrong_answer", "compile_error"][n % 4], message="bad")
            else:
                t = 2.0 * M * N * K / 600e12 * 1e9 * (1 + 0.1 * (cfg["BLOCK_N"] != 128) + 0.05 * (cfg["num_warps"] == 4)
                                                      + 0.02 * (cfg["BLOCK_K"] == 32)) + 3000
                row.update(status="ok", time_ns_median=t, time_ns_min=t, time_ns_p20=t, time_ns_p80=t * 1.01,
                           iterations=100, tflops=2.0 * M * N * K / t / 1e3, gbps=1.0, rel_err=1e-4, err_ratio=0.0)
                if with_counters:
                    row["ctr_lts__t_sectors.sum"] = round(1.8 * t)
                    row["ctr_dram__bytes"] = 1e6 + (n * 7919) % 13
            writer.write(row)
        if with_library:
            t = 2.0 * M * N * K / 560e12 * 1e9 + 2500  # slower on big GEMMs, faster on the small one
            writer.write(dict(base, variant_id="lib:torch.matmul", status="ok", time_ns_median=t, time_ns_min=t,
                              time_ns_p20=t, time_ns_p80=t, iterations=100, tflops=2.0 * M * N * K / t / 1e3,
                              err_ratio=0.0, profiler="torch"))
    writer.close()
    return pd.read_csv(path, dtype={"variant_id": str, "shape_id": str, "device": str})


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self.h2, self.links, self.scripts = 0, [], [], [], 0
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.imgs.append(attrs)
        elif tag == "h2":
            self._in_h2 = True
        elif tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if key in attrs:
                self.links.append(attrs[key])

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.h2.append(data.strip())


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    df = results_csv(d / "results.csv")
    weights = {"4096x4096x4096_fp16_NN": 10, "1024x4096x4096_fp16_NN": 100, "64x8192x1024_fp16_NN": 1000}
    return write_html(df, None, META, d / "report.html", weights=weights, threshold=0.9)


def test_page_has_tables_and_embedded_pngs_and_nothing_remote(page):
    text = page.read_text()
    parsed = Page()
    parsed.feed(text)
    assert parsed.h2 == ["Where this ran", "Status breakdown", "Best config vs library, per shape",
                         "Time against each tuning parameter", "Counter correlations"]
    assert parsed.tables == 5  # meta, status, best vs library, parameters, correlations
    assert len(parsed.imgs) == 4  # status, best vs library, parameters, correlations
    for img in parsed.imgs:
        assert img["src"].startswith("data:image/png;base64,") and img.get("alt")
        picture = Image.open(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1])))
        picture.load()
        assert picture.format == "PNG" and picture.width > 200 and picture.height > 100
    assert all(link.startswith("data:") for link in parsed.links) and parsed.scripts == 0
    assert "NVIDIA H100 80GB HBM3 &lt;b&gt;&amp;" in text and "<b>&" not in text  # escaped
    assert "lib:torch.matmul" in text and "weighted total speedup" in text
    assert "2 tuned entries kept, 1 dropped" in text and "not faster than lib:torch.matmul" in text
    assert "lts__t_sectors.sum" in text  # tracks time: listed
    for status in contract.STATUSES:
        assert ">%s</td>" % status in text


def test_page_without_library_or_counters_still_renders(tmp_path):
    df = results_csv(tmp_path / "r.csv", with_library=False, with_counters=False)
    path = write_html(df, None, {"arch": "sm90"}, tmp_path / "r.html")
    text = path.read_text()
    assert "No counter varied" in text and "no library time" in text
    assert text.count("<img ") == 3


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_chromium(tmp_path, *args):
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--hide-scrollbars",
           "--user-data-dir=%s" % (tmp_path / ("profile-%d" % len(list(tmp_path.iterdir()))))] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _near(pixels, hex_color, tol=18):
    want = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return (np.abs(pixels - want) <= tol).all(axis=1)


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (Debian: apt-get install chromium)")
def test_page_renders_in_headless_chromium(page, tmp_path):
    url = page.resolve().as_uri()
    dom = _run_chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = Page()
    parsed.feed(dom.stdout)
    assert parsed.tables == 5 and len(parsed.imgs) == 4
    assert "Best config vs library, per shape" in parsed.h2

    shot = tmp_path / "shot.png"
    run = _run_chromium(tmp_path, "--screenshot=%s" % shot, "--window-size=1300,4500", url)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(np.int16)
    # the charts are painted: their colours cover real area of the page
    for color in (STATUS_COLORS["ok"], STATUS_COLORS["pruned"], TUNED_COLOR, LIB_COLOR):
        count = int(_near(pixels, color).sum())
        assert count > 1000, (color, count)
