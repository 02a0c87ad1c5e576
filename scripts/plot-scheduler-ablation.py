#!/usr/bin/env python3
"""The task scheduler's ablation (Ansor, Figure 10): a network's estimated latency against
measured trials and against wall time, for the gradient scheduler and round-robin, as one SVG
(no plotting library needed).

    scripts/plot-scheduler-ablation.py out.svg NAME gradient.csv round-robin.csv [NAME g.csv r.csv ...]

Each CSV is what `loomc tune --curve` writes: trials,seconds,latency_ms after every round (the
sum over tasks of weight x best cost, from the first round where every task has a program).
Prints, per network, when the gradient scheduler first reaches round-robin's final latency,
in trials and as a share of round-robin's trials.
"""
import csv
import sys
from html import escape


def read(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((int(r['trials']), float(r['seconds']), float(r['latency_ms'])))
    if not rows:
        sys.exit(f"{path}: no rounds with a latency")
    return rows


def panel(x0, y0, w, h, series, xi, xlabel, title):
    """series: [(label, colour, rows)]; xi: 0 trials, 1 seconds."""
    xmax = max(r[xi] for _, _, rows in series for r in rows)
    lats = [r[2] for _, _, rows in series for r in rows]
    ymin, ymax = min(lats), max(lats)
    # Start the y axis near the final values: the first rounds are far above and would flatten
    # everything that matters.
    ymax = min(ymax, 3 * ymin)
    pad = (ymax - ymin) * 0.05 or 1
    ymin, ymax = ymin - pad, ymax + pad
    sx = lambda v: x0 + 50 + (w - 60) * v / xmax
    sy = lambda v: y0 + 20 + (h - 50) * (1 - (min(v, ymax) - ymin) / (ymax - ymin))
    out = [f'<text x="{x0 + w / 2}" y="{y0 + 14}" text-anchor="middle" font-size="13">{escape(title)}</text>',
           f'<rect x="{x0 + 50}" y="{y0 + 20}" width="{w - 60}" height="{h - 50}" fill="none" stroke="#999"/>']
    for k in range(5):
        v = ymin + (ymax - ymin) * k / 4
        out.append(f'<text x="{x0 + 46}" y="{sy(v) + 4:.1f}" text-anchor="end" font-size="10">{v:.2f}</text>')
        xv = xmax * k / 4
        out.append(f'<text x="{sx(xv):.1f}" y="{y0 + h - 16}" text-anchor="middle" font-size="10">{xv:.0f}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h - 2}" text-anchor="middle" font-size="11">{escape(xlabel)}</text>')
    out.append(f'<text x="{x0 + 12}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 + 12} {y0 + h / 2})" text-anchor="middle">latency (ms)</text>')
    for i, (label, colour, rows) in enumerate(series):
        pts = []
        for r in rows:
            pts.append(f'{sx(r[xi]):.1f},{sy(r[2]):.1f}')
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(pts)}"/>')
        out.append(f'<text x="{x0 + w - 20}" y="{y0 + 36 + 14 * i}" text-anchor="end" font-size="11" fill="{colour}">{escape(label)}</text>')
    return out


def main():
    if len(sys.argv) < 5 or (len(sys.argv) - 2) % 3:
        sys.exit(__doc__)
    out_path = sys.argv[1]
    nets = [(sys.argv[i], read(sys.argv[i + 1]), read(sys.argv[i + 2])) for i in range(2, len(sys.argv), 3)]
    w, h = 420, 300
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h * len(nets)}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>']
    for n, (name, grad, rr) in enumerate(nets):
        series = [('gradient', '#c0392b', grad), ('round-robin', '#2c3e50', rr)]
        svg += panel(0, n * h, w, h, series, 0, 'measured programs', f'{name}: latency vs trials')
        svg += panel(w, n * h, w, h, series, 1, 'seconds', f'{name}: latency vs wall time')
        target = rr[-1][2]
        reached = next((r for r in grad if r[2] <= target), None)
        if reached:
            print(f'{name}: round-robin ends at {target:.3f} ms after {rr[-1][0]} trials; the gradient '
                  f'scheduler is there after {reached[0]} trials ({100 * reached[0] / rr[-1][0]:.0f} %), '
                  f'{reached[1]:.0f} s; it ends at {grad[-1][2]:.3f} ms')
        else:
            print(f'{name}: the gradient scheduler ({grad[-1][2]:.3f} ms after {grad[-1][0]} trials) never '
                  f'reaches round-robin\'s final {target:.3f} ms')
    svg.append('</svg>')
    with open(out_path, 'w') as f:
        f.write('\n'.join(svg))
    print('wrote', out_path)


if __name__ == '__main__':
    main()
