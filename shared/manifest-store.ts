/**
 * Finds and parses the manifest of one version of a dataset (local or S3).
 * @module
 */
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
