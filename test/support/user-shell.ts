/**
 * A user's shell as a test runs commands in it: this machine's environment (its CA certificates
 * for the npm registry, say) without what npm, vitest and this repository set, and no AWS.
 * @module
 */

const OWN = /^(npm_|LANCE_FANOUT_|AWS_|VITEST|INIT_CWD$|NODE_OPTIONS$)/;

export function userShellEnv(): NodeJS.ProcessEnv {
  return {
    ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !OWN.test(key))),
    AWS_EC2_METADATA_DISABLED: "true",
  };
}
