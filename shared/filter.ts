/**
 * The filter is one SQL expression, checked whole before any task runs. Lance's own parser
 * (sqlparser-rs `parse_expr`) stops at the first token it cannot use and ignores the rest, so
 * `category = 3) AND (category = 4` would silently filter on `category = 3`; and some inputs cost
 * it without bound (a chain of 1,500 `+` overflows its stack and kills the process; 600 take 20 s).
 * This parser reads the grammar Lance's filters use, refuses anything it does not consume, and
 * bounds what a filter may cost: its nesting, its arithmetic, and the functions it may call.
 * Pure: the filter is passed on to Lance as the caller wrote it.
 * @module
 */
/** What a filter may cost: documented in docs/api.md ("Filters"). */
export const FILTER_LIMITS = {
  /** Parentheses, function calls and NOT nested in one another. */
  maxDepth: 32,
  /** Arithmetic and concatenation operators in the whole filter (Lance's planner is quadratic in them). */
  maxArithmetic: 64,
  /** AND and OR operators, and values of IN lists, in the whole filter. */
  maxTerms: 10_000,
} as const;

/**
 * Functions a filter may call: none of them allocates more than its arguments' size times a
 * constant, so a filter cannot make a function exhaust memory (`repeat`, `lpad`, `rpad` and
 * `replace` can; `arrow_cast` fails on values at run time). Names compare case-insensitively.
 */
export const FILTER_FUNCTIONS: ReadonlySet<string> = new Set([
  // strings
  "lower",
  "upper",
  "trim",
  "ltrim",
  "rtrim",
  "btrim",
  "length",
  "char_length",
  "character_length",
  "octet_length",
  "bit_length",
  "starts_with",
  "ends_with",
  "strpos",
  "substr",
  "substring",
  "left",
  "right",
  "split_part",
  "concat",
  "concat_ws",
  "reverse",
  "initcap",
  "regexp_match",
  "regexp_like",
  "contains",
  // numbers
  "abs",
  "ceil",
  "floor",
  "round",
  "trunc",
  "sqrt",
  "cbrt",
  "exp",
  "ln",
  "log",
  "log2",
  "log10",
  "power",
  "pow",
  "signum",
  "greatest",
  "least",
  "isnan",
  "iszero",
  // nulls
  "coalesce",
  "nullif",
  "nvl",
  "ifnull",
  // lists
  "array_has",
  "array_has_any",
  "array_has_all",
  "array_contains",
  "array_length",
  "array_element",
  "array_position",
  "cardinality",
  "list_has",
  "list_has_any",
  "list_has_all",
  // time
  "date_part",
  "date_trunc",
  "to_timestamp",
  "to_date",
  "now",
  "current_date",
]);

/** Words with a meaning of their own: a column of that name is written quoted (`` `name` ``). */
const KEYWORDS = new Set([
  "and",
  "or",
  "not",
  "is",
  "null",
  "true",
  "false",
  "unknown",
  "in",
  "between",
  "like",
  "ilike",
  "escape",
  "cast",
  "try_cast",
  "as",
  "date",
  "timestamp",
  "time",
  "interval",
]);

type TokenKind = "number" | "string" | "word" | "quoted" | "op" | "end";

interface Token {
  readonly kind: TokenKind;
  /** The text as written (for a quoted identifier: its name). */
  readonly text: string;
  /** Offset in the filter, for error messages (1-based in them). */
  readonly at: number;
}

const OPERATORS = [
  "<=",
  ">=",
  "<>",
  "!=",
  "==",
  "||",
  "::",
  "=",
  "<",
  ">",
  "+",
  "-",
  "*",
  "/",
  "%",
  "(",
  ")",
  ",",
  ".",
  "[",
  "]",
];

/**
 * What is wrong with `filter` as one expression that can be searched safely, naming the
 * position of what is not understood or the bound it exceeds; undefined when nothing is (the
 * caller passes it on to Lance unchanged).
 */
export function filterProblem(filter: string): string | undefined {
  try {
    new Parser(filter, tokenize(filter)).filter();
    return undefined;
  } catch (err) {
    if (err instanceof FilterSyntaxError) return err.message;
    throw err;
  }
}

class FilterSyntaxError extends Error {
  override readonly name = "FilterSyntaxError";
}

function invalid(filter: string, at: number, what: string): FilterSyntaxError {
  const near = filter.slice(at, at + 20);
  const context =
    at >= filter.length ? "at the end" : `at position ${at + 1} (near ${JSON.stringify(near)})`;
  return new FilterSyntaxError(`${what} ${context}`);
}

function tokenize(filter: string): Token[] {
  // Anywhere, quoted or not: a NUL would end the string where Lance's parser reads it.
  const control = /[^\P{Cc}\t\n\r]|\p{Cf}/u.exec(filter);
  if (control) throw invalid(filter, control.index, "a control character");
  const tokens: Token[] = [];
  let i = 0;
  while (i < filter.length) {
    const c = filter[i] as string;
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      i++;
      continue;
    }
    const start = i;
    if (filter.startsWith("--", i) || filter.startsWith("/*", i)) {
      throw invalid(filter, i, "a comment (not allowed in a filter)");
    }
    if (c === "'") {
      i = closing(filter, i, "'");
      tokens.push({ kind: "string", text: filter.slice(start, i), at: start });
    } else if (c === "`" || c === '"') {
      i = closing(filter, i, c);
      const name = filter.slice(start + 1, i - 1).replaceAll(c + c, c);
      tokens.push({ kind: "quoted", text: name, at: start });
    } else if (/[0-9]/.test(c) || (c === "." && /[0-9]/.test(filter[i + 1] ?? ""))) {
      const match = /^(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(filter.slice(i));
      i += match?.[0].length ?? 1;
      if (/[A-Za-z_]/.test(filter[i] ?? "")) throw invalid(filter, start, "a malformed number");
      tokens.push({ kind: "number", text: filter.slice(start, i), at: start });
    } else if (/[A-Za-z_]/.test(c)) {
      const match = /^[A-Za-z_][A-Za-z0-9_]*/.exec(filter.slice(i));
      i += match?.[0].length ?? 1;
      tokens.push({ kind: "word", text: filter.slice(start, i), at: start });
    } else {
      const op = OPERATORS.find((o) => filter.startsWith(o, i));
      if (!op) throw invalid(filter, i, `unexpected character "${c}"`);
      i += op.length;
      tokens.push({ kind: "op", text: op, at: start });
    }
  }
  tokens.push({ kind: "end", text: "", at: filter.length });
  return tokens;
}

/** The offset just past the quote that closes the one at `start` (a doubled quote escapes). */
function closing(filter: string, start: number, quote: string): number {
  let i = start + 1;
  for (;;) {
    const next = filter.indexOf(quote, i);
    if (next < 0) throw invalid(filter, start, `an unterminated ${quote}`);
    if (filter[next + 1] !== quote) return next + 1;
    i = next + 2;
  }
}

const COMPARISONS = new Set(["=", "==", "!=", "<>", "<", "<=", ">", ">="]);

/** Recursive descent over Lance's filter grammar (DataFusion's SQL expressions), precedence low to high. */
class Parser {
  readonly #filter: string;
  readonly #tokens: readonly Token[];
  #next = 0;
  #depth = 0;
  #arithmetic = 0;
  #terms = 0;

  constructor(filter: string, tokens: readonly Token[]) {
    this.#filter = filter;
    this.#tokens = tokens;
  }

  filter(): void {
    this.#or();
    const rest = this.#peek();
    if (rest.kind !== "end") throw this.#error(rest, `unexpected "${rest.text}"`);
  }

  #peek(): Token {
    return this.#tokens[Math.min(this.#next, this.#tokens.length - 1)] as Token;
  }

  #take(): Token {
    const token = this.#peek();
    this.#next++;
    return token;
  }

  /** The next token is the keyword (case-insensitive) or operator `text`: take it. */
  #accept(text: string): boolean {
    const token = this.#peek();
    const matches =
      token.kind === "op"
        ? token.text === text
        : token.kind === "word" && token.text.toLowerCase() === text;
    if (matches) this.#next++;
    return matches;
  }

  #expect(text: string): void {
    if (!this.#accept(text)) {
      const token = this.#peek();
      throw this.#error(token, `expected "${text.toUpperCase()}" but found ${describe(token)}`);
    }
  }

  #error(token: Token, what: string): FilterSyntaxError {
    return invalid(this.#filter, token.at, what);
  }

  /** Counts a term of AND, OR or an IN list against {@link FILTER_LIMITS.maxTerms}. */
  #term(token: Token): void {
    if (++this.#terms > FILTER_LIMITS.maxTerms) {
      throw this.#error(token, `more than ${FILTER_LIMITS.maxTerms} AND, OR and IN terms`);
    }
  }

  #nested<T>(token: Token, parse: () => T): T {
    if (++this.#depth > FILTER_LIMITS.maxDepth) {
      throw this.#error(token, `nesting deeper than ${FILTER_LIMITS.maxDepth}`);
    }
    try {
      return parse();
    } finally {
      this.#depth--;
    }
  }

  #or(): void {
    this.#and();
    while (this.#accept("or")) {
      this.#term(this.#peek());
      this.#and();
    }
  }

  #and(): void {
    this.#not();
    while (this.#accept("and")) {
      this.#term(this.#peek());
      this.#not();
    }
  }

  #not(): void {
    const token = this.#peek();
    if (this.#accept("not")) this.#nested(token, () => this.#not());
    else this.#predicate();
  }

  #predicate(): void {
    this.#additive();
    const token = this.#peek();
    if (token.kind === "op" && COMPARISONS.has(token.text)) {
      this.#next++;
      this.#additive();
    } else if (this.#accept("is")) {
      this.#accept("not");
      const value = this.#take();
      const word = value.kind === "word" ? value.text.toLowerCase() : "";
      if (!["null", "true", "false", "unknown"].includes(word)) {
        throw this.#error(
          value,
          `expected NULL, TRUE, FALSE or UNKNOWN after IS, found ${describe(value)}`,
        );
      }
    } else {
      const negated = this.#accept("not");
      if (this.#accept("in")) this.#inList();
      else if (this.#accept("between")) {
        this.#additive();
        this.#expect("and");
        this.#additive();
      } else if (this.#accept("like") || this.#accept("ilike")) {
        this.#additive();
        if (this.#accept("escape")) this.#string();
      } else if (negated) {
        throw this.#error(
          this.#peek(),
          `expected IN, BETWEEN or LIKE after NOT, found ${describe(this.#peek())}`,
        );
      }
    }
  }

  #inList(): void {
    const open = this.#peek();
    this.#expect("(");
    this.#nested(open, () => {
      do {
        this.#term(this.#peek());
        this.#or();
      } while (this.#accept(","));
    });
    this.#expect(")");
  }

  #additive(): void {
    this.#arithmeticChain(["+", "-", "||"], () => this.#multiplicative());
  }

  #multiplicative(): void {
    this.#arithmeticChain(["*", "/", "%"], () => this.#unary());
  }

  /** `operand (operator operand)*`, each operator counted against {@link FILTER_LIMITS.maxArithmetic}. */
  #arithmeticChain(operators: readonly string[], operand: () => void): void {
    operand();
    for (;;) {
      const token = this.#peek();
      if (token.kind !== "op" || !operators.includes(token.text)) return;
      this.#next++;
      if (++this.#arithmetic > FILTER_LIMITS.maxArithmetic) {
        throw this.#error(token, `more than ${FILTER_LIMITS.maxArithmetic} arithmetic operators`);
      }
      operand();
    }
  }

  #unary(): void {
    const token = this.#peek();
    if (token.kind === "op" && (token.text === "-" || token.text === "+")) {
      this.#next++;
      this.#nested(token, () => this.#unary());
    } else {
      this.#postfix();
    }
  }

  #postfix(): void {
    this.#primary();
    for (;;) {
      const token = this.#peek();
      if (this.#accept("[")) {
        this.#nested(token, () => this.#or());
        this.#expect("]");
      } else if (this.#accept(".")) {
        this.#name();
      } else if (this.#accept("::")) {
        this.#type();
      } else {
        return;
      }
    }
  }

  #primary(): void {
    const token = this.#take();
    const word = token.kind === "word" ? token.text.toLowerCase() : "";
    if (token.kind === "number" || token.kind === "string" || token.kind === "quoted") return;
    if (token.kind === "op" && token.text === "(") {
      this.#nested(token, () => this.#or());
      this.#expect(")");
      return;
    }
    if (["null", "true", "false"].includes(word)) return;
    if (["date", "timestamp", "time", "interval"].includes(word)) {
      this.#string();
      return;
    }
    if (word === "cast" || word === "try_cast") {
      this.#expect("(");
      this.#nested(token, () => this.#or());
      this.#expect("as");
      this.#type();
      this.#expect(")");
      return;
    }
    if (token.kind === "word" && !KEYWORDS.has(word)) {
      if (this.#peek().kind === "op" && this.#peek().text === "(") this.#call(token);
      return;
    }
    throw this.#error(token, `unexpected ${describe(token)}`);
  }

  #call(name: Token): void {
    if (!FILTER_FUNCTIONS.has(name.text.toLowerCase())) {
      throw this.#error(
        name,
        `function "${name.text}" is not allowed in a filter (see docs/api.md)`,
      );
    }
    this.#expect("(");
    this.#nested(name, () => {
      if (this.#accept(")")) return;
      do this.#or();
      while (this.#accept(","));
      this.#expect(")");
    });
  }

  /** A type name, with its parameters: `VARCHAR`, `DECIMAL(10, 2)`, `TIMESTAMP`. */
  #type(): void {
    const token = this.#take();
    if (token.kind !== "word")
      throw this.#error(token, `expected a type, found ${describe(token)}`);
    if (this.#accept("(")) {
      do {
        const size = this.#take();
        if (size.kind !== "number")
          throw this.#error(size, `expected a number, found ${describe(size)}`);
      } while (this.#accept(","));
      this.#expect(")");
    }
  }

  #name(): void {
    const token = this.#take();
    if (token.kind !== "word" && token.kind !== "quoted") {
      throw this.#error(token, `expected a field name, found ${describe(token)}`);
    }
  }

  #string(): void {
    const token = this.#take();
    if (token.kind !== "string")
      throw this.#error(token, `expected a string, found ${describe(token)}`);
  }
}

function describe(token: Token): string {
  return token.kind === "end" ? "the end of the filter" : `"${token.text}"`;
}
