"""MLPerf Inference Server / Interactive runs against the request simulator, held out
(never fitted).

``mlperf_server.json`` holds published MLPerf Inference results (repository, path and
commit per run): LoadGen issues queries as a Poisson process at the run's rate for at
least ``min_duration`` (600 s, 2,400 s for NVIDIA's), each one sample of the benchmark's
dataset drawn at random, and logs the percentiles of the time to first token
(TTFT) and of the time per output token (TPOT, ``(latency - TTFT) / (tokens - 1)`` per
sample). The engine's settings come from the submission's own configuration (path and
commit per run): instances, tensor parallelism, precision, the batch cap
(``max_num_seqs`` / ``gpu_batch_size``), the token budget per step and the KV-cache
memory fraction.

The replay (:func:`mlperf_rows`): Poisson arrivals at the run's scheduled rate (LoadGen's
"Scheduled samples per second") over :data:`REPLAY_SPAN_S`, each request one dataset
sample (uniform, fixed seed; LoadGen's v5.1 runs draw whole permutations of the set,
the same lengths in the long run) with its own input length; every request's output length is
the dataset's reference length scaled so that their mean is the run's logged tokens per
sample ("Completed tokens per second" / "Completed samples per second"), capped at the
benchmark's 1,024 (the generated lengths of a run are not published: the accuracy logs
are truncated); requests dealt round-robin to the instances, each scheduled as the mixed
(chunked-prefill, continuous-batching) engines these stacks run
(:class:`~simcore.studies.serving.simulate.Scheduler`, ``policy="mixed"``).

Two comparisons per run:

* the four percentiles at the logged rate;
* the **capacity**: the highest rate at which the simulated p99 TTFT and p99 TPOT meet
  the scenario's limits (the benchmark's own pass rule) over LoadGen's minimum run of 600
  s, against the rate the submission ran at (LoadGen's scheduled rate, at which it met
  them). A submission's rate is the highest its submitter found passing, so it is the
  measured capacity to within the step of their search.

A Server run sits close to its capacity by design, where the TPOT is ``a / (1 - rho)`` of
the step's fixed cost (``rho`` the load): there a few percent of throughput error moves the
percentiles by tens of percent, and the capacity is the well-conditioned comparison.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MlperfRow", "load_mlperf_runs", "mlperf_rows", "mlperf_summary", "replay_traffic"]

_HERE = Path(__file__).parent
_JSON = _HERE / "mlperf_server.json"
#: seconds of arrivals each replay simulates (the runs last 600-2,400 s; their percentiles
#: are steady-state ones, which 600 s of arrivals reach)
REPLAY_SPAN_S = 600.0
#: the seed of the replays' arrivals and sample choices
SEED = 0
#: the metrics compared at the logged rate: (key, label)
METRICS: tuple[tuple[str, str], ...] = (("ttft_p50_ms", "p50 TTFT"), ("ttft_p99_ms", "p99 TTFT"),
                                        ("tpot_p50_ms", "p50 TPOT"), ("tpot_p99_ms", "p99 TPOT"))
#: the capacity search: rates from CAP_LO to CAP_HI times the scheduled rate (widened by
#: doubling where both meet or both miss the limits), bisected CAP_STEPS times (a bracket
#: ratio of 2 to within 2^(1/64), 1.1%), each rate's replay over CAP_SPAN_S seconds of
#: arrivals: LoadGen's minimum duration of a Server run (the runs lasted 600, 1,200 or
#: 2,400 s; a shorter replay lets an overloaded rate pass: at 300 s, 1-8% of the
#: capacities were rates the engine could not sustain)
CAP_LO, CAP_HI, CAP_STEPS, CAP_SPAN_S = 0.8, 1.6, 6, 600.0
#: most doublings of the capacity search's bracket outwards before it reports a bound
CAP_WIDEN = 3


@lru_cache(maxsize=1)
def _file() -> dict[str, Any]:
    return dict(json.loads(_JSON.read_text(encoding="utf-8")))


def load_mlperf_runs() -> tuple[dict[str, Any], ...]:
    """The runs of ``mlperf_server.json`` (each a dict, as transcribed)."""
    return tuple(_file()["runs"])


@lru_cache(maxsize=4)
def dataset_lengths(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A dataset's per-sample input and reference output lengths (tokens), in its order."""
    spec = _file()["datasets"][name]
    with (_HERE / spec["file"]).open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    isl = np.array([int(r["input_length"]) for r in rows], dtype=np.int64)
    ref = np.array([int(r["output_length"]) for r in rows], dtype=np.int64)
    return isl, ref


def replay_traffic(run: dict[str, Any], *, rate_rps: float, span_s: float = REPLAY_SPAN_S,
                   seed: int = SEED) -> Any:
    """The run's queries at ``rate_rps`` over ``span_s`` seconds. The same seed gives the
    same samples in the same order at every rate (arrivals compressed), so a higher rate
    only loads the server more."""
    from ..studies.serving.traffic import Traffic, _unit_arrivals

    isl_all, ref = dataset_lengths(run["dataset"])
    arrival = _unit_arrivals(rate_rps * span_s, seed, count=False) / rate_rps
    idx = np.random.default_rng(seed + 1).integers(0, isl_all.size, arrival.size)
    return Traffic(arrival_s=arrival, isl=isl_all[idx], osl=_output_lengths(run, ref[idx]),
                   duration_s=float(span_s), source=f"{run['id']} replay at {rate_rps:.4g} req/s")


def _output_lengths(run: dict[str, Any], ref: np.ndarray) -> np.ndarray:
    """The run's output lengths for samples of reference lengths ``ref``: its
    ``fixed_osl``, or the reference scaled so that the dataset's mean is the run's logged
    tokens per sample, at least 1 and at most its ``max_output``."""
    if run.get("fixed_osl"):
        return np.full(ref.shape, int(run["fixed_osl"]), np.int64)
    scale = float(run["tokens_per_sample"]) / float(dataset_lengths(run["dataset"])[1].mean())
    cap = run.get("max_output") or np.iinfo(np.int64).max
    return np.clip(np.rint(ref * scale), 1, cap).astype(np.int64)


def _scheduler(run: dict[str, Any], offline: bool = False) -> Any:
    from ..studies.serving.simulate import Scheduler

    eng = {**run["engine"], **(run["offline"]["engine"] if offline else {})}
    return Scheduler(token_budget=int(eng["token_budget"]), max_seqs=int(eng["max_seqs"]),
                     kv_usable_fraction=float(eng["kv_usable_fraction"]), policy="mixed",
                     long_prefill_threshold=int(eng.get("long_prefill_threshold", 0)))


def _max_tokens(run: dict[str, Any]) -> int:
    """The longest request the replay can hold: the longest prompt plus the longest output."""
    isl, ref = dataset_lengths(run["dataset"])
    return int(isl.max()) + int(_output_lengths(run, ref).max()) + 1


def _instance(run: dict[str, Any], sched: Any, efficiency: Any) -> Any:
    from ..model.presets import get_family, load_model
    from ..studies.serving.simulate import price_instances

    eng = run["engine"]
    fam = get_family(run["family"])
    insts = price_instances(load_model(run["model"]), family=fam, hardware=fam.hardware,
                            efficiency=efficiency, dtype=eng["dtype"], max_devices=int(eng["tp"]),
                            max_tokens=_max_tokens(run), scheduler=sched,
                            runtime=eng["runtime"])
    label = f"TP{int(eng['tp'])}"
    found = next((i for i in insts if i.label == label), None)
    if found is None:
        raise ValueError(f"{run['id']}: no {label} layout of {run['model']} fits one "
                         f"{run['family']} instance at the run's settings")
    return found


def _percentiles(run: dict[str, Any], inst: Any, sched: Any, rate: float,
                 span_s: float) -> dict[str, Any]:
    """The replay at ``rate`` as the rate planner scores a deployment
    (:func:`~simcore.studies.serving.simulate.outcome` at the run's p99 limits: the
    :data:`METRICS` percentiles and ``meets_limits``); a dropped request makes every
    percentile infinite."""
    from ..studies.serving.simulate import outcome, serve_agg

    traffic = replay_traffic(run, rate_rps=rate, span_s=span_s)
    served = serve_agg(traffic, inst, int(run["engine"]["instances"]), sched)
    lim = run["limits"]
    res = outcome(served, traffic, max_ttft_ms=float(lim["ttft_ms"]),
                  max_tpot_ms=float(lim["tpot_ms"]))
    if not served.served.all():
        res.update({k: math.inf for k, _ in METRICS})
    return res


def _capacity(run: dict[str, Any], inst: Any, sched: Any,
              span_s: float = CAP_SPAN_S) -> tuple[float, str]:
    """The highest rate (req/s) whose replay meets the run's p99 limits and how sure it is:
    ``(rate, "")`` bisected to :data:`CAP_STEPS` halvings of the bracket's log-ratio,
    starting from :data:`CAP_LO` and :data:`CAP_HI` times the scheduled rate, each end
    moved out by doubling (at most :data:`CAP_WIDEN` times) until one rate meets the limits
    and one does not; ``(rate, ">")`` when even the highest rate tried meets them (the
    capacity is above it), ``(rate, "<")`` when even the lowest fails."""
    ran = float(run["measured"]["scheduled_rps"])
    lo, hi = CAP_LO * ran, CAP_HI * ran

    def meets(rate: float) -> bool:
        return bool(_percentiles(run, inst, sched, rate, span_s)["meets_limits"])

    for _ in range(CAP_WIDEN):
        if meets(lo):
            break
        lo, hi = lo / 2.0, lo
    else:
        return lo, "<"
    for _ in range(CAP_WIDEN):
        if not meets(hi):
            break
        lo, hi = hi, hi * 2.0
    else:
        return lo, ">"
    for _ in range(CAP_STEPS):
        mid = math.sqrt(lo * hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi), ""


def _offline_rps(run: dict[str, Any], sched: Any, inst: Any) -> float:
    """The run's Offline counterpart (the same system's throughput with every sample issued
    at once, at its Offline settings: ``sched`` and ``inst``) simulated: samples / the
    last one's completion."""
    from ..studies.serving.simulate import serve_agg
    from ..studies.serving.traffic import Traffic

    off = run["offline"]
    n = int(off["issued_samples"])
    as_run = {**run, "tokens_per_sample": off["tokens_per_sample"]}
    if run.get("fixed_osl"):  # the Offline run's own output length
        as_run["fixed_osl"] = round(float(off["tokens_per_sample"]))
    one = replay_traffic(as_run, rate_rps=1.0, span_s=float(n))
    traffic = Traffic(arrival_s=np.zeros(n), isl=_head(one.isl, n), osl=_head(one.osl, n),
                      duration_s=1.0, source=f"{run['id']} offline")
    instances = int({**run["engine"], **off["engine"]}["instances"])
    served = serve_agg(traffic, inst, instances, sched)
    if not served.served.all():
        return math.nan
    tpot = np.nan_to_num(served.tpot_ns, nan=0.0)
    done = served.ttft_ns + tpot * (traffic.osl - 1)
    return n / (float(done.max()) / 1e9)


def _head(a: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` of ``a``, repeated if it is shorter."""
    return np.resize(a, n)


@dataclass(frozen=True)
class MlperfRow:
    """One run: ``measured`` and ``predicted`` percentiles (ms) per :data:`METRICS` key at
    the logged rate, the rate LoadGen scheduled, at which the run met its limits
    (``measured_rps``: the highest its submitter found passing) and the simulated capacity
    under the run's limits (``capacity``: the rate and its bound, ``capacity_rps`` /
    ``capacity_bound``); the Offline counterpart's measured and simulated throughput
    (samples/s; NaN without one, or where the simulation drops a request)."""

    id: str
    label: str
    measured: dict[str, float]
    predicted: dict[str, float]
    measured_rps: float
    capacity: tuple[float, str]
    offline_measured_rps: float
    offline_rps: float
    source: str

    @property
    def error(self) -> dict[str, float]:
        return {k: self.predicted[k] / self.measured[k] - 1.0 for k in self.measured}

    @property
    def capacity_rps(self) -> float:
        return self.capacity[0]

    @property
    def capacity_bound(self) -> str:
        """``""`` (bisected), ``">"`` (above the highest rate tried) or ``"<"`` (below the
        lowest)."""
        return self.capacity[1]

    @property
    def capacity_error(self) -> float:
        return self.capacity_rps / self.measured_rps - 1.0

    @property
    def offline_error(self) -> float:
        """The Offline counterpart's simulated throughput against its measured one (NaN
        where the run has none of its own, as the Interactive run sharing the Server
        run's)."""
        return self.offline_rps / self.offline_measured_rps - 1.0


def _row(job: tuple[dict[str, Any], Any, Any, Any], span_s: float) -> MlperfRow:
    """One run replayed: ``job`` is (run, scheduler, instance, the Offline (scheduler,
    instance) or None)."""
    run, sched, inst, offline = job
    m = run["measured"]
    at_rate = _percentiles(run, inst, sched, float(m["scheduled_rps"]), span_s)
    src = run["source"]
    off = run.get("offline")
    return MlperfRow(
        id=run["id"], label=run["label"], measured={k: float(m[k]) for k, _ in METRICS},
        predicted={k: at_rate[k] for k, _ in METRICS},
        measured_rps=float(m["scheduled_rps"]),
        capacity=_capacity(run, inst, sched, min(span_s, CAP_SPAN_S)),
        offline_measured_rps=float(off["samples_per_s"]) if off else math.nan,
        offline_rps=_offline_rps(run, *offline) if off else math.nan,
        source=f"{src['repo']} {src['path']} @ {src['commit'][:12]}")


def mlperf_rows(efficiency: Any = None, *, span_s: float = REPLAY_SPAN_S,
                ids: tuple[str, ...] | None = None, workers: int | None = None,
                progress: Any = None) -> list[MlperfRow]:
    """Every run (or those in ``ids``) replayed at its rate and searched for its capacity
    (``efficiency``: the factors; None = the fitted defaults). The engines are priced one
    after the other, the replays run on ``workers`` threads (None: one per CPU; the
    request kernel releases the GIL); ``progress(done, total, row)`` is called as each run
    finishes. Rows in the file's order."""
    import os
    from concurrent.futures import ThreadPoolExecutor, as_completed

    jobs: list[tuple[dict[str, Any], Any, Any, Any]] = []
    for run in load_mlperf_runs():
        if ids is None or run["id"] in ids:
            sched = _scheduler(run)
            offline: Any = None
            if run.get("offline"):
                off_sched = _scheduler(run, offline=True)
                offline = (off_sched, _instance(run, off_sched, efficiency))
            jobs.append((run, sched, _instance(run, sched, efficiency), offline))
    n = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    rows: list[MlperfRow | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = {pool.submit(_row, job, span_s): i for i, job in enumerate(jobs)}
        for done, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows[futures[fut]] = row
            if progress is not None:
                progress(done, len(jobs), row)
    return [r for r in rows if r is not None]


def mlperf_summary(rows: list[MlperfRow]) -> dict[str, Any]:
    """Mean |error| per metric, of the capacity (over the runs whose capacity was bisected,
    ``n_capacity``: a bound is no value) and of the Offline throughput, and how many runs
    have p99 TTFT and p99 TPOT both within 15% (issue 35's target)."""
    per = {k: float(np.mean([abs(r.error[k]) for r in rows])) for k, _ in METRICS}
    within = sum(abs(r.error["ttft_p99_ms"]) <= 0.15 and abs(r.error["tpot_p99_ms"]) <= 0.15
                 for r in rows)
    off = [r.offline_error for r in rows if np.isfinite(r.offline_error)]
    cap = [r.capacity_error for r in rows if not r.capacity_bound]
    return {"n": len(rows), "per_metric": per, "p99_within_15": within,
            "capacity": float(np.mean(np.abs(cap))) if cap else math.nan,
            "capacity_signed": float(np.mean(cap)) if cap else math.nan, "n_capacity": len(cap),
            "offline": float(np.mean(np.abs(off))) if off else math.nan,
            "offline_signed": float(np.mean(off)) if off else math.nan, "n_offline": len(off)}
