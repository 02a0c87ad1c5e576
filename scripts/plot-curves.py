#!/usr/bin/env python3
"""Best-so-far curves of tuning logs as one SVG picture (no plotting library needed).

    scripts/plot-curves.py [--threads N] out.svg LOG.jsonl[:GFLOP] [LOG.jsonl[:GFLOP] ...]

Each LOG is a loom tuning log (JSON lines, search/records.hpp); its records are taken in file
order, which is the order the tuner measured them. One panel per log: the best measured speed
after each trial. With :GFLOP (the workload's floating-point operations, in 10^9) the y axis is
GFLOP/s; without it, the speed relative to the log's final best (1.0 = best). Failed records
count as trials but never improve the curve. Several logs of one workload (a resumed run split
across files) can be joined with '+': a.jsonl+b.jsonl:2.147. With --threads N only the records
measured with N threads count (a log tuned at 1 and at 2 threads holds both).
"""
import json
import sys
from html import escape


def read_costs(paths, threads=None):
    costs = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    print(f"{path}:{n}: skipped a damaged line", file=sys.stderr)
                    continue
                if threads is not None and r.get("threads") != threads:
                    continue
                c = r.get("costs") or []
                ok = r.get("error", 1) == 0 and c and all(x > 0 for x in c)
                costs.append(sum(c) / len(c) if ok else None)
    return costs


def best_so_far(costs, gflop):
    out, best = [], None
    for c in costs:
        if c is not None and (best is None or c < best):
            best = c
        out.append(None if best is None else (gflop / best if gflop else 1.0 / best))
    if not gflop and best is not None:
        out = [None if v is None else v * best for v in out]  # relative to the final best
    return out


def panel(x0, y0, w, h, title, ys, unit):
    n = len(ys)
    top = max([v for v in ys if v is not None] or [1.0]) * 1.1
    parts = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="white" stroke="#888"/>',
             f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="13">'
             f'{escape(title)}</text>']
    for k in range(5):  # horizontal grid with labels
        v = top * k / 4
        y = y0 + h - h * k / 4
        parts.append(f'<line x1="{x0}" y1="{y}" x2="{x0 + w}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{x0 - 4}" y="{y + 4}" text-anchor="end" font-size="10">{v:.3g}</text>')
    for k in range(5):
        t = round(n * k / 4)
        x = x0 + w * k / 4
        parts.append(f'<text x="{x}" y="{y0 + h + 14}" text-anchor="middle" font-size="10">{t}</text>')
    pts = [(x0 + w * (i + 1) / max(n, 1), y0 + h - h * v / top) for i, v in enumerate(ys) if v is not None]
    if pts:
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        parts.append(f'<polyline points="{d}" fill="none" stroke="#1f77b4" stroke-width="1.8"/>')
        final = [v for v in ys if v is not None][-1]
        parts.append(f'<text x="{x0 + w - 4}" y="{y0 + 14}" text-anchor="end" font-size="11">'
                     f'best {final:.3g} {unit} after {n} trials</text>')
    parts.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 28}" text-anchor="middle" font-size="10">'
                 f'measured programs</text>')
    return parts


def main(argv):
    threads = None
    if len(argv) > 2 and argv[1] == "--threads":
        threads, argv = int(argv[2]), argv[:1] + argv[3:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, specs = argv[1], argv[2:]
    cols = min(3, len(specs))
    rows = (len(specs) + cols - 1) // cols
    pw, ph, mx, my = 300, 180, 70, 60
    width, height = cols * (pw + mx) + 20, rows * (ph + my) + 30
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif">',
           f'<rect width="{width}" height="{height}" fill="#fafafa"/>']
    for i, spec in enumerate(specs):
        logs, _, gflop = spec.partition(":")
        paths = logs.split("+")
        g = float(gflop) if gflop else 0.0
        ys = best_so_far(read_costs(paths, threads), g)
        name = paths[0].rsplit("/", 1)[-1].removesuffix(".jsonl")
        if threads is not None:
            name += f", {threads} thread{'s' if threads > 1 else ''}"
        unit = "GFLOP/s" if g else "x final best"
        x0 = 20 + mx + (i % cols) * (pw + mx)
        y0 = 30 + (i // cols) * (ph + my)
        svg += panel(x0, y0, pw, ph, name, ys, unit)
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
