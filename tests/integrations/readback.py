"""What the integrations wrote, read back as their own tools would: a W&B
offline run's records (its ``run-<id>.wandb`` file, a LevelDB-style log of
protobuf records, read here with wandb's own record type) and a
TensorBoard log folder (tensorboard's event reader)."""

import glob
import json
import os
import struct
import time

_BLOCK = 32 * 1024  # the log's block size
_FULL, _LAST = 1, 4  # record kinds that end a record


def wandb_records(folder, run_id):
    """(kind, record) of every record of offline run ``run_id`` under ``folder``."""
    from wandb.proto import wandb_internal_pb2 as pb
    paths = glob.glob(os.path.join(folder, "wandb", f"offline-run-*-{run_id}",
                                   f"run-{run_id}.wandb"))
    assert len(paths) == 1, paths
    data = open(paths[0], "rb").read()
    assert data[:4] == b":W&B"
    pos, part, out = 7, b"", []  # after the file's header: magic, version
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and n == 0:
            pos += left
            continue
        part += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (_FULL, _LAST):
            r = pb.Record()
            r.ParseFromString(part)
            part = b""
            out.append((r.WhichOneof("record_type"), r))
    return out


def finished_records(folder, run_id, wait_s=20.0):
    """``wandb_records`` once the run's file holds its ``exit`` record:
    ``run.finish()`` returns before wandb's service has written it all."""
    deadline = time.monotonic() + wait_s
    while True:
        records = wandb_records(folder, run_id)
        if any(kind == "exit" for kind, _ in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def wandb_run(folder, run_id):
    """Offline run ``run_id`` under ``folder``: its ``summary`` (key -> value, the
    last update wins), ``history`` (one dict per logged row), ``artifacts``
    (name -> (type, {path: staged local copy})) and ``files`` (its files folder)."""
    summary, history, artifacts = {}, [], {}
    for kind, r in finished_records(folder, run_id):
        if kind == "summary":
            for u in r.summary.update:
                key = u.key or "/".join(u.nested_key)
                summary[key] = json.loads(u.value_json)
        elif kind == "history":
            row = {}
            for item in r.history.item:
                row[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
            history.append(row)
        elif kind == "artifact":
            a = r.artifact
            artifacts[a.name] = (a.type, {c.path: c.local_path for c in a.manifest.contents})
    files = glob.glob(os.path.join(folder, "wandb", f"offline-run-*-{run_id}", "files"))[0]
    return {"summary": summary, "history": history, "artifacts": artifacts, "files": files}


def tensorboard_events(folder):
    """tensorboard's EventAccumulator over ``folder``, every event kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0,
                                                       "tensors": 0})
    acc.Reload()
    return acc


def tensorboard_scalars(acc, tag):
    """step -> value of scalar ``tag``."""
    return {e.step: e.value for e in acc.Scalars(tag)}


def tensorboard_text(acc, tag):
    """The text of the last ``add_text`` under ``tag``."""
    return acc.Tensors(f"{tag}/text_summary")[-1].tensor_proto.string_val[0].decode()
