"""Probe: the FFMA runs of a cubin's SASS and how many of them carry the yield and operand-B reuse
control bits, the bits DeepGEMM's cubin post-processing flips (deep_gemm/jit/interleave_ffma.py,
before NVCC 12.9 did the same itself).

    cuobjdump -sass KERNEL.cubin > k.sass && python3 bench/probes/ffma_yield_stat.py k.sass

Prints, per file, each run of 8 or more consecutive FFMAs as (FFMAs, yield bits set, reuse-B bits
set). Read in docs/notes/2026-11-27-fp8-promotion.md: ptxas 12.8 (Triton 3.6's) sets the bit on
every FFMA of the WS kernel's promotion, ptxas 12.9 and later on about half of them.
"""
import re
import sys


def ffma_runs(sass: str):
    """Runs of consecutive FFMA instructions, each as its SASS lines (instruction, then control word)."""
    runs, current, take_next = [], [], False
    for line in sass.splitlines():
        if "FFMA" in line:
            current.append(line)
            take_next = True
        elif take_next:
            current.append(line)
            take_next = False
        else:
            if len(current) >= 16:
                runs.append(current)
            current = []
    return runs


def control_bits(run):
    """(FFMAs, yield bits, reuse-B bits) of a run: bit 45 and bit 59 of each instruction's high word."""
    count = len(run) // 2
    high = [int(re.search(r"/\*\s*(0x[0-9a-fA-F]+)\s*\*/", run[2 * i + 1]).group(1), 16) for i in range(count)]
    return count, sum((h >> 45) & 1 for h in high), sum((h >> 59) & 1 for h in high)


def main(argv=None):
    for path in (argv if argv is not None else sys.argv[1:]):
        with open(path) as f:
            runs = ffma_runs(f.read())
        print(path, len(runs), "runs (FFMAs, yield bits, reuse-B bits):", [control_bits(r) for r in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
