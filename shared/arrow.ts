/**
 * Results as an Arrow table / IPC stream: `_query_id` int32, `_distance` float32, `_rowid`
 * uint64 (exact, unlike JSON), then the `select` columns with the dataset's own fields.
 * @module
 */
import {
  type Data,
  DataType,
  Field,
  FixedSizeList,
  Float32,
  Int32,
  Int64,
  List,
  makeBuilder,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  TimeUnit,
  tableToIPC,
  Uint64,
  vectorFromArray,
} from "apache-arrow";
import { ownField } from "./arrow-fields.js";
import type { ResultRow } from "./tasks.js";

/** The media type of an Arrow IPC stream, for `Accept` and `Content-Type`. */
export const ARROW_STREAM = "application/vnd.apache.arrow.stream";

/**
 * The rows of a search response as an Arrow table. With `schema`, the dataset's Arrow schema at
 * the searched version (lancedb's `table.schema()` will do), each `select` column is the
 * dataset's field (type, nullability, metadata), also when there are no rows, and its values are
 * the JSON values read back exactly: decimal strings to 64-bit integers, arrays to vectors and
 * lists, milliseconds to timestamps. Without `schema`, types are guessed from the values (a
 * 64-bit integer stays a string; an empty result has `Null` columns).
 * @throws TypeError when a `select` column is not in `schema`.
 * @example
 * const table = resultsToArrow(response.results, ["id", "vector"], await lanceTable.schema());
 */
export function resultsToArrow(
  results: readonly ResultRow[],
  select: readonly string[] = [],
  schema?: Schema,
): Table {
  const columns: [Field, Data][] = [
    column(new Field("_query_id", new Int32(), true), results, (r) => r._query_id),
    column(new Field("_distance", new Float32(), true), results, (r) => r._distance),
    column(new Field("_rowid", new Uint64(), true), results, (r) => BigInt(r._rowid)),
  ];
  const datasetFields = schema && new Map(schema.fields.map((f) => [f.name, f]));
  for (const name of select) {
    const values = results.map((r) => r[name] ?? null);
    if (!datasetFields) {
      const guessed = vectorFromArray(values);
      columns.push([new Field(name, guessed.type, true), guessed.data[0] as Data]);
      continue;
    }
    const field = datasetFields.get(name);
    if (!field) throw new TypeError(`Expected \`schema\` to have the select column "${name}"`);
    const own = ownField(field);
    columns.push(column(own, values, (v) => fromJson(v, own.type)));
  }
  const fields = columns.map(([field]) => field);
  const batch = makeData({
    type: new Struct(fields),
    length: results.length,
    nullCount: 0,
    children: columns.map(([, data]) => data),
  });
  return new Table([new RecordBatch(new Schema(fields), batch)]);
}

/** An Arrow IPC stream of the results; `schema` as in {@link resultsToArrow}. */
export function resultsToIpc(
  results: readonly ResultRow[],
  select: readonly string[] = [],
  schema?: Schema,
): Uint8Array {
  return tableToIPC(resultsToArrow(results, select, schema), "stream");
}

/** One column: `value` of each item, appended to a builder of the field's type. */
function column<T>(field: Field, items: readonly T[], value: (item: T) => unknown): [Field, Data] {
  const builder = makeBuilder({ type: builderType(field.type), nullValues: [null, undefined] });
  for (const item of items) builder.append(value(item));
  return [field, retype(builder.finish().flush(), field.type)];
}

/**
 * The type a builder fills for `type`: timestamps as Int64 of their unit, since Arrow's own
 * timestamp setter multiplies float milliseconds and throws on a fraction of one.
 */
function builderType(type: DataType): DataType {
  if (DataType.isTimestamp(type)) return new Int64();
  if (DataType.isList(type)) return new List(builderField(type.children[0] as Field));
  if (DataType.isFixedSizeList(type)) {
    return new FixedSizeList(type.listSize, builderField(type.children[0] as Field));
  }
  if (DataType.isStruct(type)) return new Struct(type.children.map(builderField));
  return type;
}

function builderField(field: Field): Field {
  return field.clone({ type: builderType(field.type) });
}

/** Built data as `type`: same buffers, the field's own type all the way down. */
function retype(data: Data, type: DataType): Data {
  const children = data.children.map((child, i) => retype(child, (type.children[i] as Field).type));
  return data.clone(type, data.offset, data.length, data.nullCount, data.buffers, children);
}

/**
 * A JSON value of the merge (see `toJsonValue`) as what the builder of `type` takes: 64-bit
 * integers from decimal strings, bytes from arrays, structs from their values in field order.
 */
function fromJson(value: unknown, type: DataType): unknown {
  if (value === null || value === undefined) return null;
  if (DataType.isTimestamp(type)) return timestampUnits(value as number, type.unit);
  if (is64Bit(type)) return BigInt(value as string);
  if (DataType.isBinary(type) || DataType.isLargeBinary(type) || DataType.isFixedSizeBinary(type)) {
    return Uint8Array.from(value as number[]);
  }
  if (DataType.isList(type) || DataType.isFixedSizeList(type)) {
    const item = (type.children[0] as Field).type;
    return (value as unknown[]).map((v) => fromJson(v, item));
  }
  if (DataType.isStruct(type)) {
    return type.children.map((f, i) =>
      fromJson(
        Array.isArray(value) ? value[i] : (value as Record<string, unknown>)[f.name],
        f.type,
      ),
    );
  }
  return value;
}

/** Types whose values are bigints in Arrow, decimal strings in JSON. */
function is64Bit(type: DataType): boolean {
  return (
    ((DataType.isInt(type) || DataType.isTime(type)) && type.bitWidth === 64) ||
    DataType.isDuration(type)
  );
}

const UNITS_PER_MS = {
  [TimeUnit.MILLISECOND]: 1,
  [TimeUnit.MICROSECOND]: 1_000,
  [TimeUnit.NANOSECOND]: 1_000_000,
} as const;

/**
 * Arrow's reading of a timestamp (milliseconds, with the sub-millisecond part as a fraction) as
 * an integer count of `unit`: exact for seconds to microseconds; nanoseconds keep the precision
 * the double had (about a quarter of a microsecond today).
 */
function timestampUnits(ms: number, unit: TimeUnit): bigint {
  if (unit === TimeUnit.SECOND) return BigInt(Math.round(ms / 1000));
  const perMs = UNITS_PER_MS[unit];
  const whole = Math.floor(ms);
  return BigInt(whole) * BigInt(perMs) + BigInt(Math.round((ms - whole) * perMs));
}
