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
 * Parses and authorises a dataset URI.
 * @throws FanoutError `INVALID_REQUEST` for a malformed URI, `FORBIDDEN_DATASET` when the
 *   configuration does not allow it.
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

function parseDatasetUri(dataset: string): DatasetLocation {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(dataset)?.[1]?.toLowerCase();
  let uri: string;
  if (scheme === "s3") {
    uri = dataset.replace(/\/+$/, "");
    if (!/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\/.+/.test(uri)) {
      throw invalid(dataset, "expected s3://bucket/prefix/name.lance");
    }
  } else if (scheme === "file") {
    uri = fileURLToPath(dataset).replace(/\/+$/, "");
  } else if (scheme === undefined) {
    uri = resolve(dataset);
  } else {
    throw invalid(dataset, `unsupported scheme ${scheme}://, use s3:// or a local path`);
  }
  const slash = uri.lastIndexOf("/");
  const last = uri.slice(slash + 1);
  if (!last.endsWith(".lance") || last.length === ".lance".length) {
    throw invalid(dataset, "the last path segment must be <name>.lance");
  }
  return {
    uri,
    kind: scheme === "s3" ? "s3" : "local",
    dbUri: uri.slice(0, slash) || "/",
    tableName: last.slice(0, -".lance".length),
  };
}

function invalid(dataset: string, why: string): FanoutError {
  return new FanoutError("INVALID_REQUEST", `dataset "${dataset}": ${why}`);
}

function isUnder(uri: string, prefix: string): boolean {
  const base = prefix.startsWith("s3://") ? prefix : resolve(prefix);
  return uri === base || uri.startsWith(base.endsWith("/") ? base : `${base}/`);
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
