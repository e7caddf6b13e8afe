#!/usr/bin/env python3
"""Per-stage forward+backward time from a gpipe-run --trace file.

    stage_times.py TRACE.json   -> one line per stage and the max/mean ratio

Each step's (stage, micro-batch) tasks are summed per stage; the first step
(warm-up) is dropped and the median over the remaining steps is reported.
"""
import json
import statistics
import sys


def main() -> None:
    events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
    stages = sorted({e["args"]["stage"] for e in events})
    # A step starts with the forward of stage 0, micro-batch 0.
    starts = sorted(e["ts"] for e in events if e["cat"] == "forward" and e["args"]["stage"] == 0
                    and e["args"]["micro_batch"] == 0)
    per_step = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else float("inf")
        totals = {s: 0.0 for s in stages}
        for e in events:
            if start <= e["ts"] < end:
                totals[e["args"]["stage"]] += e["dur"] / 1000.0
        per_step.append(totals)
    measured = per_step[1:] or per_step
    medians = [statistics.median(step[s] for step in measured) for s in stages]
    for s, ms in zip(stages, medians):
        print(f"  stage {s}: {ms:8.2f} ms forward+backward (recompute included)")
    mean = sum(medians) / len(medians)
    print(f"  measured max/mean stage time = {max(medians) / mean:.3f}")


if __name__ == "__main__":
    main()
