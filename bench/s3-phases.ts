/**
 * S3 requests by phase of the harness (a commit, a prepare, a first query, ...), counted by the
 * bench proxy's `onRequest` hook: by kind (get, list, put, head, delete, post) and by area (the
 * view prefix or the dataset), e.g. `put:views`. Work a phase leaves running in the background
 * (a view's index loading after its first search) is counted in the phase it lands in.
 * @module
 */

/** Counts of one phase: `kind:area` -> requests, and `bytes` served. */
export type PhaseCounts = Record<string, number>;

export interface PhaseCounter {
  /** The proxy's hook. */
  readonly onRequest: (method: string, url: string) => void;
  /** Runs `work` as one phase: its requests, the proxy's bytes and its milliseconds. */
  measure<T>(work: () => Promise<T>): Promise<{ value: T; ms: number; counts: PhaseCounts }>;
}

function kindOf(method: string, url: string): string {
  const query = url.split("?")[1] ?? "";
  if (method === "GET" && /(^|&)(list-type|prefix|delimiter)=/.test(query)) return "list";
  return method.toLowerCase();
}

/** `bytes()` reads the proxy's served bytes so far. */
export function phaseCounter(viewPrefix: string, bytes: () => number): PhaseCounter {
  let current = new Map<string, number>();
  return {
    onRequest(method, url) {
      // Objects by path, listings by their (encoded) prefix parameter.
      const area = decodeURIComponent(url).includes(`${viewPrefix}/`) ? "views" : "data";
      const key = `${kindOf(method, url)}:${area}`;
      current.set(key, (current.get(key) ?? 0) + 1);
    },
    async measure(work) {
      current = new Map();
      const bytesBefore = bytes();
      const started = performance.now();
      const value = await work();
      const ms = performance.now() - started;
      const counts: PhaseCounts = { ...Object.fromEntries(current), bytes: bytes() - bytesBefore };
      current = new Map();
      return { value, ms, counts };
    },
  };
}

/** Requests of `kinds` (e.g. `["put"]`) in `counts`, over both areas unless `area` is given. */
export function requests(
  counts: PhaseCounts | undefined,
  kinds: readonly string[],
  area?: "views" | "data",
): number {
  let n = 0;
  for (const [key, value] of Object.entries(counts ?? {})) {
    const [kind, where] = key.split(":");
    if (kind && kinds.includes(kind) && (!area || where === area)) n += value;
  }
  return n;
}
