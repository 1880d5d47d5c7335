"""Reads a run's --tensorboard folder with TensorBoard itself and compares it with its --metrics file.

Usage: tensorboard_check.py RUN_DIR METRICS_JSONL

Prints one JSON object for tests/libtrain/tensorboard_test.cpp to judge:
  records        records of every event file, read by TensorBoard's own CRC-32C-checking reader
  read_errors    what that reader refused (empty when every record's CRCs match)
  flips_tried, flips_caught
                 copies of the first event file with one byte flipped (spread over its length), and
                 how many of them that reader refused
  checked        JSONL values found again, as TensorBoard's EventAccumulator serves them
  mismatches     JSONL values missing or different there, and scalars there that the JSONL lacks
  tb_steps       tag -> the steps of its records, in the files' order (raw: nothing purged)
  jsonl_steps    event -> the steps of its lines, in file order
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

NOT_SCALARS = {"event", "epoch", "step", "time"}


def event_files(run_dir):
    return sorted(os.path.join(run_dir, n) for n in os.listdir(run_dir) if "tfevents" in n)


def read_all(path):
    """The records of a file through TensorBoard's stub reader, which checks both CRCs of each."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


def main():
    run_dir, metrics_path = sys.argv[1], sys.argv[2]
    report = {"records": 0, "read_errors": [], "flips_tried": 0, "flips_caught": 0, "checked": 0,
              "mismatches": [], "tb_steps": {}, "jsonl_steps": {}}
    files = event_files(run_dir)
    for path in files:
        try:
            records = read_all(path)
        except errors.DataLossError as e:
            report["read_errors"].append(f"{os.path.basename(path)}: {e.message}")
            continue
        report["records"] += len(records)
        for raw in records:
            ev = event_pb2.Event.FromString(raw)
            for v in ev.summary.value:
                report["tb_steps"].setdefault(v.tag, []).append(ev.step)

    # One byte flipped at a time, spread over the first file: TensorBoard's reader must refuse it.
    if files:
        data = open(files[0], "rb").read()
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "events.out.tfevents.flipped")
            positions = sorted(set(int(i * (len(data) - 1) / 47) for i in range(48)))
            for pos in positions:
                bad = bytearray(data)
                bad[pos] ^= 0x10
                with open(copy, "wb") as f:
                    f.write(bad)
                report["flips_tried"] += 1
                try:
                    read_all(copy)
                except errors.DataLossError:
                    report["flips_caught"] += 1

    lines = [json.loads(l) for l in open(metrics_path) if l.strip()]
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    served = {tag: {e.step: (e.value, e.wall_time) for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    expected_tags = set()
    for line in lines:
        report["jsonl_steps"].setdefault(line["event"], []).append(line["step"])
        for key, value in line.items():
            if key in NOT_SCALARS or value is None:
                continue
            tag = f"{line['event']}/{key}"
            expected_tags.add(tag)
            got = served.get(tag, {}).get(line["step"])
            want = float(np.float32(value))  # TensorBoard's simple_value is a float
            if got is None:
                report["mismatches"].append(f"{tag} at step {line['step']}: missing in TensorBoard")
            elif got[0] != want or got[1] != line["time"]:
                report["mismatches"].append(
                    f"{tag} at step {line['step']}: TensorBoard has {got[0]} at {got[1]}, JSONL {want} at {line['time']}")
            else:
                report["checked"] += 1
    for tag in sorted(set(served) - expected_tags):
        report["mismatches"].append(f"{tag}: in TensorBoard, not in the JSONL")
    for tag in expected_tags & set(served):
        extra = len(served[tag]) - len(report["jsonl_steps"][tag.split("/")[0]])
        if extra:
            report["mismatches"].append(f"{tag}: TensorBoard serves {extra} more step(s) than the JSONL has lines")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
