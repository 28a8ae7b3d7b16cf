"""Copy of a bundle's manifest that keeps only some jobs (artifacts are shared by path).

    python3 bench/subset_bundle.py --bundle B --out B2 --jobs 3 [--shape SHAPE_ID]

Writes B2/manifest.json with the first N jobs (of one shape, if given) and symlinks B2/artifacts
to B/artifacts: for running a slow profiler (ncu) on a few variants of a big bundle.
"""
import argparse
import json
import os


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--shape", default=None)
    args = p.parse_args()
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        m = json.load(f)
    jobs = [j for j in m["jobs"] if args.shape in (None, j["shape"])][:args.jobs]
    keep = {j["variant"] for j in jobs}
    m["jobs"] = jobs
    m["pruned"] = []
    m["variants"] = [v for v in m["variants"] if v["id"] in keep]
    os.makedirs(args.out, exist_ok=True)
    link = os.path.join(args.out, "artifacts")
    if not os.path.exists(link):
        os.symlink(os.path.abspath(os.path.join(args.bundle, "artifacts")), link)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    print("%s: %d jobs, %d variants" % (args.out, len(jobs), len(keep)))


if __name__ == "__main__":
    main()
