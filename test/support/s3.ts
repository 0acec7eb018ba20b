/** A real S3 client of a local S3 server, for tests that look at what was written. */
import { ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import type { LocalS3 } from "../../local/s3.js";

export function s3Client(s3: LocalS3): S3Client {
  return new S3Client({
    endpoint: s3.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: s3.credentials,
  });
}

/** The objects under `prefix`, as `key:etag`, sorted (an overwrite changes the etag). */
export async function objectsUnder(
  client: S3Client,
  bucket: string,
  prefix: string,
): Promise<string[]> {
  const out = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
  return (out.Contents ?? []).map((o) => `${o.Key}:${o.ETag}`).sort();
}
