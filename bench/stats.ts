/**
 * Summary statistics of raw durations (milliseconds). Percentiles by linear interpolation.
 * @module
 */
export interface Summary {
  readonly n: number;
  readonly p50: number;
  readonly p95: number;
  readonly mean: number;
  readonly min: number;
  readonly max: number;
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const at = (sorted.length - 1) * p;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  const a = sorted[lo] ?? Number.NaN;
  const b = sorted[hi] ?? Number.NaN;
  return a + (b - a) * (at - lo);
}

export function summarize(values: readonly number[]): Summary {
  const n = values.length;
  return {
    n,
    p50: round(percentile(values, 0.5)),
    p95: round(percentile(values, 0.95)),
    mean: round(n ? values.reduce((s, v) => s + v, 0) / n : Number.NaN),
    min: round(n ? Math.min(...values) : Number.NaN),
    max: round(n ? Math.max(...values) : Number.NaN),
  };
}

export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Fisher-Yates with a seeded generator: a reproducible interleaving of modes. */
export function shuffled<T>(items: readonly T[], next: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

/** One pass over the modes: their order, then per mode the samples `[from - discard, to)`, the first `discard` not timed. */
export interface Pass<T> {
  readonly order: readonly T[];
  readonly discard: number;
  readonly from: number;
  readonly to: number;
}

/**
 * Samples `[warmup, warmup + samples)` of every mode in two passes: `order` over the first half
 * after `warmup` discarded samples, then reversed over the rest after one discarded sample (the
 * work a previous mode left behind), pooled. Measured in one block per mode, drift over a run
 * decided rankings: the same one-task plan had p50s of 624 and 878 ms, minutes apart, in one
 * run (fashion-mnist batches of 100, 80899aa); in two passes every mode sees early and late.
 */
export function twoPasses<T>(order: readonly T[], warmup: number, samples: number): Pass<T>[] {
  const half = Math.ceil(samples / 2);
  const passes: Pass<T>[] = [{ order, discard: warmup, from: warmup, to: warmup + half }];
  if (samples > half) {
    passes.push({
      order: [...order].reverse(),
      discard: Math.min(1, warmup),
      from: warmup + half,
      to: warmup + samples,
    });
  }
  return passes;
}

/**
 * Ordinary least squares for y = X b (X rows already include a 1 for the intercept), by the
 * normal equations with Gaussian elimination; fine for the 2-4 columns used here.
 */
export function leastSquares(x: readonly number[][], y: readonly number[]): number[] {
  const m = x[0]?.length ?? 0;
  const a = Array.from({ length: m }, () => new Array<number>(m + 1).fill(0));
  x.forEach((row, i) => {
    for (let r = 0; r < m; r++) {
      for (let c = 0; c < m; c++)
        (a[r] as number[])[c] = (a[r]?.[c] ?? 0) + (row[r] ?? 0) * (row[c] ?? 0);
      (a[r] as number[])[m] = (a[r]?.[m] ?? 0) + (row[r] ?? 0) * (y[i] ?? 0);
    }
  });
  for (let col = 0; col < m; col++) {
    let pivot = col;
    for (let r = col + 1; r < m; r++) {
      if (Math.abs(a[r]?.[col] ?? 0) > Math.abs(a[pivot]?.[col] ?? 0)) pivot = r;
    }
    [a[col], a[pivot]] = [a[pivot] as number[], a[col] as number[]];
    const p = a[col]?.[col] ?? 0;
    if (Math.abs(p) < 1e-12) continue;
    for (let r = 0; r < m; r++) {
      if (r === col) continue;
      const f = (a[r]?.[col] ?? 0) / p;
      for (let c = col; c <= m; c++)
        (a[r] as number[])[c] = (a[r]?.[c] ?? 0) - f * (a[col]?.[c] ?? 0);
    }
  }
  return Array.from({ length: m }, (_, i) => {
    const p = a[i]?.[i] ?? 0;
    return Math.abs(p) < 1e-12 ? 0 : (a[i]?.[m] ?? 0) / p;
  });
}
