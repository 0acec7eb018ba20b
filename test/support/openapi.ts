/**
 * Validates bodies against docs/openapi.json (the committed document) with Ajv.
 */
import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "vitest";

const document = JSON.parse(
  readFileSync(new URL("../../docs/openapi.json", import.meta.url), "utf8"),
);
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addFormat("uuid", /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
ajv.addFormat("binary", true);
ajv.addSchema(document, "openapi");

export type SchemaName =
  | "SearchRequest"
  | "SearchResponse"
  | "PlanResponse"
  | "ErrorBody"
  | "Health";

export function isValid(name: SchemaName, body: unknown): boolean {
  const validate = ajv.getSchema(`openapi#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  return validate(body) as boolean;
}

/** Fails with Ajv's errors when `body` does not match the named schema. */
export function expectValid(name: SchemaName, body: unknown): void {
  const validate = ajv.getSchema(`openapi#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  const ok = validate(body);
  expect(ok ? [] : validate.errors).toEqual([]);
}
