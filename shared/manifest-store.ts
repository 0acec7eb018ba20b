/**
 * Finds and parses the manifest of one version of a dataset (local or S3).
 * @module
 */
import { LRUCache } from "lru-cache";
import { cachedPromise } from "./cached.js";
import { FanoutError } from "./errors.js";
import { missingObject } from "./lance/errors.js";
import { type Manifest, manifestFileNames, parseManifest } from "./manifest.js";
import type { ObjectStore } from "./objects.js";

/**
 * Reads `version`'s manifest under the table URI, trying the V2 then the V1 file name.
 * @throws FanoutError `VERSION_NOT_FOUND` when neither exists.
 */
export async function readManifest(
  objects: ObjectStore,
  tableUri: string,
  version: number,
): Promise<Manifest> {
  for (const name of manifestFileNames(version)) {
    const bytes = await objects.read(`${tableUri}/${name}`);
    if (bytes) return parseManifest(bytes);
  }
  throw new FanoutError("VERSION_NOT_FOUND", `version ${version} of ${tableUri} not found`);
}

/**
 * Parsed manifests of datasets by (URI, version): a committed version never changes, so the
 * planner reads and parses each at most once per process (bounded).
 */
export class ManifestCache {
  readonly #objects: ObjectStore;
  readonly #manifests: LRUCache<string, Promise<Manifest>>;

  constructor(objects: ObjectStore, max = 64) {
    this.#objects = objects;
    this.#manifests = new LRUCache({ max });
  }

  read(tableUri: string, version: number): Promise<Manifest> {
    const key = `${tableUri}@${version}`;
    return cachedPromise(this.#manifests, key, () =>
      readManifest(this.#objects, tableUri, version),
    );
  }
}

/** An error that names a missing object of the dataset (see {@link notFoundError}). */
export function isMissingObject(err: FanoutError): boolean {
  return typeof (err.details as { missing?: unknown } | undefined)?.missing === "string";
}

/**
 * What Lance's "not found" during a search of a pinned version means: the version was cleaned
 * up (its manifest is gone: `VERSION_NOT_FOUND`), or a file it needs is missing (`INTERNAL`,
 * naming the object: a damaged dataset is not the caller's mistake).
 */
export async function notFoundError(
  err: unknown,
  objects: ObjectStore,
  tableUri: string,
  version: number,
): Promise<FanoutError> {
  try {
    await readManifest(objects, tableUri, version);
  } catch (missing) {
    if (missing instanceof FanoutError) {
      const message = `version ${version} of ${tableUri} is gone (cleaned up during the query?)`;
      return new FanoutError(missing.code, message, { cause: err });
    }
    throw missing;
  }
  const missing = missingObject(err) ?? "an object";
  return new FanoutError("INTERNAL", `${missing} of version ${version} of ${tableUri} is missing`, {
    cause: err,
    details: { missing },
  });
}
