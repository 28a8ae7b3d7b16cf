"""A slow stretch of the machine, planted for real: run as the agent's --run-under, it runs the
variant (argv[1:]) and passes its conversation through, but for SLOW_STRETCH_S seconds after the
first sample of any variant of the run (the time in the file SLOW_STRETCH_FILE, created by the
first) every sample lasts twice as long (the wrapper sleeps as long again) and is reported so.
The wrapper's pass-through costs the same in and out of the stretch (SLOW_STRETCH_S=0: none)."""

import os
import subprocess
import sys
import time

SAMPLE = b"HARNESS_SAMPLE "


def stretch_start(path):
    """The run's first sample time: written by whichever variant asks first."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        for _ in range(1000):
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return float(text)
            time.sleep(0.001)
        raise SystemExit("slow_stretch: %s stays empty" % path)
    now = time.time()
    os.write(fd, b"%r\n" % now)
    os.close(fd)
    return now


def main():
    path, length = os.environ["SLOW_STRETCH_FILE"], float(os.environ.get("SLOW_STRETCH_S", "0"))
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = sys.stdout.buffer
    for line in child.stdout:  # the check line and whatever comes before it
        out.write(line)
        out.flush()
        if line.startswith(b"HARNESS_RESULT "):
            break
    start = None
    for request in sys.stdin.buffer:
        child.stdin.write(request)
        child.stdin.flush()
        for line in child.stdout:
            if not line.startswith(SAMPLE):
                out.write(line)
                continue
            start = stretch_start(path) if start is None else start
            fields = line[len(SAMPLE):].split()  # the time, then the program's context switches
            ns = float(fields[0])
            if time.time() < start + length:
                time.sleep(ns / 1e9)
                ns *= 2
            out.write(b" ".join([SAMPLE.strip(), repr(ns).encode()] + fields[1:]) + b"\n")
            out.flush()
            break
    child.stdin.close()
    for line in child.stdout:
        out.write(line)
    out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
