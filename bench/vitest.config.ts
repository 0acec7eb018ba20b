/**
 * The bench's own tests (`npm run test:bench`): its statistics, report and a smoke run. Apart
 * from the product's `npm test`; CI runs both.
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    root: fileURLToPath(new URL("..", import.meta.url)),
    include: ["bench/test/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    setupFiles: ["test/support/env.ts"],
  },
});
