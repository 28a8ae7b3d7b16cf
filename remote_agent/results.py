"""The results CSV: rows appended and flushed as measured; a rerun resumes by row key."""

import csv
import io
import os

from . import contract


class SchemaMismatch(Exception):
    pass


class ResultsWriteError(Exception):
    pass


class ResultsWriter:
    """Appends whole rows to a CSV file. A torn last line (a run killed mid-write) is cut off
    when the file is opened again, so the file only ever holds whole rows."""

    def __init__(self, path, header):
        self.path = path
        self.header = list(header)
        self.done = set()
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        resume = os.path.exists(path) and os.path.getsize(path) > 0
        if resume:
            self._resume()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (0 if resume else os.O_TRUNC), 0o644)
        if not resume:
            self._write_line(self.header)

    def _resume(self):
        _drop_torn_tail(self.path)
        with open(self.path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return
            if header != self.header and upgradable(header, self.header):
                f.close()
                _rewrite_with_header(self.path, header, self.header)
                return self._resume()
            if header != self.header:
                raise SchemaMismatch(
                    "%s was written with other columns (schema %s); move it away or pass --all "
                    "with a new results file" % (self.path, _schema_of(header)))
            index = {name: i for i, name in enumerate(header)}
            for row in reader:
                if len(row) == len(header):
                    self.done.add(contract.job_key(row[index["variant_id"]], row[index["shape_id"]],
                                                   row[index["device"]]))

    def write(self, row):
        """row: dict column -> value (missing columns are empty)."""
        values = ["" if row.get(c) is None else row.get(c) for c in self.header]
        self._write_line(values)
        self.done.add(contract.job_key(row["variant_id"], row["shape_id"], row["device"]))

    def size(self):
        """The file's size in bytes: where the next row goes."""
        return os.lseek(self.fd, 0, os.SEEK_END)

    def _write_line(self, values):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        data = buf.getvalue().encode("utf-8")
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):  # one write per row, unless the kernel splits it
                written += os.write(self.fd, data[written:])
            os.fsync(self.fd)
        except OSError as exc:
            # A full disk: cut what part of the row got out, so the file holds whole rows only.
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise ResultsWriteError("cannot write %s: %s; the rows before it are kept"
                                    % (self.path, exc.strerror or exc))

    def close(self):
        os.close(self.fd)


def _drop_torn_tail(path):
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            f.truncate(cut)


def _schema_of(header):
    return "1 or later" if header and header[0] == "schema_version" else "unknown"


def upgradable(old_header, new_header):
    """A file of an older schema (1 to 4) whose columns are the new ones less those added
    since (same configs and counters): its rows are kept, the new columns empty (schemas 1 and 2:
    their deciding time is their median, contract.deciding_time)."""
    if old_header[:1] != ["schema_version"]:
        return False
    return any([c for c in new_header if c not in added] == list(old_header)
               for added in (set(contract.ADDED_IN_SCHEMA_5), set(contract.ADDED_SINCE_SCHEMA_3),
                             set(contract.ADDED_SINCE_SCHEMA_2), set(contract.ADDED_SINCE_SCHEMA_1)))


def _rewrite_with_header(path, old_header, new_header):
    """Rewrite ``path`` (atomically) under ``new_header``; missing columns empty."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    tmp = path + ".upgrade.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=new_header, lineterminator="\n", restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: v for k, v in row.items() if k in new_header})
    os.replace(tmp, path)


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
