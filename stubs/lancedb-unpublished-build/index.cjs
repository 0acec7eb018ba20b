// package.json `overrides` map every platform build of @lancedb/lancedb that the npm registry
// does not serve for the pinned version to this package, so that `npm ci` accepts the lock.
// lancedb loads it only on such a platform: say so instead of a missing-module error.
throw new Error(
  "@lancedb/lancedb: the npm registry serves no build of the pinned version for " +
    `${process.platform}-${process.arch}; lance-fanout runs on linux x64 (see README.md, "Versions")`,
);
