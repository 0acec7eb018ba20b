/**
 * The packaging suite (`npm run test:package`): real `cdk synth` of both architectures with
 * bundling, then checks on the assets. Slow (about two minutes), so it is kept out of `npm test`
 * by its file suffix, `.pkg.ts`.
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    root: fileURLToPath(new URL("../..", import.meta.url)),
    include: ["test/packaging/**/*.pkg.ts"],
    pool: "forks",
    testTimeout: 300_000,
    hookTimeout: 600_000,
    setupFiles: ["test/support/env.ts"],
  },
});
