// Keep every AWS SDK and lancedb code path on loopback: no credential chain, no instance metadata.
process.env.AWS_EC2_METADATA_DISABLED = "true";
process.env.AWS_ACCESS_KEY_ID ??= "S3RVER";
process.env.AWS_SECRET_ACCESS_KEY ??= "S3RVER";
process.env.AWS_REGION ??= "us-east-1";
process.env.LANCEDB_LOG ??= "error";
process.env.LANCE_FANOUT_LOG ??= "off";
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
