import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // lancedb tests are CPU bound; two cores run two files at a time.
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    setupFiles: ["test/support/env.ts"],
  },
});
