/**
 * Finds and parses the manifest of one version of a dataset (local or S3).
 * @module
 */
import { LRUCache } from "lru-cache";
import { FanoutError } from "./errors.js";
import { type Manifest, manifestFileNames, parseManifest } from "./manifest.js";
import type { ObjectReader } from "./objects.js";

/**
 * Reads `version`'s manifest under the table URI, trying the V2 then the V1 file name.
 * @throws FanoutError `VERSION_NOT_FOUND` when neither exists.
 */
export async function readManifest(
  objects: ObjectReader,
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
  readonly #objects: ObjectReader;
  readonly #manifests: LRUCache<string, Promise<Manifest>>;

  constructor(objects: ObjectReader, max = 64) {
    this.#objects = objects;
    this.#manifests = new LRUCache({ max });
  }

  read(tableUri: string, version: number): Promise<Manifest> {
    const key = `${tableUri}@${version}`;
    let manifest = this.#manifests.get(key);
    if (!manifest) {
      manifest = readManifest(this.#objects, tableUri, version);
      manifest.catch(() => this.#manifests.delete(key));
      this.#manifests.set(key, manifest);
    }
    return manifest;
  }
}
