/**
 * Arrow fields from any apache-arrow instance as fields of this module's own. lancedb is
 * CommonJS and loads Arrow's CommonJS build, a second instance beside the ES module one: its
 * schemas fail this instance's `instanceof` checks, so its builders and IPC writer reject them.
 * Types are rebuilt from their type ids and parameters, which every instance shares.
 * @module
 */
import {
  Binary,
  Bool,
  DataType,
  Date_,
  Decimal,
  Dictionary,
  Duration,
  Field,
  FixedSizeBinary,
  FixedSizeList,
  Float,
  Int,
  Interval,
  LargeBinary,
  LargeUtf8,
  List,
  Map_,
  Null,
  Struct,
  Time,
  Timestamp,
  Union,
  Utf8,
} from "apache-arrow";

/** `field` as a field of this apache-arrow instance: same name, type, nullability, metadata. */
export function ownField(field: Field): Field {
  if (isOwn(field, Field)) return field;
  return new Field(field.name, ownType(field.type), field.nullable, new Map(field.metadata));
}

function ownType(type: DataType): DataType {
  if (isOwn(type, DataType)) return type;
  if (DataType.isNull(type)) return new Null();
  if (DataType.isInt(type)) return new Int(type.isSigned, type.bitWidth);
  if (DataType.isFloat(type)) return new Float(type.precision);
  if (DataType.isBinary(type)) return new Binary();
  if (DataType.isLargeBinary(type)) return new LargeBinary();
  if (DataType.isUtf8(type)) return new Utf8();
  if (DataType.isLargeUtf8(type)) return new LargeUtf8();
  if (DataType.isBool(type)) return new Bool();
  if (DataType.isDecimal(type)) return new Decimal(type.scale, type.precision, type.bitWidth);
  if (DataType.isDate(type)) return new Date_(type.unit);
  if (DataType.isTime(type)) return new Time(type.unit, type.bitWidth);
  if (DataType.isTimestamp(type)) return new Timestamp(type.unit, type.timezone);
  if (DataType.isInterval(type)) return new Interval(type.unit);
  if (DataType.isDuration(type)) return new Duration(type.unit);
  if (DataType.isFixedSizeBinary(type)) return new FixedSizeBinary(type.byteWidth);
  if (DataType.isList(type)) return new List(ownField(type.children[0] as Field));
  if (DataType.isFixedSizeList(type)) {
    return new FixedSizeList(type.listSize, ownField(type.children[0] as Field));
  }
  if (DataType.isStruct(type)) return new Struct(type.children.map(ownField));
  if (DataType.isMap(type)) return new Map_(ownField(type.children[0] as Field), type.keysSorted);
  if (DataType.isUnion(type))
    return new Union(type.mode, type.typeIds, type.children.map(ownField));
  if (DataType.isDictionary(type)) {
    const indices = ownType(type.indices) as Dictionary["indices"];
    return new Dictionary(ownType(type.dictionary), indices, type.id, type.isOrdered);
  }
  throw new TypeError(`Unsupported Arrow type ${String(type)}`);
}

/** `instanceof` without narrowing: TypeScript cannot tell one instance's classes from another's. */
function isOwn(value: object, ownClass: abstract new (...args: never[]) => unknown): boolean {
  return value instanceof ownClass;
}
