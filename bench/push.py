"""Push throughput: harness push of a 500-artifact bundle against a raw `tar c | ssh tar x` of
the same files to the same loopback sshd, in one run; and a push with nothing new.

    python3 bench/push.py [--artifacts 500]

The artifacts are copies of one real static riscv64 ELF built by harness, each made distinct
(a different trailing byte) so that every file is content-addressed separately.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import kernels  # noqa: E402
from harness.build import BuildOptions, build  # noqa: E402
from harness.bundle import Manifest, Variant, sha256_file  # noqa: E402
from harness.push import push  # noqa: E402
from harness.shapes import parse_shape_list  # noqa: E402
from harness.targets import SSH, Target  # noqa: E402
from harness.transport.ssh import SSHTransport  # noqa: E402
from bench._sshd import make_server  # noqa: E402


def make_bundle(root: Path, count: int) -> tuple:
    target = Target(name="rv", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=256)
    summary = build(kernels.get("matmul"), target, parse_shape_list("64x64x64"), root,
                    BuildOptions(space={"BLOCK_M": [16], "BLOCK_N": [32], "BLOCK_K": [16], "GROUP_M": [1]}))
    bundle, manifest = summary.bundle, summary.manifest
    elf = (bundle / manifest.variants[0].artifact).read_bytes()
    variants = []
    for i in range(count):
        rel = "artifacts/bench%04d.elf" % i
        (bundle / rel).write_bytes(elf + i.to_bytes(4, "little"))
        variants.append(Variant(id="b%04d" % i, config={}, dtype="fp32", specialization=["fp32"], status="ok",
                                artifact=rel, sha256=sha256_file(bundle / rel)))
    manifest.variants = variants
    manifest.jobs = []
    manifest.save(bundle)
    return target, bundle, Manifest.load(bundle / "manifest.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = make_server(tmp / "sshd")
        try:
            target, bundle, manifest = make_bundle(tmp / "ws", args.artifacts)
            files = [v.artifact for v in manifest.variants] + [p for s in manifest.shapes for p in s.data.values()]
            size = sum((bundle / f).stat().st_size for f in files)
            target.ssh = SSH(host="127.0.0.1", user="root", port=server.port, key=str(server.client_key),
                             known_hosts=str(server.known_hosts))

            ssh = ["ssh", "-p", str(server.port), "-i", str(server.client_key), "-o",
                   "UserKnownHostsFile=%s" % server.known_hosts, "-o", "BatchMode=yes", "root@127.0.0.1"]
            raws, ours = [], []
            for rep in range(args.repeats):  # interleaved, each into a fresh remote folder
                raw_dir = tmp / ("raw-remote-%d" % rep)
                start = time.perf_counter()
                tar = subprocess.Popen(["tar", "cf", "-", "-C", str(bundle)] + files, stdout=subprocess.PIPE)
                subprocess.run(ssh + ["mkdir -p %s && tar xf - -C %s" % (raw_dir, raw_dir)], stdin=tar.stdout,
                               check=True)
                tar.wait()
                raws.append(time.perf_counter() - start)

                target.workdir = str(tmp / ("harness-remote-%d" % rep))
                start = time.perf_counter()
                transport = SSHTransport(target).open()
                first = push(bundle, manifest, transport)
                transport.close()
                ours.append(time.perf_counter() - start)

            start = time.perf_counter()
            transport = SSHTransport(target).open()
            again = push(bundle, manifest, transport)
            transport.close()
            nothing = time.perf_counter() - start
        finally:
            server.stop()
    print("files: %d (%d artifacts), %.1f MB" % (len(files), args.artifacts, size / 1e6))
    print("raw tar c | ssh tar x : %s s" % " ".join("%.3f" % t for t in raws))
    print("harness push          : %s s (%d files sent, %d round trips, connect included)"
          % (" ".join("%.3f" % t for t in ours), first.sent_files, first.commands))
    ratios = sorted(o / r for o, r in zip(ours, raws))
    print("ratio push/raw        : best %.2f, median %.2f, min/min %.2f (goal <= 1.3)"
          % (ratios[0], ratios[len(ratios) // 2], min(ours) / min(raws)))
    print("push with nothing new : %.3f s, %d files sent, %d SSH command(s) (goal: 1)"
          % (nothing, again.sent_files, again.commands))


if __name__ == "__main__":
    main()
