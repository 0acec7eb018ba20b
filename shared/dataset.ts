/**
 * Where a dataset lives and how lancedb reaches it. A dataset URI names one Lance table:
 * `s3://bucket/prefix/name.lance` or a local `/dir/name.lance`; lancedb sees the parent as the
 * database and `name` as the table.
 * @module
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FanoutConfig, S3Config } from "./config.js";
import { FanoutError } from "./errors.js";

export interface DatasetLocation {
  /** Normalised table URI: `s3://bucket/key/name.lance` or an absolute local path. */
  readonly uri: string;
  readonly kind: "s3" | "local";
  /** The lancedb database URI (the table's parent). */
  readonly dbUri: string;
  /** The lancedb table name (the last path segment without `.lance`). */
  readonly tableName: string;
}

/**
 * The one gate every dataset URI passes, on every path (search, explain, prepare, gc, tasks,
 * the CLI): parses it into a plain, normalised URI, refusing anything else, then checks the
 * allow-list, before anything is read or written. A dataset outside the list is refused the
 * same way whether it exists or not.
 * @throws FanoutError `INVALID_REQUEST` for what is not a plain dataset URI,
 *   `FORBIDDEN_DATASET` when the configuration does not allow it.
 */
export function resolveDataset(dataset: string, config: FanoutConfig): DatasetLocation {
  const location = parseDatasetUri(dataset);
  if (location.kind === "local" && !config.allowLocal) {
    throw new FanoutError("FORBIDDEN_DATASET", "local datasets are not allowed in this deployment");
  }
  const allowed = config.allowedDatasets;
  if (allowed && !allowed.some((prefix) => isUnder(location.uri, prefix))) {
    throw new FanoutError("FORBIDDEN_DATASET", `dataset ${location.uri} is not in the allow-list`);
  }
  return location;
}

/**
 * What an S3 key of a dataset may not hold: percent-encoding, spaces, `+` and the other
 * characters clients and stores decode differently, so the key checked is the key read.
 */
const NOT_IN_S3_KEY = /[^A-Za-z0-9._=/-]/;
/** lancedb's own rule for a table name (others panic inside it). */
const TABLE_NAME = /^[A-Za-z0-9_.-]+$/;

function parseDatasetUri(dataset: string): DatasetLocation {
  const control = /[\p{Cc}\p{Cf}]/u.exec(dataset);
  if (control) throw invalid(dataset, `a control character at position ${control.index + 1}`);
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(dataset)?.[1]?.toLowerCase();
  const uri =
    scheme === "s3"
      ? s3Uri(dataset)
      : scheme === "file"
        ? localPath(dataset, fileUrlPath(dataset))
        : scheme === undefined
          ? localPath(dataset, dataset)
          : undefined;
  if (uri === undefined) {
    throw invalid(dataset, `unsupported scheme ${scheme}://, use s3:// or a local path`);
  }
  const slash = uri.lastIndexOf("/");
  const last = uri.slice(slash + 1);
  const tableName = last.slice(0, -".lance".length);
  if (!last.endsWith(".lance") || !TABLE_NAME.test(tableName)) {
    throw invalid(dataset, "the last path segment must be <name>.lance (letters, digits, _ . -)");
  }
  return {
    uri,
    kind: scheme === "s3" ? "s3" : "local",
    dbUri: uri.slice(0, slash) || "/",
    tableName,
  };
}

/** `s3://bucket/key`, normalised: lower-case scheme, no trailing slash, no empty or dot segments. */
function s3Uri(dataset: string): string {
  const [bucket = "", ...key] = dataset.slice("s3://".length).replace(/\/+$/, "").split("/");
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) {
    throw invalid(dataset, "expected s3://bucket/prefix/name.lance with a valid bucket name");
  }
  const bad = NOT_IN_S3_KEY.exec(key.join("/"));
  if (bad) {
    throw invalid(dataset, `"${bad[0]}" is not allowed in a key (letters, digits, - _ . = /)`);
  }
  if (key.length === 0 || key.some((s) => s === "" || s === "." || s === "..")) {
    throw invalid(dataset, "the key must not have empty, '.' or '..' segments");
  }
  return `s3://${bucket}/${key.join("/")}`;
}

/** The path of a `file:` URL, which names no host (`file:///abs/path`). */
function fileUrlPath(dataset: string): string {
  if (!/^file:\/\/\//i.test(dataset)) {
    throw invalid(dataset, "a file URL names no host: file:///absolute/path.lance");
  }
  try {
    return fileURLToPath(dataset.replace(/^file:/i, "file:"));
  } catch (err) {
    throw invalid(dataset, (err as Error).message);
  }
}

/** An absolute local path, resolved from `path`, which may not climb with `..`. */
function localPath(dataset: string, path: string): string {
  if (path.split(/[\\/]/).includes("..")) throw invalid(dataset, "must not contain '..' segments");
  return resolve(path).replace(/\/+$/, "");
}

function invalid(dataset: string, why: string): FanoutError {
  return new FanoutError("INVALID_REQUEST", `dataset ${JSON.stringify(dataset)}: ${why}`);
}

/** Whether `uri` (normalised) is under an allow-list entry, itself normalised the same way. */
function isUnder(uri: string, prefix: string): boolean {
  const base = prefix.startsWith("s3://") ? prefix.replace(/\/+$/, "") : resolve(prefix);
  return uri === base || uri.startsWith(`${base}/`);
}

/** lancedb storage options for S3 (empty for local datasets). */
export function storageOptions(location: { kind: "s3" | "local" }, s3: S3Config) {
  if (location.kind === "local") return {};
  const options: Record<string, string> = { aws_region: s3.region };
  if (s3.endpoint) {
    options.aws_endpoint = s3.endpoint;
    if (s3.endpoint.startsWith("http://")) options.allow_http = "true";
  }
  if (s3.accessKeyId) options.aws_access_key_id = s3.accessKeyId;
  if (s3.secretAccessKey) options.aws_secret_access_key = s3.secretAccessKey;
  if (s3.sessionToken) options.aws_session_token = s3.sessionToken;
  return options;
}

/** Splits `s3://bucket/key` into its parts. */
export function splitS3Uri(uri: string): { bucket: string; key: string } {
  const match = /^s3:\/\/([^/]+)\/?(.*)$/.exec(uri);
  if (!match?.[1]) throw new TypeError(`Expected an s3:// URI, got ${uri}`);
  return { bucket: match[1], key: match[2] ?? "" };
}
