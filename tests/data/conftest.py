"""Data for the tests (stand-in scripts, folders DeepSpeed wrote): nothing to collect."""

collect_ignore_glob = ["*"]
