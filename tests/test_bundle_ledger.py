"""The bundle folder's ledger (known.json) and manifest.json as a tune's rounds write them: rounds
built at once in many threads each add their variants, and none is lost; the ledger kept in
memory between rounds is read again where its file changed; a manifest written and loaded back
is the same manifest."""

import json
import threading
from pathlib import Path

from harness.bundle import KNOWN_FILE, Manifest, PrunedEntry, Variant, read_known


def manifest(variants: list, pruned: list = ()) -> Manifest:
    return Manifest(kernel="matmul", target={"name": "node"}, toolchain={}, variants=list(variants), shapes=[],
                    jobs=[], pruned=list(pruned), seed=0, config_names=["BLOCK_M"], tolerances={})


def variant(i: int) -> Variant:
    return Variant(id="v%d" % i, config={"BLOCK_M": i}, dtype="fp16", specialization=[], status="ok")


def test_rounds_saved_at_once_in_many_threads_lose_no_variant_of_the_ledger(tmp_path: Path):
    def save(t: int):
        for r in range(20):
            manifest([variant(1000 * t + r)]).save(tmp_path)

    threads = [threading.Thread(target=save, args=(t,)) for t in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(read_known(tmp_path)["variants"]) == 12 * 20


def test_the_ledger_kept_in_memory_is_read_again_where_its_file_changed(tmp_path: Path):
    manifest([variant(1)]).save(tmp_path)
    path = tmp_path / KNOWN_FILE
    known = json.loads(path.read_text())
    known["variants"]["v-from-elsewhere"] = {"BLOCK_M": 7}  # another process's round
    path.write_text(json.dumps(known) + "\n")
    manifest([variant(2)], [PrunedEntry(variant="v3", config={"BLOCK_M": 3}, shape="s", rule="r", why="w")]
             ).save(tmp_path)
    assert set(read_known(tmp_path)["variants"]) == {"v1", "v2", "v3", "v-from-elsewhere"}


def test_a_manifest_saved_loads_back_the_same_and_is_not_written_again_unchanged(tmp_path: Path):
    m = manifest([variant(1), variant(2)])
    path = m.save(tmp_path)
    loaded = Manifest.load(path)
    assert loaded == m and [v.config for v in loaded.variants] == [{"BLOCK_M": 1}, {"BLOCK_M": 2}]
    stamp = path.stat().st_mtime_ns
    manifest([variant(1), variant(2)]).save(tmp_path)
    assert path.stat().st_mtime_ns == stamp  # the same manifest: nothing written (a push sends nothing)
