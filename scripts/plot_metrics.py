#!/usr/bin/env python3
"""Plots a gpipe-run --metrics-out file: train loss and eval loss against the step.

  scripts/plot_metrics.py METRICS.jsonl OUT.svg   (any Python 3, nothing to install)
  scripts/plot_metrics.py METRICS.jsonl OUT.png   (needs matplotlib: apt install python3-matplotlib)

Each line of the file is one JSON object with "step" and "loss", and
"eval_loss" (with "eval_accuracy" or "eval_perplexity") where the run evaluated.
"""
import json
import sys
from xml.sax.saxutils import escape


def read(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                float(row["step"]), float(row["loss"])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"plot_metrics: {path}:{number} is not a metrics line ({e}); "
                         "give a file written by gpipe-run --metrics-out")
            rows.append(row)
    if not rows:
        sys.exit(f"plot_metrics: {path} has no metrics; train with gpipe-run --metrics-out {path}")
    return rows


def series(rows):
    train = [(r["step"], r["loss"]) for r in rows]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    return train, evals


def svg(rows, title, out):
    train, evals = series(rows)
    width, height, left, right, top, bottom = 640, 400, 70, 20, 40, 50
    xs = [s for s, _ in train + evals]
    ys = [v for _, v in train + evals]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def px(step, value):
        x = left + (step - x0) / (x1 - x0) * (width - left - right)
        y = top + (y1 - value) / (y1 - y0) * (height - top - bottom)
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    for k in range(5):  # axis labels
        value = y0 + (y1 - y0) * k / 4
        step = x0 + (x1 - x0) * k / 4
        y = px(x0, value).split(",")[1]
        x = px(step, y0).split(",")[0]
        parts.append(f'<text x="{left - 6}" y="{y}" text-anchor="end" dy="4">{value:.3g}</text>')
        parts.append(f'<text x="{x}" y="{height - bottom + 16}" text-anchor="middle">{step:.0f}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 10}" text-anchor="middle">step</text>')
    for points, colour, name, dy in ((train, "#1f77b4", "train loss", 0), (evals, "#d62728", "eval loss", 16)):
        if not points:
            continue
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                     f'points="{" ".join(px(s, v) for s, v in points)}"/>')
        if len(points) < 50:
            parts += [f'<circle cx="{px(s, v).split(",")[0]}" cy="{px(s, v).split(",")[1]}" r="2.5" '
                      f'fill="{colour}"/>' for s, v in points]
        parts.append(f'<text x="{width - right - 90}" y="{top + 10 + dy}" fill="{colour}">{name}</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def png(rows, title, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: a PNG needs matplotlib (apt install python3-matplotlib); "
                 "or write an .svg, which needs nothing")
    train, evals = series(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(*zip(*train), label="train loss")
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.legend()
    fig.savefig(out, dpi=100)


def main():
    if len(sys.argv) != 3 or not sys.argv[2].endswith((".svg", ".png")):
        sys.exit("usage: plot_metrics.py METRICS.jsonl OUT.svg|OUT.png")
    rows = read(sys.argv[1])
    last = rows[-1]
    title = f"loss over {last['step']} steps"
    for key, name in (("eval_accuracy", "eval accuracy"), ("eval_perplexity", "eval perplexity")):
        evaluated = [r for r in rows if key in r]
        if evaluated:
            value = evaluated[-1][key]
            title += f", {name} {value:.1%}" if key == "eval_accuracy" else f", {name} {value:.2f}"
    (png if sys.argv[2].endswith(".png") else svg)(rows, title, sys.argv[2])
    print(f"plot_metrics: wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
