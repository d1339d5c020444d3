import { CaptureTag, CaseTag, Drop, Token, evalToken, toValue, toValueSync, type Context, type Emitter, type FilterImplOptions, type Liquid, type Operators, type Template } from 'liquidjs'

/*
 * The bounds of a render, independent of what LiquidJS charges on its own.
 *
 * LiquidJS checks its time limit (`renderLimit`) only between template nodes, and charges its
 * allocation limit (`memoryLimit`) in some tags and filters only (ranges, string-building
 * filters, escapes, date widths, `json`): a single filter, comparison or tag could still run
 * for a second (bench/liquid-limits.ts measures each case). Here every place a render can
 * spend time is either checked against the time budget or bounded by size:
 *
 * - between nodes: LiquidJS's own check, with a budget of milliseconds per part;
 * - every filter call (the filters are wrapped: each calls the original) and every
 *   comparison (the operators are wrapped the same way), before and after: no filter or
 *   comparison takes or returns a string longer than VALUE_LIMIT or an array longer than
 *   ARRAY_LIMIT, so none costs more than a fraction of a millisecond;
 * - `case` compares through the bounded `==`, one value at a time, and a capture is bounded
 *   like a filter's result;
 * - ranges, which a tag may build without a filter, are charged to LiquidJS's memoryLimit;
 * - a tag takes at most TAG_ARGUMENT_LIMIT values (a `when` list, `cycle` candidates), checked
 *   at load, so no tag loops over thousands of them between two checks.
 */

/** Time a part's preview or test render may take; past it the render stops. */
export const RENDER_BUDGET_MS = 5
/**
 * Time a part's render for dispatch may take (the process's CPU time: see CompiledPart); past
 * it the mail goes out in the built-in wording. Ten times the preview budget, so that a busy moment (another process on the core, a
 * garbage collection) never changes a tenant's mail: a template accepted at load renders within
 * half the preview budget. Dispatch renders are kept for the minute (lib/mail/liquid.ts), so
 * even a template that only slows down on a branch the load did not take holds the event loop
 * this long at most once a minute per part and language.
 */
export const DISPATCH_RENDER_BUDGET_MS = 50
/** Longest string a filter, comparison or capture may take or give, in characters. */
export const VALUE_LIMIT = 16 * 1024
/** Longest array a filter or comparison may take or give. */
export const ARRAY_LIMIT = 1000
/** LiquidJS's allocation units per render: a range `(1..n)` costs n, escapes and string filters their length. */
export const MEMORY_LIMIT = 50_000
/** Values one tag may take (a `case` tag's `when` values, `cycle` candidates…), checked at load. */
export const TAG_ARGUMENT_LIMIT = 64
/** Longest format of the `date` filter: each directive costs tens of microseconds (month and day names). */
export const DATE_FORMAT_LIMIT = 64

/** A render that would handle a value larger than the bounds allow. */
export class RenderBoundError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'RenderBoundError'
  }
}

const count = (value: number): string => value.toLocaleString('en')

/**
 * The size of a value: a string's characters, an array's or object's entries plus their own
 * sizes, 1 for anything else. Counting stops past `limit`; an array longer than ARRAY_LIMIT, at
 * any depth, is Infinity.
 */
function sizeOf (value: unknown, limit: number): number {
  let size = 0
  const pending: unknown[] = [value]
  while (pending.length > 0 && size <= limit) {
    const item = pending.pop()
    if (typeof item === 'string') {
      size += item.length
    } else if (Array.isArray(item)) {
      if (item.length > ARRAY_LIMIT) return Number.POSITIVE_INFINITY
      size += item.length
      pending.push(...item)
    } else if (item !== null && typeof item === 'object' && !(item instanceof Drop)) {
      const entries = Object.values(item)
      size += entries.length
      if (size <= limit) pending.push(...entries)
    } else {
      size += 1
    }
  }
  return size
}

function assertBounded (value: unknown, what: string): void {
  if (sizeOf(value, VALUE_LIMIT) <= VALUE_LIMIT) return
  if (typeof value === 'string') throw new RenderBoundError(`${what} is longer than ${count(VALUE_LIMIT)} characters`)
  if (Array.isArray(value) && value.length > ARRAY_LIMIT) throw new RenderBoundError(`${what} is an array of ${count(value.length)} elements; the limit is ${count(ARRAY_LIMIT)}`)
  throw new RenderBoundError(`${what} holds more than ${count(VALUE_LIMIT)} characters, or an array of more than ${count(ARRAY_LIMIT)} elements`)
}

/** Stops the render once its time budget is spent, as LiquidJS does between nodes. */
function checkTime (context: Context): void {
  context.renderLimit.check(performance.now())
}

type FilterHandler = Extract<FilterImplOptions, (...args: never[]) => unknown>
type FilterThis = ThisParameterType<FilterHandler>

/** Extra checks of one filter's arguments, before it runs. */
const ARGUMENT_RULES: Readonly<Record<string, (args: readonly unknown[]) => void>> = {
  date: ([, format]) => {
    if (typeof format === 'string' && format.length > DATE_FORMAT_LIMIT) throw new RenderBoundError(`the date filter's format is longer than ${DATE_FORMAT_LIMIT} characters`)
  }
}

export function boundedFilter (name: string, handler: FilterHandler): FilterHandler {
  const rule = ARGUMENT_RULES[name]
  return function * (this: FilterThis, ...args: unknown[]): Generator<unknown, unknown, unknown> {
    checkTime(this.context)
    for (const [index, arg] of args.entries()) assertBounded(arg, index === 0 ? `the ${name} filter's input` : `an argument of the ${name} filter`)
    rule?.(args)
    const result = yield handler.apply(this, args as [unknown, ...unknown[]])
    assertBounded(result, `the ${name} filter's result`)
    checkTime(this.context)
    return result
  }
}

/** Every filter of `engine` replaced by its bounded twin. */
export function boundFilters (engine: Liquid): void {
  for (const [name, filter] of Object.entries(engine.filters)) {
    if (typeof filter === 'function') engine.registerFilter(name, boundedFilter(name, filter))
    else engine.registerFilter(name, { ...filter, handler: boundedFilter(name, filter.handler) })
  }
}

/** Every operator (`==`, `contains`, `and`…), time-checked and with its operands bounded, calling LiquidJS's own. */
export function boundedOperators (operators: Operators): Operators {
  return Object.fromEntries(Object.entries(operators).map(([name, operator]) => [name, function * (...args: unknown[]): Generator<unknown, boolean, unknown> {
    const context = args.at(-1) as Context
    checkTime(context)
    for (const operand of args.slice(0, -1)) assertBounded(toValue(operand), `an operand of ${name}`)
    return (yield (operator as (...operands: unknown[]) => unknown)(...args)) as boolean
  }])) as unknown as Operators
}

/** `capture`, whose result is bounded like a filter's: a string doubled by capturing it twice stops at VALUE_LIMIT. */
export class BoundedCaptureTag extends CaptureTag {
  override * render (ctx: Context): Generator<unknown, void, string> {
    yield * super.render(ctx)
    // The scope capture writes to is a plain object (a Drop only when a caller passes one).
    assertBounded((ctx.bottom() as Record<string, unknown>)[this.variable], `the capture ${this.variable}`)
  }
}

/**
 * `case`, comparing with the bounded `==` and checking the time before each `when` value.
 * LiquidJS's own compares every value of every `when` in one step, with no check between.
 */
export class BoundedCaseTag extends CaseTag {
  override * render (ctx: Context, emitter: Emitter): Generator<unknown, void, unknown> {
    const equals = ctx.opts.operators['=='] as (lhs: unknown, rhs: unknown, context: Context) => unknown
    const target = yield toValue(yield this.value.value(ctx, ctx.opts.lenientIf))
    for (const branch of this.branches) {
      for (const token of branch.values) {
        const value = yield evalToken(token, ctx, ctx.opts.lenientIf)
        if ((yield equals(target, value, ctx)) === true) {
          yield this.liquid.renderer.renderTemplates(branch.templates, ctx, emitter)
          return
        }
      }
    }
    yield this.liquid.renderer.renderTemplates(this.elseTemplates, ctx, emitter)
  }
}

/** The first tag, through every nested one, that takes more than TAG_ARGUMENT_LIMIT values, as a rule broken; null if none. */
export function tagArgumentProblem (templates: readonly Template[]): string | null {
  for (const template of templates) {
    if (typeof template.arguments === 'function') {
      const values = [...template.arguments()].length
      if (values > TAG_ARGUMENT_LIMIT) {
        const [row, col] = template.token.getPosition()
        return `the tag ${JSON.stringify(template.token.getText().slice(0, 40))}… (line ${row ?? '?'}, column ${col ?? '?'}) takes ${values} values; a tag takes at most ${TAG_ARGUMENT_LIMIT}`
      }
    }
    if (typeof template.children === 'function') {
      const problem = tagArgumentProblem(toValueSync(template.children(false, true)))
      if (problem !== null) return problem
    }
  }
  return null
}

/*
 * Loading a part is bounded too. LiquidJS's Token#getPosition counts rows and columns from the
 * start of the source on every call, and static analysis calls it for every variable: a
 * 256 KiB part with 23,000 outputs took about 15 s to load, on the event loop, at start-up or
 * on SIGHUP. The same answer comes from a line index of the source, built once per source.
 */
/**
 * Most Liquid outputs and tags one part may hold. Parsing costs about 50 µs each: 23,000 of
 * them in a 256 KiB part took 1.4 s to load. A mail's template needs a few dozen.
 */
export const MARKUP_LIMIT = 1000

/** The outputs and tags a source opens, counted before it is parsed; at most `limit + 1`. */
export function markupCount (source: string, limit = MARKUP_LIMIT): number {
  let count = 0
  for (let at = source.indexOf('{'); at !== -1 && count <= limit; at = source.indexOf('{', at + 1)) {
    const next = source.charCodeAt(at + 1)
    if (next === 123 || next === 37) count++
  }
  return count
}

let indexedSource = ''
let lineStarts: number[] = [0]

function lineStartsOf (source: string): number[] {
  if (source !== indexedSource) {
    const starts = [0]
    for (let at = source.indexOf('\n'); at !== -1; at = source.indexOf('\n', at + 1)) starts.push(at + 1)
    indexedSource = source
    lineStarts = starts
  }
  return lineStarts
}

/** Row and column (both from 1) of `offset` in `source`, as LiquidJS counts them. */
export function positionIn (source: string, offset: number): [number, number] {
  const starts = lineStartsOf(source)
  let low = 0
  let high = starts.length - 1
  while (low < high) {
    const middle = (low + high + 1) >> 1
    if ((starts[middle] ?? 0) <= offset) low = middle
    else high = middle - 1
  }
  return [low + 1, offset - (starts[low] ?? 0) + 1]
}

Token.prototype.getPosition = function getPosition (this: Token): [number, number] {
  return positionIn(this.input, this.begin)
}
