/**
 * `client.filter(expr, params)`: bind values into a filter expression safely (decisions.md, Clients).
 * Each `{:name}` placeholder becomes a literal of the service's filter grammar (cms/filters/grammar.py):
 * a string is written in double quotes with `\` and `"` escaped by a backslash (the only escapes the
 * grammar reads; every other character, a newline included, stands for itself inside quotes), so no
 * value can close the string and add a term; a finite number as its decimal form; a boolean as `true` /
 * `false`; `null` (and `undefined`) as `null`; a `Date` as its ISO 8601 text in quotes, which a date or
 * datetime field reads as that instant.
 */

/** A value `filter` can bind. */
export type FilterValue = string | number | bigint | boolean | null | undefined | Date;

const PLACEHOLDER = /\{:([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** The filter grammar's literal for `value` (see the module comment). Throws `TypeError` for a number
 * that is not finite, an invalid `Date`, or a value of another type (an object, an array, a function). */
export function filterLiteral(value: FilterValue): string {
  if (value === null || value === undefined) {
    return "null";
  }
  if (typeof value === "string") {
    return `"${value.replace(/[\\"]/g, (char) => `\\${char}`)}"`;
  }
  if (typeof value === "boolean") {
    return value ? "true" : "false";
  }
  if (typeof value === "bigint") {
    return value.toString();
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new TypeError(`filter: ${value} is not a finite number`);
    }
    return Object.is(value, -0) ? "0" : String(value);
  }
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) {
      throw new TypeError("filter: invalid Date");
    }
    return `"${value.toISOString()}"`;
  }
  throw new TypeError(`filter: cannot bind a value of type ${typeof value}`);
}

/** `expr` with each `{:name}` replaced by the literal of `params[name]`. Throws `Error` for a
 * placeholder whose name `params` lacks (an own property), `TypeError` for a value that has no literal.
 * `filter("title = {:t} && views > {:n}", {t: 'say "hi"', n: 10})` -> `title = "say \"hi\"" && views > 10`. */
export function bindFilter(expr: string, params: Record<string, FilterValue> = {}): string {
  return expr.replace(PLACEHOLDER, (_match, name: string) => {
    if (!Object.prototype.hasOwnProperty.call(params, name)) {
      throw new Error(`filter: no value for the placeholder {:${name}}`);
    }
    return filterLiteral(params[name]);
  });
}
