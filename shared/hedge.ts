/**
 * Hedged tasks: a fanned-out query is as slow as its slowest task, so a task not answered by a
 * delay drawn from the recent times of tasks like it (a key: same dataset, kind, slot and batch
 * size) is sent once more (on Lambda the same function routes it to
 * another execution environment); the first answer wins and the other is abandoned. A budget of
 * tokens bounds the extra invokes to a share of the tasks. Searches are reads: running one twice
 * is safe.
 * @module
 */
import { LRUCache } from "lru-cache";

export interface HedgeSettings {
  /** Extra invokes allowed per task, on average (0.05: at most 5% more invokes). */
  readonly budget: number;
  /** Task times kept per key; the delay is a multiple of their p90. */
  readonly window: number;
  /** No hedge before this many task times are known. */
  readonly minSamples: number;
  /** The delay: this times the p90 of recent task times... */
  readonly factor: number;
  /** ...and never below this, in ms. */
  readonly floorMs: number;
}

export const HEDGE_DEFAULTS: HedgeSettings = {
  budget: 0.05,
  window: 128,
  minSamples: 20,
  factor: 2,
  floorMs: 50,
};

/** The most tokens saved up: a burst of stragglers takes at most this many hedges at once. */
const MAX_TOKENS = 2;
/** Keys whose task times are kept (the least recently used go first). */
const MAX_KEYS = 256;

export class Hedger {
  readonly #settings: HedgeSettings;
  readonly #times = new LRUCache<string, number[]>({ max: MAX_KEYS });
  #tokens = 0;
  #hedged = 0;

  constructor(settings: Partial<HedgeSettings> = {}) {
    this.#settings = { ...HEDGE_DEFAULTS, ...settings };
  }

  /** Tasks sent a second time so far. */
  get hedged(): number {
    return this.#hedged;
  }

  /**
   * How long a task of `key` may run before it is sent again; undefined until enough times of
   * such tasks are known.
   */
  delayMs(key: string): number | undefined {
    const { minSamples, factor, floorMs } = this.#settings;
    const times = this.#times.get(key) ?? [];
    if (times.length < minSamples) return undefined;
    const sorted = [...times].sort((a, b) => a - b);
    const p90 = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.9))] ?? 0;
    return Math.max(floorMs, factor * p90);
  }

  /**
   * Runs `attempt`, and once more if the first has not answered by the delay and the budget
   * allows; resolves with the first answer and aborts the other attempt. Rejects only when every
   * attempt started has failed (with the first one's error), or when `signal` aborts.
   */
  async run<T>(
    key: string,
    attempt: (signal: AbortSignal) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    this.#tokens = Math.min(MAX_TOKENS, this.#tokens + this.#settings.budget);
    const started = performance.now();
    const delay = this.delayMs(key);
    const attempts: AbortController[] = [];
    const start = () => {
      const controller = new AbortController();
      attempts.push(controller);
      return attempt(signal ? AbortSignal.any([controller.signal, signal]) : controller.signal);
    };
    const first = start();
    try {
      const answer = await (delay === undefined ? first : this.#race(first, delay, start));
      this.#record(key, performance.now() - started);
      return answer;
    } finally {
      // The other attempt, if any, is abandoned.
      for (const controller of attempts) controller.abort();
    }
  }

  async #race<T>(first: Promise<T>, delay: number, again: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(resolve, delay, "late");
    });
    const early = await Promise.race([
      first.then(
        () => "answered" as const,
        () => "failed" as const,
      ),
      late,
    ]);
    clearTimeout(timer);
    if (early !== "late" || this.#tokens < 1) return first;
    this.#tokens -= 1;
    this.#hedged++;
    return Promise.any([first, again()]).catch((err: unknown) => {
      throw err instanceof AggregateError ? err.errors[0] : err;
    });
  }

  #record(key: string, ms: number): void {
    const times = this.#times.get(key) ?? [];
    times.push(ms);
    if (times.length > this.#settings.window) times.shift();
    this.#times.set(key, times);
  }
}
