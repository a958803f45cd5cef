"""A stand-in for a DeepSpeed training script, for CommandRunner tests.

It reads the DeepSpeed config given by --deepspeed_config (a path or DeepSpeed's base64
form; or Hugging Face's --deepspeed), looks the configuration up
in the replay table (--table, JSON: "stage-mbs-gas" -> outcome) and behaves as a
DeepSpeed engine in autotuning mode would: writes metrics.json to
autotuning.metric_path and exits 0, or fails like an out-of-memory run.

Outcomes: {"metrics": {...}} | {"oom": true} | {"crash_after_metrics": {...}} |
{"sleep": seconds} | {"corrupt": true}.
"""

import argparse
import base64
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed_config")
    p.add_argument("--deepspeed")
    p.add_argument("--table", required=True)
    p.add_argument("--local_rank", type=int, default=0)
    args, _ = p.parse_known_args()
    value = args.deepspeed_config or args.deepspeed
    if os.path.exists(value):
        with open(value) as fh:
            ds = json.load(fh)
    else:
        ds = json.loads(base64.urlsafe_b64decode(value).decode("utf-8"))
    if int(os.environ.get("RANK", "0")) != 0 and "autotuning" in ds:
        ds["autotuning"]["metric_path"] = os.devnull  # only rank 0 writes, as DeepSpeed
    with open(args.table) as fh:
        table = json.load(fh)
    stage = ds["zero_optimization"]["stage"]
    mbs = ds["train_micro_batch_size_per_gpu"]
    gas = ds.get("gradient_accumulation_steps", 1)
    key = f"{stage}-{mbs}-{gas}"
    print(f"replay {key}")
    if not ds.get("autotuning", {}).get("enabled"):  # a run after tuning: "train"
        print(f"trained {key} train_batch_size={ds.get('train_batch_size')}")
        return 0
    out = table.get(key, {"oom": True})
    metric_path = ds["autotuning"]["metric_path"]
    if "sleep" in out:
        time.sleep(out["sleep"])
    if out.get("oom"):
        print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
        return 1
    if out.get("corrupt"):
        with open(metric_path, "w") as fh:
            fh.write('{"latency": 12.0, "throughput"')
        return 0
    metrics = out.get("metrics") or out.get("crash_after_metrics")
    with open(metric_path, "w") as fh:
        json.dump(metrics, fh)
    if "crash_after_metrics" in out:
        print("Traceback: NCCL error after profiling", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
