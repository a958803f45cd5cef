"""Regenerate the DeepSpeed autotuning folders in this directory with DeepSpeed itself.

Each scenario runs DeepSpeed's own launcher (``deepspeed --autotuning tune ...``), so
DeepSpeed's autotuner, scheduler and launcher write every file of
``autotuning_exps/`` and ``autotuning_results/``. Only the training script is a stand-in
(``stub_train.py``: it writes ``metrics.json`` / ``model_info.json`` the way DeepSpeed's
engine does and fails like an out-of-memory run when a pretend memory budget is
exceeded). DeepSpeed runs on its CPU accelerator (``DS_ACCELERATOR=cpu``,
``LOCAL_SIZE`` devices per node).

Two programs DeepSpeed calls are stand-ins, written to a temporary ``bin/``:

* ``pdsh``: runs each node's command on this machine (``%n`` = the node's index), so
  the two-node scenario's launches go through DeepSpeed's multi-node launcher; a
  clean-up call (``pdsh ... pkill -f NAME``) does nothing;
* ``ssh``: answers DeepSpeed's reachability check and ``hostname -I`` (127.0.0.1).

Usage (needs DeepSpeed, e.g. ``pip install torch==2.13.0 deepspeed tabulate`` in its
own virtual environment)::

    /path/to/venv/bin/python tests/data/deepspeed_autotuning/make_fixtures.py [SCENARIO ...]

Machine paths (the temporary folder, the Python executable) are replaced in every
written file; the script fails if one is left.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCENARIOS = {
    # ZeRO stages 0-3, user ZeRO settings, a tuning list, latency, OOM and a crash
    "zero_latency": {
        "argv": ["--autotuning", "tune", "--num_gpus", "2", "train.py",
                 "--deepspeed_config", "ds_config.json"],
        "config": {
            "train_micro_batch_size_per_gpu": 1,
            "fp16": {"enabled": True},
            "zero_optimization": {"stage": [0, 1, 2, 3], "overlap_comm": True,
                                  "contiguous_gradients": True,
                                  "reduce_bucket_size": [5e7, 5e8]},
            "autotuning": {"enabled": True, "metric": "latency",
                           "max_train_micro_batch_size_per_gpu": 8},
        },
        "env": {"LOCAL_SIZE": "2", "STUB_GPU_BYTES": "4e9", "STUB_ACT_BYTES": "0.5e9",
                "STUB_CRASH_MBS": "2"},
    },
    # a Hugging Face-style launch: --deepspeed CFG, "auto" values, arg_mappings
    "hf_auto": {
        "argv": ["--autotuning", "tune", "--num_gpus", "2", "train.py",
                 "--deepspeed", "ds_config.json", "--per_device_train_batch_size", "1",
                 "--gradient_accumulation_steps", "1", "--fp16"],
        "config": {
            "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "fp16": {"enabled": "auto"},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
            "zero_optimization": {"stage": 2, "overlap_comm": True,
                                  "offload_optimizer": {"device": "none"}},
            "autotuning": {
                "enabled": True, "metric": "throughput",
                "max_train_micro_batch_size_per_gpu": 6,
                "arg_mappings": {
                    "train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
                    "gradient_accumulation_steps": "--gradient_accumulation_steps",
                },
            },
        },
        "env": {"LOCAL_SIZE": "2", "STUB_GPU_BYTES": "4e9", "STUB_ACT_BYTES": "0.5e9"},
    },
    # model parallelism 2 on 4 GPUs and a micro-batch list
    "mp2": {
        "argv": ["--autotuning", "tune", "--num_gpus", "4", "train.py",
                 "--deepspeed_config", "ds_config.json", "--mp_size", "2"],
        "config": {
            "train_micro_batch_size_per_gpu": [1, 2],
            "gradient_accumulation_steps": 3,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 1},
            "autotuning": {"enabled": True, "metric": "throughput", "mp_size": 2},
        },
        "env": {"LOCAL_SIZE": "4", "STUB_GPU_BYTES": "8e9", "STUB_ACT_BYTES": "0.5e9"},
    },
    # two nodes x 4 GPUs from a hostfile, through DeepSpeed's multi-node (pdsh) launcher
    "two_nodes": {
        "argv": ["--autotuning", "tune", "--num_nodes", "2", "--num_gpus", "4",
                 "--hostfile", "hostfile", "train.py", "--deepspeed_config",
                 "ds_config.json"],
        "hostfile": "worker-0 slots=4\nworker-1 slots=4\n",
        "config": {
            "fp16": {"enabled": True},
            "zero_optimization": {"stage": 2},
            "autotuning": {"enabled": True, "metric": "throughput",
                           "max_train_micro_batch_size_per_gpu": 4},
        },
        "env": {"STUB_GPU_BYTES": "3e9", "STUB_ACT_BYTES": "0.5e9"},
    },
}

FAKE_PDSH = r'''#!/usr/bin/env python3
import subprocess, sys
args = sys.argv[1:]
hosts, cmd, i = [], [], 0
while i < len(args):
    a = args[i]
    if a == "-w":
        hosts = args[i + 1].split(","); i += 2; continue
    if a == "-f":
        i += 2; continue
    if a == "-S":
        i += 1; continue
    cmd = args[i:]; break
if not cmd or cmd[0].strip().startswith("pkill"):
    sys.exit(0)  # DeepSpeed's clean-up call: nothing to kill on a stand-in node
procs = [subprocess.Popen(["sh", "-c", " ".join(cmd).replace("%n", str(n))])
         for n, _ in enumerate(hosts)]
sys.exit(max(p.wait() for p in procs))
'''

FAKE_SSH = r'''#!/bin/sh
# stand-in for DeepSpeed's ssh checks: "ssh [opts] HOST hostname [-I]"
for last; do :; done
if [ "$last" = "-I" ]; then echo 127.0.0.1; else echo stand-in-node; fi
'''


def run_scenario(name, spec, deepspeed_exe):
    out = HERE / name
    with tempfile.TemporaryDirectory(prefix="ds-fixture-") as tmp:
        work = Path(tmp)
        shutil.copy(HERE / "stub_train.py", work / "train.py")
        (work / "ds_config.json").write_text(json.dumps(spec["config"], indent=2) + "\n")
        if "hostfile" in spec:
            (work / "hostfile").write_text(spec["hostfile"])
        bindir = work / "bin"
        bindir.mkdir()
        for tool, text in (("pdsh", FAKE_PDSH), ("ssh", FAKE_SSH)):
            (bindir / tool).write_text(text)
            (bindir / tool).chmod(0o755)
        env = dict(os.environ, DS_ACCELERATOR="cpu", USER="simcore",
                   PATH=f"{bindir}:{Path(deepspeed_exe).parent}:{os.environ['PATH']}",
                   **spec["env"])
        t0 = time.time()
        proc = subprocess.run(["deepspeed", *spec["argv"]], cwd=work, env=env,
                              capture_output=True, text=True, timeout=1800)
        (work / "launcher.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            sys.exit(f"{name}: deepspeed exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        for item in ("autotuning_exps", "autotuning_results", "ds_config.json", "hostfile",
                     "train.py"):
            src = work / item
            if src.is_dir():
                shutil.copytree(src, out / item)
            elif src.exists():
                shutil.copy(src, out / item)
        (out / "command.txt").write_text("deepspeed " + " ".join(spec["argv"]) + "\n")
        scrub(out, {str(work): ".", sys.executable: "python", os.path.realpath(sys.executable):
                    "python", str(Path(deepspeed_exe).parent) + "/": ""})
        write_provenance(out, spec, time.time() - t0)
    print(f"{name}: {len(list((out / 'autotuning_results').iterdir()))} entries")


def scrub(root, replace):
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        for old, new in sorted(replace.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(old, new)
        p.write_text(text, encoding="utf-8")
        for marker in ("/tmp/", "/work/", "/root/", "/home/", "site-packages"):
            if marker in text:
                sys.exit(f"{p}: a machine path ({marker}) is left in the fixture")


def write_provenance(out, spec, seconds):
    import deepspeed
    import torch

    (out / "PROVENANCE.json").write_text(json.dumps({
        "made_by": "DeepSpeed's launcher and autotuner (deepspeed --autotuning tune); "
                   "training script: stub_train.py (a stand-in engine)",
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "accelerator": "cpu (DS_ACCELERATOR=cpu)",
        "stand_ins": ["pdsh (runs each node's command locally)", "ssh (reachability check)"],
        "environment": spec["env"],
        "seconds": round(seconds),
    }, indent=2) + "\n")


def main(names):
    exe = shutil.which("deepspeed", path=os.path.dirname(sys.executable)) or shutil.which(
        "deepspeed")
    if exe is None:
        sys.exit("deepspeed is not installed for this Python; run this script with the "
                 "Python of a virtual environment that has DeepSpeed")
    for name in names or SCENARIOS:
        if name not in SCENARIOS:
            sys.exit(f"unknown scenario {name!r}; pass one of {', '.join(SCENARIOS)}")
        run_scenario(name, SCENARIOS[name], exe)


if __name__ == "__main__":
    main(sys.argv[1:])
