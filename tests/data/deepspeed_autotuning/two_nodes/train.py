"""A stand-in training script that behaves like a DeepSpeed engine in autotuning mode.

It is launched by DeepSpeed's own launcher (``deepspeed ... train.py --deepspeed_config
CFG``) when ``make_fixtures.py`` regenerates the fixture folders. It does no training:

* it reads the DeepSpeed config the launcher passes (a JSON path or DeepSpeed's
  base64 form; after ``--deepspeed_config``, or after ``--deepspeed`` for
  Hugging Face-style scripts);
* with ``autotuning.model_info.profile`` set (DeepSpeed's profiling run) it writes
  ``model_info.json`` (``num_params``, ``trainable_num_params``,
  ``activation_mem_per_gpu``, ``rank``) to ``autotuning.model_info_path``;
* otherwise, with ``autotuning.enabled``, it checks a pretend memory budget: a
  configuration over it fails like a CUDA out-of-memory error (traceback on stderr,
  exit code 1); one that fits writes ``metrics.json`` to ``autotuning.metric_path``
  with the keys and units of DeepSpeed's engine (``fwd``, ``bwd``, ``step`` in µs,
  ``latency`` = their sum times the accumulation steps, ``FLOPS_per_gpu``,
  ``throughput`` = train_batch_size * 1e6 / latency, ``rank``);
* without autotuning (a ``run`` after tuning) it checks the batch sizes the way
  DeepSpeed's config class does and prints one line.

The pretend model: ``STUB_PARAMS`` parameters, ``STUB_ACT_BYTES`` activation bytes per
sample, ``STUB_GPU_BYTES`` memory per GPU; ``STUB_CRASH_MBS`` names micro-batch sizes
that write metrics and then crash (a traceback after profiling).
"""

import argparse
import base64
import json
import os
import sys

PARAMS = int(float(os.environ.get("STUB_PARAMS", "125e6")))
ACT_BYTES = int(float(os.environ.get("STUB_ACT_BYTES", "0.6e9")))
GPU_BYTES = int(float(os.environ.get("STUB_GPU_BYTES", "16e9")))
CRASH_MBS = {int(x) for x in os.environ.get("STUB_CRASH_MBS", "").split(",") if x}


def load_config(value):
    if os.path.exists(value):
        with open(value) as fh:
            return json.load(fh)
    return json.loads(base64.urlsafe_b64decode(value).decode("utf-8"))


def states_bytes(stage, n, dp, fp16):
    p = 2 if fp16 else 4
    opt = 16 if fp16 else 8
    return {0: (p + p + opt) * n, 1: (p + p) * n + opt * n / dp,
            2: p * n + (p + opt) * n / dp, 3: (p + p + opt) * n / dp}[stage]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--local_rank", type=int, default=0)
    p.add_argument("--deepspeed_config")
    p.add_argument("--deepspeed", nargs="?", const=True)
    p.add_argument("--per_device_train_batch_size", type=int)
    p.add_argument("--gradient_accumulation_steps", type=int)
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--mp_size", type=int, default=1)
    args, _ = p.parse_known_args()
    value = args.deepspeed_config or (args.deepspeed if isinstance(args.deepspeed, str) else None)
    ds = load_config(value)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    at = ds.get("autotuning") or {}
    info = at.get("model_info") or {}
    if at.get("enabled") and info.get("profile"):
        if rank == 0:
            with open(at["model_info_path"], "w") as fh:
                json.dump({"num_params": PARAMS, "trainable_num_params": PARAMS,
                           "activation_mem_per_gpu": ACT_BYTES, "rank": 0}, fh)
        print(f"rank {rank}: profiled the model")
        return 0
    hf = args.per_device_train_batch_size is not None
    mbs = args.per_device_train_batch_size if hf else ds.get("train_micro_batch_size_per_gpu")
    gas = ds.get("gradient_accumulation_steps", 1)
    if gas == "auto":
        gas = args.gradient_accumulation_steps or 1
    if mbs == "auto" or mbs is None:
        mbs = 1
    dp = world // args.mp_size
    tbs = ds.get("train_batch_size", mbs * gas * dp)
    if tbs == "auto":
        tbs = mbs * gas * dp
    if tbs != mbs * gas * dp:
        raise AssertionError(
            f"Check batch related parameters. train_batch_size is not equal to "
            f"micro_batch_per_gpu * gradient_acc_step * world_size {tbs} != {mbs} * {gas} * {dp}")
    stage = (ds.get("zero_optimization") or {}).get("stage", 0)
    fp16 = (ds.get("fp16") or {}).get("enabled") in (True, "auto") and not args.bf16
    need = states_bytes(stage, PARAMS / args.mp_size, dp, fp16) + mbs * ACT_BYTES
    if need > GPU_BYTES:
        raise RuntimeError(
            f"CUDA out of memory. Tried to allocate {ACT_BYTES / 2**30:.2f} GiB "
            f"(needs {need / 2**30:.2f} GiB of {GPU_BYTES / 2**30:.2f} GiB)")
    if not at.get("enabled"):
        print(f"rank {rank}: trained with ZeRO stage {stage}, micro-batch {mbs}, "
              f"gradient accumulation {gas}, train_batch_size {tbs}")
        return 0
    # a pretend step time: a fixed cost plus a per-sample cost, ZeRO-3 gathers extra
    fwd = 20.0 + 6.0 * mbs + (4.0 if stage == 3 else 0.0)
    bwd = 2 * fwd
    step = 5.0 + stage
    latency = (fwd + bwd + step) * gas
    flops = 6 * PARAMS * 512 * mbs
    metrics = {"fwd": fwd, "bwd": bwd, "step": step, "latency": latency,
               "FLOPS_per_gpu": flops * 1_000_000 * gas / latency,
               "throughput": tbs * 1_000_000 / latency, "rank": 0}
    if rank == 0:
        with open(at["metric_path"], "w") as fh:
            json.dump(metrics, fh)
            fh.flush()
            os.fsync(fh.fileno())
    if mbs in CRASH_MBS:
        raise RuntimeError("NCCL error: unhandled system error (after profiling)")
    print(f"rank {rank}: wrote metrics (latency {latency:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
