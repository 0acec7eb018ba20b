/**
 * The memoised-promise pattern of every per-process cache here: one promise per key, shared by
 * concurrent callers, and forgotten when it rejects so that a later call tries again.
 * @module
 */

/** What {@link cachedPromise} needs of a cache: a `Map` or an `LRUCache`. */
export interface PromiseCache<K, V> {
  get(key: K): Promise<V> | undefined;
  set(key: K, value: Promise<V>): unknown;
  delete(key: K): unknown;
}

/** The promise cached under `key`, created by `create` on first use. */
export function cachedPromise<K, V>(
  cache: PromiseCache<K, V>,
  key: K,
  create: () => Promise<V>,
): Promise<V> {
  const cached = cache.get(key);
  if (cached) return cached;
  const created = create();
  created.catch(() => {
    if (cache.get(key) === created) cache.delete(key);
  });
  cache.set(key, created);
  return created;
}
