"""A stand-in for DeepSpeed's ``deepspeed`` launcher, for CommandRunner tests.

It understands the scheduler's form only (``[--hostfile H] --include
HOST:SLOTS@HOST:SLOTS --master_port P [flags] script args``) and, like DeepSpeed's
launcher, starts one process per slot with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``
set and ``--local_rank=N`` prepended to the script's arguments, then exits with the
first non-zero exit code. Each call is appended to ``$FAKE_DEEPSPEED_LOG`` (one JSON
list per line) so tests can check the launches. It deliberately shares no code with
simcore.
"""

import json
import os
import subprocess
import sys

WITH_VALUE = {"--hostfile", "-H", "--include", "-i", "--exclude", "-e", "--master_port",
              "--master_addr", "--num_gpus", "--num_nodes", "--launcher", "--launcher_args",
              "--ssh_port", "--node_rank", "--log_level", "--autotuning"}


def main(argv):
    log = os.environ.get("FAKE_DEEPSPEED_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps(argv) + "\n")
    opts, i = {}, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in WITH_VALUE:
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            opts[argv[i]] = True
            i += 1
    script, args = argv[i], argv[i + 1:]
    slots = []
    include = opts.get("--include") or opts.get("-i")
    if include:
        for part in include.split("@"):
            host, _, s = part.partition(":")
            slots += [(host, int(x)) for x in s.split(",")] if s else [(host, 0)]
    else:
        slots = [("localhost", n) for n in range(int(opts.get("--num_gpus", 1)))]
    procs = []
    for rank, (_, local) in enumerate(slots):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(len(slots)))
        extra = [] if "--no_local_rank" in opts else [f"--local_rank={local}"]
        procs.append(subprocess.Popen([sys.executable, script, *extra, *args], env=env))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
