"""Compare the workload model with the real DeepSeek-V3.2 statistics, and refit its rate knobs.

``python -m sactool.workload.calibrate`` prints the calibration table (JSON on stdout);
``--fit`` first runs the coordinate search that produced the defaults in ``params.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from sactool.workload.params import (DSV32_LAYER_SPREAD_128K, DSV32_LOCALITY, DSV32_STEPS,
                                     REFERENCE_TOP_K, WorkloadParams)

FIT_KNOBS = {  # knob: (initial step, multiplicative?)
    "churn": (0.15, True),
    "churn_context_exponent": (0.05, False),
    "layer_spread": (0.1, False),
    "importance_shape": (0.3, True),
}


def calibration_table(params: WorkloadParams | None = None, *, seed: int = 0, layers: int = 61) -> list[dict]:
    """One row per published context: target vs model for each statistic (fractions of the prompt)."""
    from sactool.workload.generator import generate_topk
    from sactool.workload.stats import locality_stats

    rows = []
    for ctx, (union, touch, all_layers) in DSV32_LOCALITY.items():
        x = generate_topk(ctx, DSV32_STEPS, layers, REFERENCE_TOP_K, seed=seed, params=params)
        st = locality_stats(x, ctx)
        rows.append({
            "context_tokens": ctx,
            "layer_union_target": union, "layer_union": st.union_mean,
            "layer_union_error": st.union_mean / union - 1,
            "layer_union_min": st.union_min, "layer_union_max": st.union_max,
            "step_touch_target": touch, "step_touch": st.step_touch,
            "all_layers_union_target": all_layers, "all_layers_union": st.all_layers_union,
            "consecutive_overlap": st.consecutive_overlap,
        })
    return rows


def loss(rows: list[dict]) -> float:
    """Squared log error of the unions (+½ weight for the 128K layer range, small for all-layers)."""
    lo, hi = DSV32_LAYER_SPREAD_128K
    total = 0.0
    for r in rows:
        total += math.log(r["layer_union"] / r["layer_union_target"]) ** 2
        total += 0.03 * math.log((1.0005 - r["all_layers_union"]) / (1.0005 - r["all_layers_union_target"])) ** 2
        if r["context_tokens"] == 131072:
            total += 0.5 * (math.log(r["layer_union_min"] / lo) ** 2 + math.log(r["layer_union_max"] / hi) ** 2)
    return total


def fit(start: WorkloadParams | None = None, *, rounds: int = 3, seed: int = 0) -> WorkloadParams:
    """Coordinate search over FIT_KNOBS (first improving move wins; steps shrink each round)."""
    cur = start or WorkloadParams()
    best = loss(calibration_table(cur, seed=seed))
    steps = {k: v[0] for k, v in FIT_KNOBS.items()}
    for _ in range(rounds):
        for knob, (_, mult) in FIT_KNOBS.items():
            for d in (1, -1):
                v = getattr(cur, knob)
                nv = v * (1 + steps[knob]) ** d if mult else v + d * steps[knob]
                cand = dataclasses.replace(cur, **{knob: nv})
                cand_loss = loss(calibration_table(cand, seed=seed))
                print(f"{knob}={nv:.4g} loss {cand_loss:.4f} (best {best:.4f})", file=sys.stderr)
                if cand_loss < best:
                    best, cur = cand_loss, cand
                    break
        steps = {k: v * 0.6 for k, v in steps.items()}
    return cur


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fit", action="store_true", help="refit the rate knobs first")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    params = fit(seed=a.seed) if a.fit else WorkloadParams()
    rows = calibration_table(params, seed=a.seed)
    print(json.dumps({"params": dataclasses.asdict(params), "loss": loss(rows), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
