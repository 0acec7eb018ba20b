/**
 * Finds and parses the manifest of one version of a dataset (local or S3).
 * @module
 */
import { fileURLToPath } from "node:url";
import { FanoutError } from "./errors.js";
import { decodeFragmentReuse, remapSegments } from "./fragment-reuse.js";
import { lanceMessage, missingObject } from "./lance/errors.js";
import { type Manifest, manifestFileNames, parseManifest, versionOfFile } from "./manifest.js";
import { ManifestError } from "./manifest-format.js";
import type { ObjectStore } from "./objects.js";

/**
 * Reads `version`'s manifest under the table URI, trying the V2 then the V1 file name, with
 * index segments as Lance loads them (remapped through a fragment reuse index).
 * @throws FanoutError `VERSION_NOT_FOUND` when neither exists.
 */
export async function readManifest(
  objects: ObjectStore,
  tableUri: string,
  version: number,
): Promise<Manifest> {
  for (const name of manifestFileNames(version)) {
    const bytes = await objects.read(`${tableUri}/${name}`);
    if (!bytes) continue;
    try {
      return await withFragmentReuse(parseManifest(bytes), objects, tableUri);
    } catch (err) {
      if (!(err instanceof ManifestError)) throw err;
      throw new ManifestError(`${tableUri} version ${version}: ${err.message}`, { cause: err });
    }
  }
  throw new FanoutError("VERSION_NOT_FOUND", `version ${version} of ${tableUri} not found`);
}

async function withFragmentReuse(
  manifest: Manifest,
  objects: ObjectStore,
  tableUri: string,
): Promise<Manifest> {
  const reuse = manifest.fragmentReuse;
  if (reuse === null) return manifest;
  if ("inline" in reuse) return remapSegments(manifest, reuse.inline);
  const uri = resolveUri(tableUri, reuse.path);
  const bytes = await objects.read(uri);
  if (!bytes || bytes.length < reuse.offset + reuse.size) {
    throw new ManifestError(`the fragment reuse index's ${uri} is missing or too short`);
  }
  const content = bytes.subarray(reuse.offset, reuse.offset + reuse.size);
  return remapSegments(manifest, decodeFragmentReuse(content));
}

/** A path of the manifest: relative to the dataset, or a base path's own URI. */
function resolveUri(tableUri: string, path: string): string {
  if (path.startsWith("file://")) return fileURLToPath(path);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(path) || path.startsWith("/")) return path;
  return `${tableUri}/${path}`;
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

/**
 * What Lance's refusal to open a dataset (or one of its versions) means, naming who wrote it:
 * `UNSUPPORTED_DATASET`, from this reader's own refusal where it has one (it names the feature).
 */
export async function unsupportedError(
  err: unknown,
  objects: ObjectStore,
  tableUri: string,
  version?: number,
): Promise<FanoutError> {
  let writer: string | null = null;
  const which = version ?? (await newestVersion(objects, tableUri));
  try {
    if (which !== undefined) writer = (await readManifest(objects, tableUri, which)).writer;
  } catch (reading) {
    if (reading instanceof ManifestError) return reading;
  }
  const at = which === undefined ? "" : ` version ${which},`;
  return new FanoutError(
    "UNSUPPORTED_DATASET",
    `${tableUri}${at} written by ${writer ?? "an unknown writer"}: ${lanceMessage(err)}`,
    { cause: err, details: { writer, version: which } },
  );
}

/** The newest version whose manifest is in the dataset's `_versions/`. */
async function newestVersion(objects: ObjectStore, tableUri: string): Promise<number | undefined> {
  const listed = await objects.list(`${tableUri}/_versions/`).catch(() => []);
  const versions = listed.flatMap((o) => versionOfFile(o.uri.split("/").pop() ?? "") ?? []);
  return versions.length > 0 ? Math.max(...versions) : undefined;
}
