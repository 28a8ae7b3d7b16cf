"""Load the harness's tuned files with the consumers' own code, where it is installed.

    python3 bench/consumers.py tuned/mi300 [--arch gfx942] [--device "AMD Instinct MI300X"]
                               [--tune-gemm PATH/TO/tune_gemm]

For each consumer it says what it loaded and what the consumer returned, or that it could not
import the consumer (and why), so a run on a machine with aiter / vLLM / SGLang installed checks
the files against the real readers (tests/test_consumer_formats.py checks them against readers
written to the same rules without the packages):

- aiter: ``aiter.ops.triton.utils.gemm_config_utils.get_gemm_config`` on the Triton JSON files
  (the folder is put in as aiter's flat ``gemm/`` folder, ``get_arch`` answers ``--arch``), for
  every M tuned and every M from 1 to 8192 (is_tuned must be true); the bf16 CSV through
  ``aiter.tuned_gemm.get_GEMM_A16W16_config_`` with ``AITER_CONFIG_GEMM_BF16_FILE`` set to it.
- vLLM / SGLang: ``get_w8a8_block_fp8_configs(N, K, 128, 128)`` from the module with its
  ``__file__`` pointed at a folder holding the written files and the device name answering
  ``--device``; then the nearest-M pick for every M tuned.
- tune_gemm (a script folder, not a package: ``--tune-gemm``): ``process_item``, ``read_config``
  and ``gen_configStr`` on every entry of the YAML.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import shutil
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def say(consumer: str, text: str) -> None:
    print("%-9s %s" % (consumer + ":", text), flush=True)


def could_not(consumer: str, exc: BaseException) -> None:
    say(consumer, "could not import or run it: %s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc)
                                                           else ""))


def check_aiter_triton(folder: str, arch: str) -> None:
    files = sorted(glob.glob(os.path.join(folder, "triton", "%s-GEMM-*-N=*-K=*.json" % arch)))
    if not files:
        say("aiter", "no Triton JSON under %s/triton for arch %s" % (folder, arch))
        return
    try:
        gcu = importlib.import_module("aiter.ops.triton.utils.gemm_config_utils")
        arch_info = importlib.import_module("aiter.ops.triton.utils._triton.arch_info")
    except Exception as exc:  # not installed, or no GPU stack to import it with
        could_not("aiter", exc)
        return
    work = tempfile.mkdtemp()
    try:
        gemm = os.path.join(work, "gemm")
        os.makedirs(gemm)
        for path in files + glob.glob(os.path.join(folder, "triton", "default", "*.json")):
            shutil.copy(path, gemm)
        gcu.AITER_TRITON_CONFIGS_PATH = work
        arch_info.get_arch = lambda: arch
        gcu._get_gemm_config_cached.cache_clear()
        for path in files:
            name = os.path.basename(path)
            family, nk = name[len(arch) + 1:-len(".json")].split("-N=")
            N, K = (int(x) for x in nk.split("-K="))
            untuned = [M for M in range(1, 8193) if not gcu.get_gemm_config(family, M, N, K)[1]]
            tuned_m = json.load(open(path))["_harness"]["tuned_M"]
            say("aiter", "%s: %d tuned M (%s), M 1..8192 untuned: %s" % (
                name, sum(len(v) for v in tuned_m.values()), ", ".join("%s=%s" % kv for kv in tuned_m.items()),
                untuned[:5] or "none"))
    except Exception:
        say("aiter", "failed:\n" + traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_aiter_csv(folder: str) -> None:
    files = sorted(glob.glob(os.path.join(folder, "*.aiter.csv")))
    if not files:
        return
    try:
        os.environ["AITER_CONFIG_GEMM_BF16"] = os.path.abspath(files[0])
        tg = importlib.import_module("aiter.tuned_gemm")
        tg.AITER_CONFIGS.AITER_CONFIG_GEMM_BF16_FILE = os.path.abspath(files[0])
        tg.get_GEMM_A16W16_config_.cache_clear()
        table = tg.get_GEMM_A16W16_config_()
        libtypes = sorted({v["libtype"] for v in table.values()})
        say("aiter", "%s: %d keys; libtypes %s" % (files[0], len(table), libtypes))
    except Exception as exc:
        could_not("aiter", exc)


def check_block_fp8(folder: str, consumer: str, module: str, device: str) -> None:
    files = sorted(glob.glob(os.path.join(folder, consumer, "N=*.json")))
    if not files:
        say(consumer, "no files under %s/%s" % (folder, consumer))
        return
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        could_not(consumer, exc)
        return
    work = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(work, "configs"))
        for path in files:
            shutil.copy(path, os.path.join(work, "configs"))
        mod.__file__ = os.path.join(work, os.path.basename(mod.__file__))
        if hasattr(mod, "current_platform"):
            mod.current_platform.get_device_name = lambda *a, **k: device
        if hasattr(mod, "get_device_name"):
            mod.get_device_name = lambda *a, **k: device
        getter = mod.get_w8a8_block_fp8_configs
        if hasattr(getter, "cache_clear"):
            getter.cache_clear()
        from harness.report.vllm_json import parse_file_name

        for path in files:
            N, K, _, bn, bk = parse_file_name(os.path.basename(path))
            configs = getter(N, K, bn, bk)
            if not configs:
                say(consumer, "%s: NOT FOUND by the consumer" % os.path.basename(path))
                continue
            ms = sorted(configs)
            picks = {M: configs[min(ms, key=lambda x: abs(x - M))] == configs[M] for M in ms}
            say(consumer, "%s: loaded %d M (%s); each tuned M picks its own config: %s" % (
                os.path.basename(path), len(ms), ms, all(picks.values())))
    except Exception:
        say(consumer, "failed:\n" + traceback.format_exc())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_tune_gemm(folder: str, tune_gemm_dir) -> None:
    files = sorted(glob.glob(os.path.join(folder, "*.yaml")))
    if not files:
        return
    if not tune_gemm_dir:
        say("tune_gemm", "not a package: pass --tune-gemm DIR (ROCm/triton python/perf-kernels/tools/tune_gemm)")
        return
    stubbed = _stub_torch_if_missing()
    if stubbed:
        say("tune_gemm", "no torch here: its scripts are imported with a stand-in torch module (read_config, "
                         "gen_configStr and process_item use no torch)")
    try:
        import yaml

        sys.path.insert(0, tune_gemm_dir)
        fg = importlib.import_module("utils.file_generator")
        tg = importlib.import_module("tune_gemm")
    except Exception as exc:
        could_not("tune_gemm", exc)
        return
    for path in files:
        try:
            items = yaml.safe_load(open(path))
            strs = [fg.gen_configStr(tg.process_item(dict(item))[-1]) for item in items]
            say("tune_gemm", "%s: %d entries, e.g. %s" % (path, len(strs), strs[0]))
        except Exception:
            say("tune_gemm", "%s failed:\n%s" % (path, traceback.format_exc()))


def _stub_torch_if_missing() -> bool:
    """tune_gemm's helpers import torch at module level for its dtype tables; where torch is not
    installed, a module whose every attribute is a placeholder lets them import."""
    try:
        importlib.import_module("torch")
        return False
    except ImportError:
        import types

        stub = types.ModuleType("torch")
        stub.__getattr__ = lambda name: "torch." + name
        sys.modules["torch"] = stub
        return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="a tuned folder (harness report --out, default tuned/TARGET)")
    ap.add_argument("--arch", default="gfx942", help="the arch in the Triton JSON names (aiter's get_arch)")
    ap.add_argument("--device", default="AMD Instinct MI300X", help="the device name torch reports")
    ap.add_argument("--tune-gemm", default=None, help="folder of ROCm triton's tune_gemm scripts")
    args = ap.parse_args(argv)
    check_aiter_triton(args.folder, args.arch)
    check_aiter_csv(args.folder)
    check_block_fp8(args.folder, "vllm", "vllm.model_executor.layers.quantization.utils.fp8_utils", args.device)
    check_block_fp8(args.folder, "sglang", "sglang.srt.layers.quantization.fp8_kernel", args.device)
    check_tune_gemm(args.folder, args.tune_gemm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
